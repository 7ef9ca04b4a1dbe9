"""Submitting to the real API and reading what it decided: shared by the API test files (which
used to import them from one another's test modules, or define them again)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Any

import httpx

from service.packing import Packed, pack
from tests.support.service import ROOT, wait_decided

SUBJECT_SWAP: dict[str, Any] = {"trials": 5, "seed": 4, "modes": ["subject_swap"]}


def system_name(prefix: str = "sys") -> str:
    """A system no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def submit(
    client: httpx.Client,
    manifest: dict[str, Any],
    *,
    system: str,
    version: str,
    plan: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """Submit a candidate (202 or the test fails), naming the artifact `code` when given; its
    JSON."""
    body = {
        "system": system,
        "version": version,
        "source_revision": "abc123",
        "manifest": manifest,
        "plan": plan or SUBJECT_SWAP,
    }
    if code is not None:
        body["code"] = code
    response = client.post("/v1/candidates", json=body, headers=headers)
    assert response.status_code == 202, response.text
    result: dict[str, Any] = response.json()
    return result


def decided(
    client: httpx.Client,
    manifest: dict[str, Any],
    *,
    timeout: float = 120.0,
    statuses: Collection[str] = ("done", "stopped"),
    **kw: Any,
) -> dict[str, Any]:
    """Submit and wait for the decision; the assay must end in one of `statuses`."""
    candidate = submit(client, manifest, **kw)
    done = wait_decided(client, candidate["id"], timeout=timeout)
    assert done["status"] in statuses, done
    return done


def dossier(client: httpx.Client, candidate_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/candidates/{candidate_id}/dossier")
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def predicate(doc: dict[str, Any]) -> dict[str, Any]:
    stmt: dict[str, Any] = json.loads(base64.b64decode(doc["envelope"]["payload"]))
    result: dict[str, Any] = stmt["predicate"]
    return result


def upload(client: httpx.Client, folder: Path) -> tuple[str, Packed]:
    """Pack `folder` and upload it as the tenant's artifact (stored or the test fails): its
    digest as the API names it, and the packed bytes."""
    packed = pack(folder)
    response = client.post(
        "/v1/artifacts", content=packed.data, headers={"Content-Type": "application/gzip"}
    )
    assert response.status_code in (200, 201), response.text
    digest: str = response.json()["digest"]
    return digest, packed


def cli(api_url: str, secret: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`assaygate ARGS` as a pipeline runs it: the service's address and a key, nothing else."""
    env = {"PATH": "/usr/bin:/bin", "ASSAYGATE_URL": api_url, "ASSAYGATE_API_KEY": secret}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
