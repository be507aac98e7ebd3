"""NetCDF variables read chunk by chunk by byte range: remote files (``https://``,
``s3://``...), fsspec file objects, local file objects and the bytes of a file.

Thin glue over :mod:`.hdf5` into the engine's pipeline: the variable's
:class:`~.hdf5.ChunkLayout` (an HDF5 dataset's chunk index, read once when the file is opened,
or where a NetCDF3 variable's values lie, :mod:`.netcdf3`) locates a chunk's byte ranges
(:meth:`RangedSource.locate`); the engine fetches them through the byte interface (the store
:func:`~.remote.byte_store_for` picks for the file's folder, the key its name: coalescing,
retries, timeouts, servers that ignore ``Range``, counted in the stats) and the source decodes
them (:meth:`RangedSource.decode`, :meth:`~.hdf5.ChunkLayout.decode`). A chunk never written reads as the dataset's fill value
(the engine counts it as ``missing_filled``). Dims, attributes and encoding are those of
xarray's h5netcdf store over the same file (the metadata is read by it).

:func:`ranged_store` says which byte store reads an input, or None when it is not read by
range (a query string, an fsspec chain: those read through xarray's store).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from ..errors import ChunkReadError, MissingChunkError
from .base import DEFAULT_OPTIONS, ChunkIndex, ChunkSource, SourceOptions, native_dtype
from .bytes import Buffer, ByteRange, ByteStore
from .hdf5 import ChunkLayout
from .requests import AuxKey, Blocks, ChunkRequest, Located

#: a chunk held in several runs is fetched as the one range that holds them all when that
#: is at most this many times their bytes
HULL_FACTOR = 4
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

    def get_ranges_sync(
        self, key: str, ranges: Sequence[ByteRange | None], ctx: Any = None, *, reuse: bool = False
    ) -> list[Buffer] | None:
        return [self._read(rng, ctx) for rng in ranges]

    def _read(self, rng: ByteRange | None, ctx: Any) -> Buffer:
        if ctx is not None:
            ctx.count("store_requests", 1)
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


def _descriptor(obj: Any) -> int | None:
    """The descriptor of a plain local file opened for reading (None for anything else; a
    closed file raises ``ValueError``, as reading it would)."""
    import io

    if not isinstance(obj, (io.BufferedReader, io.FileIO)) or not hasattr(os, "pread"):
        return None
    return int(obj.fileno())


def ranged_store(inp: Any, reader: str = "auto") -> tuple[ByteStore, str] | None:
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
    return byte_store_for(root, options, reader), name


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
        self.store = store
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
        where = self.store.url(self.key) if self.key else self.store.where
        return f"chunk by chunk by byte range from {where}"

    def fill_chunk(self, index: ChunkIndex) -> np.ndarray:
        """A chunk never written, as h5py reads it: the dataset's fill value."""
        return self.layout.fill(index)

    def describe(self, index: ChunkIndex) -> str:
        return self.layout.where(index)

    def missing(self, index: ChunkIndex) -> MissingChunkError:
        return MissingChunkError(
            f"{self.layout.where(index)} was never written (opened with missing='raise'); "
            "HDF5 reads such chunks as the dataset's fill value: open with missing='fill' "
            "(the default) to read them so",
            source=self.token, index=tuple(index),
        )

    def locate(self, request: ChunkRequest, aux: Callable[[AuxKey], Any],
               ranges_pay: Callable[[int, int, bool], bool] | None = None) -> Located:
        """The chunk's byte ranges in the file (none: never written). A remote store gets the
        one range that holds several runs when it costs at most :data:`HULL_FACTOR` times
        their bytes (one request instead of many)."""
        found = self.layout.ranges(request.index)
        if found is None:
            return Located(None)
        if not self.store.sync and len(found) > 1:
            start, stop = found[0][0], found[-1][1]
            if stop - start <= HULL_FACTOR * sum(b - a for a, b in found):
                found = [(start, stop)]
        return Located(self.key, tuple(ByteRange(a, b) for a, b in found))

    def decode(self, request: ChunkRequest, located: Located, data: list[Any]) -> tuple[np.ndarray, int]:
        index = request.index
        try:
            values = self.layout.decode(index, data)
        except ChunkReadError as exc:
            exc.source = exc.source or self.token
            exc.index = exc.index if exc.index is not None else tuple(index)
            raise
        if isinstance(request.part, Blocks):  # (the source has no blocks: only if asked directly)
            values = values[tuple(slice(lo, hi) for lo, hi in request.part.box)]
        return values, values.nbytes

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_metadata": None}

    def close(self) -> None:
        """Close the xarray store the metadata came from (the byte store's sessions belong
        to the engine's loop)."""
        store, self._metadata = self._metadata, None
        if store is not None:
            store.close()

    def __repr__(self) -> str:
        return f"<RangedSource {self.layout.path} shape={self.shape} chunks={self.chunks} from {self.store!r}>"

