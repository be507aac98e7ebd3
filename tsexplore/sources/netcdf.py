"""NetCDF3 (scipy engine, also gzipped) and NetCDF4/HDF5 (netcdf4 or h5netcdf engine) through
xarray's own backend stores.

The file is opened with xarray's ``ScipyDataStore`` / ``NetCDF4DataStore`` /
``H5NetCDFStore`` exactly as xarray's ``scipy`` / ``netcdf4`` / ``h5netcdf`` engines open it
(``group=`` and, for netcdf4, ``auto_complex=`` as they take them). An HDF5 file is read with
the library that wrote it, so the encoding is the one its writer reports (a file whose
``_NCProperties`` names h5netcdf, or that has none, with h5netcdf; one written by
netCDF-C, with netCDF4 when it is installed -- xarray's first engine for those). The
store's raw (undecoded) variables give each
source its dims, attributes and encoding (``chunksizes``, ``zlib``, ``complevel``, ``shuffle``,
``contiguous``, ``fletcher32``, ``source``, ...): CF decoding happens above, in xarray's coders.
Each data variable becomes a source reading one chunk region at a time through the store's
lazy backend array (and its HDF5 lock). The chunk grid is the file's native HDF5 chunking
when there is one, else a virtual grid of about 4 MiB per chunk. Encoded bytes are reported
as the region's size (the backends do not expose compressed sizes).
"""

from __future__ import annotations

import gzip
import os
from typing import Any

import numpy as np

from ..errors import SourceError
from .base import (
    DEFAULT_OPTIONS,
    ChunkIndex,
    SourceOptions,
    SyncChunkSource,
    native_dtype,
    normalize_chunks,
)


