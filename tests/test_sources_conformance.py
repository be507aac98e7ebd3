"""Every source passes the same suite against an independent ground truth.

The truth is the NumPy array the test wrote (Zarr, ``.npy``, in-memory objects), the values
xarray's own backends read from the same file (NetCDF3/4), or ``SyntheticSource.evaluate``.
Each subclass of :class:`SourceConformance` provides a ``case`` fixture; the base class runs
the contract: geometry, every chunk equal to its NumPy region, ``.values`` equal to the truth,
orthogonal selections, pickling, and ``xr.open_dataset(..., engine="tsexplore")`` identical to
``tse.open_dataset``.
"""

from __future__ import annotations

import math
import pickle
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec

import tsexplore as tse
from tsexplore.engine import Priority, get_engine
from tsexplore.engine.array import read_selection
from tsexplore.sources.codecs import chain_from_zarr
from tsexplore.testing.http import StoreServer
from tsexplore.xarray import sources_of

pytestmark = pytest.mark.filterwarnings(
    "ignore:Consolidated metadata:UserWarning",
    "ignore::xarray.SerializationWarning",
)

SHAPE = (10, 13, 7)  # no dimension divisible by its chunk length: every grid has edge chunks
CHUNKS = (4, 5, 3)
DIMS = ("time", "y", "x")


@dataclass
class Case:
    """One source under test.

    ``open`` returns the tsexplore Dataset; ``expected`` the ground-truth Dataset (in memory,
    CF-decoded the way xarray decodes it); ``raw`` the stored (undecoded) values per variable,
    the truth for single chunks; ``path`` what ``xr.open_dataset(engine="tsexplore")`` gets.
    """

    open: Callable[[], xr.Dataset]
    expected: xr.Dataset
    raw: dict[str, np.ndarray]
    path: str | None = None
    fallback: bool | None = None  # zarr only: decoded by zarr's own codec pipeline
    xr_kwargs: dict[str, Any] = field(default_factory=dict)


def _truth(dtype: str = "float32", shape: tuple[int, ...] = SHAPE, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 10).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dt)


def assert_same_values(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected)


