"""NetCDF variables read chunk by chunk by byte range: remote files (``https://``,
``s3://``...), fsspec file objects, local file objects and the bytes of a file.

Thin glue over :mod:`.hdf5`: the variable's :class:`~.hdf5.ChunkLayout` (an HDF5 dataset's
chunk index, read once when the file is opened, or where a NetCDF3 variable's values lie,
:mod:`.netcdf3`) says which byte ranges hold a chunk; they are fetched
through the engine's byte interface (:class:`~.bytes.ByteStore` ``get_ranges``, the store
:func:`~.remote.byte_store_for` picks for the file's folder, the key its name: retries,
timeouts, servers that ignore ``Range``, counted in the stats) and decoded by
:meth:`~.hdf5.ChunkLayout.decode`. A chunk never written reads as the dataset's fill value
(the engine counts it as ``missing_filled``). Dims, attributes and encoding are those of
xarray's h5netcdf store over the same file (the metadata is read by it).

:func:`ranged_store` says which byte store reads an input, or None when it is not read by
range (a query string, an fsspec chain: those read through xarray's store).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from ..errors import ChunkReadError, MissingChunkError
from .base import DEFAULT_OPTIONS, ChunkIndex, ChunkSource, SourceOptions, native_dtype
from .bytes import Buffer, ByteRange, ByteStore, count_range
from .hdf5 import ChunkLayout

#: a chunk held in several runs is fetched as the one range that holds them all when that
#: is at most this many times their bytes
HULL_FACTOR = 4
#: requests in flight for the runs of one chunk
RUNS_AT_ONCE = 4
#: URL protocols read by range (their byte store answers ranges of one object)
RANGED_PROTOCOLS = ("http", "https", "s3", "s3a", "gs", "gcs", "az", "abfs", "memory", "file")


class FileObjectBytes(ByteStore):
    """Byte ranges of one seekable file object, or of the bytes of a file (the key is
    ignored: there is one object). A file with a descriptor is read with ``os.pread``
    (which leaves its position alone); any other file object under xarray's HDF5 lock,
    the lock h5py's reads of the same object hold, so a seek never lands between theirs."""

    sync = True

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.where = f"<{type(obj).__name__}>"

    def get_sync(self, key: str, rng: ByteRange | None = None, *, reuse: bool = False) -> Buffer | None:
        count_range(rng)
        if isinstance(self.obj, (bytes, bytearray, memoryview)):
            view = memoryview(self.obj).cast("B")
            if rng is None:
                return view
            return view[max(0, len(view) + rng.start) :] if rng.is_suffix else view[rng.start : rng.stop]
        if rng is None or rng.is_suffix or rng.stop is None:
            raise ChunkReadError(f"{self.where}: only whole byte ranges are read from a file object, got {rng}")
        fd = _descriptor(self.obj)  # asked each time: a closed file raises, never a reused descriptor
        if fd is not None:
            return os.pread(fd, rng.stop - rng.start, rng.start)
        from xarray.backends.locks import HDF5_LOCK

        with HDF5_LOCK:
            where = self.obj.tell()
            try:
                self.obj.seek(rng.start)
                return self.obj.read(rng.stop - rng.start)  # type: ignore[no-any-return]
            finally:
                self.obj.seek(where)

    async def get(self, key: str, rng: ByteRange | None = None) -> Buffer | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, contextvars.copy_context().run, self.get_sync, key, rng)


def _descriptor(obj: Any) -> int | None:
    """The descriptor of a plain local file opened for reading (None for anything else; a
    closed file raises ``ValueError``, as reading it would)."""
    import io

    if not isinstance(obj, (io.BufferedReader, io.FileIO)) or not hasattr(os, "pread"):
        return None
    return int(obj.fileno())


def ranged_store(inp: Any) -> tuple[ByteStore, str] | None:
    """(byte store, key) that reads a NetCDF input by range: a URL's folder and its name, an
    fsspec file object's filesystem and path, a local file object or the bytes of a file;
    None for what is read through xarray's store (a URL with a query string or an fsspec
    chain, an open data store)."""
    from .remote import byte_store_for

    if inp.kind in ("bytes",):
        return FileObjectBytes(inp.obj), ""
    if inp.kind == "file":
        fs, path = getattr(inp.obj, "fs", None), getattr(inp.obj, "path", None)
        if fs is None or not isinstance(path, str):
            return FileObjectBytes(inp.obj), ""
        url = fs.unstrip_protocol(path)
        options = dict(getattr(fs, "storage_options", {}) or {})
    elif inp.kind == "url":
        url, options = inp.obj, dict(inp.kwargs.get("storage_options") or {})
    else:
        return None
    parts = urlsplit(url)
    if "::" in url or parts.query or parts.fragment or parts.scheme not in RANGED_PROTOCOLS:
        return None
    root, _, name = url.rpartition("/")
    if not name:
        return None
    return byte_store_for(root, options), name


