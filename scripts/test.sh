#!/usr/bin/env bash
# Sets up (idempotent) and runs the whole test suite, then the hostile-program tests once more with
# wmrl installed in a fresh virtualenv (how most users install it; the sandbox, and the host-side readers of
# agent text with their catalog of the installed libraries, must work there too).
set -euo pipefail
cd "$(dirname "$0")/.."
WMRL_EXTRAS=dev,test-checkpoint bash scripts/setup.sh  # system-wide: with the real checkpoint of the slow test
export MLFLOW_DISABLE_TELEMETRY=true
python3 -m pytest -q tests
VENV="$(mktemp -d /tmp/wmrl-ci-venv.XXXXXX)"
trap 'rm -rf "$VENV"' EXIT
chmod 755 "$VENV"  # mktemp makes it 0700: the sandbox's unprivileged slot uid must reach the venv's packages
python3 -m venv "$VENV"
PYTHON="$VENV/bin/python" bash scripts/setup.sh
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_sandbox_hostile.py tests/test_sandbox_disguise.py \
  tests/test_host_fuzz.py tests/test_host_attacks.py
