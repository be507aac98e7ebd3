"""Sparse Zarr stores: absent chunks read as the fill value by default, as zarr and xarray do.

The truth is the store as ``xr.open_zarr`` / zarr-python read it, and the chunk files that are
really on disk (``ds.to_zarr()`` with default settings writes no chunk equal to the fill
value). ``missing="raise"`` stays the strict opt-in.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import tsexplore as tse
from tsexplore.controller import PlaneGeometry, ViewController
from tsexplore.engine import get_engine
from tsexplore.errors import MissingChunkError
from tsexplore.ui.planes import chunk_states, watch
from tsexplore.xarray import sources_of

SHAPE, CHUNKS = (4, 8, 12), (2, 4, 4)
pytestmark = pytest.mark.filterwarnings(
    "ignore:Consolidated metadata:UserWarning",
    "ignore:Failed to open Zarr store with consolidated metadata:RuntimeWarning",
)


def _present(path: Path, name: str, fmt: int) -> set[tuple[int, ...]]:
    """The chunk indices whose files exist (independent of tsexplore and zarr)."""
    folder = path / name
    if fmt == 3:
        files = [p.relative_to(folder / "c") for p in (folder / "c").rglob("*") if p.is_file()]
        return {tuple(int(x) for x in f.parts) for f in files}
    return {tuple(int(x) for x in p.name.split(".")) for p in folder.iterdir() if p.name[0].isdigit()}


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def sparse(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, int]:
    """A store written by ``to_zarr`` with defaults: an all-NaN region is not stored."""
    fmt = request.param
    values = np.random.default_rng(3).standard_normal(SHAPE).astype("float32")
    values[:, 4:, 4:] = np.nan  # chunks (t, 1, 1) and (t, 1, 2) are all NaN
    ds = xr.Dataset({"v": (("time", "y", "x"), values)})
    ds["v"].encoding["chunks"] = CHUNKS
    path = tmp_path / f"sparse{fmt}.zarr"
    ds.to_zarr(path, zarr_format=fmt, mode="w")
    return path, fmt


def test_default_reads_absent_chunks_as_xarray_does(sparse: tuple[Path, int]) -> None:
    path, fmt = sparse
    present = _present(path, "v", fmt)
    grid = tuple(math.ceil(s / c) for s, c in zip(SHAPE, CHUNKS))
    absent = {(t, y, x) for t in range(grid[0]) for y in range(grid[1]) for x in range(grid[2])} - present
    assert absent == {(t, 1, x) for t in range(2) for x in (1, 2)}  # the store really is sparse
    expected = xr.open_zarr(path, chunks=None).load()
    for chunks in (None, {}):
        tse.close()
        got = tse.open_dataset(path, chunks=chunks)
        xr.testing.assert_identical(got.load(), expected)
        assert tse.stats().missing_filled == len(absent)
        assert tse.stats().errors == 0


def test_chunk_map_and_stats_panel_show_absent_chunks(sparse: tuple[Path, int]) -> None:
    path, fmt = sparse
    ds = tse.open_dataset(path)
    (src,) = sources_of(ds["v"])
    absent_in_plane = {(0, y, x) for y in range(2) for x in range(3)} - _present(path, "v", fmt)
    with ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=get_engine()) as ctl:
        watch(ctl)  # as the Explorer does, so the StatsPanel maps this plane
        frame = ctl.wait(ctl.update(indices={"time": 0}), timeout=20)
        np.testing.assert_array_equal(frame.data, xr.open_zarr(path)["v"][0].values)
        states, window = chunk_states(get_engine(), ctl)
        assert window == (0, 2, 0, 3)
        eng = get_engine()
        for y in range(2):
            for x in range(3):
                want = 3 if (0, y, x) in absent_in_plane else 2
                assert states[y, x] == want, (y, x, states)
                if want == 2:  # read: the cache holds the chunk, a part of it or its head
                    assert (0, y, x) in eng.cached_indices(src.token)
        pytest.importorskip("holoviews")
        pytest.importorskip("ipywidgets")
        with tse.stats_panel(interval=60) as panel:
            panel.tick()
            assert panel.chunk_counts.tolist() == [0, 0, 4, 2]
            assert panel.chunk_fig.title.text.endswith("· 2 absent")
    assert tse.stats().missing_filled == len(absent_in_plane)


def test_strict_mode_raises_on_an_absent_chunk(sparse: tuple[Path, int]) -> None:
    path, _ = sparse
    ds = tse.open_dataset(path, missing="raise")
    np.testing.assert_array_equal(  # present chunks read as usual
        ds["v"][:, :4, :].values, xr.open_zarr(path)["v"][:, :4, :].values
    )
    with pytest.raises(MissingChunkError, match="missing='raise'") as info:
        _ = ds["v"][0, 4:, 4:8].values
    assert info.value.index == (0, 1, 1)
    assert tse.stats().missing_filled == 0 and tse.stats().errors >= 1
    with pytest.raises(MissingChunkError):
        _ = xr.open_dataset(path, engine="tsexplore", missing="raise")["v"].values


@pytest.mark.parametrize("dtype", ["float64", "int32", "bool", "<U3"])
def test_v2_null_fill_reads_as_zarr_does(tmp_path: Path, dtype: str) -> None:
    """A v2 ``fill_value: null`` array: absent chunks read as zarr-python reads them."""
    path = tmp_path / "null.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    arr = group.create_array("v", shape=(6,), chunks=(2,), dtype=dtype, fill_value=None)
    arr.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    arr[0:2] = np.array([1, 0], dtype=dtype)  # chunks 1 and 2 are never written
    assert arr.metadata.fill_value is None
    got = tse.open_dataset(path)
    xr.testing.assert_identical(got.load(), xr.open_zarr(path, chunks=None).load())
    np.testing.assert_array_equal(got["v"].values, arr[...])
    assert tse.stats().missing_filled == 2


def test_sharded_store_with_an_absent_shard(tmp_path: Path) -> None:
    """Sharded v3 (read through zarr's codec pipeline): a shard that is not stored is absent
    for every inner chunk in it -- filled and counted by default, raised when strict."""
    values = np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE)
    values[:, :, 8:] = np.nan  # the last shard column holds only the fill value
    ds = xr.Dataset({"v": (("time", "y", "x"), values)})
    path = tmp_path / "sharded.zarr"
    ds.to_zarr(path, zarr_format=3, mode="w", encoding={"v": {"chunks": (2, 4, 2), "shards": (2, 4, 4)}})
    shard_files = {p.relative_to(path / "v" / "c").parts for p in (path / "v" / "c").rglob("*") if p.is_file()}
    assert ("0", "0", "2") not in shard_files and ("0", "0", "1") in shard_files
    got = tse.open_dataset(path)
    xr.testing.assert_identical(got.load(), xr.open_zarr(path, chunks=None).load())
    # 4 absent shards, counted per chunk of the grid: a local store reads a shard's 2 inner
    # chunks as one unit
    assert tse.stats().missing_filled == 4
    with pytest.raises(MissingChunkError):
        _ = tse.open_dataset(path, missing="raise")["v"][:, :, 8:].values
