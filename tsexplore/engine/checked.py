"""The checked read: the one path every chunk read takes, scheduled or inline.

:class:`CheckedReader` reads one chunk from its source and then, always in this order:
fills a chunk the store lacks when the source was opened with ``missing="fill"`` (counted as
``missing_filled``), checks the chunk's shape against the grid, casts it to the source's
dtype, wraps any failure in a :class:`~tsexplore.errors.ChunkReadError` that names the
source and the chunk (counted as ``errors``), and records the read's bytes and latency
(``reads``, the latency histogram and the per-kind moving average the scheduler sizes its
concurrency with). Retries a source reports (``count_retry``) are counted as ``retries``;
what else it reports (``count_io``: store and range requests, shard-index reads) goes to
the same statistics, and it may keep small things between reads in the engine's cache
(:class:`~tsexplore.sources.base.ReadServices`). A read that is one of a batch
(``source.read_chunks_counted``) is checked here the same way, one chunk at a time.

Whole chunks and parts of chunks (``box``: a ``PartRead``), read on the I/O loop
(:meth:`CheckedReader.read`) or in the calling thread (:meth:`CheckedReader.read_here`), by
the source or by a given ``run`` (decoded from stored bytes the cache holds, one of a batch),
take the same steps; :meth:`CheckedReader.read_stored` reads stored bytes, undecoded.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import ChunkReadError, MissingChunkError, TsExploreError
from ..sources.base import (
    ChunkIndex,
    ChunkSource,
    ReadServices,
    read_services,
    retry_counter,
)
from .absent import AbsentChunks
from .link import LinkModel
from .stats import Stats

#: starting guess of one read's latency, per kind, before any was measured
FIRST_LATENCY = 0.005

Box = tuple[tuple[int, int], ...]


class CheckedReader:
    """Reads chunks with the checks, fills and counters every read must have."""

    def __init__(self, stats: Stats, absent: AbsentChunks, services: ReadServices | None = None) -> None:
        self.stats = stats
        #: what a read may use besides its source: counters, the engine's cache
        self.services = services
        #: the chunks read as fill values because the store lacks them (for the chunk map)
        self.absent = absent
        #: moving average of one read's seconds, per kind ("sync" threads, "async" loop)
        self.latency = {"sync": FIRST_LATENCY, "async": FIRST_LATENCY}
        self._measured: set[str] = set()
        #: latency floor and delivered bandwidth of the network requests (fed by the sources'
        #: byte stores through ``services``)
        self.link = LinkModel()
        if services is not None:
            self.services = replace(services, transfer_start=self.link.start,
                                    transfer=self.link.record)

    def _count_retry(self) -> None:
        self.stats.count("retries")

    async def read(
        self,
        source: ChunkSource,
        index: ChunkIndex,
        run: Callable[[], Awaitable[Any]] | None = None,
        box: Box | None = None,
    ) -> Any:
        """Chunk ``index`` read on the I/O loop, checked: ``await run()`` reads it (default:
        ``source.read_chunk_counted(index)``; sync sources thread; one of a batch: its
        awaitable from ``source.read_chunks_counted``). A whole chunk is ``(array, encoded
        bytes moved)`` and comes back as the array; with ``box``, a part (a ``PartRead``: the
        values, the bytes moved and decoded) comes back as it is, counted as a part read."""
        with self._lent():
            t0 = self._start(box)
            try:
                try:
                    result = await (run() if run is not None else source.read_chunk_counted(index))
                except MissingChunkError as exc:
                    result = self._fill(source, index, exc, box)
                result = self._check(source, index, box, result)
            except Exception as exc:  # noqa: BLE001 - every failure goes to the waiter, wrapped
                raise self._failed(source, index, exc) from exc
        return self._done(source, t0, box, result)

    def read_here(
        self,
        source: ChunkSource,
        index: ChunkIndex,
        run: Callable[[], Any],
        box: Box | None = None,
    ) -> Any:
        """:meth:`read` in the calling thread (a read nested in another read, a local part
        on a read thread): ``run()`` reads it, here."""
        with self._lent():
            t0 = self._start(box)
            try:
                try:
                    result = run()
                except MissingChunkError as exc:
                    result = self._fill(source, index, exc, box)
                result = self._check(source, index, box, result)
            except Exception as exc:  # noqa: BLE001 - wrapped like a scheduled read's
                raise self._failed(source, index, exc) from exc
        return self._done(source, t0, box, result)

    async def read_stored(
        self,
        source: ChunkSource,
        index: ChunkIndex,
        run: Callable[[ChunkIndex], Coroutine[Any, Any, np.ndarray]],
    ) -> np.ndarray | None:
        """Chunk ``index``'s stored bytes (``await run(index)``), or None when the store
        lacks the chunk (the read that decodes it will fill or raise); counted as a read of
        those bytes, nothing decoded."""
        with self._lent():
            t0 = self._start(None)
            try:
                stored = await run(tuple(index))
            except MissingChunkError:
                return None
            except Exception as exc:  # noqa: BLE001
                raise self._failed(source, index, exc) from exc
        self._record(source, t0, stored.nbytes, 0)
        return stored

    # -- the common steps --------------------------------------------------------------------
    @contextlib.contextmanager
    def _lent(self) -> Iterator[None]:
        """While reading, the source reports its retries here and may use the services."""
        token = retry_counter.set(self._count_retry)
        lent = read_services.set(self.services)
        try:
            yield
        finally:
            retry_counter.reset(token)
            read_services.reset(lent)

    def _start(self, box: Box | None) -> float:
        if box is None:
            self.stats.count("reads")
        else:
            self.stats.count_many(("reads", "part_reads"))
        return time.perf_counter()

    def _fill(
        self, source: ChunkSource, index: ChunkIndex, exc: MissingChunkError, box: Box | None = None
    ) -> Any:
        """A missing chunk: the fill value when the source allows it, else the error; a
        whole chunk's ``(array, 0)``, or the box of it as a part."""
        if source.options.missing != "fill":
            raise exc
        self.stats.count("missing_filled")
        self.absent.add(source.token, tuple(index))
        whole = source.fill_chunk(index)
        if box is None:
            return whole, 0
        return _Filled(np.ascontiguousarray(whole[tuple(slice(lo, hi) for lo, hi in box)]))

    def _check(self, source: ChunkSource, index: ChunkIndex, box: Box | None, result: Any) -> Any:
        """A whole chunk's ``(array, encoded)`` with the array checked, or a part checked."""
        if box is None:
            array, encoded = result
            return _checked(source, index, array), encoded
        expected = tuple(hi - lo for lo, hi in box)
        if result.array.shape != expected:
            raise ChunkReadError(
                f"{source!r} returned shape {result.array.shape} for part {box} of chunk "
                f"{tuple(index)}, expected {expected}",
                source=source.token,
                index=tuple(index),
            )
        if result.array.dtype != source.dtype:
            result.array = result.array.astype(source.dtype)
        return result

    def _done(self, source: ChunkSource, t0: float, box: Box | None, result: Any) -> Any:
        """Record the read; the whole chunk's array, or the part's result."""
        if box is None:
            array, encoded = result
            self._record(source, t0, encoded, array.nbytes)
            return array
        seconds = getattr(result, "seconds", None)  # read in a batch: from the batch's start
        self._record(source, t0 if seconds is None else time.perf_counter() - seconds,
                     result.moved, result.decoded)
        return result

    def _failed(self, source: ChunkSource, index: ChunkIndex, exc: Exception) -> TsExploreError:
        self.stats.count("errors")
        if isinstance(exc, TsExploreError):
            return exc
        return ChunkReadError(
            f"reading chunk {tuple(index)} of {source!r} failed: {exc!r}",
            source=source.token,
            index=tuple(index),
        )

    def _record(self, source: ChunkSource, t0: float, encoded: int, decoded: int) -> None:
        elapsed = time.perf_counter() - t0
        kind = "async" if source.is_async else "sync"
        if kind in self._measured:
            self.latency[kind] = 0.8 * self.latency[kind] + 0.2 * elapsed
        else:  # the first read replaces the guess: a 100 ms store is known at once
            self._measured.add(kind)
            self.latency[kind] = elapsed
        self.stats.record_read(encoded, decoded, elapsed)

    def slab_latency(self, source: ChunkSource, nchunks: int, concurrency: int) -> float:
        """Expected seconds to read ``nchunks`` chunks of ``source`` ``concurrency`` at a time."""
        kind = "async" if source.is_async else "sync"
        return self.latency[kind] * math.ceil(nchunks / max(1, concurrency))


class _Filled:
    """A part of an absent chunk, filled (nothing moved, nothing decoded)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.moved = 0
        self.decoded = 0


def _checked(source: ChunkSource, index: ChunkIndex, array: np.ndarray) -> np.ndarray:
    """``array`` as chunk ``index`` of ``source`` must be: the grid's shape, the source's dtype."""
    expected = source.chunk_shape(index)
    if array.shape != expected:
        raise ChunkReadError(
            f"{source!r} returned shape {array.shape} for chunk {tuple(index)}, expected {expected}",
            source=source.token,
            index=tuple(index),
        )
    if array.dtype != source.dtype:
        array = array.astype(source.dtype)
    return array
