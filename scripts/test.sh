#!/usr/bin/env bash
# Every test: set up, build the C++ tree with tests, then run ctest
# (GoogleTest binaries, lit tests and pytest against real torch).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
cmake -S . -B build/dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DGUARDJIT_BUILD_TESTS=ON \
  -DGUARDJIT_BUILD_PYTHON=OFF -DPython3_EXECUTABLE="$(command -v "$PY")" >/dev/null
cmake --build build/dev -j "$(nproc)"
ctest --test-dir build/dev --output-on-failure -j 1 "$@"
