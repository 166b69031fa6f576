# Two entry points do all set-up from a fresh clone: `make demo` (the main job) and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml lock/requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c lock/requirements.lock pip setuptools wheel
	$(BIN)/python -m pip install -q -c lock/requirements.lock -e '.[dev]'
	touch $(STAMP)

.PHONY: venv demo paper test test-unit test-integration test-slow bench lock mutation
venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m sweeps demo

# Every table and figure of the paper in miniature on MNIST-5k (about 40 minutes on 2 cores): outputs/paper/index.md
paper: $(STAMP)
	$(BIN)/python -m sweeps paper

test: $(STAMP)
	$(BIN)/python -m devtools.tiers

test-unit: $(STAMP)
	$(BIN)/python -m devtools.tiers unit

test-integration: $(STAMP)
	$(BIN)/python -m devtools.tiers integration

test-slow: $(STAMP)
	$(BIN)/python -m devtools.tiers slow

bench: $(STAMP)
	$(BIN)/python benchmarks/step_time.py

# Mutation scores of the unit tier (tests/MUTATION.md): MODULE=ssat/schedules.py for one module, none for all.
mutation: $(STAMP)
	$(BIN)/python -m devtools.mutation $(MODULE)

# Re-resolve the full dependency set (run after changing pyproject.toml's pins).
lock: $(STAMP)
	$(BIN)/python -m pip freeze --all --exclude-editable | grep -v '^ssat-sweeps' > lock/requirements.lock

# PNGs of MLflow's UI on a small sweep's store for the README (needs a headless Chromium: clusters/ci_prereqs.sh).
.PHONY: screenshots
screenshots: $(STAMP)
	$(BIN)/python -m devtools.ui_pages docs/img
