"""Multiscale pyramids on Zarr: which levels a store has, and sources for one level.

Two conventions are read, both from the root group's attributes:

- **OME-NGFF** ``multiscales`` -- v0.4 in ``.zattrs`` (Zarr v2), v0.5 under ``ome`` in
  ``zarr.json`` -- where each dataset ``path`` is one array, with ``axes`` naming its
  dimensions and ``coordinateTransformations`` (scale, translation) placing it in space;
- **ndpyramid / xarray DataTree** ``multiscales``, where each ``path`` is a group holding a
  whole Dataset (variables and coordinates) at that resolution.

Levels are ordered finest first (ndpyramid lists the coarsest first), whatever the order
in the metadata. An OME level whose array sits in a group with coordinate arrays (as
``tse.pyramid`` writes them) takes its coordinates from there; otherwise they come from the
transformations (``translation + scale * index``), except for channel axes.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SourceError
from .base import DEFAULT_OPTIONS, SourceOptions


@dataclass(frozen=True)
class LevelArray:
    """One array of a level: its name, dimensions, shape and chunks."""

    name: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    chunks: tuple[int, ...]


@dataclass(frozen=True)
class LevelSpec:
    """One level: ``path`` (relative to the root) names an array (OME) or a group."""

    path: str
    node: str  # "array" | "group"
    arrays: tuple[LevelArray, ...]
    scale: tuple[float, ...] | None = None
    translation: tuple[float, ...] | None = None

    @property
    def size(self) -> int:
        return max((math.prod(a.shape) for a in self.arrays), default=0)

    def sizes(self) -> dict[str, int]:
        """Length of each dimension at this level."""
        out: dict[str, int] = {}
        for a in self.arrays:
            out.update(zip(a.dims, a.shape))
        return out


@dataclass(frozen=True)
class MultiscaleSpec:
    """The levels of a pyramid rooted at ``root`` (finest first)."""

    root: str
    convention: str  # "ome-ngff" | "datatree"
    version: str | None
    name: str | None
    axes: tuple[dict[str, Any], ...]
    levels: tuple[LevelSpec, ...]
    method: str | None = None

    def factors(self, level: int) -> dict[str, float]:
        """Level-0 pixels per pixel of ``level``, per dimension (from the transformations
        when the store has them, else from the sizes)."""
        base, lev = self.levels[0], self.levels[level]
        if base.scale is not None and lev.scale is not None and self.axes:
            return {a["name"]: float(s1) / float(s0) if s0 else 1.0
                    for a, s0, s1 in zip(self.axes, base.scale, lev.scale)}
        n0, n1 = base.sizes(), lev.sizes()
        return {d: n0[d] / n1[d] if n1.get(d) else 1.0 for d in n0 if d in n1}

    def offsets(self, level: int) -> dict[str, float]:
        """Level-0 index of the centre of pixel 0 of ``level``, per dimension."""
        base, lev = self.levels[0], self.levels[level]
        f = self.factors(level)
        if base.translation is not None and lev.translation is not None and base.scale is not None:
            return {a["name"]: (float(t1) - float(t0)) / float(s0) if s0 else 0.0
                    for a, t0, t1, s0 in zip(self.axes, base.translation, lev.translation, base.scale)}
        return {d: (v - 1.0) / 2.0 for d, v in f.items()}  # block means: pixel 0 is the first block's centre

    def encoding(self, level: int) -> dict[str, Any]:
        """What a variable's ``encoding["multiscales"]`` records (``ds.tse.levels`` reads it)."""
        return {"root": self.root, "level": int(level), "convention": self.convention,
                "path": self.levels[level].path}


def parse_multiscales(attrs: Any) -> tuple[dict[str, Any], str | None, str] | None:
    """The first ``multiscales`` entry of a group's attributes, its version and convention
    (``"ome-ngff"`` or ``"datatree"``), or None when the group is no pyramid."""
    if not hasattr(attrs, "get"):
        return None
    ome = attrs.get("ome")
    if isinstance(ome, dict) and isinstance(ome.get("multiscales"), list) and ome["multiscales"]:
        return ome["multiscales"][0], str(ome.get("version", "0.5")), "ome-ngff"
    ms = attrs.get("multiscales")
    if isinstance(ms, list) and ms and isinstance(ms[0], dict) and ms[0].get("datasets"):
        entry = ms[0]
        convention = "ome-ngff" if "axes" in entry or "version" in entry else "datatree"
        return entry, entry.get("version"), convention
    return None


def _transforms(ds: dict[str, Any]) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    scale = translation = None
    for tr in ds.get("coordinateTransformations") or []:
        if tr.get("type") == "scale" and "scale" in tr:
            scale = tuple(float(v) for v in tr["scale"])
        elif tr.get("type") == "translation" and "translation" in tr:
            translation = tuple(float(v) for v in tr["translation"])
    return scale, translation


