"""tse.rechunk: the new store equals the source, in the layout asked for, in bounded memory."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tsexplore as tse
from tsexplore.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def write_source(path: Path, data: np.ndarray, chunks: tuple[int, ...], zarr_format: int = 3) -> Path:
    """A Zarr store written by xarray: one variable, index coords (one of them times), attrs."""
    dims = ("time", "y", "x")[-data.ndim:] if data.ndim <= 3 else tuple(f"d{i}" for i in range(data.ndim))
    coords = {d: np.arange(n) * 0.5 for d, n in zip(dims, data.shape)}
    if dims[0] == "time":
        coords["time"] = np.datetime64("2001-01-01") + np.arange(data.shape[0]).astype("timedelta64[D]")
    ds = xr.Dataset({"v": (dims, data, {"units": "K", "long_name": "values"})}, coords=coords,
                    attrs={"title": "rechunk test", "n": 3})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=zarr_format, encoding={"v": {"chunks": chunks}},
                   write_empty_chunks=True, consolidated=zarr_format == 2)
    return path


@st.composite
def cases(draw: st.DrawFn) -> tuple:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 24), min_size=ndim, max_size=ndim)))
    # at most 5 chunks along a dim, so an example writes at most a few hundred files
    src = tuple(draw(st.integers(-(-s // 5), s)) for s in shape)
    tgt = tuple(draw(st.integers(-(-s // 5), s)) for s in shape)
    shards = None
    if draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 3)) for c in tgt)
    codec = draw(st.sampled_from([None, "none", "blosc-lz4-5", "zstd-1"]))
    dtype = draw(st.sampled_from(["float32", "int16", "float64"]))
    # one worker: half of max_mem for 3 blocks of 1..6 of the largest chunk or shard (small
    # blocks make rechunker's plan go through the intermediate store)
    unit = max(math.prod(src), math.prod(shards or tgt)) * np.dtype(dtype).itemsize
    max_mem = 2 * 3 * unit * draw(st.integers(1, 6))
    return shape, src, tgt, shards, codec, max_mem, dtype


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases(), seed=st.integers(0, 2**16))
def test_rechunk_equals_the_source(tmp_path_factory: pytest.TempPathFactory, case: tuple, seed: int) -> None:
    shape, src_chunks, tgt, shards, codec, max_mem, dtype = case
    folder = tmp_path_factory.mktemp("rechunk")
    rng = np.random.default_rng(seed)
    data = (rng.standard_normal(shape) * 100).astype(dtype)
    source = write_source(folder / "src.zarr", data, src_chunks)
    dims = tse.open_dataset(source)["v"].dims
    out = tse.rechunk(source, folder / "out.zarr", chunks=dict(zip(dims, tgt)), codec=codec,
                      shards=dict(zip(dims, shards)) if shards else None, max_mem=max_mem,
                      workers=1, progress=False)
    got = tse.open_dataset(out)
    xr.testing.assert_identical(got, tse.open_dataset(source))
    np.testing.assert_array_equal(got["v"].values, data)  # and against the numbers written
    arr = zarr.open_array(str(out / "v"))
    assert arr.metadata.zarr_format == 3
    assert tuple(arr.chunks) == tgt
    if shards:  # shards stop at the chunks that cover the array
        shards = tuple(min(sh, -(-s // c) * c) for sh, c, s in zip(shards, tgt, shape))
    assert (tuple(arr.shards) if arr.shards else None) == (shards if shards != tgt else None)
    assert not list(folder.glob(".out.zarr.rechunk-*"))  # the intermediate store is gone


def test_attributes_coordinates_and_codecs_are_kept(tmp_path: Path) -> None:
    data = np.arange(6 * 10 * 12, dtype="float32").reshape(6, 10, 12)
    source = write_source(tmp_path / "src.zarr", data, (2, 5, 12))
    out = tse.rechunk(source, tmp_path / "out.zarr", chunks={"time": 6, "y": 2, "x": 3}, progress=False)
    arr = zarr.open_array(str(out / "v"))
    assert arr.chunks == (6, 2, 3)
    assert arr.compressors == zarr.open_array(str(source / "v")).compressors  # codec=None keeps it
    ds = tse.open_dataset(out)
    assert ds.attrs == {"title": "rechunk test", "n": 3}
    assert ds["v"].attrs == {"units": "K", "long_name": "values"}
    assert ds["time"].dtype.kind == "M"
    xr.testing.assert_identical(ds, xr.open_zarr(source, consolidated=False).load())  # xarray's own reading too
    # a tuple of chunks, a new codec, and a Zarr v2 source
    v2 = write_source(tmp_path / "v2.zarr", data, (3, 10, 4), zarr_format=2)
    out2 = tse.rechunk(v2, tmp_path / "out2.zarr", chunks=(1, 10, 12), codec="none", progress=False)
    assert zarr.open_array(str(out2 / "v")).compressors == ()
    xr.testing.assert_identical(tse.open_dataset(out2), tse.open_dataset(v2))


def test_rechunk_an_in_memory_dataset_and_a_dataarray(tmp_path: Path) -> None:
    da = xr.DataArray(np.random.default_rng(0).random((20, 30)), dims=("a", "b"), name="r",
                      coords={"a": np.arange(20)}, attrs={"k": "v"})
    out = tse.rechunk(da, tmp_path / "da.zarr", chunks={"a": 4}, progress=False)
    got = tse.open_dataset(out)["r"]
    assert got.tse.sources[0].chunks == (4, 30)
    xr.testing.assert_identical(got, da)


def test_rechunk_shows_progress(small_cube: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tse.rechunk(small_cube, tmp_path / "p.zarr", chunks={"time": 32, "y": 16, "x": 16})
    assert "rechunk" in capsys.readouterr().err


def test_rechunk_rejects_bad_requests(small_cube: Path, tmp_path: Path) -> None:
    good = {"time": 32, "y": 16, "x": 16}
    with pytest.raises(ConfigError, match="overlaps the source"):
        tse.rechunk(small_cube, small_cube / "inside.zarr", chunks=good)
    with pytest.raises(ConfigError, match="names dims"):
        tse.rechunk(small_cube, tmp_path / "a.zarr", chunks={"depth": 4})
    with pytest.raises(ConfigError, match="whole multiples"):
        tse.rechunk(small_cube, tmp_path / "b.zarr", chunks=good, shards={"y": 24})
    with pytest.raises(ConfigError, match="too small"):
        tse.rechunk(small_cube, tmp_path / "c.zarr", chunks=good, max_mem="100kB")
    with pytest.raises(ConfigError, match="max_mem must be"):
        tse.rechunk(small_cube, tmp_path / "d.zarr", chunks=good, max_mem="lots")
    with pytest.raises(ConfigError, match="unknown codec"):
        tse.rechunk(small_cube, tmp_path / "e.zarr", chunks=good, codec="brotli")
    (tmp_path / "f.zarr").mkdir()
    with pytest.raises(ConfigError, match="exists"):
        tse.rechunk(small_cube, tmp_path / "f.zarr", chunks=good)


PEAK_SCRIPT = """
import json, sys
import dask.array, zarr  # what tse.rechunk runs on: the process itself, before any data
import tsexplore as tse