class SourceConformance:
    """The contract every source satisfies; subclasses define the ``case`` fixture (class-
    scoped where building it writes or reads back a store: the tests only read a case)."""

    @pytest.fixture
    def case(self) -> Case:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def ds(self, case: Case) -> xr.Dataset:
        return case.open()

    def _sources(self, ds: xr.Dataset, case: Case) -> dict[str, Any]:
        found = {}
        for name in case.raw:
            srcs = sources_of(ds[name])
            assert len(srcs) == 1, f"{name}: expected one engine source, found {srcs}"
            found[name] = srcs[0]
        return found

    def test_variables_dims_coords_attrs(self, ds: xr.Dataset, case: Case) -> None:
        assert set(ds.data_vars) == set(case.expected.data_vars)
        assert dict(ds.sizes) == dict(case.expected.sizes)
        assert ds.attrs == case.expected.attrs
        for name, var in case.expected.variables.items():
            assert ds[name].dims == var.dims, name
            assert ds[name].dtype == var.dtype, name
            assert ds[name].attrs == var.attrs, name
        for name in case.expected.coords:
            xr.testing.assert_identical(ds[name].variable.load(), case.expected[name].variable)

    def test_geometry(self, ds: xr.Dataset, case: Case) -> None:
        for name, src in self._sources(ds, case).items():
            raw = case.raw[name]
            assert src.shape == raw.shape
            assert src.dtype == raw.dtype.newbyteorder("=")
            assert len(src.dims) == len(src.chunks) == raw.ndim
            assert src.grid_shape == tuple(math.ceil(s / c) for s, c in zip(src.shape, src.chunks))
            assert src.nchunks == math.prod(src.grid_shape)
            covered = np.zeros(src.shape, dtype=np.int32)
            for idx in src.iter_chunks():
                sl = src.chunk_slices(idx)
                covered[sl] += 1
                assert src.chunk_shape(idx) == covered[sl].shape
                assert src.chunk_nbytes(idx) == covered[sl].size * src.dtype.itemsize
            assert (covered == 1).all(), "the chunk grid must tile the array exactly once"
            assert isinstance(src.token, str) and src.token
            with pytest.raises(tse.errors.IndexingError):
                src.chunk_slices(src.grid_shape)

    def test_every_chunk_equals_numpy_region(self, ds: xr.Dataset, case: Case) -> None:
        eng = get_engine()
        for name, src in self._sources(ds, case).items():
            indices = list(src.iter_chunks())
            chunks = eng.fetch(src, indices, Priority.VISIBLE, timeout=60)
            for idx, chunk in zip(indices, chunks):
                expected = case.raw[name][src.chunk_slices(idx)]
                assert chunk.shape == src.chunk_shape(idx), (name, idx)
                assert_same_values(chunk, expected.astype(expected.dtype.newbyteorder("=")))

    def test_values_equal_truth(self, ds: xr.Dataset, case: Case) -> None:
        for name in case.expected.data_vars:
            assert_same_values(ds[name].values, case.expected[name].values)

    def test_orthogonal_selections(self, ds: xr.Dataset, case: Case) -> None:
        rng = np.random.default_rng(1)
        for name, src in self._sources(ds, case).items():
            raw = case.raw[name]
            raw = raw.astype(raw.dtype.newbyteorder("="))
            for _ in range(4):
                key = []
                for n in raw.shape:
                    kind = rng.integers(4)
                    if kind == 0:
                        key.append(int(rng.integers(-n, n)))
                    elif kind == 1:
                        a, b = sorted(rng.integers(0, n + 1, 2))
                        key.append(slice(int(a), int(b), int(rng.integers(1, 4))))
                    elif kind == 2:
                        key.append(slice(None, None, -int(rng.integers(1, 3))))
                    else:
                        key.append(rng.integers(0, n, int(rng.integers(1, 5))))
                expected = raw[
                    np.ix_(
                        *[
                            np.arange(n)[k] if not isinstance(k, int) else [k]
                            for k, n in zip(key, raw.shape)
                        ]
                    )
                ]
                expected = expected.reshape(
                    [s for s, k in zip(expected.shape, key) if not isinstance(k, int)]
                )
                got = read_selection(src, tuple(key), timeout=60)
                assert_same_values(got, expected)

    def test_concurrent_reads_of_one_source(self, ds: xr.Dataset, case: Case) -> None:
        """Four threads read every chunk at once (wrappers give each its own cache keys)."""
        import random
        import threading

        from tsexplore.testing.wrappers import CountingSource

        eng = get_engine()
        errors: list[BaseException] = []

        def worker(name: str, src: Any, seed: int) -> None:
            try:
                indices = list(src.iter_chunks())
                random.Random(seed).shuffle(indices)
                for idx, chunk in zip(indices, eng.fetch(src, indices, timeout=60)):
                    expected = case.raw[name][src.chunk_slices(idx)]
                    assert_same_values(chunk, expected.astype(expected.dtype.newbyteorder("=")))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = []
        for name, src in self._sources(ds, case).items():
            for seed in range(4):
                wrapped = CountingSource(src)
                threads.append(threading.Thread(target=worker, args=(name, wrapped, seed)))
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors[0]

    def test_pickled_source_reads_the_same(self, ds: xr.Dataset, case: Case) -> None:
        for name, src in self._sources(ds, case).items():
            clone = pickle.loads(pickle.dumps(src))
            assert clone.token == src.token
            last = tuple(g - 1 for g in src.grid_shape)
            tse.close()  # a fresh engine: the clone really reads
            (chunk,) = get_engine().fetch(clone, [last], timeout=60)
            assert get_engine().snapshot().reads == 1
            expected = case.raw[name][src.chunk_slices(last)]
            assert_same_values(chunk, expected.astype(expected.dtype.newbyteorder("=")))

    def test_xarray_backend_equals_open_dataset(self, ds: xr.Dataset, case: Case) -> None:
        # an in-memory source's class sets this test to None (no path for xr.open_dataset)
        assert case.path is not None, "a case with no path: set the test to None in its class"
        via_xr = xr.open_dataset(case.path, engine="tsexplore", **case.xr_kwargs)
        xr.testing.assert_identical(via_xr.load(), ds.load())

    def test_zarr_decoder_path(self, ds: xr.Dataset, case: Case) -> None:
        # a class whose source is not Zarr sets this test to None
        assert case.fallback is not None, "a Zarr case says whether zarr decodes it (fallback)"
        name = "v" if "v" in case.raw else next(iter(case.raw))  # "v": written with the codec
        src = self._sources(ds, case)[name]  # under test
        assert (src.decoder == "zarr") == case.fallback, src.decoder
        if src.decoder == "tsexplore":
            assert chain_from_zarr(src._array.metadata) is not None


