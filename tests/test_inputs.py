"""Every input xarray's engines take opens with tsexplore, equal to what xarray's engine
gives for the same input, with the same warnings and errors (xarray is the truth)."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import fsspec
import h5py
import numpy as np
import pytest
import xarray as xr

import tsexplore as tse
from tsexplore.errors import ConfigError, SourceError, TsExploreError
from tsexplore.resolve import sources_of


def _dataset() -> xr.Dataset:
    return xr.Dataset(
        {"t": (("time", "x"), np.arange(24.0).reshape(4, 6), {"units": "K"})},
        coords={"time": np.arange(4), "x": np.linspace(0, 1, 6)},
        attrs={"title": "inputs"},
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("inputs")
    out = {}
    for engine in ("netcdf4", "h5netcdf", "scipy"):
        path = root / f"{engine}.nc"
        _dataset().to_netcdf(path, engine=engine)
        out[engine] = path
        bare = root / f"{engine}-no-extension"  # only the signature says what it is
        bare.write_bytes(path.read_bytes())
        out[f"{engine}-bare"] = bare
    grouped = root / "grouped.nc"
    _dataset().to_netcdf(grouped, engine="h5netcdf")
    _dataset().to_netcdf(grouped, engine="h5netcdf", group="g/h", mode="a")
    out["grouped"] = grouped
    return out


def same(got: xr.Dataset, ref: xr.Dataset) -> None:
    xr.testing.assert_identical(got.load(), ref.load())


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf", "scipy"])
def test_paths_of_every_kind_and_files_without_an_extension(files: dict[str, Path], tmpdir, engine: str) -> None:  # type: ignore[no-untyped-def]
    """``str``, ``pathlib.Path``, pytest's ``py.path`` (any ``os.PathLike``), no extension."""
    ref = xr.open_dataset(files[engine], engine=engine)
    local = tmpdir.join(files[engine].name)  # a py.path LocalPath
    local.write_binary(files[engine].read_bytes())
    for path in (str(files[engine]), files[engine], local, files[f"{engine}-bare"]):
        same(tse.open_dataset(path), ref)
        same(xr.open_dataset(path, engine="tsexplore"), ref)


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf", "scipy"])
@pytest.mark.parametrize("kind", ["bytes", "memoryview", "BytesIO", "open", "fsspec-file", "OpenFile"])
def test_bytes_and_file_objects_read_by_range(files: dict[str, Path], engine: str, kind: str) -> None:
    path = files[engine]
    data = path.read_bytes()
    obj = {
        "bytes": lambda: data, "memoryview": lambda: memoryview(data), "BytesIO": lambda: io.BytesIO(data),
        "open": lambda: open(path, "rb"), "fsspec-file": lambda: fsspec.open(path).open(),
        "OpenFile": lambda: fsspec.open(path),
    }[kind]()
    ds = tse.open_dataset(obj)
    assert {type(s).__name__ for s in sources_of(ds)} == {"RangedSource"}
    assert "by byte range" in ds.encoding["tsexplore_reader"]
    same(ds, xr.open_dataset(path, engine=engine))


def test_a_file_object_stays_open_and_in_place(files: dict[str, Path]) -> None:
    """As xarray's ``FileObjectNetCDF`` tests ask: closing the dataset leaves it open."""
    f = io.BytesIO(files["h5netcdf"].read_bytes())
    ds = xr.open_dataset(f, engine="tsexplore")
    same(ds, xr.open_dataset(files["h5netcdf"], engine="h5netcdf"))
    ds.close()
    assert not f.closed


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf"])
def test_already_open_xarray_data_stores(files: dict[str, Path], engine: str) -> None:
    from xarray.backends import H5NetCDFStore, NetCDF4DataStore

    store_type = {"netcdf4": NetCDF4DataStore, "h5netcdf": H5NetCDFStore}[engine]
    ref = xr.open_dataset(files[engine], engine=engine)
    ds = tse.open_dataset(store_type.open(str(files[engine])))
    assert "the data store given" in ds.encoding["tsexplore_reader"]
    same(ds, ref)
    tree = tse.open_datatree(store_type.open(str(files["grouped"])))
    same(tree["g/h"].to_dataset(), ref)


def test_a_dict_holding_a_zarr_store_and_fsspec_mappers(tmp_path: Path) -> None:
    store: dict = {}  # type: ignore[type-arg]
    _dataset().to_zarr(store, zarr_format=3, consolidated=False)
    with pytest.warns(RuntimeWarning, match="consolidated") as theirs:
        ref = xr.open_dataset(store, engine="zarr")
    with pytest.warns(RuntimeWarning, match="consolidated") as mine:
        ds = tse.open_dataset(store)
    assert str(theirs[0].message) == str(mine[0].message)
    same(ds, ref)
    path = tmp_path / "m.zarr"
    _dataset().to_zarr(path, zarr_format=2)
    same(tse.open_dataset(fsspec.get_mapper(str(path))), xr.open_dataset(path, engine="zarr"))
    same(tse.open_dataset(fsspec.open(str(path))), xr.open_dataset(path, engine="zarr"))
    with pytest.raises(TsExploreError, match="object of type dict"):
        tse.open_dataset({"not": "a zarr store"})


