"""Read-ahead hints and the memory of what one-pass readers took (the engine's ``hints``).

:meth:`ReadAheadMemory.advise` passes a read-ahead hint to a source for chunks neither cached
nor hinted lately (``posix_fadvise(WILLNEED)`` for local Zarr stores); the prefetcher and
the streams call it. One-pass readers (dask tasks) read each chunk once: the read table
remembers the chunks they took, so the prefetcher does not read them again (and refuses such
a guess when it is admitted). What became of the prefetcher's guesses (used or not) is read
from the read table.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable

from ..sources.base import ChunkIndex, ChunkSource
from .cache import ChunkCache
from .loop import IOLoop
from .reads import ReadTable
from .types import ChunkRequest

#: read-ahead hints remembered (not repeated) per process
ADVISED_MEMORY = 8192


class ReadAheadMemory:
    """``advise``, the one-pass memory and the guesses' outcomes, over the engine's read
    table, cache and I/O loop."""

    def __init__(self, table: ReadTable, cache: ChunkCache, io: IOLoop) -> None:
        self._table = table
        self.cache = cache
        self._io = io
        self._lock = threading.Lock()  # the memory below
        self._advised: collections.OrderedDict[ChunkRequest, None] = collections.OrderedDict()

    def advise(self, source: ChunkSource, indices: Iterable[ChunkIndex]) -> None:
        """Pass a read-ahead hint to ``source`` for chunks not cached and not hinted lately."""
        if self._io.closed:
            return
        token = source.token
        fresh = []
        with self._lock:
            for index in indices:
                key = ChunkRequest(token, tuple(index))
                if key in self._advised:
                    continue
                self._advised[key] = None
                fresh.append(key)
            while len(self._advised) > ADVISED_MEMORY:
                self._advised.popitem(last=False)
        todo = [k.index for k in fresh if k not in self.cache]
        if not todo:
            return
        # a read thread passes the hint on: its system calls block while the disk's queue
        # is full (measured: 10-40 ms for two slabs of cold chunk files), which must hold up
        # neither the loop's dispatching nor a reader
        self._io.submit(_advise_quietly, source, todo)

    def guesses_used(self, token: str) -> int:
        """How many of the prefetcher's guesses for source ``token`` a reader used so far."""
        return self._table.used_by_token.get(token, 0)

    def guess_unused(self, key: ChunkRequest) -> bool:
        """Whether the guess ``key`` was read (or is being read) and no reader used it yet."""
        return key in self._table.prefetched

    def recently_consumed(self, key: ChunkRequest) -> bool:
        """Whether a one-pass reader took ``key`` lately (it will not want it again)."""
        return key in self._table.taken

    def release(self, keys: list[ChunkRequest], before: float) -> None:
        """``keys`` leave the decoded tier (those pinned stay), and their reads in flight are
        not kept when they end: what a steady pattern had passed by ``before`` (the time
        its view was answered, ``time.monotonic``). What a reader put in the cache or asked
        to keep since then stays: the engine's thread plans a while after the view, and
        another reader may have fetched those chunks meanwhile."""
        cache = self.cache
        cache.discard([k for k in keys if not cache.is_pinned(k)], put_before=before)
        self._table.release(keys, before)

    def reading(self, key: ChunkRequest) -> bool:
        """Whether ``key`` is being read (queued or running; a hint, without the lock)."""
        return self._table.reading(key)


def _advise_quietly(source: ChunkSource, indices: list[ChunkIndex]) -> None:
    try:
        source.advise(indices)
    except Exception:  # noqa: BLE001 - a hint must never fail a read
        pass
