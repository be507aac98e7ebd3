"""Chunks of 4 MiB and more decode into mmap-backed buffers; values must not change."""

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import BloscCodec, ZstdCodec

import tsexplore as tse
from tsexplore.sources import buffers
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


# -- the recycling pool (tsexplore.sources.buffers) ------------------------------------------
def test_a_buffer_is_reused_only_when_no_view_of_it_is_left():
    import gc

    from tsexplore.sources import buffers

    buffers.clear()  # no free buffer of that size class left by another test
    n = (1 << 20) + 4096
    first = buffers.empty(n)
    first[:] = 1
    view = first.view(np.float32)[10:20]
    del first
    gc.collect()
    before = buffers.stats()["reused"]
    second = buffers.empty(n)
    assert buffers.stats()["reused"] == before  # the view still holds the first buffer
    assert not np.shares_memory(second, view)
    second[:] = 2
    assert np.all(view.view(np.uint8) == 1)  # writing the new buffer did not touch the view
    del view, second
    gc.collect()
    third = buffers.empty(n)
    assert buffers.stats()["reused"] == before + 1  # now a free buffer of that size exists
    assert third.nbytes == n and third.flags.writeable


def test_a_skewed_array_starts_past_a_page_boundary_and_is_recycled():
    """A frame's buffer is skewed against the page-aligned chunks it is copied from."""
    import gc
    import mmap

    buffers.clear()
    n = 1 << 20
    chunk = buffers.empty(n)
    frame = buffers.empty(n, skew=True)
    assert chunk.ctypes.data % mmap.PAGESIZE == 0
    assert frame.ctypes.data % mmap.PAGESIZE == buffers.SKEW
    assert frame.nbytes == n and frame.flags.writeable and frame.ctypes.data % 16 == 0
    frame[:] = 7
    chunk[:] = 1
    assert np.all(frame == 7)  # the two do not overlap
    address = frame.ctypes.data
    del frame
    gc.collect()
    before = buffers.stats()["reused"]
    again = buffers.empty(n, skew=True)  # the first frame's buffer, back from the pool
    assert buffers.stats()["reused"] == before + 1 and again.ctypes.data == address


def test_a_decoded_chunk_leaves_the_last_free_buffers_to_readers():
    """``spare``: a chunk decoded for the cache does not take the last free buffers of its
    size (the frames readers assemble reuse them instead of first-touching fresh pages)."""
    import gc

    from tsexplore.sources import buffers
    from tsexplore.sources.codecs import SPARE_FOR_READERS

    buffers.clear()
    n = (3 << 20) + 4096
    held = [buffers.empty(n) for _ in range(SPARE_FOR_READERS + 1)]
    addresses = {a.ctypes.data for a in held}
    del held
    gc.collect()
    assert buffers.stats()["free_bytes"] >= (SPARE_FOR_READERS + 1) * n
    chunk = _buffer(n)  # one free buffer beyond the spares: taken
    assert chunk.ctypes.data in addresses
    before = buffers.stats()["reused"]
    fresh = _buffer(n)  # only the spares are left: a new mapping
    assert fresh.ctypes.data not in addresses and buffers.stats()["reused"] == before
    frames = [buffers.empty(n) for _ in range(SPARE_FOR_READERS)]  # a reader takes the spares
    assert {f.ctypes.data for f in frames} <= addresses
    assert buffers.stats()["reused"] == before + SPARE_FOR_READERS
    del chunk, fresh, frames
    gc.collect()


def test_frames_of_changing_size_share_a_few_size_classes():
    """A pan or zoom changes the frame's size on every move: the sizes share a few buffers
    (rounded up at most a quarter) instead of each leaving its own in the pool."""
    import gc

    from tsexplore.sources import buffers

    gc.collect()  # earlier tests' garbage returns its buffers now, and is cleared
    buffers.clear()
    before = buffers.stats()
    sizes = [1_000_000 + 1999 * i for i in range(100)]  # 1.0 to 1.2 MB, all different
    for n in sizes:
        a = buffers.empty(n)
        a[:] = 7
        assert a.nbytes == n and np.all(a == 7)
        del a  # no reference cycle: the finalizer runs here (a gc.collect() per size took
        # seconds in a worker whose heap holds the whole suite)
    after = buffers.stats()
    assert after["mapped"] - before["mapped"] <= 2  # the 1 MiB and 1.25 MiB classes
    assert after["reused"] - before["reused"] >= len(sizes) - 2
    assert after["free_bytes"] <= (1 << 20) + (1 << 20) * 5 // 4
    assert all(n <= buffers.size_class(n) <= n * 1.25 + 4096 for n in sizes)
    buffers.clear()


