"""NetCDF4/HDF5 over HTTP and S3, and from file objects, read chunk by chunk by byte range
through the engine: values equal ``engine="h5netcdf"`` on the same file, over Python's
``http.server`` (``tsexplore.testing.http.StoreServer``) and moto's S3 server."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import fsspec
import numpy as np
import pytest
import xarray as xr

import tsexplore as tse
from tsexplore.errors import MissingChunkError, RemoteReadError
from tsexplore.resolve import sources_of
from tsexplore.sources.netcdf import NetCDFVariableSource
from tsexplore.sources.ranged import RangedSource
from tsexplore.testing.http import StoreServer

pytestmark = pytest.mark.filterwarnings("ignore::xarray.SerializationWarning")


def _dataset(seed: int = 0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "temp": (("time", "y", "x"), rng.normal(size=(12, 20, 30)).astype("f4"), {"units": "K"}),
            "count": (("y", "x"), rng.integers(0, 100, size=(20, 30)).astype(">i4")),
            "flat": (("time", "x"), rng.normal(size=(12, 30))),
            "label": ("time", np.array([f"t{i}" for i in range(12)], dtype=object)),
        },
        coords={"time": np.arange(12), "y": np.linspace(0, 1, 20), "x": np.arange(30.0)},
        attrs={"title": "remote"},
    )


ENCODING = {
    "temp": {"zlib": True, "complevel": 3, "shuffle": True, "chunksizes": (4, 8, 16)},
    "count": {"zlib": True, "fletcher32": True, "chunksizes": (7, 30)},
    "flat": {"contiguous": True},
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NetCDF4 files written by h5netcdf and netCDF4 (chunked, compressed, checksummed,
    contiguous, a group, chunks never written) and a NetCDF3 file."""
    root = tmp_path_factory.mktemp("remote-netcdf")
    ds = _dataset()
    ds.to_netcdf(root / "h5.nc", engine="h5netcdf", encoding=ENCODING)
    ds.to_netcdf(root / "nc4.nc", engine="netcdf4", encoding=ENCODING)
    ds.to_netcdf(root / "grouped.nc", engine="h5netcdf", encoding=ENCODING)
    _dataset(1).to_netcdf(root / "grouped.nc", engine="h5netcdf", group="inner", mode="a")
    sparse = xr.Dataset({"s": (("y", "x"), np.full((20, 30), np.nan, "f4"))})
    sparse.to_netcdf(root / "sparse.nc", engine="h5netcdf",
                     encoding={"s": {"chunksizes": (5, 5), "_FillValue": -1.0}})
    import h5py

    with h5py.File(root / "sparse.nc", "a") as f:  # a dataset with chunks never written
        d = f.create_dataset("partial", shape=(20, 30), dtype="f4", chunks=(5, 5), fillvalue=7.0)
        d[:5, :5] = 1.0
    ds.drop_vars("label").to_netcdf(root / "classic.nc", engine="scipy")
    shutil.copy(root / "h5.nc", root / "no-extension")
    # a NetCDF3 file whose record coordinate lies past what fsspec reads from the start of a
    # file whose server ignores Range (it refuses to read further)
    n = 2000
    big = xr.Dataset({"v": (("time", "x"), np.arange(n * 600.0).reshape(n, 600))},
                     coords={"time": np.arange(n), "x": np.arange(600)})
    big.to_netcdf(root / "classic-big.nc", engine="scipy", unlimited_dims=["time"])
    for parent in Path(__file__).resolve().parents:  # shared/data beside the checkout, when there
        if (parent / "shared" / "data" / "basin_mask.nc").is_file():
            shutil.copy(parent / "shared" / "data" / "basin_mask.nc", root / "basin_mask.nc")
            break
    return root


@pytest.fixture(scope="module")
def server(folder: Path):  # type: ignore[no-untyped-def]
    with StoreServer(folder) as srv:
        yield srv


def _ranged(ds: xr.Dataset) -> dict[str, str]:
    return {src.name: type(src).__name__ for src in sources_of(ds)}  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["h5.nc", "nc4.nc", "basin_mask.nc", "sparse.nc"])
def test_an_http_url_reads_by_range_and_equals_h5netcdf(folder: Path, server: StoreServer, name: str) -> None:
    if not (folder / name).exists():
        pytest.skip(f"{name} is in shared/data, which is absent here")
    url = f"{server.url}/{name}"
    before = len(server.requests)
    ds = tse.open_dataset(url)
    kinds = _ranged(ds)
    assert kinds and all(k == "RangedSource" for n, k in kinds.items() if n != "label"), kinds
    assert "by byte range" in ds.encoding["tsexplore_reader"]
    with xr.open_dataset(folder / name, engine="h5netcdf") as ref:
        xr.testing.assert_identical(ds.load(), ref.load())
    ranged = [r for r in server.requests[before:] if r[2] == 206]
    assert ranged, server.requests[before:]


