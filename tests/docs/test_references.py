"""Every document the repository cites is in it, and every section it names by its heading is in
that document (issue 47: the code and the docs cited a `DESIGN.md` no clone has).

Read from every tracked file: a Markdown name (`docs/operations.md`, `mcp.md#slots`,
`../examples/x/README.md`), found beside the citing file, at the top of the repository or in
`docs/`; and a section quoted after it (`docs/operations.md, "Egress policy"`), which must start
a heading of that document."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.service import ROOT

CITED = re.compile(r"(?<![\w/.:-])((?:\.\./)*(?:[\w-]+/)*[\w-]+\.md)\b")
SECTION = re.compile(r"((?:docs/)?[\w-]+\.md),?\s+\"([^\"]+)\"")
TEXT = (".py", ".md", ".yml", ".yaml", ".toml", ".cfg", ".ini", ".sh", ".json", "Dockerfile")


def tracked() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / n for n in names if n.endswith(TEXT) and (ROOT / n).is_file()]


def found(name: str, citing: Path) -> Path | None:
    for base in (citing.parent, ROOT, ROOT / "docs"):
        path = (base / name).resolve()
        if path.is_file():
            return path
    return None


def headings(document: Path) -> list[str]:
    """Its headings, and the bold labels that open a paragraph (`**What a floor promises.**`)."""
    text = re.sub(r"^```.*?^```", "", document.read_text(), flags=re.M | re.S)
    found = re.findall(r"^#+ (.+)$", text, re.M) + re.findall(r"^\*\*(.+?)\*\*", text, re.M)
    return [h.strip().strip("`").lower() for h in found]


def citations() -> list[tuple[str, str, str | None]]:
    """(citing file, cited name, the section quoted after it or None)."""
    out = []
    for path in tracked():
        where = str(path.relative_to(ROOT))
        if path == Path(__file__):
            continue  # names the missing document it looks for
        lines = path.read_text(errors="replace").splitlines()
        if path.suffix != ".md":  # a comment's text, without its markers, across lines
            lines = [re.sub(r"^\s*#+\s?", "", line) for line in lines]
        text = " ".join(" ".join(lines).split())
        names = CITED.findall(text)
        if where.startswith("tests/"):  # the reports tests write are theirs, not citations
            names = [n for n in names if n.startswith("docs/") or n[:-3].isupper()]
        out += [(where, name, None) for name in names]
        out += [(where, name, section) for name, section in SECTION.findall(text)]
    return sorted(set(out), key=lambda c: (c[0], c[1], c[2] or ""))


CITATIONS = citations()


def test_the_repository_cites_no_document_it_lacks() -> None:
    missing = [
        f"{where}: {name}" for where, name, _ in CITATIONS if found(name, ROOT / where) is None
    ]
    assert missing == []
    assert ("service/core/system/execution.py", "docs/operations.md", "Running tenant code") in (
        CITATIONS
    )


@pytest.mark.parametrize(
    ("where", "name", "section"),
    [c for c in CITATIONS if c[2] is not None],
    ids=lambda v: str(v)[:40],
)
def test_a_section_cited_by_its_heading_is_in_that_document(
    where: str, name: str, section: str
) -> None:
    document = found(name, ROOT / where)
    assert document is not None, f"{where}: {name}"
    wanted = section.strip("`").lower()
    assert any(h.startswith(wanted) for h in headings(document)), (
        f'{where} cites {name}, "{section}": no such heading'
    )
