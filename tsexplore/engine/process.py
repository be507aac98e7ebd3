"""The process-wide engine: started on first use, forgotten in a forked child, closed at exit."""

from __future__ import annotations

import atexit
import os
import threading
import time

from .. import config
from .scheduler import Engine
from .stats import StatsSnapshot
from .types import Priority

_engine: Engine | None = None
_engine_lock = threading.Lock()


def get_engine() -> Engine:
    """The process-wide engine, started on first use (and again after ``close()``/fork)."""
    global _engine
    with _engine_lock:
        if _engine is None or _engine.closed:
            _engine = Engine()
        return _engine


def current_engine() -> Engine | None:
    """The running engine of this process, or None (never starts one)."""
    engine = _engine
    if engine is None or engine.closed:
        return None
    return engine


def snapshot() -> StatsSnapshot:
    """Statistics of the running engine; zeros when none runs (does not start one)."""
    engine = current_engine()
    if engine is None:
        return StatsSnapshot(time=time.time(), cache_budget=config.get().cache_bytes,
                             queued={p.name.lower(): 0 for p in Priority})
    return engine.snapshot()


def close_engine() -> None:
    """Close the process-wide engine if one is running."""
    global _engine
    with _engine_lock:
        engine, _engine = _engine, None
    if engine is not None:
        engine.close()


def set_cache_bytes(nbytes: int) -> None:
    """Change the process-wide cache budget (and the default for future engines)."""
    config.set(cache_bytes=int(nbytes))
    engine = current_engine()
    if engine is not None:
        engine.cache.resize(int(nbytes))


def _forget_after_fork() -> None:
    """In a forked child the parent's loop and read threads do not exist: start afresh.

    The inherited engine is dropped without closing it (closing would wait on threads that
    are not there); the child's first read starts its own.
    """
    global _engine, _engine_lock
    _engine = None
    _engine_lock = threading.Lock()  # the parent may have held it while forking


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(close_engine)
