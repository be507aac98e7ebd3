"""backend="cupy": reductions on the GPU through pinned staging buffers.

Each check runs twice: on a real GPU (``gpu`` marker; skipped without CuPy and a device) and
on a NumPy-backed stand-in for CuPy whose copies and events complete later on another thread
(``tests/_fake_cupy.py``), so the GPU code path (no data-dependent branches, staging, the
wait before a staging buffer is reused, stream handling) is exercised on every machine. Self-contained: the data is made
here (synthetic sources and NumPy arrays; the Zarr check skips when zarr is absent).

A reduction reduces on the CPU the chunks that arrive while the GPU starts (``accumulate``);
the ``cupy`` fixture lets the GPU start before the first chunk, so that these checks run the
GPU's kernels on every chunk, and the handover has tests of its own below.
"""

from __future__ import annotations

import sys
import threading
import time

import _fake_cupy
import numpy as np
import pytest
import xarray as xr

import tsexplore as tse
from tsexplore.compute import api as compute_api
from tsexplore.compute import gpu
from tsexplore.compute.gpu import CupyBackend, gpu_available, make_backend
from tsexplore.compute.ops import make_op
from tsexplore.compute.plan import ReducePlan
from tsexplore.compute.stream import accumulate
from tsexplore.errors import BackendUnavailableError
from tsexplore.sources import SyntheticSource

OPS = ("sum", "mean", "var", "std", "min", "max", "count")


@pytest.fixture(
    params=[
        pytest.param("gpu", marks=pytest.mark.gpu),
        pytest.param("stand-in"),
    ]
)
def cupy(request, monkeypatch):
    """The real CuPy on a GPU machine, or the NumPy stand-in (tests/_fake_cupy.py: its
    copies and events complete later, on another thread). A reduction's backend is started
    before its first chunk (no chunk reduces on the CPU while it starts)."""
    monkeypatch.setattr(compute_api, "start_backend", _started_first)
    if request.param == "gpu":
        if not gpu_available():
            pytest.skip("needs CuPy and a CUDA GPU")
        import cupy as real

        yield real
        return
    fake = _fake_cupy.fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    yield fake
    _fake_cupy.close(fake)


def _started_first(*args, **kwargs):
    future = gpu.start_backend(*args, **kwargs)
    future.exception(timeout=60)  # started (or failed) before the reduction reads
    return future


def _data(seed=0, shape=(40, 33, 20)):
    rng = np.random.default_rng(seed)
    v = rng.normal(280, 5, size=shape).astype(np.float32)
    v[rng.random(shape) < 0.05] = np.nan
    v[:, 3, 4] = np.nan
    return xr.DataArray(v, dims=("time", "y", "x"), coords={"time": np.arange(shape[0])}, name="t")


@pytest.mark.parametrize("op", OPS)
def test_cupy_matches_numpy_and_xarray(cupy, op):
    da = _data()
    for dim in ("time", None, ["y", "x"], "x"):
        got = tse.reduce(da, op, dim=dim, backend="cupy", progress=False)
        cpu = tse.reduce(da, op, dim=dim, backend="numpy", progress=False)
        want = getattr(da, op)(dim=dim)
        assert type(got.data) is np.ndarray  # results come back to the host
        xr.testing.assert_allclose(got, want, rtol=1e-6)
        xr.testing.assert_allclose(got, cpu, rtol=1e-6)
        assert got.dtype == want.dtype


def test_cupy_on_an_engine_source_uses_pinned_staging(cupy, monkeypatch):
    src = SyntheticSource((48, 70, 50), (8, 32, 32), "float32")  # edge chunks are smaller
    ds = tse.open_dataset(src)
    calls = []
    real_alloc = cupy.cuda.alloc_pinned_memory
    monkeypatch.setattr(
        cupy.cuda, "alloc_pinned_memory", lambda n: calls.append(n) or real_alloc(n)
    )
    staged = []
    real_device_chunk = CupyBackend.device_chunk

    def spy(self, chunk):
        out = real_device_chunk(self, chunk)
        staged.append(chunk.shape)
        return out

    monkeypatch.setattr(CupyBackend, "device_chunk", spy)
    got = tse.reduce(ds["data"], "std", dim="time", backend="cupy", progress=False)
    want = src.evaluate(tuple(slice(0, n) for n in src.shape)).astype(np.float64).std(axis=0)
    np.testing.assert_allclose(got.values, want, rtol=1e-6)
    assert len(staged) == src.nchunks
    assert len(calls) >= 2 and all(n >= src.chunk_nbytes() for n in calls)  # double buffering