def _vma_flags(address: int) -> dict[str, str]:
    """The kernel's /proc/self/smaps entry of the mapping that holds ``address``."""
    lines = open("/proc/self/smaps").read().splitlines()
    found = None
    for line in lines:
        head = line.split()[0] if line else ""
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            found = {} if lo <= address < hi else None
        elif found is not None and ":" in line:
            key, _, value = line.partition(":")
            found[key] = value.strip()
            if key == "VmFlags":
                return found
    raise AssertionError(f"no mapping holds {address:#x}")


def _thp_offered() -> bool:
    try:
        return "[never]" not in open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return False


@pytest.mark.skipif(not _thp_offered(), reason="no transparent huge pages on this system")
def test_a_read_scratch_asks_for_huge_pages_and_recycled_buffers_do_not():
    """What the kernel says of the mappings (``hg``: MADV_HUGEPAGE): a read thread's scratch
    for chunk files asks for huge pages; recycled buffers (mapped all the time while the
    cache grows) and small mappings keep small pages."""
    large, small = buffers.empty(4 << 20), buffers.mapping(1 << 20, huge=True)
    assert "hg" not in _vma_flags(large.ctypes.data)["VmFlags"].split()
    assert "hg" not in _vma_flags(np.frombuffer(small, dtype=np.uint8).ctypes.data)["VmFlags"].split()
    large[:] = 3  # and they hold what is written, like any other
    assert int(large[::4096].sum()) == 3 * 1024
    # a read thread's scratch that chunk files are read into
    from tsexplore.sources.bytes import _scratch_view

    scratch = np.frombuffer(_scratch_view(3 << 20), dtype=np.uint8)
    assert scratch.nbytes >= 3 << 20
    assert "hg" in _vma_flags(scratch.ctypes.data)["VmFlags"].split()


def test_a_new_buffer_has_its_arrays_pages_made_and_not_its_size_class_tail():
    """A buffer mapped fresh is written without a page fault (the kernel made its pages
    when it was mapped); the rest of its size class is left untouched (not resident), as
    the budget counts the array."""
    import mmap
    import resource

    buffers.clear()
    nbytes = (1 << 20) + 1  # a size class of 1.25 MiB
    arr = buffers.empty(nbytes)
    if buffers._populate_write is None:
        pytest.skip("this kernel cannot make a range's pages at once (MADV_POPULATE_WRITE)")
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    arr[:] = 7
    assert resource.getrusage(resource.RUSAGE_THREAD).ru_minflt == faults
    whole = np.frombuffer(arr.base, dtype=np.uint8)
    made = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
    assert whole.size == buffers.size_class(nbytes) > made
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    whole[made::mmap.PAGESIZE] = 1
    assert resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults == (whole.size - made) // mmap.PAGESIZE
    assert int(arr[::4096].sum()) == 7 * len(range(0, nbytes, 4096))


def test_the_pool_keeps_at_most_its_limit(monkeypatch):
    import gc

    from tsexplore.sources import buffers

    monkeypatch.setattr(buffers, "pool_limit", lambda: 3 << 20)
    buffers.clear()
    arrays = [buffers.empty(1 << 20) for _ in range(8)]
    del arrays
    gc.collect()
    assert buffers.stats()["free_bytes"] == 3 << 20
    buffers.clear()
    assert buffers.stats()["free_bytes"] == 0


