"""Round trips: tsexplore-opened -> ``to_zarr`` / ``to_netcdf`` -> reopened by xarray.

The truth is the same round trip starting from xarray's own opening of the store: both
copies must reopen identical, with the same chunking and codecs (every encoding key but
``source``), and equal to the original store as xarray reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from _parity import _same
from zarr.codecs import BloscCodec, ZstdCodec

import tsexplore as tse

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:Consolidated metadata:UserWarning")


def _source_dataset() -> xr.Dataset:
    rng = np.random.default_rng(5)
    temp = rng.uniform(-5, 30, (6, 8, 10)).astype("f4")
    temp[:, :4, :5] = np.nan  # a sparse block
    y = np.arange(8) * 0.5  # a float dimension coordinate
    y[3] = np.nan  # ...with a masked value
    return xr.Dataset(
        {
            "temp": (("time", "y", "x"), temp, {"units": "degC"}),
            "count": (("y", "x"), rng.integers(0, 50, (8, 10)).astype("i2")),
        },
        coords={
            "time": xr.date_range("2001-01-01", periods=6, freq="D").values,
            "y": y,
            "x": np.arange(10.0),
        },
        attrs={"title": "round trip"},
    )


def _write_source(kind: str, path: Path) -> str:
    ds = _source_dataset()
    if kind.startswith("zarr"):
        fmt = 2 if kind == "zarr2" else 3
        enc: dict[str, Any] = {"temp": {"chunks": (2, 4, 5)}, "count": {"chunks": (4, 10)}}
        if kind == "zarr3-sharded":
            enc["temp"].update(shards=(2, 8, 10), compressors=ZstdCodec(level=3))
        elif kind == "zarr3":
            enc["temp"]["compressors"] = BloscCodec(cname="lz4", clevel=2)
        ds.to_zarr(path, zarr_format=fmt, mode="w", encoding=enc)
        return "zarr"
    if kind == "netcdf4":
        enc = {"temp": {"chunksizes": (2, 4, 5), "zlib": True, "complevel": 4, "shuffle": True},
               "count": {"chunksizes": (8, 5), "fletcher32": True}}
        ds.to_netcdf(path, engine="h5netcdf", encoding=enc)
        return "h5netcdf"
    ds.to_netcdf(path, engine="scipy")
    return "scipy"


def _write(ds: xr.Dataset, target: str, path: Path) -> str:
    if target.startswith("zarr"):
        ds.to_zarr(path, zarr_format=2 if target == "zarr2" else 3, mode="w")
        return "zarr"
    engine = "h5netcdf" if target == "netcdf4" else "scipy"
    ds.to_netcdf(path, engine=engine)
    return engine


def _assert_same_layout(mine: xr.Dataset, theirs: xr.Dataset) -> None:
    for name, var in theirs.variables.items():
        a = {k: v for k, v in mine[name].encoding.items() if k != "source"}
        b = {k: v for k, v in var.encoding.items() if k != "source"}
        assert a.keys() == b.keys(), (name, sorted(a), sorted(b))
        for key in b:
            assert _same(a[key], b[key]), (name, key, a[key], b[key])


CASES = [
    ("zarr3", "zarr3"), ("zarr3", "netcdf4"), ("zarr3", "netcdf3"), ("zarr3", "zarr2"),
    ("zarr2", "zarr2"), ("zarr2", "netcdf4"),
    ("zarr3-sharded", "zarr3"),
    ("netcdf4", "netcdf4"), ("netcdf4", "zarr3"),
    ("netcdf3", "netcdf3"), ("netcdf3", "zarr2"),
]


@pytest.mark.parametrize("chunks", [None, {}], ids=["lazy", "dask"])
@pytest.mark.parametrize(("kind", "target"), CASES, ids=[f"{a}-to-{b}" for a, b in CASES])
def test_round_trip_writes_what_xarray_writes(tmp_path: Path, kind: str, target: str, chunks: Any) -> None:
    suffix = ".zarr" if kind.startswith("zarr") else ".nc"
    src = tmp_path / f"src{suffix}"
    engine = _write_source(kind, src)
    ours = tse.open_dataset(src, chunks=chunks)
    theirs = xr.open_dataset(src, engine=engine, chunks=chunks)
    assert ours.encoding["source"] == theirs.encoding["source"] == str(src)
    out_suffix = ".zarr" if target.startswith("zarr") else ".nc"
    try:
        _write(theirs, target, tmp_path / f"theirs{out_suffix}")
    except ValueError as exc:  # xarray refuses (a v3 serializer to v2, shards across dask
        with pytest.raises(type(exc)) as info:  # chunks): so does tsexplore, saying the same
            _write(ours, target, tmp_path / f"ours{out_suffix}")
        assert str(info.value) == str(exc)
        return
    out_engine = _write(ours, target, tmp_path / f"ours{out_suffix}")
    mine = xr.open_dataset(tmp_path / f"ours{out_suffix}", engine=out_engine)
    truth = xr.open_dataset(tmp_path / f"theirs{out_suffix}", engine=out_engine)
    _assert_same_layout(mine, truth)  # chunking and codecs
    xr.testing.assert_identical(mine.load(), truth.load())
    original = xr.open_dataset(src, engine=engine).load()
    xr.testing.assert_equal(mine, original)  # the values survived


def test_v3_float_dimension_coordinate_writes_back(tmp_path: Path) -> None:
    """A v3 store keeps a float coordinate's ``_FillValue`` base64-encoded in its attributes;
    the tsexplore-opened dataset decodes it, so writing it back works."""
    src = tmp_path / "src.zarr"
    _source_dataset().to_zarr(src, zarr_format=3, mode="w")
    import zarr

    assert isinstance(zarr.open_group(str(src))["y"].attrs["_FillValue"], str)  # base64 on disk
    ds = tse.open_dataset(src)
    assert "_FillValue" not in ds["y"].attrs and np.isnan(ds["y"].encoding["_FillValue"])
    assert np.isnan(ds["y"].values[3])  # the masked value reads as NaN
    ds.to_zarr(tmp_path / "back.zarr", zarr_format=3, mode="w")
    ds.to_netcdf(tmp_path / "back.nc", engine="h5netcdf")
    for path, engine in ((tmp_path / "back.zarr", "zarr"), (tmp_path / "back.nc", "h5netcdf")):
        xr.testing.assert_identical(xr.open_dataset(path, engine=engine).load(), xr.open_zarr(src).load())
