"""Run one piece of work on several threads at once and collect what went wrong (the
concurrency tests: readers hammering one engine)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def hammer(work: Callable[[int], None], threads: int = 8, timeout: float = 120.0) -> list[BaseException]:
    """``work(i)`` on ``threads`` threads (``i`` = 0, 1, ...), all started before any is
    joined; the exceptions they raised, and a ``TimeoutError`` for each thread still running
    after ``timeout`` seconds."""
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - returned to the caller
            errors.append(exc)

    started = [threading.Thread(target=run, args=(i,), name=f"hammer-{i}") for i in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join(timeout)
        if t.is_alive():
            errors.append(TimeoutError(f"{t.name} still running after {timeout} s"))
    return errors