def test_only_the_chunks_a_selection_needs_are_fetched(server: StoreServer) -> None:
    ds = tse.open_dataset(f"{server.url}/h5.nc")
    src = next(s for s in sources_of(ds) if s.name == "temp")  # type: ignore[attr-defined]
    assert isinstance(src, RangedSource) and src.chunks == (4, 8, 16)
    tse.stats()
    before = tse.stats().range_requests
    _ = ds.temp.isel(time=0, y=slice(0, 8), x=slice(0, 16)).values
    assert tse.stats().range_requests - before == 1  # one chunk: one ranged GET
    with xr.open_dataset(f"{server.url}/h5.nc", engine="h5netcdf") as ref:
        np.testing.assert_array_equal(ds.temp[5:9].values, ref.temp[5:9].values)


def test_chunks_never_written_read_as_the_fill_value_and_strict_mode_says_so(folder: Path, server: StoreServer) -> None:
    url = f"{server.url}/sparse.nc"
    before = tse.stats().missing_filled
    ds = tse.open_dataset(url)
    with xr.open_dataset(folder / "sparse.nc", engine="h5netcdf") as ref:
        xr.testing.assert_identical(ds.load(), ref.load())
    # h5netcdf writes every chunk of s (NaNs too); of partial one chunk of 4 x 6 was written
    assert tse.stats().missing_filled - before == 23
    strict = tse.open_dataset(url, missing="raise")
    np.testing.assert_array_equal(strict.partial[:5, :5].values, 1.0)
    with pytest.raises(MissingChunkError, match=r"chunk \(1, 1\) of HDF5 dataset /partial was never written"):
        _ = strict.partial[5:10, 5:10].values


def test_a_group_and_a_tree_over_http(folder: Path, server: StoreServer) -> None:
    url = f"{server.url}/grouped.nc"
    ds = tse.open_dataset(url, group="inner")
    assert _ranged(ds)["temp"] == "RangedSource"
    with xr.open_dataset(folder / "grouped.nc", engine="h5netcdf", group="inner") as ref:
        xr.testing.assert_identical(ds.load(), ref.load())
    tree = tse.open_datatree(url)
    with xr.open_datatree(folder / "grouped.nc", engine="h5netcdf") as ref:
        xr.testing.assert_identical(tree.load(), ref.load())


def test_fsspec_file_objects_read_by_range_through_their_filesystem(folder: Path, server: StoreServer) -> None:
    """``xr.open_dataset(fsspec.open(url).open(), engine=...)``, as users open remote files."""
    with fsspec.open(f"{server.url}/h5.nc").open() as f:
        ds = xr.open_dataset(f, engine="tsexplore")
        assert _ranged(ds)["temp"] == "RangedSource"
        with xr.open_dataset(folder / "h5.nc", engine="h5netcdf") as ref:
            xr.testing.assert_identical(ds.load(), ref.load())


@pytest.mark.parametrize("kind", ["bytes", "memoryview", "BytesIO", "open"])
def test_local_file_objects_and_bytes_read_by_range(folder: Path, kind: str) -> None:
    path = folder / "nc4.nc"
    data = path.read_bytes()
    obj = {"bytes": data, "memoryview": memoryview(data), "BytesIO": io.BytesIO(data)}.get(kind)
    handle = open(path, "rb") if obj is None else None
    try:
        ds = tse.open_dataset(obj if handle is None else handle)
        assert _ranged(ds)["temp"] == "RangedSource"
        with xr.open_dataset(path) as ref:  # xarray's default engine (netCDF4 wrote it)
            xr.testing.assert_identical(ds.load(), ref.load())
    finally:
        if handle is not None:
            handle.close()


def test_a_server_error_is_retried_and_counted(server: StoreServer) -> None:
    ds = tse.open_dataset(f"{server.url}/h5.nc")
    with xr.open_dataset(f"{server.url}/h5.nc", engine="h5netcdf") as ref:
        expected = ref.temp[:4, :8, :16].values
    before = tse.stats().retries
    server.fail("h5.nc", status=503, times=1)
    np.testing.assert_array_equal(ds.temp[:4, :8, :16].values, expected)
    assert tse.stats().retries - before == 1
    server.fail("h5.nc", status=403, times=1)
    with pytest.raises(RemoteReadError, match=r"chunk \(0, 0, 1\) of HDF5 dataset /temp"):
        _ = ds.temp[:4, :8, 16:].values


