"""The source contract (:class:`test_sources_conformance.SourceConformance`) for NetCDF4/HDF5
read by byte range: over HTTP (an async byte store), from the bytes of a file and from a
local file object (a blocking one). The truth is what xarray's h5netcdf engine reads from
the same file."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from test_sources_conformance import CHUNKS, DIMS, SHAPE, Case, SourceConformance, _truth

import tsexplore as tse
from tsexplore.sources.ranged import RangedSource
from tsexplore.testing.http import StoreServer
from tsexplore.xarray import sources_of

pytestmark = pytest.mark.filterwarnings("ignore::xarray.SerializationWarning")

#: a virtual grid for the contiguous variable (edge chunks along every dimension)
GRID = {"time": 3, "y": 4, "x": 7}


@pytest.fixture(scope="module")
def hdf5_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A NetCDF4 file: a chunked, compressed, checksummed float32 variable (edge chunks
    everywhere), a big-endian int16 one with a fill value and chunks never written, and a
    contiguous float64 one."""
    path = tmp_path_factory.mktemp("conformance-hdf5") / "f.nc"
    ds = xr.Dataset(
        {
            "v": (DIMS, _truth("float32"), {"units": "m"}),
            "w": (DIMS, _truth(">i2", seed=1)),
            "c": (DIMS, _truth("float64", seed=2)),
        },
        coords={"time": np.arange(SHAPE[0])},
        attrs={"title": "conformance"},
    )
    ds["w"][6:] = -7
    ds.to_netcdf(path, engine="h5netcdf", encoding={
        "v": {"chunksizes": CHUNKS, "zlib": True, "shuffle": True, "fletcher32": True},
        "w": {"chunksizes": CHUNKS, "_FillValue": np.int16(-7)},
        "c": {"contiguous": True},
    })
    return path


def _case(path: Path, open_what: object, xr_path: object) -> Case:
    expected = xr.open_dataset(path, engine="h5netcdf").load()
    raw_ds = xr.open_dataset(path, engine="h5netcdf", decode_cf=False).load()
    raw = {name: raw_ds[name].values for name in expected.data_vars}
    return Case(open=lambda: tse.open_dataset(open_what, grid=GRID), expected=expected, raw=raw,
                path=xr_path, xr_kwargs={"grid": GRID})  # type: ignore[arg-type]


class HDF5Conformance(SourceConformance):
    test_zarr_decoder_path = None  # not a Zarr source (pytest collects no test by this name)

    def test_read_by_range(self, ds: xr.Dataset, case: Case) -> None:
        for name in case.raw:
            (src,) = sources_of(ds[name])
            assert isinstance(src, RangedSource), src
        (contiguous,) = sources_of(ds["c"])
        assert contiguous.layout.layout == "contiguous" and contiguous.chunks == (3, 4, 7)


@pytest.fixture(scope="module")
def served(hdf5_file: Path):  # type: ignore[no-untyped-def]
    with StoreServer(hdf5_file.parent) as server:
        yield server


class TestHDF5OverHTTP(HDF5Conformance):
    @pytest.fixture(scope="class")
    @classmethod
    def case(cls, hdf5_file: Path, served: StoreServer) -> Case:
        url = f"{served.url}/{hdf5_file.name}"
        return _case(hdf5_file, url, url)


class TestHDF5FromBytes(HDF5Conformance):
    @pytest.fixture(scope="class")
    @classmethod
    def case(cls, hdf5_file: Path) -> Case:
        data = hdf5_file.read_bytes()
        return _case(hdf5_file, data, data)


class TestHDF5FromBytesIO(HDF5Conformance):
    @pytest.fixture(scope="class")
    @classmethod
    def case(cls, hdf5_file: Path) -> Case:
        data = hdf5_file.read_bytes()
        return _case(hdf5_file, io.BytesIO(data), io.BytesIO(data))
