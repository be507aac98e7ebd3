"""Groups and trees: ``group=``, ``consolidated=``, ``open_datatree`` / ``open_groups`` through
the tsexplore engine, compared with xarray's own zarr, netcdf4 and h5netcdf engines; a node's
variables stream like any others (Explorer, ``tse.reduce``, ``tse.batches``, ``tse.advise``);
``xr.open_mfdataset(..., engine="tsexplore")`` too."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import tsexplore as tse
from tsexplore.controller import PlaneGeometry, ViewController
from tsexplore.engine import get_engine
from tsexplore.errors import ConfigError, SourceError
from tsexplore.resolve import engine_backed, resolve

pytestmark = pytest.mark.filterwarnings(
    "ignore:Consolidated metadata is currently not part:UserWarning",
    "ignore::zarr.errors.ZarrUserWarning",
)


def _datasets() -> dict[str, xr.Dataset]:
    """Three groups below a root: data, coordinates, inherited dims, attributes."""
    rng = np.random.default_rng(0)
    root = xr.Dataset(coords={"x": np.arange(32.0)}, attrs={"title": "root"})
    a = xr.Dataset(
        {"temp": (("time", "y", "x"), rng.standard_normal((6, 16, 32)).astype("float32"),
                  {"units": "K"})},
        coords={"time": np.arange(6), "y": np.linspace(0, 1, 16)},
        attrs={"domain": "a"},
    )
    b = xr.Dataset({"wind": (("x",), rng.standard_normal(32))}, attrs={"domain": "b"})
    c = xr.Dataset({"count": (("z",), np.arange(4, dtype="int16"))})
    return {"/": root, "/a": a, "/b": b, "/b/c": c}


def _write_zarr(path: Path, zarr_format: int, consolidated: bool | None) -> Path:
    tree = xr.DataTree.from_dict(_datasets())
    encoding = {"/a": {"temp": {"chunks": (2, 8, 16)}}}
    tree.to_zarr(path, zarr_format=zarr_format, consolidated=consolidated, encoding=encoding)
    return path


def _write_netcdf(path: Path, engine: str) -> Path:
    xr.DataTree.from_dict(_datasets()).to_netcdf(
        path, engine=engine, encoding={"/a": {"temp": {"chunksizes": (2, 8, 16)}}}
    )
    return path


def _nodes_engine_backed(tree: xr.DataTree) -> None:
    for node in tree.subtree:
        for name, var in node.data_vars.items():
            assert engine_backed(var), f"{node.path}/{name} is not engine-backed"
            resolve(var)  # a selection of its source: what the Explorer, reduce, batches use


def _streams(da: xr.DataArray) -> None:
    """The Explorer's plane (headless controller), tse.reduce, tse.batches and tse.advise on
    ``da`` (a slider dim, y, x) read its values through the engine, equal to NumPy's."""
    want = da.values
    dim = str(da.dims[0])
    found = resolve(da)
    geom = PlaneGeometry.of(found, "y", "x")
    with ViewController(found, geom, engine=get_engine()) as ctl:
        frame = ctl.wait(ctl.update(indices={dim: 3}), timeout=20)
        step_y, step_x = frame.request.step
        np.testing.assert_array_equal(frame.data, want[3][::step_y, ::step_x])
    got = tse.reduce(da, "mean", dim=dim, progress=False)
    np.testing.assert_allclose(got.values, want.astype(np.float64).mean(axis=0), rtol=1e-5)
    seen = np.zeros(want.shape[0], dtype=int)
    sample = {dim: 1, "y": want.shape[1], "x": want.shape[2]}
    for batch in tse.batches(da, sample=sample, batch_size=2, shuffle=True, seed=0, return_index=True):
        for window, start in zip(batch[da.name], batch["index"]):
            np.testing.assert_array_equal(window[0], want[start[0]])
            seen[start[0]] += 1
    assert (seen == 1).all()
    copied: list[np.ndarray] = []
    advice = tse.advise(da, lambda v: copied.append(v.values), candidates=[want.shape], repeats=1,
                        progress=False)
    assert advice.shape == want.shape
    np.testing.assert_array_equal(copied[0], want)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [True, False])
