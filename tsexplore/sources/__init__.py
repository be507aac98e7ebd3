"""Sources: one :class:`ChunkSource` per array, behind one protocol.

:func:`open_group` turns whatever the user passed to ``open_dataset`` into data-variable
sources plus eager coordinates and attributes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UnsupportedSourceError
from .base import (
    DEFAULT_OPTIONS,
    ChunkIndex,
    ChunkSource,
    SourceGroup,
    SourceOptions,
    SyncChunkSource,
    normalize_chunks,
)
from .memory import ArraySource
from .npy import MemmapSource, open_npy
from .synthetic import SyntheticSource

__all__ = [
    "ArraySource",
    "ChunkIndex",
    "ChunkSource",
    "MemmapSource",
    "SourceGroup",
    "SourceOptions",
    "SyncChunkSource",
    "SyntheticSource",
    "normalize_chunks",
    "open_group",
    "open_npy",
]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff")
NETCDF_SUFFIXES = (".nc", ".nc4", ".h5", ".hdf5", ".cdf", ".netcdf", ".gz")


def _is_zarr_path(path: str) -> bool:
    if path.rstrip("/").endswith(".zarr") or "://" in path:
        return True
    return os.path.isdir(path) and any(
        os.path.exists(os.path.join(path, m)) for m in ("zarr.json", ".zgroup", ".zarray")
    )


def _is_image_folder(obj: Any) -> bool:
    """A folder with images in it, or in class sub-folders one level down."""
    if not isinstance(obj, (str, Path)) or not os.path.isdir(obj):
        return False
    for entry in os.scandir(obj):
        if entry.is_file() and entry.name.lower().endswith(IMAGE_SUFFIXES):
            return True
    for entry in os.scandir(obj):
        if entry.is_dir() and any(
            n.lower().endswith(IMAGE_SUFFIXES) for n in os.listdir(entry.path)
        ):
            return True
    return False


def open_group(
    obj: Any,
    *,
    storage_options: dict[str, Any] | None = None,
    options: SourceOptions = DEFAULT_OPTIONS,
    grid: Any = None,
    size: Any = None,
) -> SourceGroup:
    """Sources for ``obj``: a path/URL, a NumPy/dask array, an xarray object or a source.

    Every source is built with ``options`` (absent chunks, prefetch policy); a source passed
    in is copied with them (:meth:`ChunkSource.with_options`). ``size`` (an int or
    ``(height, width)``) resizes the images of an image folder.
    """
    if size is not None and not _is_image_folder(obj):
        from ..errors import ConfigError

        raise ConfigError(f"size= resizes the images of an image folder; {obj!r} is not one")
    if isinstance(obj, ChunkSource):
        src = obj.with_options(options)
        return SourceGroup({getattr(src, "name", None) or "data": src}, attrs=dict(src.attrs))
    if isinstance(obj, SourceGroup):
        variables = {k: v.with_options(options) for k, v in obj.variables.items()}
        return SourceGroup(
            variables, dict(obj.coords), dict(obj.attrs), dict(obj.encoding), set(obj.coord_names),
            obj.multiscale, obj.level,
        )
    if isinstance(obj, (str, Path)):
        path = os.fspath(obj)
        lower = path.lower().rstrip("/")
        if lower.endswith(".npy"):
            src = open_npy(path, grid, options=options)
            return SourceGroup({src.name: src})  # type: ignore[attr-defined]
        if lower.endswith(NETCDF_SUFFIXES) and not os.path.isdir(path):
            from .netcdf import open_netcdf

            sources, coords, attrs, encoding = open_netcdf(path, grid, options)
            return SourceGroup(sources, coords, attrs, encoding)
        if _is_zarr_path(path):
            from .multiscale import open_level, read_multiscale
            from .zarr_source import open_zarr_group

            spec = read_multiscale(path, storage_options)
            if spec is not None:  # a pyramid: level 0; the others stay reachable (ds.tse.levels)
                sources, coords, attrs = open_level(spec, 0, storage_options, options)
                return SourceGroup(sources, coords, attrs, multiscale=spec)

            sources, coords, attrs = open_zarr_group(path, storage_options, options)
            return SourceGroup(sources, coords, attrs)  # type: ignore[arg-type]
        if os.path.isdir(path):
            try:
                from .images import open_image_folder
            except ImportError:  # pragma: no cover - the images module is optional
                open_image_folder = None  # type: ignore[assignment]
            if open_image_folder is not None and _is_image_folder(path):
                return open_image_folder(path, size=size, options=options)  # type: ignore[no-any-return]
        if not os.path.exists(path):
            raise UnsupportedSourceError(f"{path!r} does not exist")
        raise UnsupportedSourceError(
            f"cannot tell what {path!r} is. tsexplore opens Zarr stores (a folder with "
            "zarr.json/.zarray/.zgroup, or *.zarr, or a URL), NetCDF/HDF5 files (*.nc, *.h5, "
            "gzipped NetCDF3 *.nc.gz), .npy files and folders of images"
        )
    group = _open_xarray(obj, grid, options)
    if group is not None:
        return group
    if hasattr(obj, "shape") and hasattr(obj, "dtype") and hasattr(obj, "__getitem__"):
        return SourceGroup({"data": ArraySource(obj, None, grid, None, "data", options=options)})
    raise UnsupportedSourceError(
        f"tsexplore cannot open an object of type {type(obj).__name__}; pass a path or URL, "
        "a NumPy/dask array, an xarray Dataset/DataArray, or a ChunkSource"
    )


def _open_xarray(obj: Any, grid: Any, options: SourceOptions) -> SourceGroup | None:
    """Sources for an xarray Dataset or DataArray (None for anything else)."""
    try:
        import xarray as xr
    except ImportError:  # pragma: no cover
        return None
    if isinstance(obj, xr.DataArray):
        obj = obj.to_dataset(name=obj.name if obj.name is not None else "data")
    if not isinstance(obj, xr.Dataset):
        return None
    found: dict[str, ChunkSource] = {}
    coords = {}
    for name, var in obj.variables.items():
        if name in obj.coords:
            coords[str(name)] = (tuple(map(str, var.dims)), np.asarray(var.values), dict(var.attrs))
        else:
            found[str(name)] = ArraySource(
                var.data, tuple(map(str, var.dims)), grid, dict(var.attrs), str(name),
                options=options,
            )
    return SourceGroup(found, coords, dict(obj.attrs), coord_names=set(coords))


async def close_async_resources() -> None:
    """Close network sessions that live on the calling loop."""
    from .zarr_source import close_async_fs

    await close_async_fs()
