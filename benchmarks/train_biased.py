"""`python train.py` with a class-correlated world-model error installed around the world model:

    python benchmarks/train_biased.py --bias dummy=0.4[,forest=0.2] [experiment=NAME] [key=value ...]

The speedup benchmark's correlated scenario runs its world-model arms through this script.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wmrl.config import ConfigError, load_config  # noqa: E402


def parse_bias(text: str) -> dict[str, float]:
    """"dummy=0.4,forest=0.2" -> {"dummy": 0.4, "forest": 0.2}"""
    out = {}
    for kv in filter(None, (p.strip() for p in text.split(","))):
        cls, sep, value = kv.partition("=")
        if not sep:
            raise ValueError(f"--bias entry {kv!r} is not CLASS=OFFSET")
        out[cls.strip()] = float(value)
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bias", required=True, help="CLASS=OFFSET,... added to the world model's reward")
    args, overrides = p.parse_known_args(argv)
    try:
        bias = parse_bias(args.bias)
        cfg = load_config(overrides)
    except (ValueError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from wmrl.recipe import train
    from wmrl.domains.research.world_model.biased import BiasedWorldModel

    train(cfg, wrap_world_model=lambda wm: BiasedWorldModel(wm, bias))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