def test_zarr_tree_equals_xarrays_and_every_node_streams(tmp_path, zarr_format, consolidated):
    path = _write_zarr(tmp_path / "tree.zarr", zarr_format, consolidated)
    want = xr.open_datatree(path, engine="zarr", consolidated=consolidated)
    got = xr.open_datatree(path, engine="tsexplore", consolidated=consolidated)
    _nodes_engine_backed(got)  # (before a comparison loads xarray's cache=True copy)
    xr.testing.assert_identical(got, want)
    streamed = tse.open_datatree(path)  # cache=False: values stay in the engine
    xr.testing.assert_identical(streamed, want)
    _nodes_engine_backed(streamed)
    _streams(streamed["a"]["temp"])
    chunked = tse.open_datatree(path, chunks={})  # dask arrays whose tasks read through the engine
    assert engine_backed(chunked["a"]["temp"])
    xr.testing.assert_identical(chunked.compute(), want)
    # xr.open_groups: the same nodes as xarray's, by the same keys
    groups = xr.open_groups(path, engine="tsexplore")
    assert sorted(groups) == sorted(xr.open_groups(path, engine="zarr"))  # (listing order varies)
    # a tree rooted at a group, and one group alone
    xr.testing.assert_identical(tse.open_datatree(path, group="b"),
                                xr.open_datatree(path, engine="zarr", group="b"))
    for group in ("a", "/b/c", "b/c/"):
        xr.testing.assert_identical(xr.open_dataset(path, engine="tsexplore", group=group),
                                    xr.open_dataset(path, engine="zarr", group=group))


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf"])
def test_netcdf_tree_equals_xarrays(tmp_path, engine):
    pytest.importorskip(engine if engine != "netcdf4" else "netCDF4")
    path = _write_netcdf(tmp_path / "tree.nc", engine)
    want = xr.open_datatree(path, engine=engine)
    got = tse.open_datatree(path)
    _nodes_engine_backed(got)
    xr.testing.assert_identical(got, want)
    for node in got.subtree:  # the encoding (chunks, compression) the writer's engine reports
        for name, var in node.variables.items():
            assert var.encoding.get("chunksizes") == want[node.path][name].encoding.get("chunksizes")
    _nodes_engine_backed(got)
    _streams(got["a"]["temp"])
    xr.testing.assert_identical(xr.open_dataset(path, engine="tsexplore", group="b/c"),
                                xr.open_dataset(path, engine=engine, group="b/c"))
    assert sorted(xr.open_groups(path, engine="tsexplore")) == sorted(xr.open_groups(path, engine=engine))


def test_pyramid_opens_as_a_tree_of_its_levels(tmp_path):
    """tse.pyramid writes OME-NGFF v0.5 with one group per level: xarray's zarr engine and
    tsexplore open the same tree; each level streams; the root still opens as level 0."""
    rng = np.random.default_rng(1)
    ds = xr.Dataset({"img": (("t", "y", "x"), rng.random((4, 64, 64), dtype=np.float32))},
                    coords={"t": np.arange(4), "y": np.arange(64.0), "x": np.arange(64.0)})
    target = tse.pyramid(ds, tmp_path / "pyr.zarr", levels=3, min_size=8, progress=False)
    want = xr.open_datatree(target, engine="zarr")
    got = tse.open_datatree(target)
    _nodes_engine_backed(got)
    xr.testing.assert_identical(got, want)
    assert sorted(got.children) == ["0", "1", "2"]
    assert got["2"].sizes["y"] == 16
    _nodes_engine_backed(got)
    _streams(got["1"]["img"])
    level0 = tse.open_dataset(target)
    xr.testing.assert_identical(level0["img"], got["0"]["img"])


def test_ome_ngff_image_from_ngff_zarr_opens_as_its_tree(tmp_path):
    """An OME-NGFF image written by ngff-zarr (an independent writer): the tree of its arrays
    is xarray's, level 0 opens as the image."""
    nz = pytest.importorskip("ngff_zarr")
    data = np.random.default_rng(2).integers(0, 255, (64, 64), dtype=np.uint8)
    image = nz.to_ngff_image(data, dims=("y", "x"))
    multiscales = nz.to_multiscales(image, scale_factors=[2])
    target = tmp_path / "ngff.ome.zarr"
    nz.to_ngff_zarr(target, multiscales, version="0.5")
    want = xr.open_datatree(target, engine="zarr")
    got = tse.open_datatree(target)
    xr.testing.assert_identical(got, want)
    _nodes_engine_backed(got)
    np.testing.assert_array_equal(tse.open_dataset(target)["image"].values, data)


def test_group_on_store_objects(tmp_path):
    zarr = pytest.importorskip("zarr")
    path = _write_zarr(tmp_path / "tree.zarr", 3, True)
    store = zarr.storage.LocalStore(path, read_only=True)
    want = xr.open_dataset(path, engine="zarr", group="a")
    xr.testing.assert_identical(tse.open_dataset(store, group="a"), want)
    xr.testing.assert_identical(tse.open_dataset(zarr.open_group(store, mode="r"), group="a"), want)
    xr.testing.assert_identical(tse.open_datatree(store), xr.open_datatree(path, engine="zarr"))


