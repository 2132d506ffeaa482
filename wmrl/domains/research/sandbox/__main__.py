"""Run programs on a task through one sandbox and print one JSON outcome per line.

    python -m wmrl.domains.research.sandbox --task NAME PROGRAM.py [PROGRAM2.py ...] [--split val|test]
                           [--log PATH] [key=value config overrides]

Exit 0 whenever the programs were judged (whatever their status); 2 for usage errors.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

USAGE_ERROR = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wmrl.domains.research.sandbox", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True, help="task name (see `python -m wmrl.domains.research.tasks`)")
    parser.add_argument("--split", choices=("val", "test"), default="val", help="split the predictions are scored on")
    parser.add_argument("--log", default=None, help="append the executions to this SQLite execution log")
    parser.add_argument("items", nargs="+", metavar="PROGRAM.py|key=value",
                        help="program files, and config overrides such as sandbox.slots=2")
    args = parser.parse_args(argv)
    overrides = [i for i in args.items if "=" in i and not Path(i).exists()]
    programs = [Path(i) for i in args.items if i not in overrides]
    if not programs:
        parser.error("no program file given")
    missing = [str(p) for p in programs if not p.is_file()]
    if missing:
        print(f"error: program file not found: {', '.join(missing)}", file=sys.stderr)
        return USAGE_ERROR

    from wmrl.config import ConfigError, load_config
    from wmrl.domains.research.sandbox.base import ExecRequest, make_sandbox
    from wmrl.domains.research.sandbox.isolation import IsolationUnavailable

    try:
        cfg = load_config(overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR
    from wmrl.domains.research.tasks import TaskError, load_suite

    try:
        suite = load_suite(cfg.task)
        task = suite.get(args.task)
    except TaskError as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR
    try:
        sandbox = make_sandbox(cfg.sandbox, log_path=args.log, private_paths=suite.private_paths())
    except IsolationUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR
    with sandbox:
        # undecodable bytes kept as escapes Python's parser refuses (a syntax error, as `python` itself reports)
        requests = [ExecRequest(task, p.read_bytes().decode("utf-8", "surrogateescape"), split=args.split,
                                meta={"file": str(p)}) for p in programs]
        for path, outcome in zip(programs, sandbox.run(requests)):
            print(json.dumps(strict_json({"program": str(path), **outcome.to_dict()}), allow_nan=False), flush=True)
    return 0


def strict_json(value):
    """`value` with every non-finite float replaced by null: NaN and Infinity are not JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
