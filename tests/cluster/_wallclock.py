"""A wall-clock limit for the cluster tests that must show a run ends (SIGALRM; main thread)."""

import signal


def within(seconds: int, fn):
    """``fn()``, or an AssertionError once it has run ``seconds`` of wall-clock time."""

    def alarm(*_):
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        return fn()
    except TimeoutError:
        raise AssertionError(f"the run did not end within {seconds} s of wall-clock time") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
