"""The README's sentence about an example says what the gate says about it: refuse-all's first
reason, as every reader (the CLI, the API, the pages) shows it first."""

from __future__ import annotations

import re

from service.core.faults.plan import parse_plan
from service.core.shards.assay import run_assay
from service.core.system.manifest import parse_manifest_json
from tests.support.service import EXAMPLES, ROOT


def test_the_readmes_refuse_all_sentence_names_its_real_decision_and_first_reason() -> None:
    manifest = parse_manifest_json((EXAMPLES / "copperfin-refuse-all.json").read_text())
    # The plan the README's figures are for: the full catalogue, seed 188, 200 trials a fault.
    plan = parse_plan({"catalogue": "full", "trials": 200, "seed": 188})
    report = run_assay(manifest, plan).to_dict()
    readme = " ".join((ROOT / "README.md").read_text().split())
    sentence = re.search(r"`copperfin-refuse-all\.json` is [^.]*\.", readme)
    assert sentence is not None
    assert report["decision"] == "hold" and "held" in sentence.group(0)
    assert f"its first reason `{report['reasons'][0]['code']}`" in sentence.group(0)
