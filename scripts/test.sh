#!/usr/bin/env bash
# Sets up (idempotent) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export MLFLOW_DISABLE_TELEMETRY=true
exec python3 -m pytest -q tests