def test_a_size_not_asked_for_lately_leaves_the_pool():
    """A long session of pans and zooms asks for ever new sizes: a free buffer that is not
    reused within POOL_AGE of the pool's allocations is unmapped, so the pool holds what the
    recent reads need (it kept every size class it ever saw, up to its limit, and a soak's
    memory grew with each one it met)."""
    import gc

    from tsexplore.sources import buffers

    buffers.clear()
    sizes = [buffers.size_class((1 << 18) * k) for k in range(4, 12)]  # 8 classes, 1 to 2.75 MiB
    old = [buffers.empty(n) for n in sizes]
    del old
    gc.collect()
    before = buffers.stats()
    assert before["free_bytes"] == sum(sizes)
    for _ in range(buffers.POOL_AGE + 1):  # a steady stream of one size: its buffer is reused
        a = buffers.empty(300_000)
        a[:] = 1
        del a
    after = buffers.stats()
    assert after["free_bytes"] == buffers.size_class(300_000)  # only the size in use
    assert after["aged"] - before["aged"] == len(sizes)
    assert after["mapped"] - before["mapped"] == 1 and after["reused"] - before["reused"] == buffers.POOL_AGE
    buffers.clear()


def test_the_recycled_buffers_are_counted_inside_the_one_cache_budget():
    """The pool holds at most what the engine's cache leaves of the one budget (cache + pool
    <= budget after every entry put), and a full cache leaves it a reserve (an eighth of a
    small budget, 64 MiB of a large one): the buffers of the chunks it evicts are held for
    the next decode, which maps no fresh pages while the cache stays full."""
    import gc

    from tsexplore.engine.scheduler import pool_reserve
    from tsexplore.sources import buffers

    mib = 1 << 20
    tse.config.set(cache_bytes=48 * mib)
    engine = tse.get_engine()
    cache = engine.cache
    assert pool_reserve(48 * mib, mib) == 6 * mib and pool_reserve(8 << 30, mib) == 64 * mib
    assert pool_reserve(48 * mib, buffers.MIN_POOLED - 1) == 0  # not recycled: the whole budget
    buffers.clear()
    for k in range(40):
        assert cache.put(("test", k), np.zeros(mib, np.uint8))
    assert cache.evictions == 0
    assert buffers.pool_limit() == 8 * mib  # what the cache leaves (the pool's own floor is 64)
    freed = [buffers.empty(mib) for _ in range(16)]
    del freed
    gc.collect()
    assert buffers.stats()["free_bytes"] == 8 * mib
    assert cache.bytes_now + buffers.stats()["free_bytes"] <= cache.budget
    # 46 MiB would leave the pool less than its reserve: the cache evicts down to it
    assert cache.put(("test", "more"), np.zeros(6 * mib, np.uint8))
    assert cache.bytes_now == 42 * mib and cache.evictions == 4
    assert buffers.stats()["free_bytes"] == 6 * mib
    assert cache.bytes_now + buffers.stats()["free_bytes"] <= cache.budget
    # a full cache: each chunk it evicts to make room leaves its buffer for the next decode
    cache.clear()
    for k in range(48):
        assert cache.put(("full", k), buffers.empty(mib))
    before = buffers.stats()
    for k in range(48, 80):
        assert cache.put(("full", k), buffers.empty(mib))
        assert cache.bytes_now + buffers.stats()["free_bytes"] <= cache.budget
    after = buffers.stats()
    assert after["reused"] - before["reused"] == 32 and after["mapped"] == before["mapped"]
    assert cache.bytes_now == 42 * mib
    # and a frame a reader drops is held too: the next frame is the same pages
    frame = buffers.empty(2 * mib)
    address = frame.ctypes.data
    del frame
    assert buffers.empty(2 * mib).ctypes.data == address
    tse.close()  # the budget's engine gone: the pool goes back to its own limit
    assert buffers.pool_limit() >= 64 * mib
    buffers.clear()


def test_reused_buffers_give_exact_values_when_chunks_are_not_cached(tmp_path):
    """A one-pass scan recycles its decode buffers; every chunk must still be its own data."""
    from tsexplore.sources import buffers

    rng = np.random.default_rng(5)
    data = rng.standard_normal((8, 256, 256)).astype("float32")  # 256 KiB chunks: pooled
    path = tmp_path / "reuse.zarr"
    arr = zarr.create_array(str(path), shape=data.shape, chunks=(1, 256, 256), dtype="float32",
                            compressors=BloscCodec(cname="zstd", clevel=1, shuffle="shuffle"),
                            dimension_names=("t", "y", "x"))
    arr[:] = data
    ds = tse.open_dataset(str(path))
    src = ds[list(ds.data_vars)[0]].tse.sources[0]
    before = buffers.stats()["reused"]
    sums = [float(chunk.sum(dtype=np.float64))
            for _, chunk in tse.get_engine().stream(src, [(t, 0, 0) for t in range(8)], ahead=2,
                                                    cache=False)]
    np.testing.assert_allclose(sums, data.sum(axis=(1, 2), dtype=np.float64), rtol=1e-12)
    assert buffers.stats()["reused"] > before


