"""The benchmark cubes (``--cube``): the project's own, and three nobody here tuned for.

Every cube is a ``time x y x`` float32 variable ``temp`` of the same shape and chunks --
512x1024x1024 in 16x256x256 chunks (2.1 GB decoded), or with ``--small`` 64x256x256 in
16x64x64 chunks -- with ``time``/``y``/``x`` coordinates:

========  =============================================  ==============================================
name      values                                         stored as (written by)
========  =============================================  ==============================================
own       the sample cube's field (smooth eddies,         Zarr v3, blosc-zstd clevel 1, shuffle
          kept to 0.01 degC)                             (``tse.sample_data("cube")``)
noisy     the same field plus Gaussian noise, sigma 0.1  Zarr v3, blosc-zstd clevel 3, shuffle
          (seeded per frame)                             (``xarray.Dataset.to_zarr``)
zstd      the noisy values                               Zarr v3 with zarr's default codec: written
                                                         with no ``compressors`` (Zstd level 0)
                                                         (``to_zarr``)
v2lz4     the noisy values                               Zarr v2, blosc-lz4 clevel 5, shuffle: numcodecs'
                                                         ``Blosc()``, zarr-python 2's default compressor
                                                         (``to_zarr(zarr_format=2)``)
========  =============================================  ==============================================

The v2 cube's compressor is given explicitly, and it is what ``to_zarr(zarr_format=2)`` writes
with no encoding at all under zarr-python 3.1 (zarr's ``array.v2_default_compressor``, the
zarr-python 2 default): blosc lz4, clevel 5, byte shuffle, ``order`` C, ``.`` chunk keys.

``--layout`` stores hold the first 128 frames (32 with ``--small``) of a Zarr v3 cube with
that cube's codec, unsharded or in 16x1024x1024 shards of 16x256x256 or 1x256x256 inner
chunks (Zarr v2 has no sharding, so ``v2lz4`` has no layouts).

Stores live in ``data/`` (git-ignored), are written once with a progress bar, slab by slab
(bounded memory), and are marked complete only at the end, so an interrupted write is
redone. The noisy-valued cubes that are missing are written in one pass over the values.
``python -m benchmarks cubes`` writes them all and checks that the ``naive`` loop reads each
exactly as zarr does.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .common import ROOT, VARIABLE, DataSpec, log

#: the noisy cubes' noise: sigma, and the seed mixed with each frame's index
SIGMA = 0.1
NOISE_SEED = 20261203
#: changes when what a cube holds changes, so an older store is rewritten
RECIPE = "tsexplore-bench/1"
DATA_DIR = ROOT / "data"

SHAPES = {"full": ((512, 1024, 1024), (16, 256, 256)), "small": ((64, 256, 256), (16, 64, 64))}
#: ``--layout``: the frames kept, and the inner chunks and shards, full size then --small
LAYOUT_FRAMES = {"full": 128, "small": 32}
LAYOUTS: dict[str, dict[str, tuple[tuple[int, int, int], tuple[int, int, int] | None]]] = {
    "unsharded": {"full": ((16, 256, 256), None), "small": ((16, 64, 64), None)},
    "sharded-16": {"full": ((16, 256, 256), (16, 1024, 1024)),
                   "small": ((16, 64, 64), (16, 256, 256))},
    "sharded-1": {"full": ((1, 256, 256), (16, 1024, 1024)),
                  "small": ((1, 64, 64), (16, 256, 256))},
}
LAYOUT_SUFFIX = {"unsharded": "none", "sharded-16": "16", "sharded-1": "1"}


@dataclass(frozen=True)
class Cube:
    """One kind of benchmark cube: its values, its codec, its Zarr format."""

    name: str
    about: str
    zarr_format: int
    #: the codec in words (for tables)
    codec: str
    #: blosc-compressed: a frame of a chunk can be decoded by blosc blocks
    blosc: bool
    noisy: bool
    #: the ``compressors`` encoding given to ``to_zarr``; None: none given (zarr's default)
    compressors: Callable[[], Any] | None


def _blosc_zstd3() -> Any:
    from zarr.codecs import BloscCodec

    return (BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),)


def _blosc_lz4() -> Any:
    from numcodecs import Blosc

    return (Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE),)


CUBES: dict[str, Cube] = {c.name: c for c in (
    Cube("own", "the sample cube (tse.sample_data)", 3, "blosc-zstd 1", True, False, None),
    Cube("noisy", f"the sample field + N(0, {SIGMA}) noise", 3, "blosc-zstd 3", True, True,
         _blosc_zstd3),
    Cube("zstd", "the noisy values, zarr v3's default codec", 3, "zstd (zarr default)", False,
         True, None),
    Cube("v2lz4", "the noisy values, zarr v2 as xarray writes it", 2, "blosc-lz4 5 (v2)", True,
         True, _blosc_lz4),
)}


def names(text: str | None) -> list[str]:
    """``"all"``, ``"own,zstd"`` or one name -> the cube names, checked."""
    if not text:
        return ["own"]
    out = list(CUBES) if text.strip() == "all" else [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in out if s not in CUBES]
    if unknown or not out:
        raise SystemExit(f"unknown cube(s) {unknown or text!r}; choose from {', '.join(CUBES)} "
                         "or all")
    return out


class NoLayout(SystemExit):
    """A ``--layout`` asked of a cube that has none (Zarr v2): skipped, not failed."""

    def __init__(self, message: str) -> None:
        super().__init__(0)
        self.message = message


def store_path(cube: str, size: str, layout: str | None = None,
               data_dir: Path = DATA_DIR) -> Path:
    """Where a cube (or one of its ``--layout`` stores) lives."""
    small = "_small" if size == "small" else ""
    if layout:
        stem = "bench_sharded" if cube == "own" else f"bench_{cube}_sharded"
        return Path(data_dir) / f"{stem}_{LAYOUT_SUFFIX[layout]}{small}.zarr"
    stem = "bench_cube" if cube == "own" else f"bench_{cube}"
    return Path(data_dir) / f"{stem}{small}.zarr"


def spec_for(cube: str, size: str, layout: str | None = None,
             data_dir: Path = DATA_DIR) -> DataSpec:
    """The spec of a cube (in ``data/``) or of one of its layout stores (in ``data_dir``);
    nothing is written here (see :func:`ensure`)."""
    c = CUBES[cube]
    shape, chunks = SHAPES[size]
    if not layout:
        return DataSpec(store_path(cube, size), shape, chunks, size, cube=cube,
                        zarr_format=c.zarr_format)
    if c.zarr_format == 2:
        raise NoLayout(f"cube {cube!r} is Zarr v2, which has no sharding: no --layout {layout} "
                       "for it (skipped)")
    chunks = LAYOUTS[layout][size][0]
    shape = (LAYOUT_FRAMES[size], *shape[1:])
    return DataSpec(store_path(cube, size, layout, data_dir), shape, chunks, size, cube=cube,
                    zarr_format=c.zarr_format, layout=layout)


def shards_of(spec: DataSpec) -> tuple[int, int, int] | None:
    return LAYOUTS[spec.layout][spec.size][1] if spec.layout else None


# -- what is on disk ------------------------------------------------------------------------------
def read_meta(path: Path) -> dict[str, Any] | None:
    """The group attributes, shape, chunks and format of the cube at ``path``; None if absent."""
    path = Path(path)
    try:
        if (path / "zarr.json").exists():
            attrs = json.loads((path / "zarr.json").read_text()).get("attributes", {})
            meta = json.loads((path / VARIABLE / "zarr.json").read_text())
            chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
            codecs = meta.get("codecs", [])
            if codecs and codecs[0].get("name") == "sharding_indexed":
                chunks = codecs[0]["configuration"]["chunk_shape"]
            fmt = 3
        else:
            zattrs = path / ".zattrs"
            attrs = json.loads(zattrs.read_text()) if zattrs.exists() else {}
            meta = json.loads((path / VARIABLE / ".zarray").read_text())
            chunks, fmt = meta["chunks"], 2
    except (OSError, ValueError, KeyError):
        return None
    return {"attrs": attrs, "shape": tuple(int(s) for s in meta["shape"]),
            "chunks": tuple(int(c) for c in chunks), "zarr_format": fmt}


def is_complete(spec: DataSpec) -> bool:
    """The store at ``spec.path`` is a complete cube of this spec's shape and chunks."""
    meta = read_meta(spec.path)
    if meta is None or not meta["attrs"].get("complete", False):
        return False
    if meta["shape"] != tuple(spec.shape) or meta["chunks"] != tuple(spec.chunks):
        return False
    if spec.cube != "own" and meta["attrs"].get("recipe") != RECIPE:
        return False
    return meta["zarr_format"] == spec.zarr_format


