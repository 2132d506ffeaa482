"""How much of a run's real outcomes the world model's deterministic checks decide, and whether they are right.

    python benchmarks/static_checks.py RUN_DIR/executions.sqlite [more logs ...] [--misses 10]

Replays every executed training program of the logs (held-out evaluation rows left out) through
`wmrl.domains.research.world_model.static.decided_status`, the checks that run before the world model's network, and
prints a table: real status x (decided status, or "model" when the network is asked). A decided status
that differs from the real one is a certain wrong prediction (reward at zero variance); a real runtime
error left to the model is one the network must guess. Run it at two commits on the same logs to see
what a change to the checks moves.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wmrl.domains.research.outcome import error_line  # noqa: E402
from wmrl.domains.research.sandbox.log import read_log  # noqa: E402
from wmrl.domains.research.world_model.static import decided_status  # noqa: E402


def tally(rows: list[dict], interface: str) -> tuple[collections.Counter, collections.Counter]:
    """(real status, decision) counts, and the error lines of real runtime errors left to the model."""
    table, misses = collections.Counter(), collections.Counter()
    for r in rows:
        decided, _ = decided_status(r["program"], interface)
        table[(r["status"], decided.value if decided else "model")] += 1
        if r["status"] == "runtime_error" and decided is None:
            tail = r["outcome"].get("stderr_tail", "") if isinstance(r["outcome"], dict) else ""
            misses[error_line(tail)[:110]] += 1
    return table, misses


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logs", nargs="+", type=Path, help="execution logs (executions.sqlite of runs)")
    p.add_argument("--misses", type=int, default=10, help="most common real runtime errors left to the model")
    p.add_argument("--interface", choices=["estimator", "script"], default="estimator", help="the logs' tasks' interface")
    args = p.parse_args(argv)
    rows = [r for log in args.logs for r in read_log(log) if r.get("split") != "test"]
    table, misses = tally(rows, args.interface)
    wrong = sum(n for (real, decided), n in table.items() if decided not in ("model", real))
    errors = sum(n for (real, _), n in table.items() if real == "runtime_error")
    print(f"{len(rows)} executed training programs in {len(args.logs)} log(s)\n")
    print("| real status | decided as | programs |\n|---|---|---|")
    for (real, decided), n in sorted(table.items(), key=lambda kv: -kv[1]):
        print(f"| {real} | {decided} | {n} |")
    print(f"\ndecided wrongly: {wrong}; real runtime errors left to the model: {misses.total()} of {errors}")
    for line, n in misses.most_common(args.misses):
        print(f"  {n:5d}  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
