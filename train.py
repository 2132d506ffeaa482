"""wmrl: post-train a research agent with GRPO, a world model standing in for most executions.

    python train.py [experiment=NAME] [key=value ...]
    python train.py --help            every config key, its default and meaning
    python train.py --print-config    the resolved config, then exit
"""
from __future__ import annotations

import sys


def _usage() -> str:
    from wmrl.config import describe, presets

    rows = describe()
    width = max(len(k) for k, *_ in rows)
    out = [__doc__.strip(), "", f"presets (experiment=NAME): {', '.join(presets())}", "", "config keys:"]
    for key, typ, default, meaning in rows:
        if typ == "section":
            out.append(f"  {key:<{width}}  {meaning}")
        else:
            out.append(f"  {key:<{width}}  {meaning} [{typ}, default {default}]")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(_usage())
        return 0
    print_only = "--print-config" in argv
    args = [a for a in argv if a != "--print-config"]
    bad = [a for a in args if a.startswith("-")]
    if bad:
        print(f"error: unknown flag {bad[0]!r}; flags: --help, --print-config", file=sys.stderr)
        return 2
    from wmrl.config import ConfigError, load_config

    try:
        cfg = load_config(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if print_only:
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(cfg), end="")
        return 0
    from callbacks.checkpoint import ResumeError
    from wmrl.recipe import train
    from wmrl.stop import Stopped

    try:
        train(cfg)
    except Stopped as e:
        print(f"wmrl: {e}", file=sys.stderr)
        return e.code
    except ResumeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