def test_the_gpu_starts_while_the_first_chunks_are_read(cupy, monkeypatch):
    """The backend is made on its own thread while the engine reads: a GPU start that waits
    for a chunk to be read would wait forever if the reads began only after it."""
    src = SyntheticSource((48, 70, 50), (8, 32, 32), "float32")
    ds = tse.open_dataset(src)
    read = threading.Event()
    real_read = SyntheticSource.read_chunk_sync

    def reading(self, index):
        read.set()
        return real_read(self, index)

    monkeypatch.setattr(SyntheticSource, "read_chunk_sync", reading)
    real_init = CupyBackend.__init__
    seen = []

    def slow_start(self, *args, **kwargs):
        seen.append(read.wait(timeout=30))  # a GPU's start outlasting the first read
        seen.append(threading.current_thread().name)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(CupyBackend, "__init__", slow_start)
    monkeypatch.setattr(compute_api, "start_backend", gpu.start_backend)
    got = tse.reduce(ds["data"], "mean", dim="time", backend="cupy", progress=False)
    want = src.evaluate(tuple(slice(0, n) for n in src.shape)).astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(got.values, want, rtol=1e-6)
    assert seen == [True, "tsexplore-gpu-start"]


def test_a_gpu_that_fails_to_start_says_why(cupy, monkeypatch):
    src = SyntheticSource((48, 70, 50), (8, 32, 32), "float32")
    ds = tse.open_dataset(src)

    def no_gpu(self, *args, **kwargs):
        raise BackendUnavailableError("the GPU fell off the bus")

    monkeypatch.setattr(CupyBackend, "__init__", no_gpu)
    monkeypatch.setattr(compute_api, "start_backend", gpu.start_backend)
    with pytest.raises(BackendUnavailableError, match="fell off the bus"):
        tse.reduce(ds["data"], "mean", dim="time", backend="cupy", progress=False)
    # the next reduction of the same data runs (the failed one left no stream holding it)
    got = tse.reduce(ds["data"], "max", dim="time", backend="numpy", progress=False)
    want = src.evaluate(tuple(slice(0, n) for n in src.shape)).max(axis=0)
    np.testing.assert_array_equal(got.values, want)


def _handover(op_name, cpu_chunks, starting_result):
    """``accumulate`` over a synthetic cube whose backend becomes ready after ``cpu_chunks``
    chunks were taken; (state, chunks the backend staged, the backend, the source)."""
    import concurrent.futures as cf

    src = SyntheticSource((40, 33, 20), (8, 16, 16), "float32")
    plan = ReducePlan(src.shape, src.chunks, (0,))
    op = make_op(op_name, np.dtype("float32"))
    starting = cf.Future()
    backend = starting_result()

    def chunks():
        for n, index in enumerate(plan.order()):
            if n == cpu_chunks:
                starting.set_result(backend)
            yield index, src.read_chunk_sync(index)[0]

    staged = []
    real = backend.device_chunk
    backend.device_chunk = lambda chunk: staged.append(chunk.shape) or real(chunk)
    state = accumulate(src, plan, op, starting, chunks=chunks())
    return op.finalize(state), staged, backend, src, plan


@pytest.mark.parametrize("op_name", ["sum", "mean", "var", "min", "max", "count"])
def test_chunks_that_arrive_while_the_gpu_starts_reduce_on_the_cpu(cupy, op_name):
    """The first 5 chunks arrive before the GPU is up and reduce with NumPy, the rest on the
    GPU; the merged answer is the whole reduction's."""
    got, staged, backend, src, plan = _handover(op_name, 5, lambda: CupyBackend(8 * 16 * 16 * 4))
    assert len(staged) == plan.nchunks - 5
    whole = src.evaluate(tuple(slice(0, n) for n in src.shape))
    want = make_op(op_name, whole.dtype)
    np.testing.assert_allclose(got, want.finalize(want.partial(whole, (0,))), rtol=1e-6)
    assert type(got) is np.ndarray  # the merged state came back to the host
    assert backend._buffers == []  # the GPU's staging buffers were released


def test_a_reduction_done_before_the_gpu_is_up_waits_for_it_and_closes_it(cupy):
    import concurrent.futures as cf

    src = SyntheticSource((16, 8, 8), (8, 8, 8), "float32")
    plan = ReducePlan(src.shape, src.chunks, (0,))
    op = make_op("max", np.dtype("float32"))
    starting = cf.Future()
    backend = CupyBackend(8 * 8 * 8 * 4)
    read = [(i, src.read_chunk_sync(i)[0]) for i in plan.order()]

    def chunks(settle):  # the start ends (on another thread, a moment later) after the last chunk
        yield from read
        threading.Timer(0.05, settle).start()

    got = op.finalize(accumulate(src, plan, op, starting, wait=30,
                                 chunks=chunks(lambda: starting.set_result(backend))))
    np.testing.assert_array_equal(got, src.evaluate((slice(0, 16), slice(0, 8), slice(0, 8))).max(0))
    assert starting.done() and backend.staged == 0  # waited for, never used
    assert backend._buffers == []  # closed when it came

    failing = cf.Future()
    with pytest.raises(BackendUnavailableError, match="no device"):
        accumulate(src, plan, op, failing, wait=30, chunks=chunks(
            lambda: failing.set_exception(BackendUnavailableError("no device"))))
    never = cf.Future()
    with pytest.raises(BackendUnavailableError, match="did not start within"):
        accumulate(src, plan, op, never, chunks=read, wait=0.1)


