"""The `Sandbox` protocol every backend offers (local warm pool, Ray actors of warm pools), and its factory."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

from wmrl.domains.research.outcome import Outcome


@dataclass
class ExecRequest:
    """One program to run on one task split. `meta` holds free-form tags (step, group,
    trajectory ids...) recorded with the execution in the log."""

    task: Any  # a wmrl.domains.research.tasks Task: name, time_limit_s, interface, method, inputs(split), fingerprint(), judge(raw, split)
    program: str
    split: str = "val"
    meta: dict = field(default_factory=dict)


class SandboxClosed(RuntimeError):
    """The sandbox closed before this execution finished: it has no outcome and is not logged."""


@runtime_checkable
class Sandbox(Protocol):
    """Runs agent programs in isolation and returns judged outcomes, in request order."""

    slots: int  # executions that can run at once

    def submit(self, requests: Sequence[ExecRequest]) -> "Future[list[Outcome]]":
        """Queue the requests; the future resolves to their outcomes in request order."""
        ...

    def run(self, requests: Sequence[ExecRequest]) -> list[Outcome]:
        """submit(requests).result()"""
        ...

    def close(self) -> None:
        """Stop every worker; idempotent."""
        ...

    def __enter__(self) -> "Sandbox": ...

    def __exit__(self, *exc: Any) -> None: ...


def make_sandbox(sandbox_cfg: Any, log_path: str | None = None, private_paths: Sequence[str] = ()) -> Sandbox:
    """The backend named by `sandbox.backend`, built from the `sandbox` config section; `private_paths`
    (task data and answers on the host) are hidden from programs."""
    if sandbox_cfg.backend == "local":
        from wmrl.domains.research.sandbox.local import LocalSandbox

        return LocalSandbox(sandbox_cfg, log_path=log_path, private_paths=private_paths)
    if sandbox_cfg.backend == "ray":
        from wmrl.domains.research.sandbox.ray_backend import RaySandbox

        return RaySandbox(sandbox_cfg, log_path=log_path, private_paths=private_paths)
    raise ValueError(f"unknown sandbox.backend={sandbox_cfg.backend!r}; valid: local, ray")
