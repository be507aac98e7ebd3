"""Multiscale pyramids: ``tse.pyramid`` writes one, ``ds.tse.levels`` / :func:`open_levels` reads one.

``pyramid(source, target)`` writes an OME-NGFF v0.5 multiscales image on Zarr v3: level ``k``
is the array ``k/<var>`` halved ``k`` times along the plane's dims by xarray's
``coarsen(...).mean()`` (``method="mean"``) or by taking every second sample
(``method="nearest"``), each level computed from the one written before it, block by block
(bounded memory: ``max_mem``), with a progress bar. Each level's group also holds its 1-D
coordinates, so the same store opens as an OME-NGFF image (ngff-zarr, ome-zarr), as an
xarray DataTree, and with ``tse.open_dataset`` (level 0, the others in ``ds.tse.levels``).

:class:`Levels` reads pyramids written by anything that writes OME-NGFF v0.4/v0.5 or
ndpyramid/DataTree multiscales (see :mod:`tsexplore.sources.multiscale`).
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from . import config
from .controller.geometry import LevelGeometry
from .errors import ConfigError, TsExploreError
from .sources import SourceGroup
from .sources.base import ChunkSource, SourceOptions
from .sources.multiscale import MultiscaleSpec, open_level, read_multiscale

METHODS = ("mean", "nearest")


# -- reading ------------------------------------------------------------------------------------


class Levels(Sequence[xr.Dataset]):
    """The levels of a pyramid, finest first; ``levels[k]`` is a lazy, engine-backed
    Dataset, opened on first use. ``factors[k]`` / ``offsets[k]`` place level ``k`` in
    level 0 (per dim: level-0 pixels per pixel, level-0 index of pixel 0's centre).

    ``wrap`` (e.g. ``tsexplore.testing.CountingSource``) wraps every source as it is opened;
    :meth:`chunk_reads` then reports the reads that reached each level.
    """

    def __init__(self, spec: MultiscaleSpec, *, storage_options: dict[str, Any] | None = None,
                 missing: str = "fill", prefetch: Any = "auto",
                 wrap: Callable[[ChunkSource], ChunkSource] | None = None) -> None:
        self.spec = spec
        self.storage_options = storage_options
        self.missing, self.prefetch, self.wrap = missing, prefetch, wrap
        self.factors = [spec.factors(k) for k in range(len(spec.levels))]
        self.offsets = [spec.offsets(k) for k in range(len(spec.levels))]
        self.shapes = [lv.sizes() for lv in spec.levels]
        self._datasets: dict[int, xr.Dataset] = {}
        self._sources: dict[int, dict[str, ChunkSource]] = {}
        self._opened: dict[int, tuple[dict[str, ChunkSource], dict[str, Any], dict[str, Any]]] = {}
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self.spec.levels)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        k = int(k) + (len(self) if int(k) < 0 else 0)
        if not 0 <= k < len(self):
            raise IndexError(f"level {k} of a {len(self)}-level pyramid")
        if k not in self._datasets:
            from .xarray import open_dataset

            sources, coords, attrs = self._open(k)
            group = SourceGroup(sources, coords, attrs, multiscale=self.spec, level=k)
            self._datasets[k] = open_dataset(group, missing=self.missing, prefetch=self.prefetch)
        return self._datasets[k]

    def _open(self, k: int) -> tuple[dict[str, ChunkSource], dict[str, Any], dict[str, Any]]:
        with self._lock:
            if k not in self._opened:
                options = SourceOptions(self.missing, self.prefetch, config.get().remote_reader)
                sources, coords, attrs = open_level(self.spec, k, self.storage_options, options)
                if self.wrap is not None:
                    sources = {name: self.wrap(src) for name, src in sources.items()}
                self._opened[k] = (sources, coords, attrs)
                self._sources[k] = sources
            return self._opened[k]

    def sources(self, k: int) -> dict[str, ChunkSource]:
        """The sources of level ``k`` by variable name (opened on first use, without the
        Dataset: what a view reads)."""
        return self._open(int(k))[0]

    def array(self, k: int, var: str) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]] | None:
        """``(dims, shape, chunks)`` of ``var`` at level ``k`` from the metadata (nothing is
        opened), or None when that level has no such array."""
        found = next((a for a in self.spec.levels[int(k)].arrays if a.name == var), None)
        return None if found is None else (tuple(found.dims), tuple(found.shape), tuple(found.chunks))

    def geometry(self, ydim: str, xdim: str, var: str | None = None) -> list[LevelGeometry]:
        """The (``ydim``, ``xdim``) plane of every level, for ``controller.geometry`` planning."""
        out = []
        for k, lev in enumerate(self.spec.levels):
            arrays = [a for a in lev.arrays if var is None or a.name == var] or list(lev.arrays)
            arr = next((a for a in arrays if ydim in a.dims and xdim in a.dims), None)
            if arr is None:
                raise ConfigError(f"level {k} of {self.spec.root!r} has no array with dims "
                                  f"{ydim!r} and {xdim!r}: {[a.dims for a in lev.arrays]}")
            iy, ix = arr.dims.index(ydim), arr.dims.index(xdim)
            f, o = self.factors[k], self.offsets[k]
            out.append(LevelGeometry((arr.shape[iy], arr.shape[ix]), (arr.chunks[iy], arr.chunks[ix]),
                                     (f.get(ydim, 1.0), f.get(xdim, 1.0)), (o.get(ydim, 0.0), o.get(xdim, 0.0))))
        return out

    def chunk_reads(self) -> list[int]:
        """Reads that reached each level's sources (needs ``wrap`` with a ``reads`` counter)."""
        return [sum(int(getattr(s, "reads", 0)) for s in self._sources.get(k, {}).values())
                for k in range(len(self))]

    def __repr__(self) -> str:
        sizes = ", ".join("x".join(str(v) for v in s.values()) for s in self.shapes)
        return f"<Levels {self.spec.convention} {self.spec.root!r}: {len(self)} levels ({sizes})>"


def open_levels(source: Any, *, storage_options: dict[str, Any] | None = None, missing: str = "fill",
                prefetch: Any = "auto", wrap: Callable[[ChunkSource], ChunkSource] | None = None) -> Levels:
    """The :class:`Levels` of the pyramid at ``source`` (a path or URL)."""
    spec = read_multiscale(os.fspath(source), storage_options)
    if spec is None:
        raise TsExploreError(f"{source!r} has no multiscales metadata (OME-NGFF or ndpyramid); "
                             "build a pyramid with tse.pyramid(source, target)")
    return Levels(spec, storage_options=storage_options, missing=missing, prefetch=prefetch, wrap=wrap)


def levels_of(obj: xr.Dataset | xr.DataArray) -> Levels | None:
    """The pyramid a tsexplore-opened Dataset/DataArray is a level of (``ds.tse.levels``),
    or None when it is none."""
    variables = obj.data_vars.values() if isinstance(obj, xr.Dataset) else [obj]
    for var in variables:
        ms = var.encoding.get("multiscales")
        if ms:
            return open_levels(ms["root"])
    return None


# -- writing ------------------------------------------------------------------------------------


def _variable(source: Any, var: str | None) -> xr.DataArray:
    if isinstance(source, (str, os.PathLike)):
        from .xarray import open_dataset

        source = open_dataset(source)
    if isinstance(source, xr.DataArray):
        return source
    if not isinstance(source, xr.Dataset):
        raise ConfigError(f"pyramid() takes a path, a Dataset or a DataArray, got {type(source).__name__}")
    names = [n for n, v in source.data_vars.items() if v.ndim >= 2]
    if var is None:
        if len(names) != 1:
            raise ConfigError(f"pick the variable to build levels of with var=; 2-D+ variables: {names}")
        var = str(names[0])
    if var not in names:
        raise ConfigError(f"var={var!r} is not one of the 2-D+ variables {names}")
    return source[var]


def _uniform(da: xr.DataArray, dim: str) -> tuple[float, float] | None:
    """(first value, step) of a numeric, evenly spaced coordinate ``dim``."""
    if dim not in da.coords or da.sizes[dim] < 2 or da.coords[dim].dtype.kind not in "iuf":
        return None
    v = np.asarray(da.coords[dim].values, np.float64)
    step = (v[-1] - v[0]) / (len(v) - 1)
    if step == 0 or not np.allclose(np.diff(v), step, rtol=1e-6, atol=abs(step) * 1e-6):
        return None
    return float(v[0]), float(step)


def _axes_and_transforms(da: xr.DataArray, dims: tuple[str, ...], n: int, method: str) -> tuple[list, list]:
    axes, datasets = [], []
    for d in da.dims:
        kind = "space" if d in dims else ("time" if d in ("t", "time") else None)
        axes.append({"name": str(d), **({"type": kind} if kind else {})})
    name = str(da.name)
    for k in range(n):
        scale, translation = [], []
        for d in da.dims:
            c0, dc = _uniform(da, str(d)) or (0.0, 1.0)
            f = 2**k if d in dims else 1
            scale.append(dc * f)
            translation.append(c0 + (dc * (f - 1) / 2 if method == "mean" else 0.0))
        datasets.append({"path": f"{k}/{name}", "coordinateTransformations": [
            {"type": "scale", "scale": scale}, {"type": "translation", "translation": translation}]})
    return axes, datasets


def _downsample(block: xr.DataArray, dims: tuple[str, ...], method: str) -> xr.DataArray:
    """One level down: xarray's block mean, or every second sample."""
    if method == "nearest":
        return block.isel({d: slice(None, None, 2) for d in dims})
    with warnings.catch_warnings():  # an all-NaN block is NaN, as it should be
        warnings.simplefilter("ignore", RuntimeWarning)
        return block.coarsen({d: 2 for d in dims}, boundary="trim").mean()


def _as_dtype(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu" and values.dtype.kind == "f":
        info = np.iinfo(dtype)
        values = np.clip(np.rint(values), info.min, info.max)
    return values.astype(dtype, copy=False)


def _blocks(shape: tuple[int, ...], chunks: tuple[int, ...], budget: int) -> list[tuple[slice, ...]]:
    """Chunk-aligned blocks covering ``shape`` with at most ``budget`` elements each (at
    least one chunk); whole chunks along the last dims first."""
    per = list(chunks)
    for axis in range(len(shape) - 1, -1, -1):  # grow the trailing dims first
        while per[axis] < shape[axis] and math.prod(per) * 2 <= budget:
            per[axis] = min(shape[axis], per[axis] * 2)
    ranges = [range(0, s, p) for s, p in zip(shape, per)]
    return [tuple(slice(a, min(a + p, s)) for a, p, s in zip(start, per, shape))
            for start in itertools.product(*ranges)]


def _level_coords(da: xr.DataArray, dims: tuple[str, ...], k: int, method: str) -> xr.Dataset:
    coords = xr.Dataset(coords={d: da.coords[d] for d in da.dims if d in da.coords and da.coords[d].dims == (d,)})
    for _ in range(k):
        down = {d: coords.sizes[d] for d in dims if d in coords.dims}
        if not down:
            break
        coords = coords.isel({d: slice(None, None, 2) for d in down}) if method == "nearest" else \
            coords.coarsen({d: 2 for d in down}, boundary="trim").mean()  # type: ignore[arg-type]
    return coords


def _plan(da: xr.DataArray, dims: tuple[str, ...], levels: int | None, min_size: int,
          chunks: dict[str, int] | None) -> tuple[list[tuple[int, ...]], dict[str, int]]:
    """The shape of every level and the chunk length per dim."""
    if not dims or not set(dims) <= set(map(str, da.dims)):
        raise ConfigError(f"dims={dims} must be dims of the variable, which has {tuple(da.dims)}")
    most = max(int(da.sizes[d]) for d in dims)
    possible = 1 + int(math.floor(math.log2(max(1, min(int(da.sizes[d]) for d in dims)))))
    n = levels if levels is not None else 1 + max(0, math.ceil(math.log2(max(1, most) / max(1, min_size))))
    if not isinstance(n, (int, np.integer)) or not 1 <= n <= possible:
        raise ConfigError(f"levels must be an int from 1 to {possible} for sizes "
                          f"{ {d: da.sizes[d] for d in dims} }, got {levels!r}")
    preferred = dict(da.encoding.get("preferred_chunks") or {})
    given = dict(chunks or {})
    want = {}
    for d in map(str, da.dims):
        c = int(given.get(d) or preferred.get(d) or (256 if d in dims else 1))
        want[d] = c if d in given or d not in dims else min(256, c)
    shapes = [tuple(int(da.sizes[d]) // (2**k if d in dims else 1) for d in da.dims) for k in range(int(n))]
    return shapes, want


def _write_level(target: str, k: int, da: xr.DataArray, dims: tuple[str, ...], shape: tuple[int, ...],
                 chunks: tuple[int, ...], method: str, previous: Any, max_mem: int, bar: Any,
                 storage_options: dict[str, Any] | None) -> Any:
    """Coordinates and data of level ``k`` (from ``da`` for level 0, else from ``previous``)."""
    import zarr
    from zarr.codecs import BloscCodec

    _level_coords(da, dims, k, method).to_zarr(target, group=str(k), mode="a", zarr_format=3,
                                                consolidated=False, storage_options=storage_options)
    dtype = np.dtype(da.dtype)
    group = zarr.open_group(store=target, path=str(k), mode="a", storage_options=storage_options)
    arr = group.create_array(str(da.name), shape=shape, chunks=chunks, dtype=dtype,
                             fill_value=np.nan if dtype.kind == "f" else 0,
                             dimension_names=tuple(map(str, da.dims)),
                             compressors=BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"))
    arr.attrs.update({a: v for a, v in da.attrs.items() if a not in ("_FillValue", "missing_value", "coordinates")})
    cost = (dtype.itemsize + 8) * (2 ** len(dims) if k else 1) + dtype.itemsize  # bytes per output value
    for region in _blocks(shape, chunks, max(1, max_mem // cost)):
        if k == 0:
            values = np.asarray(da.isel(dict(zip(da.dims, region))).values)
        else:
            src = tuple(slice(2 * r.start, 2 * r.stop) if d in dims else r for d, r in zip(da.dims, region))
            values = np.asarray(_downsample(xr.DataArray(previous[src], dims=da.dims), dims, method).values)
        arr[region] = _as_dtype(values, dtype)
        if bar is not None:
            bar.update(values.size * dtype.itemsize)
    return arr


class _CallbackBar:
    """``progress(done, total)`` called as a tqdm bar would be updated."""

    def __init__(self, fn: Callable[[int, int], Any], total: int) -> None:
        self.fn, self.total, self.done = fn, int(total), 0
        fn(0, self.total)

    def update(self, n: int) -> None:
        self.done += int(n)
        self.fn(self.done, self.total)

    def close(self) -> None:
        pass


def pyramid(source: Any, target: str | os.PathLike[str], levels: int | None = None, method: str = "mean", *,
            var: str | None = None, dims: Sequence[str] | None = None, chunks: dict[str, int] | None = None,
                    min_size: int = 256, max_mem: int = 256 * 2**20,
            progress: bool | Callable[[int, int], Any] = True, overwrite: bool = False,
            storage_options: dict[str, Any] | None = None) -> Path | str:
    """Write the multiscale levels of ``source`` (a path, Dataset or DataArray; ``var``
    picks the variable) to ``target`` as an OME-NGFF v0.5 image on Zarr v3.

    ``dims``: the dims halved per level (default: the last two); ``levels``: how many
    levels including level 0 (default: until the plane fits ``min_size`` pixels);
    ``method``: ``"mean"`` (block means, NaN-skipping) or ``"nearest"``; ``chunks``: per dim
    (default: the source's chunks, at most 256 along ``dims``); ``max_mem``: bytes one block
    may take while it is downsampled; ``progress``: a progress bar (tqdm: a widget in a
    notebook), or a callable ``progress(bytes_done, bytes_total)`` (an exception it raises
    stops the build). Returns the target.
    """
    import zarr

    from .compute.job import _make_bar

    if method not in METHODS:
        raise ConfigError(f"method must be one of {METHODS}, got {method!r}")
    da = _variable(source, var)
    da = da.rename(da.name if da.name is not None else "data")
    dims = tuple(dims) if dims is not None else tuple(str(d) for d in da.dims[-2:])
    shapes, want = _plan(da, dims, levels, min_size, chunks)
    path = os.fspath(target)
    try:
        root = zarr.open_group(store=path, mode="w" if overwrite else "w-", zarr_format=3,
                               storage_options=storage_options)
    except (FileExistsError, zarr.errors.ContainsGroupError, zarr.errors.ContainsArrayError) as exc:
        raise ConfigError(f"{path!r} exists; pass overwrite=True to replace it") from exc
    axes, datasets = _axes_and_transforms(da, dims, len(shapes), method)
    root.attrs["ome"] = {"version": "0.5", "multiscales": [{
        "name": str(da.name), "axes": axes, "datasets": datasets, "type": method,
        "metadata": {"method": f"xarray.DataArray.{'coarsen(..).mean' if method == 'mean' else 'isel(::2)'}",
                     "version": xr.__version__, "writer": "tsexplore.pyramid"}}]}
    itemsize = np.dtype(da.dtype).itemsize
    total = sum(math.prod(s) for s in shapes) * itemsize
    if callable(progress):
        bar: Any = _CallbackBar(progress, total)
    else:
        bar = _make_bar(total, f"pyramid {path}") if progress else None
    previous: Any = None
    for k, shape in enumerate(shapes):
        chunks_k = tuple(min(want[str(d)], s) for d, s in zip(da.dims, shape))
        previous = _write_level(path, k, da, dims, shape, chunks_k, method, previous, max_mem, bar,
                                storage_options)
    if bar is not None:
        bar.close()
    with warnings.catch_warnings():  # zarr notes that v3 consolidation is not in the spec yet
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(root.store)
    return Path(path) if "://" not in path else path


# -- the Explorer's pyramids --------------------------------------------------------------------


#: the largest variable (with its levels) the Explorer's button builds a pyramid of
MAX_BUILD_BYTES = 64 * 2**30


class ExplorerPyramids:
    """What an Explorer needs to build the pyramid a variable of ``obj`` lacks (its "build a
    pyramid" button): a default place next to the store, and the build itself."""

    def __init__(self, obj: xr.Dataset | xr.DataArray) -> None:
        self.obj = obj

    def default_target(self, var: str) -> str:
        """``<store>_<var>_pyramid.zarr`` beside a local store, else in the working folder."""
        from .resolve import source_behind

        da = self.obj if isinstance(self.obj, xr.DataArray) else self.obj[var]
        root = getattr(source_behind(da), "root", None)
        if isinstance(root, str) and "://" not in root and root:
            store = Path(root.rstrip("/"))
            return str(store.with_name(f"{store.stem}_{var}_pyramid.zarr"))
        return str(Path.cwd() / f"{var}_pyramid.zarr")

    def why_not(self, var: str, target: str) -> str | None:
        """Why a pyramid of ``var`` should not be built into ``target`` here (None: it can):
        a variable larger than :data:`MAX_BUILD_BYTES`, or not room enough on that disk."""
        import shutil

        da = self.obj if isinstance(self.obj, xr.DataArray) else self.obj[var]
        need = int(da.nbytes) * 4 // 3  # level 0 and the levels below it (a quarter each)
        if need > MAX_BUILD_BYTES:
            return (f"{var} is {need / 1e12:.3g} TB with its levels: build its pyramid with "
                    "tse.pyramid(...) where there is room and time, then open that")
        folder = Path(target).parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if "://" not in target and shutil.disk_usage(folder).free < need:
            return f"{folder} has less than the {need / 1e9:.3g} GB free that the pyramid of {var} needs"
        return None

    def build(self, var: str, dims: Sequence[str], target: str,
              progress: Callable[[int, int], Any] | bool = True) -> Levels:
        """Write the pyramid of ``var`` halving ``dims`` to ``target``; its :class:`Levels`."""
        pyramid(self.obj, target, var=var if isinstance(self.obj, xr.Dataset) else None,
                dims=tuple(dims), progress=progress)
        return open_levels(target)


def explorer_options(obj: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for :func:`tsexplore.ui.explore` with the pyramid of ``obj`` (if it is a
    level of one) and the means to build one, unless given."""
    out = dict(kwargs)
    if isinstance(obj, (xr.Dataset, xr.DataArray)):
        if "levels" not in out:
            out["levels"] = levels_of(obj)
        out.setdefault("pyramids", ExplorerPyramids(obj))
    return out