def test_group_errors_say_what_to_do(tmp_path, shared_data):
    path = _write_zarr(tmp_path / "tree.zarr", 3, False)
    with pytest.raises(SourceError, match=r"no group 'nope'.*'a'"):
        tse.open_dataset(path, group="nope")
    with pytest.raises(SourceError, match="consolidated"):
        tse.open_dataset(path, consolidated=True)
    np.save(tmp_path / "x.npy", np.zeros(3))
    with pytest.raises(ConfigError, match="has no groups"):
        tse.open_dataset(tmp_path / "x.npy", group="a")
    with pytest.raises(ConfigError, match="consolidated"):
        tse.open_dataset(_write_netcdf(tmp_path / "t.nc", "h5netcdf"), consolidated=True)
    with pytest.raises(ConfigError, match="zarr_format"):
        tse.open_dataset(path, zarr_format=4)
    with pytest.raises(ConfigError, match="auto_complex"):
        tse.open_dataset(path, auto_complex=True)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_remote_consolidated_open_costs_one_metadata_request(moto_s3, tmp_path, zarr_format):
    """A consolidated store on S3: the whole tree's metadata is one request (the consolidated
    document), counted by the server in front of moto; with consolidated=False each node's
    metadata is read (more requests), and both trees equal xarray's."""
    path = _write_zarr(tmp_path / "tree.zarr", zarr_format, True)
    url = moto_s3.upload(path, f"groups-{zarr_format}.zarr")
    proxy = moto_s3.proxy()
    so = moto_s3.storage_options(proxy.url)
    metadata = ("zarr.json", ".zmetadata", ".zgroup", ".zattrs", ".zarray")

    def metadata_requests() -> list[str]:
        return [f"{m} {p} {s}" for m, p, s in proxy.requests if p.rsplit("/", 1)[-1] in metadata]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = xr.open_datatree(path, engine="zarr")
        got = tse.open_datatree(url, storage_options=so, consolidated=True, zarr_format=zarr_format)
        assert len(metadata_requests()) == 1, metadata_requests()
        xr.testing.assert_identical(got, want)
        proxy.requests.clear()
        one = tse.open_dataset(url, storage_options=so, group="a", consolidated=True,
                               zarr_format=zarr_format)
        assert len(metadata_requests()) == 1, metadata_requests()
        xr.testing.assert_identical(one, xr.open_dataset(path, engine="zarr", group="a"))
        _streams(one["temp"])
        proxy.requests.clear()
        plain = tse.open_datatree(url, storage_options=so, consolidated=False, zarr_format=zarr_format)
        assert len(metadata_requests()) > 1
        xr.testing.assert_identical(plain, want)


def test_open_mfdataset_variables_stream(tmp_path):
    """xr.open_mfdataset(engine="tsexplore"): each file's variables read through the engine
    inside dask's tasks; the Explorer, tse.reduce and tse.batches take the combined variable."""
    pytest.importorskip("ipywidgets")
    rng = np.random.default_rng(3)
    paths = []
    for i in range(3):
        ds = xr.Dataset({"temp": (("time", "y", "x"), rng.random((2, 16, 32), dtype=np.float32))},
                        coords={"time": np.arange(2 * i, 2 * i + 2)})
        paths.append(tmp_path / f"part{i}.zarr")
        ds.to_zarr(paths[-1])
    got = xr.open_mfdataset(paths, engine="tsexplore", combine="by_coords")
    want = xr.open_mfdataset(paths, engine="zarr", combine="by_coords").compute()
    before = tse.stats().reads
    xr.testing.assert_identical(got.compute(), want)
    assert tse.stats().reads >= before + 3  # one chunk per file at least, read by the engine
    truth = want["temp"].values
    with tse.explore(got["temp"], width=64, height=64, stats=False) as ex:
        ex.sliders["time"].value = 4
        frame = ex.controller.wait(timeout=20)
        step_y, step_x = frame.request.step
        np.testing.assert_array_equal(frame.data, truth[4][::step_y, ::step_x])
    reduced = tse.reduce(got["temp"], "mean", dim="time", progress=False)
    np.testing.assert_allclose(reduced.values, truth.astype(np.float64).mean(axis=0), rtol=1e-5)
    seen = np.zeros(6, dtype=int)
    sample = {"time": 1, "y": 16, "x": 32}
    for batch in tse.batches(got["temp"], sample=sample, batch_size=2, seed=0, return_index=True):
        for window, start in zip(batch["temp"], batch["index"]):
            np.testing.assert_array_equal(window[0], truth[start[0]])
            seen[start[0]] += 1
    assert (seen == 1).all()
