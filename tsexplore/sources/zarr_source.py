"""Zarr v2 and v3 arrays: on local disk, behind any fsspec URL, or in any zarr ``Store``.

zarr-python 3 reads the metadata (shape, chunk grid, codecs, chunk-key encoding, attributes).
Chunks are then read by the engine's pipeline: this source says where a request's bytes are
(:meth:`ZarrSource.locate`) and decodes them (:meth:`ZarrSource.decode`); the bytes come
through a :class:`~.bytes.ByteStore` -- plain file reads for local stores, obstore or fsspec
for remote ones, the store's own ``get`` for a zarr ``Store`` object (icechunk sessions,
``ObjectStore``, ``FsspecStore``, ``MemoryStore``, references) -- and are decoded by
:mod:`tsexplore.sources.codecs`, which checks sizes before allocating. Sharded arrays are read
natively (:mod:`.sharding`): the chunk grid is the inner chunks', each shard's index is read
once and kept by the engine, inner chunks are byte ranges of their shard (on a local store,
small inner chunks are read in units of a shard's trailing axes: the grid is the units').
Boxes of blosc chunks
are read from their blocks (:mod:`.parts`). Codec chains outside that set (transpose, filters,
strings, nested shards) are read through zarr's own async API (the source then reads itself).

A chunk the store lacks reads as the array's fill value, as the Zarr spec, zarr-python and
xarray read it (zarr writes no chunk equal to the fill value); the engine counts it
(``missing_filled``) and the chunk map shows it as absent. ``missing="raise"`` (the strict
opt-in) raises :class:`MissingChunkError` instead. Dims, attributes and encoding come from
:mod:`.zarr_meta` (as xarray's zarr backend presents them).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from ..errors import ChunkReadError, MissingChunkError, ReadTimeoutError, SourceError
from ._cblosc2 import item_decoder, zstd_stream
from .base import DEFAULT_OPTIONS, ChunkIndex, ChunkSource, ReadContext, SourceOptions, native_dtype
from .bytes import ByteStore
from .codecs import CodecChain, chain_from_zarr
from .parts import BloscBlocks
from .remote import byte_store_for, byte_store_for_zarr, close_async_fs
from .requests import SELF, AuxKey, Blocks, ChunkRequest, Located, NeedAux, Resumable
from .sharding import ShardLayout, ShardUnits, layout_from_zarr
from .zarr_meta import (
    STORE_PROTOCOLS,
    absent_fill,
    group_attrs,
    is_remote,
    open_node,
    variable_meta,
)
from .zstd_front import ZstdFronts

__all__ = ["STORE_PROTOCOLS", "ZarrSource", "close_async_fs", "open_node", "open_zarr_group"]

#: store keys of chunks (or shards) remembered per source before the memo starts over
KEYS_KEPT = 65536


class Where:
    """Names a chunk (``inner``: an inner chunk of a unit) of a source in an error message,
    formatted only when one is raised."""

    __slots__ = ("source", "index", "inner")

    def __init__(self, source: ZarrSource, index: ChunkIndex, inner: bool = False) -> None:
        self.source, self.index, self.inner = source, index, inner

    def __str__(self) -> str:
        return self.source.describe_inner(self.index) if self.inner else self.source.describe(self.index)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class ZarrSource(ChunkSource):
    def __init__(
        self,
        array: Any,
        root: str,
        name: str,
        storage_options: dict[str, Any] | None = None,
        options: SourceOptions = DEFAULT_OPTIONS,
        dims: tuple[str, ...] | None = None,
        store: Any = None,
    ) -> None:
        """``dims`` names the axes where the array's own metadata does not (OME-NGFF v0.4
        arrays take them from their ``multiscales`` axes). ``store``: the zarr ``Store``
        object the array lives in, when it was opened from one (``root`` then only names
        it); chunk bytes then come from its ``get``."""
        self._array = array  # a zarr.Array: metadata, and the reads left to zarr
        self.root = root.rstrip("/")
        self.name = name
        self.path = array.path
        self.shape = tuple(int(s) for s in array.shape)
        self.dtype = native_dtype(array.dtype)  # chunks are decoded to native
        described = variable_meta(array, name)
        self.dims = described.dims if dims is None else tuple(dims)
        self.attrs = described.attrs
        self.encoding = described.encoding
        if dims is not None:
            self.encoding = {**described.encoding, "preferred_chunks": dict(zip(self.dims, array.chunks))}
        self._store_dtype = described.store_dtype
        meta = array.metadata
        self._meta = meta
        self._keys: dict[tuple[int, ...], str] = {}  # store keys of chunks and shards, as made
        self.chunks = tuple(int(c) for c in array.chunks)
        self._shard_shape = array.shards  # sharded: chunk keys name the shards
        self.fill_value = absent_fill(array, self.dtype)
        self.storage_options = dict(storage_options or {})
        self.options = options
        self._zarr_store = store
        self.store: ByteStore = (
            byte_store_for_zarr(store) if store is not None
            else byte_store_for(self.root, storage_options, options.reader)
        )
        self.chain: CodecChain | None = chain_from_zarr(meta)
        self.shards: ShardLayout | None = layout_from_zarr(meta) if self.chain is None else None
        #: a local sharded array's inner chunks grouped into units (the grid is the units')
        self.units: ShardUnits | None = None
        if self.shards is not None:
            self.chain = self.shards.inner_chain
            unit = self.shards.unit_shape(self.dtype.itemsize)
            if self.store.sync and unit != self.chunks:
                self.units = ShardUnits(self.shards, unit, self.shape, self.dtype, self.fill_value)
                self.chunks = unit
            self.max_batch = self.shards.max_batch(self.chunk_nbytes(), self.store.sync)
        self.blocks = self.units if self.units is not None else self._blocks_reader()
        self.awaits = self.chain is None
        self.is_async = self.awaits or not self.store.sync
        self.remote = is_remote(self.root) and store is None
        self._present: set[str] = set()  # store keys seen present (reads left to zarr)
        # Every open is a new version. Zarr writes chunks as separate files, so no cheap
        # stamp (the metadata's mtime) changes when they are rewritten: a token shared
        # between opens served stale chunks from the cache after ``arr[...] = new`` (and
        # fill values cached under missing="fill" to a later missing="raise" open).
        # Pickled copies (dask workers) keep the token of the open they came from.
        self.token = f"zarr-{self.root}/{self.path}@{uuid.uuid4().hex[:12]}"

    def _blocks_reader(self) -> BloscBlocks | ZstdFronts | None:
        """Parts of chunks from their blosc blocks: for C-ordered blosc chunks without a
        checksum, read natively (not from shards, not from zarr Store objects or blocking
        filesystems other than local files: those read whole). Parts of zstd chunks from
        the fronts of their streams: the same chunks in local files (a front read of a
        remote object would be a round trip per estimate)."""
        chain = self.chain
        if chain is None or self.shards is not None or chain.crc32c or chain.order != "C":
            return None
        codec = getattr(chain.compressor, "codec_id", None)
        if codec == "zstd":
            stream = zstd_stream()
            if stream is None or type(self.store).__name__ != "LocalFiles":
                return None
            return ZstdFronts(self.chunks, chain.dtype, stream, self._finish_whole)
        if codec != "blosc" or item_decoder() is None:
            return None
        if self.store.sync and type(self.store).__name__ != "LocalFiles":
            return None
        if self._zarr_store is not None and not self.store.sync:
            return None
        return BloscBlocks(self.chunks, chain.dtype, self._decode_whole)

    def __getstate__(self) -> dict[str, Any]:
        inner = getattr(self._array.store, "store", None)  # zarr's ObjectStore wraps obstore's
        if type(inner).__name__ == "MemoryStore" and type(inner).__module__.startswith("obstore"):
            raise SourceError(
                f"{self.token}: its store is an obstore MemoryStore, which lives in this process "
                "only and cannot be sent to another one (a dask worker, a DataLoader worker); "
                "write it to a folder, a zarr MemoryStore or an object store to read it there")
        return dict(self.__dict__)

    @property
    def decoder(self) -> str:
        """Who decodes chunks: ``"tsexplore"``, ``"tsexplore-sharded"`` (inner chunks read
        natively) or ``"zarr"`` (codec chains tsexplore leaves to zarr's pipeline)."""
        if self.shards is not None:
            return "tsexplore-sharded"
        return "zarr" if self.chain is None else "tsexplore"

    # -- keys -------------------------------------------------------------------------------
    def _key(self, index: tuple[int, ...]) -> str:
        keys = self._keys
        found = keys.get(index)
        if found is None:
            key = self._meta.encode_chunk_key(tuple(index))
            found = f"{self.path}/{key}" if self.path else key
            if len(keys) >= KEYS_KEPT:
                keys.clear()
            keys[index] = found
        return found

    def chunk_key(self, index: ChunkIndex) -> str:
        """The store key of the object holding chunk ``index`` (for sharded arrays, the key of
        the shard that holds the inner chunk)."""
        if self._shard_shape:
            index = tuple(i * c // s for i, c, s in zip(index, self.chunks, self._shard_shape))
        return self._key(index)

    def shard_key(self, shard: tuple[int, ...]) -> str:
        """The store key of shard ``shard`` (its coordinates on the shard grid)."""
        return self._key(shard)

    def describe(self, index: ChunkIndex) -> str:
        if self.units is not None:
            what = f"unit {tuple(index)} of inner chunks"
        else:
            what = ("inner chunk " if self.shards is not None else "chunk ") + str(tuple(index))
        return f"{what} ({self.chunk_key(index)!r}) of {self.root}/{self.path}"

    def describe_inner(self, inner: ChunkIndex) -> str:
        """Names inner chunk ``inner`` (its index on the inner grid) of a sharded array."""
        assert self.shards is not None
        shard = self.shards.shard_of(inner)[0]
        return f"inner chunk {tuple(inner)} ({self.shard_key(shard)!r}) of {self.root}/{self.path}"

    def batch_key(self, index: ChunkIndex) -> Hashable | None:
        if self.units is not None:
            return self.units.shard_of(index)
        if self.shards is None:
            return None
        return self.shards.shard_of(index)[0]

    # -- the pipeline's questions --------------------------------------------------------------
    def locate(self, request: ChunkRequest, aux: Callable[[AuxKey], Any],
               ranges_pay: Callable[[int, int, bool], bool] | None = None) -> Located | NeedAux:
        """Where the bytes of ``request`` are: a shard's byte range (sharded arrays), the
        byte ranges of a box's blosc blocks (``ranges_pay``: see :meth:`BloscBlocks.locate`),
        a zstd stream's front and the bytes after it (:class:`ZstdFronts`), or the chunk's
        whole object. Codec chains left to zarr read themselves."""
        if self.chain is None:
            return SELF
        index = request.index
        if self.units is not None:
            return self.units.locate(self.token, index, request.box, self.shard_key, aux)
        if self.shards is not None:
            return self.shards.locate(self.token, index, self.shard_key, aux)
        box = request.box
        if box is not None and self.blocks is not None:
            return self.blocks.locate(self.token, index, box, self.chunk_key(index), aux, ranges_pay)
        if isinstance(self.blocks, ZstdFronts):
            return self.blocks.locate_whole(self.token, index, self.chunk_key(index), aux)
        return Located(self.chunk_key(index))

    def parse_aux(self, aux: AuxKey, data: Any) -> tuple[Any, int] | NeedAux:
        if aux.kind == "index":
            assert self.shards is not None
            return self.shards.parse_index(data, f"shard {aux.at} ({self.shard_key(aux.at)!r})")
        assert self.blocks is not None
        return self.blocks.parse_head(aux, self.chunk_key(aux.at), data, Where(self, aux.at))

    def decode(self, request: ChunkRequest, located: Located, data: list[Any]) -> tuple[np.ndarray, int]:
        index = request.index
        units = self.units
        if units is not None:
            box = request.box
            shape = self.chunk_shape(index) if box is None else tuple(hi - lo for lo, hi in box)
            return units.decode(located, data, shape, lambda inner: Where(self, inner, True),
                                None if self.options.missing == "fill" else self.missing_inner)
        if isinstance(request.part, Blocks) and self.blocks is not None:
            values, decoded = self.blocks.decode(located, data, index, request.part.box, Where(self, index))
            return (values if values.dtype.isnative else values.astype(self.dtype)), decoded
        if isinstance(located.how, Resumable):  # the whole chunk, decoded on from its front
            assert isinstance(self.blocks, ZstdFronts)
            return self.blocks.decode(located, data, index, None, Where(self, index))
        arr = self._decode_whole(data[0], index)
        if isinstance(request.part, Blocks):  # a part asked of a chunk without blocks
            arr = arr[tuple(slice(lo, hi) for lo, hi in request.part.box)]
        return arr, arr.nbytes

    def _decode_whole(self, buf: Any, index: ChunkIndex) -> np.ndarray:
        assert self.chain is not None
        return self._trim(self.chain.decode(buf, self.chunks, Where(self, tuple(index))), index)

    def _finish_whole(self, arr: np.ndarray, index: ChunkIndex) -> np.ndarray:
        """A whole chunk decoded as stored (shape and byte order) as this source gives it."""
        return self._trim(arr if arr.dtype.isnative else arr.astype(native_dtype(arr.dtype)), index)

    def _trim(self, arr: np.ndarray, index: ChunkIndex) -> np.ndarray:
        trimmed = self.chunk_shape(index)
        if trimmed != self.chunks:  # an edge chunk
            arr = np.ascontiguousarray(arr[tuple(slice(0, n) for n in trimmed)])
        return arr

    def advise(self, indices: Sequence[ChunkIndex]) -> None:
        """Local stores: ask the kernel to start reading these chunk files (or the shards
        holding these inner chunks), so cold reads overlap with decoding instead of waiting on
        the disk one by one."""
        if self.chain is not None:
            self.store.advise(list(dict.fromkeys(self.chunk_key(index) for index in indices)))

    def missing(self, index: ChunkIndex) -> MissingChunkError:
        return self._missing(self.describe(index), index)

    def missing_inner(self, inner: ChunkIndex) -> MissingChunkError:
        """The error of an inner chunk absent from a unit that is partly stored."""
        return self._missing(self.describe_inner(inner), inner)

    def _missing(self, what: str, index: ChunkIndex) -> MissingChunkError:
        return MissingChunkError(
            f"{what} is missing from the store (opened with missing='raise'). "
            "zarr writes no chunk equal to the fill value; open with missing='fill' (the "
            "default) to read absent chunks as the fill value, as zarr and xarray do",
            source=self.token,
            index=tuple(index),
        )

    def fill_chunk(self, index: ChunkIndex) -> np.ndarray:
        """An absent chunk as zarr-python reads it: the fill value (a v2 ``null`` fill
        reads as the dtype's default)."""
        return np.full(self.chunk_shape(index), self.fill_value, dtype=self.dtype)

    # -- codec chains left to zarr -----------------------------------------------------------------
    async def _absent_in_store(self, store: Any, index: ChunkIndex, timeout: float) -> bool:
        """True when the chunk (or its whole shard) is not in the store. Present keys are
        remembered, so a shard is looked up once, not once per inner chunk."""
        key = self.chunk_key(index)
        if key in self._present:
            return False
        try:
            found = await asyncio.wait_for(store.exists(key), timeout)
        except Exception:  # noqa: BLE001 - cannot tell: let zarr's read report what fails
            return False
        if found and len(self._present) < 1 << 16:
            self._present.add(key)
        return not found

    #: the read below runs on zarr's own event loop (where the array's store and sessions live)
    home = "zarr"

    async def read_chunk_async(self, index: ChunkIndex, ctx: ReadContext) -> tuple[np.ndarray, int]:
        """Codec chains tsexplore does not decode itself: zarr's async API (run by the engine
        on zarr's own loop, ``home``)."""
        array = self._array._async_array
        timeout = ctx.settings.http_timeout
        if await self._absent_in_store(array.store, index, timeout):
            raise self.missing(index)  # zarr would fill it silently: let the policy decide
        try:
            arr = await asyncio.wait_for(array.getitem(self.chunk_slices(index)), timeout)
        except asyncio.TimeoutError:
            raise ReadTimeoutError(
                f"{self.describe(index)}: zarr read timed out after {timeout} s; "
                "raise it with tse.config.set(http_timeout=...)",
                source=self.token,
                index=tuple(index),
            ) from None
        except Exception as exc:  # noqa: BLE001
            raise ChunkReadError(
                f"{self.describe(index)}: {exc}", source=self.token, index=tuple(index)
            ) from exc
        arr = np.asarray(arr)
        return arr, arr.nbytes


def open_zarr_group(
    url: Any,
    storage_options: dict[str, Any] | None = None,
    options: SourceOptions = DEFAULT_OPTIONS,
    opened: tuple[Any, str, Any] | None = None,
) -> tuple[dict[str, ZarrSource], dict[str, Any], dict[str, Any]]:
    """Sources for every array of a Zarr group (or a lone array): (sources, coords, attrs).

    ``url``: a path or fsspec URL, a zarr ``Store`` (icechunk session stores, ``ObjectStore``,
    ``FsspecStore``, ``MemoryStore``...), a ``zarr.Group`` or a ``zarr.Array``; ``opened``:
    what :func:`open_node` gave for it. Coordinates are 1-D arrays named after their
    dimension; they are read eagerly (all at once), as xarray reads index coordinates, and
    come as ``(dims, values, attrs, encoding)``.
    """
    import zarr

    node, root, store = opened or open_node(url, storage_options)
    if isinstance(node, zarr.Array):
        name = node.basename or "data"
        arrays = {name: node}
        attrs: dict[str, Any] = {}
        base = root[: -len(node.path)] if node.path and root.endswith(node.path) else root
    else:
        arrays = {n: a for n, a in node.arrays()}
        attrs = group_attrs(node)
        base = root
    if not arrays and (is_remote(root) or store is not None) and not isinstance(node, zarr.Array) \
            and not any(True for _ in node.groups()):
        raise SourceError(
            f"the Zarr group at {url!r} lists no arrays. Remote stores cannot be listed, so "
            "they need consolidated metadata: run zarr.consolidate_metadata(store) once"
        )
    sources: dict[str, ZarrSource] = {}
    coords: dict[str, Any] = {}
    for name, arr in sorted(arrays.items()):
        meta = variable_meta(arr, name)
        if arr.ndim == 1 and meta.dims == (name,) and arr.size <= 50_000_000:
            coords[name] = (meta.dims, arr, meta.attrs, meta.encoding, meta.store_dtype)
            continue
        sources[name] = ZarrSource(arr, base, name, storage_options, options, store=store)
    for (name, entry), values in zip(coords.items(), _read_whole([c[1] for c in coords.values()])):
        coords[name] = (entry[0], values, *entry[2:])
    return sources, coords, attrs


def _read_whole(arrays: list[Any]) -> list[np.ndarray]:
    """The values of several zarr arrays, read concurrently (one round trip, not one each)."""
    if len(arrays) <= 1:
        return [np.asarray(a[...]) for a in arrays]
    from zarr.core.sync import sync

    async def read_all() -> list[Any]:
        return list(await asyncio.gather(*(a._async_array.getitem(()) for a in arrays)))

    try:
        return [np.asarray(v) for v in sync(read_all())]
    except Exception:  # noqa: BLE001 - read them one by one, as zarr would, for its errors
        return [np.asarray(a[...]) for a in arrays]
