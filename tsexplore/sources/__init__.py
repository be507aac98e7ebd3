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

from ..errors import (
    ConfigError,
    GroupNotFoundError,
    SourceError,
    SourceNotFoundError,
    StoreMetadataError,
    UnsupportedSourceError,
)
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
from .netcdf import (
    NETCDF_KWARGS,
    NetCDFInput,
    is_bytes,
    is_file_object,
    is_url,
    looks_like_netcdf,
    netcdf_input,
)
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
#: URL protocols whose "files" are Zarr stores read through zarr's ``FsspecStore``
STORE_PROTOCOLS = ("reference",)
#: xarray's zarr engine's (and ``open_zarr``'s) own keyword arguments: taken, and only
#: ``consolidated``, ``zarr_format`` and ``storage_options`` change what is read
ZARR_KWARGS = frozenset({
    "mode", "store", "engine", "use_zarr_fill_value_as_mask", "cache_members", "synchronizer",
    "chunk_store", "zarr_version", "consolidate_on_close",
})
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
    """A local NetCDF/HDF5 file: by its name, else by its signature (a folder never is one)."""
    if not isinstance(obj, (str, Path)) or (isinstance(obj, str) and is_url(obj)):
        return False
    path = os.fspath(obj)
    if os.path.isdir(path):
        return False
    if path.lower().rstrip("/").endswith(NETCDF_SUFFIXES):
        return True
    return os.path.isfile(path) and not path.lower().endswith(".npy") and looks_like_netcdf(path, "path")


def _url_path(url: str) -> str:
    """The path part of a URL (of the last URL of an fsspec chain), without query and
    fragment, lower case."""
    from urllib.parse import urlsplit

    return urlsplit(url.split("::")[-1]).path.lower().rstrip("/")


def _is_netcdf_url(url: str, engine_kwargs: dict[str, Any]) -> bool:
    """A URL of a NetCDF/HDF5 file: by its name (``.nc``, ``.h5``...) or by the arguments
    only xarray's NetCDF engines take. Any other URL is a Zarr store's (no request is spent
    to tell: a remote NetCDF file named otherwise opens with ``via="h5netcdf"``)."""
    path = _url_path(url)
    if path.endswith(".zarr") or ".zarr/" in path or url.split("://", 1)[0] in STORE_PROTOCOLS:
        return False
    return path.endswith(NETCDF_SUFFIXES) or bool(set(engine_kwargs) & (NETCDF_KWARGS - {"mode", "storage_options"}))


def _netcdf_input(
    obj: Any, storage_options: dict[str, Any] | None, engine_kwargs: dict[str, Any], hierarchy: Hierarchy
) -> NetCDFInput | None:
    """``obj`` as a NetCDF input (see :mod:`.netcdf`), or None when it is not NetCDF: an
    already-open xarray NetCDF store, the bytes of a file, a file object, a local NetCDF
    file or the URL of one."""
    from .netcdf import _data_store_engine

    if hierarchy.via == "zarr" or isinstance(obj, ChunkSource):
        return None
    if hierarchy.via is not None or is_bytes(obj) or is_file_object(obj) or _data_store_engine(obj):
        pass
    elif isinstance(obj, str) and is_url(obj):
        if not _is_netcdf_url(obj, engine_kwargs):
            return None
    elif not _is_netcdf_path(obj):
        return None
    kwargs = dict(engine_kwargs)
    if hierarchy.auto_complex is not None:
        kwargs["auto_complex"] = hierarchy.auto_complex
    hierarchy.check_netcdf(obj if isinstance(obj, str) else type(obj).__name__)
    return netcdf_input(obj, {k: v for k, v in kwargs.items() if k in NETCDF_KWARGS}, storage_options, hierarchy.via)


@dataclass(frozen=True)
class Hierarchy:
    """Which group of a store or file to open, and how its metadata is read: xarray's
    ``group=`` (a path such as ``"a/b"``; None or ``"/"`` is the root), ``consolidated=``
    and ``zarr_format=`` (Zarr, as xarray's zarr engine reads them), ``auto_complex=``
    (NetCDF4, as xarray's netcdf4 engine) and ``via=``: the xarray engine whose store reads
    the metadata (``"netcdf4"``, ``"h5netcdf"``, ``"scipy"`` or ``"zarr"``; None: the one
    xarray would pick, see :mod:`.netcdf`)."""

    group: str | None = None
    consolidated: bool | None = None
    zarr_format: int | None = None
    auto_complex: bool | None = None
    via: str | None = None

    def __post_init__(self) -> None:
        if self.group is not None and not isinstance(self.group, str):
            raise ConfigError(f"group must be a string or None (a path like 'a/b'), got {self.group!r}")
        if self.via not in (None, "netcdf4", "h5netcdf", "scipy", "zarr"):
            raise ConfigError(
                f"via= is the xarray engine whose store reads the metadata: 'netcdf4', 'h5netcdf', "
                f"'scipy', 'zarr' or None (the one xarray would pick), got {self.via!r}"
            )
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
        given = {k: v for k, v in vars(self).items()
                 if v is not None and not (k == "group" and not self.path) and k != "via"}
        if given:
            what = obj if isinstance(obj, (str, Path)) else type(obj).__name__
            raise ConfigError(
                f"{sorted(given)} select a group or read the metadata of a Zarr store or "
                f"NetCDF/HDF5 file; {what!r} has no groups"
            )