def existing(path: Path) -> DataSpec | None:
    """The spec of a complete cube at any ``path`` (``--path``), read from its metadata."""
    meta = read_meta(path)
    if meta is None or not meta["attrs"].get("complete", False):
        return None
    nt = meta["shape"][0]
    size = "small" if nt <= SHAPES["small"][0][0] and meta["shape"][1] <= 256 else "full"
    return DataSpec(Path(path), meta["shape"], meta["chunks"], size,
                    cube=str(meta["attrs"].get("bench_cube", "custom")),
                    zarr_format=meta["zarr_format"])


# -- writing --------------------------------------------------------------------------------------
def noisy_frames(t0: int, t1: int, ny: int, nx: int) -> np.ndarray:
    """Frames ``t0..t1`` of the noisy cubes: the sample field plus N(0, SIGMA) noise seeded by
    the frame's index (any slab gives the same values)."""
    from tsexplore.sample import cube_frames

    out = cube_frames(t0, t1, ny, nx)
    for i, t in enumerate(range(t0, t1)):
        rng = np.random.default_rng((NOISE_SEED, t))
        out[i] += np.float32(SIGMA) * rng.standard_normal((ny, nx), dtype=np.float32)
    return out


def ensure(specs: Sequence[DataSpec], progress: bool = True) -> None:
    """Write every store of ``specs`` that is not complete; those with noisy values in one
    pass over the values (per shape)."""
    todo = [s for s in dict.fromkeys(specs) if not is_complete(s)]
    for spec in [s for s in todo if s.cube == "own"]:
        _write_own(spec, progress)
    noisy = [s for s in todo if s.cube != "own"]
    for shape in dict.fromkeys(s.shape for s in noisy):
        _write_noisy([s for s in noisy if s.shape == shape], progress)
    if todo:
        os.sync()  # written back, so that posix_fadvise can evict the pages before each run


