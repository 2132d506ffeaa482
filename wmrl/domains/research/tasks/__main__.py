"""`python -m wmrl.domains.research.tasks [--json] [key=value ...]` lists tasks;
`python -m wmrl.domains.research.tasks leaderboard [--task NAME] [--rebuild] [key=value ...]` builds and shows leaderboards;
`python -m wmrl.domains.research.tasks import FOLDER [--name N] [--kind K] [--metric M] [key=value ...]` registers a prepared
competition folder (ours or MLE-bench's) as a script task.

`key=value` are config overrides as for train.py (e.g. task.cache_dir=/tmp/c, experiment=NAME).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import List

from wmrl.domains.research.tasks.spec import TaskError
from wmrl.domains.research.tasks.suite import TaskSuite, load_suite

COMMANDS = ("list", "leaderboard", "import")


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wmrl.domains.research.tasks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.add_argument("--task", action="append", default=[], help="leaderboard: only this task (repeatable)")
    parser.add_argument("--rebuild", action="store_true", help="leaderboard: refit the references")
    parser.add_argument("--name", help="import: the task's name (default: the folder's)")
    parser.add_argument("--kind", choices=("classification", "regression"), help="import: the task's kind")
    parser.add_argument("--metric", help="import: a scikit-learn scorer name (default accuracy / r2)")
    parser.add_argument("--target", help="import: the target column (default: sample_submission's second)")
    parser.add_argument("--id-column", help="import: the id column (default: sample_submission's first)")
    parser.add_argument("--time-limit-s", type=float, help="import: seconds for the whole program")
    parser.add_argument("words", nargs="*", metavar="[list|leaderboard|import FOLDER] [key=value ...]",
                        help="command (default list), then config overrides")
    args = parser.parse_intermixed_args(argv)
    command = args.words.pop(0) if args.words and args.words[0] in COMMANDS else "list"
    folder = args.words.pop(0) if command == "import" and args.words and "=" not in args.words[0] else None
    if command == "import" and folder is None:
        parser.error("import needs a FOLDER")
    bad = [w for w in args.words if "=" not in w]
    if bad:
        parser.error(f"unknown command or override {bad[0]!r}; commands: {', '.join(COMMANDS)}; overrides are key=value")
    from wmrl.config import ConfigError, load_config

    try:
        task_cfg = load_config(args.words).task
        if command == "import":
            from wmrl.domains.research.tasks.importer import fields_from_args, import_folder

            path = import_folder(folder, task_cfg, fields_from_args(args))
            print(f"registered task {path.parent.name!r} at {path.parent}; train on it with task.train=[{path.parent.name}]")
            return 0
        suite = load_suite(task_cfg)
        if command == "leaderboard":
            _leaderboards(suite, args.task or suite.names(), args.rebuild, args.json)
        else:
            _listing(suite, args.json)
    except (TaskError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _listing(suite: TaskSuite, as_json: bool) -> None:
    train = {t.name for t in suite.train_tasks()}
    rows = []
    for task in suite:
        s = task.splits()
        rows.append({"name": task.name, "dataset": task.dataset, "kind": task.kind, "metric": task.metric,
                     "n_train": len(s.y_train), "n_val": len(s.y_val), "n_test": len(s.y_test),
                     "n_features": s.X_train.shape[1], "time_limit_s": task.time_limit_s,
                     "held_out": task.held_out, "train": task.name in train, "interface": task.interface})
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    cols = ["name", "kind", "interface", "metric", "n_train", "n_val", "n_test", "n_features", "time_limit_s", "held_out", "dataset"]
    _table([[str(r[c]) for c in cols] for r in rows], cols)


def _leaderboards(suite: TaskSuite, names: List[str], rebuild: bool, as_json: bool) -> None:
    tasks = [suite.get(n) for n in names]  # unknown names fail before any fitting
    boards = [t.leaderboard_table(rebuild=rebuild) for t in tasks]
    if as_json:
        print(json.dumps(boards, indent=1))
        return
    for board in boards:
        print(f"\n{board['task']} ({board['metric']}, built {board['built_at']})")
        refs = sorted(board["references"], key=lambda r: r["val"])
        _table([[r["name"], f"{r['val']:.4f}", f"{r['test']:.4f}", f"{r['fit_s']:.2f}"] for r in refs],
               ["reference", "val", "test", "fit_s"])


def _table(rows: List[List[str]], header: List[str]) -> None:
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(x.ljust(w) for x, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    sys.exit(main())
