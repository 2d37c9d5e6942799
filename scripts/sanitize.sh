#!/usr/bin/env bash
# Runs guardjit's tests with its own code built under sanitizers
# (docs/sanitizers.md). LLVM, CPython and torch are used as shipped.
#
#   scripts/sanitize.sh asan [PYTEST_ARGS...]   ASan + UBSan: GoogleTest and lit
#        (build/asan), pytest against the ASan build of guardjit._core (a venv
#        in build/asan/venv, PYTHONMALLOC=malloc so that ASan sees every Python
#        object), then LeakSanitizer over compile/evict cycles
#        (tests/sanitizers/leak_cycles.py): fails on any leak with a frame in
#        guardjit's code. PYTEST_ARGS default to the whole suite.
#   scripts/sanitize.sh tsan [GTEST_FILTER]     TSan: the GoogleTest binaries
#        (build/tsan), the concurrency stress test among them (longer with
#        GUARDJIT_STRESS_SECONDS=N), then the thread tests of pytest against
#        the TSan build of guardjit._core (build/tsan/venv).
#
# Environment: PYTHON (default python3), LEAK_CYCLES (default 5),
# SKIP_SETUP=1 to skip scripts/setup.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
MODE="${1:?usage: scripts/sanitize.sh asan|tsan [args]}"
shift
PY="$(command -v "${PYTHON:-python3}")"
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh
SUPP="$ROOT/tests/sanitizers"
SYMBOLIZER=/usr/lib/llvm-19/bin/llvm-symbolizer
export ASAN_SYMBOLIZER_PATH="$SYMBOLIZER" TSAN_SYMBOLIZER_PATH="$SYMBOLIZER"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

configure_and_build() { # preset
  cmake --preset "$1" -DPython3_EXECUTABLE="$PY" >/dev/null
  cmake --build --preset "$1" -j "$(nproc)"
}

case "$MODE" in
asan)
  configure_and_build asan
  echo "==> asan: GoogleTest and lit (LeakSanitizer on)"
  # PYTHONMALLOC=malloc: pymalloc's arenas are mmap'd, and LeakSanitizer
  # does not scan them, so every object referenced only from another
  # object would be reported. allocator_may_return_null: a test asks CPython
  # for a string of 2^53 bytes and expects a MemoryError.
  PYTHONMALLOC=malloc \
  ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" \
  LSAN_OPTIONS="suppressions=$SUPP/lsan.supp:print_suppressions=0" \
    ctest --preset asan -j 1

  echo "==> asan: guardjit._core with ASan + UBSan into build/asan/venv"
  [ -x build/asan/venv/bin/python ] || "$PY" -m venv --system-site-packages build/asan/venv
  build/asan/venv/bin/python -m pip install -q --disable-pip-version-check \
    --no-build-isolation --no-deps -C build-dir=build/asan/py \
    -C cmake.build-type=RelWithDebInfo \
    -C "cmake.define.GUARDJIT_SANITIZE=address,undefined" . 2>&1 | grep -v "^WARNING" || true
  # CPython is not built with ASan: its runtime must be loaded first.
  PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
  VPY="$ROOT/build/asan/venv/bin/python"

  echo "==> asan: pytest (PYTHONMALLOC=malloc; leaks are checked in the next step)"
  # detect_leaks=0: CPython and torch keep memory to the end of the process by
  # design; the leak step below looks at guardjit's frames only.
  # The child processes the tests start inherit these variables.
  LD_PRELOAD="$PRELOAD" PYTHONMALLOC=malloc \
  ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1" \
    "$VPY" -m pytest -q -p no:cacheprovider tests/python "$@"

  echo "==> asan: LeakSanitizer over ${LEAK_CYCLES:-5} compile/evict cycles"
  # fast_unwind_on_malloc=0: CPython and torch have no frame pointers, and a
  # stack cut at their first frame would hide a guardjit frame above it.
  LOG="$ROOT/build/asan/leak_cycles.log"
  set +e
  LD_PRELOAD="$PRELOAD" PYTHONMALLOC=malloc \
  ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:exitcode=23:fast_unwind_on_malloc=0:malloc_context_size=60" \
  LSAN_OPTIONS="exitcode=23" \
    "$VPY" "$SUPP/leak_cycles.py" "${LEAK_CYCLES:-5}" >"$LOG" 2>&1
  RC=$?
  set -e
  # No suppressions above: leak_report.py applies lsan.supp itself, never to
  # a stack with a guardjit frame, and fails on anything left unexplained.
  "$PY" "$SUPP/leak_report.py" "$LOG" --rc "$RC"
  ;;
tsan)
  configure_and_build tsan
  echo "==> tsan: the GoogleTest binaries (TSan on guardjit's code)"
  # One process per binary; GUARDJIT_STRESS_SECONDS lengthens the stress test.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1:suppressions=$SUPP/tsan.supp"
  for T in build/tsan/tests/unit/*/Guardjit*Tests; do
    echo "--- $T"
    "$T" --gtest_filter="${1:-*}" --gtest_brief=1
  done
  echo "==> tsan: guardjit._core with TSan into build/tsan/venv; the thread tests"
  [ -x build/tsan/venv/bin/python ] || "$PY" -m venv --system-site-packages build/tsan/venv
  build/tsan/venv/bin/python -m pip install -q --disable-pip-version-check \
    --no-build-isolation --no-deps -C build-dir=build/tsan/py \
    -C cmake.build-type=RelWithDebInfo -C "cmake.define.GUARDJIT_SANITIZE=thread" . 2>&1 \
    | grep -v "^WARNING" || true
  # The fork test is left out: TSan does not start threads in a child forked
  # from a multi-threaded process.
  LD_PRELOAD="$(gcc -print-file-name=libtsan.so)" \
    build/tsan/venv/bin/python -m pytest -q -p no:cacheprovider tests/python/test_tier_up.py \
    tests/python/test_threads.py tests/python/test_stance_roots.py -k "not fork"
  ;;
*)
  echo "unknown mode $MODE (asan or tsan)" >&2; exit 2 ;;
esac
