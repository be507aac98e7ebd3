"""backend="cupy": reductions on the GPU through pinned staging buffers.

Each check runs twice: on a real GPU (``gpu`` marker; skipped without CuPy and a device) and
on a NumPy-backed stand-in for CuPy, so the GPU code path (no data-dependent branches,
staging, stream handling) is exercised on every machine. Self-contained: the data is made
here (synthetic sources and NumPy arrays; the Zarr check skips when zarr is absent).
"""

from __future__ import annotations

import sys
import time
import types

import numpy as np
import pytest
import xarray as xr

import tsexplore as tse
from tsexplore.compute.gpu import CupyBackend, gpu_available, make_backend
from tsexplore.sources import SyntheticSource

OPS = ("sum", "mean", "var", "std", "min", "max", "count")


# -- a NumPy-backed stand-in for CuPy ------------------------------------------------------
class _DeviceArray(np.ndarray):
    def set(self, host, stream=None):  # noqa: A003 - CuPy's name
        self[...] = host


class _Event:
    def synchronize(self):
        pass


class _Stream:
    def __init__(self, non_blocking=False):
        self.records = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def synchronize(self):
        pass

    def record(self):
        self.records += 1
        return _Event()


class _FakeCupy(types.ModuleType):
    """``cupy`` made of NumPy: device arrays are an ndarray subclass, streams do nothing."""

    def __getattr__(self, name):
        return getattr(np, name)


def _fake_cupy() -> types.ModuleType:
    cp = _FakeCupy("cupy")
    cp.ndarray = _DeviceArray
    cp.empty = lambda shape, dtype=float: np.empty(shape, dtype).view(_DeviceArray)
    cp.asnumpy = lambda a, stream=None: np.array(a).view(np.ndarray)
    cp.pinned_allocations = []

    def alloc_pinned_memory(n):
        buf = bytearray(n)
        cp.pinned_allocations.append(n)
        return buf

    cp.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
        Stream=_Stream,
        alloc_pinned_memory=alloc_pinned_memory,
    )
    return cp


@pytest.fixture(
    params=[
        pytest.param("gpu", marks=pytest.mark.gpu),
        pytest.param("stand-in"),
    ]
)
def cupy(request, monkeypatch):
    """The real CuPy on a GPU machine, or the NumPy stand-in."""
    if request.param == "gpu":
        if not gpu_available():
            pytest.skip("needs CuPy and a CUDA GPU")
        import cupy as real

        return real
    fake = _fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


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
        assert isinstance(got.data, np.ndarray)  # results come back to the host
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