ROOT = Hierarchy()


def plain_input(obj: Any) -> Any:
    """What the user passed, in the form the dispatch below knows: any ``os.PathLike``
    (``pathlib``, ``py.path``...) as its ``str``; a ``dict`` holding Zarr keys (or empty) as
    a zarr ``MemoryStore`` over it, as zarr takes one; an fsspec mapper as a zarr
    ``FsspecStore``; xarray's ``ZarrStore`` as its zarr group; an fsspec ``OpenFile`` as its
    URL (Zarr) or file object (NetCDF, read by range through its filesystem)."""
    if isinstance(obj, os.PathLike) and not isinstance(obj, Path):
        return os.fspath(obj)
    if isinstance(obj, dict) and _looks_like_zarr_dict(obj):
        from zarr.storage import MemoryStore

        return MemoryStore(store_dict=obj, read_only=True)
    kind = type(obj).__module__ + "." + type(obj).__name__
    if kind == "fsspec.mapping.FSMap":
        from zarr.storage import FsspecStore

        return FsspecStore.from_mapper(obj, read_only=True)
    if kind == "xarray.backends.zarr.ZarrStore":
        return obj.zarr_group
    if kind == "fsspec.core.OpenFile":
        url = obj.fs.unstrip_protocol(obj.path)
        return url if url.rstrip("/").endswith(".zarr") or obj.fs.isdir(obj.path) else obj.open()
    return obj


def _looks_like_zarr_dict(obj: dict[Any, Any]) -> bool:
    """An empty dict, or one whose keys are Zarr keys (``zarr.json``, ``.zgroup``...)."""
    names = ("zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata")
    return not obj or any(isinstance(k, str) and k.rsplit("/", 1)[-1] in names for k in obj)


def open_group(
    obj: Any,
    *,
    storage_options: dict[str, Any] | None = None,
    options: SourceOptions = DEFAULT_OPTIONS,
    grid: Any = None,
    size: Any = None,
    hierarchy: Hierarchy = ROOT,
    engine_kwargs: dict[str, Any] | None = None,
) -> SourceGroup:
    """Sources for ``obj``: every input xarray's engines take (a path or any ``os.PathLike``,
    a URL or fsspec chain, a file object, the bytes of a NetCDF file, an open xarray data
    store, a zarr ``Store``/``Group``/``Array`` or a dict holding one, an fsspec mapper or
    ``OpenFile``), a NumPy/dask array, an xarray object or a source.

    Every source is built with ``options`` (absent chunks, prefetch policy); a source passed
    in is copied with them (:meth:`ChunkSource.with_options`). ``size`` (an int or
    ``(height, width)``) resizes the images of an image folder. ``hierarchy`` says which
    group of a Zarr store or NetCDF/HDF5 file, and how its metadata is read
    (:class:`Hierarchy`: xarray's ``group=``, ``consolidated=``, ``zarr_format=``,
    ``auto_complex=``); ``engine_kwargs`` are xarray's engines' own arguments
    (``phony_dims``, ``open_kwargs``, ``mmap``...: NetCDF; ``use_zarr_fill_value_as_mask``...:
    Zarr).
    """
    engine_kwargs = dict(engine_kwargs or {})
    obj = plain_input(obj)
    if size is not None and not _is_image_folder(obj):
        raise ConfigError(f"size= resizes the images of an image folder; {obj!r} is not one")
    netcdf = _netcdf_input(obj, storage_options, engine_kwargs, hierarchy)
    if netcdf is not None:
        from .netcdf import open_netcdf

        sources, coords, attrs, encoding = open_netcdf(netcdf, grid, options, group=hierarchy.path or None)
        return SourceGroup(sources, coords, attrs, encoding)
    _check_zarr_kwargs(obj, engine_kwargs)
    obj = _chained_store(obj, storage_options)
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
        hierarchy.check_zarr(obj)
        return _zarr_group(obj, storage_options, options, zarr_node(obj, storage_options, hierarchy, options.reader))
    return _open_in_memory(obj, options, grid)


