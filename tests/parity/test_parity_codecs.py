"""Parity on what tsexplore decodes itself: blosc with every shuffle, typesize and block size,
frame-level partial decoding, sharded stores with coalesced inner-chunk ranges, and remote reads.

Stores are written with zarr directly (not ``to_zarr`` defaults): a hypothesis draw picks the
format (v2, v3, v3 sharded), dtype, chunk (and shard) shapes, the blosc compressor (``cname``,
``clevel``, ``shuffle``: none / byte / bit, ``typesize`` -- also one that is not the itemsize
-- and ``blocksize``), which chunks are written (absent ones read as the fill value) and
whether the store is read from disk or over HTTP. Each store is compared with xarray's zarr
engine: the whole dataset, random basic / outer / vectorized selections, and single frames of
deep chunks (what the Explorer asks for; blosc frames decode by blocks). The blocks read by
parts are counted (``blosc_part_reads`` in ``test-artifacts/parity-counts.json``).
"""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
import zarr.testing.strategies as zst
from _parity import PARTS, SETTINGS, check_selections, counted
from hypothesis import given
from hypothesis import strategies as st

import tsexplore as tse

pytestmark = pytest.mark.filterwarnings("ignore")
FORMATS = ["zarr2", "zarr3", "zarr3-sharded"]
DTYPES = ["u1", "i2", "u2", "i4", "f4", "f8", "i8"]
CNAMES = ["lz4", "lz4hc", "blosclz", "zstd", "zlib"]
SHUFFLES = ["noshuffle", "shuffle", "bitshuffle"]
DIMS = ("time", "y", "x")


@st.composite
def blosc(draw: st.DrawFn, fmt: str, itemsize: int) -> object:
    cname = draw(st.sampled_from(CNAMES))
    clevel = draw(st.integers(0, 9))
    shuffle = draw(st.sampled_from(SHUFFLES))
    blocksize = draw(st.sampled_from([0, 64, 256, 1024, 4096]))
    if fmt == "zarr2":
        import numcodecs

        return numcodecs.Blosc(cname, clevel, SHUFFLES.index(shuffle), blocksize=blocksize)
    from zarr.codecs import BloscCodec

    typesize = draw(st.sampled_from(sorted({itemsize, 1, 2, 4, 8})))
    return BloscCodec(cname=cname, clevel=clevel, shuffle=shuffle, typesize=typesize, blocksize=blocksize)


def _write(draw: st.DrawFn, fmt: str, path: Path) -> np.ndarray:
    shape = tuple(draw(st.integers(1, n)) for n in (12, 20, 24))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    values = np.asarray(draw(zst.numpy_arrays(shapes=st.just(shape), dtype=dtype)))
    if dtype.kind == "f":
        values = np.where(np.isfinite(values), values, 0).astype(dtype)
    chunks = draw(zst.chunk_shapes(shape=shape))
    kwargs: dict = {"compressors": draw(blosc(fmt, dtype.itemsize)), "fill_value": 0}
    group = zarr.open_group(str(path), mode="w", zarr_format=2 if fmt == "zarr2" else 3)
    if fmt == "zarr2":
        arr = group.create_array("data", shape=shape, chunks=chunks, dtype=dtype, **kwargs)
        arr.attrs["_ARRAY_DIMENSIONS"] = list(DIMS)
    else:
        if fmt == "zarr3-sharded":
            kwargs["shards"] = draw(zst.shard_shapes(shape=shape, chunk_shape=chunks))
        arr = group.create_array("data", shape=shape, chunks=chunks, dtype=dtype,
                                 dimension_names=DIMS, **kwargs)
    written = np.zeros(shape, dtype=dtype)  # chunks left out read as the fill value, 0
    if draw(st.booleans()):
        arr[...] = values
        written[...] = values
    else:  # some time slabs only: the others' chunks are absent
        for t in sorted(draw(st.sets(st.integers(0, shape[0] - 1), max_size=shape[0]))):
            arr[t] = values[t]
            written[t] = values[t]
    zarr.consolidate_metadata(str(path))
    return written


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("parity-codecs")


@pytest.fixture(scope="module")
def server(folder: Path):
    from tsexplore.testing.http import StoreServer

    srv = StoreServer(root=folder)
    try:
        yield srv
    finally:
        srv.close()


@pytest.mark.parametrize("fmt", FORMATS)
@SETTINGS
@given(data=st.data())
def test_blosc_and_sharded_stores_match_xarray(fmt: str, folder: Path, server, data: st.DataObject) -> None:
    name = f"{fmt}-{uuid.uuid4().hex[:10]}.zarr"
    values = _write(data.draw, fmt, folder / name)
    remote = data.draw(st.booleans(), label="remote")
    where = f"{server.url}/{name}" if remote else str(folder / name)
    label = f"{fmt}:{'http' if remote else 'local'}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = xr.open_dataset(folder / name, engine="zarr").load()
        before = tse.stats().part_reads
        got = tse.open_dataset(where, prefetch="off")
        with counted(label, "whole"):
            xr.testing.assert_identical(got.load(), ref)
            # zarr's own reading is the values written (xarray masks a v2 fill value as NaN)
            np.testing.assert_array_equal(zarr.open_array(str(folder / name / "data"), mode="r")[...], values)
        # single frames of deep chunks (the Explorer's reads: blosc frames decode by blocks)
        got = tse.open_dataset(where, prefetch="off")
        for t in data.draw(st.lists(st.integers(0, values.shape[0] - 1), min_size=1, max_size=3), label="frames"):
            with counted(label, "frame"):
                np.testing.assert_array_equal(got["data"].isel(time=t).values, ref["data"].values[t])
        check_selections(data.draw, label, tse.open_dataset(where, prefetch="off"),
                         xr.open_dataset(folder / name, engine="zarr"), ref)
        PARTS[label] += tse.stats().part_reads - before