def status(field):  # this process's (ru_maxrss would include the forking parent's)
    line = [x for x in open("/proc/self/status") if x.startswith(field)][0]
    return int(line.split()[1]) * 1024

base = status("VmRSS")
side = int(sys.argv[3])
out = tse.rechunk(sys.argv[1], sys.argv[2], chunks={"time": 64, "y": side, "x": side},
                  max_mem="64MB", progress=False)
print(json.dumps({"base": base, "peak": status("VmHWM"),
                  "chunks": tse.open_dataset(out)["v"].tse.sources[0].chunks}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("side", [32, 48])
def test_peak_memory_stays_within_max_mem(tmp_path: Path, side: int) -> None:
    """A 256 MiB array, four times max_mem, rechunked from 8x128x128 to time series of
    64 x side x side (32: blocks aligned with both grids are copied directly; 48: the plan goes
    through the intermediate store): the process grows, from where its imports left it,
    by under max_mem + 150 MB."""
    store = zarr.create_array(str(tmp_path / "big.zarr"), name="v", shape=(64, 1024, 1024),
                              chunks=(8, 128, 128), dtype="float32", dimension_names=("time", "y", "x"))
    rng = np.random.default_rng(0)
    for t in range(0, 64, 8):
        store[t:t + 8] = np.round(rng.standard_normal((8, 1024, 1024), dtype=np.float32) * 100) / 100
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(tmp_path / "big.zarr"),
                           str(tmp_path / "out.zarr"), str(side)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert tuple(result["chunks"]) == (64, side, side)
    grown = result["peak"] - result["base"]
    assert grown <= 64e6 + 150e6, (
        f"peak RSS {result['peak'] / 2**20:.0f} MiB, {grown / 2**20:.0f} MiB above the "
        f"{result['base'] / 2**20:.0f} MiB after the imports")
    got = zarr.open_array(str(tmp_path / "out.zarr" / "v"))
    for t, y, x in [(0, 0, 0), (63, 1023, 1023), (17, 500, 3)]:  # spot checks against the source
        assert got[t, y, x] == store[t, y, x]
    np.testing.assert_array_equal(got[:, 96:160, 512:530], store[:, 96:160, 512:530])
