"""tse.reduce on the CPU: results against xarray and NumPy, engine use, background jobs."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import xarray as xr

import tsexplore as tse
from tsexplore.compute import ReductionCancelledError, ReductionJob
from tsexplore.compute.feed import feed_for
from tsexplore.compute.job import JobTimeoutError
from tsexplore.engine import get_engine
from tsexplore.errors import (
    BackendUnavailableError,
    ChunkReadError,
    ConfigError,
    MissingDependencyError,
    TsExploreError,
)
from tsexplore.resolve import SelectionSource
from tsexplore.sources import SyntheticSource

OPS = ("sum", "mean", "var", "std", "min", "max", "count")
DIMS = (None, "time", ["y", "x"], "x", ["time", "x"])


@pytest.fixture()
def cube(small_cube):
    ds = tse.open_dataset(small_cube)
    ref = xr.open_zarr(small_cube)["temp"].load()
    return ds, ref


@pytest.mark.parametrize("op", OPS)
def test_reduce_matches_xarray_and_numpy(cube, op):
    ds, ref = cube
    for dim in DIMS:
        got = tse.reduce(ds["temp"], op, dim=dim, progress=False)
        want = getattr(ref, op)(dim=dim)
        xr.testing.assert_allclose(got, want, rtol=1e-6)
        assert got.dtype == want.dtype and got.name == want.name
        # against NumPy in float64 (the accumulators are float64)
        names = [dim] if isinstance(dim, str) else (dim or list(ref.dims))
        axes = tuple(ref.get_axis_num(d) for d in names)
        v = ref.values.astype(np.float64)
        if op == "count":
            np_op = lambda a, axis: np.sum(~np.isnan(a), axis=axis)  # noqa: E731
        else:
            np_op = getattr(np, op)
        np.testing.assert_allclose(got.values, np_op(v, axis=axes), rtol=1e-6)


def test_accessor_methods_stream_through_the_engine(cube):
    ds, ref = cube
    before = tse.stats()
    got = ds["temp"].tse.mean("time", progress=False)
    delta = tse.stats() - before
    xr.testing.assert_allclose(got, ref.mean("time"), rtol=1e-6)
    src = ds["temp"].tse.sources[0]
    assert delta.reads == src.nchunks  # every chunk read once, none twice
    assert delta.bytes_decoded == ref.nbytes
    assert delta.prefetch_reads == src.nchunks  # PLANNED reads issued ahead of the consumer
    for name in ("sum", "var", "std", "min", "max", "count"):
        xr.testing.assert_allclose(
            getattr(ds["temp"].tse, name)("time", progress=False),
            getattr(ref, name)("time"),
            rtol=1e-6,
        )
    xr.testing.assert_allclose(
        ds["temp"].tse.reduce("max", ["x", "y"], progress=False), ref.max(["x", "y"])
    )


def test_full_source_is_streamed_directly(cube):
    ds, _ = cube
    feed = feed_for(ds["temp"])
    assert feed.direct and feed.source is ds["temp"].tse.sources[0]
    sliced = feed_for(ds["temp"].isel(time=slice(2, 9)))
    assert not sliced.through_engine and isinstance(sliced.source, SelectionSource)
    assert sliced.source.shape == (7, 128, 128)
    reversed_ = feed_for(ds["temp"].isel(x=slice(None, None, -1)))
    assert not reversed_.direct  # same shape, but not the source's values in order


def test_sliced_and_computed_arrays(cube):
    ds, ref = cube
    sel = dict(time=slice(3, 29, 2), x=slice(10, 100))
    got = tse.reduce(ds["temp"].isel(**sel), "std", dim="time", progress=False)
    xr.testing.assert_allclose(got, ref.isel(**sel).std("time"), rtol=1e-6)
    flipped = ds["temp"].isel(y=slice(None, None, -1))
    got = tse.reduce(flipped, "mean", dim="time", progress=False)
    xr.testing.assert_allclose(got, ref.isel(y=slice(None, None, -1)).mean("time"), rtol=1e-6)
    # a transposed or renamed view
    t = ds["temp"].transpose("x", "time", "y")
    assert not feed_for(t).direct
    got = tse.reduce(t, "mean", dim="time", progress=False)
    xr.testing.assert_allclose(got, ref.transpose("x", "time", "y").mean("time"), rtol=1e-6)
    renamed = ds["temp"].rename(time="t")
    assert feed_for(renamed).direct
    got = tse.reduce(renamed, "sum", dim=("t", "x"), progress=False)
    xr.testing.assert_allclose(got, ref.rename(time="t").sum(("t", "x")), rtol=1e-6)
    # arithmetic makes a plain lazy/in-memory array: still right
    got = tse.reduce(ds["temp"] * 2 + 1, "max", dim="x", progress=False)
    xr.testing.assert_allclose(got, (ref * 2 + 1).max("x"), rtol=1e-6)


def test_in_memory_and_dask_arrays_with_nans():
    rng = np.random.default_rng(7)
    values = rng.normal(10, 3, size=(37, 21, 13)).astype(np.float32)
    values[rng.random(values.shape) < 0.1] = np.nan
    values[:, 0, 0] = np.nan  # an all-NaN column
    da = xr.DataArray(
        values,
        dims=("time", "y", "x"),
        coords={"time": np.arange(37), "y": np.arange(21)},
        name="v",
    )
    for data in (da, da.chunk({"time": 5, "y": 8})):
        for op in OPS:
            for dim in ("time", None, ["x", "y"]):
                got = tse.reduce(data, op, dim=dim, progress=False)
                xr.testing.assert_allclose(got, getattr(da, op)(dim=dim), rtol=1e-6)
    # skipna=False follows xarray, with NaNs and without
    for data in (da, da.fillna(0.5)):
        for op in (o for o in OPS if o != "count"):  # xarray's count has no skipna
            got = tse.reduce(data, op, dim="time", skipna=False, progress=False)
            want = getattr(data, op)("time", skipna=False)
            xr.testing.assert_allclose(got, want, rtol=1e-6)
    got = tse.reduce(da, "var", dim="time", ddof=1, progress=False)
    xr.testing.assert_allclose(got, da.var("time", ddof=1), rtol=1e-6)


def test_engine_dask_array_uses_its_source(small_cube):
    ds = tse.open_dataset(small_cube, chunks={})
    feed = feed_for(ds["temp"])
    assert feed.direct
    ref = xr.open_zarr(small_cube)["temp"].load()
    xr.testing.assert_allclose(
        tse.reduce(ds["temp"], "mean", "time", progress=False), ref.mean("time"), rtol=1e-6
    )


def test_histogram(cube):
    ds, ref = cube
    v = ref.values.astype(np.float64).ravel()
    h = ds["temp"].tse.histogram(bins=20, progress=False)
    edges = np.append(h["bin_lower"].values, h["bin_upper"].values[-1])
    assert edges[0] == v.min() and edges[-1] == v.max()
    np.testing.assert_array_equal(h.values, np.histogram(v, bins=20, range=(v.min(), v.max()))[0])
    assert h.dims == ("bin",) and int(h.sum()) == v.size
    np.testing.assert_allclose(h["bin"].values, (edges[:-1] + edges[1:]) / 2)
    h2 = tse.reduce(ds["temp"], "histogram", dim="time", bins=[0, 10, 20, 30, 40], progress=False)
    assert h2.dims == ("y", "x", "bin")
    points = [(0, 0), (77, 0), (5, 100), (127, 127)]
    want = np.stack(
        [np.histogram(ref.values[:, j, k], bins=[0, 10, 20, 30, 40])[0] for j, k in points]
    )
    np.testing.assert_array_equal(h2.values[[j for j, _ in points], [k for _, k in points]], want)
    assert int(h2.sum()) == int(((ref >= 0) & (ref <= 40)).sum())
    np.testing.assert_array_equal(h2["x"].values, ref["x"].values)


def test_memory_stays_within_the_cache_budget():
    """A reduction of 4x the cache budget keeps the cache under budget and reads each chunk once."""
    tse.close()
    budget = 2 * 2**20
    tse.config.set(cache_bytes=budget)
    try:
        src = SyntheticSource((64, 128, 256), (8, 64, 64), "float32")  # 8 MiB, 256 KiB chunks
        ds = tse.open_dataset(src)
        got = tse.reduce(ds["data"], "mean", dim="time", progress=False)
        snap = tse.stats()
        assert snap.cache_budget == budget
        assert snap.cache_high_water <= budget
        assert snap.reads == src.nchunks
        want = src.evaluate(tuple(slice(0, n) for n in src.shape)).astype(np.float64).mean(0)
        np.testing.assert_allclose(got.values, want, rtol=1e-6)
    finally:
        tse.close()
        tse.config.set(cache_bytes=tse.config.total_ram() // 4)


# -- background jobs, progress, cancellation, errors --------------------------------------
def _slow_dataset(latency=0.01, shape=(64, 64, 64), chunks=(4, 32, 32)):
    src = SyntheticSource(shape, chunks, "float32", latency=latency)
    return src, tse.open_dataset(src)


def test_background_job_and_live_snapshots():
    src, ds = _slow_dataset()
    before = tse.stats()
    job = tse.reduce(ds["data"], "std", dim="time", background=True, progress=False)
    assert isinstance(job, ReductionJob)
    assert job.thread_name.startswith("tsexplore-reduce-")
    assert any(t.name == job.thread_name for t in threading.enumerate())
    seen = []
    deadline = time.monotonic() + 30
    while not job.done() and time.monotonic() < deadline:
        seen.append(((tse.stats() - before).bytes_decoded, job.progress.fraction))
        time.sleep(0.03)
    result = job.result(timeout=30)
    assert job.status == "done"
    moving = [b for b, f in seen if 0 < f < 1]
    assert len(set(moving)) >= 3, f"snapshots did not advance during the run: {seen}"
    assert seen == sorted(seen)  # counters only grow
    want = src.evaluate(tuple(slice(0, n) for n in src.shape)).astype(np.float64).std(0)
    np.testing.assert_allclose(result.values, want, rtol=1e-6)
    assert job.progress.fraction == 1.0
    assert job.progress.bytes_done == src.nchunks * src.chunk_nbytes()


def test_cancel_stops_within_one_chunk():
    src, ds = _slow_dataset(latency=0.02)
    job = tse.reduce(ds["data"], "mean", dim="time", background=True, progress=False)
    deadline = time.monotonic() + 10
    while job.progress.chunks_done < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    job.cancel()
    done_at_cancel = job.progress.chunks_done
    assert job.wait(timeout=10)
    assert job.status == "cancelled"
    assert job.progress.chunks_done <= done_at_cancel + 1
    assert job.progress.chunks_done < src.nchunks
    with pytest.raises(ReductionCancelledError):
        job.result(timeout=1)


def test_result_timeout_and_context_manager():
    _, ds = _slow_dataset(latency=0.05)
    with tse.reduce(ds["data"], "sum", background=True, progress=False) as job:
        with pytest.raises(JobTimeoutError, match="still running"):
            job.result(timeout=0.01)
    assert job.done() and job.status == "cancelled"
    assert not any(t.name == job.thread_name for t in threading.enumerate())


class _FailingSource(SyntheticSource):
    def read_chunk_sync(self, index):
        if index == (5, 1, 0):
            raise OSError("disk on fire")
        return super().read_chunk_sync(index)


@pytest.mark.parametrize("background", [False, True])
def test_a_failed_chunk_raises_never_a_partial_result(background):
    src = _FailingSource((64, 64, 64), (4, 32, 32), "float32")
    ds = tse.open_dataset(src)
    if not background:
        with pytest.raises(ChunkReadError, match=r"\(5, 1, 0\)"):
            tse.reduce(ds["data"], "mean", dim="time", progress=False)
        return
    job = tse.reduce(ds["data"], "mean", dim="time", background=True, progress=False)
    with pytest.raises(ChunkReadError, match="disk on fire"):
        job.result(timeout=30)
    assert job.status == "failed"
    assert isinstance(job.exception(), ChunkReadError)


def test_progress_bar_in_a_terminal(capsys, cube):
    ds, ref = cube
    got = tse.reduce(ds["temp"], "min", dim="time", progress=True)
    xr.testing.assert_allclose(got, ref.min("time"))
    err = capsys.readouterr().err
    assert "tse.reduce min over time" in err and "100%" in err


def test_bad_arguments(cube):
    ds, _ = cube
    da = ds["temp"]
    with pytest.raises(ConfigError, match="lat"):
        tse.reduce(da, "mean", dim="lat")
    with pytest.raises(ConfigError, match="median"):
        tse.reduce(da, "median")
    with pytest.raises(ConfigError, match="backend"):
        tse.reduce(da, "mean", backend="tpu")
    with pytest.raises(ConfigError, match="DataArray"):
        tse.reduce(ds, "mean")
    with pytest.raises(ConfigError, match="DataArray"):
        tse.reduce(np.zeros(3), "mean")
    with pytest.raises(ConfigError, match="Client"):
        tse.reduce(da, "mean", client="tcp://127.0.0.1:8786")
    with pytest.raises(ConfigError, match="bins"):
        da.tse.histogram(bins=0)
    with pytest.raises(ConfigError, match="accumulator"):
        big = tse.synthetic((2**20, 2**20, 2), chunks=(256, 256, 2))["data"]
        tse.reduce(big, "var", dim="x")


def test_cupy_backend_without_cupy_says_what_to_install(cube):
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is installed here; tests/test_compute_gpu.py covers it")
    ds, ref = cube
    with pytest.raises(MissingDependencyError, match=r"tsexplore\[gpu\]") as info:
        tse.reduce(ds["temp"], "mean", "time", backend="cupy", progress=False)
    assert isinstance(info.value, TsExploreError)
    got = tse.reduce(ds["temp"], "mean", "time", backend="auto", progress=False)
    xr.testing.assert_allclose(got, ref.mean("time"), rtol=1e-6)


def test_cupy_without_a_gpu_is_backend_unavailable(monkeypatch):
    """CuPy importable but no device: BackendUnavailableError, and auto falls back."""
    import sys
    import types

    class _Runtime:
        @staticmethod
        def getDeviceCount():  # noqa: N802 - CuPy's name
            raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=_Runtime())  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", fake)
    da = xr.DataArray(np.arange(12.0).reshape(3, 4), dims=("a", "b"))
    with pytest.raises(BackendUnavailableError, match="no CUDA-capable device"):
        tse.reduce(da, "sum", backend="cupy", progress=False)
    got = tse.reduce(da, "sum", "a", backend="auto", progress=False)
    xr.testing.assert_allclose(got, da.sum("a"))


def test_engine_closed_during_a_background_run_fails_the_job():
    _, ds = _slow_dataset(latency=0.02)
    job = tse.reduce(ds["data"], "mean", background=True, progress=False)
    time.sleep(0.1)
    tse.close()
    assert job.wait(timeout=10)
    assert job.status == "failed"
    with pytest.raises(TsExploreError):
        job.result(timeout=1)
    get_engine()  # a fresh engine works again afterwards


def test_a_reduction_over_a_selection_reads_only_the_chunks_of_the_selection(tmp_path) -> None:
    """The reduction announces where its reads end: the prefetcher guesses nothing beyond
    them, so reducing the first quarter of the frames reads the chunks of that quarter, once."""
    import zarr

    values = np.random.default_rng(3).standard_normal((64, 32, 32)).astype("float32")
    arr = zarr.create_array(str(tmp_path / "c.zarr"), shape=values.shape, chunks=(4, 16, 16),
                            dtype="float32", dimension_names=("time", "y", "x"))
    arr[...] = values
    ds = tse.open_dataset(tmp_path / "c.zarr")
    da = ds[list(ds.data_vars)[0]]
    out = tse.reduce(da.isel(time=slice(0, 16)), "mean", dim="time", progress=False)
    np.testing.assert_allclose(out.values, values[:16].astype("float64").mean(axis=0), rtol=1e-5, atol=1e-6)
    snap = tse.stats()
    assert snap.reads == 4 * 2 * 2, snap  # 4 chunk-rows of 2 x 2 chunks, nothing past them
    assert snap.decoded_ratio == pytest.approx(1.0), snap
