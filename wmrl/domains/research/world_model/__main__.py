"""python -m wmrl.domains.research.world_model fit --log runs/X/executions.sqlite --out wm.pt [--epochs N] [key=value ...]
python -m wmrl.domains.research.world_model pretrain [--programs-per-task N] [--epochs E] [--log LOG ...] [key=value ...]

`fit` fits a world model offline on every execution of a run's log and saves it (usable as
`world_model.init=PATH`); `pretrain` executes grammar programs on the training tasks and fits one on
them (and on earlier logs' training-task rows), cached, with its one-time cost (see pretrain.py). Each row's task descriptor comes from `meta["descriptor"]` when the
run recorded it, else from the task registry, else it is just `task=NAME`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from wmrl.domains.research.outcome import Outcome
from wmrl.domains.research.world_model.base import WMQuery


def examples_from_log(rows: list[dict], task_cfg=None) -> list[tuple[WMQuery, Outcome]]:
    """(query, outcome) pairs of an execution log's rows (see wmrl.domains.research.sandbox.log.read_log)."""
    known: dict[str, tuple[str, str]] = {}  # task -> (descriptor, interface) from this install's suite

    def task_info(task: str) -> tuple[str, str]:
        if task not in known:
            try:
                from wmrl.domains.research.tasks import load_suite
                t = load_suite(task_cfg).get(task)
                known[task] = t.descriptor(), t.interface
            except Exception:  # a task this install does not know: its name still helps
                known[task] = f"task={task}", "estimator"
        return known[task]

    out = []
    for row in rows:
        outcome = Outcome.from_dict(row["outcome"])
        meta = row.get("meta") or {}
        descriptor, interface = task_info(row["task"])
        query = WMQuery(task=row["task"], descriptor=meta.get("descriptor") or descriptor, program=row["program"],
                        history=meta.get("history", "") or "", metric=outcome.metric, interface=interface)
        out.append((query, outcome))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wmrl.domains.research.world_model", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("fit", help="fit a world model offline on an execution log")
    fit.add_argument("--log", required=True, help="execution log (SQLite) of any run")
    fit.add_argument("--out", required=True, help="where to save the fitted world model")
    fit.add_argument("--epochs", type=int, default=20, help="passes over the log")
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("overrides", nargs="*", help="world_model keys, e.g. members=8 lr=3e-4 (init= continues a model)")
    pre = sub.add_parser("pretrain", help="execute grammar programs on the training tasks and fit on them (cached)")
    pre.add_argument("--programs-per-task", type=int, default=24)
    pre.add_argument("--epochs", type=int, default=20)
    pre.add_argument("--log", action="append", default=[], help="also an earlier run's execution log (repeatable)")
    pre.add_argument("overrides", nargs="*", help="train.py config overrides, e.g. experiment=smoke task.cache_dir=...")
    args = parser.parse_args(argv)
    if args.command == "pretrain":
        from wmrl.config import ConfigError, load_config
        from wmrl.domains.research.world_model.pretrain import pretrain

        try:
            cfg = load_config(args.overrides)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(json.dumps(pretrain(cfg, args.programs_per_task, args.epochs, args.log), indent=1))
        return 0

    from omegaconf import OmegaConf

    from wmrl.domains.research.sandbox.log import read_log
    from wmrl.domains.research.world_model.factory import make_world_model

    wm_cfg = OmegaConf.to_container(OmegaConf.from_dotlist(args.overrides)) if args.overrides else {}
    examples = examples_from_log(read_log(args.log))
    wm = make_world_model(wm_cfg, seed=args.seed)
    start = time.perf_counter()
    stats = wm.fit(examples, epochs=args.epochs)
    stats["wm/fit_s"] = time.perf_counter() - start
    wm.save(args.out)
    print(json.dumps({"rows": len(examples), "out": args.out, **stats}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
