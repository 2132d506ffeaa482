"""Sandbox throughput: the warm zygote pool against a cold `python` subprocess per program.

    python benchmarks/sandbox_throughput.py [--out results.json] [--n 12] [--isolation auto]
    python benchmarks/sandbox_throughput.py --backend ray [--ray-address ADDR]   # Ray overhead vs local

Measures, in one run and on the same programs:
- per-execution overhead (wall time minus the program's own fit+predict time) and executions/s
  of the warm pool with 1 slot, and of a fresh interpreter that imports scikit-learn and runs the
  program without any isolation (the cold baseline is flattered, not handicapped);
- parallel efficiency of 2 slots on fit-dominated programs (a ~1 s RandomForest):
  T(1 slot) / (2 * T(2 slots)) on the same batch.
- a benign ~1 s forest's fit time (measured by the worker) alone, next to a slot keeping one core
  busy with one process, and next to a hostile slot spinning 32 processes in 32 sessions;
- the cost of loading the seccomp filter in a fresh child (where the sandbox has one).
Targets: warm overhead <= 1/8 of cold; 2-slot efficiency >= 0.8; forest next to the hostile
neighbour <= 1.5x its solo time. Run it against two checkouts back to back to compare them.

With `--backend ray` it measures instead the per-execution overhead of the Ray backend (actors of one
slot each, on a local Ray instance or `--ray-address`) against the local backend, on the same light
programs: one at a time through one slot, and a batch through two slots.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from wmrl.config import RayConfig, SandboxConfig  # noqa: E402
from wmrl.domains.research.outcome import Outcome, RawResult, Status, ladder_reward  # noqa: E402
from wmrl.domains.research.sandbox import ExecRequest, make_sandbox  # noqa: E402
from wmrl.domains.research.sandbox.local import LocalSandbox  # noqa: E402

LIGHT = """
from sklearn.linear_model import LogisticRegression
def build():
    return LogisticRegression(max_iter=200)
"""
HEAVY = """
from sklearn.ensemble import RandomForestClassifier
def build():
    return RandomForestClassifier(n_estimators={trees}, random_state=0)
