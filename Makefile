# One way to do each thing: the README and .ci/run call these targets.
PY ?= .venv/bin/python
VENV ?= .venv

.PHONY: venv install compile lint typecheck imports services browser sandbox kubectl test test-fast demo serve bench-service bench-dashboard

# Each step says what it does first: the first run takes minutes and must not look hung.
venv: install
	@$(MAKE) --no-print-directory compile

install:
	@test -x $(PY) || { echo "venv: creating $(VENV)"; python3 -m venv $(VENV); }
	@echo "venv: updating pip"
	@$(PY) -m pip install -q --upgrade pip
	@echo "venv: installing Assaygate and its dependencies into $(VENV) (minutes the first time)"
	@$(PY) -m pip install -q -e '.[dev,langgraph,openai-agents]'

# The fast core by default: compiled with mypyc when a C compiler is present (pure Python
# otherwise, with a notice); rebuilt whenever a hot module's source changed. Needs `install`.
compile:
	@echo "venv: compiling the core with mypyc if its source changed (a minute when it did)"
	@$(PY) -m service.compile --ensure
	@echo "venv: ready ($(VENV)/bin/assaygate)"

lint:
	$(VENV)/bin/ruff check assaygate service worker tests bench
	$(VENV)/bin/ruff format --check assaygate service worker tests bench

typecheck:
	$(VENV)/bin/mypy

imports:
	$(VENV)/bin/lint-imports

services:
	@bash deploy/ensure-services.sh

# Debian's Chromium for the browser tests: installed with apt-get when missing and run as root
# (it says so); ASSAYGATE_NO_BROWSER_INSTALL=1 never installs (the browser tests then skip).
browser:
	@bash deploy/ensure-chromium.sh

# Bubblewrap, the sandbox tenant code runs in on a worker: installed with apt-get when missing and
# run as root (it says so); fails when this machine cannot build a sandbox (no namespaces).
sandbox:
	@bash deploy/ensure-sandbox.sh

# Debian's kubectl, whose built-in kustomize renders deploy/k8s for tests/deploy/test_k8s.py
# (installed with apt-get when missing and run as root; it never talks to a cluster).
kubectl:
	@bash deploy/ensure-kubectl.sh

# The suite's interpreters keep their bytecode in var/pycache (ignored by git), never beside the
# sources, even where PYTHONDONTWRITEBYTECODE is set: without a cache each test process rewrites
# and compiles every test module again (17 CPU-seconds of collection, 7 cached), and every agent,
# worker and CLI child compiles the checkout's modules again.
PYCACHE = PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/var/pycache

# Two test processes, each running a file (or a service directory's unit, tests/conftest.py) at
# a time. Four were tried on this 2-core machine: beside a CPU-bound process they took as long
# (1,550 s against 1,545 s) and spent about 30 % more CPU (2,285 against 1,727 CPU-seconds, the
# other process keeping 594 against 1,063); on the idle box 1,153 s of tests against 1,118 s.
# The core's compile and the three checks share nothing, so they run side by side (each one's
# output kept together): on a fresh clone the compile is one C compiler process and mypy one more.
test: install services browser sandbox kubectl
	@$(MAKE) --no-print-directory -j4 -Otarget compile lint typecheck imports
	$(PYCACHE) $(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=25

# The suite without the files marked `slow` (each over a CPU-minute): a quick loop while working;
# `make test` (and CI) runs everything.
test-fast: venv services browser sandbox kubectl
	$(PYCACHE) $(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not slow"

# Keeps its data in a new folder and ends by saying how to browse it (serve + a reviewer key).
# The demo's data lives in var/demo (ignored by git), replaced on each run: nothing piles up in
# /tmp, and the demo ends by saying how to browse it.
# DEMO_DIR (default var/demo) is where the demo keeps its data; the docs tests set it to a
# folder of their own so a user's demo is never replaced by `make test`.
DEMO_DIR ?= var/demo
# What the demo sets up first: the venv. The docs tests, which run inside `make test` with the
# venv already set up, set DEMO_SETUP empty so that they never reinstall into it.
DEMO_SETUP ?= venv

demo: $(DEMO_SETUP)
	@echo "demo: starting the embedded service and submitting the examples (about a minute)"
	@rm -rf $(DEMO_DIR)
	$(VENV)/bin/assaygate demo --data-dir $(DEMO_DIR)

serve: venv
	$(VENV)/bin/assaygate serve

bench-service: venv services
	$(PY) bench/service_latency.py

bench-dashboard: venv services
	$(PY) bench/dashboard_render.py
