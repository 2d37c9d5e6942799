#!/usr/bin/env bash
# Every test: set up, build the C++ tree with tests, then run ctest
# (GoogleTest binaries, lit tests and pytest against real torch).
#   ./scripts/test.sh                 with the first python3's torch (2.13.0 on a fresh machine)
#   TORCH=2.14.1 ./scripts/test.sh    with torch 2.14.1, in a virtual environment of its own
# Extra arguments go to ctest (e.g. -R pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/torch-env.sh
# The other release's installed guardjit, if any: test_compat.py proves that
# a _core built for it refuses this torch.
if [ -z "${GUARDJIT_OTHER_PYTHON:-}" ]; then
  for other in "$(command -v python3)" "$HOME"/.cache/guardjit/venv-torch-*/bin/python; do
    if [ -x "$other" ] && [ "$other" != "$PY" ] \
       && "$other" -c "import guardjit._build_info" 2>/dev/null; then
      export GUARDJIT_OTHER_PYTHON=$other
      break
    fi
  done
fi
echo "==> testing with torch $GJ_TORCH ($PY)"
cmake -S . -B "build/dev-$GJ_TAG" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGUARDJIT_BUILD_TESTS=ON \
  -DGUARDJIT_BUILD_PYTHON=OFF -DPython3_EXECUTABLE="$PY" >/dev/null
cmake --build "build/dev-$GJ_TAG" -j "$(nproc)"
ctest --test-dir "build/dev-$GJ_TAG" --output-on-failure -j 1 "$@"
