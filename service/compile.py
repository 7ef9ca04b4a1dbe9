"""Build the mypyc-compiled core: into a scratch directory (the bench, the compiled-core test), or
into this checkout's default install (`make venv`), guarded so that an edited source file is
always the code that runs.

    python -m service.compile --ensure   # compile in place unless fresh (pure Python without gcc)
    python -m service.compile --status   # compiled, stale or pure
    python -m service.compile --clean    # back to the pure-Python core

An in-place build puts each hot module's extension next to its source, in its room of
`service/core/`, and the shared runtime library in the environment's site-packages; a stamp records
the sources' digests.
Compiled, the core behaves exactly as the source does (a test runs the core's suite against it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from service.core.compiled import HOT_MODULES

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "service" / "core"
STAMP = CORE / ".compiled.json"
_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def build_compiled_core(dest: Path) -> Path:
    """Copy `service/` and `assaygate/` into `dest`, compile the hot modules there; `dest` is
    the import root."""
    # The public package too: the hot modules import its task and tool errors.
    for package in ("assaygate", "service"):
        shutil.copytree(
            ROOT / package,
            dest / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.so", ".compiled.json"),
            dirs_exist_ok=True,
        )
    mypyc = Path(sys.executable).with_name("mypyc")
    subprocess.run([str(mypyc), *HOT_MODULES], cwd=dest, check=True, capture_output=True)
    return dest


def _digests() -> dict[str, str]:
    return {m: hashlib.sha256((ROOT / m).read_bytes()).hexdigest() for m in HOT_MODULES}


def _extensions() -> list[Path]:
    return [ROOT / (m[: -len(".py")] + _SUFFIX) for m in HOT_MODULES]


def _site() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def state() -> str:
    """`compiled` (every hot module compiled from the current source), `stale` or `pure`."""
    present = [p for p in _extensions() if p.exists()]
    if not present:
        return "pure"
    try:
        stamp = json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return "stale"
    if len(present) != len(HOT_MODULES) or stamp.get("sources") != _digests():
        return "stale"
    # The shared runtime lives in the environment: a virtualenv made again lacks it.
    if not all((_site() / name).exists() for name in stamp.get("runtime", [])):
        return "stale"
    return "compiled"


def clean() -> None:
    for p in _extensions():
        p.unlink(missing_ok=True)
    try:
        stamp = json.loads(STAMP.read_text())
    except (OSError, ValueError):
        stamp = {}
    for name in stamp.get("runtime", []):
        (_site() / name).unlink(missing_ok=True)
    STAMP.unlink(missing_ok=True)


def build_in_place() -> None:
    """Compile the hot modules and install them beside their sources; raises on failure."""
    clean()
    with tempfile.TemporaryDirectory() as tmp:
        root = build_compiled_core(Path(tmp))
        runtime = [p for p in root.glob(f"*{_SUFFIX}")]
        for lib in runtime:
            shutil.copy2(lib, _site() / lib.name)
        for ext in _extensions():
            built = root / ext.relative_to(ROOT)
            shutil.copy2(built, ext)
    STAMP.write_text(
        json.dumps({"sources": _digests(), "runtime": sorted(p.name for p in runtime)}, indent=1)
    )


def ensure() -> str:
    """Compile in place unless the build is fresh; fall back to pure Python with a notice."""
    current = state()
    if current == "compiled":
        return current
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        clean()
        print(
            "assaygate: no C compiler found: the core runs as pure Python (slower; see "
            "bench/assay_throughput.py)",
            file=sys.stderr,
        )
        return "pure"
    try:
        build_in_place()
    except (subprocess.CalledProcessError, OSError) as exc:
        clean()
        print(
            f"assaygate: compiling the core failed ({exc}); it runs as pure Python (slower)",
            file=sys.stderr,
        )
        return "pure"
    return state()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m service.compile")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--ensure", action="store_true")
    group.add_argument("--status", action="store_true")
    group.add_argument("--clean", action="store_true")
    args = ap.parse_args(argv)
    if args.clean:
        clean()
    elif args.ensure:
        print(f"core: {ensure()}")
    else:
        print(state())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
