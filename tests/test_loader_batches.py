"""tse.batches against NumPy slicing of the same store (the small tutorial cube)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import xarray as xr
import zarr

import tsexplore as tse
from tsexplore.errors import ConfigError, MissingDependencyError


@pytest.fixture(scope="module")
def truth(small_cube) -> np.ndarray:
    return zarr.open_array(str(small_cube / "temp"), mode="r")[:]


def collect(b, name="temp"):
    """Every (start, window) the batches yield, in order."""
    out = []
    for batch in b:
        for x, start in zip(batch[name], batch["index"]):
            out.append((tuple(int(s) for s in start), x))
    return out


def check_windows(items, truth, window, offset=(0, 0, 0)):
    for start, x in items:
        sl = tuple(slice(o + s, o + s + w) for o, s, w in zip(offset, start, window))
        np.testing.assert_array_equal(x, truth[sl])


def expected_starts(shape, window, stride):
    ranges = [range(0, n - w + 1, s) for n, w, s in zip(shape, window, stride)]
    return {tuple(p) for p in np.stack(np.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, len(shape)).tolist()}


def test_tiles_each_window_once_and_decodes_each_chunk_once(small_cube, truth):
    ds = tse.open_dataset(small_cube)
    b = tse.batches(ds["temp"], sample={"time": 4, "y": 32, "x": 32}, batch_size=8, return_index=True)
    assert len(b) == 128 // 8 and b.n_windows == 128
    before = tse.stats()
    items = collect(b)
    reads = (tse.stats() - before).reads
    starts = [s for s, _ in items]
    assert len(starts) == len(set(starts)) == 128
    assert set(starts) == expected_starts((32, 128, 128), (4, 32, 32), (4, 32, 32))
    check_windows(items, truth, (4, 32, 32))
    assert reads == 16  # 16 chunks, each decoded once per epoch
    assert b.stats.samples == 128 and b.stats.batches == 16


def test_overlapping_windows_crossing_chunks(small_cube, truth):
    ds = tse.open_dataset(small_cube)
    window, stride = (5, 30, 30), (3, 17, 20)
    b = tse.batches(
        ds["temp"], sample=dict(zip(("time", "y", "x"), window)), stride=dict(zip(("time", "y", "x"), stride)),
        batch_size=7, buffer_chunks=3, return_index=True,
    )
    items = collect(b)
    starts = [s for s, _ in items]
    assert len(starts) == len(set(starts)) == b.n_windows
    assert set(starts) == expected_starts((32, 128, 128), window, stride)
    check_windows(items, truth, window)
    assert len(b) == -(-b.n_windows // 7)


def test_sliced_dataarray_reads_through_an_offset(small_cube, truth):
    ds = tse.open_dataset(small_cube)
    sub = ds["temp"].isel(time=slice(3, 29), y=slice(10, None), x=5 + np.arange(100))
    b = tse.batches(sub.isel(x=slice(0, 100)), sample={"time": 4, "y": 16, "x": 16}, stride=(3, 7, 9),
                    return_index=True)
    items = collect(b)
    assert len(items) == b.n_windows == len(expected_starts((26, 118, 100), (4, 16, 16), (3, 7, 9)))
    check_windows(items, truth, (4, 16, 16), offset=(3, 10, 5))


def test_offset_engine_slice_uses_the_store_source(small_cube):
    ds = tse.open_dataset(small_cube)
    b = tse.batches(ds["temp"].isel(time=slice(8, 24)), sample={"time": 8})
    assert b.variables[0].source.token.startswith("zarr-")
    assert b.variables[0].origin == (8, 0, 0)


def test_same_seed_same_order_other_seed_or_epoch_other_order(small_cube):
    ds = tse.open_dataset(small_cube)
    kw = dict(sample={"time": 4, "y": 32, "x": 32}, batch_size=16, return_index=True)

    def order(b):
        return [tuple(i) for batch in b for i in batch["index"].tolist()]

    first = order(tse.batches(ds["temp"], seed=1, **kw))
    assert first == order(tse.batches(ds["temp"], seed=1, **kw))
    assert first != order(tse.batches(ds["temp"], seed=2, **kw))
    again = tse.batches(ds["temp"], seed=1, **kw)
    assert order(again) == first
    second_pass = order(again)  # each pass is the next epoch
    assert second_pass != first and sorted(second_pass) == sorted(first)
    again.set_epoch(0)
    assert order(again) == first
    two = tse.batches(ds["temp"], seed=1, epochs=2, **kw)
    both = order(two)
    assert len(two) == 2 * 128 // 16 and both[:128] == first and both[128:] == second_pass


def test_no_shuffle_goes_in_storage_order(small_cube):
    ds = tse.open_dataset(small_cube)
    b = tse.batches(ds["temp"], sample={"time": 8, "y": 64, "x": 32}, shuffle=False, batch_size=4,
                    return_index=True)
    starts = [tuple(i) for batch in b for i in batch["index"].tolist()]
    assert starts[:2] == [(0, 0, 0), (0, 0, 32)]  # the two windows of chunk (0, 0, 0)
    assert starts[2] == (0, 0, 64)


def test_drop_last_and_partial_batches(small_cube):
    ds = tse.open_dataset(small_cube)
    kw = dict(sample={"time": 4, "y": 32, "x": 32}, batch_size=10)
    sizes = [len(x) for x in tse.batches(ds["temp"], **kw)]
    assert sizes == [10] * 12 + [8] and len(tse.batches(ds["temp"], **kw)) == 13
    sizes = [len(x) for x in tse.batches(ds["temp"], drop_last=True, **kw)]
    assert sizes == [10] * 12 and len(tse.batches(ds["temp"], drop_last=True, **kw)) == 12
    assert all(isinstance(x, np.ndarray) and x.shape[1:] == (4, 32, 32) for x in tse.batches(ds["temp"], **kw))


def test_dataset_with_a_label_variable_and_squeeze():
    rng = np.random.default_rng(0)
    images = rng.random((20, 6, 5), dtype=np.float32)
    labels = np.arange(20) * 10
    ds = xr.Dataset({"img": (("frame", "y", "x"), images), "label": (("frame",), labels)})
    b = tse.batches(ds, sample={"frame": 1}, batch_size=6, squeeze=True, return_index=True)
    seen = []
    for batch in b:
        assert batch["img"].shape[1:] == (6, 5) and batch["label"].ndim == 1
        for img, lab, idx in zip(batch["img"], batch["label"], batch["index"]):
            f = int(idx[0])
            np.testing.assert_array_equal(img, images[f])
            assert lab == labels[f]
            seen.append(f)
    assert sorted(seen) == list(range(20))
    assert b.sample_shape == {"img": (6, 5), "label": ()}


def test_numpy_and_dask_inputs():
    import dask.array as da

    arr = np.arange(40 * 30, dtype=np.int32).reshape(40, 30)
    for obj in (arr, da.from_array(arr, chunks=(16, 10))):
        b = tse.batches(obj, sample=(4, 10), batch_size=5, return_index=True)
        got = {}
        for batch in b:
            for x, idx in zip(batch["data"], batch["index"].tolist()):
                got[tuple(idx)] = x
        assert len(got) == 30
        for (i, j), x in got.items():
            np.testing.assert_array_equal(x, arr[i : i + 4, j : j + 10])


def test_memory_is_bounded_by_the_cache_budget(small_cube, truth):
    budget = 600_000  # ~4 chunks of 8 x 64 x 64 float32
    tse.config.set(cache_bytes=budget)
    ds = tse.open_dataset(small_cube)
    b = tse.batches(ds["temp"], sample={"time": 4, "y": 16, "x": 16}, stride=(4, 12, 12), return_index=True)
    assert b.buffer_chunks == 1  # a quarter of the budget holds one block
    items = collect(b)
    check_windows(items[:50], truth, (4, 16, 16))
    assert len(items) == b.n_windows
    assert tse.stats().cache_high_water <= budget
    assert b.stats.max_buffer_blocks <= 4


def test_bad_arguments_say_what_to_do(small_cube):
    ds = tse.open_dataset(small_cube)
    da = ds["temp"]
    with pytest.raises(ConfigError, match="unknown dims"):
        tse.batches(da, sample={"lat": 4})
    with pytest.raises(ConfigError, match="only 32 long"):
        tse.batches(da, sample={"time": 33})
    with pytest.raises(ConfigError, match="positive int"):
        tse.batches(da, sample={"time": 0})
    with pytest.raises(ConfigError, match="batch_size"):
        tse.batches(da, sample={"time": 4}, batch_size=0)
    with pytest.raises(ConfigError, match="backend"):
        tse.batches(da, sample={"time": 4}, backend="jax")
    with pytest.raises(ConfigError, match="gives 2 lengths"):
        tse.batches(da, sample=(4, 4))
    with pytest.raises(ConfigError, match="DataArray"):
        tse.batches([1, 2, 3], sample={"x": 1})


def test_cupy_backend_without_cupy_names_the_extra(small_cube, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    ds = tse.open_dataset(small_cube)
    with pytest.raises(MissingDependencyError, match=r"tsexplore\[gpu\]"):
        tse.batches(ds["temp"], sample={"time": 4}, backend="cupy")


def test_shuffle_quality_is_reported(small_cube):
    ds = tse.open_dataset(small_cube)
    b = tse.batches(ds["temp"], sample={"time": 2, "y": 16, "x": 16}, buffer_chunks=8)
    q = b.shuffle_quality()
    assert set(q) == {"plan", "random_permutation", "storage_order"}
    assert abs(q["plan"]) < 0.2 and q["storage_order"] > 0.3


@pytest.mark.slow
def test_batches_import_neither_torch_nor_tensorflow(small_cube):
    code = (
        "import sys, tsexplore as tse\n"
        f"ds = tse.open_dataset({str(small_cube)!r})\n"
        "n = sum(len(x) for x in tse.batches(ds['temp'], sample={'time': 8}))\n"
        "assert n == 4, n\n"
        "bad = [m for m in ('torch', 'tensorflow', 'cupy') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "tse.close()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_one_pass_does_not_fill_the_cache_but_later_epochs_are_served_from_it(small_cube, truth):
    """Default policy: cache decoded chunks only when a later epoch will read them again."""
    window = {"time": 8, "y": 32, "x": 32}
    tse.config.set(cache_bytes=64 << 20)  # the cube (2 MB) fits easily
    ds = tse.open_dataset(small_cube)
    single = tse.batches(ds["temp"], sample=window, batch_size=16, return_index=True)
    assert single.cache is False
    before = tse.stats()
    items = collect(single)
    delta = tse.stats() - before
    check_windows(items[:20], truth, (8, 32, 32))
    assert delta.reads == 16  # 16 chunks read...
    assert tse.stats().cache_bytes == before.cache_bytes  # ...and none kept

    ds = tse.open_dataset(small_cube)  # a new cache token: starts cold
    two = tse.batches(ds["temp"], sample=window, batch_size=16, epochs=2, return_index=True)
    assert two.cache is True
    before = tse.stats()
    items = collect(two)
    delta = tse.stats() - before
    assert len(items) == 2 * two.n_windows
    check_windows(items, truth, (8, 32, 32))
    assert delta.reads == 16  # the second epoch decoded nothing: every chunk came from the cache
    assert two.stats.chunk_hits == 16

    forced = tse.batches(ds["temp"], sample=window, batch_size=16, cache=False)
    assert forced.cache is False
