"""Multiscale pyramids: ``tse.pyramid`` against xarray's own coarsening, and pyramids written by
other tools (ngff-zarr OME-NGFF v0.4/v0.5, ome-zarr-py, ndpyramid) opened with the right levels."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr

import tsexplore as tse
from tsexplore.errors import ConfigError, TsExploreError
from tsexplore.pyramid import _blocks, open_levels


@pytest.fixture
def cube_ds(small_cube):
    return xr.open_zarr(small_cube).load()  # xarray's own reading: the ground truth


@pytest.mark.slow
def test_levels_are_xarray_block_means(small_cube, cube_ds, tmp_path):
    # a tiny memory budget: many blocks per level, so block edges are exercised
    out = tse.pyramid(small_cube, tmp_path / "p.zarr", levels=4, chunks={"time": 8, "y": 16, "x": 16},
                      max_mem=64 * 1024, progress=False)
    levels = tse.open_dataset(out).tse.levels
    assert len(levels) == 4
    truth = cube_ds.temp
    for k in range(4):
        got = levels[k].temp
        assert dict(got.sizes) == {"time": 32, "y": 128 >> k, "x": 128 >> k}
        # each level is the 2 x 2 mean of the one above it (xarray's coarsen, in memory)...
        want = truth
        for _ in range(k):
            want = want.coarsen(y=2, x=2, boundary="trim").mean()
        np.testing.assert_allclose(got.values, want.values, rtol=1e-6, atol=1e-5)
        # ...and, with no NaN, the mean of the 2^k x 2^k block of level 0
        direct = truth.coarsen(y=2**k, x=2**k, boundary="trim").mean() if k else truth
        np.testing.assert_allclose(got.values, direct.values, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(got.y.values, direct.y.values)
        np.testing.assert_array_equal(got.time.values, truth.time.values)
        # tsexplore reads each level as xarray reads that level's group
        xr.testing.assert_identical(levels[k], xr.open_zarr(out, group=str(k)))
    assert levels.factors[3] == {"time": 1.0, "y": 8.0, "x": 8.0}
    # the default opens level 0, equal to the source
    np.testing.assert_array_equal(tse.open_dataset(out).temp.values, truth.values)


def test_nearest_and_integers(tmp_path):
    a = np.arange(6 * 37 * 50, dtype=np.int16).reshape(6, 37, 50)
    da = xr.DataArray(a, dims=("t", "y", "x"), name="counts",
                      coords={"y": np.arange(37) * 0.5, "x": np.arange(50) * 2.0})
    near = tse.pyramid(da, tmp_path / "n.zarr", levels=3, method="nearest", progress=False)
    lv = open_levels(near)
    for k in range(3):
        f = 2**k
        want = a[:, : (37 // f) * f : f, : (50 // f) * f : f]
        np.testing.assert_array_equal(lv[k].counts.values, want)
        assert lv[k].counts.dtype == np.int16
    mean = tse.pyramid(da, tmp_path / "m.zarr", levels=2, method="mean", progress=False)
    got = open_levels(mean)[1].counts
    want = np.rint(da.coarsen(y=2, x=2, boundary="trim").mean().values).astype(np.int16)
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got.values, want)


def test_other_readers_see_the_same_levels(small_cube, tmp_path):
    nz = pytest.importorskip("ngff_zarr")
    out = tse.pyramid(small_cube, tmp_path / "p.zarr", levels=3, progress=False)
    ms = nz.from_ngff_zarr(str(out))
    ours = open_levels(out)
    assert [im.data.shape for im in ms.images] == [(32, 128, 128), (32, 64, 64), (32, 32, 32)]
    for k, im in enumerate(ms.images):
        np.testing.assert_array_equal(np.asarray(im.data), ours[k].temp.values)
        # the transformations put each level's pixel centres on its coordinates
        np.testing.assert_allclose(im.translation["y"] + im.scale["y"] * np.arange(im.data.shape[1]),
                                   ours[k].y.values, rtol=1e-9, atol=1e-9)
    tree = xr.open_datatree(str(out), engine="zarr")
    assert sorted(tree.children) == ["0", "1", "2"]


def _ngff(tmp_path, version):
    nz = pytest.importorskip("ngff_zarr")
    a = np.random.default_rng(4).integers(0, 4000, (96, 80)).astype(np.uint16)
    img = nz.to_ngff_image(a, dims=["y", "x"], scale={"y": 0.5, "x": 0.25}, translation={"y": 10.0, "x": 0.0})
    ms = nz.to_multiscales(img, scale_factors=[2, 4], method=nz.Methods.DASK_BIN_SHRINK)
    path = tmp_path / f"ngff{version}.zarr"
    nz.to_ngff_zarr(str(path), ms, version=version)
    return path, ms


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_ngff_zarr_pyramids(tmp_path, version):
    path, ms = _ngff(tmp_path, version)
    ds = tse.open_dataset(path)
    assert list(ds.data_vars) == ["image"] and ds.image.dims == ("y", "x")
    np.testing.assert_array_equal(ds.image.values, np.asarray(ms.images[0].data))
    levels = ds.tse.levels
    assert len(levels) == 3
    for k, im in enumerate(ms.images):
        np.testing.assert_array_equal(levels[k].image.values, np.asarray(im.data))
        np.testing.assert_allclose(levels[k].y.values, im.translation["y"] + im.scale["y"] * np.arange(im.data.shape[0]))
    assert levels.factors[2] == {"y": 4.0, "x": 4.0}
    # translations put level 2's first pixel at the centre of level 0's first 4 x 4 block
    assert levels.offsets[2] == pytest.approx({"y": 1.5, "x": 1.5})


def test_ome_zarr_py_pyramid(tmp_path):
    pytest.importorskip("ome_zarr")
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image

    a = np.random.default_rng(5).random((64, 48)).astype(np.float32)
    group = zarr.open_group(str(tmp_path / "o.zarr"), mode="w", zarr_format=2)
    write_image(a, group, scale_factors=(2, 4), axes="yx", fmt=FormatV04())
    paths = [d["path"] for d in group.attrs["multiscales"][0]["datasets"]]
    levels = open_levels(tmp_path / "o.zarr")
    assert [lv.path for lv in levels.spec.levels] == paths
    for k, p in enumerate(paths):
        np.testing.assert_array_equal(levels[k].image.values, group[p][...])
        assert levels[k].image.dims == ("y", "x")


def test_ndpyramid_lists_the_coarsest_first(tmp_path):
    ndpyramid = pytest.importorskip("ndpyramid")
    v = np.random.default_rng(6).random((64, 64)).astype(np.float32)
    ds = xr.Dataset({"v": (("y", "x"), v)}, coords={"y": np.arange(64.0), "x": np.arange(64.0)})
    tree = ndpyramid.pyramid_coarsen(ds, factors=[4, 2, 1], dims=["x", "y"], boundary="trim")
    tree.to_zarr(str(tmp_path / "nd.zarr"), mode="w")
    opened = tse.open_dataset(tmp_path / "nd.zarr")  # the finest level, group "2"
    xr.testing.assert_identical(opened, xr.open_zarr(tmp_path / "nd.zarr", group="2"))
    levels = opened.tse.levels
    assert [lv.path for lv in levels.spec.levels] == ["2", "1", "0"]
    assert [levels.factors[k]["x"] for k in range(3)] == [1.0, 2.0, 4.0]
    for k, group in enumerate(["2", "1", "0"]):
        xr.testing.assert_identical(levels[k], xr.open_zarr(tmp_path / "nd.zarr", group=group))


def test_reads_reach_only_the_level_asked_for(small_cube, tmp_path):
    from tsexplore.testing.wrappers import CountingSource

    out = tse.pyramid(small_cube, tmp_path / "p.zarr", levels=3, progress=False)
    levels = open_levels(out, wrap=CountingSource)
    _ = levels[2].temp.isel(time=0).values
    assert levels.chunk_reads() == [0, 0, 1]  # one 32 x 32 chunk at level 2
    geo = levels.geometry("y", "x")
    assert [g.shape for g in geo] == [(128, 128), (64, 64), (32, 32)]
    assert [g.factor for g in geo] == [(1.0, 1.0), (2.0, 2.0), (4.0, 4.0)]


def test_blocks_cover_each_element_once_within_budget():
    shape, chunks = (5, 37, 50), (2, 8, 16)
    for budget in (1, 300, 5000, 10**6):
        seen = np.zeros(shape, np.int32)
        for region in _blocks(shape, chunks, budget):
            block = seen[region]
            assert block.size <= max(budget, int(np.prod(chunks)))
            assert all(r.start % c == 0 for r, c in zip(region, chunks))
            seen[region] += 1
        assert (seen == 1).all()


def test_bad_requests(small_cube, tmp_path):
    two = xr.Dataset({"a": (("y", "x"), np.zeros((8, 8))), "b": (("y", "x"), np.zeros((8, 8)))})
    with pytest.raises(ConfigError, match="var="):
        tse.pyramid(two, tmp_path / "a.zarr", progress=False)
    with pytest.raises(ConfigError, match="levels must be"):
        tse.pyramid(two, tmp_path / "b.zarr", var="a", levels=5, progress=False)
    with pytest.raises(ConfigError, match="method"):
        tse.pyramid(two, tmp_path / "c.zarr", var="a", method="cubic", progress=False)
    with pytest.raises(ConfigError, match="dims"):
        tse.pyramid(two, tmp_path / "d.zarr", var="a", dims=("z",), progress=False)
    tse.pyramid(two, tmp_path / "e.zarr", var="a", progress=False)
    with pytest.raises(ConfigError, match="overwrite"):
        tse.pyramid(two, tmp_path / "e.zarr", var="a", progress=False)
    with pytest.raises(TsExploreError, match="multiscales"):
        open_levels(small_cube)
    assert tse.open_dataset(small_cube).tse.levels is None