def _netcdf3(records: list[str], seed: int = 0) -> xr.Dataset:
    """A NetCDF3 dataset with the record (unlimited) variables ``records`` of several
    types (bytes, shorts, chars, doubles: padded and unpadded records) and fixed ones."""
    rng = np.random.default_rng(seed)
    kinds = {
        "b": (("time", "y"), rng.integers(-100, 100, size=(9, 3)).astype("i1")),
        "s": (("time", "x"), rng.integers(-999, 999, size=(9, 5)).astype("i2")),
        "c": (("time", "nchar"), rng.integers(97, 123, size=(9, 3)).astype("u1").view("S1")),
        "d": (("time", "y", "x"), rng.normal(size=(9, 3, 5))),
        "time": ("time", np.arange(9.0) * 6),
    }
    return xr.Dataset(
        {name: kinds[name] for name in records} | {"fixed": (("y", "x"), rng.normal(size=(3, 5)).astype("f4"))},
        coords={"x": np.arange(5), "y": np.arange(3.0)}, attrs={"title": "nc3"},
    )


@pytest.mark.parametrize("records", [["time", "b", "s", "c", "d"], ["s"], ["c"], ["b", "d"], ["time"]])
@pytest.mark.parametrize("fmt", ["NETCDF3_64BIT", "NETCDF3_CLASSIC"])
@pytest.mark.parametrize("max_runs", [64, 1])
def test_netcdf3_is_read_by_range_of_its_records(tmp_path: Path, records: list[str], fmt: str, max_runs: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Record variables are read record by record (one record variable: its records follow
    each other unpadded), or as the one range holding a chunk's records (``max_runs=1``; a
    record need not be a whole number of items long), on any grid; values equal xarray's
    scipy engine. Coordinates are read value by value (as a long record coordinate is)."""
    from tsexplore.sources import hdf5, netcdf3

    monkeypatch.setattr(netcdf3, "COORDINATE_HULL", 0)
    monkeypatch.setattr(hdf5, "MAX_RUNS", max_runs)
    path = tmp_path / "nc3.nc"
    _netcdf3(records).to_netcdf(path, engine="scipy", format=fmt, unlimited_dims=["time"])
    data = path.read_bytes()
    with xr.open_dataset(path, engine="scipy") as ref:
        expected = ref.load()
    for grid in (None, {"time": 2, "y": 2, "x": 3, "nchar": 2}, {"time": 1}):
        ds = tse.open_dataset(data, grid=grid)
        assert {type(s).__name__ for s in sources_of(ds)} == {"RangedSource"}
        xr.testing.assert_identical(ds.load(), expected)
        np.testing.assert_array_equal(tse.open_dataset(data, grid=grid).isel(time=[7, 1, 3]).fixed, expected.fixed)
    assert expected.encoding["unlimited_dims"] == tse.open_dataset(data).encoding["unlimited_dims"] == {"time"}


def test_netcdf3_over_http_reads_the_header_and_records_by_range(folder: Path, server: StoreServer) -> None:
    before = len(server.requests)
    ds = tse.open_dataset(f"{server.url}/classic.nc")
    assert {type(s).__name__ for s in sources_of(ds)} == {"RangedSource"}
    opened = [r for r in server.requests[before:] if r[2] == 206]
    assert opened and len(server.requests) - before < 10  # the header, then the coordinates
    with xr.open_dataset(folder / "classic.nc", engine="scipy") as ref:
        xr.testing.assert_identical(ds.load(), ref.load())
    assert "by byte range" in ds.encoding["tsexplore_reader"]


def test_s3_with_storage_options(folder: Path, moto_s3) -> None:  # type: ignore[no-untyped-def]
    base = moto_s3.upload(folder, "netcdf")
    so = moto_s3.storage_options()
    for name in ("h5.nc", "nc4.nc"):
        ds = tse.open_dataset(f"{base}/{name}", storage_options=so)
        assert _ranged(ds)["temp"] == "RangedSource"
        with xr.open_dataset(folder / name, engine="h5netcdf") as ref:
            xr.testing.assert_identical(ds.load(), ref.load())
        xr.testing.assert_identical(
            xr.open_dataset(f"{base}/{name}", engine="tsexplore", storage_options=so).load(),
            xr.open_dataset(f"{base}/{name}", engine="h5netcdf", storage_options=so).load(),
        )


def test_query_strings_and_chains_read_through_xarrays_store(folder: Path, server: StoreServer) -> None:
    """What is not read by range still opens, through xarray's h5netcdf store, and says so."""
    fs = fsspec.filesystem("memory")
    fs.pipe("/remote-netcdf/h5.nc", (folder / "h5.nc").read_bytes())
    ds = tse.open_dataset("simplecache::memory://remote-netcdf/h5.nc")
    assert set(_ranged(ds).values()) == {"NetCDFVariableSource"}
    assert "not by byte range" in ds.encoding["tsexplore_reader"]
    with xr.open_dataset(folder / "h5.nc", engine="h5netcdf") as ref:
        xr.testing.assert_identical(ds.load(), ref.load())
    queried = tse.open_dataset(f"{server.url}/h5.nc?version=1")
    assert all(isinstance(s, NetCDFVariableSource) for s in sources_of(queried))
    xr.testing.assert_identical(queried.load(), ds.load())