# -- Zarr -------------------------------------------------------------------------------------

V3_CODECS: dict[str, dict[str, Any]] = {
    "blosc": {"compressors": BloscCodec(cname="zstd", clevel=1, shuffle="shuffle")},
    "zstd": {"compressors": ZstdCodec(level=1)},
    "gzip": {"compressors": GzipCodec(level=1)},
    "none": {"compressors": None},
    "crc32c": {"compressors": [Crc32cCodec()]},
    "zstd-crc32c": {"compressors": [ZstdCodec(level=1), Crc32cCodec()]},
    "sharding": {"compressors": ZstdCodec(level=1), "shards": (8, 10, 6)},
    # inner chunks of one element along time, the index first, checksums inside the shard
    "sharding-start": {"serializer": "sharding-start", "shards": (8, 10, 6)},
    "sharding-crc32c": {"compressors": [ZstdCodec(level=1), Crc32cCodec()], "shards": (4, 10, 6)},
    # a transpose inside the shard: zarr decodes
    "sharding-transpose": {"serializer": "sharding-transpose", "shards": (8, 10, 6)},
}
V2_CODECS: dict[str, dict[str, Any]] = {
    "blosc": {"compressors": numcodecs.Blosc(cname="lz4")},
    "zstd": {"compressors": numcodecs.Zstd(level=1)},
    "gzip": {"compressors": numcodecs.GZip(level=1)},
    "zlib": {"compressors": numcodecs.Zlib(level=1)},
    "none": {"compressors": None},
    "fortran-order": {"compressors": numcodecs.Zstd(level=1), "order": "F"},
    "delta-filter": {"compressors": numcodecs.Zstd(), "filters": [numcodecs.Delta("<f8")]},
}
FALLBACK = {"sharding-transpose", "delta-filter"}


def _sharded_serializer(kind: str, inner: tuple[int, ...]) -> Any:
    """A sharding codec written by hand: the index at the start, or a transpose inside."""
    from zarr.codecs import BytesCodec, ShardingCodec, TransposeCodec

    if kind == "sharding-start":
        return ShardingCodec(chunk_shape=inner, codecs=[BytesCodec(), BloscCodec(cname="lz4")],
                             index_location="start")
    order = tuple(reversed(range(len(inner))))
    return ShardingCodec(chunk_shape=inner, codecs=[TransposeCodec(order=order), BytesCodec(),
                                                    ZstdCodec(level=1)])


