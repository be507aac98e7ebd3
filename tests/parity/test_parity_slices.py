"""Slices mean what NumPy says, also where xarray's own lazy reader disagrees.

xarray's lazy indexing (``LazilyIndexedArray``) normalises a slice with ``slice.indices`` and
keeps a negative start: on a length-3 axis ``slice(-4, None, -1)`` (NumPy: nothing) reads the
whole axis reversed, and empty negative-step slices such as ``slice(None, -1, -1)`` raise
``IndexError: range object index out of range``, for every backend. tsexplore matches NumPy
(the in-memory semantics of the same ``isel``); this test checks every slice of a small
array on every format, and counts where xarray's own lazy reader differs (a note, not a
requirement: if xarray fixes its reader the counts drop to zero).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from _parity import XARRAY_LAZY_DIVERGES, outcome

import tsexplore as tse

pytestmark = pytest.mark.filterwarnings("ignore")
SHAPE = (3, 4)


def _slices(n: int) -> list[slice]:
    bounds = [None, *range(-n - 1, n + 1)]
    return [slice(a, b, s) for a, b in itertools.product(bounds, bounds) for s in (-2, -1, 2)]


@pytest.fixture(params=["zarr2", "zarr3", "netcdf3", "netcdf4"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    ds = xr.Dataset(
        {"v": (("a", "b"), np.arange(12.0).reshape(SHAPE)), "c": (("a", "b", "n"), np.full((*SHAPE, 2), b"x"))}
    )
    fmt = request.param
    if fmt.startswith("zarr"):
        path = tmp_path / "s.zarr"
        ds.to_zarr(path, zarr_format=int(fmt[-1]), mode="w", encoding={"v": {"chunks": (2, 3)}})
        return str(path), "zarr"
    path = tmp_path / "s.nc"
    engine = "scipy" if fmt == "netcdf3" else "h5netcdf"
    ds.to_netcdf(path, engine=engine)
    return str(path), engine


def test_every_slice_matches_numpy(store: tuple[str, str]) -> None:
    path, engine = store
    numpy_truth = xr.open_dataset(path, engine=engine).load()
    ours = tse.open_dataset(path)
    via_backend = xr.open_dataset(path, engine="tsexplore")
    theirs = xr.open_dataset(path, engine=engine)
    checked = 0
    for dim, n in zip(("a", "b"), SHAPE):
        for sl in _slices(n):
            expected = numpy_truth.isel({dim: sl})
            np.testing.assert_array_equal(  # the truth is NumPy's own slicing
                expected["v"].values, numpy_truth["v"].values[(sl,) if dim == "a" else (slice(None), sl)]
            )
            xr.testing.assert_identical(ours.isel({dim: sl}).load(), expected)
            if sl.step == -1:  # the xarray-style open takes the same path: a subset suffices
                xr.testing.assert_identical(via_backend.isel({dim: sl}).load(), expected)
            checked += 1
            status, got = outcome(lambda sl=sl, dim=dim: theirs.isel({dim: sl}).load())
            if status == "error" or not got.identical(expected):
                XARRAY_LAZY_DIVERGES["negative-step" if (sl.step or 1) < 0 else "slice"] += 1
    assert checked == sum(len(_slices(n)) for n in SHAPE)


def test_the_documented_slices() -> None:
    """The two cases of the docstring, on an in-memory engine-backed array (NumPy truth)."""
    values = np.arange(3.0)
    ds = tse.open_dataset(xr.Dataset({"v": ("x", values)}))
    assert ds["v"].isel(x=slice(-4, None, -1)).values.tolist() == values[-4::-1].tolist() == []
    assert ds["v"].isel(x=slice(None, -1, -1)).values.tolist() == values[:-1:-1].tolist() == []
    assert ds["v"].isel(x=slice(-1, -5, -2)).values.tolist() == values[-1:-5:-2].tolist() == [2.0, 0.0]
