"""Domains: what an agent acts in, each behind the seam `wmrl.domain.Domain`.

`domain: research` (the default): the agent writes programs, a sandbox runs them on data tasks
(`wmrl/domains/research/`). A domain's module offers `load_suite(cfg)` (its tasks, checked before anything
is built) and `make(cfg, suite, run_dir, world, wrap_world_model)` (the domain of one run). The method
reaches a domain only by its name here, so it never imports one.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from wmrl.domain import Domain, Suite, WorldModel

MODULES = {"research": "wmrl.domains.research.domain"}


def _module(cfg) -> Any:
    name = str(cfg.domain)
    if name not in MODULES:
        raise ValueError(f"domain={name!r}: not a domain (valid: {', '.join(MODULES)})")
    return importlib.import_module(MODULES[name])


def load_suite(cfg) -> "Suite":
    """The tasks of `cfg.domain`, as its config sections name them."""
    return _module(cfg).load_suite(cfg)


def make_domain(cfg, suite: "Suite", run_dir: Path, world: int = 1,
                wrap_world_model: "Callable[[WorldModel], WorldModel] | None" = None) -> "Domain":
    """The domain of one run (its executor started, its world model built when `env.mode=wm`); `world`: DDP
    ranks, which share the executor's slots; `wrap_world_model`: a scenario around the world model."""
    return _module(cfg).make(cfg, suite, run_dir, world, wrap_world_model)
