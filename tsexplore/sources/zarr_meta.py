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
Nothing here reads chunks; the chunk-reading code lives in :mod:`.zarr_source`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

DIMENSION_KEY = "_ARRAY_DIMENSIONS"


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
