#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for SECONDS (default
# 60): gir-fuzzer (.gir parser + verifier + printer round trip) and
# torch-log-fuzzer (the TORCH_LOGS=guards importer).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Environment: BUILD_DIR (default build-fuzz), CXX (default clang++-19),
# JOBS (libFuzzer -jobs, default 1), FUZZ_ARGS (extra libFuzzer flags).
# Corpora grow in $BUILD_DIR/corpus/<target>, seeded from tests/lit inputs;
# crashes are written to $BUILD_DIR/crashes/<target>/. Turn each crash into a
# regression test under tests/lit/Fuzz (see tests/fuzz/README.md). clang-19 and
# libFuzzer (libclang-rt-19-dev) are installed with apt when missing.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(gir-fuzzer torch-log-fuzzer)
BUILD_DIR="${BUILD_DIR:-$ROOT/build-fuzz}"
CXX="${CXX:-clang++-19}"
CC="${CC:-clang-19}"
JOBS="${JOBS:-1}"
PARALLEL=""
# With -jobs libFuzzer writes to fuzz-N.log instead of stderr: only when asked.
[ "$JOBS" -gt 1 ] && PARALLEL="-jobs=$JOBS -workers=$JOBS"

# libFuzzer comes with clang: Debian's clang-19 and its runtimes
# (libclang-rt-19-dev), the same LLVM release as llvm-19-dev.
if [ "$CXX" = clang++-19 ] && { ! command -v clang++-19 >/dev/null 2>&1 ||
                                 ! dpkg -s libclang-rt-19-dev >/dev/null 2>&1; }; then
  echo "==> apt: installing clang-19 libclang-rt-19-dev (libFuzzer)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang-19 libclang-rt-19-dev >/dev/null
fi

cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_C_COMPILER="$CC" \
  -DGUARDJIT_BUILD_FUZZERS=ON -DGUARDJIT_BUILD_TESTS=OFF \
  -DGUARDJIT_BUILD_PYTHON=OFF -DGUARDJIT_BUILD_TOOLS=OFF >/dev/null
cmake --build "$BUILD_DIR" -j2 --target "${TARGETS[@]}"

for T in "${TARGETS[@]}"; do
  CORPUS="$BUILD_DIR/corpus/$T"
  CRASHES="$BUILD_DIR/crashes/$T"
  mkdir -p "$CORPUS" "$CRASHES"
  case "$T" in
    # -max_len: long lines for the parser; logs are cut to 16 KiB so that the
    # importer runs at a useful rate (a 16 KiB line is still a depth-8192 tree).
    gir-fuzzer) MAXLEN=65536
      SEEDS=$(find "$ROOT/tests/lit" -name '*.gir' -o -path '*/IR/Inputs/*' -type f) ;;
    torch-log-fuzzer) MAXLEN=16384
      SEEDS=$(find "$ROOT/tests/lit/Import" -type f) ;;
    *) echo "unknown target $T" >&2; exit 2 ;;
  esac
  for F in $SEEDS; do cp -n "$F" "$CORPUS/seed-$(basename "$F")" 2>/dev/null || true; done
  echo "== $T: ${SECONDS_PER_TARGET}s, corpus $(ls "$CORPUS" | wc -l) files"
  # -timeout 10: a hang is a bug.
  "$BUILD_DIR/tests/fuzz/$T" "$CORPUS" -dict="$ROOT/tests/fuzz/$T.dict" \
    -max_total_time="$SECONDS_PER_TARGET" -max_len="$MAXLEN" -timeout=10 \
    -rss_limit_mb=2048 $PARALLEL \
    -artifact_prefix="$CRASHES/" -print_final_stats=1 ${FUZZ_ARGS:-} \
    2>&1 | tee "$BUILD_DIR/$T.log" | grep -E "^#[0-9]+.*(pulse|DONE)|stat::|ERROR|SUMMARY|==[0-9]+==" || true
  echo "== $T: corpus now $(ls "$CORPUS" | wc -l) files, crashes: $(ls "$CRASHES" | wc -l)"
done
