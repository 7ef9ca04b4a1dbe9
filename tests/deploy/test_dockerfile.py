"""The production image says what it does (issue 47: it said it removed gcc after the build, and
kept it). Read as the builder reads it, stage by stage: no daemon builds images on the test
machine, so what is checked is the file's instructions."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tests.support.service import ROOT

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|libc6-dev|build-essential)\b")


@dataclass
class Stage:
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def runs(self) -> str:
        return "\n".join(arg for op, arg in self.instructions if op == "RUN")


def stages() -> list[Stage]:
    """Each `FROM` and its instructions (continuation lines joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, arg = line.partition(" ")
        if op.upper() == "FROM":
            named = re.search(r"\bAS\s+(\S+)", arg, re.I)
            found.append(Stage(named.group(1) if named else None))
        else:
            found[-1].instructions.append((op.upper(), arg))
    return found


def test_the_image_it_ships_holds_no_compiler_the_build_stage_used_one() -> None:
    *builders, image = stages()
    assert not COMPILERS.search(image.runs()), "the shipped image installs a compiler"
    (build,) = [s for s in builders if COMPILERS.search(s.runs())]
    assert "ASSAYGATE_MYPYC=1" in build.runs(), "the compiler is there to build the core"
    copied = [arg for op, arg in image.instructions if op == "COPY" and "--from=" in arg]
    assert copied == [f"--from={build.name} /wheels /wheels"]
    assert "pip install --no-deps /wheels/assaygate-" in image.runs()
    assert "bubblewrap" in image.runs(), "tenant code runs only in its sandbox"


def test_every_file_the_image_copies_is_in_the_repository() -> None:
    for stage in stages():
        for op, arg in stage.instructions:
            if op != "COPY" or arg.startswith("--from="):
                continue
            *sources, _ = arg.split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