def write_zarr(
    url: Any, fmt: int, codec: str, dtype: str = "float32", consolidate: bool = True
) -> dict[str, np.ndarray]:
    """A group with a data variable ``v``, a second variable ``w`` and 1-D coordinates
    (``url``: a path, URL or zarr store)."""
    kwargs = dict((V3_CODECS if fmt == 3 else V2_CODECS)[codec])
    if codec == "delta-filter":
        dtype = "float64"
    group = zarr.open_group(url, mode="w", zarr_format=fmt)
    group.attrs.update({"title": f"zarr v{fmt} {codec}", "n": 3})
    data = {"v": _truth(dtype), "w": _truth("int16", SHAPE[1:], seed=2)}
    dims = {"v": DIMS, "w": DIMS[1:]}
    for name, values in data.items():
        extra = dict(kwargs) if name == "v" else {}
        if fmt == 3:
            extra["dimension_names"] = dims[name]
        chunks = CHUNKS[-values.ndim :]
        if "shards" in extra:
            extra["shards"] = extra["shards"][-values.ndim :]
        if isinstance(extra.get("serializer"), str):  # a hand-made sharding codec
            inner = ((1, *CHUNKS[1:]) if extra["serializer"] == "sharding-start" else CHUNKS)
            codec = _sharded_serializer(extra.pop("serializer"), inner[-values.ndim :])
            extra["serializer"] = codec
            extra["compressors"] = None
            chunks = extra.pop("shards")  # the shard is the array's chunk; the codec splits it
        # a v2 fill_value is a CF mask for xarray (and so for tsexplore): none here, the
        # masking semantics are checked against xr.open_zarr in TestZarrWrittenByXarray
        fill = 0 if fmt == 3 else None
        arr = group.create_array(
            name, shape=values.shape, chunks=chunks, dtype=values.dtype, fill_value=fill, **extra
        )
        if fmt == 2:
            arr.attrs["_ARRAY_DIMENSIONS"] = list(dims[name])
        arr.attrs["units"] = f"{name}-units"
        arr[...] = values
    for dim, n in zip(DIMS, SHAPE):
        c = group.create_array(
            dim,
            shape=(n,),
            chunks=(n,),
            dtype="int64",
            # v2: no fill_value (zarr's default 0 would be a CF mask turning 0 into NaN, as
            # xarray reads it -- the masking is checked in TestZarrWrittenByXarray)
            **({"dimension_names": (dim,)} if fmt == 3 else {"fill_value": None}),
        )
        if fmt == 2:
            c.attrs["_ARRAY_DIMENSIONS"] = [dim]
        c[...] = np.arange(n) * 10
    if consolidate:
        zarr.consolidate_metadata(url)
    return data


def zarr_expected(data: dict[str, np.ndarray], fmt: int, codec: str) -> xr.Dataset:
    coords = {dim: (dim, np.arange(n) * 10) for dim, n in zip(DIMS, SHAPE)}
    return xr.Dataset(
        {
            "v": (DIMS, data["v"], {"units": "v-units"}),
            "w": (DIMS[1:], data["w"], {"units": "w-units"}),
        },
        coords=coords,
        attrs={"title": f"zarr v{fmt} {codec}", "n": 3},
    )


ZARR_PARAMS = [(3, c) for c in V3_CODECS] + [(2, c) for c in V2_CODECS]
ZARR_IDS = [f"v{f}-{c}" for f, c in ZARR_PARAMS]


@pytest.fixture(scope="module")
def zarr_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("zarr-conformance")
    for fmt, codec in ZARR_PARAMS:
        write_zarr(str(root / f"v{fmt}-{codec}.zarr"), fmt, codec)
    return root


def _zarr_case(root: Path | str, url: str, fmt: int, codec: str) -> Case:
    group = zarr.open_group(
        str(root / f"v{fmt}-{codec}.zarr") if isinstance(root, Path) else root, mode="r"
    )
    data = {"v": np.asarray(group["v"][...]), "w": np.asarray(group["w"][...])}
    return Case(
        open=lambda: tse.open_dataset(url),
        expected=zarr_expected(data, fmt, codec),
        raw=data,
        path=url,
        fallback=codec in FALLBACK,
    )


class TestZarrLocal(SourceConformance):
    @pytest.fixture(params=ZARR_PARAMS, ids=ZARR_IDS, scope="class")
    @classmethod
    def case(cls, request: pytest.FixtureRequest, zarr_root: Path) -> Case:
        fmt, codec = request.param
        return _zarr_case(zarr_root, str(zarr_root / f"v{fmt}-{codec}.zarr"), fmt, codec)

    def test_truth_written_is_what_zarr_reads(self, case: Case) -> None:
        """Guard the ground truth itself: zarr reads back what the test wrote."""
        assert case.raw["v"].dtype.kind in "fi"
        assert case.raw["v"].shape == SHAPE