# -- C-Blosc2 through ctypes (tsexplore.sources._cblosc2) -----------------------------------
def test_cblosc2_decodes_every_blosc1_flavour_like_numcodecs():
    from numcodecs import Blosc

    from tsexplore.sources._cblosc2 import decoder

    decode = decoder()
    assert decode is not None, "the blosc2 wheel is a dependency; its library should load"
    rng = np.random.default_rng(0)
    for dtype in ("u1", "<i2", "<f4", "<f8"):
        data = (rng.standard_normal(70_001) * 50).astype(dtype)
        for cname in ("blosclz", "lz4", "lz4hc", "zlib", "zstd"):
            for shuffle in (Blosc.NOSHUFFLE, Blosc.SHUFFLE, Blosc.BITSHUFFLE):
                frame = Blosc(cname=cname, clevel=5, shuffle=shuffle).encode(data)
                out = np.empty(data.nbytes, dtype=np.uint8)
                assert decode(frame, out) == data.nbytes, (dtype, cname, shuffle)
                np.testing.assert_array_equal(out.view(dtype), data)
                assert decode(memoryview(frame), out) == data.nbytes  # any buffer works


def test_cblosc2_refuses_a_corrupt_or_short_frame():
    from numcodecs import Blosc

    from tsexplore.sources._cblosc2 import decoder

    decode = decoder()
    assert decode is not None
    data = np.arange(100_000, dtype=np.float32)
    frame = bytearray(Blosc(cname="zstd", clevel=1, shuffle=Blosc.SHUFFLE).encode(data))
    out = np.empty(data.nbytes, dtype=np.uint8)
    assert decode(bytes(frame[: len(frame) // 2]), out) < 0  # truncated
    assert decode(bytes(frame), np.empty(data.nbytes // 2, dtype=np.uint8)) < 0  # too small


def test_a_cache_kept_full_by_random_frames_decodes_into_recycled_buffers(tmp_path):
    """Random frames of a store twice the cache budget, written by zarr with its default
    codec (zstd: each frame a front of its chunks' streams): the values are zarr's, and once
    the cache is full the decoders and frames mostly take the buffers of what it evicts
    instead of mapping fresh ones, and the budget holds the pool too."""
    import random

    mib = 1 << 20
    rng = np.random.default_rng(11)
    data = rng.normal(size=(128, 256, 256)).astype("float32").cumsum(axis=2)
    path = tmp_path / "full.zarr"
    arr = zarr.create_array(str(path / "v"), shape=data.shape, chunks=(4, 128, 128), dtype="float32",
                            dimension_names=("t", "y", "x"))  # 256 KiB chunks, 32 MiB in all
    arr[:] = data
    zarr.open_group(str(path), mode="a")
    tse.config.set(cache_bytes=16 * mib)
    da = tse.open_dataset(str(path), prefetch="off")["v"]
    cache = tse.get_engine().cache
    frames = random.Random(3).choices(range(128), k=160)
    for t in frames[:80]:
        np.testing.assert_array_equal(da.isel(t=t).values, data[t])
    before, evicted = buffers.stats(), cache.evictions
    for t in frames[80:]:
        np.testing.assert_array_equal(da.isel(t=t).values, data[t])
        assert cache.bytes_now + buffers.stats()["free_bytes"] <= cache.budget
    after = buffers.stats()
    reused, mapped = after["reused"] - before["reused"], after["mapped"] - before["mapped"]
    assert cache.evictions - evicted >= 80  # the cache stayed full
    assert reused >= 8 * mapped and reused >= 240
    tse.close()
    buffers.clear()
