"""Parity on generated stores: every format, every path, xarray's own writers with defaults.

Datasets are drawn with ``xarray.testing.strategies`` (dims, indexers) and
``zarr.testing.strategies`` (values of every dtype, chunk and shard shapes): ints, bool,
float16, big-endian, NaN/inf, ``_FillValue``s, ``scale_factor``/``add_offset`` packing into
ints and floats, CF datetimes and timedeltas, cftime coordinates in non-standard calendars,
character arrays, masked coordinates and sparse writes (all-fill chunks that zarr does not
store). Each is written by ``to_zarr`` / ``to_netcdf`` with default settings and compared
with xarray's own engine on every path (see ``_parity.py``).
"""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import xarray.testing.strategies as xrst
import zarr.testing.strategies as zst
from _parity import ABSENT, SETTINGS, compare_store
from hypothesis import given, reject
from hypothesis import strategies as st

import tsexplore as tse

FORMATS = ["zarr2", "zarr3", "zarr3-sharded", "netcdf3", "netcdf4"]
#: NetCDF files served by Python's http.server: tsexplore opens the URL, xarray the same URL
#: with h5netcdf (NetCDF4) or an fsspec file of it with scipy (NetCDF3, which scipy reads
#: only from a file object)
REMOTE_FORMATS = ["netcdf3-http", "netcdf4-http"]
INTS = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"]
DTYPES = {
    "zarr2": [*INTS, "bool", "f2", "f4", "f8", ">i2", ">u4", ">f4", ">f8"],
    "zarr3": [*INTS, "bool", "f2", "f4", "f8", ">i4", ">f8"],
    "netcdf3": ["i1", "i2", "i4", "f4", "f8", "bool"],
    "netcdf4": [*INTS, "bool", "f4", "f8", ">i4", ">f4"],
}
PACKED = {"netcdf3": ["i1", "i2", "i4"], "other": ["i1", "i2", "u1", "u2", "i4", "f4"]}
CALENDARS = ["standard", "noleap", "360_day", "all_leap", "julian", "proleptic_gregorian"]
DIMS = ["time", "y", "x"]
pytestmark = pytest.mark.filterwarnings("ignore")


def _family(fmt: str) -> str:
    return fmt.split("-")[0]


