"""Read parts of a Zarr array's blosc chunks: only the blocks a region needs, by byte range.

:class:`BloscParts` is what :meth:`ZarrSource.partial_reader` returns for an array whose
chunks are C-ordered blosc frames (and C-Blosc2 is loaded). The engine asks it

- :meth:`BloscParts.worth` -- does decoding ``box`` of a chunk pay (at most
  :data:`PART_FRACTION` of the chunk's blocks; the block size is learned from the frames read);
- :meth:`BloscParts.read_many` (local files, a batch in the reading thread) and
  :meth:`BloscParts.read` (remote stores, on the loop) -- the values of ``box``, from the
  stored frame when the engine holds it (its encoded tier: :meth:`BloscParts.from_frame`),
  else by reading the frame's head (header and block table: kept by the engine too) and then
  only the byte ranges of the blocks needed, coalesced, through the store's one byte
  interface (:mod:`.bytes`: ``pread`` for local files, range requests for remote stores).
  A local batch first tells the kernel about every head it will read, reads them, then tells
  it about every block range, and only then reads and decodes them one by one: the disk
  works on all of a batch's requests at once;
- :meth:`BloscParts.read_stored` -- a chunk's stored bytes, undecoded (the prefetcher's cheap
  read-ahead for remote stores).

For remote stores a cold part pays two round trips (head, then blocks) where the whole frame
takes one: :class:`Link` measures this store's latency and bandwidth from its own requests and
the reader fetches ranges only when they are expected to be faster (large frames, slow links).
The range fetch is one small function, :func:`fetch_range`, over ``ZarrSource._fetch_stored``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CorruptChunkError
from ._cblosc2 import item_decoder
from .blosc_partial import (
    PREFIX,
    BloscHead,
    Box,
    PartsUnsupported,
    decode_box,
    decoded_fraction,
    head_length,
    layout,
    parse_head,
    sparse_frame,
)
from .bytes import LOCAL_GAP, ByteRange, LocalFiles

#: a ZarrSource (not imported: it imports this module)
ZarrSource = Any

#: decode a part when it needs at most this share of the chunk's blocks
PART_FRACTION = 0.5
#: the largest block size assumed until a frame of the array has been read
GUESS_BLOCKSIZE = 1 << 16
_MEMO = 4096

#: one part to read: the chunk index, the box, the chunk's head when held (else None)
Item = tuple[tuple[int, ...], Box, "BloscHead | None"]


@dataclass
class PartRead:
    """What reading one part did."""

    array: np.ndarray  # the box's values, in the source's (native) dtype
    moved: int  # bytes read from the store
    decoded: int  # bytes of blocks decoded
    stored: np.ndarray | None = None  # the whole stored frame, when it was read
    head: BloscHead | None = None  # the frame's head, when it was read
    seconds: float | None = None  # from the start of its batch to its values (None: unknown)


class Where:
    """Names a chunk of a source in an error message, formatted only when one is raised."""

    __slots__ = ("source", "index")

    def __init__(self, source: Any, index: tuple[int, ...]) -> None:
        self.source, self.index = source, index

    def __str__(self) -> str:
        return str(self.source._where(self.index))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class Link:
    """This store's request latency and bandwidth, measured from its own requests."""

    def __init__(self) -> None:
        self.latency: float | None = None
        self.bandwidth: float | None = None

    def record(self, nbytes: int, seconds: float) -> None:
        if nbytes <= 1 << 16:
            self.latency = seconds if self.latency is None else 0.7 * self.latency + 0.3 * seconds
        elif nbytes >= 1 << 18:
            rate = nbytes / max(1e-4, seconds - (self.latency or 0.0))
            self.bandwidth = rate if self.bandwidth is None else 0.7 * self.bandwidth + 0.3 * rate

    def ranges_pay(self, whole: int, needed: int, head_known: bool) -> bool:
        """Whether fetching ``needed`` bytes by range (after the head, unless known) beats
        fetching the ``whole`` frame. Unmeasured: ranges first (measures the latency), then
        one whole frame (measures the bandwidth)."""
        if self.latency is None:
            return True
        if self.bandwidth is None:
            return False
        trips = 1 if head_known else 2
        return trips * self.latency + needed / self.bandwidth < self.latency + whole / self.bandwidth

    def gap(self) -> int:
        """Ranges closer than this many bytes are fetched as one (a gap costs less than a
        request)."""
        if self.latency is None or self.bandwidth is None:
            return 1 << 16
        return int(min(1 << 24, self.latency * self.bandwidth))


