"""A wall-clock limit for a test body: the edge tests' "bounded work" checks fail instead of hanging the suite."""

import contextlib
import signal


@contextlib.contextmanager
def within(seconds: float):
    """Raises ``TimeoutError`` in the body when it runs longer than ``seconds`` (SIGALRM: main thread, POSIX)."""
    def alarm(*_):
        raise TimeoutError(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
