"""Real executions that overlap training: every submission of a run shares one limit on how many run at
once, so anchors of several steps in flight together still leave the trainer its cores (on 2 cores, two
background executions slowed the policy update by 40 %). While the trainer waits for a submission
(`hurry`), every sandbox slot is free to use until it is done.

Written by hand rather than with `concurrent.futures`: its pools have a fixed size, and the limit here
changes while work is queued.
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Callable, Sequence


class BackgroundExecutions:
    """One submission's outcomes, in the order of its items."""

    def __init__(self, pool: "BackgroundPool | None", n: int, future: Future | None = None):
        self.pool, self.future = pool, future if future is not None else Future()
        self.outcomes: list = [None] * n
        self.left = n

    def done(self) -> bool:
        return self.future.done()

    def hurry(self) -> None:
        """The trainer is waiting for these: the rest may use every sandbox slot."""
        if self.pool is not None:
            self.pool.hurry(self)

    def result(self, timeout: float | None = None) -> list:
        return self.future.result(timeout)


class BackgroundPool:
    """Runs submitted items one execution at a time, first in first out, at most `slots` at once
    (`all_slots` while a hurried submission is unfinished). `execute(items, split)` starts executions
    and returns a future of their outcomes."""

    def __init__(self, execute: Callable[[Sequence, str], Future], slots: int, all_slots: int):
        self.execute, self.slots, self.all_slots = execute, slots, max(slots, all_slots)
        self.cv = threading.Condition()
        self.queue: deque = deque()
        self.running = 0
        self.hurried: set[BackgroundExecutions] = set()
        self.thread: threading.Thread | None = None

    def submit(self, items: Sequence, split: str) -> BackgroundExecutions:
        handle = BackgroundExecutions(self, len(items))
        if not items:
            handle.future.set_result([])
            return handle
        with self.cv:
            self.queue.extend((handle, k, item, split) for k, item in enumerate(items))
            if self.thread is None:
                self.thread = threading.Thread(target=self._feed, daemon=True, name="background-executions")
                self.thread.start()
            self.cv.notify_all()
        return handle

    def hurry(self, handle: BackgroundExecutions) -> None:
        with self.cv:
            if not handle.done():
                self.hurried.add(handle)
            self.cv.notify_all()

    def _limit(self) -> int:
        return self.all_slots if self.hurried else self.slots

    def _feed(self) -> None:
        while True:
            with self.cv:
                while not self.queue or self.running >= self._limit():
                    self.cv.wait()
                handle, k, item, split = self.queue.popleft()
                if handle.done():  # an earlier item of it failed
                    continue
                self.running += 1
            try:
                started = self.execute([item], split)
            except BaseException as e:  # the trainer sees it when it collects
                self._finish(handle, k, error=e)
                continue
            started.add_done_callback(lambda f, handle=handle, k=k: self._finish(handle, k, started=f))

    def _finish(self, handle: BackgroundExecutions, k: int, started: Future | None = None,
                error: BaseException | None = None) -> None:
        outcome = None
        if error is None:
            try:
                outcome = started.result()[0]
            except BaseException as e:
                error = e
        with self.cv:
            self.running -= 1
            if not handle.done():
                if error is not None:
                    handle.future.set_exception(error)
                else:
                    handle.outcomes[k] = outcome
                    handle.left -= 1
                    if handle.left == 0:
                        handle.future.set_result(handle.outcomes)
            if handle.done():
                self.hurried.discard(handle)
            self.cv.notify_all()