class NetCDFVariableSource(SyncChunkSource):
    def __init__(
        self,
        path: str,
        name: str,
        variable: Any,
        engine: str,
        chunks: Any = None,
        options: SourceOptions = DEFAULT_OPTIONS,
        store: Any = None,
        group: str | None = None,
        auto_complex: bool | None = None,
    ) -> None:
        self.path = path
        self.name = name
        self.engine = engine
        self.group = group
        self._auto_complex = auto_complex
        self._var = variable  # xarray's raw store variable (lazily indexed backend array)
        self._store = store  # the xarray store it came from (closed by close())
        self.shape = tuple(int(s) for s in variable.shape)
        self._store_dtype = np.dtype(variable.dtype)
        self.dtype = native_dtype(self._store_dtype)  # NetCDF3 is big-endian
        self.dims = tuple(str(d) for d in variable.dims)
        native = variable.encoding.get("chunksizes")
        if chunks is None and native:
            chunks = tuple(native)
        self.chunks = normalize_chunks(chunks, self.shape, self.dims, 4 * 2**20, self.dtype.itemsize)
        self.attrs = dict(variable.attrs)
        self.encoding = dict(variable.encoding)
        self.fill_value = variable.attrs.get("_FillValue")
        self.options = options
        st = os.stat(path)
        where = f"{group.strip('/')}/{name}" if group else name
        self.token = f"netcdf-{os.path.abspath(path)}:{where}@{st.st_mtime_ns}-{st.st_size}"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_var"] = state["_store"] = None
        return state

    def _variable(self) -> Any:
        if self._var is None:
            self._store = open_store(self.path, self.engine, self.group, self._auto_complex)
            self._var = self._store.get_variables()[self.name]
        return self._var

    def close(self) -> None:
        """Close the file (xarray's file manager reopens it if the source reads again)."""
        store, self._store = self._store, None
        self._var = None
        if store is not None:
            store.close()

    def read_chunk_sync(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        region = self._variable()[self.chunk_slices(index)]
        data = np.array(region.values, dtype=self.dtype, copy=True)
        return data, data.nbytes


def _magic(path: str) -> bytes:
    with open(path, "rb") as f:
        magic = f.read(8)
    if magic.startswith(b"\x1f\x8b"):  # gzip: xarray's scipy engine reads the file inside
        try:
            with gzip.open(path) as f:
                return b"gz:" + f.read(8)
        except OSError as exc:
            raise SourceError(f"{path} looks gzipped but cannot be decompressed: {exc}") from exc
    return magic


def _hdf5_engine(path: str) -> str:
    """``"netcdf4"`` for a file netCDF-C wrote (when netCDF4 is installed), else ``"h5netcdf"``."""
    try:
        import netCDF4  # noqa: F401
    except ImportError:
        return "h5netcdf"
    import h5py

    try:
        with h5py.File(path, "r") as f:
            props = f.attrs.get("_NCProperties")
    except OSError:
        return "h5netcdf"  # let the store say what is wrong
    if isinstance(props, bytes):
        props = props.decode("utf-8", "replace")
    writers = {part.split("=", 1)[0].strip() for part in props.split(",")} if isinstance(props, str) else set()
    return "netcdf4" if "netcdf" in writers else "h5netcdf"


def engine_for(path: str) -> str:
    """``"scipy"`` for NetCDF3 (plain or gzipped), ``"netcdf4"`` or ``"h5netcdf"`` for
    NetCDF4/HDF5 (the library that wrote it, see the module's docstring)."""
    magic = _magic(path)
    if magic.startswith((b"CDF", b"gz:CDF")):
        if magic.startswith(b"gz:") and not path.endswith(".gz"):
            raise SourceError(
                f"{path} is a gzipped NetCDF3 file; xarray's scipy engine (and tsexplore) "
                "open those only under a name ending in .gz"
            )
        return "scipy"
    if magic.startswith(b"\x89HDF"):
        return _hdf5_engine(path)
    if magic.startswith(b"gz:"):
        raise SourceError(
            f"{path} is gzipped, but what is inside is not NetCDF3 (magic 'CDF'): "
            "xarray's scipy engine opens only gzipped NetCDF3 files"
        )
    raise SourceError(
        f"{path} is neither NetCDF3 (magic 'CDF') nor NetCDF4/HDF5 (magic '\\x89HDF'); "
        f"its first bytes are {magic!r}"
    )


def open_store(path: str, engine: str, group: str | None = None, auto_complex: bool | None = None) -> Any:
    """xarray's own backend store for ``path`` (its ``group``), opened as xarray's engine
    opens it."""
    if engine == "scipy":
        if group:
            raise SourceError(f"group={group!r}: {path} is NetCDF3, which has no groups")
        from xarray.backends.scipy_ import ScipyDataStore

        return ScipyDataStore(path, mode="r")
    if engine == "netcdf4":
        from xarray.backends.netCDF4_ import NetCDF4DataStore

        return NetCDF4DataStore.open(path, mode="r", group=group, auto_complex=auto_complex)
    from xarray.backends.h5netcdf_ import H5NetCDFStore

    # phony_dims="access" is what xarray's h5netcdf engine uses when none is given
    return H5NetCDFStore.open(path, mode="r", group=group, phony_dims="access", decode_vlen_strings=True)


def group_paths(path: str | os.PathLike[str]) -> list[str]:
    """Every group of a NetCDF/HDF5 file, the root first (``"/"``, ``"/a"``, ``"/a/b"``...),
    as xarray's netCDF engines walk them for ``open_datatree``."""
    from xarray.backends.common import _iter_nc_groups

    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    engine = engine_for(path)
    if engine == "scipy":
        return ["/"]
    store = open_store(path, engine)
    try:
        return list(_iter_nc_groups(store.ds))
    finally:
        store.close()


def open_netcdf(
    path: str | os.PathLike[str],
    chunks: Any = None,
    options: SourceOptions = DEFAULT_OPTIONS,
    group: str | None = None,
    auto_complex: bool | None = None,
) -> tuple[dict, dict, dict, dict]:
    """Sources for the data variables of a NetCDF file (of its ``group``): (sources, coords,
    attrs, encoding).

    Coordinates (variables named after their dimension) and scalars are read eagerly, as
    ``(dims, values, attrs, encoding, dtype)`` of xarray's raw store variable.
    """
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))  # as xarray normalizes it
    engine = engine_for(path)
    try:
        store = open_store(path, engine, group, auto_complex)
        variables, attrs = store.load()
        encoding = store.get_encoding()
    except SourceError:
        raise
    except Exception as exc:  # noqa: BLE001
        where = f" (group {group!r})" if group else ""
        raise SourceError(f"cannot open {path}{where} with xarray's {engine} engine: {exc}") from exc
    sources = {}
    coords = {}
    for name, var in variables.items():
        if var.dims == (name,) or var.ndim == 0:
            values = np.asarray(var.values)
            coords[name] = (var.dims, values, dict(var.attrs), dict(var.encoding), var.dtype)
        else:
            sources[name] = NetCDFVariableSource(
                path, name, var, engine, chunks, options, store, group, auto_complex
            )
    return sources, coords, dict(attrs), dict(encoding)
