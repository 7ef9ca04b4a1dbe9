"""Full-catalogue dossiers verified per second, against the floor measured on the same envelope.

The floor is what any verifier must do: decode the base64 payload, one Ed25519 verification over
the DSSE pre-authentication encoding, one `json.loads` of the payload. `verify()` adds the
payload-type, statement, subject-digest and digest checks; the ratio says what they cost
(target <= 1.5). Prints figures; never asserts.

    .venv/bin/python bench/dossier_verify.py [--seconds 2] [--trials 200]
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.core.faults.plan import parse_plan
from service.core.shards.assay import run_assay
from service.core.signing.dossier import (
    PAYLOAD_TYPE,
    CandidateRef,
    PublicKey,
    Signer,
    pae,
    predicate_from_report,
    seal,
    statement,
    trigger_hashes,
    verify,
)
from service.core.system.manifest import parse_manifest

ROOT = Path(__file__).resolve().parents[1]


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second over at least `seconds` (after a short warm-up)."""
    for _ in range(20):
        fn()
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(50):
            fn()
        n += 50
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--trials", type=int, default=200, help="trials per fault")
    parser.add_argument("--rounds", type=int, default=3, help="alternating measurements")
    args = parser.parse_args()

    manifest = parse_manifest(json.loads((ROOT / "examples" / "copperfin-typed.json").read_text()))
    report = run_assay(manifest, parse_plan({"trials": args.trials, "seed": 188})).to_dict()
    signer = Signer(Ed25519PrivateKey.generate())
    candidate = CandidateRef("bench", "copperfin-returns", "1.5.0", "bench", "bench")
    predicate = predicate_from_report(
        report,
        candidate,
        version=1,
        previous=None,
        issued_at=datetime.now(UTC).isoformat(timespec="seconds"),
        triggers={
            "components": ["policy", "retry", "tools"],
            "hashes": trigger_hashes(report["component_hashes"], ["policy", "retry", "tools"]),
        },
    )
    _payload, envelope = seal(
        statement(candidate.subject_name(), report["manifest_digest"], predicate), signer
    )
    envelope = json.loads(json.dumps(envelope))  # as read from a file
    keys = {signer.keyid: PublicKey(signer.keyid, signer.public)}
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(signer.public))

    def floor() -> object:
        payload = base64.b64decode(envelope["payload"])
        sig = base64.b64decode(envelope["signatures"][0]["sig"])
        public.verify(sig, pae(PAYLOAD_TYPE, payload))
        return json.loads(payload)

    def full() -> object:
        result = verify(envelope, keys)
        if not result.ok:
            raise SystemExit(f"the bench dossier does not verify: {result.failed()}")
        return result

    floors, fulls = [], []
    for _ in range(args.rounds):  # alternate, so drift in the machine hits both alike
        floors.append(rate(floor, args.seconds))
        fulls.append(rate(full, args.seconds))
    best_floor, best_full = max(floors), max(fulls)
    size = len(base64.b64decode(envelope["payload"]))
    print(
        f"dossier: full catalogue, {len(report['faults'])} faults x {args.trials} trials, "
        f"payload {size / 1024:.1f} KiB"
    )
    print(f"floor (b64decode + Ed25519 over PAE + json.loads): {best_floor:8.1f} /s")
    print(f"assaygate verify():                                {best_full:8.1f} /s")
    print(f"ratio (floor rate / verify rate): {best_floor / best_full:.3f}  (target <= 1.5)")


if __name__ == "__main__":
    main()
