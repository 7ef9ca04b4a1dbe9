"""Packaging is declared in pyproject.toml; this file only adds the optional compiled build.

`ASSAYGATE_MYPYC=1 pip install --no-build-isolation .` (with mypy installed) compiles the core's
hot modules with mypyc, as the production image does. Editable and default installs stay pure
Python, so an edited source file is always the code that runs.
"""

import os
import sys

from setuptools import setup

ext_modules = []
if os.environ.get("ASSAYGATE_MYPYC") == "1":
    from mypyc.build import mypycify

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from service.core.compiled import HOT_MODULES

    ext_modules = mypycify(list(HOT_MODULES), opt_level="3")

setup(ext_modules=ext_modules)
