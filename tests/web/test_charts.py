"""The SVG charts: shapes that mean what they say, and nothing a fault id can inject."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from service.web.charts import coverage_matrix, envelope_chart, envelope_point, signature_bars

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
    assert envelope_point(signature()) == (1.0, 1.0, False)  # release envelope
    assert envelope_point(signature(useful_service=0.0)) == (1.0, 0.0, False)  # contained but dead
    assert envelope_point(signature(verified=0.2))[:2] == (0.2, 1.0)  # useful but unproved
    assert envelope_point(signature(unsafe_escape=0.3, contained=0.1))[2] is True


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
