"""The shape of the code itself: modules that import each other in a circle, files too long to
read in one sitting, and rooms of the core too full to find a module in, are refused here (the
layers, the core's rooms among them, are `lint-imports`' contracts)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("assaygate", "service", "worker")
MAX_LINES = 500
CORE = ROOT / "service" / "core"
MAX_MODULES_A_ROOM = 12


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module, or of one module that imports
    itself (Tarjan's algorithm, iterative so that a deep chain cannot exhaust the stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph.get(node, ()):
                        found.append(sorted(component))
    return found


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=not type_checking)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def test_the_cycle_search_finds_a_circle_and_passes_a_chain() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_of_service_or_worker_imports_itself_through_others() -> None:
    assert cycles(import_graph()) == []


def test_no_modules_of_the_core_import_each_other_not_even_for_types() -> None:
    # grimp reads imports wherever they are in a module; here those under TYPE_CHECKING count too.
    core = {
        m: {i for i in imported if i.startswith("service.core.")}
        for m, imported in import_graph(type_checking=True).items()
        if m.startswith("service.core.")
    }
    assert cycles(core) == []


def test_no_folder_of_the_core_holds_more_than_12_modules() -> None:
    crowded = {
        str(folder.relative_to(ROOT)): count
        for folder in [CORE, *sorted(p for p in CORE.rglob("*") if p.is_dir())]
        if (count := len([m for m in folder.glob("*.py") if m.name != "__init__.py"]))
        > MAX_MODULES_A_ROOM
    }
    assert crowded == {}


def _lines(path: Path) -> int:
    return path.read_text().count("\n")


def _is_data_table(path: Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return "data table" in " ".join(doc.split())


def test_no_file_is_over_500_lines_unless_its_docstring_says_it_is_a_data_table() -> None:
    too_long = {
        str(p.relative_to(ROOT)): _lines(p)
        for package in PACKAGES
        for p in sorted((ROOT / package).rglob("*.py"))
        if _lines(p) > MAX_LINES and not _is_data_table(p)
    }
    assert too_long == {}


def test_no_two_public_classes_of_service_or_worker_share_a_name() -> None:
    # One name per concept: a reader who meets `FaultResult` or `Role` must not have to ask which.
    # Classes private to a module (a leading underscore) are that module's own business.
    # The public package is left out: its `Tools` is the protocol the core's `Tools` implements,
    # one concept under the one name target authors know.
    homes: dict[str, list[str]] = {}
    for package in ("service", "worker"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    homes.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {name: files for name, files in homes.items() if len(files) > 1} == {}
