# One way to do each thing: the README and .ci/run call these targets.
PY ?= .venv/bin/python
VENV ?= .venv

.PHONY: venv lint typecheck imports services browser test test-fast demo bench

venv:
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev]'
	@# The fast core by default: compiled with mypyc when a C compiler is present (pure Python
	@# otherwise, with a notice); rebuilt whenever a hot module's source changed.
	@$(PY) -m service.compile --ensure

lint:
	$(VENV)/bin/ruff check service worker tests bench
	$(VENV)/bin/ruff format --check service worker tests bench

typecheck:
	$(VENV)/bin/mypy

imports:
	$(VENV)/bin/lint-imports

services:
	@bash deploy/ensure-services.sh

browser:
	@bash deploy/ensure-chromium.sh

test: venv services browser lint typecheck imports
	$(PY) -m pytest

demo: venv
	$(VENV)/bin/assaygate demo

serve: venv
	$(VENV)/bin/assaygate serve

bench-service: venv services
	$(PY) bench/service_latency.py

bench-dashboard: venv services
	$(PY) bench/dashboard_render.py
