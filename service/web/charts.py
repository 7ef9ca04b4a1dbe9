"""Server-rendered SVG charts for the dashboard: no JavaScript, printable, escaped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

SIGNATURE = (
    ("detected", "detect"),
    ("contained", "contain"),
    ("recovered", "recover"),
    ("verified", "prove"),
    ("useful_service", "serve"),
)


def _num(x: float) -> str:
    return f"{x:.1f}"


def signature_bars(signature: Mapping[str, Any], width: int = 320) -> str:
    """Five bars (detect, contain, recover, prove, serve) with 95 % Wilson whiskers."""
    row, label_w, pad = 22, 64, 8
    bar_w = width - label_w - 48
    height = row * len(SIGNATURE) + pad
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sig" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="containment signature">'
    ]
    intervals = signature.get("intervals", {})
    for i, (key, label) in enumerate(SIGNATURE):
        y = pad / 2 + i * row
        rate = float(signature.get(key, 0.0))
        lo, hi = intervals.get(key, (rate, rate))
        w = rate * bar_w
        parts.append(f'<text x="0" y="{_num(y + 14)}" class="lbl">{label}</text>')
        parts.append(
            f'<rect x="{label_w}" y="{_num(y + 3)}" width="{bar_w}" height="14" class="track"/>'
        )
        parts.append(
            f'<rect x="{label_w}" y="{_num(y + 3)}" width="{_num(w)}" height="14" '
            f'class="bar {"good" if rate >= 0.8 else "bad"}"/>'
        )
        x1, x2 = label_w + float(lo) * bar_w, label_w + float(hi) * bar_w
        parts.append(
            f'<path d="M{_num(x1)} {_num(y + 10)}H{_num(x2)}'
            f"M{_num(x1)} {_num(y + 6)}V{_num(y + 14)}"
            f'M{_num(x2)} {_num(y + 6)}V{_num(y + 14)}" class="whisker"/>'
        )
        parts.append(
            f'<text x="{label_w + bar_w + 6}" y="{_num(y + 14)}" class="val">'
            f"{100 * rate:.0f}%</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def envelope_chart(faults: Sequence[Mapping[str, Any]], size: int = 360) -> str:
    """Useful service against containment and proof, with the paper's four regions."""
    m = 40
    s = size - 2 * m
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="envelope" width="{size}" '
        f'height="{size}" viewBox="0 0 {size} {size}" role="img" aria-label="release envelope">',
        # Unsafe escape: any hard-invariant violation, drawn as the left strip.
        f'<rect x="{m}" y="{m}" width="{_num(s * 0.2)}" height="{s}" class="r-unsafe"/>',
        f'<rect x="{_num(m + s * 0.2)}" y="{m}" width="{_num(s * 0.8)}" height="{_num(s * 0.2)}" '
        f'class="r-envelope"/>',
        f'<rect x="{_num(m + s * 0.2)}" y="{_num(m + s * 0.2)}" width="{_num(s * 0.8)}" '
        f'height="{_num(s * 0.8)}" class="r-dead"/>',
        f'<text x="{m + 4}" y="{m + 14}" class="rl">unsafe escape</text>',
        f'<text x="{_num(m + s * 0.2 + 4)}" y="{m + 14}" class="rl">release envelope</text>',
        f'<text x="{_num(m + s * 0.2 + 4)}" y="{_num(m + s - 6)}" class="rl">contained but dead'
        "</text>",
        f'<text x="{m + 4}" y="{_num(m + s - 6)}" class="rl">useful but unproved</text>',
        f'<text x="{m}" y="{size - 8}" class="axis">containment and outcome proof →</text>',
        f'<text x="12" y="{m + s}" class="axis" transform="rotate(-90 12 {m + s})">'
        "useful service under fault →</text>",
    ]
    for f in faults:
        sig = f.get("signature", {})
        n = int(sig.get("trials", 0))
        if not n:
            continue
        unsafe = float(sig.get("unsafe_escape", 0.0)) + float(sig.get("unverifiable_release", 0.0))
        proof = min(float(sig.get("contained", 0.0)), float(sig.get("verified", 0.0)))
        x = 0.2 * (1 - min(1.0, unsafe)) if unsafe > 0 else 0.2 + 0.8 * proof
        y = float(sig.get("useful_service", 0.0))
        cx, cy = m + x * s, m + (1 - y) * s
        name = escape(str(f.get("id", "")))
        parts.append(
            f'<circle cx="{_num(cx)}" cy="{_num(cy)}" r="5" class="pt"><title>{name}: '
            f"service {100 * y:.0f}%, proof {100 * proof:.0f}%</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def coverage_matrix(visited: Sequence[str], not_visited: Sequence[str]) -> str:
    """Domain by phase: which coverage keys the assay visited, and which it left empty."""
    cells: dict[tuple[str, str], str] = {}
    for key, state in [(k, "visited") for k in visited] + [(k, "missed") for k in not_visited]:
        domain, _boundary, phase = key.split("/")[:3]
        if cells.get((domain, phase)) != "visited":
            cells[(domain, phase)] = state
    domains = sorted({d for d, _ in cells})
    phases = sorted({p for _, p in cells})
    head = "".join(f"<th>{escape(p.replace('_', ' '))}</th>" for p in phases)
    rows = []
    for d in domains:
        tds = "".join(
            f'<td class="cov-{cells.get((d, p), "none")}">'
            f"{'●' if cells.get((d, p)) == 'visited' else ('○' if (d, p) in cells else '')}</td>"
            for p in phases
        )
        rows.append(f"<tr><th>{escape(d)}</th>{tds}</tr>")
    return f'<table class="coverage"><tr><th></th>{head}</tr>{"".join(rows)}</table>'
