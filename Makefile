# One command per loop: `make demo`, `make test`, `make lint`, `make bench` (`make bench-all`: every benchmark). CI runs `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo install test lint bench bench-all clean screenshots

# Two installs into one virtualenv: the tour needs only gitmem with its server and the Anthropic SDK
# (`demo` extra); the tests add the test tree (`dev` extra). Each stamp is remade when pyproject changes.
DEMO_STAMP := $(VENV)/.demo-installed

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# The demo install: a current pip first (the one a new venv bundles can be years old and resolves
# several times slower), and no byte-compiling of every installed module (the tour imports a
# fraction of them; each is compiled once, when first imported).
$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check --no-compile -e '.[demo]'
	touch $@

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@ $(DEMO_STAMP)

# The tour runs ~30 gitmem processes: each module they import is compiled once and its bytecode
# kept (in .venv and gitmem/__pycache__, both ignored by git), even where PYTHONDONTWRITEBYTECODE
# is set: else every process would compile gitmem and its dependencies again.
demo: $(DEMO_STAMP)
	PYTHONDONTWRITEBYTECODE= $(PY) examples/demo.py
	@echo "gitmem is in $(VENV)/bin: run 'make install', or: export PATH=\"$$PWD/$(VENV)/bin:\$$PATH\""

# gitmem on PATH: pipx when there is one, else a user install of this checkout.
install:
	if command -v pipx >/dev/null; then pipx install --force .; else $(PYTHON) -m pip install --user .; fi

test: $(STAMP)
	$(PY) -m pytest -n 2 tests

lint: $(STAMP)
	$(PY) -m ruff check gitmem tests bench examples
	$(PY) -m ruff format --check gitmem tests bench examples
	$(PY) -m mypy gitmem

# BENCH_ARGS=--quick: every benchmark's smoke run (small stores, one round or a few), minutes in all.
BENCH_ARGS ?=

bench: $(STAMP)
	$(PY) bench/run.py $(BENCH_ARGS)

# Every benchmark script in bench/ (tests/project/test_bench_scripts.py holds this list to bench/):
# the targets in docs/architecture.md#performance-targets (bench/run.py), hooks, index rebuild,
# clone, the server and its many-stores row, the guard, the console, search, session sync,
# redaction against git filter-repo (the dev extra installs it), the transparency log, and the
# cluster (a real PostgreSQL: Debian's postgresql package, as the cluster tests use). Each runs even
# when one before it failed (hook_bench.py also exits 1 on a missed target); the target fails at
# the end, naming each one that did. LoCoMo (bench/locomo_eval.py) runs when GITMEM_LOCOMO_DIR names its data set, which is not
# shipped (docs/search.md).
BENCH_SCRIPTS := run.py hook_bench.py rebuild_bench.py clone_bench.py serve_bench.py serve_bench.py,--many \
	guard_bench.py console_bench.py search_bench.py sync_bench.py redact_bench.py tlog_bench.py cluster_bench.py

bench-all: $(STAMP)
	@missed=; for s in $(BENCH_SCRIPTS) $${GITMEM_LOCOMO_DIR:+locomo_eval.py}; do \
	  cmd="bench/$$(echo $$s | tr , ' ') $(BENCH_ARGS)"; echo "== $$cmd"; \
	  $(PY) $$cmd || missed="$$missed, $$cmd"; \
	done; \
	[ -n "$$GITMEM_LOCOMO_DIR" ] || echo "bench/locomo_eval.py not run: GITMEM_LOCOMO_DIR is not set (docs/search.md)"; \
	if [ -n "$$missed" ]; then echo "failed: $${missed#, }"; exit 1; fi

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The console screenshots in docs/screenshots/ (README, docs/console.md), taken by the browser tests.
screenshots: $(STAMP)
	GITMEM_SCREENSHOTS=1 $(PY) -m pytest -q tests/server/test_console_browser.py tests/server/test_console_review.py