def _zarr_group(obj: Any, storage_options: dict[str, Any] | None, options: SourceOptions,
                opened: tuple[Any, str, Any]) -> SourceGroup:
    """The sources of the opened Zarr node; a group with no arrays and no groups is an
    empty dataset with the group's attributes, as xarray reads it."""
    import zarr

    from .zarr_meta import group_attrs
    from .zarr_source import open_zarr_group

    node = opened[0]
    if isinstance(node, zarr.Group) and not any(True for _ in node.arrays()) \
            and not any(True for _ in node.groups()):
        return SourceGroup({}, {}, group_attrs(node))
    sources, coords, attrs = open_zarr_group(obj, storage_options, options, opened=opened)
    return SourceGroup(sources, coords, attrs)  # type: ignore[arg-type]


def _chained_store(obj: Any, storage_options: dict[str, Any] | None) -> Any:
    """An fsspec chain naming a Zarr store (``simplecache::s3://bucket/x.zarr``) as zarr's
    ``FsspecStore`` over it (its keys are read through the whole chain); anything else as
    it is."""
    if not (isinstance(obj, str) and "::" in obj and is_url(obj)):
        return obj
    from zarr.storage import FsspecStore

    try:
        return FsspecStore.from_url(obj, storage_options=storage_options, read_only=True)
    except Exception as exc:  # noqa: BLE001 - say which chain fsspec refused
        raise SourceError(f"cannot open the fsspec chain {obj!r} as a Zarr store: {type(exc).__name__}: {exc}") from exc


def _check_zarr_kwargs(obj: Any, engine_kwargs: dict[str, Any]) -> None:
    """Only xarray's zarr engine's own arguments are left for a store that is not NetCDF."""
    unknown = sorted(set(engine_kwargs) - ZARR_KWARGS)
    if unknown:
        what = obj if isinstance(obj, (str, Path)) else type(obj).__name__
        raise ConfigError(
            f"{unknown} are arguments of xarray's NetCDF engines (netcdf4, h5netcdf, scipy); "
            f"{what!r} is not a NetCDF file"
        )


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


def zarr_node(obj: Any, storage_options: dict[str, Any] | None, hierarchy: Hierarchy,
              reader: str = "auto") -> tuple[Any, str, Any]:
    """(zarr node, root name, store object or None) for a path/URL or zarr object, at
    ``hierarchy``'s group. A local store or a zarr ``Store`` object opens as xarray's zarr
    engine opens it (its own function: consolidated metadata tried first, the same
    ``RuntimeWarning`` when there is none, the same errors; a store that refuses
    consolidated metadata is read without it); a remote one in as few requests as it
    can (:func:`.zarr_meta.open_node`); a lone array as zarr opens it."""
    import zarr
    from zarr.abc.store import Store

    from .zarr_meta import is_remote, open_node

    kwargs = hierarchy.zarr_kwargs()
    if isinstance(obj, (zarr.Group, zarr.Array)) or (isinstance(obj, str) and is_remote(obj)):
        return open_node(obj, storage_options, reader=reader, **kwargs)
    try:
        from xarray.backends.zarr import _get_open_params
    except ImportError:  # pragma: no cover - xarray moved it
        return open_node(obj, storage_options, reader=reader, **kwargs)
    target = obj[len("file://"):] if isinstance(obj, str) and obj.startswith("file://") else obj
    try:
        node = _get_open_params(
            target, "r", hierarchy.path or None, hierarchy.consolidated, False, storage_options, None,
            hierarchy.zarr_format,
        )[0]
    except Exception as exc:  # noqa: BLE001 - a lone array is not a group: zarr opens it
        try:
            found = open_node(obj, storage_options, **kwargs)
        except Exception:  # noqa: BLE001 - xarray's own error says what is wrong
            raise _zarr_open_error(obj, hierarchy, exc) from exc
        if not isinstance(found[0], zarr.Array):
            raise _zarr_open_error(obj, hierarchy, exc) from exc
        return found
    if isinstance(obj, Store):
        return node, f"<{type(obj).__name__}>", obj
    return node, str(target), None


def _zarr_open_error(obj: Any, hierarchy: Hierarchy, exc: Exception) -> Exception:
    """xarray's zarr engine's error for ``obj``, also a SourceError saying what to do: a
    missing store (``FileNotFoundError``), group (``KeyError``) or consolidated metadata
    (``ValueError``) keeps its type; anything else passes as xarray raised it."""
    what = obj if isinstance(obj, str) else type(obj).__name__
    if isinstance(exc, FileNotFoundError):
        return SourceNotFoundError(f"no Zarr store at {what!r}: {exc}")
    if isinstance(exc, KeyError) and hierarchy.path:
        try:
            import zarr

            children = sorted(name for name, _ in zarr.open_group(obj, mode="r").groups())
        except Exception:  # noqa: BLE001 - the groups cannot be listed: say so
            children = None
        return GroupNotFoundError(
            f"{what!r} has no group {hierarchy.path!r}; its groups are {children or 'none'}"
        )
    if isinstance(exc, ValueError) and hierarchy.consolidated:
        return StoreMetadataError(
            f"cannot open {what!r} as Zarr with consolidated metadata: {exc}. Write it with "
            "zarr.consolidate_metadata(store), or open with consolidated=None"
        )
    return exc


