#!/usr/bin/env bash
# Installs everything guardjit needs on a fresh Debian 12 machine and builds
# the Python package. Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(llvm-19-dev llvm-19-tools libzstd-dev zlib1g-dev libgtest-dev libgmock-dev
              libbenchmark-dev libspdlog-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> apt: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# TORCH=2.14.1 sets up that release in a virtual environment of its own
# (scripts/torch-env.sh); the default is the first python3 and its torch.
source scripts/torch-env.sh
echo "==> pip ($PY): torch==$GJ_TORCH, build/test tools and the benchmark's model and plot libraries"
# torch is pinned to an exact release: a bare "torch" would download a
# multi-GB CUDA build, and an interpreter's torch is never replaced.
pip_quiet() {  # pip without its "WARNING: Location ..." lines; fails when pip fails
  local log rc=0
  log=$(mktemp)
  "$PY" -m pip "$@" >"$log" 2>&1 || rc=$?
  grep -v "^WARNING" "$log" || true
  rm -f "$log"
  return $rc
}
pip_quiet install -q --disable-pip-version-check "torch==$GJ_TORCH" "scikit-build-core>=0.10" \
  "pybind11>=3.0" ninja "cmake>=3.25" pytest hypothesis lit transformers matplotlib tqdm tlparse

echo "==> building and installing guardjit against torch $GJ_TORCH (first build takes a few minutes)"
# No build isolation: the build compiles against the installed torch's headers.
# One build directory per torch release, so the two never share a CMake cache.
pip_quiet install -q --disable-pip-version-check --no-build-isolation --no-deps \
  --config-settings=build-dir="build/py-$GJ_TAG" . \
  || { echo "guardjit failed to build against torch $GJ_TORCH" >&2; exit 1; }
"$PY" -c "import guardjit, guardjit._core; assert guardjit.enabled()" \
  || { echo "guardjit failed to build or import" >&2; exit 1; }
# pyenv shims expose new console scripts (guard-ir-opt) only after a rehash.
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