def test_phony_dimensions_warn_as_xarray_warns(tmp_path: Path) -> None:
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=np.arange(12.0).reshape(3, 4), chunks=(2, 2))
    with pytest.warns(UserWarning, match="phony_dims") as theirs:
        ref = xr.open_dataset(path, engine="h5netcdf")
    with pytest.warns(UserWarning, match="phony_dims") as mine:
        ds = tse.open_dataset(path)
    assert str(theirs[0].message) == str(mine[0].message)
    same(ds, ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sorted_ = tse.open_dataset(path, phony_dims="sort")
        same(sorted_, xr.open_dataset(path, engine="h5netcdf", phony_dims="sort"))
        same(tse.open_dataset(path.read_bytes(), phony_dims="sort"),
             xr.open_dataset(path.read_bytes(), engine="h5netcdf", phony_dims="sort"))


def test_each_engines_own_arguments_pick_that_engine(files: dict[str, Path]) -> None:
    """An argument only one engine takes opens the file with that engine (its encodings)."""
    path = files["netcdf4"]  # netCDF-C wrote it: netCDF4 reads it unless told otherwise
    for kwargs, engine in [({}, "netcdf4"), ({"phony_dims": "sort"}, "h5netcdf"),
                           ({"decode_vlen_strings": True}, "h5netcdf"), ({"diskless": False}, "netcdf4"),
                           ({"via": "h5netcdf"}, "h5netcdf")]:
        ds = tse.open_dataset(path, **kwargs)
        ref = xr.open_dataset(path, engine=engine, **{k: v for k, v in kwargs.items() if k != "via"})
        same(ds, ref)
        np.testing.assert_equal(ds.t.encoding, ref.t.encoding)  # NaN fill values equal
    with pytest.raises(ConfigError, match="mix arguments"):
        tse.open_dataset(path, phony_dims="sort", diskless=False)
    with pytest.raises(ConfigError, match="unknown keyword"):
        tse.open_dataset(path, no_such_argument=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_argument'"):
        xr.open_dataset(path, engine="tsexplore", no_such_argument=1)


def test_xarrays_errors_from_the_same_causes(tmp_path: Path, files: dict[str, Path]) -> None:
    with pytest.raises(FileNotFoundError):
        xr.open_dataset(tmp_path / "missing.nc", engine="tsexplore")
    with pytest.raises(FileNotFoundError):
        xr.open_dataset(tmp_path / "missing.zarr", engine="tsexplore")
    with pytest.raises(ValueError, match="not the signature of a valid netCDF4 file"):
        xr.open_dataset(b"garbage!", engine="tsexplore", via="h5netcdf")
    with pytest.raises(ValueError):
        xr.open_dataset(b"garbage!", engine="tsexplore")
    with pytest.raises(TypeError, match="file objects are not supported by the netCDF4 backend"):
        xr.open_dataset(io.BytesIO(files["netcdf4"].read_bytes()), engine="tsexplore", via="netcdf4")
    with pytest.raises(ValueError, match="must be a string"):
        tse.open_dataset(files["netcdf4"], group=(1, 2))
    with pytest.raises(OSError):  # as xarray's netCDF engines: the group is not in the file
        tse.open_dataset(files["grouped"], group="nope")
    zarr_path = tmp_path / "s.zarr"
    _dataset().to_zarr(zarr_path, consolidated=False)
    with pytest.raises(SourceError, match="consolidated") as info:
        tse.open_dataset(zarr_path, consolidated=True)
    assert isinstance(info.value, ValueError)


def test_groups_and_trees_from_every_input(files: dict[str, Path], tmpdir) -> None:  # type: ignore[no-untyped-def]
    path = files["grouped"]
    ref_tree = xr.open_datatree(path, engine="h5netcdf")
    local = tmpdir.join("grouped.nc")
    local.write_binary(path.read_bytes())
    for obj in (path, local, path.read_bytes(), io.BytesIO(path.read_bytes())):
        tree = xr.open_datatree(obj, engine="tsexplore")
        xr.testing.assert_identical(tree.load(), ref_tree.load())
        groups = xr.open_groups(obj, engine="tsexplore")
        assert list(groups) == ["/", "/g", "/g/h"]
        same(tse.open_dataset(obj, group="g/h"), xr.open_dataset(path, engine="h5netcdf", group="g/h"))
        sub = tse.open_datatree(obj, group="g")
        xr.testing.assert_identical(sub.load(), xr.open_datatree(path, engine="h5netcdf", group="g").load())


def test_fsspec_chains_of_zarr_stores_and_netcdf_files(files: dict[str, Path]) -> None:
    """``simplecache::memory://...``: a Zarr store through zarr's FsspecStore over the whole
    chain, a NetCDF file through xarray's h5netcdf store over it (as xarray's engines)."""
    _dataset().to_zarr("memory://tse-chain/s.zarr", mode="w")
    url = "simplecache::memory://tse-chain/s.zarr"
    same(tse.open_dataset(url), xr.open_dataset(url, engine="zarr"))
    xr.testing.assert_identical(tse.open_datatree(url).load(), xr.open_datatree(url, engine="zarr").load())
    fsspec.filesystem("memory").pipe("/tse-chain/f.nc", files["h5netcdf"].read_bytes())
    nc = "simplecache::memory://tse-chain/f.nc"
    same(tse.open_dataset(nc), xr.open_dataset(nc, engine="h5netcdf"))
