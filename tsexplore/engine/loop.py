"""The event-loop bridge: one asyncio loop on its own thread, and the read threads beside it.

Like zarr-python's ``core/sync.py``: the engine owns one private loop running on a daemon
thread (``tsexplore-io``). Other threads hand it coroutines with :meth:`IOLoop.run_coroutine`
(always with a timeout) or callbacks with :meth:`IOLoop.call_soon`; a blocking call made on
the loop's own thread is refused (:class:`~tsexplore.errors.WrongThreadError`), since it would
wait on itself. Blocking reads run on a pool of ``tsexplore-read-*`` threads, the loop's
default executor, at a lower OS priority than the thread that waits for the data.

Process-wide effects come from :mod:`tsexplore.config` only: the GIL switch interval
(``switch_interval``) and the read threads' nice value (``read_nice``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from .. import config
from ..errors import ReadTimeoutError, WrongThreadError

READ_THREAD_PREFIX = "tsexplore-read"


def apply_switch_interval() -> None:
    """Shorten the GIL switch interval to ``config.switch_interval`` (0 leaves it alone).

    Read threads hold the GIL only briefly between C calls; with Python's default 5 ms
    interval each of those hand-offs waits behind a busy main thread.
    """
    interval = config.get().switch_interval
    if interval > 0 and sys.getswitchinterval() > interval:
        sys.setswitchinterval(interval)


def lower_thread_priority() -> None:
    """Run this thread at ``config.read_nice`` (Linux: the nice value is per thread).

    Decoding is throughput work; the reader (a notebook, a training loop) is latency work.
    Elsewhere, or when not permitted, this does nothing.
    """
    nice = config.get().read_nice
    if nice and hasattr(os, "setpriority") and sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        except OSError:  # pragma: no cover - not permitted: keep the default priority
            pass


class _ThreadFlags(threading.local):
    """``reads`` is True on an engine's read threads (asked on every read: no thread lookup;
    the class default answers other threads without the AttributeError a plain
    ``getattr(local, name, default)`` raises and swallows, ~1 us)."""

    reads = False


_this_thread = _ThreadFlags()


def _start_read_thread() -> None:
    """What each read thread runs first: mark it, lower its priority."""
    _this_thread.reads = True
    lower_thread_priority()


def on_read_thread() -> bool:
    """True on one of an engine's read threads (a source reading engine data)."""
    return _this_thread.reads


class IOLoop:
    """A private asyncio loop on a daemon thread, with a pool of read threads as its executor."""

    def __init__(self, threads: int, name: str = "tsexplore-io") -> None:
        self.pool = cf.ThreadPoolExecutor(
            threads, thread_name_prefix=READ_THREAD_PREFIX, initializer=_start_read_thread
        )
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(self.pool)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.closed = False
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    # -- calling into the loop ---------------------------------------------------------------
    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread.ident

    def check_blocking_allowed(self) -> None:
        """Refuse a blocking call on the loop's own thread (it would wait on itself)."""
        if self.on_loop_thread():
            raise WrongThreadError(
                "a blocking tsexplore read was called from the engine's own I/O loop; "
                "await source.read_chunk() there instead"
            )

    def run_coroutine(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run ``coro`` on the loop and wait for its result, at most ``timeout`` seconds."""
        self.check_blocking_allowed()
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        timeout = config.get().wait_timeout if timeout is None else timeout
        try:
            return fut.result(timeout)
        except cf.TimeoutError:
            fut.cancel()
            raise ReadTimeoutError(f"operation did not finish within {timeout} s") from None

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop's thread; nothing happens once the loop is closed.

        An exception there is reported by asyncio's handler (the ``asyncio`` logger).
        """
        if self.closed:
            return
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed meanwhile
            pass

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a read thread, not waiting for it (dropped once closed)."""
        try:
            self.pool.submit(fn, *args)
        except RuntimeError:  # the pool shut down meanwhile
            pass

    # -- shutdown ----------------------------------------------------------------------------
    def close(
        self, shutdown: Callable[[], Coroutine[Any, Any, None]] | None = None, timeout: float = 2.0
    ) -> None:
        """Cancel the loop's tasks, run ``shutdown()`` there, stop it and join the threads."""
        if self.closed:
            return
        self.closed = True

        async def _stop() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if shutdown is not None:
                await shutdown()

        deadline = time.monotonic() + timeout
        # not only when is_running(): a loop whose thread has not reached run_forever yet (a
        # loaded machine, an engine closed as soon as it started) runs what is queued here
        # when it gets there, stop included; otherwise it would run forever after this
        try:
            asyncio.run_coroutine_threadsafe(_stop(), self.loop).result(timeout / 2)
        except (cf.TimeoutError, RuntimeError):
            pass
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # the loop is closed already
            pass
        self.thread.join(max(0.0, deadline - time.monotonic()))
        self.pool.shutdown(wait=False, cancel_futures=True)
        for t in list(getattr(self.pool, "_threads", ())):
            t.join(max(0.0, deadline - time.monotonic()))
        if not self.thread.is_alive():
            self.loop.close()