def test_staging_buffers_are_not_overwritten_while_in_use(cupy):
    """Many chunks of different shapes through two pinned buffers arrive intact."""
    backend = CupyBackend(chunk_nbytes=4 * 10 * 10 * 10)
    rng = np.random.default_rng(1)
    shapes = [(10, 10, 10), (10, 10, 3), (7, 10, 10), (1, 1, 1)] * 4
    host = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    host.append(rng.standard_normal((20, 10, 10)).astype(np.float32))  # larger: buffers grow
    with backend.activate():
        device = [backend.device_chunk(h) for h in host]
    for h, d in zip(host, device):
        np.testing.assert_array_equal(backend.to_host(d), h)
    assert backend.staged == len(host)
    backend.close()


def test_histogram_on_the_gpu(cupy):
    da = _data(2)
    got = tse.reduce(da, "histogram", bins=25, range=(260, 300), backend="cupy", progress=False)
    v = da.values.ravel().astype(np.float64)
    np.testing.assert_array_equal(got.values, np.histogram(v[~np.isnan(v)], 25, (260, 300))[0])
    per = tse.reduce(
        da, "histogram", dim="time", bins=[250, 275, 280, 285, 310], backend="cupy", progress=False
    )
    cpu = tse.reduce(da, "histogram", dim="time", bins=[250, 275, 280, 285, 310], progress=False)
    xr.testing.assert_equal(per, cpu)
    auto_range = tse.reduce(da, "histogram", bins=10, backend="cupy", progress=False)
    finite = v[~np.isnan(v)]
    np.testing.assert_array_equal(auto_range.values, np.histogram(finite, 10)[0])


def test_integer_and_bool_data_on_the_gpu(cupy):
    rng = np.random.default_rng(4)
    for dtype in (np.int16, np.uint8, np.bool_):
        da = xr.DataArray(rng.integers(0, 100, size=(30, 12)).astype(dtype), dims=("a", "b"))
        for op in OPS:
            got = tse.reduce(da, op, dim="a", backend="cupy", progress=False)
            xr.testing.assert_allclose(got, getattr(da, op)("a"), rtol=1e-6)


def test_background_cancel_on_the_gpu(cupy):
    src = SyntheticSource((64, 64, 64), (4, 32, 32), "float32", latency=0.02)
    ds = tse.open_dataset(src)
    job = tse.reduce(ds["data"], "mean", "time", backend="cupy", background=True, progress=False)
    deadline = time.monotonic() + 20
    while job.progress.chunks_done < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    job.cancel()
    assert job.wait(20) and job.status == "cancelled"
    job2 = tse.reduce(ds["data"], "max", "time", backend="cupy", background=True, progress=False)
    want = src.evaluate(tuple(slice(0, n) for n in src.shape)).max(axis=0)
    np.testing.assert_array_equal(job2.result(timeout=60).values, want)


def test_auto_picks_the_gpu_when_there_is_one(cupy):
    assert make_backend("auto", 1024).name == "cupy"


def test_zarr_cube_on_the_gpu(cupy, tmp_path):
    pytest.importorskip("zarr")
    path = tse.sample_data("cube", tmp_path / "cube.zarr", size="small", progress=False)
    ds = tse.open_dataset(path)
    ref = xr.open_zarr(path)["temp"].load()
    for op in ("mean", "std", "max"):
        got = tse.reduce(ds["temp"], op, "time", backend="cupy", progress=False)
        xr.testing.assert_allclose(got, getattr(ref, op)("time"), rtol=1e-6)


# -- batches on the GPU ----------------------------------------------------------------------
BATCHES = {"sample": {"time": 4, "y": 8, "x": 8}, "batch_size": 5, "shuffle": True, "seed": 3}


def _batch_source():
    src = SyntheticSource((32, 40, 40), (8, 20, 20), "float32")
    return tse.open_dataset(src)["data"]


def test_batches_on_the_gpu_equal_the_host_batches(cupy):
    da = _batch_source()
    host = list(tse.batches(da, **BATCHES))
    device = list(tse.batches(da, backend="cupy", **BATCHES))
    assert len(host) == len(device) > 0
    for h, d in zip(host, device):
        assert type(h) is np.ndarray
        assert isinstance(d, cupy.ndarray) and type(d) is not np.ndarray  # on the device
        np.testing.assert_array_equal(cupy.asnumpy(d), h)


def test_torch_batches_of_device_arrays_are_cuda_tensors(cupy, monkeypatch):
    torch = pytest.importorskip("torch")
    da = _batch_source()
    host = list(tse.batches(da, **BATCHES))
    devices = []
    if not torch.cuda.is_available():  # the stand-in: torch has no CUDA to put them on
        real = torch.as_tensor

        def as_tensor(value, device=None):
            devices.append(device)
            return real(cupy.asnumpy(value))

        monkeypatch.setattr(torch, "as_tensor", as_tensor)
    tensors = list(tse.batches(da, backend="cupy", **BATCHES).torch())
    assert len(tensors) == len(host)
    for t, h in zip(tensors, host):
        assert isinstance(t, torch.Tensor)
        np.testing.assert_array_equal(t.cpu().numpy(), h)
    if devices:
        assert devices == ["cuda"] * len(host)
    else:
        assert all(t.is_cuda for t in tensors)
