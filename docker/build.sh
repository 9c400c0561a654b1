#!/bin/sh
# The build steps of the Dockerfile, also run by tests/test_packaging.py: build the wheel from the
# checkout in $1 (default .) and install it with the server extra into the Python $PYTHON (default
# python3). PIP_ARGS adds pip options (the test passes --no-deps --no-index: no network).
set -eu
SRC="${1:-.}"
PYTHON="${PYTHON:-python3}"
OUT="$(mktemp -d)"
"$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$OUT" "$SRC"
WHEEL="$(ls "$OUT"/gitmem_store-*.whl)"
# shellcheck disable=SC2086
"$PYTHON" -m pip install --quiet ${PIP_ARGS:-} "$WHEEL${EXTRAS:-[server]}"
rm -rf "$OUT"
"$PYTHON" -m gitmem --version
