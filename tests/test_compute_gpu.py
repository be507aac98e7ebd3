"""backend="cupy": reductions on the GPU through pinned staging buffers.

Each check runs twice: on a real GPU (``gpu`` marker; skipped without CuPy and a device) and
on a NumPy-backed stand-in for CuPy whose copies and events complete later on another thread
(``tests/_fake_cupy.py``), so the GPU code path (no data-dependent branches, staging, the
wait before a staging buffer is reused, stream handling) is exercised on every machine. Self-contained: the data is made
here (synthetic sources and NumPy arrays; the Zarr check skips when zarr is absent).
"""

from __future__ import annotations

import sys
import time

import _fake_cupy
import numpy as np
import pytest
import xarray as xr

import tsexplore as tse
from tsexplore.compute.gpu import CupyBackend, gpu_available, make_backend
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
    copies and events complete later, on another thread)."""
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
