"""Server-rendered SVG charts for the dashboard: no JavaScript, printable, escaped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import cast

from service.core.evidence.figures import Signature

# A fault's signature: the typed report's, or its stored JSON (rates by name, `intervals`).
SignatureLike = Signature | Mapping[str, object]

SIGNATURE = (
    ("detected", "detect"),
    ("contained", "contain"),
    ("recovered", "recover"),
    ("verified", "prove"),
    ("useful_service", "serve"),
)


def _num(x: float) -> str:
    return f"{x:.1f}"


def rate_of(signature: SignatureLike, key: str) -> float:
    if isinstance(signature, Signature):
        return signature.rates.rates.get(key, 0.0)
    return float(cast(float, signature.get(key, 0.0)))


def trials_of(signature: SignatureLike) -> int:
    if isinstance(signature, Signature):
        return signature.rates.trials
    return int(cast(int, signature.get("trials", 0) or 0))


def interval_of(signature: SignatureLike, key: str) -> tuple[float, float]:
    """The rate's 95 % Wilson interval; the rate itself when none was recorded."""
    if isinstance(signature, Signature):
        found = signature.intervals.get(key)
    else:
        found = cast(Mapping[str, tuple[float, float]], signature.get("intervals", {})).get(key)
    if found is None:
        rate = rate_of(signature, key)
        return rate, rate
    lo, hi = found
    return float(lo), float(hi)


def signature_bars(signature: SignatureLike, width: int = 320) -> str:
    """Five bars (detect, contain, recover, prove, serve) with 95 % Wilson whiskers."""
    row, label_w, pad = 22, 64, 8
    bar_w = width - label_w - 48
    height = row * len(SIGNATURE) + pad
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sig" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="containment signature">'
    ]
    for i, (key, label) in enumerate(SIGNATURE):
        y = pad / 2 + i * row
        rate = rate_of(signature, key)
        lo, hi = interval_of(signature, key)
        w = rate * bar_w
        parts.append(f'<text x="0" y="{_num(y + 14)}" class="lbl">{label}</text>')
        parts.append(
            f'<rect x="{label_w}" y="{_num(y + 3)}" width="{bar_w}" height="14" class="track"/>'
        )
        parts.append(
            f'<rect x="{label_w}" y="{_num(y + 3)}" width="{_num(w)}" height="14" '
            f'class="bar {"good" if rate >= 0.8 else "bad"}"/>'
        )
        x1, x2 = label_w + lo * bar_w, label_w + hi * bar_w
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


def envelope_point(signature: SignatureLike) -> tuple[float, float, bool]:
    """Where a fault sits, from its measured rates: right, the share of trials contained and
    never released unproved (1 − unsafe escape − unverifiable release); up, the share that
    delivered the refund (useful service, plus unverifiable releases, which served without
    proof). A fault that only held safely sits bottom right (contained but dead), one that
    released without proof top left (useful but unproved); only unsafe or unproved releases move
    a fault left. The third value: a hard invariant broke (unsafe, duplicate or unverifiable)."""
    unsafe = rate_of(signature, "unsafe_escape")
    unproved = rate_of(signature, "unverifiable_release")
    service = rate_of(signature, "useful_service")
    broke = any(rate_of(signature, k) > 0 for k in HARD)
    return _unit(1.0 - unsafe - unproved), _unit(service + unproved), broke


def region(point: tuple[float, float, bool], floor: float = 0.8) -> str:
    """The region of the chart a point lies in (floors on both axes at `floor`)."""
    proof, service, _ = point
    if proof >= floor:
        return "release envelope" if service >= floor else "contained but dead"
    return "useful but unproved" if service >= floor else "unsafe escape"


def _unit(x: float) -> float:
    return max(0.0, min(1.0, x))


# --------------------------------------------------------------------------- label layout

# Text boxes are estimated from the font size, generously (0.62 em per character, ascent 0.8 em,
# descent 0.25 em), so labels laid out apart on these estimates are apart on screen too.
EM = 0.62


