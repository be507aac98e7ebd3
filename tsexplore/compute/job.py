"""Progress counters and background reductions (``tse.reduce(..., background=True)``)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import RequestCancelledError, TsExploreError


class ReductionCancelledError(RequestCancelledError):
    """A reduction was cancelled by its owner (``job.cancel()``); no result exists."""


class JobTimeoutError(TsExploreError, TimeoutError):
    """``job.result(timeout=...)`` ran out of time while the reduction was still running."""


class Progress:
    """Thread-safe counters of a running reduction; optionally drives a tqdm bar.

    ``fraction`` is the share of chunks done (0..1); ``chunks_done``/``chunks_total`` and
    ``bytes_done``/``bytes_total`` count decoded chunks and bytes.
    """

    def __init__(self, chunks_total: int, bytes_total: int, desc: str, bar: bool = False) -> None:
        self._lock = threading.Lock()
        self.chunks_total = int(chunks_total)
        self.bytes_total = int(bytes_total)
        self.chunks_done = 0
        self.bytes_done = 0
        self.started = time.perf_counter()
        self.finished: float | None = None
        self.desc = desc
        self._bar: Any = None
        if bar:
            self._bar = _make_bar(bytes_total, desc)

    def advance(self, chunks: int, nbytes: int) -> None:
        with self._lock:
            self.chunks_done += chunks
            self.bytes_done += nbytes
        bar = self._bar
        if bar is not None:
            try:
                bar.update(nbytes)
            except Exception:  # noqa: BLE001 - a broken display never stops the reduction
                self._bar = None

    def close(self, ok: bool = True) -> None:
        self.finished = time.perf_counter()
        bar, self._bar = self._bar, None
        if bar is not None:
            try:
                if not ok:
                    bar.set_postfix_str("stopped")
                bar.close()
            except Exception:  # noqa: BLE001
                pass

    @property
    def fraction(self) -> float:
        with self._lock:
            return self.chunks_done / self.chunks_total if self.chunks_total else 1.0

    @property
    def elapsed(self) -> float:
        end = self.finished if self.finished is not None else time.perf_counter()
        return end - self.started

    @property
    def rate(self) -> float:
        """Decoded bytes per second so far."""
        return self.bytes_done / self.elapsed if self.elapsed > 0 else 0.0

    def __repr__(self) -> str:
        return (
            f"<Progress {self.desc}: {self.chunks_done}/{self.chunks_total} chunks "
            f"({self.fraction:.0%}), {self.bytes_done / 1e6:.1f} MB in {self.elapsed:.2f} s, "
            f"{self.rate / 1e6:.0f} MB/s>"
        )


def _make_bar(total: int, desc: str) -> Any:
    """A tqdm bar: a widget in a notebook, text in a terminal (tqdm.auto picks)."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a core dependency
        return None
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, leave=True)


_ids = itertools.count(1)


class ReductionJob:
    """A reduction running on a ``tsexplore-reduce-N`` thread.

    ``progress`` (a :class:`Progress`), ``cancel()`` (stops within one chunk), ``done()``,
    ``result(timeout=)`` (the DataArray, or the error that stopped the run; never a partial
    result) and ``status``: ``"running"``, ``"done"``, ``"failed"`` or ``"cancelled"``.
    Works as a context manager: leaving the block cancels a run still going and joins it.
    """

    def __init__(self, fn: Callable[[threading.Event], Any], progress: Progress, desc: str) -> None:
        self.progress = progress
        self.desc = desc
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self._fn = fn
        self._thread = threading.Thread(
            target=self._run, name=f"tsexplore-reduce-{next(_ids)}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = self._fn(self._cancel)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever asks for the result
            self._error = exc
        finally:
            self._fn = None  # type: ignore[assignment]
            self._done.set()

    # -- control --------------------------------------------------------------------------
    def cancel(self) -> None:
        """Ask the reduction to stop; it does so before its next chunk."""
        self._cancel.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the run ends (or ``timeout`` seconds); returns whether it ended."""
        return self._done.wait(timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The result; raises the run's error, or :class:`JobTimeoutError` after ``timeout``."""
        if not self._done.wait(timeout):
            raise JobTimeoutError(
                f"{self.desc} is still running after {timeout} s "
                f"({self.progress.fraction:.0%} done); wait longer or call .cancel()"
            )
        if self._error is not None:
            raise self._error
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._done.wait(timeout):
            raise JobTimeoutError(f"{self.desc} is still running after {timeout} s")
        return self._error

    @property
    def status(self) -> str:
        if not self._done.is_set():
            return "running"
        if self._error is None:
            return "done"
        return "cancelled" if isinstance(self._error, ReductionCancelledError) else "failed"

    @property
    def thread_name(self) -> str:
        return self._thread.name

    def close(self, timeout: float = 5.0) -> None:
        """Cancel the run if it still goes and wait (up to ``timeout`` s) for its thread."""
        self.cancel()
        self._thread.join(timeout)

    def __enter__(self) -> ReductionJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        p = self.progress
        return (
            f"<ReductionJob {self.desc} {self.status}: {p.chunks_done}/{p.chunks_total} chunks, "
            f"{p.bytes_done / 1e6:.1f} MB, {p.rate / 1e6:.0f} MB/s>"
        )
