# One command per loop: `make demo`, `make test`, `make lint`, `make bench`. CI runs `make test`.
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

bench: $(STAMP)
	$(PY) bench/run.py

# Every benchmark: the targets in docs/architecture.md#performance-targets, hooks, index rebuild, the server, the guard,
# the console, search, session sync, and redaction against
# git filter-repo (installed into the venv here only: it is no dependency of gitmem).
bench-all: bench
	$(PY) bench/hook_bench.py
	$(PY) bench/rebuild_bench.py
	$(PY) bench/serve_bench.py
	$(PY) bench/guard_bench.py
	$(PY) bench/console_bench.py
	$(PY) bench/search_bench.py
	$(PY) bench/sync_bench.py
	$(PY) -m pip install -q git-filter-repo
	$(PY) bench/redact_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The console screenshots in docs/screenshots/ (README, docs/console.md), taken by the browser tests.
screenshots: $(STAMP)
	GITMEM_SCREENSHOTS=1 $(PY) -m pytest -q tests/server/test_console_browser.py tests/server/test_console_review.py
