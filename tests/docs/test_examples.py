"""Every shell example in the README and the docs runs as written, against an embedded service
(`assaygate serve` in a fresh folder: SQLite, a filesystem queue, a worker child), with the
address and the key it printed in `ASSAYGATE_URL` and `ASSAYGATE_API_KEY`, as the README says.

A command that is not run is listed below with the reason; a listed command that no longer appears
in the docs fails the test too, so the list cannot go stale."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.service import ROOT, free_port, wait_for

pytestmark = pytest.mark.timeout(900)

DOCUMENTS = ("README.md", "docs/operations.md", "docs/targets.md", "docs/dossier.md")
DOCUMENTS += ("examples/http-agent/README.md",)

NOT_RUN = {
    "make test": "the test suite itself",
    ".venv/bin/assaygate serve": "the service the examples run against is this very command, "
    "started by the fixture in a fresh folder (on a free port)",
    "export ASSAYGATE_URL=": "the test exports both, with the key the service printed",
    "ASSAYGATE_WORKER_TENANT=": "a tenant's worker runs until stopped; "
    "tests/mcp/test_frameworks.py starts one as written (tests/support/embedded.py)",
    "python -m pip install --require-hashes": "installs a team's pinned dependencies from an "
    "index into its own code folder (the team's lock file, the network)",
    "assaygate submit manifest.json --code agent/": "the team's own manifest and code; "
    "tests/api/test_artifacts.py submits code as written",
}
# Commands whose documented exit code is not 0 (a decision, not an error).
EXIT_CODES = {
    ".venv/bin/assaygate submit examples/copperfin-typed.json --wait": 2,  # the typed system holds
    # `assay` exits like `gate`: the typed system holds (2), the baseline blocks (1); its tool
    # family alone is allowed (0, the default).
    ".venv/bin/assaygate assay examples/copperfin-typed.json --fault tool": 0,
    ".venv/bin/assaygate assay examples/copperfin-typed.json": 2,
    ".venv/bin/assaygate assay examples/copperfin-baseline.json": 1,
    ".venv/bin/assaygate assay examples/http-agent/typed.json": 2,
    # The reference target runs none of the code it ships: an allow for those bytes is held
    # (`assurance`), online (2) and offline (1), under the default policy.
    "assaygate gate copperfin-returns --artifact examples/frameworks": 2,
    "assaygate gate --artifact examples/frameworks": 2,
    "assaygate verify shipped.json --keys keys.json --artifact examples/frameworks": 1,
}
AGENT_PORT = 8081
USERS_DEMO = ROOT / "var" / "demo"


def demo_state() -> tuple[int, int] | None:
    """The user's demo folder as it stands (inode, change time), or None: `rm -rf` and a new
    demo make another."""
    try:
        found = USERS_DEMO.stat()
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_ctime_ns


@dataclass(frozen=True)
class Block:
    document: str
    line: int
    commands: tuple[str, ...]


def shell_blocks() -> list[Block]:
    blocks = []
    for name in DOCUMENTS:
        text = (ROOT / name).read_text()
        for found in re.finditer(r"^```(?:sh|bash|console)\n(.*?)^```", text, re.M | re.S):
            lines = found.group(1).replace("\\\n", " ").splitlines()
            commands = tuple(line.strip() for line in lines if line.strip())
            blocks.append(Block(name, text[: found.start()].count("\n") + 1, commands))
    return blocks


def skipped(command: str) -> str | None:
    return next((why for prefix, why in NOT_RUN.items() if command.startswith(prefix)), None)


def expected_exit(command: str) -> int:
    return next((code for prefix, code in EXIT_CODES.items() if command.startswith(prefix)), 0)


def script(block: Block) -> str:
    """The block as one bash script: each command as written, its exit code checked; make runs
    in the checkout, everything else in the service's folder; background jobs end with it."""
    lines = ["trap 'kill $(jobs -p) 2>/dev/null' EXIT"]
    for command in block.commands:
        if skipped(command):
            continue
        code = expected_exit(command)
        run = (
            f"(cd {shlex.quote(str(ROOT))} && {command})"
            if command.startswith("make ")
            else command
        )
        shown = shlex.quote(f"$ {command[:160]}")
        lines.append(f"printf '%s\\n' {shown} >&2")
        lines.append(run)
        lines.append(
            f'rc=$?; [ "$rc" -eq {code} ] || {{ printf "exit %s, not {code}: %s\\n" "$rc" '
            f"{shown} >&2; exit 97; }}"
        )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Service:
    folder: Path
    url: str
    key: str


