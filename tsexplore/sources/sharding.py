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

Codec chains this does not decode (nested sharding, transpose inside the shard) are left to
zarr (``layout_from_zarr`` returns None).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CorruptChunkError
from .bytes import ByteRange
from .codecs import CodecChain, chain_from_codecs
from .requests import AuxKey, ChunkIndex, Located, NeedAux

MAX_UINT64 = 2**64 - 1
#: inner chunks the engine reads as one batch: at most this many bytes of them (a local batch
#: holds one read slot, so smaller batches leave the other slots to read ahead)
LOCAL_BATCH_BYTES = 4 * 1024 * 1024
REMOTE_BATCH_BYTES = 32 * 1024 * 1024


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

    def max_batch(self, chunk_nbytes: int, local: bool) -> int:
        most = (LOCAL_BATCH_BYTES if local else REMOTE_BATCH_BYTES) // max(1, chunk_nbytes)
        return int(max(1, min(most, math.prod(self.chunks_per_shard))))

    def locate(self, token: str, index: ChunkIndex, shard_key: Callable[[tuple[int, ...]], str],
               aux: Callable[[AuxKey], Any]) -> Located | NeedAux:
        """Where inner chunk ``index`` is: a byte range of its shard, absent, or first the
        shard's index."""
        shard, inner = self.shard_of(index)
        key = AuxKey(token, "index", shard)
        table = aux(key)
        if table is None:
            return NeedAux(key, shard_key(shard), self.index_range())
        if table.size == 0:
            return Located(None)  # the shard is absent
        off, n = table[inner].tolist()
        if off == MAX_UINT64:
            return Located(None)
        return Located(shard_key(shard), (ByteRange(off, off + n),))

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