class RangedSource(ChunkSource):
    """One variable of a NetCDF4/HDF5 or NetCDF3 file, read chunk by chunk by byte range
    through ``store`` (key ``key``) and decoded by tsexplore (see the module's docstring)."""

    def __init__(
        self,
        name: str,
        variable: Any,
        layout: ChunkLayout,
        store: ByteStore,
        key: str,
        options: SourceOptions = DEFAULT_OPTIONS,
        token: str = "",
        metadata: Any = None,
    ) -> None:
        """``metadata``: the xarray store the variable's metadata came from (closed by
        :meth:`close`; the reads do not need it)."""
        self.name = name
        self._metadata = metadata
        self.layout = layout
        self._store = store
        self.key = key
        self.shape = layout.shape
        self._store_dtype = np.dtype(variable.dtype)
        self.dtype = native_dtype(self._store_dtype)
        self.dims = tuple(str(d) for d in variable.dims)
        self.chunks = layout.chunks
        self.attrs = dict(variable.attrs)
        self.encoding = dict(variable.encoding)
        self.fill_value = layout.fill_value
        self.options = options
        self.is_async = not store.sync
        self.token = f"ranged-{token}:{layout.path}"

    @staticmethod
    def fits(variable: Any, layout: ChunkLayout) -> bool:
        """The layout is read by range and holds what xarray's variable holds (shape and
        dtype: an enum or a type xarray's store converts is read through the store)."""
        return (
            layout.by_range
            and tuple(variable.shape) == layout.shape
            and native_dtype(variable.dtype) == layout.out_dtype
        )

    @property
    def reader(self) -> str:
        """How this source reads, in words."""
        where = self._store.url(self.key) if self.key else self._store.where
        return f"chunk by chunk by byte range from {where}"

    def fill_chunk(self, index: ChunkIndex) -> np.ndarray:
        """A chunk never written, as h5py reads it: the dataset's fill value."""
        return self.layout.fill(index)

    def _missing(self, index: ChunkIndex) -> MissingChunkError:
        return MissingChunkError(
            f"{self.layout.where(index)} was never written (opened with missing='raise'); "
            "HDF5 reads such chunks as the dataset's fill value: open with missing='fill' "
            "(the default) to read them so",
            source=self.token, index=tuple(index),
        )

    def _decode(self, index: ChunkIndex, parts: list[Any]) -> tuple[np.ndarray, int]:
        if any(p is None for p in parts):
            raise ChunkReadError(
                f"{self.layout.where(index)}: {self._store.url(self.key)} is gone (the file was "
                "removed or renamed since it was opened)", source=self.token, index=tuple(index),
            )
        try:
            return self.layout.decode(index, parts), sum(len(memoryview(p)) for p in parts)
        except ChunkReadError as exc:
            exc.source = exc.source or self.token
            exc.index = exc.index if exc.index is not None else tuple(index)
            raise

    def _read_sync(self, index: ChunkIndex, ranges: list[ByteRange]) -> tuple[np.ndarray, int]:
        return self._decode(index, [self._store.get_sync(self.key, r) for r in ranges])

    def _remote_ranges(self, index: ChunkIndex, found: list[tuple[int, int]]) -> list[ByteRange]:
        """What to ask a remote store for: the chunk's runs, or the one range from the first
        to the last when that costs at most :data:`HULL_FACTOR` times their bytes (one request
        instead of many; and a server that ignores ``Range`` then sends the file once, not
        once per run)."""
        if len(found) > 1:
            start, stop = found[0][0], found[-1][1]
            if stop - start <= HULL_FACTOR * sum(b - a for a, b in found):
                return [ByteRange(start, stop)]
        return [ByteRange(a, b) for a, b in found]

    async def _fetch(self, ranges: list[ByteRange]) -> list[Any]:
        """The ranges' bytes, at most :data:`RUNS_AT_ONCE` requests in flight (a server that
        ignores ``Range`` answers each with the whole file)."""
        if len(ranges) == 1:
            return [await self._store.get(self.key, ranges[0])]
        gate = asyncio.Semaphore(RUNS_AT_ONCE)

        async def one(rng: ByteRange) -> Any:
            async with gate:
                return await self._store.get(self.key, rng)

        return list(await asyncio.gather(*(one(r) for r in ranges)))

    async def read_chunk_counted(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        self.check_index(index)
        found = self.layout.ranges(index)
        if found is None:
            raise self._missing(index)
        loop = asyncio.get_running_loop()
        if self._store.sync:  # fetched and decoded in one trip to a read thread
            ranges = [ByteRange(a, b) for a, b in found]
            return await loop.run_in_executor(None, contextvars.copy_context().run, self._read_sync, index, ranges)
        try:
            parts = await self._fetch(self._remote_ranges(index, found))
        except ChunkReadError as exc:
            raise type(exc)(f"{self.layout.where(index)}: {exc}", source=self.token, index=tuple(index)) from exc
        return await loop.run_in_executor(None, self._decode, index, parts)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_metadata": None}

    def close(self) -> None:
        """Close the xarray store the metadata came from (the byte store's sessions belong
        to the engine's loop)."""
        store, self._metadata = self._metadata, None
        if store is not None:
            store.close()

    def __repr__(self) -> str:
        return f"<RangedSource {self.layout.path} shape={self.shape} chunks={self.chunks} from {self._store!r}>"

