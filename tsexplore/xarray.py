"""The xarray face: ``open_dataset`` and the ``engine="tsexplore"`` backend.

Both open paths go through xarray's own ``open_dataset`` and ``StoreBackendEntrypoint`` over
an :class:`~tsexplore.backend.EngineStore`, so decoding and chunking are xarray's own. The
``.tse`` accessor lives in :mod:`tsexplore.accessor` (it calls the layers above this one).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendEntrypoint
from xarray.backends.store import StoreBackendEntrypoint

from . import config
from .backend import EngineStore, engine_dask, numpy_layers
from .engine import get_engine
from .errors import ConfigError, TsExploreDeprecationWarning
from .resolve import sources_of  # noqa: F401 - kept importable from here
from .sources import ZARR_KWARGS, Hierarchy, SourceGroup, SourceOptions, open_group, open_tree
from .sources.netcdf import NETCDF_KWARGS

#: xarray's decoder options, taken by ``tse.open_dataset`` and the ``tsexplore`` engine alike
DECODER_OPTIONS = (
    "mask_and_scale",
    "decode_times",
    "decode_timedelta",
    "use_cftime",
    "concat_characters",
    "decode_coords",
    "drop_variables",
)
#: xarray's options that pick a group and say how a store's metadata is read
HIERARCHY_OPTIONS = ("group", "consolidated", "zarr_format", "auto_complex", "via")
#: xarray's engines' own arguments (netcdf4, h5netcdf, scipy, zarr), passed to the store
#: that reads the input as that engine would open it
ENGINE_OPTIONS = tuple(sorted((NETCDF_KWARGS | ZARR_KWARGS) - {"storage_options", "auto_complex"}))


def _check_cache_bytes(cache_bytes: Any) -> None:
    if cache_bytes is not None and (not isinstance(cache_bytes, (int, np.integer)) or cache_bytes < 0):
        raise ConfigError(f"cache_bytes must be a non-negative int of bytes, got {cache_bytes!r}")


def _check_chunks(chunks: Any) -> Any:
    if chunks == "native":
        return {}
    if chunks is None or chunks == "auto" or isinstance(chunks, (dict, int)) and not isinstance(chunks, bool):
        return chunks
    raise ConfigError(
        f"chunks must be a dict (e.g. {{}} for the native chunks, or {{'time': 32}}), an int, "
        f"'auto' or None, got {chunks!r}"
    )


def open_dataset(
    source: Any,
    cache_bytes: int | None = None,
    prefetch: Any = "auto",
    missing: str = "fill",
    chunks: Any = None,
    storage_options: dict[str, Any] | None = None,
    *,
    grid: Any = None,
    size: Any = None,
    decode_cf: bool | None = None,
    **decoders: Any,
) -> xr.Dataset:
    """Open ``source`` as a lazy, engine-backed :class:`xarray.Dataset`.

    ``source``: a Zarr store (path or fsspec URL, a zarr ``Store``, a ``dict`` holding one),
    a NetCDF/HDF5 file (also gzipped NetCDF3; a path, a URL such as ``https://`` or
    ``s3://`` -- read chunk by chunk by byte range -- a file object, or its ``bytes``), an
    already-open xarray data store, a ``.npy`` file, a folder of images, a NumPy/dask array
    or an xarray object: every input xarray's engines take. Nothing but metadata (and index
    coordinates) is read here; values are read chunk by chunk when asked for. The result equals what xarray's own backend gives for the same store
    (``xr.testing.assert_identical``): it goes through xarray's own ``open_dataset`` with the
    ``tsexplore`` engine, so CF decoding and chunking are xarray's.

    ``cache_bytes`` is deprecated: it sets the one cache budget every dataset of the process
    shares, not this dataset's own, as ``tse.config.set(cache_bytes=...)`` does (use that,
    or ``TSEXPLORE_CACHE_BYTES``); it warns and will be removed. ``prefetch`` is ``"auto"`` (learn
    from the access pattern), ``"momentum"``, ``"neighbourhood"`` or ``"off"``;
    ``missing="fill"`` (the default) reads a chunk the store does not have as the fill
    value, as zarr and xarray do (counted as ``missing_filled`` in the stats);
    ``missing="raise"`` raises :class:`~tsexplore.errors.MissingChunkError` instead.
    ``chunks`` (``{}`` for the native grid, a dict of sizes, an int or ``"auto"``) gives
    dask arrays whose tasks read through the engine.
    ``grid`` sets the virtual chunk grid of sources that have none (``.npy``, NetCDF3, NumPy).
    ``size`` (an int or ``(height, width)``) resizes every image of an image folder.
    ``decode_cf`` and xarray's decoder options (``mask_and_scale``, ``decode_times``,
    ``decode_timedelta``, ``use_cftime``, ``concat_characters``, ``decode_coords``,
    ``drop_variables``) mean what they mean for :func:`xarray.open_dataset`; ``group``
    (Zarr, NetCDF/HDF5), ``consolidated`` and ``zarr_format`` (Zarr) and ``auto_complex``
    (NetCDF4) mean what they mean for xarray's zarr and netCDF engines, and so do each
    engine's own arguments (h5netcdf's ``phony_dims``, ``open_kwargs``...; scipy's ``mmap``;
    ``storage_options`` also for NetCDF URLs). ``via`` names the xarray engine whose store
    reads the metadata (``"netcdf4"``, ``"h5netcdf"``, ``"scipy"``, ``"zarr"``; default: the
    one xarray would pick, for HDF5 the library that wrote the file).
    """
    return _open(xr.open_dataset, source, cache_bytes, prefetch, missing, chunks, storage_options,
                 grid=grid, size=size, decode_cf=decode_cf, **decoders)


def open_datatree(
    source: Any,
    cache_bytes: int | None = None,
    prefetch: Any = "auto",
    missing: str = "fill",
    chunks: Any = None,
    storage_options: dict[str, Any] | None = None,
    *,
    grid: Any = None,
    decode_cf: bool | None = None,
    **decoders: Any,
) -> xr.DataTree:
    """Open every group of a Zarr store or NetCDF/HDF5 file as a lazy :class:`xarray.DataTree`
    whose every node is engine-backed (one engine, one cache), as
    ``xr.open_datatree(source, engine="tsexplore")`` does.

    The arguments are :func:`open_dataset`'s; ``group=`` roots the tree at that group,
    ``consolidated=`` / ``zarr_format=`` read a Zarr store's metadata as xarray's zarr engine
    does (consolidated metadata, when the store has it, is one read for the whole tree). An
    OME-NGFF image or a ``tse.pyramid`` output opens with its levels as child nodes.
    A node's variables stream like any others: ``tse.explore(tree["1"].ds)``,
    ``tse.reduce(tree["a"]["temp"], "mean")``.
    """
    return _open(xr.open_datatree, source, cache_bytes, prefetch, missing, chunks, storage_options,
                 grid=grid, decode_cf=decode_cf, **decoders)


def _open(opener: Any, source: Any, cache_bytes: Any, prefetch: Any, missing: str, chunks: Any,
          storage_options: Any, *, decode_cf: bool | None, **kwargs: Any) -> Any:
    """``opener`` (xarray's ``open_dataset`` or ``open_datatree``) with the tsexplore engine,
    the arguments checked first."""
    known = {*DECODER_OPTIONS, *HIERARCHY_OPTIONS, *ENGINE_OPTIONS, "grid", "size"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ConfigError(
            f"{opener.__name__} got unknown keyword(s) {unknown}; xarray's decoder options are "
            f"decode_cf, {', '.join(DECODER_OPTIONS)}; its group options "
            f"{', '.join(HIERARCHY_OPTIONS)}; its engines' own {', '.join(ENGINE_OPTIONS)}"
        )
    SourceOptions(missing, prefetch)  # check them before anything is opened
    _check_cache_bytes(cache_bytes)
    chunks = _check_chunks(chunks)
    if cache_bytes is not None:
        warnings.warn(
            f"open_dataset(cache_bytes={cache_bytes}) sets the one cache budget that every "
            "dataset of this process shares (not this dataset's own); set it with "
            f"tse.config.set(cache_bytes={cache_bytes}) instead: the argument will be removed",
            TsExploreDeprecationWarning,
            stacklevel=3,
        )
        config.set(cache_bytes=int(cache_bytes))
    out = opener(
        source,
        engine=TsExploreBackendEntrypoint,
        chunks=chunks,
        cache=False,  # the engine's cache holds chunks (within its budget), not each variable
        chunked_array_type=engine_dask() if chunks is not None else None,  # type: ignore[arg-type]
        decode_cf=decode_cf,
        missing=missing,
        prefetch=prefetch,
        storage_options=storage_options,
        **kwargs,
    )
    get_engine()
    return out


class TsExploreBackendEntrypoint(BackendEntrypoint):
    """``xr.open_dataset(path, engine="tsexplore", ...)``: the same as ``tse.open_dataset``;
    ``xr.open_datatree`` / ``xr.open_groups`` with ``engine="tsexplore"``: one engine-backed
    Dataset per group.

    Takes every input xarray's engines take (see :func:`tsexplore.sources.open_group`),
    every decoder option of xarray's own backends; ``group``, ``consolidated`` and
    ``zarr_format`` as xarray's zarr engine takes them (``group`` also for NetCDF/HDF5),
    each engine's own arguments as that engine takes them (netcdf4's ``auto_complex``,
    ``diskless``...; h5netcdf's ``phony_dims``, ``open_kwargs``, ``storage_options``...;
    scipy's ``mmap``...: the file is opened with the engine they belong to); and
    ``missing``, ``prefetch``, ``storage_options``, ``grid`` and ``size`` as
    :func:`open_dataset` does. ``use_zarr_fill_value_as_mask`` is accepted and, as by
    xarray's zarr engine's ``open_dataset``, not used: v2 arrays mask their fill value, v3
    arrays do not.
    """

    description = "Stream Zarr, NetCDF/HDF5 and .npy through the tsexplore engine"
    url = "https://github.com/tsexplore/tsexplore"
    supports_groups = True
    open_dataset_parameters = (
        "filename_or_obj",
        *DECODER_OPTIONS,
        *HIERARCHY_OPTIONS,
        "missing",
        "prefetch",
        "storage_options",
        "grid",
        "size",
        *ENGINE_OPTIONS,
    )

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: Any = True,
        decode_times: Any = True,
        decode_timedelta: Any = None,
        use_cftime: Any = None,
        concat_characters: Any = True,
        decode_coords: Any = True,
        drop_variables: Any = None,
        group: str | None = None,
        consolidated: bool | None = None,
        zarr_format: int | None = None,
        auto_complex: bool | None = None,
        via: str | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        missing: str = "fill",
        prefetch: Any = "auto",
        storage_options: dict[str, Any] | None = None,
        grid: Any = None,
        size: Any = None,
        **engine_kwargs: Any,
    ) -> xr.Dataset:
        _check_engine_kwargs("open_dataset", engine_kwargs)
        options = SourceOptions(missing, prefetch, config.get().remote_reader)
        hierarchy = Hierarchy(group, consolidated, zarr_format, auto_complex, via)
        sources = open_group(
            filename_or_obj, storage_options=storage_options, options=options, grid=grid,
            size=size, hierarchy=hierarchy, engine_kwargs=engine_kwargs,
        )
        return _dataset(sources, drop_variables, dict(
            mask_and_scale=mask_and_scale, decode_times=decode_times,
            concat_characters=concat_characters, decode_coords=decode_coords,
            use_cftime=use_cftime, decode_timedelta=decode_timedelta,
        ))

    def open_groups_as_dict(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: Any = True,
        decode_times: Any = True,
        decode_timedelta: Any = None,
        use_cftime: Any = None,
        concat_characters: Any = True,
        decode_coords: Any = True,
        drop_variables: Any = None,
        group: str | None = None,
        consolidated: bool | None = None,
        zarr_format: int | None = None,
        auto_complex: bool | None = None,
        via: str | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        missing: str = "fill",
        prefetch: Any = "auto",
        storage_options: dict[str, Any] | None = None,
        grid: Any = None,
        **engine_kwargs: Any,
    ) -> dict[str, xr.Dataset]:
        """One engine-backed Dataset per group at ``group`` and below, keyed by path as
        xarray's own engines key them; every node reads through the one engine."""
        _check_engine_kwargs("open_groups", engine_kwargs)
        options = SourceOptions(missing, prefetch, config.get().remote_reader)
        hierarchy = Hierarchy(group, consolidated, zarr_format, auto_complex, via)
        tree = open_tree(filename_or_obj, storage_options=storage_options, options=options,
                         grid=grid, hierarchy=hierarchy, engine_kwargs=engine_kwargs)
        decoders = dict(
            mask_and_scale=mask_and_scale, decode_times=decode_times,
            concat_characters=concat_characters, decode_coords=decode_coords,
            use_cftime=use_cftime, decode_timedelta=decode_timedelta,
        )
        return {path: _dataset(sources, drop_variables, decoders) for path, sources in tree.items()}

    def open_datatree(  # type: ignore[override]
        self, filename_or_obj: Any, **kwargs: Any
    ) -> xr.DataTree:
        """The groups of :meth:`open_groups_as_dict` as a :class:`xarray.DataTree`."""
        from xarray.backends.common import datatree_from_dict_with_io_cleanup

        return datatree_from_dict_with_io_cleanup(self.open_groups_as_dict(filename_or_obj, **kwargs))

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        return os.fspath(filename_or_obj).rstrip("/").endswith((".zarr", ".npy"))


def _check_engine_kwargs(what: str, kwargs: dict[str, Any]) -> None:
    """Arguments no xarray engine takes fail as they fail there (``TypeError``)."""
    unknown = sorted(set(kwargs) - set(ENGINE_OPTIONS))
    if unknown:
        raise TypeError(
            f"{what}() got an unexpected keyword argument {unknown[0]!r}: the tsexplore engine "
            f"takes xarray's decoder options, its engines' own arguments ({', '.join(ENGINE_OPTIONS)}) "
            "and missing, prefetch, storage_options, grid, size"
        )


def _dask_type_without_importing_dask_array() -> None:
    """xarray asks, when it wraps an indexed variable, whether the data is a dask array, and
    imports ``dask.array`` to know (about 0.4 s, paid by the first frame a viewer shows).
    No object can be a dask array before ``dask.array`` is imported: until then xarray's
    answer comes from ``sys.modules`` (xarray caches one entry per duck-array module; this
    puts its own there first)."""
    import sys

    try:
        from xarray.namedarray import pycompat
    except ImportError:  # pragma: no cover - xarray moved it: it imports dask.array then
        return
    cache = getattr(pycompat, "_cached_duck_array_modules", None)
    if not isinstance(cache, dict) or "dask" in cache or "dask.array" in sys.modules:
        return
    try:
        import dask
    except ImportError:
        return

    class LazyDask(pycompat.DuckArrayModule):  # type: ignore[misc]
        def __init__(self) -> None:
            self.module, self.available = dask, True
            self.version = pycompat.Version(dask.__version__)

        @property
        def type(self) -> tuple[type, ...]:
            found = sys.modules.get("dask.array")
            return () if found is None else (found.Array,)

        @type.setter
        def type(self, value: Any) -> None:
            pass

    cache["dask"] = LazyDask()


def _dataset(sources: SourceGroup, drop_variables: Any, decoders: dict[str, Any]) -> xr.Dataset:
    """The Dataset xarray's ``StoreBackendEntrypoint`` decodes from ``sources``."""
    _dask_type_without_importing_dask_array()
    store = EngineStore(sources, drop_variables)
    ds = StoreBackendEntrypoint().open_dataset(store, drop_variables=drop_variables, **decoders)
    for variable in ds.variables.values():
        numpy_layers(variable)
    extra = [name for name in sources.coord_names if name in ds.data_vars]
    return ds.set_coords(extra) if extra else ds