"""
COLD_RUNNER = """
import os, sys, time, json
for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[v] = "1"
import numpy as np, sklearn
ns = {}
exec(compile(open(sys.argv[1]).read(), "program.py", "exec"), ns)
X_train, y_train, X_eval = (np.load(os.path.join(sys.argv[2], n + ".npy")) for n in ("X_train", "y_train", "X_eval"))
model = ns["build"]()
t = time.perf_counter(); model.fit(X_train, y_train); fit_s = time.perf_counter() - t
t = time.perf_counter(); pred = model.predict(X_eval); predict_s = time.perf_counter() - t
np.save(os.path.join(sys.argv[2], "pred.npy"), np.asarray(pred), allow_pickle=False)
print(json.dumps({"fit_s": fit_s, "predict_s": predict_s}))
"""


class SyntheticTask:
    """A classification task made on the fly: no task suite or cache needed to benchmark."""

    interface, method = "estimator", "predict"

    def __init__(self, n: int, features: int, name: str):
        from sklearn.datasets import make_classification

        X, y = make_classification(n_samples=n, n_features=features, n_informative=features // 2, random_state=0)
        cut = int(0.8 * n)
        self._X_train, self._y_train, self._X_eval, self._y_eval = X[:cut], y[:cut], X[cut:], y[cut:]
        self.name, self.time_limit_s = name, 60.0

    def inputs(self, split):
        return self._X_train, self._y_train, self._X_eval

    def fingerprint(self):
        return f"{self.name}-v1"

    def judge(self, raw: RawResult, split: str) -> Outcome:
        acc = float(np.mean(np.asarray(raw.predictions) == self._y_eval))
        return Outcome(task=self.name, status=Status.VALID, metric="accuracy", value=acc, pos=acc,
                       reward=ladder_reward(Status.VALID, acc), split=split)


def warm(task, program: str, n: int, slots: int, isolation: str, batch: bool, backend: str = "local") -> dict:
    cfg = SandboxConfig(backend=backend, slots=slots, isolation=isolation, ray=RayConfig(slots_per_actor=1))
    with make_sandbox(cfg) as sb:
        sb.run([ExecRequest(task, program) for _ in range(slots)])  # start-up and data transfer, not measured
        t0 = time.monotonic()
        if batch:
            outs = sb.run([ExecRequest(task, program) for _ in range(n)])
        else:
            outs = [sb.run([ExecRequest(task, program)])[0] for _ in range(n)]
        total = time.monotonic() - t0
    assert all(o.status is Status.VALID for o in outs), [o.stderr_tail for o in outs if o.status is not Status.VALID]
    return summarize(total, [(o.wall_s, o.fit_s + o.predict_s) for o in outs], n)


def cold(task, program: str, n: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        for name, arr in zip(("X_train", "y_train", "X_eval"), task.inputs("val")):
            np.save(os.path.join(d, name + ".npy"), arr)
        Path(d, "program.py").write_text(program)
        Path(d, "runner.py").write_text(COLD_RUNNER)
        runs = []
        t0 = time.monotonic()
        for _ in range(n):
            t = time.monotonic()
            r = subprocess.run([sys.executable, os.path.join(d, "runner.py"), os.path.join(d, "program.py"), d],
                               capture_output=True, text=True, check=True)
            wall = time.monotonic() - t
            times = json.loads(r.stdout.strip().splitlines()[-1])
            np.load(os.path.join(d, "pred.npy"), allow_pickle=False)
            runs.append((wall, times["fit_s"] + times["predict_s"]))
        total = time.monotonic() - t0
    return summarize(total, runs, n)


def summarize(total: float, runs: list[tuple[float, float]], n: int) -> dict:
    walls = [w for w, _ in runs]
    overheads = [w - c for w, c in runs]
    return {"n": n, "total_s": total, "exec_per_s": n / total, "wall_mean_s": statistics.mean(walls),
            "overhead_mean_s": statistics.mean(overheads), "overhead_median_s": statistics.median(overheads),
            "compute_mean_s": statistics.mean(c for _, c in runs)}


SPIN_1 = "def build():\n    while True:\n        pass\n"
SPIN_32 = """
import os
def build():
    for _ in range(31):
        try:
            if os.fork() == 0:
                break
        except OSError:
            break
    try:
        os.setsid()  # a session each: autogroups would otherwise weigh them as one
    except OSError:
        pass
    while True:
        pass
"""


def neighbours(task, program: str, rounds: int, isolation: str) -> dict:
    """Median fit time of `program` alone, next to one busy process, next to a 32-process hostile slot."""
    spinner = SyntheticTask(200, 4, "bench-spinner")
    spinner.time_limit_s = 6.0
    fits = {"solo": [], "benign_neighbour": [], "hostile_neighbour": []}
    with LocalSandbox(SandboxConfig(slots=2, isolation=isolation)) as sb:
        sb.run([ExecRequest(task, program), ExecRequest(spinner, LIGHT)])
        for _ in range(rounds):  # interleaved: other load on the machine drifts
            fits["solo"].append(sb.run([ExecRequest(task, program)])[0].fit_s)
            for key, hog in (("benign_neighbour", SPIN_1), ("hostile_neighbour", SPIN_32)):
                future = sb.submit([ExecRequest(spinner, hog)])
                time.sleep(1.5)
                fits[key].append(sb.run([ExecRequest(task, program)])[0].fit_s)
                future.result()
    out = {f"{k}_fit_median_s": statistics.median(v) for k, v in fits.items()}
    out["hostile_over_solo"] = out["hostile_neighbour_fit_median_s"] / out["solo_fit_median_s"]
    out["hostile_over_benign"] = out["hostile_neighbour_fit_median_s"] / out["benign_neighbour_fit_median_s"]
    return out


def seccomp_load_ms(n: int = 50) -> float | None:
    """Median time to load the sandbox's seccomp filter in a fresh child process, ms."""
    from wmrl.domains.research.sandbox import _zygote

    if not hasattr(_zygote, "build_filter"):
        return None  # a sandbox without a filter
    filt, why = _zygote.build_filter()
    if filt is None:
        return None
    times = []
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            t = time.perf_counter()
            filt.load()
            os.write(w, json.dumps(time.perf_counter() - t).encode())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        times.append(json.loads(os.read(r, 64)))
        os.close(r)
    return 1000 * statistics.median(times)