def _open_path(
    path: str, storage_options: dict[str, Any] | None, options: SourceOptions, grid: Any, size: Any,
    hierarchy: Hierarchy = ROOT,
) -> SourceGroup:
    lower = path.lower().rstrip("/")
    if lower.endswith(".npy"):
        src = open_npy(path, grid, options=options)
        return SourceGroup({src.name: src})  # type: ignore[attr-defined]
    if _is_zarr_path(path) or hierarchy.via == "zarr":
        import zarr

        from .multiscale import open_level, read_multiscale

        hierarchy.check_zarr(path)
        opened = zarr_node(path, storage_options, hierarchy, options.reader)  # once: each round trip counts remotely
        if isinstance(opened[0], zarr.Group):
            where = f"{path.rstrip('/')}/{hierarchy.path}" if hierarchy.path else path
            spec = read_multiscale(where, storage_options, group=opened[0])
            if spec is not None:  # a pyramid: level 0; the others stay reachable (ds.tse.levels)
                sources, coords, attrs = open_level(spec, 0, storage_options, options)
                return SourceGroup(sources, coords, attrs, multiscale=spec)
        return _zarr_group(path, storage_options, options, opened)
    if os.path.isdir(path):
        try:
            from .images import open_image_folder
        except ImportError:  # pragma: no cover - the images module is optional
            open_image_folder = None  # type: ignore[assignment]
        if open_image_folder is not None and _is_image_folder(path):
            return open_image_folder(path, size=size, options=options)  # type: ignore[no-any-return]
    if not os.path.exists(path):
        raise SourceNotFoundError(f"{path!r} does not exist")
    raise UnsupportedSourceError(
        f"cannot tell what {path!r} is. tsexplore opens Zarr stores (a folder with "
        "zarr.json/.zarray/.zgroup, or *.zarr, or a URL), NetCDF/HDF5 files (by their "
        "signature; also gzipped NetCDF3 *.nc.gz), .npy files and folders of images"
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
    engine_kwargs: dict[str, Any] | None = None,
) -> dict[str, SourceGroup]:
    """One :class:`SourceGroup` per group of a Zarr store or NetCDF/HDF5 file (every input
    :func:`open_group` takes for them), at ``hierarchy.group`` and below, keyed as xarray's
    ``open_groups_as_dict`` keys them (``"/"``, ``"/a"``...; relative to ``group`` when one
    is given). The store's metadata is read once (consolidated when it has it); each group
    holds its own arrays -- a pyramid's levels are its child groups, not level 0 in place
    of the root."""
    from xarray.core.treenode import NodePath

    engine_kwargs = dict(engine_kwargs or {})
    obj = plain_input(obj)
    parent = str(NodePath("/") / NodePath(hierarchy.path))

    def key(path: str) -> str:
        return str(NodePath(path).relative_to(parent)) if hierarchy.path else str(NodePath(path))

    netcdf = _netcdf_input(obj, storage_options, engine_kwargs, hierarchy)
    if netcdf is not None:
        from .netcdf import open_netcdf_tree

        groups = open_netcdf_tree(netcdf, grid, options, group=hierarchy.path or None)
        return {key(path): SourceGroup(*found) for path, found in groups.items()}
    _check_zarr_kwargs(obj, engine_kwargs)
    obj = _chained_store(obj, storage_options)
    if not _has_groups(obj) and not (isinstance(obj, str) and (is_url(obj) or hierarchy.via == "zarr")):
        raise UnsupportedSourceError(
            f"a tree opens from a Zarr store or a NetCDF/HDF5 file (they have groups); got "
            f"{obj if isinstance(obj, (str, Path)) else type(obj).__name__!r}"
        )
    import zarr
    from xarray.backends.zarr import _iter_zarr_groups

    from .zarr_source import open_zarr_group

    hierarchy.check_zarr(obj)
    target = os.fspath(obj) if isinstance(obj, Path) else obj
    node, root, store = zarr_node(target, storage_options, hierarchy, options.reader)
    if not isinstance(node, zarr.Group):
        raise SourceError(f"{obj!r} is a Zarr array, not a group: open it with open_dataset")
    out = {}
    for gpath in _iter_zarr_groups(node, parent=parent):
        rel = str(NodePath(gpath).relative_to(parent))
        sub = node if rel in ("", ".") else node[rel]
        sources, coords, attrs = open_zarr_group(target, storage_options, options, opened=(sub, root, store))
        out[key(gpath)] = SourceGroup(sources, coords, attrs)  # type: ignore[arg-type]
    return out
