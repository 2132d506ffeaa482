#!/usr/bin/env bash
# Installs wmrl and what it needs on a fresh machine: bubblewrap for the sandbox, the CPU
# torch wheel (never a multi-GB CUDA build on a CPU-only machine), then the package.
set -euo pipefail
cd "$(dirname "$0")/.."
# System packages: bubblewrap, and libseccomp2 (the library pyseccomp's seccomp filter loads at run time).
MISSING=""
command -v bwrap >/dev/null 2>&1 || MISSING="$MISSING bubblewrap"
ldconfig -p 2>/dev/null | grep 'libseccomp\.so\.2' >/dev/null || MISSING="$MISSING libseccomp2"
if [ -n "$MISSING" ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq $MISSING >/dev/null
fi
PY=${PYTHON:-python3}
if ! $PY -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    $PY -m pip install -q torch
  else
    $PY -m pip install -q torch==2.13.0
  fi
fi
$PY -m pip install -q -e ".[${WMRL_EXTRAS:-dev}]"  # WMRL_EXTRAS=dev,test-checkpoint: also the real test checkpoint