class TestZarrBigEndianV2(SourceConformance):
    @pytest.fixture
    def case(self, tmp_path: Path) -> Case:
        path = str(tmp_path / "be.zarr")
        values = _truth(">i4")
        group = zarr.open_group(path, mode="w", zarr_format=2)
        arr = group.create_array(
            "v", shape=SHAPE, chunks=CHUNKS, dtype=">i4", compressors=None, fill_value=None
        )
        arr.attrs["_ARRAY_DIMENSIONS"] = list(DIMS)
        arr[...] = values
        expected = xr.Dataset({"v": (DIMS, values.astype("<i4"))})
        return Case(lambda: tse.open_dataset(path), expected, {"v": values}, path, fallback=False)


class TestZarrMemory(SourceConformance):
    @pytest.fixture(
        params=[(3, "zstd"), (3, "sharding"), (2, "blosc"), (2, "none")],
        ids=["v3-zstd", "v3-sharding", "v2-blosc", "v2-none"],
        scope="class",
    )
    @classmethod
    def case(cls, request: pytest.FixtureRequest) -> Case:
        fmt, codec = request.param
        url = f"memory://tse-{uuid.uuid4().hex[:8]}/v{fmt}-{codec}.zarr"
        data = write_zarr(url, fmt, codec)
        return Case(
            lambda: tse.open_dataset(url),
            zarr_expected(data, fmt, codec),
            data,
            url,
            fallback=codec in FALLBACK,
        )


@pytest.fixture(scope="module")
def http_server(zarr_root: Path):  # type: ignore[no-untyped-def]
    with StoreServer(zarr_root) as srv:
        yield srv


class TestZarrHTTP(SourceConformance):
    @pytest.fixture(
        params=[
            (3, "blosc"),
            (3, "zstd-crc32c"),
            (3, "sharding"),
            (2, "zstd"),
            (2, "delta-filter"),
        ],
        ids=["v3-blosc", "v3-zstd-crc32c", "v3-sharding", "v2-zstd", "v2-delta"],
        scope="class",
    )
    @classmethod
    def case(
        cls, request: pytest.FixtureRequest, zarr_root: Path, http_server: StoreServer
    ) -> Case:
        fmt, codec = request.param
        url = f"{http_server.url}/v{fmt}-{codec}.zarr"
        return _zarr_case(zarr_root, url, fmt, codec)

    def test_reads_go_over_http(self, ds: xr.Dataset, case: Case, http_server: StoreServer) -> None:
        name = Path(case.path or "").name
        before = http_server.count(f"{name}/v/")
        _ = ds["v"].isel(time=0).values
        assert http_server.count(f"{name}/v/") > before


