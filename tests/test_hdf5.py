"""tsexplore.sources.hdf5 against h5py's own reads: chunk indexes and filter pipelines of
files written by h5py, h5netcdf and netCDF4 (and the real files the packages ship), every
chunk fetched by its byte ranges and decoded by tsexplore."""

from __future__ import annotations

import importlib.util
import io
import itertools
import math
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tsexplore.errors import CorruptChunkError, TsExploreError, UnsupportedFilterError
from tsexplore.sources import hdf5

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def read_by_ranges(layout: hdf5.ChunkLayout, data: bytes, out: bool = False) -> np.ndarray:
    """The whole dataset, each chunk fetched by its byte ranges from ``data`` (the file's
    bytes) and decoded by tsexplore; never-written chunks as the fill value."""
    whole = np.empty(layout.shape, layout.out_dtype)
    for index in itertools.product(*(range(g) for g in layout.grid_shape)):
        ranges = layout.ranges(index)
        region = layout.region(index)
        if ranges is None:
            whole[region] = layout.fill(index)
            continue
        parts = [memoryview(data)[a:b] for a, b in ranges]
        if out:
            target = np.empty(tuple(s.stop - s.start for s in region), layout.out_dtype)
            assert layout.decode(index, parts, out=target) is target
            whole[region] = target
        else:
            whole[region] = layout.decode(index, parts)
    return whole


def write(make) -> bytes:  # type: ignore[no-untyped-def]
    """The bytes of an HDF5 file ``make(h5py.File)`` writes."""
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        make(f)
    return buf.getvalue()


def check_file(data: bytes, out: bool = False) -> int:
    """Every dataset of the file read by range equals h5py's read; how many were compared."""
    layouts = hdf5.scan(io.BytesIO(data))
    compared = 0
    with h5py.File(io.BytesIO(data), "r") as f:
        for path, layout in layouts.items():
            if not layout.by_range:
                continue
            expected = f[path][()]
            got = read_by_ranges(layout, data, out=out)
            assert got.dtype == layout.out_dtype and got.dtype.isnative
            np.testing.assert_array_equal(got, expected, err_msg=path)
            compared += 1
    return compared


# -- checksums ---------------------------------------------------------------------------------


@given(st.binary(min_size=1, max_size=3000))
@settings(max_examples=200, deadline=None)
def test_fletcher32_is_hdf5s(data: bytes) -> None:
    """numcodecs' Fletcher32 implements HDF5's algorithm (and appends it little-endian)."""
    from numcodecs.fletcher32 import Fletcher32

    stored = int.from_bytes(Fletcher32().encode(np.frombuffer(data, np.uint8))[-4:], "little")
    assert hdf5.fletcher32(data) == stored


def test_fletcher32_of_long_runs_of_ones() -> None:
    """Sums that reach multiples of 65535 (HDF5 keeps those as 65535, not 0)."""
    from numcodecs.fletcher32 import Fletcher32

    for n in (65535 * 2, 360 * 2, 2**17 + 1, 1):
        data = b"\xff" * n
        stored = int.from_bytes(Fletcher32().encode(np.frombuffer(data, np.uint8))[-4:], "little")
        assert hdf5.fletcher32(data) == stored, n


# -- h5py's own files, many layouts and filters -----------------------------------------------

DTYPES = ["<f4", ">f8", "<i2", ">u4", "u1", "<c8", "S5", "?"]


@st.composite
def dataset_specs(draw):  # type: ignore[no-untyped-def]
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 13)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, s + 2)) for s in shape)
    chunks = tuple(min(c, max(s, 1)) if draw(st.booleans()) else c for c, s in zip(chunks, shape))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    filters = {}
    if draw(st.booleans()):
        filters["shuffle"] = True
    compression = draw(st.sampled_from([None, "gzip", "gzip9"]))
    if compression:
        filters["compression"] = "gzip"
        filters["compression_opts"] = 9 if compression == "gzip9" else 1
    if draw(st.booleans()):
        filters["fletcher32"] = True
    fill = draw(st.booleans())
    written = draw(st.sampled_from(["all", "some", "none"]))
    return shape, chunks, dtype, filters, fill, written


