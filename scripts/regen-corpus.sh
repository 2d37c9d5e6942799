#!/usr/bin/env bash
# Regenerates tests/corpus/torch-<release>/*.gir: the Guard IR of every corpus
# model (guardjit.export.CORPUS) as the installed guardjit records it, under
# the interpreter's torch release.
#
#   scripts/regen-corpus.sh [OUT_DIR]   (default: tests/corpus/torch-<release>)
#   TORCH=2.14.1 scripts/regen-corpus.sh      (that release's environment)
#   PYTHON=/path/to/venv/bin/python scripts/regen-corpus.sh
#
# The output is deterministic (guardjit/stable_text.py; one process per
# model with PYTHONHASHSEED=0): run it twice and `git diff` shows nothing.
# The files are written to a temporary directory first, so a failed run
# leaves the old corpus in place; on success stale files are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/torch-env.sh
release=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
OUT=${1:-tests/corpus/torch-$release}
mkdir -p "$OUT"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/guardjit-corpus.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
"$PY" -m guardjit export --corpus all --out "$TMP" >/dev/null
rm -f "$OUT"/*.gir
cp "$TMP"/*.gir "$OUT"/
for f in "$OUT"/*.gir; do
  printf '%8d bytes %5d guards  %s\n' "$(wc -c <"$f")" "$(grep -c '^  guard ' "$f")" "$f"
done
