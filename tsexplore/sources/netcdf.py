"""NetCDF3 (scipy engine) and NetCDF4/HDF5 (h5netcdf engine) through xarray's own backends.

The file is opened by xarray without decoding (``decode_cf=False``); each data variable
becomes a source reading one chunk region at a time through xarray's lazy backend array (and
its HDF5 lock). The chunk grid is the file's native HDF5 chunking when there is one, else a
virtual grid of about 4 MiB per chunk. Encoded bytes are reported as the region's size (the
backends do not expose compressed sizes).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import SourceError
from .base import ChunkIndex, SyncChunkSource, normalize_chunks


class NetCDFVariableSource(SyncChunkSource):
    def __init__(self, path: str, name: str, variable: Any, engine: str, chunks: Any = None) -> None:
        self.path = path
        self.name = name
        self.engine = engine
        self._var = variable
        self.shape = tuple(int(s) for s in variable.shape)
        self.dtype = np.dtype(variable.dtype).newbyteorder("=")  # NetCDF3 is big-endian
        self.dims = tuple(str(d) for d in variable.dims)
        native = variable.encoding.get("chunksizes")
        if chunks is None and native:
            chunks = tuple(native)
        self.chunks = normalize_chunks(chunks, self.shape, self.dims, 4 * 2**20, self.dtype.itemsize)
        self.attrs = dict(variable.attrs)
        self.fill_value = variable.attrs.get("_FillValue")
        st = os.stat(path)
        self.token = f"netcdf-{os.path.abspath(path)}:{name}@{st.st_mtime_ns}-{st.st_size}"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_var"] = None
        return state

    def _variable(self) -> Any:
        if self._var is None:
            ds = _open(self.path, self.engine)
            self._var = ds.variables[self.name]
        return self._var

    def read_chunk_sync(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        region = self._variable()[self.chunk_slices(index)]
        data = np.array(region.values, dtype=self.dtype, copy=True)
        return data, data.nbytes


def _engine_for(path: str) -> str:
    with open(path, "rb") as f:
        magic = f.read(8)
    if magic.startswith(b"CDF"):
        return "scipy"
    if magic.startswith(b"\x89HDF"):
        return "h5netcdf"
    raise SourceError(
        f"{path} is neither NetCDF3 (magic 'CDF') nor NetCDF4/HDF5 (magic '\\x89HDF'); "
        f"its first bytes are {magic!r}"
    )


def _open(path: str, engine: str) -> Any:
    import xarray as xr

    return xr.open_dataset(path, engine=engine, decode_cf=False, cache=False)


def open_netcdf(path: str | os.PathLike[str], chunks: Any = None) -> tuple[dict, dict, dict]:
    """Sources for the data variables of a NetCDF file: (sources, coords, attrs)."""
    path = os.fspath(path)
    engine = _engine_for(path)
    try:
        ds = _open(path, engine)
    except Exception as exc:  # noqa: BLE001
        raise SourceError(f"cannot open {path} with xarray's {engine} engine: {exc}") from exc
    sources = {}
    coords = {}
    for name, var in ds.variables.items():
        if name in ds.dims and var.ndim == 1:
            coords[name] = (var.dims, np.asarray(var.values), dict(var.attrs))
        elif name in ds.coords or var.ndim == 0:
            coords[name] = (var.dims, np.asarray(var.values), dict(var.attrs))
        else:
            sources[name] = NetCDFVariableSource(path, name, var, engine, chunks)
    return sources, coords, dict(ds.attrs)