def _write_own(spec: DataSpec, progress: bool) -> None:
    import tsexplore as tse

    log(f"writing {spec.path} {spec.shape}, chunks {spec.chunks}"
        + (f", shards {shards_of(spec)}" if spec.layout else "") + " (once)")
    tse.sample_data("cube", spec.path, shape=spec.shape, chunks=spec.chunks, size=spec.size,
                    shards=shards_of(spec), overwrite=True, progress=progress)
    tse.close()


def _write_noisy(specs: list[DataSpec], progress: bool) -> None:
    """Write ``specs`` (one shape) with ``xarray.Dataset.to_zarr``: the metadata and
    coordinates first, then the values slab by slab with ``region=``, then ``complete``."""
    import warnings

    import zarr
    from tqdm.auto import tqdm

    nt, ny, nx = specs[0].shape
    step = max((shards_of(s) or s.chunks)[0] for s in specs)
    for s in specs:
        log(f"writing {s.path} ({CUBES[s.cube].codec}, Zarr v{s.zarr_format}) {s.shape}, "
            f"chunks {s.chunks}" + (f", shards {shards_of(s)}" if s.layout else "") + " (once)")
        _template(s, step)
    bar = tqdm(total=nt, desc=f"writing {len(specs)} cube(s)", unit="frame", disable=not progress)
    for t0 in range(0, nt, step):
        t1 = min(nt, t0 + step)
        block = noisy_frames(t0, t1, ny, nx)
        for s in specs:
            _region(s, block, t0, t1)
        bar.update(t1 - t0)
    bar.close()
    for s in specs:
        group = zarr.open_group(str(s.path), mode="r+")
        group.attrs["complete"] = True
        with warnings.catch_warnings():  # zarr notes that v3 consolidation is not in the spec
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(str(s.path))


def _template(spec: DataSpec, step: int) -> None:
    """The store's metadata and coordinates (``to_zarr(compute=False)`` over a lazy ``temp``),
    as xarray writes them: dims, CF-encoded time, ``_FillValue`` NaN, consolidated."""
    import warnings

    import dask.array as da
    import pandas as pd
    import xarray as xr

    nt, ny, nx = spec.shape
    cube = CUBES[spec.cube]
    temp = xr.Variable(("time", "y", "x"),
                       da.zeros(spec.shape, dtype="float32", chunks=(step, ny, nx)),
                       {"units": "degC", "long_name": "sea surface temperature (synthetic)"})
    ds = xr.Dataset(
        {VARIABLE: temp},
        coords={"time": pd.date_range("2000-01-01", periods=nt, freq="D"),
                "y": ("y", np.linspace(-60, 60, ny), {"units": "degrees_north"}),
                "x": ("x", np.linspace(0, 360, nx, endpoint=False), {"units": "degrees_east"})},
        attrs={"title": f"tsexplore benchmark cube {spec.cube!r}: {cube.about}",
               "bench_cube": spec.cube, "recipe": RECIPE, "complete": False})
    encoding: dict[str, Any] = {"chunks": spec.chunks}
    if shards_of(spec):
        encoding["shards"] = shards_of(spec)
    if cube.compressors is not None:
        encoding["compressors"] = cube.compressors()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(str(spec.path), mode="w", zarr_format=spec.zarr_format, compute=False,
                   encoding={VARIABLE: encoding})


