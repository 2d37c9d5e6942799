#!/usr/bin/env bash
# Regenerates tests/corpus/*.gir: the Guard IR of every corpus model
# (guardjit.export.CORPUS) as the installed guardjit records it.
#
#   scripts/regen-corpus.sh [OUT_DIR]        (default: tests/corpus)
#   PYTHON=/path/to/venv/bin/python scripts/regen-corpus.sh
#
# The output is deterministic (guardjit/stable_text.py; one process per
# model with PYTHONHASHSEED=0): run it twice and `git diff` shows nothing.
# The files are written to a temporary directory first, so a failed run
# leaves the old corpus in place; on success stale files are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${1:-tests/corpus}
mkdir -p "$OUT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/guardjit-corpus.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
"$PY" -m guardjit export --corpus all --out "$TMP" >/dev/null
rm -f "$OUT"/*.gir
cp "$TMP"/*.gir "$OUT"/
for f in "$OUT"/*.gir; do
  printf '%8d bytes %5d guards  %s\n' "$(wc -c <"$f")" "$(grep -c '^  guard ' "$f")" "$f"
done
