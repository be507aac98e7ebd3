"""Sharded Zarr v3 arrays read natively: each shard's index once, inner chunks by byte range.

An array whose codec is ``sharding_indexed`` stores one object per *shard*; the source's
chunk grid is the grid of *inner* chunks. To read inner chunks of a shard:

1. its **index** (``uint64`` offset/length pairs, one per inner chunk, at the start or end
   of the shard, encoded with the index codecs: ``bytes`` + ``crc32c``, the checksum
   checked) is read once with one ranged read and kept in the engine's cache, under a key
   of its own (``f"{token}#shard-index"``), within the byte budget; concurrent reads of one
   shard wait for one index read. An absent shard is remembered as an empty index;
2. the inner chunks asked for together (a batch: ``ChunkSource.read_chunks_counted``) are
   sorted by offset and **coalesced**: neighbours whose gap is at most ``gap`` bytes go in
   one ranged read (:func:`coalesce`), up to ``max_run`` bytes each (``os.pread`` locally,
   a ranged GET remotely, through :mod:`.bytes`);
3. each inner chunk is decoded by tsexplore's codecs (:class:`~.codecs.CodecChain`). An
   index entry of all ones is an absent inner chunk: the fill value under ``missing="fill"``,
   :class:`~tsexplore.errors.MissingChunkError` under ``missing="raise"``.

Codec chains this does not decode (nested sharding, transpose inside the shard) are left
to zarr (``layout_from_zarr`` returns None).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .. import config
from ..errors import ChunkReadError, CorruptChunkError
from .base import ChunkIndex, count_io, read_services, share
from .bytes import LOCAL_GAP, ByteRange, ByteStore
from .codecs import CodecChain, chain_from_codecs

MAX_UINT64 = 2**64 - 1
#: gaps read through rather than split into two requests (a remote request; LOCAL_GAP locally)
REMOTE_GAP = 1024 * 1024
#: most bytes one coalesced read fetches
MAX_RUN = 16 * 1024 * 1024
#: decoded bytes of one batch. A local batch is read and decoded in one trip to a read thread
#: (measured, a scrub of 1x256x256 inner chunks: batches of 4 MiB 58-80 frames/s, of 1 MiB
#: 47-63: a batch holds one read slot, and a read ahead has one); a remote one fetches its
#: ranges on the loop and is decoded in jobs of at most DECODE_JOB bytes, spread over the
#: read threads
LOCAL_BATCH_BYTES = 4 * 1024 * 1024
REMOTE_BATCH_BYTES = 32 * 1024 * 1024
DECODE_JOB = 4 * 1024 * 1024

Result = tuple[np.ndarray, int]


@dataclass(frozen=True)
class ShardLayout:
    """How an array's shards hold their inner chunks."""

    shard_shape: tuple[int, ...]
    inner_shape: tuple[int, ...]
    index_chain: CodecChain
    index_nbytes: int
    index_at_start: bool
    inner_chain: CodecChain

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(self.shard_shape, self.inner_shape))

    def shard_of(self, index: ChunkIndex) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(shard coordinates, coordinates inside the shard) of inner chunk ``index``."""
        cps = self.chunks_per_shard
        return tuple(i // n for i, n in zip(index, cps)), tuple(i % n for i, n in zip(index, cps))

    def index_range(self) -> ByteRange:
        n = self.index_nbytes
        return ByteRange(0, n) if self.index_at_start else ByteRange.suffix(n)

    def decode_index(self, buf: Any, where: str) -> np.ndarray:
        """The index as a ``(*chunks_per_shard, 2)`` array of (offset, length)."""
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
        return index


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


@dataclass(frozen=True)
class Run:
    """One coalesced read: bytes ``[start, stop)`` holding the spans at ``members``."""

    start: int
    stop: int
    members: tuple[int, ...]


def coalesce(spans: Sequence[tuple[int, int]], gap: int, max_run: int) -> list[Run]:
    """Group ``(offset, length)`` spans into reads: sorted by offset, a span joins the read
    before it when the gap between them is at most ``gap`` bytes and the read stays within
    ``max_run`` bytes (a single longer span is a read of its own)."""
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    runs: list[Run] = []
    start = stop = -1
    members: list[int] = []
    for i in order:
        off, n = spans[i]
        end = off + n
        if members and off - stop <= gap and max(end, stop) - start <= max_run:
            stop = max(stop, end)
            members.append(i)
            continue
        if members:
            runs.append(Run(start, stop, tuple(members)))
        start, stop, members = off, end, [i]
    if members:
        runs.append(Run(start, stop, tuple(members)))
    return runs


class ShardedArray(Protocol):
    """What :class:`ShardReader` needs from its source."""

    token: str

    def shard_key(self, shard: tuple[int, ...]) -> str: ...

    def _decode(self, buf: Any, index: ChunkIndex) -> np.ndarray: ...

    def _missing(self, index: ChunkIndex) -> Exception: ...

    def chunk_nbytes(self, index: ChunkIndex | None = None) -> int: ...


class ShardReader:
    """Reads inner chunks of one sharded array through a :class:`~.bytes.ByteStore`."""

    def __init__(self, source: ShardedArray, layout: ShardLayout, store: ByteStore) -> None:
        self.source = source
        self.layout = layout
        self.store = store
        self.gap = LOCAL_GAP if store.sync else REMOTE_GAP
        per = max(1, source.chunk_nbytes())
        most = (LOCAL_BATCH_BYTES if store.sync else REMOTE_BATCH_BYTES) // per
        self.max_batch = int(max(1, min(most, math.prod(layout.chunks_per_shard))))
        self._loading: dict[tuple[Any, ...], asyncio.Future[np.ndarray]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_loading": {}}

    # -- the index ---------------------------------------------------------------------------
    def _where(self, shard: tuple[int, ...]) -> str:
        return f"shard {shard} ({self.source.shard_key(shard)!r})"

    def _cache_key(self, shard: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
        return (f"{self.source.token}#shard-index", shard)

    def _cached(self, shard: tuple[int, ...]) -> np.ndarray | None:
        services = read_services.get()
        return None if services is None else services.cache_get(self._cache_key(shard))

    def _keep(self, shard: tuple[int, ...], index: np.ndarray) -> None:
        count_io("index_reads")
        services = read_services.get()
        if services is not None:
            services.cache_put(self._cache_key(shard), index)

    def _decoded(self, shard: tuple[int, ...], buf: Any) -> np.ndarray:
        if buf is None:  # the shard is absent: every inner chunk is
            return np.zeros((0, 2), dtype=np.uint64)
        return self.layout.decode_index(buf, self._where(shard))

    async def index(self, shard: tuple[int, ...]) -> tuple[np.ndarray, int]:
        """The shard's index (empty: the shard is absent) and the bytes read for it; read
        once (the reads of one shard at the same time wait for one index read), through the
        store's one byte interface (a blocking store reads on a read thread)."""
        found = self._cached(shard)
        if found is not None:
            return found, 0
        loading = self._loading.get(shard)
        if loading is not None:  # another read of this shard is reading its index
            return await asyncio.shield(loading), 0
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._loading[shard] = future
        try:
            buf = await self.store.get(self.source.shard_key(shard), self.layout.index_range())
            index = self._decoded(shard, buf)
            self._keep(shard, index)
            future.set_result(index)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a failure with no other waiter is not logged
            raise
        finally:
            self._loading.pop(shard, None)
        return index, 0 if buf is None else len(buf)

    # -- batches -----------------------------------------------------------------------------
    def read_batch(self, indices: Sequence[ChunkIndex]) -> list[Awaitable[Result]]:
        """One awaitable per inner chunk; the first awaited starts the batch's reads."""
        batch = _Batch(self, [tuple(i) for i in indices])
        return [batch.member(k) for k in range(len(batch.indices))]

    def _plan(self, indices: list[ChunkIndex], index: np.ndarray) -> tuple[list[Any], list[Run]]:
        """Per member: None (absent) or its (offset, length); and the coalesced runs."""
        spans: list[Any]
        if index.size == 0:
            spans = [None] * len(indices)
        else:  # the members' (offset, length) pairs, looked up at once
            cps = self.layout.chunks_per_shard
            inner = np.array([[i % n for i, n in zip(idx, cps)] for idx in indices]).T
            pairs = index.reshape(-1, 2)[np.ravel_multi_index(tuple(inner), cps)].tolist()
            spans = [None if off == MAX_UINT64 else (off, n) for off, n in pairs]
        present = [k for k, s in enumerate(spans) if s is not None]
        runs = coalesce([spans[k] for k in present], self.gap, MAX_RUN)
        return spans, [Run(r.start, r.stop, tuple(present[m] for m in r.members)) for r in runs]

    def _pieces(self, shard: tuple[int, ...], spans: list[Any], runs: list[Run], bufs: list[Any]
                ) -> dict[int, Any]:
        """Each present member's bytes, cut out of its run's buffer."""
        out: dict[int, Any] = {}
        for run, buf in zip(runs, bufs):
            if buf is None or len(buf) < run.stop - run.start:
                got = 0 if buf is None else len(buf)
                raise CorruptChunkError(
                    f"{self._where(shard)}: bytes {run.start}..{run.stop} of the shard were asked "
                    f"for, {got} came back (the shard is shorter than its index says)"
                )
            view = memoryview(buf).cast("B")
            for k in run.members:
                off, n = spans[k]
                out[k] = view[off - run.start : off - run.start + n]
        return out

    def _decode_all(self, indices: list[ChunkIndex], members: Sequence[int], pieces: dict[int, Any]
                    ) -> list[Any]:
        out: list[Any] = []
        for k in members:
            try:
                out.append((self.source._decode(pieces[k], indices[k]), len(pieces[k])))
            except ChunkReadError as exc:
                out.append(exc)
        return out

    async def run(self, indices: list[ChunkIndex]) -> list[Any]:
        """Read a batch (inner chunks of one shard); per member a result or an exception."""
        shard = self.layout.shard_of(indices[0])[0]
        index, index_bytes = await self.index(shard)
        spans, runs = self._plan(indices, index)
        loop = asyncio.get_running_loop()
        if self.store.sync:  # fetched and decoded in one trip to a read thread
            run_here = contextvars.copy_context().run
            decoded = await loop.run_in_executor(None, run_here, self._read_here, indices, shard, spans, runs)
            return self._results(indices, spans, decoded, self._extra(runs, spans, index_bytes))
        key = self.source.shard_key(shard)
        ranges = [ByteRange(r.start, r.stop) for r in runs]
        pieces = self._pieces(shard, spans, runs, await self.store.get_ranges(key, ranges))
        # decoded in jobs spread over the read threads (a frame's inner chunks of one shard
        # in parallel, not one after the other on one thread)
        jobs = self._jobs([k for k, s in enumerate(spans) if s is not None])
        done = await asyncio.gather(*(
            loop.run_in_executor(None, self._decode_all, indices, job, pieces) for job in jobs
        ))
        decoded = {k: r for job, rs in zip(jobs, done) for k, r in zip(job, rs)}
        return self._results(indices, spans, decoded, self._extra(runs, spans, index_bytes))

    def _read_here(self, indices: list[ChunkIndex], shard: tuple[int, ...], spans: list[Any],
                   runs: list[Run]) -> dict[int, Any]:
        """A local batch's runs read and its members decoded by the calling (read) thread,
        with the read threads free meanwhile taking decode jobs in turn (:func:`~.base.share`):
        per present member its result or exception. (Measured, a scrub of 16 inner chunks of
        256 KiB a frame: a trip to a read thread per run and one per decode job, each woken
        through the loop, kept the loop's thread busy 4-6 ms a frame; in one trip, 1.35x the
        frames/s.)"""
        key = self.source.shard_key(shard)
        bufs = [self.store.get_sync(key, ByteRange(r.start, r.stop)) for r in runs]
        pieces = self._pieces(shard, spans, runs, bufs)
        present = [k for k, s in enumerate(spans) if s is not None]
        jobs = self._jobs(present)
        done = share(jobs, lambda job: self._decode_all(indices, job, pieces), config.get().wait_timeout)
        return {k: r for job, rs in zip(jobs, done) for k, r in zip(job, rs)}

    def _jobs(self, present: list[int]) -> list[list[int]]:
        """The present members in decode jobs: one per read thread, at most DECODE_JOB bytes."""
        per = max(1, self.source.chunk_nbytes())
        step = max(1, min(DECODE_JOB // per, -(-len(present) // config.get().io_threads)))
        return [present[i : i + step] for i in range(0, len(present), step)]

    def _extra(self, runs: list[Run], spans: list[Any], index_bytes: int) -> int:
        """Bytes moved besides the members' own: the index and the gaps read through."""
        moved = sum(r.stop - r.start for r in runs)
        own = sum(s[1] for s in spans if s is not None)
        return index_bytes + moved - own

    def _results(self, indices: list[ChunkIndex], spans: list[Any], decoded: dict[int, Any],
                 extra: int) -> list[Any]:
        out: list[Any] = []
        for k, idx in enumerate(indices):
            if spans[k] is None:
                out.append(self.source._missing(idx))
                continue
            value = decoded[k]
            if not isinstance(value, BaseException) and extra:
                value, extra = (value[0], value[1] + extra), 0  # the first present one carries it
            out.append(value)
        return out


class _Batch:
    """The shared work of one batch: started by the first member awaited (in its context)."""

    def __init__(self, reader: ShardReader, indices: list[ChunkIndex]) -> None:
        self.reader = reader
        self.indices = indices
        self._task: asyncio.Future[list[Any]] | None = None

    async def member(self, k: int) -> Result:
        if self._task is None:
            self._task = asyncio.ensure_future(self.reader.run(self.indices))
        try:
            results = await asyncio.shield(self._task)
        except ChunkReadError as exc:  # the whole batch failed: name this member's chunk
            raise type(exc)(str(exc), source=self.reader.source.token, index=self.indices[k]) from exc
        value = results[k]
        if isinstance(value, BaseException):
            raise value
        return value  # type: ignore[no-any-return]
