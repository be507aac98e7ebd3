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
from .backend import ENGINE_DASK, EngineStore, numpy_layers
from .engine import get_engine
from .errors import ConfigError, TsExploreDeprecationWarning
from .resolve import sources_of  # noqa: F401 - kept importable from here
from .sources import SourceOptions, open_group

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

    ``source``: a Zarr store (path or fsspec URL), a NetCDF/HDF5 file (also gzipped NetCDF3),
    a ``.npy`` file, a folder of images, a NumPy/dask array or an xarray object. Nothing but
    metadata (and index coordinates) is read here; values are read chunk by chunk when
    asked for. The result equals what xarray's own backend gives for the same store
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
    ``drop_variables``) mean what they mean for :func:`xarray.open_dataset`.
    """
    unknown = sorted(set(decoders) - set(DECODER_OPTIONS))
    if unknown:
        raise ConfigError(
            f"open_dataset got unknown keyword(s) {unknown}; xarray's decoder options are "
            f"decode_cf, {', '.join(DECODER_OPTIONS)}"
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
            stacklevel=2,
        )
        config.set(cache_bytes=int(cache_bytes))
    ds = xr.open_dataset(
        source,
        engine=TsExploreBackendEntrypoint,
        chunks=chunks,
        cache=False,  # the engine's cache holds chunks (within its budget), not each variable
        chunked_array_type=ENGINE_DASK if chunks is not None else None,  # type: ignore[arg-type]
        decode_cf=decode_cf,
        missing=missing,
        prefetch=prefetch,
        storage_options=storage_options,
        grid=grid,
        size=size,
        **decoders,
    )
    get_engine()
    return ds


class TsExploreBackendEntrypoint(BackendEntrypoint):
    """``xr.open_dataset(path, engine="tsexplore", ...)``: the same as ``tse.open_dataset``.

    Takes every decoder option of xarray's own backends, and ``missing``, ``prefetch``,
    ``storage_options``, ``grid`` and ``size`` as :func:`open_dataset` does.
    """

    description = "Stream Zarr, NetCDF/HDF5 and .npy through the tsexplore engine"
    url = "https://github.com/tsexplore/tsexplore"
    open_dataset_parameters = (
        "filename_or_obj",
        *DECODER_OPTIONS,
        "missing",
        "prefetch",
        "storage_options",
        "grid",
        "size",
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
        missing: str = "fill",
        prefetch: Any = "auto",
        storage_options: dict[str, Any] | None = None,
        grid: Any = None,
        size: Any = None,
    ) -> xr.Dataset:
        options = SourceOptions(missing, prefetch)
        group = open_group(
            filename_or_obj, storage_options=storage_options, options=options, grid=grid, size=size
        )
        store = EngineStore(group, drop_variables)
        ds = StoreBackendEntrypoint().open_dataset(
            store,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
        )
        for variable in ds.variables.values():
            numpy_layers(variable)
        extra = [name for name in group.coord_names if name in ds.data_vars]
        return ds.set_coords(extra) if extra else ds

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        return os.fspath(filename_or_obj).rstrip("/").endswith((".zarr", ".npy"))