class TestZarrWrittenByXarray(SourceConformance):
    """CF encoding as xarray writes it (packed ints with _FillValue, times, NaN fill): the
    truth is ``xr.open_zarr`` of the same store."""

    @pytest.fixture(params=[2, 3], ids=["v2", "v3"], scope="class")
    @classmethod
    def case(cls, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
        fmt = request.param
        rng = np.random.default_rng(11)
        temp = rng.uniform(-5, 30, SHAPE)
        temp[rng.random(SHAPE) < 0.2] = np.nan
        mask = rng.uniform(0, 1, SHAPE[1:])
        mask[0, 0] = np.nan
        times = np.datetime64("2001-01-01", "ns") + np.arange(SHAPE[0]) * np.timedelta64(6, "h")
        source = xr.Dataset(
            {"temp": (DIMS, temp, {"units": "degC"}), "mask": (DIMS[1:], mask)},
            coords={"time": times, "y": np.arange(SHAPE[1]) * 0.5},
            attrs={"title": f"xarray-written v{fmt}"},
        )
        source["temp"].encoding.update(
            {
                "dtype": "int16",
                "scale_factor": 0.01,
                "add_offset": 10.0,
                "_FillValue": -32768,
                "chunks": CHUNKS,
            }
        )
        source["mask"].encoding.update({"_FillValue": -9999.0, "chunks": CHUNKS[1:]})
        path = tmp_path_factory.mktemp("xarray-written") / f"x{fmt}.zarr"
        source.to_zarr(path, mode="w", zarr_format=fmt, consolidated=True)
        expected = xr.open_zarr(path, consolidated=True).load()
        raw_group = zarr.open_group(str(path), mode="r")
        raw = {name: np.asarray(raw_group[name][...]) for name in ("temp", "mask")}
        assert np.isnan(expected["temp"].values).any()  # the mask is part of the truth
        return Case(lambda: tse.open_dataset(path), expected, raw, str(path), fallback=False)


# -- NetCDF -----------------------------------------------------------------------------------


def _netcdf_case(path: Path, engine: str, grid: dict[str, int]) -> Case:
    expected = xr.open_dataset(path, engine=engine).load()
    raw_ds = xr.open_dataset(path, engine=engine, decode_cf=False).load()
    raw = {name: raw_ds[name].values for name in expected.data_vars}
    return Case(
        open=lambda: tse.open_dataset(path, grid=grid),
        expected=expected,
        raw=raw,
        path=str(path),
    )


class TestNetCDF3(SourceConformance):
    test_zarr_decoder_path = None  # not a Zarr source (pytest collects no test by this name)
    @pytest.fixture(scope="class")
    @classmethod
    def case(cls, shared_data: Path) -> Case:
        # a grid with edge chunks along every dimension (241 x 480 are not multiples)
        return _netcdf_case(
            shared_data / "eraint_uvz.nc",
            "scipy",
            {"month": 1, "level": 2, "latitude": 150, "longitude": 300},
        )


class TestNetCDF4(SourceConformance):
    test_zarr_decoder_path = None  # not a Zarr source (pytest collects no test by this name)
    @pytest.fixture(scope="class")
    @classmethod
    def case(cls, shared_data: Path) -> Case:
        return _netcdf_case(
            shared_data / "basin_mask.nc", "h5netcdf", {"Z": 15, "Y": 100, "X": 200}
        )


# -- .npy ------------------------------------------------------------------------------------


class TestNpy(SourceConformance):
    test_zarr_decoder_path = None  # not a Zarr source (pytest collects no test by this name)
    @pytest.fixture(params=["C", "F"])
    def case(self, request: pytest.FixtureRequest, tmp_path: Path) -> Case:
        values = _truth("float64")
        if request.param == "F":
            values = np.asfortranarray(values)
        path = tmp_path / "arr.npy"
        np.save(path, values)
        dims = tuple(f"dim_{i}" for i in range(values.ndim))
        expected = xr.Dataset({"arr": (dims, np.ascontiguousarray(values))})
        expected["arr"].attrs["source_file"] = str(path)
        return Case(
            lambda: tse.open_dataset(path, grid=CHUNKS), expected, {"arr": values}, str(path)
        )

    def test_default_grid_is_one_chunk_when_small(self, tmp_path: Path) -> None:
        path = tmp_path / "small.npy"
        np.save(path, np.arange(12, dtype="u1").reshape(3, 4))
        (src,) = sources_of(tse.open_dataset(path))
        assert src.chunks == (3, 4)


# -- synthetic ---------------------------------------------------------------------------------


class TestSynthetic(SourceConformance):
    test_zarr_decoder_path = None  # not a Zarr source (pytest collects no test by this name)
    test_xarray_backend_equals_open_dataset = None  # an in-memory object has no path to open
    @pytest.fixture(params=["float32", "int16", "uint8", "float64"])
    def case(self, request: pytest.FixtureRequest) -> Case:
        ds = tse.synthetic(SHAPE, CHUNKS, request.param)
        (src,) = sources_of(ds)
        values = src.evaluate(tuple(slice(0, n) for n in SHAPE))
        expected = xr.Dataset({"data": (DIMS, values)}, attrs=dict(src.attrs))
        expected["data"].attrs.update(src.attrs)
        return Case(lambda: ds, expected, {"data": values})

    def test_evaluate_is_independent_of_the_grid(self) -> None:
        (a,) = sources_of(tse.synthetic((9, 20), (2, 3)))
        (b,) = sources_of(tse.synthetic((9, 20), (9, 20)))
        region = (slice(3, 8), slice(5, 19))
        np.testing.assert_array_equal(a.evaluate(region), b.evaluate(region))
        assert a.token != b.token


# -- in-memory objects ---------------------------------------------------------------------------


class TestInMemory(SourceConformance):
    test_zarr_decoder_path = None  # not a Zarr source (pytest collects no test by this name)
    test_xarray_backend_equals_open_dataset = None  # an in-memory object has no path to open
    @pytest.fixture(params=["numpy", "dask", "dataarray", "dataset-dask"])
    def case(self, request: pytest.FixtureRequest) -> Case:
        import dask.array as da

        values = _truth("float32")
        kind = request.param
        if kind == "numpy":
            obj: Any = values
            name, dims = "data", tuple(f"dim_{i}" for i in range(3))
            opener = lambda: tse.open_dataset(obj, grid=CHUNKS)  # noqa: E731
        elif kind == "dask":
            obj = da.from_array(values, chunks=CHUNKS)
            name, dims = "data", tuple(f"dim_{i}" for i in range(3))
            opener = lambda: tse.open_dataset(obj)  # noqa: E731
        elif kind == "dataarray":
            obj = xr.DataArray(values, dims=DIMS, name="temp", attrs={"units": "K"})
            name, dims = "temp", DIMS
            opener = lambda: tse.open_dataset(obj, grid=CHUNKS)  # noqa: E731
        else:
            obj = xr.Dataset(
                {"temp": (DIMS, values, {"units": "K"})},
                coords={"time": np.arange(SHAPE[0])},
                attrs={"a": 1},
            ).chunk(dict(zip(DIMS, CHUNKS)))
            name, dims = "temp", DIMS
            opener = lambda: tse.open_dataset(obj)  # noqa: E731
        expected = xr.Dataset({name: (dims, values)})
        if kind in ("dataarray", "dataset-dask"):
            expected[name].attrs["units"] = "K"
        if kind == "dataset-dask":
            expected = expected.assign_coords(time=np.arange(SHAPE[0]))
            expected.attrs["a"] = 1
        return Case(opener, expected, {name: values})

    def test_dask_chunks_become_the_grid(self) -> None:
        import dask.array as da

        (src,) = sources_of(tse.open_dataset(da.zeros((10, 10), chunks=(3, 4))))
        assert src.chunks == (3, 4)


# -- image folders -----------------------------------------------------------------------------


class TestImageFolder(SourceConformance):
    test_zarr_decoder_path = None  # not a Zarr source (pytest collects no test by this name)
    @pytest.fixture(params=["RGB", "L"])
    def case(self, request: pytest.FixtureRequest, tmp_path: Path) -> Case:
        from PIL import Image

        rng = np.random.default_rng(7)
        mode = request.param
        frames = []
        folder = tmp_path / "imgs"
        folder.mkdir()
        for i in range(5):
            shape = (13, 7, 3) if mode == "RGB" else (13, 7)
            pixels = rng.integers(0, 256, size=shape, dtype=np.uint8)
            Image.fromarray(pixels, mode).save(folder / f"img{i:02d}.png")
            frames.append(pixels.reshape(13, 7, -1))
        values = np.stack(frames)  # what Pillow wrote, independent of tsexplore
        files = np.array([f"img{i:02d}.png" for i in range(5)], dtype=object)
        root = str(folder.resolve())
        expected = xr.Dataset(
            {"image": (("frame", "y", "x", "channel"), values, {"source": root, "mode": mode})},
            coords={"file": ("frame", files), "frame": np.arange(5)},
            attrs={"title": "images of imgs", "source": root},
        )
        return Case(lambda: tse.open_dataset(folder), expected, {"image": values}, str(folder))
