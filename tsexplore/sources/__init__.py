"""Sources: one :class:`ChunkSource` per array, behind one protocol.

:func:`open_group` turns whatever the user passed to ``open_dataset`` into data-variable
sources plus eager coordinates and attributes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, SourceError, UnsupportedSourceError
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
    "Hierarchy",
    "MemmapSource",
    "SourceGroup",
    "SourceOptions",
    "SyncChunkSource",
    "SyntheticSource",
    "normalize_chunks",
    "open_group",
    "open_tree",
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
        if entry.is_dir() and any(n.lower().endswith(IMAGE_SUFFIXES) for n in os.listdir(entry.path)):
            return True
    return False


def _is_netcdf_path(obj: Any) -> bool:
    """A NetCDF/HDF5 file, by its name (a folder never is one)."""
    return isinstance(obj, (str, Path)) and os.fspath(obj).lower().rstrip("/").endswith(NETCDF_SUFFIXES) \
        and not os.path.isdir(obj)


@dataclass(frozen=True)
class Hierarchy:
    """Which group of a store or file to open, and how its metadata is read: xarray's
    ``group=`` (a path such as ``"a/b"``; None or ``"/"`` is the root), ``consolidated=``
    and ``zarr_format=`` (Zarr, as xarray's zarr engine reads them) and ``auto_complex=``
    (NetCDF4, as xarray's netcdf4 engine)."""

    group: str | None = None
    consolidated: bool | None = None
    zarr_format: int | None = None
    auto_complex: bool | None = None

    def __post_init__(self) -> None:
        if self.group is not None and not isinstance(self.group, str):
            raise ConfigError(f"group= is a path like 'a/b' (str), got {self.group!r}")
        if self.consolidated not in (None, True, False):
            raise ConfigError(f"consolidated= is True, False or None, got {self.consolidated!r}")
        if self.zarr_format not in (None, 2, 3):
            raise ConfigError(f"zarr_format= is 2, 3 or None, got {self.zarr_format!r}")

    @property
    def path(self) -> str:
        """The group's path below the root, without slashes at the ends (``""``: the root)."""
        return (self.group or "").strip("/")

    def zarr_kwargs(self) -> dict[str, Any]:
        return {"group": self.path or None, "consolidated": self.consolidated,
                "zarr_format": self.zarr_format}

    def check_zarr(self, obj: Any) -> None:
        if self.auto_complex is not None:
            raise ConfigError(
                f"auto_complex= is an option of xarray's netcdf4 engine (NetCDF4 files); "
                f"{obj!r} is Zarr, whose complex arrays read as complex without it"
            )

    def check_netcdf(self, path: str) -> None:
        if self.consolidated is not None or self.zarr_format is not None:
            raise ConfigError(
                f"consolidated= and zarr_format= are options of Zarr stores; {path!r} is a "
                "NetCDF/HDF5 file"
            )

    def check_plain(self, obj: Any) -> None:
        """Sources without groups take none of these options."""
        given = {k: v for k, v in vars(self).items() if v is not None and not (k == "group" and not self.path)}
        if given:
            what = obj if isinstance(obj, (str, Path)) else type(obj).__name__
            raise ConfigError(
                f"{sorted(given)} select a group or read the metadata of a Zarr store or "
                f"NetCDF/HDF5 file; {what!r} has no groups"
            )


ROOT = Hierarchy()


def open_group(
    obj: Any,
    *,
    storage_options: dict[str, Any] | None = None,
    options: SourceOptions = DEFAULT_OPTIONS,
    grid: Any = None,
    size: Any = None,
    hierarchy: Hierarchy = ROOT,
) -> SourceGroup:
    """Sources for ``obj``: a path/URL, a zarr ``Store``/``Group``/``Array``, a NumPy/dask
    array, an xarray object or a source.

    Every source is built with ``options`` (absent chunks, prefetch policy); a source passed
    in is copied with them (:meth:`ChunkSource.with_options`). ``size`` (an int or
    ``(height, width)``) resizes the images of an image folder. ``hierarchy`` says which
    group of a Zarr store or NetCDF/HDF5 file, and how its metadata is read
    (:class:`Hierarchy`: xarray's ``group=``, ``consolidated=``, ``zarr_format=``,
    ``auto_complex=``).
    """
    if size is not None and not _is_image_folder(obj):
        raise ConfigError(f"size= resizes the images of an image folder; {obj!r} is not one")
    if not _has_groups(obj):
        hierarchy.check_plain(obj)
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
        return _open_path(os.fspath(obj), storage_options, options, grid, size, hierarchy)
    if _is_zarr_object(obj):
        from .zarr_source import open_node, open_zarr_group

        hierarchy.check_zarr(obj)
        opened = open_node(obj, storage_options, reader=options.reader, **hierarchy.zarr_kwargs())
        sources, coords, attrs = open_zarr_group(obj, storage_options, options, opened=opened)
        return SourceGroup(sources, coords, attrs)  # type: ignore[arg-type]
    return _open_in_memory(obj, options, grid)


def _has_groups(obj: Any) -> bool:
    """Zarr stores, groups and NetCDF/HDF5 files have groups; everything else does not."""
    if _is_zarr_object(obj) or _is_netcdf_path(obj):
        return True
    if isinstance(obj, (str, Path)):
        path = os.fspath(obj)
        return not path.lower().rstrip("/").endswith(".npy") and _is_zarr_path(path)
    return False


def _is_zarr_object(obj: Any) -> bool:
    """A zarr ``Store``, ``Group`` or ``Array`` (without importing zarr when it is not loaded)."""
    import sys

    zarr = sys.modules.get("zarr")
    if zarr is None:
        return False
    from zarr.abc.store import Store

    return isinstance(obj, (Store, zarr.Group, zarr.Array))


def _open_path(
    path: str, storage_options: dict[str, Any] | None, options: SourceOptions, grid: Any, size: Any,
    hierarchy: Hierarchy = ROOT,
) -> SourceGroup:
    lower = path.lower().rstrip("/")
    if lower.endswith(".npy"):
        src = open_npy(path, grid, options=options)
        return SourceGroup({src.name: src})  # type: ignore[attr-defined]
    if _is_netcdf_path(path):
        from .netcdf import open_netcdf

        hierarchy.check_netcdf(path)
        sources, coords, attrs, encoding = open_netcdf(
            path, grid, options, group=hierarchy.path or None, auto_complex=hierarchy.auto_complex
        )
        return SourceGroup(sources, coords, attrs, encoding)
    if _is_zarr_path(path):
        import zarr

        from .multiscale import open_level, read_multiscale
        from .zarr_source import open_node, open_zarr_group

        hierarchy.check_zarr(path)
        # once: each round trip counts remotely
        opened = open_node(path, storage_options, reader=options.reader, **hierarchy.zarr_kwargs())
        if isinstance(opened[0], zarr.Group):
            where = f"{path.rstrip('/')}/{hierarchy.path}" if hierarchy.path else path
            spec = read_multiscale(where, storage_options, group=opened[0])
            if spec is not None:  # a pyramid: level 0; the others stay reachable (ds.tse.levels)
                sources, coords, attrs = open_level(spec, 0, storage_options, options)
                return SourceGroup(sources, coords, attrs, multiscale=spec)

        sources, coords, attrs = open_zarr_group(path, storage_options, options, opened=opened)
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


def _open_in_memory(obj: Any, options: SourceOptions, grid: Any) -> SourceGroup:
    try:
        import xarray as xr
    except ImportError:  # pragma: no cover
        xr = None  # type: ignore[assignment]
    if xr is not None and isinstance(obj, xr.DataArray):
        obj = obj.to_dataset(name=obj.name if obj.name is not None else "data")
    if xr is not None and isinstance(obj, xr.Dataset):
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
    if hasattr(obj, "shape") and hasattr(obj, "dtype") and hasattr(obj, "__getitem__"):
        return SourceGroup({"data": ArraySource(obj, None, grid, None, "data", options=options)})
    raise UnsupportedSourceError(
        f"tsexplore cannot open an object of type {type(obj).__name__}; pass a path or URL, "
        "a zarr Store/Group/Array (icechunk sessions, ObjectStore, FsspecStore...), "
        "a NumPy/dask array, an xarray Dataset/DataArray, or a ChunkSource"
    )


async def close_async_resources() -> None:
    """Close network sessions that live on the calling loop."""
    from .remote import close_async_fs

    await close_async_fs()


def open_tree(
    obj: Any,
    *,
    storage_options: dict[str, Any] | None = None,
    options: SourceOptions = DEFAULT_OPTIONS,
    grid: Any = None,
    hierarchy: Hierarchy = ROOT,
) -> dict[str, SourceGroup]:
    """One :class:`SourceGroup` per group of a Zarr store or NetCDF/HDF5 file, at
    ``hierarchy.group`` and below, keyed as xarray's ``open_groups_as_dict`` keys them
    (``"/"``, ``"/a"``...; relative to ``group`` when one is given). The store's metadata
    is read once (consolidated when it has it); each group holds its own arrays -- a
    pyramid's levels are its child groups, not level 0 in place of the root."""
    from xarray.core.treenode import NodePath

    parent = str(NodePath("/") / NodePath(hierarchy.path))

    def key(path: str) -> str:
        return str(NodePath(path).relative_to(parent)) if hierarchy.path else str(NodePath(path))

    if not _has_groups(obj):
        raise UnsupportedSourceError(
            f"a tree opens from a Zarr store or a NetCDF/HDF5 file (they have groups); got "
            f"{obj if isinstance(obj, (str, Path)) else type(obj).__name__!r}"
        )
    if _is_netcdf_path(obj):
        from .netcdf import group_paths, open_netcdf

        path = os.fspath(obj)
        hierarchy.check_netcdf(path)
        out: dict[str, SourceGroup] = {}
        for gpath in group_paths(path):
            if not (gpath == parent or gpath.startswith(parent.rstrip("/") + "/")):
                continue
            sources, coords, attrs, encoding = open_netcdf(
                path, grid, options, group=gpath, auto_complex=hierarchy.auto_complex
            )
            out[key(gpath)] = SourceGroup(sources, coords, attrs, encoding)
        return out
    import zarr
    from xarray.backends.zarr import _iter_zarr_groups

    from .zarr_source import open_node, open_zarr_group

    hierarchy.check_zarr(obj)
    target = os.fspath(obj) if isinstance(obj, Path) else obj
    node, root, store = open_node(target, storage_options, reader=options.reader, **hierarchy.zarr_kwargs())
    if not isinstance(node, zarr.Group):
        raise SourceError(f"{obj!r} is a Zarr array, not a group: open it with open_dataset")
    out = {}
    for gpath in _iter_zarr_groups(node, parent=parent):
        rel = str(NodePath(gpath).relative_to(parent))
        sub = node if rel in ("", ".") else node[rel]
        sources, coords, attrs = open_zarr_group(target, storage_options, options, opened=(sub, root, store))
        out[key(gpath)] = SourceGroup(sources, coords, attrs)  # type: ignore[arg-type]
    return out
