"""Sharded Zarr v3 arrays read natively: each shard's index once, inner chunks by byte range.

An array whose codec is ``sharding_indexed`` stores one object per *shard*; the source's
chunk grid is the grid of *inner* chunks, and an inner chunk is an ordinary whole request. To
locate it (:meth:`ShardLayout.locate`):

1. the shard's **index** (``uint64`` offset/length pairs, one per inner chunk, at the start or
   end of the shard, encoded with the index codecs: ``bytes`` + ``crc32c``, the checksum
   checked) is an auxiliary entry (``AuxKey(token, "index", shard)``): read once with one
   ranged read, parsed (:meth:`ShardLayout.parse_index`) and kept in the engine's encoded tier,
   within the byte budget. An absent shard is an empty index;
2. the inner chunk is then a byte range of the shard; the engine reads the inner chunks of one
   shard asked for together as one batch, and the byte store coalesces neighbouring ranges;
3. each inner chunk is decoded by tsexplore's codecs (:class:`~.codecs.CodecChain`). An index
   entry of all ones is an absent inner chunk: the fill value under ``missing="fill"``,
   :class:`~tsexplore.errors.MissingChunkError` under ``missing="raise"``.

On a local store, small inner chunks are read by **units** (:class:`ShardUnits`): the inner
chunks of one shard that fill its trailing axes, up to :data:`UNIT_BYTES`, are one chunk of the
source's grid (one request, one located list of byte ranges, one cache entry): a
``1 x 256 x 256`` inner chunk of a ``16 x 1024 x 1024`` shard is read as a ``1 x 1024 x 1024``
unit, a frame's plane. A box of a unit (a :class:`~.requests.Blocks` part) decodes only the
inner chunks holding it. Remote stores keep the inner grid (their reads ahead are kept as
stored bytes, one range per request).

Codec chains this does not decode (nested sharding, transpose inside the shard) are left to
zarr (``layout_from_zarr`` returns None).
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CorruptChunkError
from . import buffers
from .bytes import ByteRange
from .codecs import CodecChain, chain_from_codecs
from .requests import AuxKey, Box, ChunkIndex, Located, NeedAux

MAX_UINT64 = 2**64 - 1
#: inner chunks the engine reads as one batch: at most this many bytes of them (a local batch
#: holds one read slot, so smaller batches leave the other slots to read ahead)
LOCAL_BATCH_BYTES = 4 * 1024 * 1024
REMOTE_BATCH_BYTES = 32 * 1024 * 1024
#: a local store's inner chunks are grouped into units of at most this many decoded bytes
UNIT_BYTES = 4 * 1024 * 1024
#: a box of a unit is read as a part when it needs at most this share of its inner chunks
UNIT_PART_FRACTION = 0.5


@dataclass(frozen=True)
class ShardLayout:
    """How an array's shards hold their inner chunks."""

    shard_shape: tuple[int, ...]
    inner_shape: tuple[int, ...]
    index_chain: CodecChain
    index_nbytes: int
    index_at_start: bool
    inner_chain: CodecChain

    @functools.cached_property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(self.shard_shape, self.inner_shape))

    def shard_of(self, index: ChunkIndex) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(shard coordinates, coordinates inside the shard) of inner chunk ``index``."""
        cps = self.chunks_per_shard
        return tuple([i // n for i, n in zip(index, cps)]), tuple([i % n for i, n in zip(index, cps)])

    def index_range(self) -> ByteRange:
        n = self.index_nbytes
        return ByteRange(0, n) if self.index_at_start else ByteRange.suffix(n)

    def unit_shape(self, itemsize: int) -> tuple[int, ...]:
        """The read unit: the inner chunk widened to the shard's extent along its trailing
        axes, last axis first, while the unit stays within :data:`UNIT_BYTES` (the inner
        chunk itself when already that large). A unit's inner chunks need not be contiguous
        in the shard (zarr writes them in Morton order): a unit is read as several ranges."""
        unit = list(self.inner_shape)
        for axis in reversed(range(len(unit))):
            wider = [*unit[:axis], self.shard_shape[axis], *unit[axis + 1:]]
            if math.prod(wider) * itemsize > UNIT_BYTES:
                break
            unit = wider
        return tuple(unit)

    def max_batch(self, chunk_nbytes: int, local: bool) -> int:
        most = (LOCAL_BATCH_BYTES if local else REMOTE_BATCH_BYTES) // max(1, chunk_nbytes)
        return int(max(1, min(most, math.prod(self.chunks_per_shard))))

    def locate(self, token: str, index: ChunkIndex, shard_key: Callable[[tuple[int, ...]], str],
               aux: Callable[[AuxKey], Any]) -> Located | NeedAux:
        """Where inner chunk ``index`` is: a byte range of its shard, absent, or first the
        shard's index."""
        shard, inner = self.shard_of(index)
        table = self.table(token, shard, shard_key, aux)
        if isinstance(table, NeedAux):
            return table
        found = self.entry(table, inner)
        return Located(None) if found is None else Located(shard_key(shard), (found,))

    def table(self, token: str, shard: tuple[int, ...], shard_key: Callable[[tuple[int, ...]], str],
              aux: Callable[[AuxKey], Any]) -> np.ndarray | NeedAux:
        """Shard ``shard``'s parsed index (from the engine's encoded tier), or the read of it."""
        key = AuxKey(token, "index", shard)
        table = aux(key)
        return NeedAux(key, shard_key(shard), self.index_range()) if table is None else table

    @staticmethod
    def entry(table: np.ndarray, inner: tuple[int, ...]) -> ByteRange | None:
        """The byte range of the inner chunk at ``inner`` (coordinates inside its shard), or
        None: the shard (an empty table) or the inner chunk (an entry of all ones) is absent."""
        if table.size == 0:
            return None
        off, n = table[inner].tolist()
        return None if off == MAX_UINT64 else ByteRange(off, off + n)

    def parse_index(self, buf: Any, where: str) -> tuple[np.ndarray, int]:
        """The index as a ``(*chunks_per_shard, 2)`` array of (offset, length), and its bytes;
        an empty one when the shard is absent (``buf`` None)."""
        if buf is None:
            return np.zeros((0, 2), dtype=np.uint64), 16
        shape = (*self.chunks_per_shard, 2)
        if len(buf) != self.index_nbytes:
            raise CorruptChunkError(
                f"{where}: shard index has {len(buf)} bytes, expected {self.index_nbytes} "
                "(the shard is shorter than its index)"
            )
        index = self.index_chain.decode(buf, shape, f"{where} (shard index)")
        offsets, lengths = index[..., 0], index[..., 1]
        empty_off, empty_len = offsets == MAX_UINT64, lengths == MAX_UINT64
        if (empty_off != empty_len).any():
            raise CorruptChunkError(f"{where}: shard index has half-empty entries")
        index = np.array(index)  # its own memory (not a recycled decode buffer): it is kept
        return index, index.nbytes