def _array_dims(arr: Any, axes: tuple[dict[str, Any], ...]) -> tuple[str, ...]:
    names = getattr(arr.metadata, "dimension_names", None)
    if names and all(n is not None for n in names):
        return tuple(str(n) for n in names)
    dims = arr.attrs.get("_ARRAY_DIMENSIONS")
    if dims:
        return tuple(str(d) for d in dims)
    if len(axes) == arr.ndim:
        return tuple(str(a["name"]) for a in axes)
    return tuple(f"dim_{i}" for i in range(arr.ndim))


def _level_arrays(node: Any, axes: tuple[dict[str, Any], ...]) -> tuple[LevelArray, ...]:
    import zarr

    arrays = [node] if isinstance(node, zarr.Array) else [a for _, a in node.arrays()]
    out = []
    for arr in arrays:
        dims = _array_dims(arr, axes)
        if isinstance(node, zarr.Array) or not (arr.ndim == 1 and dims == (arr.basename,)):
            out.append(LevelArray(arr.basename, dims, tuple(int(s) for s in arr.shape),
                                  tuple(int(c) for c in arr.chunks)))
    return tuple(out)


def read_multiscale(url: str, storage_options: dict[str, Any] | None = None,
                    group: Any = None) -> MultiscaleSpec | None:
    """The pyramid rooted at ``url``, or None when it is not the root of one.

    ``group``: the root group, when the caller has it open already (no second round of
    metadata requests to a remote store).
    """
    import zarr

    root = str(url)
    if root.startswith("file://"):
        root = root[len("file://"):]
    if "://" not in root:
        root = os.path.abspath(root)  # the other levels are opened later, maybe from elsewhere
    if group is None:
        try:
            group = zarr.open_group(store=root, mode="r", storage_options=storage_options or None)
        except Exception:  # noqa: BLE001 - not a group (an array, or nothing): no pyramid here
            return None
    found = parse_multiscales(dict(group.attrs))
    if found is None:
        return None
    entry, version, convention = found
    axes = tuple(a if isinstance(a, dict) else {"name": str(a)} for a in entry.get("axes") or [])
    levels = []
    for ds in entry["datasets"]:
        path = str(ds["path"]).strip("/")
        try:
            node = group[path]
        except KeyError as exc:
            raise SourceError(f"the multiscales of {url!r} list level {path!r}, which the store lacks") from exc
        kind = "array" if isinstance(node, zarr.Array) else "group"
        scale, translation = _transforms(ds)
        levels.append(LevelSpec(path, kind, _level_arrays(node, axes), scale, translation))
    if not levels or not all(lv.arrays for lv in levels):
        raise SourceError(f"the multiscales of {url!r} name levels without arrays: {[lv.path for lv in levels]}")
    levels.sort(key=lambda lv: -lv.size)  # finest first
    method = entry.get("type") if isinstance(entry.get("type"), str) else None
    return MultiscaleSpec(root, convention, version, entry.get("name"), axes, tuple(levels), method)


def _join(root: str, path: str) -> str:
    return f"{root.rstrip('/')}/{path}" if path else root


def _transform_coords(spec: MultiscaleSpec, lev: LevelSpec, dims: tuple[str, ...],
                      shape: tuple[int, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if lev.scale is None or len(spec.axes) != len(dims):
        return out
    trans = lev.translation or (0.0,) * len(dims)
    for axis, dim, n, s, t in zip(spec.axes, dims, shape, lev.scale, trans):
        if axis.get("type") == "channel":
            continue
        attrs = {"units": axis["unit"]} if axis.get("unit") else {}
        out[dim] = ((dim,), t + s * np.arange(n, dtype=np.float64), attrs)
    return out


def open_level(spec: MultiscaleSpec, level: int, storage_options: dict[str, Any] | None = None,
               options: SourceOptions = DEFAULT_OPTIONS) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Sources, coordinates and attributes of ``level`` (as ``open_zarr_group`` returns them)."""
    import zarr

    from .zarr_source import ZarrSource, open_zarr_group

    if not 0 <= level < len(spec.levels):
        raise SourceError(f"level {level} is not one of the {len(spec.levels)} levels of {spec.root!r}")
    lev = spec.levels[level]
    if lev.node == "group":
        return open_zarr_group(_join(spec.root, lev.path), storage_options, options)
    opts = storage_options or None
    arr = zarr.open_array(store=spec.root, path=lev.path, mode="r", storage_options=opts)
    parent, _, leaf = lev.path.rpartition("/")
    name = spec.name if isinstance(spec.name, str) and spec.name else (leaf if not leaf.isdigit() else "image")
    dims = lev.arrays[0].dims
    src = ZarrSource(arr, spec.root, name, storage_options, options, dims=dims)
    coords: dict[str, Any] = {}
    if parent:  # the level's group, as xarray opens it: its attributes and coordinates
        _, beside, attrs = open_zarr_group(_join(spec.root, parent), storage_options, options)
        sizes = dict(zip(dims, src.shape))
        coords = {k: v for k, v in beside.items() if k in sizes and len(v[1]) == sizes[k]}
    else:
        attrs = dict(zarr.open_group(store=spec.root, mode="r", storage_options=opts).attrs)
    for dim, coord in _transform_coords(spec, lev, dims, tuple(src.shape)).items():
        coords.setdefault(dim, coord)
    return {name: src}, coords, attrs