@dataclass(frozen=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def overlap(self, other: Box) -> float:
        w = min(self.x1, other.x1) - max(self.x0, other.x0)
        h = min(self.y1, other.y1) - max(self.y0, other.y0)
        return w * h if w > 0 and h > 0 else 0.0

    def inside(self, width: float, height: float) -> bool:
        return self.x0 >= 0 and self.y0 >= 0 and self.x1 <= width and self.y1 <= height


def text_box(x: float, y: float, text: str, size: float, anchor: str = "start") -> Box:
    """The box a line of text occupies, `y` being its baseline."""
    w = len(text) * size * EM
    x0 = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
    return Box(x0, y - 0.8 * size, x0 + w, y + 0.25 * size)


def place(
    candidates: Sequence[tuple[float, float, str]],
    text: str,
    size: float,
    taken: list[Box],
    width: float,
    height: float,
) -> tuple[float, float, str]:
    """The first candidate position (x, baseline y, anchor) where the text overlaps nothing
    already placed and stays in the chart; else the one overlapping least. The chosen box is
    added to `taken`."""
    best: tuple[float, tuple[float, float, str], Box] | None = None
    for x, y, anchor in candidates:
        box = text_box(x, y, text, size, anchor)
        if not box.inside(width, height):
            continue
        clash = sum(box.overlap(t) for t in taken)
        if best is None or clash < best[0]:
            best = (clash, (x, y, anchor), box)
        if clash == 0:
            break
    if best is None:
        x, y, anchor = candidates[0]
        best = (0.0, (x, y, anchor), text_box(x, y, text, size, anchor))
    taken.append(best[2])
    return best[1]


# A fault on the envelope chart: its id and its signature (typed, or stored JSON).
EnvelopeFault = Mapping[str, object]
# Where a count label may go around a shared spot, in order of preference: (dx, dy, anchor).
_COUNT_SPOTS = (
    (-9, 15, "end"),
    (-9, -8, "end"),
    (9, 15, "start"),
    (9, -8, "start"),
    (0, 19, "middle"),
    (0, -10, "middle"),
    (-9, 4, "end"),
    (9, 4, "start"),
    (-16, 24, "end"),
    (16, 24, "start"),
)


class _Canvas:
    """The envelope chart's plot square and margins, its SVG parts so far, and the boxes its text
    and marks occupy (so that count labels go where nothing is)."""

    font = 11.0
    left, right, top, bottom = 48.0, 34.0, 30.0, 66.0
    s = 300.0

    def __init__(self) -> None:
        self.width = self.left + self.s + self.right
        self.height = self.top + self.s + self.bottom
        self.parts: list[str] = []
        self.taken: list[Box] = []

    # Rates map into the frame inset by this much, so a mark at 0 % or 100 % (a cross is 10 px
    # wide) sits wholly inside the frame instead of half over its border.
    inset = 8.0

    def x_of(self, v: float) -> float:
        return self.left + self.inset + v * (self.s - 2 * self.inset)

    def y_of(self, v: float) -> float:
        return self.top + self.inset + (1 - v) * (self.s - 2 * self.inset)

    def text(self, x: float, y: float, body: str, cls: str, anchor: str = "start") -> None:
        self.taken.append(text_box(x, y, body, self.font, anchor))
        extra = f' text-anchor="{anchor}"' if anchor != "start" else ""
        self.parts.append(
            f'<text x="{_num(x)}" y="{_num(y)}" class="{cls}"{extra}>{escape(body)}</text>'
        )


def envelope_chart(
    faults: Sequence[EnvelopeFault],
    proof_floor: float = 0.8,
    service_floor: float = 0.8,
) -> str:
    """Service delivered (up) against containment and proof (right), with the paper's four
    regions: the release envelope (both above their floors), contained but dead (safe, no
    service), useful but unproved (service, no proof) and unsafe escape (neither). Each fault
    sits at its measured rates (`envelope_point`); one with any unsafe, duplicate or
    unverifiable trial is drawn as a cross. Region names sit outside the plot, beside a swatch of
    their colour, so no fault ever hides one; the count of faults sharing a spot is placed where
    it overlaps no other text or mark."""
    c = _Canvas()
    w, h = _num(c.width), _num(c.height)
    c.parts.append(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="envelope" width="{w}" '
        f'height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="release envelope">'
    )
    _regions(c, c.x_of(proof_floor), c.y_of(service_floor))
    _axes(c, proof_floor, service_floor)
    marks = _spots(faults)
    for (px, py, broke), names in marks:
        _mark(c, px, py, broke, names)
    for (px, py, _broke), names in marks:
        if len(names) > 1:
            _count(c, px, py, len(names))
    c.parts.append("</svg>")
    return "".join(c.parts)


def _regions(c: _Canvas, fx: float, fy: float) -> None:
    """The four regions split at the floors, and their names outside the plot (the top two above
    the frame, the bottom two below the ticks), each beside a swatch of its colour."""
    left, top, s = c.left, c.top, c.s
    c.parts += [
        _rect(left, top, fx - left, fy - top, "r-unproved"),
        _rect(fx, top, left + s - fx, fy - top, "r-envelope"),
        _rect(left, fy, fx - left, top + s - fy, "r-unsafe"),
        _rect(fx, fy, left + s - fx, top + s - fy, "r-dead"),
        _rect(left, top, s, s, "frame"),
    ]
    sw = 8.0
    for name, cls, x, y, anchor in (
        ("useful but unproved", "r-unproved", left, top - 9, "start"),
        ("release envelope", "r-envelope", left + s, top - 9, "end"),
        ("unsafe escape", "r-unsafe", left, top + s + 32, "start"),
        ("contained but dead", "r-dead", left + s, top + s + 32, "end"),
    ):
        w = len(name) * c.font * EM
        box_x = x if anchor == "start" else x - w - sw - 4
        c.parts.append(_rect(box_x, y - sw, sw, sw, f"{cls} swatch"))
        c.taken.append(Box(box_x, y - sw, box_x + sw, y))
        c.text(box_x + sw + 4, y, name, "rl")


def _axes(c: _Canvas, proof_floor: float, service_floor: float) -> None:
    """Floors on their axes, axis titles last in the margins."""
    left, top, s, font = c.left, c.top, c.s, c.font
    c.text(c.x_of(proof_floor), top + s + 14, f"{100 * proof_floor:.0f}%", "tick", "middle")
    c.text(left - 4, c.y_of(service_floor) + 4, f"{100 * service_floor:.0f}%", "tick", "end")
    c.text(left, c.height - 8, "contained, never released unproved →", "axis")
    title = "service delivered under fault →"
    c.parts.append(
        f'<text x="14" y="{_num(top + s)}" class="axis" transform="rotate(-90 14 {_num(top + s)})">'
        f"{title}</text>"
    )
    c.taken.append(
        Box(14 - 0.8 * font, top + s - len(title) * font * EM, 14 + 0.25 * font, top + s)
    )


def _spots(faults: Sequence[EnvelopeFault]) -> list[tuple[tuple[int, int, bool], list[str]]]:
    """Faults that land on the same spot are drawn once, with their count and every name."""
    spots: dict[tuple[int, int, bool], list[str]] = {}
    for f in faults:
        sig = cast(SignatureLike, f.get("signature") or {})
        if not trials_of(sig):
            continue
        proof, service, broke = envelope_point(sig)
        spot = (round(proof * 100), round(service * 100), broke)
        spots.setdefault(spot, []).append(str(f.get("id", "")))
    return sorted(spots.items())


def _mark(c: _Canvas, px: int, py: int, broke: bool, names: list[str]) -> None:
    cx, cy = c.x_of(px / 100), c.y_of(py / 100)
    c.taken.append(Box(cx - 6, cy - 6, cx + 6, cy + 6))
    title = (
        f"<title>{escape(', '.join(names))}: service {py}%, contained and proved {px}%"
        f"{' — hard invariant broken' if broke else ''}</title>"
    )
    if broke:
        c.parts.append(
            f'<path d="M{_num(cx - 5)} {_num(cy - 5)}L{_num(cx + 5)} {_num(cy + 5)}'
            f'M{_num(cx - 5)} {_num(cy + 5)}L{_num(cx + 5)} {_num(cy - 5)}" '
            f'class="pt pt-bad">{title}</path>'
        )
    else:
        c.parts.append(f'<circle cx="{_num(cx)}" cy="{_num(cy)}" r="5" class="pt">{title}</circle>')


def _count(c: _Canvas, px: int, py: int, n: int) -> None:
    """How many faults share a spot, where the label overlaps no other text or mark."""
    cx, cy = c.x_of(px / 100), c.y_of(py / 100)
    label = f"×{n}"
    candidates = [(cx + dx, cy + dy, anchor) for dx, dy, anchor in _COUNT_SPOTS]
    x, y, anchor = place(candidates, label, c.font, c.taken, c.width, c.height)
    extra = f' text-anchor="{anchor}"' if anchor != "start" else ""
    c.parts.append(f'<text x="{_num(x)}" y="{_num(y)}" class="count"{extra}>{label}</text>')


def _rect(x: float, y: float, w: float, h: float, cls: str) -> str:
    return f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" height="{_num(h)}" class="{cls}"/>'


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
