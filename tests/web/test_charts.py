"""The SVG charts: shapes that mean what they say, and nothing a fault id can inject."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from service.web.charts import (
    EM,
    Box,
    coverage_matrix,
    envelope_chart,
    envelope_point,
    region,
    signature_bars,
    text_box,
)

SVG = "{http://www.w3.org/2000/svg}"


def signature(**rates: float) -> dict[str, object]:
    base: dict[str, object] = {
        "trials": 100,
        "detected": 1.0,
        "contained": 1.0,
        "recovered": 1.0,
        "verified": 1.0,
        "useful_service": 1.0,
        "unsafe_escape": 0.0,
        "duplicate_effect": 0.0,
        "unverifiable_release": 0.0,
    }
    base.update(rates)
    return base


def test_signature_bars_draw_five_bars_with_whiskers_at_the_interval_ends() -> None:
    sig = signature(recovered=0.5, intervals={"recovered": [0.4, 0.6]})
    root = ET.fromstring(signature_bars(sig, width=320))
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "lbl"]
    assert labels == ["detect", "contain", "recover", "prove", "serve"]
    bars = [r for r in root.iter(f"{SVG}rect") if "bar" in (r.get("class") or "")]
    bar_w = 320 - 64 - 48
    assert [float(b.get("width", "0")) for b in bars] == [
        float(f"{w:.1f}") for w in (bar_w, bar_w, bar_w * 0.5, bar_w, bar_w)
    ]
    assert "bad" in (bars[2].get("class") or "") and "good" in (bars[0].get("class") or "")
    whiskers = [p.get("d", "") for p in root.iter(f"{SVG}path")]
    x1, x2 = 64 + 0.4 * bar_w, 64 + 0.6 * bar_w
    assert f"M{x1:.1f} " in whiskers[2] and f"H{x2:.1f}" in whiskers[2]


def test_envelope_places_each_fault_in_the_region_the_paper_names() -> None:
    assert region(envelope_point(signature())) == "release envelope"
    held = signature(verified=0.0, recovered=0.0, useful_service=0.0)
    assert region(envelope_point(held)) == "contained but dead"
    unproved = signature(verified=0.0, useful_service=0.0, unverifiable_release=1.0)
    assert region(envelope_point(unproved)) == "useful but unproved"
    unsafe = signature(contained=0.0, verified=0.0, useful_service=0.0, unsafe_escape=1.0)
    assert region(envelope_point(unsafe)) == "unsafe escape"
    assert envelope_point(unsafe)[2] is True and envelope_point(held)[2] is False


def test_a_fault_with_no_unsafe_escape_that_only_held_is_never_drawn_as_an_unsafe_escape() -> None:
    # The typed system's broken trace lineage: contained, held, nothing proved, nothing served.
    lineage = signature(verified=0.0, recovered=0.0, useful_service=0.0)
    assert envelope_point(lineage) == (1.0, 0.0, False)
    for service in (0.0, 0.3, 0.79, 0.8, 1.0):
        for verified in (0.0, 0.5, 1.0):
            point = envelope_point(signature(verified=verified, useful_service=service))
            assert region(point) in ("contained but dead", "release envelope")


def test_a_fault_is_placed_by_its_measured_rates() -> None:
    sig = signature(unsafe_escape=0.1, unverifiable_release=0.25, useful_service=0.5)
    proof, service, broke = envelope_point(sig)
    assert (round(proof, 2), round(service, 2), broke) == (0.65, 0.75, True)


CORNERS = {
    "envelope": signature(),
    "dead": signature(verified=0.0, useful_service=0.0),
    "unproved": signature(verified=0.0, useful_service=0.0, unverifiable_release=1.0),
    "unsafe": signature(contained=0.0, useful_service=0.0, unsafe_escape=1.0),
}


def boxes_of(svg: str) -> tuple[list[tuple[str, Box]], list[Box]]:
    """The estimated box of every text (rotated axis title included) and of every mark."""
    root = ET.fromstring(svg)
    texts: list[tuple[str, Box]] = []
    for t in root.iter(f"{SVG}text"):
        x, y, body = float(t.get("x", "0")), float(t.get("y", "0")), t.text or ""
        if t.get("transform"):
            w = len(body) * 11 * EM
            texts.append((body, Box(x - 0.8 * 11, y - w, x + 0.25 * 11, y)))
        else:
            texts.append((body, text_box(x, y, body, 11, t.get("text-anchor", "start"))))
    marks = [
        Box(
            float(c.get("cx", 0)) - 6,
            float(c.get("cy", 0)) - 6,
            float(c.get("cx", 0)) + 6,
            float(c.get("cy", 0)) + 6,
        )
        for c in root.iter(f"{SVG}circle")
    ]
    for p in root.iter(f"{SVG}path"):
        if "pt-bad" in (p.get("class") or ""):
            x, y = (float(v) for v in re.findall(r"[-\d.]+", p.get("d", ""))[:2])
            marks.append(Box(x - 1, y - 1, x + 11, y + 11))
    return texts, marks


@pytest.mark.parametrize("crowd", [1, 2, 9, 18])
def test_no_label_of_the_envelope_chart_overlaps_another_or_a_fault(crowd: int) -> None:
    faults = [
        {"id": f"{name}-{i}", "signature": sig}
        for name, sig in CORNERS.items()
        for i in range(crowd)
    ]
    svg = envelope_chart(faults)
    texts, marks = boxes_of(svg)
    assert {t for t, _ in texts} >= {"release envelope", "unsafe escape"}
    for i, (a, box) in enumerate(texts):
        for b, other in texts[i + 1 :]:
            assert box.overlap(other) == 0, (a, b)
        for mark in marks:
            assert box.overlap(mark) == 0, (a, mark)
    if crowd > 1:
        assert svg.count(f"×{crowd}") == 4


def test_envelope_chart_has_the_four_regions_and_crosses_for_broken_invariants() -> None:
    svg = envelope_chart(
        [
            {"id": "ok", "signature": signature()},
            {"id": "dup", "signature": signature(duplicate_effect=0.1)},
            {"id": "never-run", "signature": {"trials": 0}},
        ]
    )
    root = ET.fromstring(svg)
    regions = {t.text for t in root.iter(f"{SVG}text") if t.get("class") == "rl"}
    assert regions == {
        "release envelope",
        "contained but dead",
        "useful but unproved",
        "unsafe escape",
    }
    assert len(list(root.iter(f"{SVG}circle"))) == 1
    crosses = [p for p in root.iter(f"{SVG}path") if "pt-bad" in (p.get("class") or "")]
    assert len(crosses) == 1
    assert "never-run" not in svg


def test_envelope_chart_counts_faults_that_land_on_the_same_spot() -> None:
    svg = envelope_chart([{"id": f"f{i}", "signature": signature()} for i in range(3)])
    assert "×3" in svg and "f0, f1, f2" in svg


def test_charts_escape_what_they_are_given() -> None:
    evil = '<script>alert("x")</script>'
    svg = envelope_chart([{"id": evil, "signature": signature()}])
    table = coverage_matrix([f"{evil}/b/{evil}/isolated/o"], [])
    for html in (svg, table):
        assert "<script>" not in html
        assert "&lt;script&gt;" in html
    ET.fromstring(svg)


def test_coverage_matrix_marks_visited_and_missed_cells_by_domain_and_phase() -> None:
    html = coverage_matrix(
        ["tool/payments.refund/before_commit/isolated/o", "state/x/before_send/isolated/o"],
        ["tool/payments.refund/before_send/isolated/o"],
    )
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    assert len(rows) == 3  # the header and two domains
    assert 'class="cov-visited"' in html and 'class="cov-missed"' in html
    assert "before commit" in html
    assert coverage_matrix([], []).startswith("<p")


def test_marks_at_the_corners_sit_wholly_inside_the_frame_not_over_its_border() -> None:
    faults = [{"id": name, "signature": sig} for name, sig in CORNERS.items()]
    root = ET.fromstring(envelope_chart(faults))
    frame = next(r for r in root.iter(f"{SVG}rect") if r.get("class") == "frame")
    x0, y0 = float(frame.get("x", 0)), float(frame.get("y", 0))
    x1, y1 = x0 + float(frame.get("width", 0)), y0 + float(frame.get("height", 0))
    _, marks = boxes_of(envelope_chart(faults))
    assert len(marks) == len(CORNERS)
    for m in marks:
        assert x0 < m.x0 and m.x1 < x1 and y0 < m.y0 and m.y1 < y1, m
