# gpufleet: `make demo` runs the embedded pipeline on a simulated fleet (Python 3.11+ only);
# `make test` runs every test against a real Kafka broker and a real ClickHouse server.
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
SERVICES ?= .services
PYTEST_ARGS ?=

.PHONY: demo test lint docs docs-gen venv services-start services-stop bench eval eval-intervals eval-forecast clean help \
	focus-validator

help:
	@echo "make demo            simulate a fleet, run it through the embedded pipeline, print a summary"
	@echo "make test            all tests, with a local Kafka broker and ClickHouse server started and stopped"
	@echo "make lint            ruff, the import layers (import-linter) and mypy, zero findings expected"
	@echo "make docs            the manual (docs/, MkDocs Material) built with --strict into site/"
	@echo "make docs-gen        write the manual's generated pages from the code (docs/gen.py)"
	@echo "make bench           the benchmarks under bench/ (results: BENCHMARKS.md)"
	@echo "make eval            the detectors' evaluation of QUALITY.md: simulated fleet 9001 and the held-out family"
	@echo "make eval-intervals  the same, each sampling interval (1, 5, 10, 30, 60 s) scored on its own"
	@echo "make eval-forecast   the forecast evaluation of QUALITY.md (TRACES=DIR adds the trace CSVs found there)"
	@echo "make focus-validator the FinOps FOCUS validator in its own virtualenv ($(FOCUS_VENV)), for the tests"
	@echo "make services-start  start the local Kafka broker and ClickHouse server (env in $(SERVICES)/env)"
	@echo "make services-stop   stop them"

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gpufleet needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# the demo needs the embedded mode only; the tests need every role and the test tools
$(VENV)/.installed-demo: pyproject.toml setup.py | $(PY)
	$(PY) -m pip install --quiet -e '.[embedded]'
	@touch $@

$(VENV)/.installed-test: pyproject.toml setup.py | $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $@ $(VENV)/.installed-demo

$(VENV)/.installed-docs: pyproject.toml setup.py | $(PY)
	$(PY) -m pip install --quiet -e '.[embedded,docs]'
	@touch $@

venv: $(VENV)/.installed-test

# The FOCUS validator (the finance extra's) needs numpy<2 and pandas<3: it gets a virtualenv of its own, and the
# tests run it as a program (GPUFLEET_FOCUS_VALIDATOR)
FOCUS_VENV ?= .venv-focus
$(FOCUS_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(FOCUS_VENV)
	$(FOCUS_VENV)/bin/python -m pip install --quiet $$($(PYTHON) -c 'import tomllib; print(" ".join(tomllib.load( \
	  open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["finance"]))')
	@touch $@

focus-validator: $(FOCUS_VENV)/.installed

demo: $(VENV)/.installed-demo
	$(VENV)/bin/gpufleet demo

# the layers (import-linter) are checked on an install of the package, where collectors/, streams/, models/ and
# sql/ sit inside gpufleet/ as they do in site-packages (the editable install maps them from the top level)
lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	rm -rf build .lint-imports
	$(PY) -m pip install --quiet --no-deps --no-build-isolation --target .lint-imports .
	cd .lint-imports && PYTHONPATH=. ../$(VENV)/bin/lint-imports ../pyproject.toml
	$(PY) .ci/typecheck.py

# Services are started here when Java is present (Kafka's jars come from Maven Central once);
# otherwise the test fixtures use testcontainers where a Docker engine answers.
test: $(VENV)/.installed-test $(FOCUS_VENV)/.installed
	@set -e; \
	if command -v java >/dev/null 2>&1; then \
	  trap 'PYTHON=$(PY) deploy/local/services.sh stop $(SERVICES) >/dev/null 2>&1 || true' EXIT INT TERM; \
	  PYTHON=$(PY) deploy/local/services.sh start $(SERVICES) >/dev/null; \
	  set -a; . $(SERVICES)/env; set +a; \
	fi; \
	GPUFLEET_FOCUS_VALIDATOR=$(abspath $(FOCUS_VENV))/bin/focus-validator $(VENV)/bin/pytest --durations=15 $(PYTEST_ARGS)

# the manual: its generated pages must be current (tests/unit/test_docs.py holds them too), then a strict build
docs: $(VENV)/.installed-docs
	$(PY) docs/gen.py --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-gen: $(VENV)/.installed-docs
	$(PY) docs/gen.py

services-start: $(VENV)/.installed-test
	PYTHON=$(PY) deploy/local/services.sh start $(SERVICES)

services-stop:
	PYTHON=$(PY) deploy/local/services.sh stop $(SERVICES)

bench: $(VENV)/.installed-test
	@set -e; \
	trap 'PYTHON=$(PY) deploy/local/services.sh stop $(SERVICES) >/dev/null 2>&1 || true' EXIT INT TERM; \
	PYTHON=$(PY) deploy/local/services.sh start $(SERVICES) >/dev/null; \
	set -a; . $(SERVICES)/env; set +a; \
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b; done

# the held-out family (bench/evalfleet: five fleets, 6,720 GPU-hours) is generated once into EVAL_DIR
EVAL_DIR ?= .eval
eval: $(VENV)/.installed-test
	@mkdir -p $(EVAL_DIR); test -f $(EVAL_DIR)/heldout.labels.jsonl || $(PY) -m bench.evalfleet --seed 1 --fleets 5 \
	  -o $(EVAL_DIR)/heldout.telemetry.jsonl.gz --labels $(EVAL_DIR)/heldout.labels.jsonl
	$(VENV)/bin/gpufleet model eval --seeds 9001 --held-out $(EVAL_DIR) --chart $(EVAL_DIR)/eval.png \
	  --report $(EVAL_DIR)/eval.json

# each sampling interval on its own (the goals must hold at every interval, not only mixed): one simulated and
# one held-out fleet (16 nodes x 12 h each) sampled every 1, 5, 10, 30 and 60 s, generated once into EVAL_EVERY_DIR
EVAL_EVERY_DIR ?= .eval-intervals
INTERVALS ?= 1 5 10 30 60
eval-intervals: $(VENV)/.installed-test
	@mkdir -p $(EVAL_EVERY_DIR); for s in $(INTERVALS); do \
	  test -f $(EVAL_EVERY_DIR)/heldout.every-$${s}s.labels.jsonl || $(PY) -m bench.evalfleet --seed 1 --fleets 1 \
	    --intervals $$s -o $(EVAL_EVERY_DIR)/heldout.every-$${s}s.telemetry.jsonl.gz \
	    --labels $(EVAL_EVERY_DIR)/heldout.every-$${s}s.labels.jsonl || exit 1; done
	$(VENV)/bin/gpufleet model eval --seeds 9001 --nodes 16 --hours 12 --faults 12 \
	  --intervals $$(echo $(INTERVALS) | tr ' ' ',') --held-out $(EVAL_EVERY_DIR) --no-baselines \
	  --report $(EVAL_EVERY_DIR)/eval.json

eval-forecast: $(VENV)/.installed-test
	$(PY) bench/eval_forecast.py $(if $(TRACES),--traces $(TRACES)) $(if $(DEV),--dev)

clean:
	rm -rf $(VENV) $(FOCUS_VENV) build dist *.egg-info $(SERVICES) .typecheck .lint-imports site
