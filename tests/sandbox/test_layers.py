"""The sandbox's layers as a worker measures and hands them out: uid leases never shared, the
operator's settings checked, and a sandbox that cannot have a required layer is never built."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.sandbox import Confinement
from service.sandbox.bwrap import Sandbox, SandboxUnavailable
from service.sandbox.layers import LAYERS, UidLease, posture
from service.settings import Settings

root_only = pytest.mark.skipif(os.getuid() != 0, reason="the per-sandbox layers need root")


def test_two_leases_of_one_range_never_share_a_uid_and_a_full_range_says_so() -> None:
    first = UidLease(900_000, 900_001)
    second = UidLease(900_000, 900_001)
    try:
        assert {first.uid, second.uid} == {900_000, 900_001}
        with pytest.raises(OSError, match="every sandbox uid of 900000-900001 is in use"):
            UidLease(900_000, 900_001)
    finally:
        first.release()
        second.release()
    # Released, a uid is free again.
    again = UidLease(900_000, 900_000)
    assert again.uid == 900_000
    again.release()


@pytest.mark.parametrize("value", ["5-2", "0-10", "200000", "a-b"])
def test_a_uid_range_that_is_not_first_to_last_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="sandbox_uid_range"):
        Settings(sandbox_uid_range=value)


def test_an_unknown_layer_in_the_minimum_posture_is_refused_naming_the_layers() -> None:
    with pytest.raises(ValidationError, match="unknown layer") as raised:
        Settings(sandbox_min_posture="seccomp,apparmor")
    assert "sandbox_min_posture" in str(raised.value) and "relay_tmpfs" in str(raised.value)


def test_the_minimum_posture_and_the_uid_range_read_as_the_sandbox_takes_them() -> None:
    settings = Settings(sandbox_min_posture=" seccomp , uid", sandbox_uid_range="300000-300009")
    assert settings.sandbox_required == frozenset({"seccomp", "uid"})
    assert settings.sandbox_uids == (300_000, 300_009)
    assert Settings(sandbox_uid_range="").sandbox_uids is None
    assert set(settings.sandbox_required) <= set(LAYERS)


@root_only
def test_this_root_worker_has_every_layer_and_without_a_range_lacks_only_the_uid() -> None:
    assert posture((200_000, 265_535)).missing(frozenset(LAYERS)) == []
    shared = posture(None)
    assert shared.missing(frozenset(LAYERS)) == ["uid"]
    assert "ASSAYGATE_SANDBOX_UID_RANGE" in dict(shared.why)["uid"]


@root_only
def test_a_sandbox_that_cannot_have_a_required_layer_is_not_built(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match=r"ASSAYGATE_SANDBOX_MIN_POSTURE.*no uid"):
        Sandbox(Confinement(code_dir=tmp_path, require=frozenset({"uid"})), ["/usr/bin/true"])