def _region(spec: DataSpec, block: np.ndarray, t0: int, t1: int) -> None:
    import warnings

    import xarray as xr

    ds = xr.Dataset({VARIABLE: (("time", "y", "x"), block)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(str(spec.path), region={"time": slice(t0, t1)})


# -- python -m benchmarks cubes ------------------------------------------------------------------
def check(spec: DataSpec, rows: int | None) -> dict[str, Any]:
    """Does the ``naive`` loop read ``spec``'s store exactly as zarr does? Chunk-rows (all, or
    ``rows`` spread over the cube), single frames and, at small size, the mean over time."""
    import zarr

    from .naive import NaiveCube

    arr = zarr.open_array(str(spec.path), path=VARIABLE, mode="r")
    cube = NaiveCube(str(spec.path), VARIABLE)
    ct = cube.chunks[0]
    nrows = -(-cube.shape[0] // ct)
    picks = range(nrows) if rows is None or rows >= nrows else sorted(
        {round(i * (nrows - 1) / max(1, rows - 1)) for i in range(rows)})
    t0 = time.perf_counter()
    same = True
    for r in picks:
        whole = np.stack([cube.frame(t, ahead=0) for t in range(r * ct, min(cube.shape[0], (r + 1) * ct))])
        same = same and np.array_equal(whole, arr[r * ct:(r + 1) * ct], equal_nan=True)
    for t in (0, cube.shape[0] // 2, cube.shape[0] - 1):
        same = same and np.array_equal(cube.frame(t), arr[t], equal_nan=True)
    out: dict[str, Any] = {"rows_checked": len(picks), "frames_equal": bool(same)}
    if spec.size == "small":
        ref = arr[:].astype(np.float64).mean(axis=0)
        out["mean_equal"] = bool(np.allclose(cube.mean_time(), ref, rtol=1e-9, atol=0))
    cube.close()
    out["codec"] = cube.describe()
    out["seconds"] = time.perf_counter() - t0
    return out


def main(argv: list[str]) -> int:
    """``python -m benchmarks cubes``: write every cube (and layout store) that is missing and
    check that ``naive`` reads each as zarr does."""
    p = argparse.ArgumentParser(prog="python -m benchmarks cubes", description=main.__doc__)
    p.add_argument("--cube", default="all", help="cube name(s), comma-separated, or all")
    p.add_argument("--small", action="store_true", help="the 64x256x256 cubes")
    p.add_argument("--layouts", action="store_true",
                   help="also the --layout stores of every Zarr v3 cube")
    p.add_argument("--data-dir", type=Path, default=DATA_DIR,
                   help="where --layout stores live (default data/)")
    p.add_argument("--rows", type=int, default=None,
                   help="chunk-rows checked per cube (default: all with --small, 3 at full size)")
    p.add_argument("--no-check", action="store_true", help="write only")
    args = p.parse_args(argv)
    size = "small" if args.small else "full"
    specs = [spec_for(c, size) for c in names(args.cube)]
    if args.layouts:
        specs += [spec_for(c, size, lay, args.data_dir) for c in names(args.cube)
                  if CUBES[c].zarr_format == 3 for lay in LAYOUTS]
    ensure(specs)
    status = 0
    for spec in specs:
        if args.no_check or spec.layout and spec.layout != "unsharded":
            print(f"{spec.cube:<6} {spec.layout or '':<10} {spec.path}")
            continue
        res = check(spec, args.rows if args.rows is not None else (None if args.small else 3))
        ok = res["frames_equal"] and res.get("mean_equal", True)
        status = status or (0 if ok else 1)
        print(f"{spec.cube:<6} {spec.layout or '':<10} {'OK  ' if ok else 'DIFF'} naive == zarr "
              f"({res['rows_checked']} chunk-rows, 3 frames"
              + (", mean over time" if "mean_equal" in res else "")
              + f"; {res['codec']}; {res['seconds']:.1f} s)  {spec.path}")
    return status
