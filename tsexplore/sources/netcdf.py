"""NetCDF3 (scipy engine, also gzipped) and NetCDF4/HDF5 (netcdf4 or h5netcdf engine) through
xarray's own backend stores, from every input xarray's engines take.

:func:`netcdf_input` takes what the user passed -- a local path (any ``os.PathLike``, with or
without an extension: the file's signature says what it is), a URL (``https://``, ``s3://``,
fsspec chains such as ``simplecache::memory://f.nc``), a file object (``open(.., 'rb')``,
``BytesIO``, fsspec files), the ``bytes`` or ``memoryview`` of a file, or an already-open
xarray data store (``NetCDF4DataStore``, ``H5NetCDFStore``, ``ScipyDataStore``) -- with
the engines' own keyword arguments (``phony_dims``, ``open_kwargs``, ``storage_options``,
``mmap``, ``diskless``...), and picks the engine xarray would use for it: an argument only
one engine takes names it; else NetCDF3 (plain or gzipped) is read by scipy, and HDF5 by the
library that wrote it (a file whose ``_NCProperties`` names h5netcdf, or that has none, with
h5netcdf; one written by netCDF-C, with netCDF4 when it is installed -- xarray's first
engine for those), except file objects and URLs, which only h5netcdf reads.

:func:`open_store` then opens xarray's store exactly as that engine's ``open_dataset`` does
(same calls, so the same warnings and errors: h5netcdf's phony-dimension warning, a wrong
signature's ``ValueError``, ``FileNotFoundError``...). Its raw (undecoded) variables give
each source its dims, attributes and encoding (``chunksizes``, ``zlib``, ``shuffle``,
``contiguous``, ``source``...): CF decoding happens above, in xarray's coders. Each data
variable becomes a :class:`NetCDFVariableSource` reading one chunk region at a time through
the store's lazy backend array (and its lock); the chunk grid is the file's native HDF5
chunking when there is one, else a virtual grid of about 4 MiB per chunk. Encoded bytes are
reported as the region's size (the backends do not expose compressed sizes).

A local path reads through its store as xarray does. A URL, a file object or the bytes of a
file are read chunk by chunk by byte range instead (:mod:`.ranged`: HDF5 through its chunk
index, :mod:`.hdf5`; NetCDF3 through where scipy's header parse says each variable lies,
:mod:`.netcdf3`); what cannot be (an open data store, a URL with a query string or an fsspec
chain, a layout h5py alone reads) is read through the store -- still one chunk at a time
through the engine, cached and counted. The dataset's ``encoding["tsexplore_reader"]``
says how it is read (not set for a local path).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError, SourceError, SourceNotFoundError, UnknownFormatError
from .base import (
    DEFAULT_OPTIONS,
    ChunkIndex,
    SourceOptions,
    SyncChunkSource,
    native_dtype,
    normalize_chunks,
)

#: each xarray engine's own keyword arguments (``group`` and the decoders aside)
ENGINE_KWARGS: dict[str, tuple[str, ...]] = {
    "netcdf4": ("mode", "format", "clobber", "diskless", "persist", "auto_complex", "lock", "autoclose"),
    "h5netcdf": ("format", "lock", "invalid_netcdf", "phony_dims", "decode_vlen_strings", "driver",
                 "driver_kwds", "storage_options", "open_kwargs"),
    "scipy": ("mode", "format", "mmap", "lock"),
}
#: every keyword argument some NetCDF engine takes
NETCDF_KWARGS = frozenset(k for names in ENGINE_KWARGS.values() for k in names)
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

Kind = str  # "path" | "url" | "file" | "bytes" | "store"


def _only(engine: str) -> set[str]:
    """The keyword arguments only ``engine`` takes."""
    others = {k for e, names in ENGINE_KWARGS.items() if e != engine for k in names}
    return set(ENGINE_KWARGS[engine]) - others


def is_url(obj: Any) -> bool:
    """A URL or fsspec chain (``https://``, ``s3://``, ``simplecache::memory://``), as
    xarray's ``is_remote_uri`` tells them; ``file://`` is a local path."""
    from xarray.core.utils import is_remote_uri

    return isinstance(obj, str) and is_remote_uri(obj) and not obj.startswith("file://")


def _data_store_engine(obj: Any) -> str | None:
    """The engine of an already-open xarray data store (``"store"`` for a store of another
    kind; None: not a data store, or xarray's Zarr store, read as Zarr)."""
    from xarray.backends.common import AbstractDataStore
    from xarray.backends.h5netcdf_ import H5NetCDFStore
    from xarray.backends.netCDF4_ import NetCDF4DataStore
    from xarray.backends.scipy_ import ScipyDataStore

    for cls, engine in ((NetCDF4DataStore, "netcdf4"), (H5NetCDFStore, "h5netcdf"), (ScipyDataStore, "scipy")):
        if isinstance(obj, cls):
            return engine
    kind = type(obj).__module__ + "." + type(obj).__name__
    if isinstance(obj, AbstractDataStore) and kind != "xarray.backends.zarr.ZarrStore":
        return "store"  # any other store: its variables as it gives them
    return None


def is_bytes(obj: Any) -> bool:
    """The bytes of a file: ``bytes``, ``bytearray`` or ``memoryview`` (the name ``bytes`` is
    a module in this package's namespace, so the check lives here)."""
    return isinstance(obj, (bytes, bytearray, memoryview))


def is_file_object(obj: Any) -> bool:
    """A readable, seekable file object (``open(.., 'rb')``, ``BytesIO``, fsspec files)."""
    return hasattr(obj, "read") and hasattr(obj, "seek") and not isinstance(obj, (str, bytes))


def read_signature(obj: Any, kind: Kind, storage_options: dict[str, Any] | None = None) -> bytes:
    """The first 8 bytes of a path, URL, file object or bytes (of the file inside, after
    ``gz:``, when it is gzipped)."""
    if kind == "bytes":
        magic = bytes(memoryview(obj)[:8])
    elif kind == "file":
        from xarray.core.utils import read_magic_number_from_file

        if isinstance(obj, io.IOBase):
            magic = read_magic_number_from_file(obj)
        else:
            where = obj.tell()
            obj.seek(0)
            magic = obj.read(8)
            obj.seek(where)
    elif kind == "url":
        import fsspec

        with fsspec.open(obj, "rb", **(storage_options or {})) as f:
            magic = f.read(8)
    else:
        with open(obj, "rb") as f:
            magic = f.read(8)
    if magic.startswith(b"\x1f\x8b") and kind == "path":  # xarray's scipy engine reads the file inside
        try:
            with gzip.open(obj) as f:
                return b"gz:" + f.read(8)
        except OSError as exc:
            raise SourceError(f"{obj} looks gzipped but cannot be decompressed: {exc}") from exc
    return bytes(magic)


def looks_like_netcdf(obj: Any, kind: Kind, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether the signature is NetCDF3's or HDF5's (gzipped NetCDF3 too); False when it
    cannot be read."""
    try:
        magic = read_signature(obj, kind, storage_options)
    except Exception:  # noqa: BLE001 - not a readable file: not NetCDF
        return False
    return magic.startswith((b"CDF", b"gz:CDF", HDF5_SIGNATURE))


def _written_by_netcdf_c(obj: Any) -> bool:
    """Whether an HDF5 file's ``_NCProperties`` names netCDF-C (True when h5py cannot open
    it, e.g. while netCDF-C holds it open for writing: netCDF4, xarray's first engine, may)."""
    import h5py

    try:
        with h5py.File(obj, "r") as f:
            props = f.attrs.get("_NCProperties")
    except Exception:  # noqa: BLE001 - let the store say what is wrong
        return True
    if isinstance(props, bytes):
        props = props.decode("utf-8", "replace")
    writers = {part.split("=", 1)[0].strip() for part in props.split(",")} if isinstance(props, str) else set()
    return "netcdf" in writers


def _hdf5_engine(obj: Any, kind: Kind) -> str:
    """``"netcdf4"`` for a file or bytes netCDF-C wrote (when netCDF4 is installed), else
    ``"h5netcdf"`` (file objects and URLs: h5netcdf only)."""
    if kind not in ("path", "bytes"):
        return "h5netcdf"
    try:
        import netCDF4  # noqa: F401
    except ImportError:
        return "h5netcdf"
    target = io.BytesIO(obj) if kind == "bytes" else obj
    return "netcdf4" if _written_by_netcdf_c(target) else "h5netcdf"


def _engine_from_signature(obj: Any, kind: Kind, magic: bytes, name: str) -> str:
    if magic.startswith((b"CDF", b"gz:CDF")):
        if magic.startswith(b"gz:") and not str(obj).endswith(".gz"):
            raise SourceError(
                f"{name} is a gzipped NetCDF3 file; xarray's scipy engine (and tsexplore) "
                "open those only under a name ending in .gz"
            )
        return "scipy"
    if magic.startswith(HDF5_SIGNATURE):
        return _hdf5_engine(obj, kind)
    if magic.startswith(b"gz:"):
        raise UnknownFormatError(
            f"{name} is gzipped, but what is inside is not NetCDF3 (magic 'CDF'): "
            "xarray's scipy engine opens only gzipped NetCDF3 files"
        )
    raise UnknownFormatError(
        f"{name} is neither NetCDF3 (magic 'CDF') nor NetCDF4/HDF5 (magic '\\x89HDF'); "
        f"its first bytes are {magic!r}"
    )


def engine_for(path: str) -> str:
    """``"scipy"`` for NetCDF3 (plain or gzipped), ``"netcdf4"`` or ``"h5netcdf"`` for a
    NetCDF4/HDF5 file at ``path`` (the library that wrote it, see the module's docstring)."""
    return _engine_from_signature(path, "path", read_signature(path, "path"), path)


@dataclass
class NetCDFInput:
    """One NetCDF input as xarray's engines take it: ``obj`` (a normalized local path, a URL,
    a file object, bytes or an open data store), its ``kind``, the ``engine`` that reads it
    and that engine's keyword arguments."""

    obj: Any
    kind: Kind
    engine: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The input in words, for messages."""
        if self.kind in ("path", "url"):
            return str(self.obj)
        return f"<{type(self.obj).__name__}>"

    @property
    def reader(self) -> str | None:
        """What the data is read through when it is not a local path: the dataset's
        ``encoding["tsexplore_reader"]`` (None for a local path, read as xarray reads it)."""
        if self.kind == "path":
            return None
        what = {"bytes": "the bytes given", "file": "the file object given",
                "store": "the data store given", "url": "an fsspec file"}[self.kind]
        store = "the data store given" if self.engine == "store" else f"xarray's {self.engine} store over {what}"
        return f"{store}, one chunk region at a time"

    @property
    def by_range(self) -> bool:
        """Read chunk by chunk by byte range (see :mod:`.ranged`): a URL, a file object or
        the bytes of NetCDF3 (:mod:`.netcdf3`) or of HDF5 read by h5netcdf (bytes: by
        netCDF4 too), where a byte store can (:func:`.ranged.ranged_store`)."""
        from .ranged import ranged_store

        if self.kind not in ("url", "file", "bytes"):
            return False
        if self.engine not in ("scipy", "h5netcdf") and self.kind != "bytes":
            return False
        if self.engine == "scipy" and set(self.kwargs) - {"storage_options"}:
            return False  # scipy's own arguments (mmap, format...): its store, as xarray opens it
        return ranged_store(self) is not None


def netcdf_input(
    obj: Any, engine_kwargs: dict[str, Any] | None = None, storage_options: dict[str, Any] | None = None,
    via: str | None = None,
) -> NetCDFInput:
    """``obj`` as a :class:`NetCDFInput`, with the engine xarray would read it with (see the
    module's docstring), or ``via`` (``"netcdf4"``, ``"h5netcdf"``, ``"scipy"``) when given:
    the file's metadata is then read as that engine reads it, with its warnings and errors.
    ``storage_options`` is h5netcdf's (URLs)."""
    if via is not None and via not in ENGINE_KWARGS:
        raise ConfigError(f"via= names xarray's engine to read a NetCDF file with: one of {sorted(ENGINE_KWARGS)}, got {via!r}")
    kwargs = {k: v for k, v in (engine_kwargs or {}).items() if v is not None or k == "lock"}
    unknown = sorted(set(kwargs) - NETCDF_KWARGS)
    if unknown:
        raise ConfigError(
            f"{unknown} are not arguments of xarray's NetCDF engines; netcdf4 takes "
            f"{ENGINE_KWARGS['netcdf4']}, h5netcdf {ENGINE_KWARGS['h5netcdf']}, scipy {ENGINE_KWARGS['scipy']}"
        )
    if storage_options:
        kwargs["storage_options"] = storage_options
    store_engine = _data_store_engine(obj)
    if store_engine is not None:
        return NetCDFInput(obj, "store", store_engine, kwargs)
    if isinstance(obj, os.PathLike):
        obj = os.fspath(obj)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        kind: Kind = "bytes"
        obj = bytes(obj) if not isinstance(obj, bytes) else obj
    elif isinstance(obj, str) and is_url(obj):
        kind = "url"
    elif isinstance(obj, str):
        kind = "path"
        obj = os.path.abspath(os.path.expanduser(obj[len("file://"):] if obj.startswith("file://") else obj))
    elif is_file_object(obj):
        kind = "file"
    else:
        raise SourceError(f"a NetCDF file is a path, URL, file object or bytes; got {type(obj).__name__}")
    named = [via] if via is not None else [e for e in ENGINE_KWARGS if _only(e) & set(kwargs)]
    if len(named) > 1:
        raise ConfigError(
            f"{sorted(set(kwargs))} mix arguments of xarray's engines {named}; pass those of one"
        )
    if named:
        return NetCDFInput(obj, kind, named[0], kwargs)
    name = str(obj) if kind in ("path", "url") else f"<{type(obj).__name__}>"
    if kind == "path" and not os.path.exists(obj):
        raise SourceNotFoundError(f"No such file or directory: {obj!r}")
    magic = read_signature(obj, kind, kwargs.get("storage_options"))
    return NetCDFInput(obj, kind, _engine_from_signature(obj, kind, magic, name), kwargs)


def _h5netcdf_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """h5netcdf's store arguments as xarray's engine passes them, and whether to warn
    about phony dimensions (xarray's engine warns when ``phony_dims`` is not given)."""
    out = dict(kwargs)
    try:
        from xarray.backends.h5netcdf_ import _check_phony_dims

        warn, out["phony_dims"] = _check_phony_dims(out.get("phony_dims"))
    except ImportError:  # pragma: no cover - xarray moved it: no warning, its default
        warn = False
        out.setdefault("phony_dims", "access")
    out.setdefault("decode_vlen_strings", True)
    return out, warn


def phony_dims_warning(store: Any, warn: bool) -> None:
    """xarray's h5netcdf warning about phony dimensions, when ``warn`` and the file has them."""
    if not warn:
        return
    try:
        from xarray.backends.h5netcdf_ import _emit_phony_dims_warning
    except ImportError:  # pragma: no cover
        return
    if getattr(store.ds._root, "_phony_dim_count", 0) > 0:
        _emit_phony_dims_warning()


def open_store(inp: NetCDFInput, group: str | None = None) -> tuple[Any, bool]:
    """xarray's own backend store for ``inp`` (its ``group``), opened as xarray's engine
    opens it, and whether xarray's phony-dimension warning is due (:func:`phony_dims_warning`
    after the variables are read)."""
    if inp.kind == "store":
        if group:
            raise SourceError(
                f"group={group!r}: {inp.name} is already open at its own group; open the file "
                "again at that group, or pass the store of that group"
            )
        return inp.obj, False
    kwargs = dict(inp.kwargs)
    if inp.engine == "scipy" and inp.by_range:
        from . import netcdf3

        if group is not None:
            raise ValueError("cannot save to a group with the scipy.io.netcdf backend")  # xarray's words
        try:
            return netcdf3.open_store(_ranged_stream(inp)), False
        except ValueError as exc:
            if inp.kind != "url" or "range requests" not in str(exc):
                raise
            # a server that ignores Range (Python's http.server): the header from the whole
            # file, once; the byte store cuts each chunk's ranges from whole answers
            return netcdf3.open_store(io.BytesIO(_whole(inp))), False
    if inp.engine == "scipy":
        from xarray.backends.scipy_ import ScipyDataStore, _normalize_filename_or_obj

        mode = kwargs.pop("mode", "r")
        return ScipyDataStore(_normalize_filename_or_obj(_stream(inp)), mode=mode, group=group, **kwargs), False
    if inp.engine == "netcdf4":
        from xarray.backends.netCDF4_ import NetCDF4DataStore

        return NetCDF4DataStore.open(inp.obj, group=group, **kwargs), False
    from xarray.backends.h5netcdf_ import H5NetCDFStore, _normalize_filename_or_obj

    kwargs, warn = _h5netcdf_kwargs(kwargs)
    return H5NetCDFStore.open(_normalize_filename_or_obj(inp.obj), group=group, **kwargs), warn


def _ranged_stream(inp: NetCDFInput) -> Any:
    """A file object over the input that reads by range (a URL: an fsspec file reading a
    little ahead; bytes: a ``BytesIO``; a file object: itself)."""
    if inp.kind == "bytes":
        return io.BytesIO(inp.obj)
    if inp.kind == "file":
        return inp.obj
    from . import netcdf3

    return netcdf3.ranged_file(inp.obj, inp.kwargs.get("storage_options"))


def _whole(inp: NetCDFInput) -> bytes:
    """The whole file a URL names."""
    import fsspec

    with fsspec.open(inp.obj, "rb", block_size=0, **(inp.kwargs.get("storage_options") or {})) as f:
        return f.read()  # type: ignore[no-any-return]


def _stream(inp: NetCDFInput) -> Any:
    """What scipy reads: the path, bytes or file object; a URL as an fsspec file (scipy reads
    a file object's whole contents when it opens it, as xarray's scipy engine does)."""
    if inp.kind != "url":
        return inp.obj
    import fsspec

    return fsspec.open(inp.obj, "rb", **(inp.kwargs.get("storage_options") or {})).open()


def own_grid(grid: Any, dims: tuple[str, ...]) -> Any:
    """A ``grid`` for one variable: a dict naming the dims of several variables keeps the
    ones this variable has (a tuple or an int is for every variable as it is)."""
    if isinstance(grid, dict):
        return {k: v for k, v in grid.items() if k in dims}
    return grid


class NetCDFVariableSource(SyncChunkSource):
    """One variable of a NetCDF file, read one chunk region at a time through xarray's store
    (its lazy backend array and lock)."""

    def __init__(
        self,
        inp: NetCDFInput,
        name: str,
        variable: Any,
        chunks: Any = None,
        options: SourceOptions = DEFAULT_OPTIONS,
        store: Any = None,
        group: str | None = None,
        token: str = "",
    ) -> None:
        self.input = inp
        self.path = inp.obj if inp.kind in ("path", "url") else None
        self.name = name
        self.engine = inp.engine
        self.group = group
        self._var = variable  # xarray's raw store variable (lazily indexed backend array)
        self._store = store  # the xarray store it came from (closed by close())
        self.shape = tuple(int(s) for s in variable.shape)
        self._store_dtype = np.dtype(variable.dtype)
        self.dtype = native_dtype(self._store_dtype)  # NetCDF3 is big-endian
        self.dims = tuple(str(d) for d in variable.dims)
        native = variable.encoding.get("chunksizes")
        if chunks is None and native:
            chunks = tuple(native)
        self.chunks = normalize_chunks(own_grid(chunks, self.dims), self.shape, self.dims, 4 * 2**20,
                                       self.dtype.itemsize)
        self.attrs = dict(variable.attrs)
        self.encoding = dict(variable.encoding)
        self.fill_value = variable.attrs.get("_FillValue")
        self.options = options
        where = f"{group.strip('/')}/{name}" if group else name
        self.token = f"netcdf-{token}:{where}"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_var"] = state["_store"] = None
        return state

    def _variable(self) -> Any:
        if self._var is None:
            if self.input.kind == "store":
                self._store = self.input.obj
            else:
                self._store, _ = open_store(self.input, self.group)
            self._var = self._store.get_variables()[self.name]
        return self._var

    def close(self) -> None:
        """Close the file (it is opened again if the source reads again)."""
        store, self._store = self._store, None
        self._var = None
        if store is not None:
            store.close()

    @property
    def reader(self) -> str:
        """How this source reads, in words."""
        return f"{self.input.reader or f'xarray {self.engine} store'} (not by byte range)"

    def read_chunk_sync(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        region = self._variable()[self.chunk_slices(index)]
        data = np.array(region.values, dtype=self.dtype, copy=True)
        return data, data.nbytes


def _token(inp: NetCDFInput) -> str:
    """Equal tokens mean equal content: a local file's path and its stamp; anything else a
    new token per open (pickled copies keep theirs)."""
    if inp.kind == "path":
        st = os.stat(inp.obj)
        return f"{inp.obj}@{st.st_mtime_ns}-{st.st_size}"
    return f"{inp.kind}-{uuid.uuid4().hex[:16]}"


NetCDFGroup = tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]


def _group_from_store(
    inp: NetCDFInput, store: Any, chunks: Any, options: SourceOptions, group: str | None, token: str,
) -> NetCDFGroup:
    """(sources, coords, attrs, encoding) of one opened store. Coordinates (variables named
    after their dimension) and scalars are read eagerly, as ``(dims, values, attrs,
    encoding, dtype)`` of xarray's raw store variable; data variables become sources read
    by byte range where the input allows it (:func:`_ranged_sources`), else through the
    store."""
    variables, attrs = store.load()
    encoding = dict(store.get_encoding())
    coords = {}
    data = {}
    for name, var in variables.items():
        if var.dims == (name,) or var.ndim == 0:
            values = np.asarray(var.values)
            coords[name] = (var.dims, values, dict(var.attrs), dict(var.encoding), var.dtype)
        else:
            data[name] = var
    sources: dict[str, Any] = _ranged_sources(inp, store, data, chunks, options, group, token) if data else {}
    for name, var in data.items():
        if name not in sources:
            sources[name] = NetCDFVariableSource(inp, name, var, chunks, options, store, group, token)
    if inp.kind != "path":
        readers = sorted({src.reader for src in sources.values()})
        encoding["tsexplore_reader"] = "; ".join(readers) if readers else inp.reader
    return sources, coords, dict(attrs), encoding


def _ranged_sources(
    inp: NetCDFInput, store: Any, data: dict[str, Any], chunks: Any, options: SourceOptions,
    group: str | None, token: str,
) -> dict[str, Any]:
    """The data variables read by byte range (:mod:`.ranged`): each one whose HDF5
    dataset's layout is read by range and holds what xarray's variable holds. The chunk
    index of each is read here, once. A ``grid`` (``chunks``) sets the virtual grid of
    contiguous datasets."""
    if not inp.by_range:
        return {}
    from . import hdf5, netcdf3
    from .ranged import RangedSource, ranged_store

    found = ranged_store(inp, options.reader)
    if found is None:
        return {}
    byte_store, key = found
    out: dict[str, Any] = {}

    def grid_of(var: Any) -> Any:
        return None if chunks is None else normalize_chunks(
            own_grid(chunks, tuple(var.dims)), tuple(var.shape), tuple(var.dims), 4 * 2**20, np.dtype(var.dtype).itemsize)

    from xarray.backends.common import _encode_variable_name  # the name in the file

    if inp.engine == "scipy":
        for name, var in data.items():
            layout = netcdf3.layout_of(store.ds, _encode_variable_name(name), grid_of(var))
            if RangedSource.fits(var, layout):
                out[name] = RangedSource(name, var, layout, byte_store, key, options, token, store)
        return out
    h5file, close = _h5py_file(inp, store)
    try:
        prefix = "/" + (group or "").strip("/")
        for name, var in data.items():
            dataset = h5file.get(f"{prefix.rstrip('/')}/{_encode_variable_name(name)}")
            if dataset is None or not hasattr(dataset, "dtype"):
                continue
            layout = hdf5.read_layout(dataset, None if dataset.chunks else grid_of(var))
            if RangedSource.fits(var, layout):
                out[name] = RangedSource(name, var, layout, byte_store, key, options, token, store)
    finally:
        if close:
            h5file.close()
    return out


def _h5py_file(inp: NetCDFInput, store: Any) -> tuple[Any, bool]:
    """The ``h5py.File`` of an input (the one inside xarray's h5netcdf store, or one opened
    over the bytes), and whether to close it."""
    from . import hdf5

    root = getattr(getattr(store, "ds", None), "_root", None)
    h5file = getattr(root, "_h5file", None)
    if h5file is not None:
        hdf5.load_plugins()
        return h5file, False
    return hdf5.open_file(io.BytesIO(inp.obj)), True


@contextlib.contextmanager
def _named_errors(inp: NetCDFInput, group: str | None) -> Any:
    """xarray's own errors pass as they are (the same types and messages as its engines);
    anything else is a SourceError naming the input."""
    try:
        yield
    except (SourceError, ConfigError, OSError, ValueError, TypeError, KeyError, IndexError):
        raise
    except Exception as exc:  # noqa: BLE001
        where = f" (group {group!r})" if group else ""
        raise SourceError(f"cannot open {inp.name}{where} with xarray's {inp.engine} engine: {exc}") from exc


def open_netcdf(
    inp: NetCDFInput | str | os.PathLike[str],
    chunks: Any = None,
    options: SourceOptions = DEFAULT_OPTIONS,
    group: str | None = None,
    auto_complex: bool | None = None,
) -> NetCDFGroup:
    """Sources for the data variables of a NetCDF file (of its ``group``): (sources, coords,
    attrs, encoding). ``inp``: a :class:`NetCDFInput` (or a path)."""
    if not isinstance(inp, NetCDFInput):
        inp = netcdf_input(inp, {"auto_complex": auto_complex} if auto_complex is not None else None)
    with _named_errors(inp, group):
        store, warn = open_store(inp, group)
        try:
            out = _group_from_store(inp, store, chunks, options, group, _token(inp))
        except BaseException:
            if inp.kind != "store":
                store.close()
            raise
    phony_dims_warning(store, warn)
    return out


def open_netcdf_tree(
    inp: NetCDFInput, chunks: Any = None, options: SourceOptions = DEFAULT_OPTIONS, group: str | None = None,
) -> dict[str, NetCDFGroup]:
    """Every group of a NetCDF file at ``group`` and below, keyed by its path from the root
    (``"/"``, ``"/a"``...), walked and opened as xarray's netCDF engines do for
    ``open_groups``: the file once, one store per group over it."""
    from xarray.backends.common import _iter_nc_groups
    from xarray.core.treenode import NodePath

    parent = str(NodePath("/") / NodePath(group or "/"))
    with _named_errors(inp, group):
        if inp.engine == "scipy":
            if group not in (None, "", "/"):
                raise SourceError(f"group={group!r}: {inp.name} is NetCDF3, which has no groups")
            store, _ = open_store(inp)
            return {"/": _group_from_store(inp, store, chunks, options, None, _token(inp))}
        store, warn = open_store(inp, group)
        token = _token(inp)
        out: dict[str, NetCDFGroup] = {}
        for path in _iter_nc_groups(store.ds, parent=parent):
            sub = type(store)(store._manager, group=path)
            out[path] = _group_from_store(inp, sub, chunks, options, path, token)
    phony_dims_warning(store, warn)
    return out
