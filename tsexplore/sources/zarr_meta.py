"""Zarr metadata as xarray's zarr backend presents it: dims, attributes, encoding, dtype.

This mirrors ``xarray.backends.zarr.ZarrStore.open_store_variable`` and ``get_attrs`` (and
uses xarray's own ``FillValueCoder`` and ``ZarrArrayWrapper``), so the raw variables tsexplore
hands to xarray's CF decoders are the ones xarray's own backend hands them:

- v2 arrays (``use_zarr_fill_value_as_mask`` is xarray's default, True): the array's
  ``fill_value`` becomes the CF ``_FillValue`` attribute (the mask), ``_ARRAY_DIMENSIONS``
  names the dims and is hidden, as are ``_nc*`` attributes;
- v3 arrays: the dims are the metadata's ``dimension_names``; the array's ``fill_value``
  goes to ``encoding["fill_value"]`` (not a mask) and a ``_FillValue`` attribute (written by
  xarray base64/JSON-encoded) is decoded;
- encoding: ``chunks``, ``preferred_chunks``, ``compressors``, ``filters``, ``shards`` and, for
  v3, ``serializer`` (what ``to_zarr`` reads back to write the same layout).

Arrays xarray itself cannot open (no dimension names at all) get ``<name>_dim_<i>`` dims.
:func:`open_node` opens the node a path, URL or store names, at xarray's ``group=``, reading
its metadata as xarray's zarr engine does (``consolidated=``, ``zarr_format=``; a remote
consolidated store in one request). Nothing here reads chunks; the chunk-reading code lives
in :mod:`.zarr_source`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import SourceError
from .remote import obstore_for

DIMENSION_KEY = "_ARRAY_DIMENSIONS"
#: URL protocols read through zarr's ``FsspecStore`` (keys are not paths under a root)
STORE_PROTOCOLS = ("reference",)


def is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


@dataclass(frozen=True)
class ZarrVariableMeta:
    """What xarray's zarr backend would give one array, less its values."""

    dims: tuple[str, ...]
    attrs: dict[str, Any]
    encoding: dict[str, Any] = field(default_factory=dict)
    store_dtype: np.dtype = field(default_factory=lambda: np.dtype("float64"))


def zarr_format(array: Any) -> int:
    return int(getattr(array.metadata, "zarr_format", 3))


