"""The bridge between threads and event loops: the one module that crosses it.

Like zarr-python's ``core/sync.py``: the engine owns one private loop running on a daemon
thread (``tsexplore-io``). Other threads hand it coroutines with :meth:`IOLoop.run_coroutine`
(always with a timeout) or callbacks with :meth:`IOLoop.call_soon`; a blocking call made on
the loop's own thread is refused (:class:`~tsexplore.errors.WrongThreadError`), since it would
wait on itself. Blocking work runs on a pool of ``tsexplore-read-*`` threads at a lower OS
priority than the thread that waits for the data: from the loop with :meth:`IOLoop.to_thread`,
from any thread with :meth:`IOLoop.submit`, and shared between a thread and the read threads
free meanwhile with :meth:`IOLoop.share`. Coroutines of stores whose sessions live on zarr's
own loop run there (:meth:`IOLoop.at_home`).

Process-wide effects come from the engine's settings only: the GIL switch interval
(``switch_interval``) and the read threads' nice value (``read_nice``).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import contextvars
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from ..config import Settings
from ..errors import ReadTimeoutError, WrongThreadError

READ_THREAD_PREFIX = "tsexplore-read"
T = TypeVar("T")


def apply_switch_interval(interval: float) -> None:
    """Shorten the GIL switch interval to ``interval`` seconds (0 leaves it alone).

    Read threads hold the GIL only briefly between C calls; with Python's default 5 ms
    interval each of those hand-offs waits behind a busy main thread.
    """
    if interval > 0 and sys.getswitchinterval() > interval:
        sys.setswitchinterval(interval)


def lower_thread_priority(nice: int) -> None:
    """Run this thread at ``nice`` (Linux: the nice value is per thread).

    Decoding is throughput work; the reader (a notebook, a training loop) is latency work.
    Elsewhere, or when not permitted, this does nothing.
    """
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


def _start_read_thread(nice: int) -> None:
    """What each read thread runs first: mark it, lower its priority."""
    _this_thread.reads = True
    lower_thread_priority(nice)


def on_read_thread() -> bool:
    """True on one of an engine's read threads (a source reading engine data)."""
    return _this_thread.reads


class IOLoop:
    """A private asyncio loop on a daemon thread, with a pool of read threads as its executor."""

    def __init__(self, settings: Settings, name: str = "tsexplore-io") -> None:
        apply_switch_interval(settings.switch_interval)
        self.threads = settings.io_threads
        #: threads that can decode at once
        self.cpus = max(1, min(self.threads, os.cpu_count() or 1))
        self.pool = cf.ThreadPoolExecutor(
            self.threads, thread_name_prefix=READ_THREAD_PREFIX, initializer=_start_read_thread,
            initargs=(settings.read_nice,),
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

    def run_coroutine(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        """Run ``coro`` on the loop and wait for its result, at most ``timeout`` seconds."""
        self.check_blocking_allowed()
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
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

    async def to_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a read thread, awaited on the loop (in a copy of this context)."""
        run = contextvars.copy_context().run
        return await self.loop.run_in_executor(self.pool, run, fn, *args)  # type: ignore[arg-type]

    @staticmethod
    def at_home(home: str | None, coro: Coroutine[Any, Any, T]) -> Awaitable[T]:
        """``coro`` run on the loop it belongs to (``"zarr"``: zarr's own, where zarr stores
        keep their sessions), awaitable from this one; cancelling the answer cancels it there."""
        if home is None:
            return coro
        from zarr.core.sync import _get_loop

        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, _get_loop()))

    def share(self, jobs: list[Any], run: Callable[[Any], T], timeout: float,
              most: int | None = None) -> list[T]:
        """``run(job)`` of each job, in order: this thread and the read threads free
        meanwhile (``most`` threads in all, default every read thread) take jobs in turn until
        none is left; this thread then waits (at most ``timeout`` seconds) only for the jobs a
        read thread took, which are running, and raises what one of them raised. A read
        thread that starts late finds nothing left."""
        if len(jobs) < 2 or self.closed:
            return [run(job) for job in jobs]
        queue = collections.deque(enumerate(jobs))
        out: list[Any] = [None] * len(jobs)
        failed: list[BaseException] = []
        ended = threading.Semaphore(0)
        lock = threading.Lock()
        running = 0  # jobs taken and not finished

        def take() -> None:
            nonlocal running
            while True:
                with lock:
                    if not queue:
                        return
                    k, job = queue.popleft()
                    running += 1
                try:
                    out[k] = run(job)
                except BaseException as exc:  # noqa: BLE001 - raised in the thread that waits
                    failed.append(exc)
                finally:
                    with lock:
                        running -= 1
                    ended.release()

        context = contextvars.copy_context()
        for _ in range(min(len(jobs), most or self.threads) - 1):
            self.submit(lambda: context.copy().run(take))
        take()
        deadline = time.monotonic() + timeout
        while True:
            with lock:
                if not running:
                    break
            if not ended.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise ReadTimeoutError(
                    f"{running} of {len(jobs)} read jobs taken by other read threads did not "
                    f"finish within {timeout} s; raise tse.config.set(wait_timeout=...) or "
                    "check the store"
                )
        if failed:
            raise failed[0]
        return out

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
