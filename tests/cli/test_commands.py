"""The `assaygate` command as a newcomer meets it: `--version`, exit codes in every `--help`,
`--data-dir` on the commands that open the database, database trouble as one line, `gate` in
one line (`--json` for the whole answer) and from a manifest, reports on exit code 3, and a
setting refused at start as one line naming its variable."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from service.cli import build_parser
from service.cli.ci import gate_line
from service.cli.errors import EXIT_CODES, exit_codes
from service.cli.reports import ReportedDecision, summary_markdown
from service.settings import Settings
from tests.support.service import EXAMPLES, ROOT


def assaygate(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    base["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def commands(parser: argparse.ArgumentParser, path: str = "") -> list[tuple[str, str]]:
    """Every command (and subcommand) with its formatted `--help`."""
    found = [(path, parser.format_help())] if path else []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.extend(commands(child, f"{path} {name}".strip()))
    return found


def test_every_command_help_ends_with_its_exit_codes_from_the_one_table() -> None:
    helps = commands(build_parser())
    assert len(helps) > 20
    for path, text in helps:
        table = text[text.index("exit codes:") :]
        for code, meaning in exit_codes(path):
            assert f"  {code}  {meaning}" in table, path
    assert set(EXIT_CODES) <= {path for path, _ in helps}, "the table names real commands"


def test_the_ci_commands_help_says_3_is_an_error_and_2_a_hold() -> None:
    for path, text in commands(build_parser()):
        if path in ("assay", "submit", "gate"):
            assert "  2  hold or reopened" in text and "  3  error" in text


def test_the_version_is_the_installed_package_version() -> None:
    from importlib.metadata import version

    done = assaygate("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"assaygate {version('assaygate')}"


def subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    child: argparse.ArgumentParser = action.choices[name]
    return child


def test_the_options_a_newcomer_asked_about_have_help() -> None:
    for name, flags in {
        "submit": ("--seed", "--system", "--version", "--trials", "--idempotency-key"),
        "assay": ("--seed", "--trials"),
        "gate": ("--version", "--manifest", "--json"),
        "plan": ("--max-violation-rate",),
    }.items():
        helps = {o: a.help for a in subcommand(name)._actions for o in a.option_strings}
        for flag in flags:
            assert helps[flag], f"{name} {flag} has no help"
    plan = " ".join(subcommand("plan").format_help().split())
    assert "as a fraction: 0.005 is 0.5 %" in plan


@pytest.mark.parametrize(
    "words", [["keys", "list-api"], ["tenants", "list"], ["keys", "create", "--tenant", "t",
              "--role", "submitter", "--person", "p"]]
)  # fmt: skip
def test_a_database_command_in_a_folder_without_one_is_one_line_naming_data_dir(
    words: list[str], tmp_path: Path
) -> None:
    done = assaygate(*words, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert str(tmp_path / "var" / "assaygate.sqlite3") in done.stderr
    assert "--data-dir" in done.stderr
    assert not (tmp_path / "var").exists(), "a failed look-up leaves no empty database behind"


def test_db_upgrade_keys_and_tenants_take_the_service_folder_from_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "service-data"
    assert assaygate("db", "upgrade", "--data-dir", str(data), cwd=tmp_path).returncode == 0
    assert (data / "assaygate.sqlite3").is_file()
    created = assaygate(
        "keys", "create", "--tenant", "acme", "--role", "submitter", "--service-account", "ci",
        "--data-dir", str(data), cwd=tmp_path,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    listed = assaygate("keys", "list-api", "--data-dir", str(data), cwd=tmp_path)
    assert [k["tenant"] for k in json.loads(listed.stdout)["items"]] == ["acme"]
    tenants = assaygate("tenants", "list", "--json", "--data-dir", str(data), cwd=tmp_path)
    assert [t["name"] for t in json.loads(tenants.stdout)["items"]] == ["acme"]
    assert assaygate("db", "check", "--data-dir", str(data), cwd=tmp_path).returncode == 0
    rotated = assaygate("keys", "rotate", "--data-dir", str(data), cwd=tmp_path)
    assert json.loads(rotated.stdout)["keys_dir"] == str(data / "keys")


def test_a_database_the_driver_cannot_reach_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    done = assaygate(
        "keys", "list-api", cwd=tmp_path,
        env={"ASSAYGATE_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none"},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("assaygate: error: database: ")
    assert done.stderr.count("\n") == 1, done.stderr


def test_the_gate_line_leads_with_the_decision_and_the_first_reasons_in_their_order() -> None:
    answer = {
        "decision": "block",
        "system": "copperfin-returns",
        "version": "1.6.0",
        "reasons": [
            {"severity": "block", "code": "unsafe_escape", "fault": "timeout_after_commit"},
            {"severity": "hold", "code": "counterfactual_untested", "fault": "stale_read"},
            {"severity": "hold", "code": "coverage_missing"},
        ],
    }
    assert gate_line(answer) == (
        "block: copperfin-returns 1.6.0 — unsafe_escape (timeout_after_commit); "
        "counterfactual_untested (stale_read) and 1 more (--json)"
    )
    assert gate_line({**answer, "decision": "allow", "reasons": []}) == (
        "allow: copperfin-returns 1.6.0"
    )


def test_gate_without_a_system_or_with_both_is_refused_in_one_line(tmp_path: Path) -> None:
    for words in (["gate"], ["gate", "s", "--manifest", "m.json"]):
        done = assaygate(*words, cwd=tmp_path)
        assert done.returncode == 3 and done.stderr.count("\n") == 1, done.stderr


def test_gate_errors_still_write_the_junit_and_summary_saying_what_went_wrong(
    tmp_path: Path,
) -> None:
    junit, summary = tmp_path / "gate.xml", tmp_path / "summary.md"
    manifest = EXAMPLES / "copperfin-typed-repair.json"
    done = assaygate(
        "gate", "--manifest", str(manifest), "--url", "http://127.0.0.1:1",
        "--junit", str(junit), "--summary", str(summary), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 3
    case = ET.parse(junit).getroot().find(".//testcase[@name='gate']")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "error"
    assert "cannot reach http://127.0.0.1:1" in (failure.text or "")
    # The manifest names its version too: the gate was asked about that candidate.
    suite = ET.parse(junit).getroot().find(".//testsuite")
    assert suite is not None and suite.get("name") == "copperfin-returns 1.6.0"
    # Titled by the error; the system is named below it.
    text = summary.read_text()
    assert text.startswith("## Assaygate: ERROR — cannot reach http://127.0.0.1:1")
    assert "**System:** copperfin-returns 1.6.0" in text


def test_an_assay_refused_for_bad_input_still_writes_its_reports(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    junit, summary = tmp_path / "a.xml", tmp_path / "a.md"
    done = assaygate("assay", str(bad), "--junit", str(junit), "--summary", str(summary))
    assert done.returncode == 3
    assert junit.is_file() and "ERROR" in summary.read_text()


def test_a_summary_links_a_report_file_by_a_relative_path_never_the_runner_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    outcome = ReportedDecision(
        "s", "1", "allow", [], [], link=str(tmp_path / "out" / "report.json")
    )
    outcome.link_label = "report"
    assert "**Report:** [out/report.json](out/report.json)" in summary_markdown(outcome)
    elsewhere = ReportedDecision("s", "1", "allow", [], [], link="/srv/reports/report.json")
    elsewhere.link_label = "report"
    assert "(/srv/reports/report.json)" in summary_markdown(elsewhere), "not a bare name"
    url = ReportedDecision("s", "1", "allow", [], [], link="http://gate/candidates/1")
    assert "(http://gate/candidates/1)" in summary_markdown(url)


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("gate.example.com", "is not an http(s) URL with a host"),
        ("ftp://gate.example.com", "is not an http(s) URL with a host"),
        ("https://", "is not an http(s) URL with a host"),
        (
            "https://assaygate.change-me.invalid",
            "is a placeholder (a .invalid host never resolves)",
        ),
    ],
)
def test_a_public_url_that_is_not_http_with_a_real_host_is_refused(
    value: str, rule: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=re.escape(rule)):
        Settings(data_dir=tmp_path, public_url=value)
    assert Settings(data_dir=tmp_path, public_url="https://gate.example.com").link_base == (
        "https://gate.example.com"
    )


def test_a_placeholder_stops_the_api_the_migration_the_worker_and_its_probe_in_one_line(
    tmp_path: Path,
) -> None:
    env = {"ASSAYGATE_PUBLIC_URL": "https://assaygate.change-me.invalid"}
    base = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    runs = [
        ("assaygate", ["-m", "service.cli", "serve", "--port", "0", "--data-dir", str(tmp_path)]),
        ("assaygate", ["-m", "service.cli", "db", "upgrade", "--data-dir", str(tmp_path)]),
        ("worker", ["-m", "worker"]),
        ("worker.health", ["-m", "worker.health", "live"]),
    ]
    started = [
        (
            prefix,
            subprocess.Popen(
                [sys.executable, *args],
                cwd=tmp_path,
                env={**base, "PYTHONPATH": str(ROOT), **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,  # its children too end below, should it ever start
            ),
        )
        for prefix, args in runs
    ]
    try:
        for prefix, process in started:
            _, stderr = process.communicate(timeout=120)
            assert process.returncode == 2, (prefix, stderr)
            assert stderr == (
                f"{prefix}: error: ASSAYGATE_PUBLIC_URL: 'https://assaygate.change-me.invalid' "
                "is a placeholder (a .invalid host never resolves): set the address people reach "
                "the dashboard at\n"
            )
    finally:
        for _, process in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
    assert not any(tmp_path.iterdir()), "nothing written before the refusal"