def _dims_and_attrs(array: Any, name: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    raw = dict(array.attrs)
    if zarr_format(array) == 3:
        names = getattr(array.metadata, "dimension_names", None) or ()
        if len(names) == array.ndim and all(n is not None for n in names):
            return tuple(str(n) for n in names), raw
        dims = raw.get(DIMENSION_KEY)
    else:
        dims = raw.get(DIMENSION_KEY)
        raw = {k: v for k, v in raw.items() if k != DIMENSION_KEY and not k.lower().startswith("_nc")}
    if not dims or len(dims) != array.ndim:
        dims = [f"{name}_dim_{i}" for i in range(array.ndim)]
    return tuple(str(d) for d in dims), raw


def store_dtype(array: Any) -> np.dtype:
    """The dtype xarray's ``ZarrArrayWrapper`` reports (vlen-utf8 strings as object)."""
    from xarray.backends.zarr import ZarrArrayWrapper

    return np.dtype(ZarrArrayWrapper(array).dtype)


def variable_meta(array: Any, name: str) -> ZarrVariableMeta:
    """Dims, attributes, encoding and dtype of one Zarr array as xarray's backend has them."""
    from xarray.backends.zarr import FillValueCoder

    dims, attrs = _dims_and_attrs(array, name)
    chunks = tuple(int(c) for c in array.chunks)
    dtype = store_dtype(array)
    encoding: dict[str, Any] = {
        "chunks": chunks,
        "preferred_chunks": dict(zip(dims, chunks)),
    }
    if dtype.kind == "T":
        encoding["dtype"] = dtype
    encoding.update(
        {"compressors": array.compressors, "filters": array.filters, "shards": array.shards}
    )
    fmt = zarr_format(array)
    if fmt == 3:
        encoding["serializer"] = array.serializer
    if fmt == 2:  # xarray's use_zarr_fill_value_as_mask default for v2 stores
        if array.fill_value is not None:
            attrs["_FillValue"] = array.fill_value
    else:
        encoding["fill_value"] = array.fill_value
        if "_FillValue" in attrs:
            attrs["_FillValue"] = FillValueCoder.decode(attrs["_FillValue"], array.dtype)
    return ZarrVariableMeta(dims, attrs, encoding, dtype)


def group_attrs(group: Any) -> dict[str, Any]:
    """The group's attributes as xarray's ``ZarrStore.get_attrs`` gives them."""
    return {k: v for k, v in group.attrs.asdict().items() if not k.lower().startswith("_nc")}


def absent_fill(array: Any, dtype: np.dtype) -> Any:
    """What zarr-python reads for a chunk the store does not have: the array's
    ``fill_value``, or the dtype's default (zero, ``False``, ``""``) for a v2 ``null``."""
    fill = array.fill_value
    if fill is None:
        return np.zeros((), dtype=dtype)[()]
    return fill


def _child(group: Any, path: str, where: Any) -> Any:
    """The node at ``path`` below ``group`` (xarray's ``group=``), or a SourceError."""
    import zarr

    path = path.strip("/")
    if not path:
        return group
    if not isinstance(group, zarr.Group):
        raise SourceError(f"group={path!r}: {where!r} is a Zarr array, not a group")
    try:
        return group[path]
    except KeyError:
        children = sorted(name for name, _ in group.groups())
        raise SourceError(
            f"{where!r} has no group {path!r}; its groups are {children or 'none'}"
        ) from None


def _open_zarr(
    store: Any, so: dict[str, Any] | None, group: str | None, consolidated: bool | None,
    zarr_format: int | None, reader: str = "auto",
) -> Any:
    """The node at ``group`` of ``store`` (a URL or a zarr ``Store``), with its metadata read
    as xarray's zarr engine reads it: ``consolidated=True`` requires consolidated metadata at
    the root, ``None`` uses it when the root has it (one request for the whole hierarchy),
    ``False`` reads each node's own metadata. Zarr v3 is asked first (one ``zarr.json``)
    unless ``zarr_format`` says which; a store whose root is an array opens as that array."""
    import zarr

    kw: dict[str, Any] = {"mode": "r"}
    if isinstance(store, str):
        kw["storage_options"] = so
    path = (group or "").strip("/")
    if isinstance(store, str) and is_remote(store) and consolidated is not False:
        found = _group_from_one_document(store, so, zarr_format, consolidated, reader)
        if found is not None:
            return _child(found, path, store)
    if consolidated:
        root = zarr.open_consolidated(store, zarr_format=zarr_format, **kw)
        return _child(root, path, store)
    use = None if consolidated is None else False
    formats: tuple[Any, ...] = (zarr_format,) if zarr_format is not None else (3, None)
    for i, fmt in enumerate(formats):
        try:
            # the root first, even for a group: its consolidated metadata covers the children
            root = zarr.open_group(store, zarr_format=fmt, use_consolidated=use, **kw)
        except Exception:  # noqa: BLE001 - not a group in this format (or not there)
            if i + 1 < len(formats):
                continue
            if path:
                raise
            return zarr.open(store=store, zarr_format=fmt, **kw)  # a lone array
        return _child(root, path, store)
    raise AssertionError("unreachable")  # pragma: no cover


def _group_from_one_document(
    url: str, so: dict[str, Any] | None, zarr_format: int | None, consolidated: bool | None,
    reader: str = "auto",
) -> Any:
    """A remote group from one metadata request: its ``zarr.json`` (v3, with consolidated
    metadata when the writer put it there) or its ``.zmetadata`` (v2, which holds the root's
    ``.zgroup`` and ``.zattrs`` too) -- where zarr asks for ``.zgroup``, ``.zattrs`` and
    ``.zmetadata`` together, each a request. None when the root is not a group in one
    document (an array, no consolidated v2 metadata): then zarr opens it its own way."""
    import json

    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.group import AsyncGroup
    from zarr.core.sync import sync
    from zarr.storage import FsspecStore
    from zarr.storage._common import StorePath

    try:
        store = FsspecStore.from_url(url, storage_options=so, read_only=True)
    except Exception:  # noqa: BLE001 - let zarr's own open say what is wrong
        return None
    where = StorePath(store, "")
    proto = default_buffer_prototype()
    # one GET (s3fs sends a HEAD first), unless the remote reader is set to fsspec
    fast = obstore_for(url.rstrip("/"), dict(so or {})) if reader != "fsspec" else None

    async def get(key: str) -> Any:
        if fast is None:
            return await store.get(key, proto)
        got = await fast.get_ranges(key, [None])
        return None if got is None else proto.buffer.from_bytes(bytes(got[0]))

    async def read() -> Any:
        if zarr_format in (None, 3):
            doc = await get("zarr.json")
            if doc is not None:
                meta = json.loads(doc.to_bytes())
                if meta.get("node_type") != "group":
                    return None
                if consolidated and not meta.get("consolidated_metadata"):
                    return None  # zarr's open_consolidated says so
                return AsyncGroup._from_bytes_v3(where, doc, use_consolidated=consolidated)
            if zarr_format == 3:
                return None
        doc = await get(".zmetadata")
        if doc is None:
            return None
        flat = json.loads(doc.to_bytes()).get("metadata", {})
        if ".zgroup" not in flat:
            return None
        encode = proto.buffer.from_bytes
        return AsyncGroup._from_bytes_v2(
            where, encode(json.dumps(flat[".zgroup"]).encode()),
            encode(json.dumps(flat.get(".zattrs", {})).encode()), doc,
        )

    try:
        found = sync(read())
    except Exception:  # noqa: BLE001 - zarr's private constructors moved: open as zarr does
        return None
    return zarr.Group(found) if found is not None else None


def open_node(
    obj: Any,
    storage_options: dict[str, Any] | None,
    group: str | None = None,
    consolidated: bool | None = None,
    zarr_format: int | None = None,
    reader: str = "auto",
) -> tuple[Any, str, Any]:
    """(zarr node, root name, store object or None) for a path/URL, a zarr ``Store``, a
    ``zarr.Group`` or a ``zarr.Array``; ``group``, ``consolidated`` and ``zarr_format`` as
    xarray's zarr engine takes them (see :func:`_open_zarr`). The root name is the store's
    root (chunk keys are the arrays' paths below it), also when ``group`` is given."""
    import zarr
    from zarr.abc.store import Store

    if isinstance(obj, (zarr.Array, zarr.Group)):
        return _child(obj, group or "", obj), f"<{type(obj.store).__name__}>", obj.store
    if isinstance(obj, Store):
        try:
            node = _open_zarr(obj, None, group, consolidated, zarr_format)
        except SourceError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise SourceError(f"cannot open the {type(obj).__name__} as Zarr: {type(exc).__name__}: {exc}") from exc
        return node, f"<{type(obj).__name__}>", obj
    root = str(obj)
    if root.startswith("file://"):
        root = root[len("file://") :]
    if root.split("://", 1)[0] in STORE_PROTOCOLS:  # e.g. kerchunk references: through zarr's store
        from zarr.storage import FsspecStore

        try:
            store = FsspecStore.from_url(root, storage_options=storage_options, read_only=True)
        except Exception as exc:  # noqa: BLE001
            raise SourceError(f"cannot open {obj!r}: {type(exc).__name__}: {exc}") from exc
        node, _, _ = open_node(store, None, group, consolidated, zarr_format)
        return node, root, store
    so = storage_options or None
    try:
        node = _open_zarr(root, so, group, consolidated, zarr_format, reader)
    except SourceError:
        raise
    except FileNotFoundError as exc:
        raise SourceError(f"no Zarr store at {obj!r}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001
        what = "with consolidated metadata " if consolidated else ""
        raise SourceError(f"cannot open {obj!r} as Zarr {what}: {type(exc).__name__}: {exc}") from exc
    return node, root, None
