"""A stop asked for by SIGTERM: long waits give up at once instead of at the end of what they wait for.

Lightning stops a fit on SIGTERM at the next step boundary, but an evaluation (minutes of real executions)
or a step waiting on the sandbox runs to its end first, longer than a scheduler's grace period (the
benchmark's is 60 s). `on_sigterm` records the request (Lightning chains a handler installed before `fit`);
`wait` and `check` raise `Stopped` once it is set. A stopped run resumes from its last checkpoint.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process that SIGTERM ended
POLL_S = 0.2

_requested = threading.Event()


class Stopped(SystemExit):
    """Raised where a stop was asked for; ends the process with EXIT_CODE."""

    def __init__(self, message: str = "stopped by SIGTERM"):
        super().__init__(EXIT_CODE)
        self.message = message

    def __str__(self) -> str:
        return self.message


def requested() -> bool:
    return _requested.is_set()


def check() -> None:
    if _requested.is_set():
        raise Stopped()


def wait(future, poll_s: float = POLL_S):
    """`future.result()`, raising `Stopped` within `poll_s` of a stop request instead."""
    while True:
        check()
        try:
            return future.result(timeout=poll_s)
        except TimeoutError:
            if future.done():  # the future's own TimeoutError, not the wait's
                raise


@contextmanager
def on_sigterm() -> Iterator[None]:
    """While inside: SIGTERM requests a stop (and still reaches the handler installed before). Only the
    main thread can install handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _requested.clear()
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum, frame) -> None:
        _requested.set()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