FIRST_KEY = re.compile(r"\b(ag_[A-Za-z0-9_-]{43})\b")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """`assaygate serve` in a fresh folder that also holds what the examples name relatively."""
    folder = tmp_path_factory.mktemp("docs-examples")
    for name in ("examples", "tests", ".venv"):
        (folder / name).symlink_to(ROOT / name)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    log = (folder / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
        cwd=folder,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def announced() -> bool:
        return "Assaygate is up" in (folder / "serve.log").read_text(errors="replace")

    try:
        wait_for(announced, 60.0, "the embedded service announced itself")
        printed = (folder / "serve.log").read_text(errors="replace")
        keys = FIRST_KEY.findall(printed)
        assert len(keys) == 1, "the first start prints exactly one key"
        # Printed after start-up, framed, and the last thing on the screen.
        assert printed.rstrip().splitlines()[-1].startswith("└")
        assert httpx.get(f"{url}/readyz").status_code == 200
        yield Service(folder, url, keys[0])
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def on_free_port(text: str, folder: Path, tmp_path: Path) -> tuple[str, Path]:
    """The script and a working folder like the service's, with the agent's port replaced."""
    port = str(free_port())
    work = tmp_path / "work"
    work.mkdir()
    for entry in folder.iterdir():
        if entry.name != "examples":
            (work / entry.name).symlink_to(entry.resolve())
    for source in (ROOT / "examples").rglob("*"):
        if source.is_file() and "__pycache__" not in source.parts:
            copied = work / "examples" / source.relative_to(ROOT / "examples")
            copied.parent.mkdir(parents=True, exist_ok=True)
            copied.write_bytes(source.read_bytes().replace(b":8081", f":{port}".encode()))
    return text.replace(f"--port {AGENT_PORT}", f"--port {port}").replace(
        f":{AGENT_PORT}", f":{port}"
    ), work


def test_every_command_not_run_is_listed_with_a_reason_and_still_in_the_docs() -> None:
    commands = [c for b in shell_blocks() for c in b.commands]
    assert commands, "no shell examples found"
    for prefix in (*NOT_RUN, *EXIT_CODES):
        assert any(c.startswith(prefix) for c in commands), f"{prefix!r} is in no document"
    # A placeholder is not an example: every command must be runnable as written.
    for command in commands:
        if not skipped(command):
            assert not re.search(r"\[--|\b[A-Z]{3,}(_[A-Z]+)*\.json\b|\bKEY_ID\b", command), command


def runnable_blocks() -> list[Block]:
    """The blocks with a command to run here: a block of `NOT_RUN` commands only (the suite
    itself, the service the fixture starts) is run where `NOT_RUN` says, and is no test case to
    skip — under CI a skip must mean something that should have run did not."""
    return [b for b in shell_blocks() if not all(skipped(c) for c in b.commands)]


@pytest.mark.parametrize(
    "block", runnable_blocks(), ids=lambda b: f"{b.document}:{b.line}".replace("/", "-")
)
def test_the_example_runs_as_written(block: Block, service: Service, tmp_path: Path) -> None:
    text, cwd = script(block), service.folder
    if any(f"--port {AGENT_PORT}" in c for c in block.commands):
        # The docs' agent listens on 8081, which anything on the machine may hold: run the example
        # as written but on a free port, in a folder whose examples name that port (never a skip).
        text, cwd = on_free_port(text, service.folder, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAYGATE_")}
    env.update(
        PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        ASSAYGATE_URL=service.url,
        ASSAYGATE_API_KEY=service.key,
        # `demo --keep` keeps its folder here, not in the machine's /tmp.
        TMPDIR=str(tmp_path),
        # `make demo` keeps its data here: the user's own demo in var/demo stays as it was.
        DEMO_DIR=str(tmp_path / "demo"),
        # ... and `make demo` uses the venv `make test` set up, never installing into it or
        # compiling the core in the checkout (a test writes only in its own folders).
        DEMO_SETUP="",
    )
    users_demo = demo_state()
    done = subprocess.run(
        ["bash", "-c", text],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    where = f"{block.document} line {block.line}"
    assert done.returncode == 0, f"{where}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr + done.stdout, f"{where}\n{done.stderr[-3000:]}"
    assert "target itself failed" not in done.stdout, where
    assert demo_state() == users_demo, f"{where} touched the user's {USERS_DEMO}"
