#!/usr/bin/env bash
# The main job: set up, then compile the built-in models with guardjit and
# compare its guard checks with Dynamo's. Extra arguments go to
# `python -m guardjit demo` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/torch-env.sh  # TORCH=2.14.1 runs the demo on that release
exec "$PY" -m guardjit demo "$@"