def reader_for(source: ZarrSource) -> BloscParts | None:
    """A part reader for ``source``, or None when its chunks must be read whole."""
    chain = source._chain
    if chain is None or chain.crc32c or chain.order != "C" or chain.compressor is None:
        return None
    if getattr(chain.compressor, "codec_id", None) != "blosc" or item_decoder() is None:
        return None
    if source._shards is not None:
        return None  # inner chunks of shards: read by the shard reader, whole
    if not isinstance(source._bytes, LocalFiles) and not (source.remote and source.is_async):
        return None  # zarr Store objects, memory:// and other blocking filesystems: read whole
    return BloscParts(source)


class BloscParts:
    """Reads parts of the chunks of one blosc-compressed Zarr array."""

    def __init__(self, source: ZarrSource) -> None:
        assert source._chain is not None
        self.source = source
        self.shape = tuple(source.chunks)  # stored chunks are whole, also at the edges
        self.dtype = np.dtype(source._chain.dtype)  # as stored (byte order included)
        self.remote = bool(source.remote)
        self.blocksize: int | None = None
        self.head_len: int | None = None
        self.ratio: float | None = None  # stored / decoded bytes, last frame seen
        self.link = Link()
        self._worth: dict[Box, bool] = {}
        self.unsupported = False

    # -- planning ----------------------------------------------------------------------------
    def worth(self, box: Box) -> bool:
        """Whether decoding only ``box`` of a chunk pays (few of its blocks)."""
        if self.unsupported:
            return False
        found = self._worth.get(box)
        if found is None:
            blocksize = self.blocksize or self._guess()
            found = decoded_fraction(self.shape, self.dtype.itemsize, box, blocksize) <= PART_FRACTION
            if len(self._worth) >= _MEMO:
                self._worth.clear()
            self._worth[box] = found
        return found

    def _guess(self) -> int:
        """The block size to plan with before a frame was read: blosc's automatic sizes
        are tens of KiB; a chunk is assumed to hold at least 16 blocks."""
        nbytes = math.prod(self.shape) * self.dtype.itemsize
        return max(self.dtype.itemsize, min(GUESS_BLOCKSIZE, nbytes // 16))

    def _learn(self, head: BloscHead) -> None:
        if head.special or head.memcpyed:
            return
        if head.blocksize != self.blocksize:
            self.blocksize = head.blocksize
            self._worth.clear()
        self.head_len = head.head_len
        self.ratio = head.cbytes / max(1, head.nbytes)

    # -- reading -----------------------------------------------------------------------------
    async def read(
        self,
        index: tuple[int, ...],
        box: Box,
        *,
        stored: np.ndarray | None = None,
        head: BloscHead | None = None,
        keep: bool = False,
    ) -> PartRead:
        """The values of ``box`` of chunk ``index`` of a remote store: from ``stored`` (the
        frame, held by the engine) when given, else from the store (``head``: the frame's
        head, when held; ``keep``: read the whole frame, to be held). A local store's parts
        are read in batches by the reading thread (:meth:`read_many`)."""
        if stored is not None:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, self.from_frame, stored, index, box)
        return await self._read_remote(index, box, head, keep)

    async def read_stored(self, index: tuple[int, ...]) -> np.ndarray:
        """Chunk ``index`` of a remote store as stored (undecoded)."""
        return np.frombuffer(await fetch_range(self, index), dtype=np.uint8)

    def decode_stored(self, index: tuple[int, ...], stored: np.ndarray) -> np.ndarray:
        """The whole chunk ``index`` decoded from its stored bytes."""
        return self.source._decode(stored, index)

    # -- the steps ---------------------------------------------------------------------------
    def from_frame(self, frame: np.ndarray, index: tuple[int, ...], box: Box, moved: int = 0) -> PartRead:
        """Decode ``box`` from the whole stored ``frame`` (``moved``: the bytes read for it)."""
        where = Where(self.source, index)
        try:
            head = parse_head(frame, where)
            self._learn(head)
            values, decoded = decode_box(frame, head, self.shape, self.dtype, box, where)
        except PartsUnsupported:
            self.unsupported = True
            whole = self.source._decode(frame, index)
            values, decoded = whole[box_slices(box)], whole.nbytes
        return PartRead(self._native(values), moved, decoded)

    def _read_file(self, index: tuple[int, ...]) -> np.ndarray:
        """A local chunk's whole stored frame (through the store's byte interface)."""
        buf = self.source._bytes.get_sync(self.source.chunk_key(index))
        if buf is None:
            raise self.source._missing(index)
        return np.frombuffer(buf, dtype=np.uint8)

    def read_many(self, items: list[tuple[tuple[int, ...], Box, BloscHead | None]], keep: bool = False) -> list[Any]:
        """Parts of local frames, their I/O batched (:meth:`_read_batch`):
        a ``PartRead`` per item, or (in a list of several) the exception it raised; one
        item raises it."""
        if keep or self.unsupported:
            out: list[Any] = []
            for index, box, _ in items:
                try:
                    frame = self._read_file(index)
                    result = self.from_frame(frame, index, box, frame.size)
                    result.stored = frame if keep else None
                    out.append(result)
                except Exception as exc:  # noqa: BLE001
                    out.append(exc)
        else:
            out = self._read_batch(items)
            if any(isinstance(r, PartsUnsupported) for r in out):
                self.unsupported = True
                redo = [i for i, r in enumerate(out) if isinstance(r, PartsUnsupported)]
                for i, r in zip(redo, self.read_many([items[i] for i in redo])):
                    out[i] = r
        if len(items) == 1 and isinstance(out[0], BaseException):
            raise out[0]
        return out

    def _read_batch(self, items: list[Item]) -> list[Any]:
        """``PartRead`` (or the exception raised) for each item of a local store, the disk
        told of every head, then of every block range, before any is read; each file is
        opened once and its blocks read straight into this thread's sparse frame."""
        store, start = self.source._bytes, time.perf_counter()
        keys = [self.source.chunk_key(index) for index, _, _ in items]
        want = ByteRange(0, max(PREFIX, self.head_len or 4096))
        out: list[Any] = [None] * len(items)
        with store.opened(keys) as fds:
            for key, (_, _, head) in zip(keys, items):
                if head is None and fds[key] is not None:
                    store.hint(fds[key], want)
            heads: dict[int, BloscHead] = {}
            for i, (key, (index, _, head)) in enumerate(zip(keys, items)):
                try:
                    heads[i] = head if head is not None else self._read_head(store, fds[key], index, want)
                except Exception as exc:  # noqa: BLE001 - this item's failure, the others go on
                    out[i] = exc
            spans = {i: h.block_ranges(self._blocks(h, items[i][1]), LOCAL_GAP) for i, h in heads.items()}
            for i, ranges in spans.items():
                fd = fds[keys[i]]
                if fd is not None:
                    for a, b in ranges:
                        store.hint(fd, ByteRange(a, b))
            for i, ranges in spans.items():
                index, box, held = items[i]
                try:
                    fd = fds[keys[i]]
                    into = None if fd is None else lambda a, b, view, fd=fd: store.read_into(fd, ByteRange(a, b), view)
                    out[i] = self._from_ranges(heads[i], ranges, into, index, box)
                except Exception as exc:  # noqa: BLE001
                    out[i] = exc
                    continue
                out[i].moved = sum(b - a for a, b in ranges) + (0 if held else heads[i].head_len)
                out[i].head, out[i].seconds = None if held else heads[i], time.perf_counter() - start
        return out

    def _read_head(self, store: Any, fd: int | None, index: tuple[int, ...], want: ByteRange) -> BloscHead:
        """A local frame's head, read from the open file ``fd`` (learnt from)."""
        where = Where(self.source, index)
        if fd is None:
            raise self.source._missing(index)
        data = bytearray(len(want))
        data = data[: store.read_into(fd, want, memoryview(data))]
        need = head_length(data, where)
        if need > len(data):
            more = bytearray(need - len(data))
            data += more[: store.read_into(fd, ByteRange(len(data), need), memoryview(more))]
        head = parse_head(np.frombuffer(bytes(data), dtype=np.uint8), where, whole=False)
        self._learn(head)
        return head

    def _blocks(self, head: BloscHead, box: Box) -> np.ndarray:
        return layout(self.shape, self.dtype.itemsize, box, head.blocksize, head.nbytes).blocks

    async def _read_remote(
        self, index: tuple[int, ...], box: Box, head: BloscHead | None, keep: bool
    ) -> PartRead:
        loop = asyncio.get_running_loop()
        nbytes = math.prod(self.shape) * self.dtype.itemsize
        whole = head.cbytes if head is not None else int(nbytes * (self.ratio or 1.0))
        blocksize = self.blocksize or self._guess()
        needed = decoded_fraction(self.shape, self.dtype.itemsize, box, blocksize) * whole
        if keep or self.unsupported or not self.link.ranges_pay(whole, int(needed), head is not None):
            frame = await self.read_stored(index)
            result = await loop.run_in_executor(None, self.from_frame, frame, index, box, frame.size)
            result.stored = frame  # fetching it again would cost a round trip: the engine keeps it
            return result
        where = Where(self.source, index)
        moved, fresh, data = 0, None, b""
        if head is None:
            want = max(PREFIX, self.head_len or 4096)
            data = await fetch_range(self, index, 0, want)
            need = head_length(data, where)
            if need > len(data):
                data += await fetch_range(self, index, len(data), need)
            moved += len(data)
            try:
                fresh = head = parse_head(np.frombuffer(data, dtype=np.uint8), where, whole=False)
            except PartsUnsupported:
                self.unsupported = True
                return await self._read_remote(index, box, None, keep)
            self._learn(head)
        ranges = head.block_ranges(self._blocks(head, box), self.link.gap())
        have = len(data)  # the head's request may have brought the first blocks along

        async def get(a: int, b: int) -> bytes:
            return data[a:b] if b <= have else await fetch_range(self, index, a, b)

        datas = await asyncio.gather(*(get(a, b) for a, b in ranges))
        moved += sum(len(d) for (a, b), d in zip(ranges, datas) if b > have)
        try:
            result = await loop.run_in_executor(None, self._from_ranges, head, ranges, _copier(datas), index, box)
        except PartsUnsupported:
            self.unsupported = True
            return await self._read_remote(index, box, head, keep)
        result.moved, result.head = moved, fresh
        return result

    def _from_ranges(
        self, head: BloscHead, ranges: list[tuple[int, int]], into: Fill | None,
        index: tuple[int, ...], box: Box,
    ) -> PartRead:
        """``box`` decoded from the block ranges ``into(a, b, view)`` writes into a sparse copy
        of the frame, range by range (returning the bytes written, or None when the chunk is
        missing; ``into`` None: the chunk is missing)."""
        where = Where(self.source, index)
        frame = sparse_frame(head)
        view = memoryview(frame)  # type: ignore[arg-type]  # an ndarray exports its buffer
        for a, b in ranges:
            got = None if into is None else into(a, b, view[a:b])
            if got is None:
                raise self.source._missing(index)
            if got != b - a:
                raise CorruptChunkError(f"{where}: asked for bytes {a}..{b} of the stored chunk, got {got}")
        values, decoded = decode_box(frame, head, self.shape, self.dtype, box, where)
        return PartRead(self._native(values), 0, decoded)

    def _native(self, values: np.ndarray) -> np.ndarray:
        return values if values.dtype.isnative else values.astype(values.dtype.newbyteorder("="))


#: writes bytes ``a:b`` of a stored frame into ``view``: the bytes written, or None (missing)
Fill = Callable[[int, int, memoryview], "int | None"]


def _copier(datas: list[Any]) -> Fill:
    """A :data:`Fill` that copies fetched block ranges (one per range, in turn)."""
    found = iter(datas)

    def into(a: int, b: int, view: memoryview) -> int | None:
        data = next(found)
        if data is None:
            return None
        if len(data) == b - a:
            view[:] = np.frombuffer(data, dtype=np.uint8)  # type: ignore[call-overload]
        return len(data)

    return into


async def fetch_range(
    parts: BloscParts, index: tuple[int, ...], start: int | None = None, stop: int | None = None
) -> Any:
    """Bytes ``start:stop`` of chunk ``index`` as stored (short at the object's end; the
    whole object when no range is given), timed for the part reader's link model. A server
    that ignores ranges is answered from the whole object by the byte store."""
    t0 = time.perf_counter()
    data = await parts.source._fetch_stored(index, start, stop)
    parts.link.record(len(data), time.perf_counter() - t0)
    return data


def box_slices(box: Box) -> tuple[slice, ...]:
    """``box`` as slices."""
    return tuple(slice(lo, hi) for lo, hi in box)
