"""Chunks of 4 MiB and more decode into mmap-backed buffers; values must not change."""

import numpy as np
import xarray as xr
import zarr
from zarr.codecs import BloscCodec, ZstdCodec

import tsexplore as tse
from tsexplore.sources.codecs import _buffer


def test_large_buffers_are_uninitialised_writeable_and_sized():
    small, large = _buffer(1000), _buffer(1 << 22)
    assert small.nbytes == 1000 and large.nbytes == 1 << 22
    assert large.flags.writeable and large.dtype == np.uint8
    large[:] = 7
    assert int(large.sum()) == 7 << 22


def test_four_mib_chunks_read_back_exactly(tmp_path):
    rng = np.random.default_rng(3)
    data = rng.standard_normal((3, 1024, 1024)).astype("float32")  # 4 MiB chunks
    for i, codec in enumerate((BloscCodec(cname="zstd", clevel=1, shuffle="shuffle"), ZstdCodec(level=1))):
        path = tmp_path / f"big{i}.zarr"
        arr = zarr.create_array(str(path), shape=data.shape, chunks=(1, 1024, 1024),
                                dtype="float32", compressors=codec, dimension_names=("t", "y", "x"))
        arr[:] = data
        ds = tse.open_dataset(str(path))
        np.testing.assert_array_equal(ds[list(ds.data_vars)[0]].values, data)
        # the cached chunks are read-only views that still hold the right values
        src = ds[list(ds.data_vars)[0]].tse.sources[0]
        chunk = tse.get_engine().fetch(src, [(1, 0, 0)])[0]
        assert not chunk.flags.writeable
        np.testing.assert_array_equal(chunk, data[1:2])
        name = list(ds.data_vars)[0]
        xr.testing.assert_equal(ds[name].load().variable, xr.Variable(("t", "y", "x"), data))