def _values(draw: st.DrawFn, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.asarray(draw(zst.numpy_arrays(shapes=st.just(shape), dtype=np.dtype(dtype))))


def _packed(draw: st.DrawFn, fmt: str, shape: tuple[int, ...]) -> tuple[np.ndarray, dict[str, Any]]:
    """Float data that packs exactly into a smaller type with scale_factor/add_offset."""
    packed = draw(st.sampled_from(PACKED["netcdf3" if fmt == "netcdf3" else "other"]))
    scale = draw(st.sampled_from([0.5, 0.01, 2.0, np.float32(0.25)]))
    offset = draw(st.sampled_from([None, 0.0, 10.0, -3.5]))
    dt = np.dtype(packed)
    lo, hi = (-100, 100) if dt.kind == "f" else (max(np.iinfo(dt).min, -100), min(np.iinfo(dt).max, 100))
    ints = _values(draw, "i4", shape).clip(lo + 1, hi)
    values = ints * float(scale) + (offset or 0.0)
    mask = _values(draw, "bool", shape)
    values[mask] = np.nan
    enc: dict[str, Any] = {"dtype": packed, "scale_factor": scale, "_FillValue": np.array(lo, dt)[()]}
    if offset is not None:
        enc["add_offset"] = offset
    return values, enc


def _data_var(draw: st.DrawFn, fmt: str, dims: tuple[str, ...], shape: tuple[int, ...]) -> tuple[xr.Variable, dict[str, Any]]:
    family = _family(fmt)
    kind = draw(st.sampled_from(["plain", "fill", "packed", "time", "timedelta", "chars", "sparse"]))
    enc: dict[str, Any] = {}
    attrs = draw(st.dictionaries(st.sampled_from(["units", "long_name", "note"]), st.text("abc xyz", max_size=5)))
    if kind == "plain":
        values = _values(draw, draw(st.sampled_from(DTYPES[family])), shape)
    elif kind == "fill":
        dtype = draw(st.sampled_from([d for d in DTYPES[family] if d != "bool"]))
        values = _values(draw, dtype, shape)
        fill = values.flat[0] if values.size and draw(st.booleans()) else np.array(-99 if np.dtype(dtype).kind != "u" else 99, dtype)[()]
        if np.dtype(dtype).kind == "f" and np.isnan(fill):
            fill = np.array(-9999.0, dtype)[()]
        enc["_FillValue"] = fill
    elif kind == "packed":
        values, enc = _packed(draw, fmt, shape)
    elif kind == "time":
        ints = _values(draw, "i2", shape)
        values = np.datetime64("2000-01-01T00", "ns") + ints.astype("i8") * np.timedelta64(1, "h")
        if values.size and draw(st.booleans()):
            values.flat[0] = np.datetime64("NaT")
        if draw(st.booleans()):
            enc["units"] = draw(st.sampled_from(["hours since 2000-01-01", "minutes since 1990-06-01 12:00"]))
    elif kind == "timedelta":
        ints = _values(draw, "i2", shape)
        values = ints.astype("i8") * np.timedelta64(1, "m")
        attrs = {}
    elif kind == "chars":  # a trailing character dim: xarray joins it into strings
        width = draw(st.integers(1, 3))
        letters = _values(draw, "u1", (*shape, width))
        values = (letters % 26 + ord("a")).astype("u1").view("S1")
        return xr.Variable((*dims, f"nchar{width}"), values, attrs), enc
    else:  # sparse: an all-NaN block (zarr writes no chunk for it)
        values = _values(draw, "f4", shape).astype("f8")
        values[..., : max(1, shape[-1] // 2)] = np.nan
    return xr.Variable(dims, values, attrs), enc


def _coord(draw: st.DrawFn, dim: str, n: int) -> tuple[Any, dict[str, Any]]:
    kind = draw(st.sampled_from(["int", "masked", "datetime", "cftime"]))
    if kind == "int":
        return xr.Variable(dim, np.arange(n) * draw(st.integers(1, 5))), {}
    if kind == "masked":  # a coordinate with a missing value
        values = np.arange(n, dtype="f8") * 0.5
        values[draw(st.integers(0, n - 1))] = np.nan
        return xr.Variable(dim, values), {}
    if kind == "datetime":
        return xr.Variable(dim, xr.date_range("2001-03-01", periods=n, freq="6h").values), {}
    calendar = draw(st.sampled_from(CALENDARS))
    times = xr.date_range("2000-02-27", periods=n, freq="D", calendar=calendar, use_cftime=True)
    return xr.Variable(dim, np.asarray(times)), {"units": "days since 2000-01-01", "calendar": calendar}


@st.composite
def datasets(draw: st.DrawFn, fmt: str) -> tuple[xr.Dataset, dict[str, dict[str, Any]]]:
    sizes = draw(xrst.dimension_sizes(dim_names=st.sampled_from(DIMS), min_dims=1, max_dims=3, min_side=1, max_side=6))
    dims = [d for d in DIMS if d in sizes]
    variables: dict[str, Any] = {}
    encoding: dict[str, dict[str, Any]] = {}
    for name in draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True)):
        chosen = draw(st.sets(st.sampled_from(dims), min_size=1))
        vdims = tuple(d for d in dims if d in chosen)
        var, enc = _data_var(draw, fmt, vdims, tuple(sizes[d] for d in vdims))
        variables[name], encoding[name] = var, enc
    coords: dict[str, Any] = {}
    for dim in dims:
        if draw(st.booleans()):
            coords[dim], encoding[dim] = _coord(draw, dim, sizes[dim])
    if len(dims) >= 2 and draw(st.booleans()):  # a 2-D auxiliary coordinate
        coords["lat"] = xr.Variable(tuple(dims[-2:]), np.ones([sizes[d] for d in dims[-2:]]) * 1.5)
    ds = xr.Dataset(variables, coords=coords, attrs={"title": draw(st.text("abc", max_size=4))})
    for name, var in ds.variables.items():
        enc = encoding.setdefault(str(name), {})
        shape = var.shape
        if not shape or var.dtype.kind in "OUS" and fmt.startswith("netcdf"):
            continue
        if fmt.startswith("zarr") and draw(st.booleans()):
            enc["chunks"] = draw(zst.chunk_shapes(shape=shape))
        if fmt == "zarr3-sharded":
            chunks = enc.setdefault("chunks", draw(zst.chunk_shapes(shape=shape)))
            enc["shards"] = draw(zst.shard_shapes(shape=shape, chunk_shape=chunks))
        if fmt == "netcdf4" and draw(st.booleans()):
            enc["chunksizes"] = draw(zst.chunk_shapes(shape=shape))
            if draw(st.booleans()):
                enc.update(zlib=True, complevel=draw(st.integers(1, 9)), shuffle=draw(st.booleans()))
    return ds, encoding


def _write(ds: xr.Dataset, encoding: dict[str, dict[str, Any]], fmt: str, path: Path) -> None:
    for name, enc in encoding.items():
        ds[name].encoding.update(enc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if fmt.startswith("zarr"):
                ds.to_zarr(path, zarr_format=2 if fmt == "zarr2" else 3, mode="w")
            else:
                ds.to_netcdf(path, engine="scipy" if fmt == "netcdf3" else "h5netcdf")
        except (ValueError, TypeError, OverflowError, NotImplementedError):
            reject()  # xarray's own writer refuses this dataset: nothing to compare


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("parity")


@pytest.fixture(scope="module")
def served(folder: Path):  # type: ignore[no-untyped-def]
    """The module's folder served over HTTP on 127.0.0.1."""
    from tsexplore.testing.http import StoreServer

    with StoreServer(folder) as server:
        yield server


@pytest.mark.parametrize("fmt", FORMATS)
@SETTINGS
@given(data=st.data())
def test_generated_store_matches_xarray_on_every_path(fmt: str, folder: Path, data: st.DataObject) -> None:
    ds, encoding = data.draw(datasets(fmt), label="dataset")
    suffix = ".zarr" if fmt.startswith("zarr") else ".nc"
    path = folder / f"{fmt}-{uuid.uuid4().hex[:10]}{suffix}"
    _write(ds, encoding, fmt, path)
    before = tse.stats().missing_filled
    compare_store(data.draw, str(path), fmt, [str(n) for n in ds.variables])
    ABSENT[fmt] += tse.stats().missing_filled - before


@pytest.mark.parametrize("fmt", REMOTE_FORMATS)
@SETTINGS
@given(data=st.data())
def test_generated_netcdf_over_http_matches_xarray_on_every_path(fmt: str, folder: Path, served: Any, data: st.DataObject) -> None:
    """NetCDF4 read by byte range through the engine, NetCDF3 through xarray's scipy store
    over an fsspec file, against xarray's own engine over the same URL."""
    import fsspec

    family = _family(fmt)
    ds, encoding = data.draw(datasets(family), label="dataset")
    name = f"{fmt}-{uuid.uuid4().hex[:10]}.nc"
    _write(ds, encoding, family, folder / name)
    url = f"{served.url}/{name}"
    if family == "netcdf4":
        compare_store(data.draw, url, fmt, [str(n) for n in ds.variables], "h5netcdf")
    else:
        compare_store(data.draw, url, fmt, [str(n) for n in ds.variables], "scipy",
                      reference=lambda: fsspec.open(url).open())
