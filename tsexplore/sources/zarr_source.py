"""Zarr v2 and v3 arrays, on local disk or behind any fsspec URL.

zarr-python 3 reads the metadata (shape, chunk grid, codecs, chunk-key encoding, attributes).
Chunk bytes are then fetched directly -- a plain file read for local stores, fsspec's async
filesystem on the engine's loop for remote ones, with a timeout and jittered retries of
408/429/5xx -- and decoded by :mod:`tsexplore.sources.codecs`, which checks sizes before
allocating. Codec chains outside that set (sharding, transpose, filters) are read through
zarr's own async API (``AsyncArray.getitem``) on the engine's loop.

A chunk that the store lacks reads as the array's fill value, as the Zarr spec, zarr-python and
xarray read it (zarr writes no chunk equal to the fill value); the engine counts it
(``missing_filled``) and the chunk map shows it as absent. ``missing="raise"`` (the strict
opt-in) raises :class:`MissingChunkError` instead. Dims, attributes and encoding come from
:mod:`.zarr_meta` (as xarray's zarr backend presents them).
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import config
from ..errors import (
    ChunkReadError,
    MissingChunkError,
    MissingDependencyError,
    ReadTimeoutError,
    RemoteReadError,
    SourceError,
)
from .base import DEFAULT_OPTIONS, ChunkIndex, ChunkSource, SourceOptions, count_retry
from .codecs import chain_from_zarr
from .parts import reader_for
from .zarr_meta import absent_fill, group_attrs, variable_meta

RETRY_STATUS = {408, 429}
_async_fs: dict[tuple[int, str, str], Any] = {}


def _is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


async def _get_async_fs(protocol: str, storage_options: dict[str, Any]) -> Any:
    """One async fsspec filesystem per (loop, protocol, options), created on that loop."""
    import fsspec

    loop = asyncio.get_running_loop()
    key = (id(loop), protocol, repr(sorted(storage_options.items())))
    fs = _async_fs.get(key)
    if fs is None:
        try:
            fs = fsspec.filesystem(
                protocol, asynchronous=True, skip_instance_cache=True, **storage_options
            )
        except ImportError as exc:
            raise MissingDependencyError(
                f"reading {protocol}:// URLs needs an fsspec implementation that is not "
                f"installed ({exc}); e.g. pip install s3fs for s3://"
            ) from exc
        if hasattr(fs, "set_session"):
            await fs.set_session()
        _async_fs[key] = fs
    return fs


async def close_async_fs() -> None:
    """Close the sessions that belong to the running loop (called by ``Engine.close``)."""
    loop_id = id(asyncio.get_running_loop())
    for key in [k for k in _async_fs if k[0] == loop_id]:
        fs = _async_fs.pop(key)
        session = getattr(fs, "_session", None)
        if session is not None and not session.closed:
            await session.close()


class ZarrSource(ChunkSource):
    def __init__(
        self,
        array: Any,
        root: str,
        name: str,
        storage_options: dict[str, Any] | None = None,
        options: SourceOptions = DEFAULT_OPTIONS,
        dims: tuple[str, ...] | None = None,
    ) -> None:
        """``dims`` names the axes where the array's own metadata does not (OME-NGFF v0.4
        arrays take them from their ``multiscales`` axes)."""
        self._array = array  # a zarr.Array, used for metadata and the fallback path
        self.root = root.rstrip("/")
        self.name = name
        self.path = array.path
        self.shape = tuple(int(s) for s in array.shape)
        self.dtype = np.dtype(array.dtype).newbyteorder("=")  # chunks are decoded to native
        described = variable_meta(array, name)
        self.dims = described.dims if dims is None else tuple(dims)
        self.attrs = described.attrs
        self.encoding = described.encoding
        if dims is not None:
            self.encoding = {**described.encoding, "preferred_chunks": dict(zip(self.dims, array.chunks))}
        self._store_dtype = described.store_dtype
        meta = array.metadata
        self.chunks = tuple(int(c) for c in array.chunks)
        self.fill_value = absent_fill(array, self.dtype)
        self.storage_options = dict(storage_options or {})
        self.options = options
        self._chain = chain_from_zarr(meta)
        self._meta = meta
        self.remote = _is_remote(self.root)
        self.is_async = self.remote
        self.protocol = self.root.split("://", 1)[0] if "://" in self.root else "file"
        self._local_root = self.root[len("file://") :] if self.root.startswith("file://") else self.root
        self._fallback: Any = None
        self._present: set[str] = set()  # store keys seen present (the zarr-decoded path)
        # Every open is a new version. Zarr writes chunks as separate files, so no cheap
        # stamp (the metadata's mtime) changes when they are rewritten: a token shared
        # between opens served stale chunks from the cache after ``arr[...] = new`` (and
        # fill values cached under missing="fill" to a later missing="raise" open).
        # Pickled copies (dask workers) keep the token of the open they came from.
        self.token = f"zarr-{self.root}/{self.path}@{uuid.uuid4().hex[:12]}"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fallback"] = None
        state.pop("_parts", None)
        return state

    def partial_reader(self) -> Any:
        """Reads only the blosc blocks a region of a chunk needs (None: chunks read whole)."""
        parts = self.__dict__.get("_parts", False)
        if parts is False or (parts is not None and parts.source is not self):
            parts = self._parts = reader_for(self)
        return parts

    # -- keys -------------------------------------------------------------------------------
    def chunk_key(self, index: ChunkIndex) -> str:
        key = self._meta.encode_chunk_key(tuple(index))
        return f"{self.path}/{key}" if self.path else key

    def _where(self, index: ChunkIndex) -> str:
        return f"chunk {tuple(index)} ({self.chunk_key(index)!r}) of {self.root}/{self.path}"

    # -- reading ----------------------------------------------------------------------------
    async def read_chunk_counted(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        self.check_index(index)
        loop = asyncio.get_running_loop()
        if self._chain is None:
            return await self._read_with_zarr(index)
        if self.remote:
            buf = await self._fetch_remote(index)
            arr = await loop.run_in_executor(None, self._decode, buf, index)
            return arr, len(buf)
        return await loop.run_in_executor(None, self._read_local, index)

    def _decode(self, buf: bytes | memoryview, index: ChunkIndex) -> np.ndarray:
        assert self._chain is not None
        try:
            arr = self._chain.decode(buf, self.chunks, self._where(index))
        except ChunkReadError as exc:  # the codecs name the chunk in words; add the fields
            exc.source = exc.source or self.token
            exc.index = exc.index if exc.index is not None else tuple(index)
            raise
        trimmed = self.chunk_shape(index)
        if trimmed != self.chunks:
            arr = np.ascontiguousarray(arr[tuple(slice(0, n) for n in trimmed)])
        return arr

    def advise(self, indices: Sequence[ChunkIndex]) -> None:
        """Local stores: ask the kernel to start reading these chunk files (WILLNEED), so
        cold reads overlap with decoding instead of waiting on the disk one by one."""
        if self.protocol != "file" or self._chain is None or not hasattr(os, "posix_fadvise"):
            return
        for index in indices:
            try:
                fd = os.open(os.path.join(self._local_root, self.chunk_key(index)), os.O_RDONLY)
            except OSError:
                continue  # missing chunks are reported by the read itself
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

    def _read_local(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        key = self.chunk_key(index)
        if self.protocol == "file":
            try:
                with open(os.path.join(self._local_root, key), "rb", buffering=0) as f:
                    buf = _read_into_scratch(f)  # valid until this thread's next read
            except FileNotFoundError:
                raise self._missing(index) from None
        else:  # memory:// and other synchronous fsspec filesystems
            import fsspec

            fs = fsspec.filesystem(self.protocol, **self.storage_options)
            try:
                buf = fs.cat_file(f"{self.root}/{key}")
            except FileNotFoundError:
                raise self._missing(index) from None
        return self._decode(buf, index), len(buf)

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

    async def _fetch_remote(
        self, index: ChunkIndex, start: int | None = None, end: int | None = None
    ) -> bytes:
        """The stored chunk ``index`` (bytes ``start:end`` of it when given), with retries."""
        settings = config.get()
        url = f"{self.root}/{self.chunk_key(index)}"
        fs = await _get_async_fs(self.protocol, self.storage_options)
        if not hasattr(fs, "_cat_file"):
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, fs.cat_file, url, start, end)
        attempt = 0
        ranged = {} if start is None and end is None else {"start": start, "end": end}
        while True:
            try:
                return await asyncio.wait_for(fs._cat_file(url, **ranged), settings.http_timeout)
            except FileNotFoundError:
                raise self._missing(index) from None
            except asyncio.TimeoutError:
                raise ReadTimeoutError(
                    f"{self._where(index)}: no answer from {url} within {settings.http_timeout} s; "
                    "raise it with tse.config.set(http_timeout=...)",
                    source=self.token,
                    index=tuple(index),
                ) from None
            except Exception as exc:  # noqa: BLE001 - classify transport errors below
                status = getattr(exc, "status", None)
                retryable = (
                    status in RETRY_STATUS
                    or (isinstance(status, int) and 500 <= status < 600)
                    or (status is None and isinstance(exc, (ConnectionError, OSError)))
                    or type(exc).__name__ in ("ServerDisconnectedError", "ClientConnectorError", "ClientOSError")
                )
                if not retryable or attempt >= settings.retries:
                    raise RemoteReadError(
                        f"{self._where(index)}: {url} failed after {attempt + 1} attempt(s): "
                        f"{type(exc).__name__}: {exc}",
                        source=self.token,
                        index=tuple(index),
                    ) from exc
                count_retry()
                delay = settings.retry_backoff * (2**attempt) * (0.5 + random.random())
                attempt += 1
                await asyncio.sleep(delay)

    def _stored_key(self, index: ChunkIndex) -> str:
        """The store key of the object holding chunk ``index``: its own key, or the key of
        the shard that holds it (``chunk_key`` of the shard grid)."""
        shards = self._array.shards
        if shards:
            index = tuple(i * c // s for i, c, s in zip(index, self.chunks, shards))
        key = self._meta.encode_chunk_key(tuple(index))
        return f"{self.path}/{key}" if self.path else key

    async def _absent_in_store(self, store: Any, index: ChunkIndex) -> bool:
        """True when the chunk (or its whole shard) is not in the store. Present keys are
        remembered, so a shard is looked up once, not once per inner chunk."""
        key = self._stored_key(index)
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
        """Codec chains tsexplore does not decode itself: ask zarr's async API."""
        import zarr
        from zarr.api import asynchronous as za

        loop_id = id(asyncio.get_running_loop())
        if self._fallback is None or self._fallback[0] != loop_id:
            # one zarr array per loop: a new engine (after tse.close()) has a new loop and
            # the network sessions of the old one are closed
            from zarr.storage import FsspecStore

            fs = await _get_async_fs(self.protocol, self.storage_options) if self.remote else None
            if fs is not None and getattr(fs, "async_impl", False):
                # the filesystem's own idea of a path: http keeps the whole URL, s3 drops s3://
                path = fs._strip_protocol(self.root)
                store: Any = FsspecStore(fs, path=path, read_only=True)
            elif self.protocol == "file":
                store = zarr.storage.LocalStore(self._local_root, read_only=True)
            else:  # memory:// and other synchronous fsspec filesystems (zarr wraps them)
                store = FsspecStore.from_url(
                    self.root, storage_options=self.storage_options or None, read_only=True
                )
            array = await za.open_array(store=store, path=self.path, mode="r")
            self._fallback = (loop_id, array)
        if await self._absent_in_store(self._fallback[1].store, index):
            raise self._missing(index)  # zarr would fill it silently: let the policy decide
        sl = self.chunk_slices(index)
        try:
            arr = await asyncio.wait_for(self._fallback[1].getitem(sl), config.get().http_timeout)
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
    url: str, storage_options: dict[str, Any] | None = None, options: SourceOptions = DEFAULT_OPTIONS
) -> tuple[dict[str, ZarrSource], dict[str, Any], dict[str, Any]]:
    """Sources for every array of a Zarr group (or a lone array): (sources, coords, attrs).

    Coordinates are 1-D arrays named after their dimension; they are read eagerly, as xarray
    reads index coordinates, and come as ``(dims, values, attrs, encoding)``.
    """
    import zarr

    root = str(url)
    if root.startswith("file://"):
        root = root[len("file://") :]
    try:
        node = zarr.open(store=root, mode="r", storage_options=storage_options or None)
    except FileNotFoundError as exc:
        raise SourceError(f"no Zarr store at {url!r}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001
        raise SourceError(f"cannot open {url!r} as Zarr: {type(exc).__name__}: {exc}") from exc
    if isinstance(node, zarr.Array):
        name = node.basename or "data"
        arrays = {name: node}
        attrs: dict[str, Any] = {}
        base = root[: -len(node.path)] if node.path and root.endswith(node.path) else root
    else:
        arrays = {n: a for n, a in node.arrays()}
        attrs = group_attrs(node)
        base = root
    if not arrays:
        raise SourceError(
            f"the Zarr group at {url!r} lists no arrays. Remote stores cannot be listed, so "
            "they need consolidated metadata: run zarr.consolidate_metadata(store) once"
        )
    sources: dict[str, ZarrSource] = {}
    coords: dict[str, Any] = {}
    for name, arr in sorted(arrays.items()):
        meta = variable_meta(arr, name)
        if arr.ndim == 1 and meta.dims == (name,) and arr.size <= 50_000_000:
            values = np.asarray(arr[...])
            coords[name] = (meta.dims, values, meta.attrs, meta.encoding, meta.store_dtype)
            continue
        sources[name] = ZarrSource(arr, base, name, storage_options, options)
    return sources, coords, attrs


_scratch = threading.local()


def _read_into_scratch(f: Any) -> memoryview:
    """Read the whole file ``f`` into this thread's reusable buffer (the decoders copy out).

    A new ``bytes`` per chunk is fresh memory each time for chunks of a megabyte or more;
    first touches of fresh pages are dear (see :mod:`.buffers`).
    """
    size = os.fstat(f.fileno()).st_size
    buf: bytearray | None = getattr(_scratch, "buf", None)
    if buf is None or len(buf) < size + 1:
        buf = bytearray(max(size + 1, 2 * len(buf) if buf is not None else 0))
        _scratch.buf = buf
    view = memoryview(buf)
    n = 0
    while True:  # until EOF: the file may have grown since fstat (read one byte past it)
        got = f.readinto(view[n:])
        if not got:
            break
        n += got
        if n == len(buf):  # grew: enlarge and keep reading
            bigger = bytearray(2 * len(buf))
            bigger[:n] = buf[:n]
            buf = _scratch.buf = bigger
            view = memoryview(buf)
    return view[:n]
