"""SIGTERM stops a run within a moment: waits on real executions give up, the process says so with 143."""
import os
import signal
import threading
import time
from concurrent.futures import Future

import pytest

from wmrl import stop


def _sigterm_in(seconds: float) -> None:
    threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGTERM)).start()


@pytest.fixture
def default_sigterm():
    """No handler from earlier tests (Ray's exits at once) is chained behind ours."""
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, before)


def test_a_wait_on_executions_gives_up_soon_after_sigterm_and_exits_143(default_sigterm):
    never = Future()
    with stop.on_sigterm():
        _sigterm_in(0.3)
        t0 = time.monotonic()
        with pytest.raises(stop.Stopped) as stopped:
            stop.wait(never)
        assert time.monotonic() - t0 < 0.3 + 2 * stop.POLL_S + 0.5
        assert stopped.value.code == 143 and stop.requested()
        with pytest.raises(stop.Stopped):
            stop.check()  # later waits (the next evaluation chunk) stop too


def test_without_a_stop_a_wait_is_the_future_s_result_its_own_timeout_error_included():
    with stop.on_sigterm():
        assert not stop.requested()
        done = Future()
        threading.Timer(0.5, done.set_result, ([1, 2],)).start()
        assert stop.wait(done) == [1, 2]  # outlives several polls
        failed = Future()
        failed.set_exception(TimeoutError("the program's own"))
        with pytest.raises(TimeoutError, match="own"):
            stop.wait(failed)


def test_sigterm_still_reaches_the_handler_installed_before_which_comes_back_after():
    seen = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        outer = signal.getsignal(signal.SIGTERM)
        with stop.on_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            assert stop.requested() and seen == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is outer
        with stop.on_sigterm():
            assert not stop.requested()  # a new run starts unstopped
    finally:
        signal.signal(signal.SIGTERM, before)