def test_reductions_batches_and_dask_stream_remote_netcdf(folder: Path, server: StoreServer) -> None:
    """What works on Zarr works here: tse.reduce, tse.batches and chunks={} read through the
    engine, chunk by chunk by range."""
    url = f"{server.url}/h5.nc"
    with xr.open_dataset(folder / "h5.nc", engine="h5netcdf") as ref:
        expected = ref.temp.load()
    ds = tse.open_dataset(url)
    np.testing.assert_allclose(tse.reduce(ds.temp, "max", dim="time").values, expected.max("time").values)
    seen = 0
    for batch in tse.batches(ds.temp, sample={"time": 4, "y": 8, "x": 16}, batch_size=3, shuffle=True, seed=1):
        seen += len(batch)
    assert seen == (12 // 4) * (20 // 8) * (30 // 16)
    lazy = tse.open_dataset(url, chunks={})
    assert lazy.temp.chunks == ((4, 4, 4), (8, 8, 4), (16, 14))
    xr.testing.assert_identical(lazy.temp.compute(), expected)


def test_a_url_without_a_netcdf_name_opens_with_via(folder: Path, server: StoreServer) -> None:
    """A URL is not probed (a Zarr store's open spends no request on it): ``via=`` names the
    engine of a NetCDF file whose name does not say."""
    ds = tse.open_dataset(f"{server.url}/no-extension", via="h5netcdf")
    assert _ranged(ds)["temp"] == "RangedSource"
    with xr.open_dataset(folder / "h5.nc", engine="h5netcdf") as ref:
        xr.testing.assert_identical(ds.load(), ref.load())


def test_a_file_closed_by_its_owner_fails_to_read_and_never_reads_another(folder: Path, tmp_path: Path) -> None:
    """A read after the caller closed the file object raises; the descriptor it had is not
    read again (another file may have it by then)."""
    from tsexplore.errors import ChunkReadError

    f = open(folder / "h5.nc", "rb")
    ds = tse.open_dataset(f)
    np.testing.assert_array_equal(ds.temp[0, 0, :3].values, xr.open_dataset(folder / "h5.nc").temp[0, 0, :3].values)
    fd = f.fileno()
    f.close()
    other = open(tmp_path / "other", "wb+")  # may take the same descriptor number
    other.write(b"\0" * 100_000)
    other.flush()
    try:
        with pytest.raises((ChunkReadError, ValueError)):
            _ = ds.temp[8:, 8:, 16:].values
    finally:
        other.close()
    assert fd >= 0


@pytest.fixture(scope="module")
def plain_server(folder: Path):  # type: ignore[no-untyped-def]
    """Python's own ``http.server`` over the folder: it ignores ``Range`` (every answer is
    the whole file), as the issue's users serve files."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def handle(self) -> None:
            try:
                super().handle()
            except ConnectionError:  # a client that took what it needed and hung up
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, name="plain-http-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.parametrize(("name", "engine"), [("h5.nc", "h5netcdf"), ("classic.nc", "scipy"),
                                              ("classic-big.nc", "scipy")])
def test_a_server_that_ignores_range_serves_every_chunk(folder: Path, plain_server: str, name: str, engine: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each range is cut from the whole answer (counted as a whole-object fallback); a
    NetCDF3 header whose coordinates lie past the first block comes from the whole file."""
    from tsexplore.sources import netcdf

    wholes: list[str] = []
    real = netcdf._whole
    monkeypatch.setattr(netcdf, "_whole", lambda inp: wholes.append(inp.obj) or real(inp))
    before = tse.stats().whole_object_fallbacks
    ds = tse.open_dataset(f"{plain_server}/{name}")
    assert bool(wholes) == (name == "classic-big.nc")
    assert {type(s).__name__ for s in sources_of(ds) if s.name != "label"} == {"RangedSource"}  # type: ignore[attr-defined]
    with xr.open_dataset(folder / name, engine=engine) as ref:
        xr.testing.assert_identical(ds.load(), ref.load())
    assert tse.stats().whole_object_fallbacks > before
