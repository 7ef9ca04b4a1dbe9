"""The engine CLI: JSON shape, exit codes like `gate`, bad input as one line, replay, catalogue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.cli import main
from tests.core.conftest import EXAMPLES

TYPED = str(EXAMPLES / "copperfin-typed.json")


def test_assay_json_has_decision_reasons_and_reference_rate_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `assay` exits like `gate`: 0 allow, 1 block, 2 hold, 3 error.
    assert main(["assay", TYPED, "--catalogue", "paper", "--trials", "200", "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["decision"] == "hold"
    assert set(out) >= {"decision", "reasons", "by_domain", "overall"}
    for name in (
        "detected",
        "contained",
        "recovered",
        "verified",
        "useful_service",
        "unsafe_escape",
        "duplicate_effect",
        "unverifiable_release",
    ):
        assert name in out["overall"] and name in out["overall"]["intervals"]
    assert out["by_domain"]["tool"]["transfer"] is not None
    assert out["by_domain"]["tool"]["baseline"]["unsafe_escape"] == 0.0


def test_share_baseline_runs_each_tools_baseline_once_and_names_it_per_fault(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["assay", TYPED, "--trials", "4", "--fault", "tool", "--json"]
    main([*argv, "--share-baseline"])
    shared = json.loads(capsys.readouterr().out)
    main(argv)
    alone = json.loads(capsys.readouterr().out)
    tools = {f["baseline_run"]["shared_by"] for f in shared["faults"]}
    assert all("baseline_run" not in f for f in alone["faults"])
    assert len(tools) < len(shared["faults"])  # several faults on one tool
    assert shared["spend"]["arms"]["baseline"]["runs"] == 4 * len(tools)
    assert alone["spend"]["arms"]["baseline"]["runs"] == 4 * len(alone["faults"])


def test_the_table_names_the_decision(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["assay", TYPED, "--trials", "16", "--fault", "tool"]) == 0
    out = capsys.readouterr().out
    assert "Decision:" in out and "\ntool " in out and "\nidentity " not in out
    assert "assaying" not in out  # no terminal, no progress bar


@pytest.mark.parametrize(
    ("content", "args", "needle"),
    [
        ("{not json", [], "malformed JSON"),
        ('{"surprise": 1}', [], "surprise"),
        (None, ["--fault", "weather"], "unknown fault family 'weather'"),
        (None, ["--trials", "0"], "--trials"),
        (None, ["--mode", "gremlins"], "unknown fault mode 'gremlins'"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_three_like_gate(
    tmp_path: Path, content: str | None, args: list[str], needle: str
) -> None:
    path = TYPED
    if content is not None:
        path = str(tmp_path / "m.json")
        Path(path).write_text(content)
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", "assay", path, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 3
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]
    assert "Traceback" not in proc.stderr


def test_an_unknown_control_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(Path(TYPED).read_text())
    data["controls"]["telepathy"] = True
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    assert main(["assay", str(path)]) == 3
    assert "controls.telepathy: unknown control" in capsys.readouterr().err


def test_catalogue_json_lists_every_fault_with_its_coverage_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["catalogue", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["faults"]) >= 16
    assert all(f["coverage_key"].count("/") == 4 for f in out["faults"])


def test_replay_prints_the_trace_of_one_trial(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", TYPED, "--seed", "188", "--trial", "7", "--trials", "10"]) == 0
    out = capsys.readouterr().out
    assert "Injection receipts:" in out and "World read by the oracle:" in out and "Grade:" in out


def test_replay_of_a_trial_outside_the_run_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", TYPED, "--trial", "99999", "--trials", "10"]) == 2
    assert "trial must be in" in capsys.readouterr().err


def test_verify_says_exactly_which_check_failed(tmp_path: Path) -> None:
    from tests.core.conftest import ASSETS

    golden = json.loads((ASSETS / "golden_dossier.json").read_text())
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": golden["keys"]}))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(golden["envelope"]))
    ok = subprocess.run(
        [sys.executable, "-m", "service.cli", "verify", str(good), "--keys", str(keys)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0 and ok.stdout.strip().endswith("verified")
    tampered = dict(golden["envelope"], payloadType="application/json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(tampered))
    no = subprocess.run(
        [sys.executable, "-m", "service.cli", "verify", str(bad), "--keys", str(keys)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert no.returncode == 1
    assert "NOT VERIFIED: payload_type failed" in no.stdout


def test_plan_computes_the_trials_a_violation_bound_needs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--max-violation-rate", "0.005", "--faults", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # The exact bound: the least n with 0.995^n <= 0.025.
    assert out["trials_per_fault"] == 736 and out["total_trials"] == 1472


def test_plan_estimates_the_agent_runs_of_the_fixed_and_the_sequential_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--trials", "200", "--pairs", "2", "--faults", "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fixed_runs"] == 10 * 200 * 3
    # The careful agent's own trials run to the cap and its matched baseline as many (graded like
    # them); its other pair arm settles after ~25 runs.
    assert out["sequential_trials_per_fault"] == 200
    assert out["sequential_baseline_runs_per_fault"] == 200
    assert 0 < out["sequential_pair_runs_per_fault"] <= 30
    careful = 10 * (200 + 200 + out["sequential_pair_runs_per_fault"])
    assert out["sequential_runs_careful"] == careful < out["fixed_runs"] * 3 / 4
    assert out["sequential_runs_defective"] == 10 * 3


def test_plan_without_a_rate_or_trials_is_one_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan"]) == 2  # a usage error, like a missing argument
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-violation-rate" in err[0]


def test_a_long_run_on_a_terminal_shows_a_progress_bar_and_json_never_does() -> None:
    import os
    import pty

    def run(*extra: str) -> str:
        leader, follower = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "assay", TYPED, "--trials", "600", *extra],
            stdout=follower,
            stderr=follower,
            env={**os.environ, "COLUMNS": "100"},
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=120)
        os.close(leader)
        return b"".join(chunks).decode(errors="replace")

    assert "assaying" in run()
    assert "assaying" not in run("--json")


def test_replay_into_a_reader_that_left_ends_quietly_without_a_broken_pipe_traceback() -> None:
    # `assaygate replay … | head`: here the reader is gone before the first line is written.
    baseline = str(EXAMPLES / "copperfin-baseline.json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "replay", baseline, "--seed", "188", "--trial", "7"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141  # what a shell shows for a writer ended by SIGPIPE
    assert stderr == ""


def test_replay_into_head_prints_the_first_lines() -> None:
    baseline = str(EXAMPLES / "copperfin-baseline.json")
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"{sys.executable} -m service.cli replay {baseline} --seed 188 --trial 7 | head -1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.startswith("Trial 7: fault ") and done.stderr == ""


def test_submit_and_gate_help_name_the_url_they_default_to() -> None:
    for command in ("submit", "gate"):
        done = subprocess.run(
            [sys.executable, "-m", "service.cli", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "default: $ASSAYGATE_URL, else http://127.0.0.1:8000" in " ".join(
            done.stdout.split()
        )


def test_without_a_terminal_an_assay_prints_a_line_per_finished_fault_on_stderr() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "assay",
            TYPED,
            "--trials",
            "5",
            "--fault",
            "tool",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stdout)  # stdout keeps only the report
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("assaygate: fault ")]
    ids = [f["id"] for f in report["faults"]]
    assert len(lines) == len(ids)
    for k, (line, fault) in enumerate(zip(lines, ids, strict=True), start=1):
        assert line.startswith(f"assaygate: fault {k}/{len(ids)} {fault}: 5 trials run, fired in ")
    assert lines[-1].endswith(f"{5 * len(ids)}/{5 * len(ids)} trials)")


def _declared_manifest(tmp_path: Path, env: dict[str, str] | None) -> str:
    """A python target that is careful only with REFUND_MODE=careful and its REFUND_TOKEN secret
    in its environment (tests/targets/agents/declared.py)."""
    data = json.loads((EXAMPLES / "copperfin-typed-repair.json").read_text())
    # Floors on the point estimate: these assays decide at 3 trials (the default lower bound
    # needs 16), and they are about the code's environment.
    data["envelope"] = {"floor_on": "point"}
    target: dict[str, object] = {
        "kind": "python",
        "entrypoint": "tests.targets.agents.declared:run",
        "secrets": ["REFUND_TOKEN"],
    }
    if env is not None:
        target["env"] = env
    data["target"] = target
    path = tmp_path / "declared.json"
    path.write_text(json.dumps(data))
    return str(path)


def _assay(manifest: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("REFUND_MODE", "REFUND_TOKEN")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "assay",
            manifest,
            "--trials",
            "3",
            "--mode",
            "timeout_before_send",
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**base, **env},
    )


def test_the_local_assay_gives_the_code_what_the_manifest_declares_as_a_worker_does(
    tmp_path: Path,
) -> None:
    declared = _declared_manifest(tmp_path, {"REFUND_MODE": "careful"})
    done = _assay(declared, env={"REFUND_TOKEN": "s3cret"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["decision"] == "allow"
    # The secret's value from a file instead of the environment.
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"REFUND_TOKEN": "s3cret"}))
    assert _assay(declared, "--secrets", str(secrets), env={}).returncode == 0


def test_a_variable_the_manifest_never_declared_is_invisible_locally_as_on_a_worker(
    tmp_path: Path,
) -> None:
    # The shell has REFUND_MODE=careful, the manifest does not declare it: on the service the
    # code would never see it, so locally it does not either, and both block.
    undeclared = _declared_manifest(tmp_path, None)
    env = {"REFUND_MODE": "careful", "REFUND_TOKEN": "s3cret"}
    done = _assay(undeclared, env=env)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["decision"] == "block"
    # --inherit-env gives the code the whole environment again (and says it may differ).
    assert _assay(undeclared, "--inherit-env", env=env).returncode == 0


def test_a_named_secret_missing_locally_is_one_line_naming_it(tmp_path: Path) -> None:
    declared = _declared_manifest(tmp_path, {"REFUND_MODE": "careful"})
    done = _assay(declared, env={})
    assert done.returncode == 3 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "target.secrets.0" in lines[0] and "REFUND_TOKEN" in lines[0]
    assert "Traceback" not in done.stderr


def test_a_local_assay_held_to_a_policy_refuses_a_looser_manifest_and_raises_a_silent_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"floors": {"recovered": 0.9}, "trials": 6}))
    lowered = json.loads(Path(TYPED).read_text())
    lowered["envelope"] = {"floors": {"recovered": 0.0}}
    loose = tmp_path / "lowered.json"
    loose.write_text(json.dumps(lowered))
    # Silent on floors, which it compares on the point estimate: on the default lower bound the
    # policy's 0.9 would need 35 trials a fault (refused below that), and this is about the 6.
    point = json.loads(Path(TYPED).read_text())
    point["envelope"] = {"floor_on": "point"}
    silent = tmp_path / "silent.json"
    silent.write_text(json.dumps(point))
    args = ["--fault", "tool", "--seed", "3", "--policy", str(policy), "--json"]
    # What the service would refuse, the local assay refuses: one line, exit 3 (never a decision).
    assert main(["assay", str(loose), *args]) == 3
    assert "manifest.envelope.floors.recovered" in capsys.readouterr().err
    assert main(["assay", str(silent), "--trials", "5", *args]) == 3
    assert "plan.trials: 5 trials are fewer than the policy's minimum 6" in capsys.readouterr().err
    # Silent: the policy's floor applies, and the report's plan says so.
    main(["assay", str(silent), "--trials", "6", *args])
    report = json.loads(capsys.readouterr().out)
    assert report["plan"]["envelope"]["floors"]["recovered"] == 0.9


def test_an_mcp_assay_whose_servers_are_down_is_one_error_line_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = json.loads((EXAMPLES / "mcp-warehouse" / "manifest.careful.json").read_text())
    for name, port in (("shop", 1), ("admin", 2)):
        manifest["tools"]["servers"][name]["url"] = f"http://127.0.0.1:{port}/mcp"
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    # `assay` exits 2 for hold, so its errors are 3.
    assert main(["assay", str(path), "--trials", "1"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert "cannot start the mcp target" in err[0] and "http://127.0.0.1:1/mcp" in err[0]
