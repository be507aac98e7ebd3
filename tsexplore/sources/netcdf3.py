"""NetCDF3 (classic and 64-bit offset) read by byte range: a remote file, a file object or
the bytes of a file.

scipy's own ``netcdf_file`` parses the header over a file object that reads by range (an
fsspec file: a few requests for the header), with one change (:func:`header_only`): no
variable's values are read. Each variable gets a placeholder of its shape and dtype (all
strides 0: no memory) and where its values lie is kept: a non-record variable is one
contiguous block, a record variable one block per record, the record's length apart.
Coordinates (variables named after their dimension, and scalars) are read for real, by
range, as xarray reads them eagerly. xarray's own ``ScipyDataStore`` over that
``netcdf_file`` then gives the variables, attributes and encoding exactly as xarray's scipy
engine gives them; each data variable's values are read chunk by chunk by range
(:class:`~.ranged.RangedSource` over a contiguous :class:`~.hdf5.ChunkLayout`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .base import normalize_chunks
from .hdf5 import ChunkLayout, c_strides, strided

#: the header is read through a file object that reads this many bytes ahead per request
HEADER_BLOCK = 64 * 2**10
#: ranges of a coordinate's values fetched at once
RANGES_AT_ONCE = 32
#: a coordinate is read as the one range that holds it when that is at most this long
#: (else value by value: a record coordinate's values are a record apart)
COORDINATE_HULL = 4 * 2**20


def header_only(fp: Any) -> Any:
    """scipy's ``netcdf_file`` over the file object ``fp``, its header read and none of its
    values: ``places[name]`` is ``(begin, record, record_stride)`` for each variable."""
    import scipy.io
    from scipy.io._netcdf import NC_VARIABLE, ZERO, netcdf_variable

    class HeaderOnly(scipy.io.netcdf_file):  # type: ignore[misc]
        def _read_var_array(self) -> None:
            # scipy's own loop (scipy/io/_netcdf.py), with placeholders for the values
            header = self.fp.read(4)
            if header not in [ZERO, NC_VARIABLE]:
                raise ValueError("Unexpected header.")
            places: dict[str, tuple[int, bool]] = {}
            records: list[tuple[str, int]] = []
            for _ in range(self._unpack_int()):
                (name, dimensions, shape, attributes, typecode, size, dtype_, begin_,
                 vsize) = self._read_var()
                record = bool(shape) and shape[0] is None
                if record:
                    self.__dict__["_recsize"] += vsize
                    records.append((name, math.prod(shape[1:]) * size))
                    full = (self._recs, *shape[1:])
                else:
                    full = tuple(shape)
                data = np.broadcast_to(np.zeros((), dtype_), full)
                self.variables[name] = netcdf_variable(
                    data, typecode, size, shape, dimensions, attributes, maskandscale=self.maskandscale
                )
                places[name] = (begin_, record)
            # one record variable: its records follow each other unpadded (scipy's rule)
            stride = records[0][1] if len(records) == 1 else self._recsize
            self.__dict__["places"] = {n: (b, r, stride if r else 0) for n, (b, r) in places.items()}

        def close(self) -> None:  # the file object is the caller's: only forget it
            self.__dict__["fp"] = None

        def __del__(self) -> None:  # scipy closes the file object on garbage collection
            pass

    return HeaderOnly(fp, mode="r", mmap=False)


def _read(fp: Any, ranges: list[tuple[int, int]]) -> list[bytes]:
    """Bytes ``[a, b)`` of each range of the file object: through its fsspec filesystem when
    it has one (one range first, then :data:`RANGES_AT_ONCE` at a time), else one seek and
    read each. Every answer is checked to be as long as asked as soon as it comes: a server
    that ignores ``Range`` (each answer the whole file) raises ``ValueError`` after one."""
    fs, path = getattr(fp, "fs", None), getattr(fp, "path", None)
    out: list[bytes] = []
    if len(ranges) > 1 and fs is not None and isinstance(path, str):
        batches = [ranges[:1]] + [ranges[i : i + RANGES_AT_ONCE] for i in range(1, len(ranges), RANGES_AT_ONCE)]
        for batch in batches:
            got = fs.cat_ranges([path] * len(batch), [a for a, _ in batch], [b for _, b in batch],
                                on_error="raise")
            _check(batch, got)
            out.extend(got)
        return out
    for a, b in ranges:
        fp.seek(a)
        got = [fp.read(b - a)]
        _check([(a, b)], got)
        out.extend(got)
    return out


def _check(ranges: list[tuple[int, int]], parts: list[bytes]) -> None:
    for (a, b), part in zip(ranges, parts):
        if len(part) != b - a:
            raise ValueError(f"{len(part)} bytes answered {b - a}-byte range requests (bytes {a}-{b})")


def layout_of(nc: Any, name: str, grid: Any = None) -> ChunkLayout:
    """The contiguous :class:`ChunkLayout` of variable ``name`` of a :func:`header_only`
    file (``grid``: its virtual chunk shape, default about 4 MiB a chunk)."""
    var = nc.variables[name]
    begin, record, stride = nc.places[name]
    dtype = np.dtype(var.data.dtype)
    shape = tuple(int(s) for s in var.data.shape)
    strides = c_strides(shape, dtype.itemsize)
    if record:
        strides = (stride, *strides[1:])
    chunks = normalize_chunks(grid, shape, tuple(var.dimensions), 4 * 2**20, dtype.itemsize)
    size = math.prod(shape) * dtype.itemsize
    return ChunkLayout(name, shape, dtype, chunks, "contiguous", np.zeros((), dtype.newbyteorder("="))[()],
                       offset=int(begin), size=int(size), strides=tuple(strides), what="NetCDF3 variable")


def read_coordinates(nc: Any, fp: Any) -> None:
    """Read the coordinates of a :func:`header_only` file (variables named after their
    dimension, and scalars) by range, into its variables (as scipy holds them)."""
    from .hdf5 import _runs

    for name, var in nc.variables.items():
        if not (tuple(var.dimensions) == (name,) or not var.dimensions):
            continue
        layout = layout_of(nc, name)
        shape = layout.shape
        if 0 in shape:
            continue
        region = tuple(slice(0, n) for n in shape)
        itemsize = layout.dtype.itemsize
        # one range for them all when it is small, else one per run (a record coordinate:
        # one value per record, records apart), fetched together
        hull = _runs(region, shape, itemsize, layout.strides, max_runs=0)[0] if shape else (0, itemsize)
        small = hull[1] - hull[0] <= COORDINATE_HULL
        runs = [hull] if small or not shape else _runs(region, shape, itemsize, layout.strides, max_runs=1 << 30)
        parts = _read(fp, [(layout.offset + a, layout.offset + b) for a, b in runs])
        if len(runs) > 1 or not shape or hull[1] - hull[0] == math.prod(shape) * itemsize:
            values = np.frombuffer(b"".join(parts), layout.dtype).reshape(shape)
        else:  # the one range holding them all, read with the variable's own strides
            values = strided(parts[0], layout.dtype, shape, layout.strides or ())
        var.__dict__["data"] = np.array(values)


def open_store(fp: Any) -> Any:
    """xarray's ``ScipyDataStore`` over a :func:`header_only` ``netcdf_file`` of ``fp``, its
    coordinates read (the store xarray's scipy engine would give, less the values of the
    data variables, which are read by range)."""
    from xarray.backends.file_manager import DummyFileManager
    from xarray.backends.locks import ensure_lock
    from xarray.backends.scipy_ import ScipyDataStore

    nc = header_only(fp)
    read_coordinates(nc, fp)
    store = ScipyDataStore.__new__(ScipyDataStore)
    store._manager = DummyFileManager(nc)  # what its constructor sets for a file object
    store.lock = ensure_lock(None)
    return store


def ranged_file(url: str, storage_options: dict[str, Any] | None) -> Any:
    """An fsspec file over ``url`` that reads ahead :data:`HEADER_BLOCK` bytes per request."""
    import fsspec

    return fsspec.open(url, "rb", block_size=HEADER_BLOCK, cache_type="readahead",
                       **(storage_options or {})).open()
