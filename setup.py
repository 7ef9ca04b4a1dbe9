"""Packaging is declared in pyproject.toml; this file adds what a declaration cannot.

- The migrations ship inside the wheel as `service/migrations`: `assaygate serve` and
  `assaygate db upgrade` from an installed wheel run them (`Settings.resolved_migrations_dir`
  finds them there, or beside `service/` in a checkout). The repository keeps them at the top
  level, where `alembic` and the Dockerfile expect them, so the build copies them in.
- `ASSAYGATE_MYPYC=1 pip install --no-build-isolation .` (with mypy installed) compiles the core's
  hot modules with mypyc, as the production image does. Editable and default installs stay pure
  Python, so an edited source file is always the code that runs.
"""

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class build_py_with_migrations(build_py):  # noqa: N801  (a setuptools command's name)
    def run(self) -> None:
        super().run()
        # An editable install reads the checkout's migrations/ in place.
        if getattr(self, "editable_mode", False):
            return
        source = HERE / "migrations"
        if not source.is_dir():
            raise SystemExit("setup.py: no migrations/ folder to ship (an incomplete sdist?)")
        target = Path(self.build_lib) / "service" / "migrations"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


ext_modules = []
if os.environ.get("ASSAYGATE_MYPYC") == "1":
    from mypyc.build import mypycify

    sys.path.insert(0, str(HERE))
    from service.core.compiled import HOT_MODULES

    ext_modules = mypycify(list(HOT_MODULES), opt_level="3")

setup(ext_modules=ext_modules, cmdclass={"build_py": build_py_with_migrations})
