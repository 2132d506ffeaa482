#!/usr/bin/env bash
# The GPU path on a machine with one NVIDIA GPU, in under 8 minutes:
#   1. scripts/gpu_check.py with HF generation on CUDA: one update, weights seen by the generator, peak GPU memory;
#   2. the same with generation.backend=vllm where vLLM is installed (pip install 'wmrl[vllm]');
#   3. train.py experiment=smoke on the GPU, its steps/s from the run's summary.
# Usage: bash scripts/gpu_check.sh [key=value ...]   (e.g. policy.model=DIR; passed to every part)
set -uo pipefail
cd "$(dirname "$0")/.."
export MLFLOW_DISABLE_TELEMETRY=true
OUT=${OUT:-$(mktemp -d)}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "no NVIDIA GPU"; exit 1; }
python -c "import torch; assert torch.cuda.is_available(), 'torch has no CUDA: pip install torch (a CUDA build)'; print('torch', torch.__version__, 'cuda', torch.version.cuda)" || exit 1
status=0
echo "== 1. HF generation on CUDA"
timeout 150 python scripts/gpu_check.py generation.backend=hf "task.cache_dir=$OUT/cache" "$@" || status=1
echo "== 2. vLLM generation"
if python -c "import vllm" 2>/dev/null; then
  timeout 210 python scripts/gpu_check.py generation.backend=vllm "task.cache_dir=$OUT/cache" "$@" || status=1
else
  echo "vllm not installed: skipped (pip install 'wmrl[vllm]')"
fi
echo "== 3. train.py experiment=smoke on the GPU"
start=$(date +%s)
timeout 210 python train.py experiment=smoke trainer.accelerator=gpu "run_dir=$OUT/runs" "task.cache_dir=$OUT/cache" \
  "logger.tracking_uri=sqlite:///$OUT/ml.db" trainer.progress_bar=false "$@" > "$OUT/smoke.log" 2>&1 || { status=1; tail -30 "$OUT/smoke.log"; }
wall=$(( $(date +%s) - start ))
python - "$OUT" "$wall" <<'PY'
import json, sys
from pathlib import Path
out, wall = Path(sys.argv[1]), int(sys.argv[2])
summaries = sorted(out.glob("runs/*/summary.json"))
if not summaries:
    print(f"smoke: no summary ({wall} s); see {out}/smoke.log"); sys.exit(0)
s = json.loads(summaries[-1].read_text())
steps = s.get("steps") or 0
cost = s.get("train_cost_s")
print(json.dumps({"smoke_wall_s": wall, "steps": steps, "training_s": cost,
                  "steps_per_s": round(steps / cost, 3) if steps and cost else None}))
PY
echo "results and logs: $OUT"
exit $status
