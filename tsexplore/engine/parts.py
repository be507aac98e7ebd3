"""Parts of chunks: requests for only the blosc blocks a thin region needs, and their reads.

A selection plan gives, for each chunk it touches, the chunk-local selection. When the
source has a part reader (``source.partial_reader()``) and the selection's bounding *box*
in a chunk needs few of the chunk's blocks (:meth:`BloscParts.worth`: a frame of a deep
chunk, a few rows, a pixel's profile), the request is for that part, keyed ``(token, index,
box)``, instead of the whole chunk ``(token, index)``. Parts are requested, de-duplicated,
cancelled and counted like chunks (the read table does not care what a key names), with
two differences:

- a part is answered by its whole chunk when that is decoded in the cache;
- a part read for a reader is not kept (its buffer is recycled once the reader is done); a
  part read ahead by the prefetcher is kept until a reader takes it.

:class:`PartReads` runs them: the stored frame from the cache's encoded tier when it is there
(no I/O), else the frame's head from the encoded tier and only the blocks' byte ranges from the
store. What a read fetched (a head; a whole frame from a remote store) goes to the encoded tier,
so the next frame of the same chunk reads its blocks only, or nothing at all. Read-ahead of
stored bytes (``(token, index, STORED)`` keys) fills the encoded tier without decoding.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import config
from ..sources.base import ChunkIndex, ChunkSource
from .cache import ChunkCache
from .checked import CheckedReader
from .planning import SelectionPlan
from .reads import ReadTable
from .stats import Stats

#: the third element of a key naming a chunk's stored bytes (read ahead, undecoded)
STORED = "stored"
#: the third element of the encoded tier's key of a blosc frame's head
HEAD = "head"

Box = tuple[tuple[int, int], ...]


def extent(sel: Any) -> tuple[int, int]:
    """First and one-past-last position a chunk-local selection (slice or sorted array) takes."""
    if isinstance(sel, slice):
        step = sel.step or 1
        n = len(range(sel.start, sel.stop, step))
        return sel.start, sel.start + (n - 1) * step + 1
    return int(sel[0]), int(sel[-1]) + 1


def part_boxes(
    plan: SelectionPlan, source: ChunkSource, following: bool = False
) -> list[Box | None] | None:
    """Per chunk of ``plan`` (in :meth:`SelectionPlan.chunk_indices` order) the box to read
    as a part, or None for the whole chunk; None when every chunk is read whole.

    ``following``: the views of ``source`` move along a steady pattern (play, scrub). A local
    chunk is then read and decoded whole, once: the next views need the rest of it, and one
    whole read costs less than a part read per view (measured: scrub of the benchmark cube,
    warm page cache, 129 frames/s whole against 71 by parts). A remote store keeps its
    parts (a round trip per chunk is what counts there; see ``keep_stored``).
    """
    if not plan.dims or not config.get().partial_decode:
        return None
    if following and not source.is_async:
        return None
    reader = source.partial_reader()
    if reader is None:
        return None
    per_dim = [[extent(p[1]) for p in d.pieces] for d in plan.dims]
    worth = reader.worth
    out: list[Box | None] = []
    found = False
    for box in itertools.product(*per_dim):
        if worth(box):
            out.append(box)
            found = True
        else:
            out.append(None)
    return out if found else None


def shift(local: tuple[Any, ...], box: Box) -> tuple[Any, ...]:
    """A chunk-local selection made relative to ``box`` (to index a part's values)."""
    out = []
    for sel, (lo, _) in zip(local, box):
        if isinstance(sel, slice):
            out.append(slice(sel.start - lo, sel.stop - lo, sel.step))
        else:
            out.append(sel - lo)
    return tuple(out)


def is_part(value: np.ndarray, box: Box | None) -> bool:
    """Whether ``value`` answering a request for ``box`` is the part (else: its whole chunk)."""
    return box is not None and value.shape == tuple(hi - lo for lo, hi in box)


class PartReads:
    """The engine's reads of parts and of stored bytes, over the cache's encoded tier."""

    def __init__(
        self,
        cache: ChunkCache,
        reader: CheckedReader,
        stats: Stats,
        table: ReadTable,
        following: Callable[[ChunkSource], bool] = lambda source: False,
    ) -> None:
        self.cache = cache
        self.reader = reader
        self.stats = stats
        self.table = table
        #: whether the prefetcher follows a pattern along ``source`` (its frames come back)
        self.following = following

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

    async def read(self, source: ChunkSource, index: ChunkIndex, box: Box) -> np.ndarray:
        """Box ``box`` of chunk ``index``: from its stored bytes in the cache, or by range."""
        parts = source.partial_reader()
        token = source.token
        stored = self.cache.get_encoded((token, index))
        if stored is None:
            stored = await self._stored_in_flight(token, index)
        head = None if stored is not None else self.cache.get_encoded((token, index, HEAD))
        keep = stored is None and self.keep_stored(source, parts)

        def run() -> Any:
            return parts.read(index, box, stored=stored, head=head, keep=keep)

        result = await self.reader.read(source, index, run, box)
        self._remember(token, index, stored is not None, result)
        return result.array

    def read_here(self, source: ChunkSource, index: ChunkIndex, box: Box) -> np.ndarray:
        """:meth:`read` in the calling thread, for a local frame (a read thread runs it)."""
        parts = source.partial_reader()
        token = source.token
        stored = self.cache.get_encoded((token, index))
        head = None if stored is not None else self.cache.get_encoded((token, index, HEAD))
        keep = stored is None and self.keep_stored(source, parts)

        def run() -> Any:
            return parts.read_here(index, box, stored=stored, head=head, keep=keep)

        result = self.reader.read_here(source, index, run, box)
        self._remember(token, index, stored is not None, result)
        return result.array

    def read_batch(self, source: ChunkSource, items: list[tuple[ChunkIndex, Box]]) -> list[Any]:
        """:meth:`read_here` for several parts of one local source, their disk reads issued
        together; the values (or the exception raised) of each, in order."""
        parts = source.partial_reader()
        token = source.token
        held = [self.cache.get_encoded((token, index)) for index, _ in items]
        heads = [None if st is not None else self.cache.get_encoded((token, index, HEAD))
                 for (index, _), st in zip(items, held)]
        keep = self.keep_stored(source, parts)
        todo = [i for i, st in enumerate(held) if st is None]
        raw: dict[int, Any] = {}
        if todo:
            try:
                got = parts.read_many([(items[i][0], items[i][1], heads[i]) for i in todo], keep)
            except Exception as exc:  # noqa: BLE001 - one item raises its own error: checked below
                if len(todo) != 1:
                    raise
                got = [exc]
            raw = dict(zip(todo, got))
        out: list[Any] = []
        for i, (index, box) in enumerate(items):
            if i in raw:
                found = raw[i]

                def run(found: Any = found) -> Any:
                    if isinstance(found, BaseException):
                        raise found
                    return found
            else:
                def run(found: Any = (index, box, held[i])) -> Any:  # the same signature
                    return parts.read_here(found[0], found[1], stored=found[2])
            try:
                result = self.reader.read_here(source, index, run, box)
            except BaseException as exc:  # noqa: BLE001 - goes to this part's waiter
                out.append(exc)
                continue
            self._remember(token, index, held[i] is not None, result)
            out.append(result.array)
        return out

    def _remember(self, token: str, index: ChunkIndex, hit: bool, result: Any) -> None:
        """Count an encoded-tier hit; keep what the read fetched (a frame, a head)."""
        if hit:
            self.stats.count("encoded_hits")
            if self.table.take_prefetched((token, index, STORED)):
                self.stats.count("prefetch_used")
        stored, head = getattr(result, "stored", None), getattr(result, "head", None)
        if stored is not None and config.get().keep_stored != "never":
            self.cache.put_encoded((token, index), stored, stored.nbytes)
            self.cache.discard_encoded([(token, index, HEAD)])
        elif head is not None:
            size = len(head.raw) + head.starts.nbytes + head.ends.nbytes
            self.cache.put_encoded((token, index, HEAD), head, size)

    async def _stored_in_flight(self, token: str, index: ChunkIndex) -> Any:
        """The stored bytes of a read-ahead of this chunk in flight, once it ends (or None)."""
        read = self.table.get((token, index, STORED))
        if read is None or read.state != "running":  # a queued one may wait on this read's slot
            return None
        try:
            await asyncio.wrap_future(read.future)
        except Exception:  # noqa: BLE001 - the read-ahead failed: read the part itself
            return None
        return self.cache.get_encoded((token, index))

    async def read_stored(self, source: ChunkSource, index: ChunkIndex) -> None:
        """Read chunk ``index``'s stored bytes into the encoded tier (no decoding)."""
        token = source.token
        if self.cache.has_encoded((token, index)):
            return
        stored = await self.reader.read_stored(source, index, source.partial_reader().read_stored)
        if stored is not None:
            self.cache.put_encoded((token, index), stored, stored.nbytes)

    async def read_whole(self, source: ChunkSource, index: ChunkIndex) -> np.ndarray | None:
        """The whole chunk decoded from its stored bytes in the encoded tier (None: not there)."""
        parts = source.partial_reader()
        if parts is None:
            return None
        stored = self.cache.get_encoded((source.token, index))
        if stored is None:
            return None
        loop = asyncio.get_running_loop()

        async def run() -> tuple[np.ndarray, int]:
            array = await loop.run_in_executor(None, parts.decode_stored, index, stored)
            return array, 0

        array = await self.reader.read(source, index, run)
        self.stats.count("encoded_hits")
        return array