def _values(shape: tuple[int, ...], dtype: np.dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype.kind == "S":
        return rng.integers(97, 123, size=(*shape, dtype.itemsize), dtype=np.uint8).view(dtype).reshape(shape)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind == "c":
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape).astype(dtype)
    return rng.normal(size=shape).round(2).astype(dtype)


@SETTINGS
@given(spec=dataset_specs())
def test_chunked_datasets_read_by_range_equal_h5py(spec) -> None:  # type: ignore[no-untyped-def]
    shape, chunks, dtype, filters, fill, written = spec
    values = _values(shape, dtype)
    fillvalue = values.reshape(-1)[0] if fill else None

    def make(f: h5py.File) -> None:
        maxshape = (None,) * len(shape) if any(c > n for c, n in zip(chunks, shape)) else None
        d = f.create_dataset("v", shape=shape, dtype=dtype, chunks=chunks, fillvalue=fillvalue,
                             maxshape=maxshape, **filters)
        if written == "all":
            d[...] = values
        elif written == "some":  # the first half along axis 0: later chunks never written
            half = max(1, shape[0] // 2)
            d[:half] = values[:half]

    data = write(make)
    layout = hdf5.scan(io.BytesIO(data))["/v"]
    assert layout.layout == "chunked" and layout.chunks == chunks
    if written == "none":
        assert layout.stored_chunks == 0
    assert check_file(data) == 1
    assert check_file(data, out=True) == 1


@SETTINGS
@given(shape=st.lists(st.integers(1, 40), min_size=1, max_size=3).map(tuple),
       grid=st.lists(st.integers(1, 17), min_size=3, max_size=3), dtype=st.sampled_from(DTYPES),
       data=st.data())
def test_contiguous_datasets_split_into_any_grid_equal_h5py(shape, grid, dtype, data) -> None:  # type: ignore[no-untyped-def]
    """Contiguous data is one byte range; any virtual grid is read as runs (or their hull)."""
    values = _values(shape, np.dtype(dtype))
    raw = write(lambda f: f.create_dataset("v", data=values))
    chunks = tuple(min(g, s) for g, s in zip(grid, shape)) if data.draw(st.booleans()) else None
    with h5py.File(io.BytesIO(raw), "r") as f:
        layout = hdf5.read_layout(f["v"], chunks)
    assert layout.layout == "contiguous" and layout.offset > 0
    np.testing.assert_array_equal(read_by_ranges(layout, raw), values)
    np.testing.assert_array_equal(read_by_ranges(layout, raw, out=True), values)


def test_a_contiguous_region_with_many_runs_is_read_as_one_range() -> None:
    values = np.arange(200 * 30, dtype="<i4").reshape(200, 30)
    raw = write(lambda f: f.create_dataset("v", data=values))
    with h5py.File(io.BytesIO(raw), "r") as f:
        layout = hdf5.read_layout(f["v"], (200, 3))
    ranges = layout.ranges((0, 1))
    assert len(ranges) == 1 and ranges[0][1] - ranges[0][0] > 200 * 3 * 4  # the hull
    np.testing.assert_array_equal(read_by_ranges(layout, raw), values)


def test_a_contiguous_dataset_never_written_reads_as_its_fill_value() -> None:
    raw = write(lambda f: f.create_dataset("v", shape=(5, 4), dtype="f4", fillvalue=-7.5))
    layout = hdf5.scan(io.BytesIO(raw))["/v"]
    assert layout.ranges((0, 0)) is None
    np.testing.assert_array_equal(read_by_ranges(layout, raw), np.full((5, 4), -7.5, "f4"))


def test_layouts_that_are_not_read_by_range_say_why() -> None:
    def make(f: h5py.File) -> None:
        f.create_dataset("compact", data=np.arange(4), **{"track_times": False})
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple((4,))
        h5py.h5d.create(f.id, b"really_compact", h5py.h5t.NATIVE_INT32, space, dcpl=dcpl)
        f.create_dataset("strings", data=np.array(["a", "bb"], dtype=h5py.string_dtype()))
        f.create_dataset("scalar", data=3.0)

    layouts = hdf5.scan(io.BytesIO(write(make)))
    assert not layouts["/really_compact"].by_range and "compact" in layouts["/really_compact"].why
    assert not layouts["/strings"].by_range and "variable-length" in layouts["/strings"].why
    assert not layouts["/scalar"].by_range
    with pytest.raises(TsExploreError, match="through h5py"):
        layouts["/strings"].ranges((0,))


# -- corruption, bombs and missing filters -----------------------------------------------------


def _one_chunk(filters: dict, values: np.ndarray) -> tuple[hdf5.ChunkLayout, bytearray]:  # type: ignore[type-arg]
    raw = bytearray(write(lambda f: f.create_dataset("v", data=values, chunks=values.shape, **filters)))
    return hdf5.scan(io.BytesIO(bytes(raw)))["/v"], raw


def test_a_flipped_byte_fails_the_fletcher32_checksum_naming_the_chunk() -> None:
    values = np.arange(1000, dtype="<f8")
    layout, raw = _one_chunk({"fletcher32": True}, values)
    (a, b), = layout.ranges((0,))
    np.testing.assert_array_equal(layout.decode((0,), [raw[a:b]]), values)
    raw[a + 17] ^= 0x10
    with pytest.raises(CorruptChunkError, match=r"chunk \(0,\) of HDF5 dataset /v: Fletcher-32"):
        layout.decode((0,), [raw[a:b]])


def test_cut_short_and_foreign_bytes_are_corrupt_chunks() -> None:
    values = np.arange(5000, dtype="<i4")
    layout, raw = _one_chunk({"compression": "gzip"}, values)
    (a, b), = layout.ranges((0,))
    with pytest.raises(CorruptChunkError, match="bytes read where the file stores"):
        layout.decode((0,), [raw[a : b - 10]])
    pipeline = layout.pipeline
    assert pipeline is not None
    with pytest.raises(CorruptChunkError, match="ends early"):
        pipeline.decode(raw[a : b - 10], 0, "chunk (0,) of HDF5 dataset /v")
    with pytest.raises(CorruptChunkError, match="corrupt"):
        pipeline.decode(b"not deflate at all", 0, "chunk (0,)")


def test_a_chunk_that_inflates_past_its_size_fails_before_it_is_allocated() -> None:
    import zlib

    pipeline = hdf5.FilterPipeline((hdf5.Filter(hdf5.DEFLATE, 0, (4,)),), np.dtype("u1"), (1024,))
    bomb = zlib.compress(b"\0" * (256 * 2**20), 9)  # 256 MiB in ~250 kB
    with pytest.raises(CorruptChunkError, match="more than the 1024 the chunk holds"):
        pipeline.decode(bomb, 0, "chunk (3,)")


def test_a_filter_hdf5_cannot_apply_names_what_to_install() -> None:
    pipeline = hdf5.FilterPipeline((hdf5.Filter(32099, 0, ()),), np.dtype("f4"), (4,))
    assert not pipeline.native
    with pytest.raises(UnsupportedFilterError, match="filter 32099.*pip install hdf5plugin"):
        pipeline.decode(b"\0" * 16, 0, "chunk (0,) of HDF5 dataset /v")


# -- hdf5plugin's filters ------------------------------------------------------------------------

hdf5plugin = pytest.importorskip("hdf5plugin") if importlib.util.find_spec("hdf5plugin") else None
needs_plugin = pytest.mark.skipif(hdf5plugin is None, reason="hdf5plugin is not installed")


def _plugin_filters() -> list:  # type: ignore[type-arg]
    if hdf5plugin is None:
        return []
    p = hdf5plugin
    return [
        pytest.param(p.Blosc(cname="lz4", clevel=5, shuffle=p.Blosc.SHUFFLE), True, id="blosc-lz4-shuffle"),
        pytest.param(p.Blosc(cname="zstd", clevel=3, shuffle=p.Blosc.BITSHUFFLE), True, id="blosc-zstd-bitshuffle"),
        pytest.param(p.Blosc(cname="blosclz", clevel=9, shuffle=p.Blosc.NOSHUFFLE), True, id="blosc-blosclz"),
        pytest.param(p.Zstd(clevel=5), True, id="zstd"),
        pytest.param(p.LZ4(nbytes=0), True, id="lz4"),
        pytest.param(p.LZ4(nbytes=512), True, id="lz4-small-blocks"),
        pytest.param(p.BZip2(blocksize=5), True, id="bzip2"),
        pytest.param(p.Bitshuffle(cname="lz4"), False, id="bitshuffle-lz4"),
        pytest.param(p.Blosc2(cname="zstd"), False, id="blosc2"),
    ]


_PLUGIN_WRITER = """
import io, json, sys
import numpy as np, h5py, hdf5plugin
values = np.load(sys.argv[1])
compression = json.loads(sys.argv[2])
compression["compression_opts"] = tuple(compression["compression_opts"])
buf = io.BytesIO()
with h5py.File(buf, "w") as f:
    f.create_dataset("v", data=values, chunks=(10, 8, 5), **compression)
    f.create_dataset("shuffled", data=values, chunks=(16, 23, 2), shuffle=True, **compression)
open(sys.argv[3], "wb").write(buf.getvalue())
"""


def write_with_plugin(values: np.ndarray, compression: Any, tmp_path: Path) -> bytes:
    """The file written in a fresh interpreter without ``HDF5_PLUGIN_PATH``: importing netCDF4
    points it at netCDF4's own filter plugins (built against its own HDF5), and h5py's HDF5
    then fails to create a blosc dataset with hdf5plugin's filter in that process."""
    import json
    import os
    import subprocess
    import sys

    np.save(tmp_path / "values.npy", values)
    spec = {"compression": int(compression["compression"]),
            "compression_opts": [int(v) for v in compression["compression_opts"]]}
    out = subprocess.run([sys.executable, "-c", _PLUGIN_WRITER, str(tmp_path / "values.npy"),
                          json.dumps(spec), str(tmp_path / "f.h5")], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"})
    assert out.returncode == 0, out.stderr
    return (tmp_path / "f.h5").read_bytes()


@needs_plugin
@pytest.mark.parametrize(("compression", "native"), _plugin_filters())
@pytest.mark.parametrize("dtype", ["<f4", ">i8", "u1"])
def test_hdf5plugin_filters_read_by_range_equal_h5py(compression, native, dtype, tmp_path) -> None:  # type: ignore[no-untyped-def]
    values = _values((37, 23, 5), np.dtype(dtype), seed=3)
    data = write_with_plugin(values, compression, tmp_path)
    layout = hdf5.scan(io.BytesIO(data))["/v"]
    if native:
        assert layout.pipeline is not None and layout.pipeline.native
        assert check_file(data) == check_file(data, out=True) == 2
    elif layout.by_range:  # decoded through HDF5's own filters on an in-memory copy of the pipeline
        assert layout.pipeline is not None and not layout.pipeline.native
        assert check_file(data) == check_file(data, out=True) == 2
    else:  # HDF5 does not rebuild its parameters: read through h5py, and says so
        assert "applied by HDF5 itself" in layout.why


# -- files written by h5netcdf and netCDF4, and real files -------------------------------------


@pytest.mark.parametrize("engine", ["h5netcdf", "netcdf4"])
@pytest.mark.parametrize("encoding", [
    {},
    {"zlib": True, "complevel": 4, "shuffle": True},
    {"zlib": True, "fletcher32": True, "chunksizes": (3, 5, 7)},
    {"contiguous": True},
])
def test_netcdf_writers_files_read_by_range_equal_h5py(tmp_path: Path, engine: str, encoding: dict) -> None:  # type: ignore[type-arg]
    pytest.importorskip({"netcdf4": "netCDF4", "h5netcdf": "h5netcdf"}[engine])
    rng = np.random.default_rng(1)
    ds = xr.Dataset(
        {"t": (("time", "y", "x"), rng.normal(size=(11, 13, 17)).astype("f4")),
         "n": (("y", "x"), rng.integers(0, 9, size=(13, 17)).astype("i2"))},
        coords={"time": np.arange(11), "y": np.arange(13.0), "x": np.arange(17.0)},
    )
    path = tmp_path / "f.nc"
    ds.to_netcdf(path, engine=engine, encoding={"t": encoding})
    data = path.read_bytes()
    assert check_file(data) >= 2


def _real_files() -> list:  # type: ignore[type-arg]
    found = []
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "data").is_dir():
            shared = parent / "shared" / "data"
            break
    folders = [("shared", shared, "*.nc")]
    for package, sub, pattern in [("xarray", "tests/data", "*.nc"), ("h5py", "tests/data_files", "*.h5"),
                                  ("cartopy", "data/netcdf", "*.nc")]:
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin is not None:
            folders.append((package, Path(spec.origin).parent / sub, pattern))
    for label, folder, pattern in folders:
        for p in sorted(folder.glob(pattern)):
            with open(p, "rb") as f:
                if f.read(8) == b"\x89HDF\r\n\x1a\n":  # HDF5 (NetCDF3 files are not)
                    found.append(pytest.param(p, id=f"{label}/{p.name}"))
    return found


@pytest.mark.parametrize("path", _real_files())
def test_real_files_read_by_range_equal_h5py(path: Path) -> None:
    """Datasets read by range equal h5py's reads; the others (variable-length strings,
    compact...) are read chunk by chunk through h5py, also equal."""
    data = path.read_bytes()
    layouts = hdf5.scan(io.BytesIO(data))
    assert layouts
    by_range = check_file(data)
    with h5py.File(io.BytesIO(data), "r") as f:
        for name, layout in layouts.items():
            if layout.by_range:
                continue
            assert layout.why
            expected = f[name][()]
            if not layout.shape or 0 in layout.shape:
                continue
            for index in itertools.product(*(range(g) for g in layout.grid_shape)):
                got = hdf5.read_through_h5py(f[name], layout, index)
                np.testing.assert_array_equal(got, expected[layout.region(index)])
    assert by_range + sum(not la.by_range for la in layouts.values()) == len(layouts)


def test_metadata_is_xarrays_h5netcdf_engines(tmp_path: Path) -> None:
    ds = xr.Dataset({"t": (("y", "x"), np.arange(12.0).reshape(3, 4), {"units": "K"})},
                    attrs={"title": "t"})
    path = tmp_path / "f.nc"
    ds.to_netcdf(path, engine="h5netcdf", encoding={"t": {"zlib": True, "chunksizes": (2, 2)}})
    with open(path, "rb") as f:
        store, variables, attrs, encoding = hdf5.open_metadata(f)
        try:
            assert hdf5.dataset_path(store, "t") == "/t"
            with xr.open_dataset(path, engine="h5netcdf", decode_cf=False) as ref:
                np.testing.assert_equal(attrs, ref.attrs)
                np.testing.assert_equal(variables["t"].attrs, ref["t"].attrs)
                assert variables["t"].encoding["chunksizes"] == ref["t"].encoding["chunksizes"] == (2, 2)
                layout = hdf5.read_layout(store.ds.variables["t"]._h5ds)
                assert layout.chunks == (2, 2) and math.prod(layout.grid_shape) == 4
        finally:
            store.close()


def test_a_zstd_frame_must_declare_its_size_and_fit_the_chunk() -> None:
    from numcodecs.zstd import Zstd

    pipeline = hdf5.FilterPipeline((hdf5.Filter(hdf5.ZSTD, 0, (3,)),), np.dtype("u1"), (64,))
    np.testing.assert_array_equal(np.frombuffer(pipeline.decode(Zstd().encode(bytes(range(64))), 0), "u1"),
                                  np.arange(64))
    with pytest.raises(CorruptChunkError, match="more than the 64"):
        pipeline.decode(Zstd().encode(b"\0" * 65), 0, "chunk (0,)")
    frame = bytearray(Zstd().encode(b"\0" * 64))
    frame[4] &= 0x1F  # the frame header without its content size
    with pytest.raises(CorruptChunkError, match="does not declare"):
        pipeline.decode(bytes(frame[:5]) + bytes(frame[6:]), 0, "chunk (0,)")