def layout_from_zarr(metadata: Any) -> ShardLayout | None:
    """The :class:`ShardLayout` of a sharded v3 array's metadata, or None (not sharded, or
    codecs inside the shard that tsexplore does not decode)."""
    if getattr(metadata, "zarr_format", None) != 3:
        return None
    from zarr.codecs import ShardingCodec

    codecs = list(metadata.codecs)
    if len(codecs) != 1 or not isinstance(codecs[0], ShardingCodec):
        return None
    codec = codecs[0]
    native = np.dtype(metadata.dtype.to_native_dtype())
    inner = chain_from_codecs(codec.codecs, native)
    index_chain = chain_from_codecs(codec.index_codecs, np.dtype("uint64"))
    if inner is None or index_chain is None:
        return None
    shard_shape = tuple(int(s) for s in metadata.chunk_grid.chunk_shape)
    inner_shape = tuple(int(c) for c in codec.chunk_shape)
    if len(shard_shape) != len(inner_shape) or any(s % c for s, c in zip(shard_shape, inner_shape)):
        return None
    nchunks = math.prod(s // c for s, c in zip(shard_shape, inner_shape))
    location = getattr(codec.index_location, "value", codec.index_location)
    return ShardLayout(
        shard_shape, inner_shape, index_chain, 16 * nchunks + (4 if index_chain.crc32c else 0),
        location == "start", inner,
    )


#: one inner chunk of a unit: its index on the inner grid, its box in inner-chunk coordinates,
#: the same box in the coordinates of what is decoded (the unit, or the box asked of it)
Piece = tuple[ChunkIndex, tuple[slice, ...], tuple[slice, ...]]


class ShardUnits:
    """A sharded array read by units of inner chunks (see the module docstring): where a
    unit's (or a box's) inner chunks are, and decoding them into one array. The source's
    chunk grid is the units' grid; ``worth`` says when a box is read as a part."""

    def __init__(self, layout: ShardLayout, unit: tuple[int, ...], shape: tuple[int, ...],
                 dtype: np.dtype, fill_value: Any) -> None:
        self.layout = layout
        self.unit = unit
        self.shape = shape
        self.dtype = dtype
        self.fill_value = fill_value
        #: inner chunks per unit along each axis
        self.per = tuple(u // c for u, c in zip(unit, layout.inner_shape))

    def worth(self, box: Box, shape: tuple[int, ...] | None = None) -> bool:
        """Whether a box of a unit (of ``shape`` once trimmed to the array's edge) is read as
        a part: it needs at most :data:`UNIT_PART_FRACTION` of the unit's inner chunks."""
        inner = self.layout.inner_shape
        needed = math.prod((hi - 1) // c - lo // c + 1 for (lo, hi), c in zip(box, inner))
        held = math.prod(-(-n // c) for n, c in zip(shape or self.unit, inner))
        return needed <= UNIT_PART_FRACTION * held

    def shard_of(self, index: ChunkIndex) -> tuple[int, ...]:
        """The shard holding unit ``index``."""
        return tuple([i * u // s for i, u, s in zip(index, self.unit, self.layout.shard_shape)])

    def pieces(self, index: ChunkIndex, box: Box | None) -> list[Piece]:
        """The inner chunks of unit ``index`` that hold ``box`` (unit-local; None: the unit
        trimmed to the array's edge), in C order."""
        origin = [i * u for i, u in zip(index, self.unit)]
        if box is None:
            box = tuple((0, min(u, n - o)) for u, n, o in zip(self.unit, self.shape, origin))
        axes = []
        for (lo, hi), c, o in zip(box, self.layout.inner_shape, origin):
            spans = []
            for k in range(lo // c, (hi - 1) // c + 1):
                a, b = max(lo, k * c), min(hi, (k + 1) * c)
                spans.append(((o + k * c) // c, slice(a - k * c, b - k * c), slice(a - lo, b - lo)))
            axes.append(spans)
        return [
            (tuple(s[0] for s in combo), tuple(s[1] for s in combo), tuple(s[2] for s in combo))
            for combo in itertools.product(*axes)
        ]

    def locate(self, token: str, index: ChunkIndex, box: Box | None,
               shard_key: Callable[[tuple[int, ...]], str], aux: Callable[[AuxKey], Any]) -> Located | NeedAux:
        """Where the inner chunks of unit ``index`` holding ``box`` are: their byte ranges in
        the shard, in order, with ``how`` listing each piece and whether it is stored;
        absent when none is; first the shard's index."""
        layout = self.layout
        shard = self.shard_of(index)
        table = layout.table(token, shard, shard_key, aux)
        if isinstance(table, NeedAux):
            return table
        cps = layout.chunks_per_shard
        ranges = []
        how = []
        for piece in self.pieces(index, box):
            found = layout.entry(table, tuple([i % c for i, c in zip(piece[0], cps)]))
            if found is not None:
                ranges.append(found)
            how.append((piece, found is not None))
        if not ranges:
            return Located(None)
        return Located(shard_key(shard), tuple(ranges), tuple(how))

    def decode(self, located: Located, data: list[Any], box_shape: tuple[int, ...],
               where: Callable[[ChunkIndex], object], missing: Callable[[ChunkIndex], Exception] | None
               ) -> tuple[np.ndarray, int]:
        """The unit (or box) of shape ``box_shape`` from its inner chunks' bytes (``data``,
        in ``located.ranges`` order) into one recycled buffer; an inner chunk the shard lacks
        is the fill value, or ``missing(its index)`` raised (``missing="raise"``). Returns the
        values and the bytes decoded."""
        itemsize = self.dtype.itemsize
        out = buffers.empty(math.prod(box_shape) * itemsize).view(self.dtype).reshape(box_shape)
        inner_shape = self.layout.inner_shape
        chain = self.layout.inner_chain
        stored = iter(data)
        decoded = 0
        scratch = _scratch(math.prod(inner_shape) * chain.dtype.itemsize)
        for (inner, src, dst), present in located.how:
            if present:
                values = chain.decode(next(stored), inner_shape, where(inner), scratch)
                out[dst] = values[src]
                decoded += values.nbytes
            elif missing is not None:
                raise missing(inner)
            else:
                out[dst] = self.fill_value
        return out, decoded


_scratches = threading.local()


def _scratch(nbytes: int) -> np.ndarray:
    """This thread's buffer of ``nbytes`` that an inner chunk is decoded into before it is
    copied into its unit: touched once, reused by every inner chunk of that size."""
    found = getattr(_scratches, "by_size", None)
    if found is None:
        found = _scratches.by_size = {}
    buf = found.get(nbytes)
    if buf is None:
        if len(found) >= 4:
            found.clear()
        buf = found[nbytes] = np.empty(nbytes, dtype=np.uint8)
    return buf  # type: ignore[no-any-return]