def calibrate_trees(task, target_s: float = 1.0) -> int:
    """Trees that make a single-threaded RandomForest fit take about `target_s` here."""
    from sklearn.ensemble import RandomForestClassifier

    X, y, _ = task.inputs("val")
    t = time.perf_counter()
    RandomForestClassifier(n_estimators=20, random_state=0).fit(X, y)
    per_tree = (time.perf_counter() - t) / 20
    return max(10, int(target_s / per_tree))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--n", type=int, default=12, help="executions per light measurement")
    p.add_argument("--heavy-n", type=int, default=6, help="fit-dominated executions per parallel measurement")
    p.add_argument("--isolation", default="auto")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the neighbour measurement")
    p.add_argument("--backend", default="local", choices=("local", "ray"),
                   help="ray: the Ray backend's per-execution overhead against the local backend")
    p.add_argument("--ray-address", default=None, help="--backend ray: an existing cluster (default: a local instance)")
    args = p.parse_args()
    if args.backend == "ray":
        return ray_overhead(args)

    light_task = SyntheticTask(600, 10, "bench-light")
    heavy_task = SyntheticTask(3000, 20, "bench-heavy")
    trees = calibrate_trees(heavy_task)
    heavy = HEAVY.format(trees=trees)
    res = {"cpu_count": os.cpu_count(), "isolation": args.isolation, "rf_trees": trees,
           "loadavg_1min_at_start": os.getloadavg()[0]}  # other work on the machine skews efficiency
    res["light_cold"] = cold(light_task, LIGHT, max(4, args.n // 2))
    res["light_warm_1slot"] = warm(light_task, LIGHT, args.n, 1, args.isolation, batch=False)
    res["light_warm_2slots"] = warm(light_task, LIGHT, args.n, 2, args.isolation, batch=True)
    res["heavy_cold"] = cold(heavy_task, heavy, 2)
    res["heavy_warm_1slot"] = warm(heavy_task, heavy, args.heavy_n, 1, args.isolation, batch=True)
    res["heavy_warm_2slots"] = warm(heavy_task, heavy, args.heavy_n, 2, args.isolation, batch=True)
    res["neighbours"] = neighbours(heavy_task, heavy, args.rounds, args.isolation)
    res["seccomp_load_ms"] = seccomp_load_ms()
    res["loadavg_1min_at_end"] = os.getloadavg()[0]
    res["overhead_ratio_warm_over_cold"] = res["light_warm_1slot"]["overhead_mean_s"] / res["light_cold"]["overhead_mean_s"]
    res["parallel_efficiency_2slots"] = res["heavy_warm_1slot"]["total_s"] / (2 * res["heavy_warm_2slots"]["total_s"])
    res["targets_met"] = {"overhead_le_1/8_cold": res["overhead_ratio_warm_over_cold"] <= 1 / 8,
                          "efficiency_ge_0.8": res["parallel_efficiency_2slots"] >= 0.8,
                          "hostile_neighbour_le_1.5x_solo": res["neighbours"]["hostile_over_solo"] <= 1.5}

    print(f"\ncpu cores: {res['cpu_count']}, isolation: {args.isolation}, RandomForest trees: {trees}, "
          f"load average at start/end: {res['loadavg_1min_at_start']:.1f}/{res['loadavg_1min_at_end']:.1f}\n")
    print("| measurement | n | executions/s | mean wall s | mean overhead s | mean fit+predict s |")
    print("|---|---|---|---|---|---|")
    for key in ("light_cold", "light_warm_1slot", "light_warm_2slots", "heavy_cold", "heavy_warm_1slot",
                "heavy_warm_2slots"):
        r = res[key]
        print(f"| {key} | {r['n']} | {r['exec_per_s']:.2f} | {r['wall_mean_s']:.3f} | {r['overhead_mean_s']:.3f} "
              f"| {r['compute_mean_s']:.3f} |")
    print(f"\nwarm/cold overhead ratio: {res['overhead_ratio_warm_over_cold']:.3f} (target <= 0.125)")
    print(f"parallel efficiency, 2 slots, fit-dominated: {res['parallel_efficiency_2slots']:.2f} (target >= 0.8)")
    nb = res["neighbours"]
    print(f"forest fit, median s: solo {nb['solo_fit_median_s']:.2f}, next to one busy process "
          f"{nb['benign_neighbour_fit_median_s']:.2f}, next to 32 hostile processes {nb['hostile_neighbour_fit_median_s']:.2f} "
          f"(hostile/solo {nb['hostile_over_solo']:.2f}, target <= 1.5; hostile/benign {nb['hostile_over_benign']:.2f})")
    ms = res["seccomp_load_ms"]
    print(f"seccomp filter load per execution: {'n/a' if ms is None else f'{ms:.2f} ms'}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2))


def ray_overhead(args) -> None:
    """Overhead per execution of the Ray backend vs the local one, same programs, same slots."""
    import ray

    ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False,
             num_cpus=None if args.ray_address else 2)
    task = SyntheticTask(600, 10, "bench-light")
    res = {"cpu_count": os.cpu_count(), "isolation": args.isolation, "ray_address": args.ray_address or "local",
           "loadavg_1min_at_start": os.getloadavg()[0]}
    for backend in ("local", "ray"):
        res[f"{backend}_1slot"] = warm(task, LIGHT, args.n, 1, args.isolation, batch=False, backend=backend)
        res[f"{backend}_2slots"] = warm(task, LIGHT, args.n, 2, args.isolation, batch=True, backend=backend)
    ray.shutdown()
    res["loadavg_1min_at_end"] = os.getloadavg()[0]
    for key in ("1slot", "2slots"):
        res[f"ray_extra_overhead_ms_{key}"] = 1000 * (res[f"ray_{key}"]["overhead_mean_s"] - res[f"local_{key}"]["overhead_mean_s"])
        res[f"ray_extra_wall_per_exec_ms_{key}"] = 1000 * (1 / res[f"ray_{key}"]["exec_per_s"] - 1 / res[f"local_{key}"]["exec_per_s"])
    print(f"\ncpu cores: {res['cpu_count']}, isolation: {args.isolation}, ray: {res['ray_address']}, "
          f"load average at start/end: {res['loadavg_1min_at_start']:.1f}/{res['loadavg_1min_at_end']:.1f}\n")
    print("| measurement | n | executions/s | mean wall s | mean overhead s | mean fit+predict s |")
    print("|---|---|---|---|---|---|")
    for key in ("local_1slot", "ray_1slot", "local_2slots", "ray_2slots"):
        r = res[key]
        print(f"| {key} | {r['n']} | {r['exec_per_s']:.2f} | {r['wall_mean_s']:.3f} | {r['overhead_mean_s']:.3f} "
              f"| {r['compute_mean_s']:.3f} |")
    for key, what in (("1slot", "one at a time, 1 slot"), ("2slots", "batch, 2 slots")):
        print(f"ray vs local, {what}: {res[f'ray_extra_overhead_ms_{key}']:+.1f} ms overhead in the slot, "
              f"{res[f'ray_extra_wall_per_exec_ms_{key}']:+.1f} ms wall per execution seen by the trainer")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
