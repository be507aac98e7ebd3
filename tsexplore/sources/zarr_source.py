"""Zarr v2 and v3 arrays: on local disk, behind any fsspec URL, or in any zarr ``Store``.

zarr-python 3 reads the metadata (shape, chunk grid, codecs, chunk-key encoding, attributes).
Chunk bytes are then fetched directly through a :class:`~.bytes.ByteStore` -- a plain file
read for local stores, obstore or fsspec on the engine's loop for remote ones (with a
timeout and jittered retries of what is transient), the store's own async ``get`` for a
zarr ``Store`` object (icechunk sessions, ``ObjectStore``, ``FsspecStore``, ``MemoryStore``,
references) -- and decoded by :mod:`tsexplore.sources.codecs`, which checks sizes before
allocating. Sharded arrays are read natively (:mod:`.sharding`): the chunk grid is the
inner chunks', each shard's index is read once and kept in the engine's cache, inner chunks
are fetched by byte range, neighbours coalesced. Codec chains outside that set (transpose,
filters, strings, nested shards) are read through zarr's own async API.

A chunk that the store lacks reads as the array's fill value, as the Zarr spec, zarr-python and
xarray read it (zarr writes no chunk equal to the fill value); the engine counts it
(``missing_filled``) and the chunk map shows it as absent. ``missing="raise"`` (the strict
opt-in) raises :class:`MissingChunkError` instead. Dims, attributes and encoding come from
:mod:`.zarr_meta` (as xarray's zarr backend presents them).
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import Awaitable, Hashable, Sequence
from typing import Any

import numpy as np

from .. import config
from ..errors import ChunkReadError, MissingChunkError, ReadTimeoutError, SourceError
from .base import DEFAULT_OPTIONS, ChunkIndex, ChunkSource, SourceOptions, native_dtype
from .bytes import ByteRange, ByteStore
from .codecs import chain_from_zarr
from .parts import Where, reader_for
from .remote import byte_store_for, byte_store_for_zarr, close_async_fs, on_zarr_loop
from .sharding import ShardReader, layout_from_zarr
from .zarr_meta import (
    STORE_PROTOCOLS,
    absent_fill,
    group_attrs,
    is_remote,
    open_node,
    variable_meta,
)

__all__ = ["STORE_PROTOCOLS", "ZarrSource", "close_async_fs", "open_node", "open_zarr_group"]


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
        self._array = array  # a zarr.Array, used for metadata and the zarr-decoded path
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
        self.chunks = tuple(int(c) for c in array.chunks)
        self._shard_shape = array.shards  # sharded: chunk keys name the shards
        self.fill_value = absent_fill(array, self.dtype)
        self.storage_options = dict(storage_options or {})
        self.options = options
        self._store = store
        self._bytes: ByteStore = (
            byte_store_for_zarr(store) if store is not None else byte_store_for(self.root, storage_options)
        )
        self._chain = chain_from_zarr(meta)
        layout = layout_from_zarr(meta) if self._chain is None else None
        self._shards = ShardReader(self, layout, self._bytes) if layout is not None else None
        if self._shards is not None:
            self._chain = layout.inner_chain  # type: ignore[union-attr]
            self.coalesces = True
            self.max_batch = self._shards.max_batch
        self.is_async = not self._bytes.sync
        self.remote = is_remote(self.root) and store is None
        self._present: set[str] = set()  # store keys seen present (the zarr-decoded path)
        # Every open is a new version. Zarr writes chunks as separate files, so no cheap
        # stamp (the metadata's mtime) changes when they are rewritten: a token shared
        # between opens served stale chunks from the cache after ``arr[...] = new`` (and
        # fill values cached under missing="fill" to a later missing="raise" open).
        # Pickled copies (dask workers) keep the token of the open they came from.
        self.token = f"zarr-{self.root}/{self.path}@{uuid.uuid4().hex[:12]}"

    def __getstate__(self) -> dict[str, Any]:
        inner = getattr(self._array.store, "store", None)  # zarr's ObjectStore wraps obstore's
        if type(inner).__name__ == "MemoryStore" and type(inner).__module__.startswith("obstore"):
            raise SourceError(
                f"{self.token}: its store is an obstore MemoryStore, which lives in this process "
                "only and cannot be sent to another one (a dask worker, a DataLoader worker); "
                "write it to a folder, a zarr MemoryStore or an object store to read it there")
        state = dict(self.__dict__)
        state.pop("_parts", None)
        return state

    @property
    def decoder(self) -> str:
        """Who decodes chunks: ``"tsexplore"``, ``"tsexplore-sharded"`` (inner chunks read
        natively) or ``"zarr"`` (codec chains tsexplore leaves to zarr's pipeline)."""
        if self._shards is not None:
            return "tsexplore-sharded"
        return "zarr" if self._chain is None else "tsexplore"

    def partial_reader(self) -> Any:
        """Reads only the blosc blocks a region of a chunk needs (None: chunks read whole)."""
        parts = self.__dict__.get("_parts", False)
        if parts is False or (parts is not None and parts.source is not self):
            parts = self._parts = reader_for(self)
        return parts

    # -- keys -------------------------------------------------------------------------------
    def _key(self, index: tuple[int, ...]) -> str:
        key = self._meta.encode_chunk_key(tuple(index))
        return f"{self.path}/{key}" if self.path else key

    def chunk_key(self, index: ChunkIndex) -> str:
        """The store key of the object holding chunk ``index`` (for sharded arrays, the key of
        the shard that holds the inner chunk)."""
        if self._shard_shape:
            index = tuple(i * c // s for i, c, s in zip(index, self.chunks, self._shard_shape))
        return self._key(index)

    def shard_key(self, shard: tuple[int, ...]) -> str:
        """The store key of shard ``shard`` (its coordinates on the shard grid)."""
        return self._key(shard)

    def _where(self, index: ChunkIndex) -> str:
        inner = "inner chunk" if self._shards is not None else "chunk"
        return f"{inner} {tuple(index)} ({self.chunk_key(index)!r}) of {self.root}/{self.path}"

    # -- batches of inner chunks (sharded arrays) --------------------------------------------
    def coalesce_key(self, index: ChunkIndex) -> Hashable | None:
        if self._shards is None:
            return None
        cps = self._shards.layout.chunks_per_shard
        return tuple(i // n for i, n in zip(index, cps))

    def read_chunks_counted(self, indices: Sequence[ChunkIndex]) -> list[Awaitable[tuple[np.ndarray, int]]]:
        if self._shards is None:
            return super().read_chunks_counted(indices)
        for index in indices:
            self.check_index(index)
        return self._shards.read_batch(indices)

    # -- reading ----------------------------------------------------------------------------
    async def read_chunk_counted(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        self.check_index(index)
        if self._shards is not None:
            return await self._shards.read_batch([index])[0]
        if self._chain is None:
            return await self._read_with_zarr(index)
        loop = asyncio.get_running_loop()
        if self._bytes.sync:  # fetched and decoded in one trip to a read thread
            return await loop.run_in_executor(None, contextvars.copy_context().run, self._read_sync, index)
        buf = await self._fetch_stored(index)
        return await loop.run_in_executor(None, self._decode, buf, index), len(buf)

    def _named(self, exc: ChunkReadError, index: ChunkIndex) -> ChunkReadError:
        """``exc`` (from the byte store) naming this chunk."""
        return type(exc)(f"{self._where(index)}: {exc}", source=self.token, index=tuple(index))

    def _decode(self, buf: Any, index: ChunkIndex) -> np.ndarray:
        assert self._chain is not None
        try:
            # the chunk named in words only when an error is raised (not on every decode)
            arr = self._chain.decode(buf, self.chunks, Where(self, tuple(index)))
        except ChunkReadError as exc:  # the codecs name the chunk in words; add the fields
            exc.source = exc.source or self.token
            exc.index = exc.index if exc.index is not None else tuple(index)
            raise
        if any((i + 1) * c > n for i, c, n in zip(index, self.chunks, self.shape)):  # an edge
            arr = np.ascontiguousarray(arr[tuple(slice(0, n) for n in self.chunk_shape(index))])
        return arr

    def _read_sync(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        buf = self._bytes.get_sync(self.chunk_key(index), reuse=True)  # valid until the next read
        if buf is None:
            raise self._missing(index)
        return self._decode(buf, index), len(buf)

    def advise(self, indices: Sequence[ChunkIndex]) -> None:
        """Local stores: the byte store asks the kernel to start reading these chunk files
        (or the shards holding these inner chunks), so cold reads overlap with decoding
        instead of waiting on the disk one by one."""
        if self._chain is not None:
            self._bytes.advise(list(dict.fromkeys(self.chunk_key(index) for index in indices)))

    def _missing(self, index: ChunkIndex) -> MissingChunkError:
        return MissingChunkError(
            f"{self._where(index)} is missing from the store (opened with missing='raise'). "
            "zarr writes no chunk equal to the fill value; open with missing='fill' (the "
            "default) to read absent chunks as the fill value, as zarr and xarray do",
            source=self.token,
            index=tuple(index),
        )

    def fill_chunk(self, index: ChunkIndex) -> np.ndarray:
        """An absent chunk as zarr-python reads it: the fill value (a v2 ``null`` fill
        reads as the dtype's default)."""
        return np.full(self.chunk_shape(index), self.fill_value, dtype=self.dtype)

    # -- the zarr-decoded path ----------------------------------------------------------------
    async def _fetch_stored(
        self, index: ChunkIndex, start: int | None = None, end: int | None = None
    ) -> Any:
        """The stored chunk ``index`` (bytes ``start:end`` of it when given) from the
        (asynchronous) byte store, with its retries, named and a missing one raised; a part comes back as ``bytes`` (the part reader joins them),
        a whole chunk as the store's buffer."""
        rng = None if start is None and end is None else ByteRange(start or 0, end)
        try:
            buf = await self._bytes.get(self.chunk_key(index), rng)
        except ChunkReadError as exc:
            raise self._named(exc, index) from exc
        if buf is None:
            raise self._missing(index)
        return bytes(buf) if rng is not None else buf

    async def _absent_in_store(self, store: Any, index: ChunkIndex) -> bool:
        """True when the chunk (or its whole shard) is not in the store. Present keys are
        remembered, so a shard is looked up once, not once per inner chunk."""
        key = self.chunk_key(index)
        if key in self._present:
            return False
        try:
            found = await asyncio.wait_for(store.exists(key), config.get().http_timeout)
        except Exception:  # noqa: BLE001 - cannot tell: let zarr's read report what fails
            return False
        if found and len(self._present) < 1 << 16:
            self._present.add(key)
        return not found

    async def _read_with_zarr(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        """Codec chains tsexplore does not decode itself: ask zarr's async API, on zarr's own
        loop (where the array's store and its sessions live), awaited from this one."""
        array = self._array._async_array
        if await on_zarr_loop(self._absent_in_store(array.store, index)):
            raise self._missing(index)  # zarr would fill it silently: let the policy decide
        try:
            arr = await asyncio.wait_for(
                on_zarr_loop(array.getitem(self.chunk_slices(index))), config.get().http_timeout
            )
        except asyncio.TimeoutError:
            raise ReadTimeoutError(
                f"{self._where(index)}: zarr read timed out after {config.get().http_timeout} s; "
                "raise it with tse.config.set(http_timeout=...)",
                source=self.token,
                index=tuple(index),
            ) from None
        except Exception as exc:  # noqa: BLE001
            raise ChunkReadError(
                f"{self._where(index)}: {exc}", source=self.token, index=tuple(index)
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
