"""Tutorial datasets written on demand: ``tse.sample_data(name, path)``.

``"cube"``: a ``time x y x`` float32 Zarr v3 store that looks like model output (moving
warm and cold eddies over a seasonal cycle, plus small-scale noise, kept to 0.01 degC as
packed archives store it), blosc-zstd compressed,
chunks of ``16 x 256 x 256``. Full size is 256 x 1024 x 1024 (1 GiB); with the setting
``sample_size="small"`` (``TSEXPLORE_SAMPLE_SIZE=small``, used by the tests) it is
32 x 128 x 128 with 8 x 64 x 64 chunks.

``"cells"``: a ``time x c x y x`` uint16 Zarr v3 store that looks like a fluorescence
time-lapse: three channels (``c`` = DAPI nuclei, GFP cytoplasm, RFP spots) of cells drifting
over a dim background with camera noise; one chunk per channel and time step, ``1 x 1 x 256 x
256``. Full size is 64 x 3 x 512 x 512; small is 12 x 3 x 96 x 128 (chunks ``1 x 1 x 48 x 64``).
The Explorer shows ``c`` as an additive composite.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from . import config
from .errors import ConfigError

SIZES: dict[str, dict[str, tuple[tuple[int, ...], tuple[int, ...]]]] = {
    "cube": {
        "full": ((256, 1024, 1024), (16, 256, 256)),
        "small": ((32, 128, 128), (8, 64, 64)),
    },
    "cells": {
        "full": ((64, 3, 512, 512), (1, 1, 256, 256)),
        "small": ((12, 3, 96, 128), (1, 1, 48, 64)),
    },
}
CELL_CHANNELS = ("DAPI", "GFP", "RFP")


def cells_frames(t0: int, t1: int, ny: int, nx: int, seed: int = 0) -> np.ndarray:
    """Frames ``t0..t1`` of the cells sample, ``(t, 3, ny, nx)`` uint16 (deterministic)."""
    rng = np.random.default_rng(seed)
    radius = max(5.0, min(ny, nx) / 16)
    ncells = max(4, int(ny * nx / (radius**2 * 12)))
    cy, cx = rng.random(ncells) * ny, rng.random(ncells) * nx
    vy, vx = rng.normal(0, 0.4, ncells), rng.normal(0, 0.4, ncells)
    size = (0.6 + 0.4 * rng.random(ncells)) * radius
    spots = rng.random((ncells, 2)) - 0.5
    yy = np.arange(ny, dtype=np.float32)[:, None]
    xx = np.arange(nx, dtype=np.float32)[None, :]
    out = np.empty((t1 - t0, 3, ny, nx), dtype=np.uint16)
    for i, t in enumerate(range(t0, t1)):
        planes = np.zeros((3, ny, nx), np.float32)
        for k in range(ncells):
            py, px = (cy[k] + vy[k] * t) % ny, (cx[k] + vx[k] * t) % nx
            r2 = ((yy - py) ** 2 + (xx - px) ** 2) / size[k] ** 2
            planes[0] += 3000 * np.exp(-r2 * 2.0)  # nucleus
            planes[1] += 1400 * np.exp(-((np.sqrt(r2) - 1.4) ** 2) * 3.0)  # cytoplasm ring
            sy, sx = py + spots[k, 0] * size[k] * 2, px + spots[k, 1] * size[k] * 2
            planes[2] += 2500 * np.exp(-((yy - sy) ** 2 + (xx - sx) ** 2) / 3.0)  # a spot
        noise = np.random.default_rng(seed * 7919 + t).normal(0, 30, planes.shape).astype(np.float32)
        out[i] = np.clip(planes + np.array([200, 150, 100], np.float32)[:, None, None] + noise, 0, 65535)
    return out


def cube_frames(t0: int, t1: int, ny: int, nx: int, seed: int = 0) -> np.ndarray:
    """Frames ``t0..t1`` of the cube (deterministic; any time range gives the same values)."""
    y = np.linspace(0, 1, ny, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, nx, dtype=np.float32)[None, :]
    base = 15 + 12 * np.cos(np.pi * (y - 0.5)) + 2 * np.sin(2 * np.pi * x)
    blobs = []  # six drifting warm and cold eddies
    for k in range(6):
        rng = np.random.default_rng(seed * 1000 + k)
        cy, cx, vy, vx = rng.random(4)
        blobs.append((cy, cx, vy, vx, (1.5 + rng.random()) * (1 if k % 2 else -1)))
    out = np.empty((t1 - t0, ny, nx), dtype=np.float32)
    for i, t in enumerate(range(t0, t1)):
        frame = out[i]
        np.add(base, np.float32(3 * np.sin(2 * np.pi * t / 64)), out=frame)  # the season
        for cy, cx, vy, vx, amp in blobs:
            cy = (cy + 0.004 * (vy - 0.5) * t) % 1
            cx = (cx + 0.006 * (vx - 0.5) * t) % 1
            # a Gaussian is separable: exp(-(dy² + dx²) / s) = exp(-dy² / s) * exp(-dx² / s),
            # two vectors and one outer product instead of a full-frame exp
            gy = (amp * np.exp(-((y - cy) ** 2) / 0.004)).astype(np.float32)
            frame += gy * np.exp(-((x - cx) ** 2) / 0.004).astype(np.float32)
        noise = np.random.default_rng(seed * 100003 + t).standard_normal((ny, nx), dtype=np.float32)
        frame += np.float32(0.05) * noise
        # stored at 0.01 degC precision, as packed reanalysis/model archives do (ERA5: 16 bits)
        np.round(frame * 100, out=frame)
        frame /= 100
    return out


def sample_data(
    name: str = "cube",
    path: str | os.PathLike[str] | None = None,
    *,
    shape: tuple[int, int, int] | None = None,
    chunks: tuple[int, int, int] | None = None,
    size: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    shards: tuple[int, int, int] | None = None,
) -> Path:
    """Write the tutorial dataset ``name`` to ``path`` (default ``data/<name>.zarr``).

    ``shards``: store the array sharded (Zarr v3 ``sharding_indexed``), ``chunks`` being the
    inner chunks and ``shards`` the shape of one shard object. Returns the path. An
    existing store with the same shape and layout is kept unless ``overwrite``.
    """
    if name not in SIZES:
        raise ConfigError(f"unknown sample dataset {name!r}; available: {sorted(SIZES)}")
    size = size or config.get().sample_size
    if size not in SIZES[name]:
        raise ConfigError(f"size must be one of {sorted(SIZES[name])}, got {size!r}")
    default_shape, default_chunks = SIZES[name][size]
    shape = tuple(shape or default_shape)  # type: ignore[assignment]
    chunks = tuple(chunks or default_chunks)  # type: ignore[assignment]
    target = Path(path) if path is not None else Path("data") / f"{name}.zarr"
    import zarr

    if target.exists() and not overwrite:
        try:
            existing = zarr.open_group(str(target), mode="r")
            temp = existing["temp" if name == "cube" else "cells"]
            same = temp.shape == shape and tuple(temp.chunks) == chunks  # type: ignore[union-attr]
            same = same and (temp.shards or None) == (tuple(shards) if shards else None)  # type: ignore[union-attr]
            if same and existing.attrs.get("complete"):
                return target
        except Exception:  # noqa: BLE001 - anything odd: rewrite it
            pass
    if name == "cells":
        return _write_cells(target, shape, chunks, progress)  # type: ignore[arg-type]
    return _write_cube(target, shape, chunks, progress, shards)  # type: ignore[arg-type]


def _write_cube(target: Path, shape: tuple[int, int, int], chunks: tuple[int, int, int],
                progress: bool, shards: tuple[int, int, int] | None = None) -> Path:
    import zarr
    from zarr.codecs import BloscCodec

    nt, ny, nx = shape
    group = zarr.open_group(str(target), mode="w")
    temp = group.create_array(
        "temp", shape=shape, chunks=chunks, dtype="float32", fill_value=np.nan,
        compressors=BloscCodec(cname="zstd", clevel=1, shuffle="shuffle"),
        dimension_names=("time", "y", "x"), config={"write_empty_chunks": True},
        shards=tuple(shards) if shards else None,
    )
    temp.attrs.update({"units": "degC", "long_name": "sea surface temperature (synthetic)"})
    for dim, n, values, attrs in (
        ("time", nt, np.arange(nt, dtype="int64"), {"units": "days since 2000-01-01", "calendar": "standard"}),
        ("y", ny, np.linspace(-60, 60, ny), {"units": "degrees_north"}),
        ("x", nx, np.linspace(0, 360, nx, endpoint=False), {"units": "degrees_east"}),
    ):
        arr = group.create_array(dim, shape=(n,), chunks=(n,), dtype=values.dtype, dimension_names=(dim,))
        arr[:] = values
        arr.attrs.update(attrs)
    group.attrs.update({"title": "tsexplore sample cube", "complete": False})
    bar = _progress(nt, f"writing {target}", progress)
    step = shards[0] if shards else chunks[0]  # whole shards at once: each is written once
    for t0 in range(0, nt, step):
        t1 = min(nt, t0 + step)
        temp[t0:t1] = cube_frames(t0, t1, ny, nx)
        bar.update(t1 - t0)
    bar.close()
    group.attrs["complete"] = True
    import warnings

    with warnings.catch_warnings():  # zarr notes that v3 consolidation is not in the spec yet
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(target))  # remote readers cannot list folders
    return target


def _write_cells(target: Path, shape: tuple[int, int, int, int], chunks: tuple[int, int, int, int],
                 progress: bool) -> Path:
    import zarr
    from zarr.codecs import BloscCodec

    nt, nc, ny, nx = shape
    if nc != len(CELL_CHANNELS):
        raise ConfigError(f"the cells sample has {len(CELL_CHANNELS)} channels, got shape {shape}")
    group = zarr.open_group(str(target), mode="w")
    cells = group.create_array(
        "cells", shape=shape, chunks=chunks, dtype="uint16", fill_value=0,
        compressors=BloscCodec(cname="zstd", clevel=1, shuffle="bitshuffle"),
        dimension_names=("time", "c", "y", "x"), config={"write_empty_chunks": True},
    )
    cells.attrs.update({"long_name": "fluorescence (synthetic)", "units": "counts"})
    coords: list[tuple[str, int, Any, dict[str, str]]] = [
        ("time", nt, np.arange(nt, dtype="float64") * 30.0, {"units": "s"}),
        ("c", nc, np.array(CELL_CHANNELS, dtype=object), {"long_name": "channel"}),
        ("y", ny, np.arange(ny, dtype="float64") * 0.65, {"units": "um"}),
        ("x", nx, np.arange(nx, dtype="float64") * 0.65, {"units": "um"}),
    ]
    for dim, n, values, attrs in coords:
        arr = group.create_array(dim, shape=(n,), chunks=(n,), dtype=str if values.dtype == object else values.dtype, dimension_names=(dim,))
        arr[:] = values
        arr.attrs.update(attrs)
    group.attrs.update({"title": "tsexplore sample cells", "complete": False})
    bar = _progress(nt, f"writing {target}", progress)
    for t0 in range(0, nt, chunks[0]):
        t1 = min(nt, t0 + chunks[0])
        cells[t0:t1] = cells_frames(t0, t1, ny, nx)
        bar.update(t1 - t0)
    bar.close()
    group.attrs["complete"] = True
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(target))
    return target


def _progress(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        class _Null:
            def update(self, n: int) -> None: ...
            def close(self) -> None: ...
        return _Null()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="frame")
