"""Parity on real files: those shipped inside installed packages, and ``../shared/data``.

The files are found at test time from the packages' own folders (scipy's
``scipy/io/tests/data``, xarray's ``xarray/tests/data`` incl. a gzipped NetCDF3 file, h5py's
``h5py/tests/data_files``, cartopy's ``cartopy/data/netcdf``); a package that is not
installed or ships none skips with the reason. Each file is compared on every path with
decoder options and ``isel`` selections drawn at random (see ``_parity.py``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import xarray as xr
from _parity import FILES, SETTINGS, compare_store, same_store_engine
from hypothesis import given, settings
from hypothesis import strategies as st

PACKAGE_DATA = [
    ("scipy", "io/tests/data", ("*.nc",)),
    ("xarray", "tests/data", ("*.nc", "*.nc.gz")),
    ("h5py", "tests/data_files", ("*.h5",)),
    ("cartopy", "data/netcdf", ("*.nc",)),
]
pytestmark = pytest.mark.filterwarnings("ignore")
FILE_SETTINGS = settings(SETTINGS, max_examples=min(SETTINGS.max_examples, 3))


def _package_files() -> list:
    params = []
    for package, sub, patterns in PACKAGE_DATA:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            params.append(pytest.param(None, marks=pytest.mark.skip(reason=f"{package} is not installed"), id=package))
            continue
        folder = Path(spec.origin).parent / sub
        files = sorted(f for pattern in patterns for f in folder.glob(pattern))
        if not files:
            reason = f"{package} ships no {'/'.join(patterns)} files under {folder}"
            params.append(pytest.param(None, marks=pytest.mark.skip(reason=reason), id=package))
        params.extend(pytest.param(f, id=f"{package}/{f.name}") for f in files)
    return params


def _engine(path: Path) -> str:
    """xarray's engine over the store tsexplore reads the file with: scipy for NetCDF3 (also
    gzipped); for HDF5 the library that wrote it (netcdf4 or h5netcdf)."""
    return same_store_engine(str(path))


def _names(path: Path, engine: str) -> list[str]:
    with xr.open_dataset(path, engine=engine, decode_cf=False) as ds:
        return [str(n) for n in ds.variables]


def _check_file(path: Path, data: st.DataObject) -> None:
    engine = _engine(path)
    FILES[str(path)] = engine
    compare_store(data.draw, str(path), f"file:{engine}", _names(path, engine), engine)


@pytest.mark.parametrize("path", _package_files())
@FILE_SETTINGS
@given(data=st.data())
def test_package_file_matches_xarray_on_every_path(path: Path, data: st.DataObject) -> None:
    _check_file(path, data)


@pytest.mark.parametrize("name", ["eraint_uvz.nc", "basin_mask.nc"])
@FILE_SETTINGS
@given(data=st.data())
def test_shared_data_file_matches_xarray_on_every_path(shared_data: Path, name: str, data: st.DataObject) -> None:
    _check_file(shared_data / name, data)


@pytest.mark.parametrize("name", ["eraint_uvz.nc", "basin_mask.nc"])
@FILE_SETTINGS
@given(data=st.data())
def test_shared_data_file_over_http_matches_xarray_on_every_path(shared_data: Path, name: str, data: st.DataObject) -> None:
    """The same files served by Python's http.server: NetCDF4 against xarray's h5netcdf
    engine over the same URL, NetCDF3 against its scipy engine over an fsspec file of it."""
    import fsspec

    from tsexplore.testing.http import StoreServer

    path = shared_data / name
    with StoreServer(shared_data) as server:
        url = f"{server.url}/{name}"
        FILES[url] = _engine(path)
        if _engine(path) == "scipy":
            compare_store(data.draw, url, "file:http-scipy", _names(path, "scipy"), "scipy",
                          reference=lambda: fsspec.open(url).open())
        else:
            compare_store(data.draw, url, "file:http-h5netcdf", _names(path, "h5netcdf"), "h5netcdf")
