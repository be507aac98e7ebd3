"""The read pipeline: the one path every read takes, scheduled or inline, whole or part.

A read is a :class:`~.types.ReadKey` -- the source's token, the chunk index and what of the
chunk: the whole chunk, the blosc blocks of a box, or its stored bytes -- and takes the same
steps whatever it names and wherever it runs (on the I/O loop, or in the calling thread):

1. **fetch**: what the cache's encoded tier holds for the chunk first (its stored frame: no
   I/O; a blosc head: only the blocks' byte ranges are read), else the source (a whole
   chunk: ``source.read_chunk_counted``; a part: its part reader, by range; local parts are
   read by their reader's thread and the idle read threads in batches, their disk reads
   issued together; inner chunks of one shard come as one batch's awaitables);
2. **check**: a chunk the store lacks is filled when the source was opened with
   ``missing="fill"`` (``missing_filled``), the shape is checked against the grid (or the
   box), the dtype cast to the source's; a failure becomes a
   :class:`~tsexplore.errors.ChunkReadError` naming the source and the chunk (``errors``);
3. **record**: the read's bytes moved and decoded and its latency (``reads``,
   ``part_reads``, the latency histogram and the per-kind moving average the scheduler sizes
   its concurrency with); what the fetch brought for the encoded tier (a frame, a head) is
   kept there.

The scheduler puts the value in the decoded tier (step 4, **cache**) and hands it to the
waiters. While reading, the source reports its retries (``count_retry``) and other I/O
(``count_io``) here and may keep small things between reads in the engine's cache
(:class:`~tsexplore.sources.base.ReadServices`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np

from .. import config
from ..errors import ChunkReadError, MissingChunkError, TsExploreError
from ..sources.base import ChunkSource, ReadServices, SyncChunkSource, read_services
from ..sources.parts import PartRead
from .absent import AbsentChunks
from .cache import ChunkCache
from .link import LinkModel
from .reads import ReadTable
from .stats import Stats
from .types import STORED, ReadKey

#: starting guess of one read's latency, per kind, before any was measured
FIRST_LATENCY = 0.005


class ReadPipeline:
    """Fetch, check and record reads (see the module docstring)."""

    def __init__(
        self,
        stats: Stats,
        absent: AbsentChunks,
        cache: ChunkCache,
        table: ReadTable,
        run_coroutine: Callable[[Any], Any],
        following: Callable[[ChunkSource], bool] = lambda source: False,
        helper: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.stats = stats
        #: the chunks read as fill values because the store lacks them (for the chunk map)
        self.absent = absent
        self.cache = cache
        self.table = table
        #: runs a coroutine on the I/O loop from another thread (a nested read of a remote chunk)
        self._run_coroutine = run_coroutine
        #: whether the prefetcher follows a pattern along ``source`` (its frames come back)
        self.following = following
        #: moving average of one read's seconds, per kind ("sync" threads, "async" loop)
        self.latency = {"sync": FIRST_LATENCY, "async": FIRST_LATENCY}
        self._measured: set[str] = set()
        #: latency floor and delivered bandwidth of the network requests (fed by the sources'
        #: byte stores through the services)
        self.link = LinkModel()
        self.services = ReadServices(
            stats.count, cache.get, cache.put,
            transfer_start=self.link.start, transfer=self.link.record, helper=helper,
        )

    # -- the two drivers: on the I/O loop, in the calling thread ----------------------------
    async def read(
        self, source: ChunkSource, key: ReadKey, pending: Awaitable[Any] | None = None
    ) -> np.ndarray | None:
        """Read ``key`` on the I/O loop: its value (None for stored bytes). ``pending``: its
        awaitable from a batch (``source.read_chunks_counted``)."""
        with self._lent():
            t0 = self._start(key)
            try:
                got, exc = await (pending if pending is not None else self._fetch(source, key)), None
            except Exception as err:  # noqa: BLE001 - checked below: filled, or wrapped
                got, exc = None, err
            return self._finish(source, key, t0, got, exc)

    def read_here(self, source: ChunkSource, keys: list[ReadKey]) -> list[Any]:
        """Read ``keys`` of ``source`` in the calling thread (parts of local chunks a reader
        waits for, their disk reads together: see ``Engine._read_now``; a nested read of a
        whole chunk): per key its value, or the exception its read raised."""
        with self._lent():
            t0 = time.perf_counter()
            for key in keys:
                self._start(key)
            try:
                fetched = self._fetch_here(source, keys)
            except Exception as err:  # noqa: BLE001 - each key's waiter gets it, wrapped
                fetched = [err] * len(keys)
            out: list[Any] = []
            for key, got in zip(keys, fetched):
                failed = got if isinstance(got, Exception) else None
                try:
                    out.append(self._finish(source, key, t0, None if failed else got, failed))
                except Exception as err:  # noqa: BLE001 - goes to this key's waiter
                    out.append(err)
            return out

    # -- fetch -------------------------------------------------------------------------------
    async def _fetch(self, source: ChunkSource, key: ReadKey) -> Any:
        """What the fetch of ``key`` on the I/O loop gives: a whole chunk's ``(array, bytes
        moved)``, or a ``PartRead``."""
        parts: Any = None
        if key.part is not None or self.cache.encoded_entries:
            parts = source.partial_reader()
        if key.part is STORED:
            if self.cache.has_encoded(key):  # a part read kept the whole frame meanwhile
                return PartRead(None, 0, 0)  # type: ignore[arg-type]
            frame = await parts.read_stored(key.index)
            return PartRead(frame, frame.nbytes, 0, stored=frame)
        frame = None if parts is None else self._frame(key)
        if key.part is None:
            if frame is None:
                return await source.read_chunk_counted(key.index)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, parts.decode_stored, key.index, frame), 0
        if frame is None and await self._stored_in_flight(key):
            frame = self._frame(key)
        head = None if frame is not None else self.cache.get_encoded(key.head)
        keep = frame is None and self.keep_stored(source, parts)
        return await parts.read(key.index, key.part, stored=frame, head=head, keep=keep)

    def _fetch_here(self, source: ChunkSource, keys: list[ReadKey]) -> list[Any]:
        """:meth:`_fetch` of each key in the calling thread (or the exception it raised)."""
        if keys[0].part is None:  # a nested read of one whole chunk
            if isinstance(source, SyncChunkSource):
                return [source.read_chunk_sync(keys[0].index)]
            return [self._run_coroutine(self._fetch(source, keys[0]))]
        parts = source.partial_reader()
        frames = [self._frame(key) for key in keys]
        out: list[Any] = [None] * len(keys)
        todo = [i for i, frame in enumerate(frames) if frame is None]
        if todo:
            items = [(keys[i].index, keys[i].part, self.cache.get_encoded(keys[i].head)) for i in todo]
            try:
                got = parts.read_many(items, self.keep_stored(source, parts))
            except Exception as err:  # noqa: BLE001 - the one item's failure
                got = [err] * len(todo)
            for i, result in zip(todo, got):
                out[i] = result
        for i, frame in enumerate(frames):
            if frame is not None:
                try:
                    out[i] = parts.from_frame(frame, keys[i].index, keys[i].part)
                except Exception as err:  # noqa: BLE001
                    out[i] = err
        return out

    def _frame(self, key: ReadKey) -> Any:
        """The chunk's stored frame in the encoded tier (counted as an encoded hit, and as a
        read-ahead used when it was one), or None."""
        frame = self.cache.get_encoded(key.stored)
        if frame is not None:
            self.stats.count("encoded_hits")
            if self.table.take_prefetched(key.stored):
                self.stats.count("prefetch_used")
        return frame

    async def _stored_in_flight(self, key: ReadKey) -> bool:
        """Whether a read-ahead of this chunk's stored bytes was running and has ended (its
        frame may be in the encoded tier now)."""
        read = self.table.get(key.stored)
        if read is None or read.state != "running":  # a queued one may wait on this read's slot
            return False
        try:
            await asyncio.wrap_future(read.future)
        except Exception:  # noqa: BLE001 - the read-ahead failed: read the part itself
            return False
        return True

    def keep_stored(self, source: ChunkSource, parts: Any) -> bool:
        """Whether a part read fetches its whole stored frame for the cache to keep, by
        ``config.keep_stored``: ``"remote"`` (default) for a remote store whose views move
        along a pattern (the next frames of the chunk come next; otherwise the reader fetches
        by range when that pays); ``"always"``; ``"never"``. Local files read by range: the
        page cache holds their frames."""
        policy = config.get().keep_stored
        if policy == "always":
            return True
        return policy == "remote" and parts.remote and self.following(source)

    # -- check and record --------------------------------------------------------------------
    def _finish(
        self, source: ChunkSource, key: ReadKey, t0: float, got: Any, exc: Exception | None
    ) -> np.ndarray | None:
        """Fill, check and record what the fetch of ``key`` gave (``got``) or raised
        (``exc``); keep what it brought for the encoded tier; the value."""
        try:
            if exc is not None:
                if key.part is STORED and isinstance(exc, MissingChunkError):
                    return None  # the read that decodes it will fill or raise
                got = self._fill(source, key, exc)
            got = self._check(source, key, got)
        except Exception as err:  # noqa: BLE001 - every failure goes to the waiter, wrapped
            raise self._failed(source, key, err) from err
        seconds = time.perf_counter() - t0 if got.seconds is None else got.seconds
        self._record(source, seconds, got.moved, got.decoded)
        stored, head = got.stored, got.head
        if stored is not None and (key.part is STORED or config.get().keep_stored != "never"):
            self.cache.put_encoded(key.stored, stored, stored.nbytes)
            self.cache.discard_encoded([key.head])
        elif head is not None:
            self.cache.put_encoded(key.head, head, len(head.raw) + head.starts.nbytes + head.ends.nbytes)
        return None if key.part is STORED else got.array

    @contextlib.contextmanager
    def _lent(self) -> Iterator[None]:
        """While reading, the source may use the services (and reports its retries there)."""
        lent = read_services.set(self.services)
        try:
            yield
        finally:
            read_services.reset(lent)

    def _start(self, key: ReadKey) -> float:
        if key.box is None:
            self.stats.count("reads")
        else:
            self.stats.add((("reads", 1), ("part_reads", 1)))
        return time.perf_counter()

    def _fill(self, source: ChunkSource, key: ReadKey, exc: Exception) -> Any:
        """A missing chunk: the fill value (of its box) when the source allows it, else the
        error."""
        if not isinstance(exc, MissingChunkError) or source.options.missing != "fill":
            raise exc
        self.stats.count("missing_filled")
        self.absent.add(key.token, key.index)
        whole = source.fill_chunk(key.index)
        box = key.box
        if box is None:
            return whole, 0
        return PartRead(np.ascontiguousarray(whole[tuple(slice(lo, hi) for lo, hi in box)]), 0, 0)

    def _check(self, source: ChunkSource, key: ReadKey, got: Any) -> PartRead:
        """``got`` as a checked ``PartRead``: the grid's (or the box's) shape, the source's
        dtype."""
        if isinstance(got, tuple):  # a whole chunk: (array, bytes moved)
            array, moved = got
            got = PartRead(array, moved, 0)
        elif key.part is STORED:
            return got  # type: ignore[no-any-return]
        box = key.box
        expected = source.chunk_shape(key.index) if box is None else tuple(hi - lo for lo, hi in box)
        if got.array.shape != expected:
            what = f"chunk {key.index}" if box is None else f"part {box} of chunk {key.index}"
            raise ChunkReadError(
                f"{source!r} returned shape {got.array.shape} for {what}, expected {expected}",
                source=source.token,
                index=key.index,
            )
        if got.array.dtype != source.dtype:
            got.array = got.array.astype(source.dtype)
        if box is None:
            got.decoded = got.array.nbytes
        return got  # type: ignore[no-any-return]

    def _failed(self, source: ChunkSource, key: ReadKey, exc: Exception) -> TsExploreError:
        self.stats.count("errors")
        if isinstance(exc, TsExploreError):
            return exc
        return ChunkReadError(
            f"reading chunk {key.index} of {source!r} failed: {exc!r}",
            source=source.token,
            index=key.index,
        )

    def _record(self, source: ChunkSource, elapsed: float, moved: int, decoded: int) -> None:
        kind = "async" if source.is_async else "sync"
        if kind in self._measured:
            self.latency[kind] = 0.8 * self.latency[kind] + 0.2 * elapsed
        else:  # the first read replaces the guess: a 100 ms store is known at once
            self._measured.add(kind)
            self.latency[kind] = elapsed
        self.stats.record_read(moved, decoded, elapsed)

    def slab_latency(self, source: ChunkSource, nchunks: int, concurrency: int) -> float:
        """Expected seconds to read ``nchunks`` chunks of ``source`` ``concurrency`` at a time."""
        kind = "async" if source.is_async else "sync"
        return self.latency[kind] * math.ceil(nchunks / max(1, concurrency))


__all__ = ["FIRST_LATENCY", "ReadPipeline"]
