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


HARD = ("unsafe_escape", "duplicate_effect", "unverifiable_release")


def envelope_point(signature: Mapping[str, Any]) -> tuple[float, float, bool]:
    """(containment and proof, useful service, a hard invariant broke) of one fault."""
    proof = min(float(signature.get("contained", 0.0)), float(signature.get("verified", 0.0)))
    service = float(signature.get("useful_service", 0.0))
    broke = any(float(signature.get(k, 0.0)) > 0 for k in HARD)
    return max(0.0, min(1.0, proof)), max(0.0, min(1.0, service)), broke


def envelope_chart(
    faults: Sequence[Mapping[str, Any]],
    size: int = 360,
    proof_floor: float = 0.8,
    service_floor: float = 0.8,
) -> str:
    """Useful service (up) against containment and proof (right), with the paper's four
    regions: the release envelope (both above their floors), contained but dead (proved, no
    service), useful but unproved (service, no proof) and unsafe escape (neither). A fault with
    any unsafe, duplicate or unverifiable trial is drawn as a cross, wherever it lands."""
    m = 40
    s = size - 2 * m
    fx, fy = m + proof_floor * s, m + (1 - service_floor) * s
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="envelope" width="{size}" '
        f'height="{size}" viewBox="0 0 {size} {size}" role="img" aria-label="release envelope">',
        f'<rect x="{m}" y="{m}" width="{_num(fx - m)}" height="{_num(fy - m)}" '
        'class="r-unproved"/>',
        f'<rect x="{_num(fx)}" y="{m}" width="{_num(m + s - fx)}" height="{_num(fy - m)}" '
        'class="r-envelope"/>',
        f'<rect x="{m}" y="{_num(fy)}" width="{_num(fx - m)}" height="{_num(m + s - fy)}" '
        'class="r-unsafe"/>',
        f'<rect x="{_num(fx)}" y="{_num(fy)}" width="{_num(m + s - fx)}" '
        f'height="{_num(m + s - fy)}" class="r-dead"/>',
        f'<rect x="{m}" y="{m}" width="{s}" height="{s}" class="frame"/>',
        f'<text x="{m + 4}" y="{m + 14}" class="rl">useful but unproved</text>',
        f'<text x="{m + s - 4}" y="{m + 14}" class="rl" text-anchor="end">release envelope</text>',
        f'<text x="{m + 4}" y="{_num(m + s - 6)}" class="rl">unsafe escape</text>',
        f'<text x="{m + s - 4}" y="{_num(m + s - 6)}" class="rl" text-anchor="end">'
        "contained but dead</text>",
        f'<text x="{m}" y="{size - 8}" class="axis">containment and outcome proof →</text>',
        f'<text x="12" y="{m + s}" class="axis" transform="rotate(-90 12 {m + s})">'
        "useful service under fault →</text>",
        f'<text x="{_num(fx)}" y="{m + s + 14}" class="tick" text-anchor="middle">'
        f"{100 * proof_floor:.0f}%</text>",
        f'<text x="{m - 4}" y="{_num(fy + 4)}" class="tick" text-anchor="end">'
        f"{100 * service_floor:.0f}%</text>",
    ]
    # Faults that land on the same spot are drawn once, with their count and every name.
    spots: dict[tuple[int, int, bool], list[str]] = {}
    for f in faults:
        sig = f.get("signature") or {}
        if not int(sig.get("trials", 0) or 0):
            continue
        proof, service, broke = envelope_point(sig)
        spot = (round(proof * 100), round(service * 100), broke)
        spots.setdefault(spot, []).append(str(f.get("id", "")))
    for (px, py, broke), names in sorted(spots.items()):
        cx, cy = m + px / 100 * s, m + (1 - py / 100) * s
        title = (
            f"<title>{escape(', '.join(names))}: service {py}%, proof {px}%"
            f"{' — hard invariant broken' if broke else ''}</title>"
        )
        if broke:
            parts.append(
                f'<path d="M{_num(cx - 5)} {_num(cy - 5)}L{_num(cx + 5)} {_num(cy + 5)}'
                f'M{_num(cx - 5)} {_num(cy + 5)}L{_num(cx + 5)} {_num(cy - 5)}" '
                f'class="pt pt-bad">{title}</path>'
            )
        else:
            parts.append(
                f'<circle cx="{_num(cx)}" cy="{_num(cy)}" r="5" class="pt">{title}</circle>'
            )
        if len(names) > 1:
            anchor = "end" if cx > m + s / 2 else "start"
            dx = -8 if anchor == "end" else 8
            dy = 14 if cy < m + s / 2 else -8
            parts.append(
                f'<text x="{_num(cx + dx)}" y="{_num(cy + dy)}" class="count" '
                f'text-anchor="{anchor}">×{len(names)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def coverage_matrix(visited: Sequence[str], not_visited: Sequence[str]) -> str:
    """Domain by phase: which coverage keys the assay visited, and which it left empty."""
    cells: dict[tuple[str, str], str] = {}
    keys: dict[tuple[str, str], list[str]] = {}
    for key, state in [(k, "visited") for k in visited] + [(k, "missed") for k in not_visited]:
        parts = key.split("/")
        if len(parts) < 3:
            continue
        domain, phase = parts[0], parts[2]
        keys.setdefault((domain, phase), []).append(f"{key} ({state})")
        if cells.get((domain, phase)) != "visited":
            cells[(domain, phase)] = state
    domains = sorted({d for d, _ in cells})
    phases = sorted({p for _, p in cells})
    if not cells:
        return '<p class="coverage-empty">No coverage keys recorded.</p>'
    head = "".join(f'<th scope="col">{escape(p.replace("_", " "))}</th>' for p in phases)
    rows = []
    for d in domains:
        tds = "".join(
            f'<td class="cov-{cells.get((d, p), "none")}" '
            f'title="{escape(chr(10).join(keys.get((d, p), [])))}">'
            f"{'●' if cells.get((d, p)) == 'visited' else ('○' if (d, p) in cells else '')}</td>"
            for p in phases
        )
        rows.append(f'<tr><th scope="row">{escape(d)}</th>{tds}</tr>')
    return f'<table class="coverage"><tr><th></th>{head}</tr>{"".join(rows)}</table>'
