"""Strings and byte orders decode as xarray's own engines decode them: object, NumPy
``StringDType``, fixed-width bytes and unicode, on Zarr v2 and v3 and NetCDF4; big-endian
numbers come out native while variable-width strings are never given a byte order."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import tsexplore as tse
from tsexplore.sources.base import native_dtype

pytestmark = pytest.mark.filterwarnings(
    "ignore::zarr.errors.ZarrUserWarning",
    "ignore:The data type:UserWarning",
    "ignore:Consolidated metadata:UserWarning",
)


def _strings() -> dict[str, np.ndarray]:
    words = ["", "a", "ümlaut", "naïve café", "x" * 40, "mixed 123"]
    out = {
        "object": np.array(words, dtype=object).reshape(2, 3),
        "unicode": np.array(words, dtype="U12").reshape(2, 3),
        "bytes": np.array([w.encode("ascii", "replace") for w in words], dtype="S12").reshape(2, 3),
    }
    if hasattr(np.dtypes, "StringDType"):
        out["stringdtype"] = np.array(words, dtype=np.dtypes.StringDType()).reshape(2, 3)
    return out


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("kind", sorted(_strings()))
def test_zarr_strings_decode_as_xarray_does(tmp_path, zarr_format, kind):
    values = _strings()[kind]
    ds = xr.Dataset({"s": (("a", "b"), values)}, coords={"b": [10, 20, 30]})
    path = tmp_path / "s.zarr"
    ds.to_zarr(path, zarr_format=zarr_format)
    want = xr.open_dataset(path, engine="zarr")
    got = tse.open_dataset(path)
    assert got["s"].dtype == want["s"].dtype
    xr.testing.assert_identical(got, want)
    np.testing.assert_array_equal(got["s"].isel(a=1, b=slice(1, None)).values,
                                  want["s"].isel(a=1, b=slice(1, None)).values)


@pytest.mark.parametrize("kind", ["object", "unicode", "bytes"])
def test_netcdf4_strings_decode_as_xarray_does(tmp_path, kind):
    pytest.importorskip("netCDF4")
    values = _strings()[kind]
    ds = xr.Dataset({"s": (("a", "b"), values)})
    for engine in ("netcdf4", "h5netcdf"):
        path = tmp_path / f"s-{engine}.nc"
        ds.to_netcdf(path, engine=engine)
        xr.testing.assert_identical(tse.open_dataset(path), xr.open_dataset(path, engine=engine))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_big_endian_numbers_come_out_native_beside_strings(tmp_path, zarr_format):
    big = np.arange(12, dtype=">f8").reshape(3, 4)
    ds = xr.Dataset({"big": (("y", "x"), big), "name": (("y",), np.array(["a", "bb", "ccc"], dtype=object))})
    path = tmp_path / "be.zarr"
    ds.to_zarr(path, zarr_format=zarr_format, encoding={"big": {"dtype": ">f8"}})
    got = tse.open_dataset(path)
    want = xr.open_dataset(path, engine="zarr")
    xr.testing.assert_identical(got, want)
    assert got["big"].values.dtype.isnative
    np.testing.assert_array_equal(got["big"].values, big.astype("=f8"))


def test_native_dtype_leaves_variable_width_strings_alone():
    assert native_dtype(">i4") == np.dtype("=i4")
    assert native_dtype(np.dtype(">U3")) == np.dtype("=U3")
    assert native_dtype(object) == np.dtype(object)
    assert native_dtype("S5") == np.dtype("S5")
    if hasattr(np.dtypes, "StringDType"):
        assert native_dtype(np.dtypes.StringDType()) == np.dtypes.StringDType()


def test_netcdf4_byte_attributes_and_complex_as_xarray_reads_them(tmp_path):
    pytest.importorskip("netCDF4")
    ds = xr.Dataset({"x": ("t", np.arange(3.0), {"raw": b"\x01\x02", "text": b"abc"})},
                    attrs={"blob": b"bytes"})
    path = tmp_path / "attrs.nc"
    ds.to_netcdf(path, engine="netcdf4")
    xr.testing.assert_identical(tse.open_dataset(path), xr.open_dataset(path, engine="netcdf4"))
    cplx = xr.Dataset({"z": ("t", np.array([1 + 2j, 3 - 1j]))})
    path = tmp_path / "complex.nc"
    cplx.to_netcdf(path, engine="netcdf4", auto_complex=True)
    got = tse.open_dataset(path, auto_complex=True)
    xr.testing.assert_identical(got, xr.open_dataset(path, engine="netcdf4", auto_complex=True))
    assert got["z"].dtype == np.complex128
