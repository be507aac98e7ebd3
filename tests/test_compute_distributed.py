"""tse.reduce(client=...) and the chunks={} dask path on a real two-process LocalCluster."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import xarray as xr

import tsexplore as tse
from tsexplore.errors import ChunkReadError
from tsexplore.sources import SyntheticSource
from tsexplore.testing.wrappers import FaultySource, LatencySource

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    )
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close(timeout=20)
        cluster.close(timeout=20)


#: a test of this module that runs this long is hung (each takes seconds): say where
HUNG_SECONDS = 120.0


@pytest.fixture(autouse=True)
def _report_a_hang(request):
    """If a test here has not finished after HUNG_SECONDS, print what the cluster is doing
    (the tasks each worker processes, and the stacks of those executing) into the test's
    captured output: pytest-timeout shows only this process's threads, not the workers'."""
    if "client" not in request.fixturenames:
        yield
        return
    client = request.getfixturevalue("client")

    def report() -> None:
        try:
            processing = client.processing()
            stacks = client.call_stack()
        except Exception as exc:  # noqa: BLE001 - a report, never a second failure
            print(f"cluster report failed: {exc!r}", flush=True)
            return
        print(f"hung for {HUNG_SECONDS} s; tasks processing per worker: {processing}", flush=True)
        for worker, tasks in stacks.items():
            for key, frames in tasks.items():
                print(f"{worker} executes {key}:\n" + "".join(frames[-12:]), flush=True)

    timer = threading.Timer(HUNG_SECONDS, report)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join(5)


def _reference(path):  # type: ignore[no-untyped-def]
    """The truth, read by xarray's zarr backend in this process (no dask, no cluster)."""
    return xr.open_zarr(path, chunks=None)["temp"].load()


def test_reductions_on_workers_match_xarray(client, small_cube):
    ds = tse.open_dataset(small_cube)
    ref = _reference(small_cube)
    before = tse.stats()
    got = tse.reduce(ds["temp"], "std", dim="time", client=client, progress=False)
    xr.testing.assert_allclose(got, ref.std("time"), rtol=1e-6)
    delta = tse.stats() - before
    # the workers read the store (through their own engines), not this process
    assert delta.bytes_decoded >= ref.nbytes
    assert tse.stats().workers == 2
    assert tse.get_engine().cache.bytes_now == 0
    for op, dim in (("mean", None), ("max", ["y", "x"]), ("count", "x"), ("sum", "time")):
        got = tse.reduce(ds["temp"], op, dim=dim, client=client, progress=False)
        xr.testing.assert_allclose(got, getattr(ref, op)(dim=dim), rtol=1e-6)
    h = tse.reduce(ds["temp"], "histogram", bins=16, client=client, progress=False)
    v = ref.values.ravel().astype(np.float64)
    np.testing.assert_array_equal(h.values, np.histogram(v, bins=16, range=(v.min(), v.max()))[0])


def test_sliced_array_and_background_job_on_workers(client, small_cube):
    ds = tse.open_dataset(small_cube)
    ref = _reference(small_cube)
    sel = dict(time=slice(3, 30, 3), y=slice(5, 120))
    got = tse.reduce(ds["temp"].isel(**sel), "var", dim="x", client=client, progress=False)
    xr.testing.assert_allclose(got, ref.isel(**sel).var("x"), rtol=1e-6)
    job = tse.reduce(ds["temp"], "min", "time", client=client, background=True, progress=False)
    xr.testing.assert_allclose(job.result(timeout=60), ref.min("time"))
    assert job.progress.fraction == 1.0


def test_a_failed_chunk_on_a_worker_raises(client):
    src = FaultySource(SyntheticSource((32, 64, 64), (4, 32, 32)), {(5, 1, 0): OSError})
    ds = tse.open_dataset(src)
    with pytest.raises(ChunkReadError, match=r"\(5, 1, 0\)"):
        tse.reduce(ds["data"], "mean", dim="time", client=client, progress=False)


def test_dask_path_runs_on_workers(client, small_cube):
    """open_dataset(chunks={}) tasks pickle to the workers and read through their engines."""
    ds = tse.open_dataset(small_cube, chunks={})
    ref = _reference(small_cube)
    got = ds["temp"].mean("time").compute()  # the client is the default scheduler now
    xr.testing.assert_allclose(got, ref.mean("time"), rtol=1e-6)
    assert tse.get_engine().cache.bytes_now == 0  # nothing was read in this process


def test_cancel_a_distributed_job_and_live_worker_stats(client):
    src = LatencySource(SyntheticSource((64, 64, 64), (2, 32, 32)), 0.02)  # 128 chunks, ~1.3 s
    ds = tse.open_dataset(src)
    job = tse.reduce(ds["data"], "mean", "time", client=client, background=True, progress=False)
    deadline = time.monotonic() + 30
    while job.progress.chunks_done == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    job.cancel()
    assert job.wait(timeout=30)  # a bound on a loaded machine; workers drop the rest
    assert job.status == "cancelled"
    assert job.progress.chunks_done < src.nchunks
    # a full run afterwards is right, and the workers' statistics reached this process
    # (a new wrapper: the workers' caches hold what the cancelled run had read)
    src = LatencySource(src.inner, 0.0)
    before = tse.stats()
    got = tse.reduce(tse.open_dataset(src)["data"], "mean", "time", client=client, progress=False)
    want = src.inner.evaluate(tuple(slice(0, n) for n in src.shape)).astype(np.float64).mean(0)
    np.testing.assert_allclose(got.values, want, rtol=1e-6)
    assert (tse.stats() - before).bytes_decoded >= src.nchunks * src.chunk_nbytes()


def test_workers_read_s3_directly_and_return_only_partials(client, moto_s3, tmp_path):
    """A store on (moto) S3: every chunk is fetched by a worker process, once; what comes
    back through dask is the partial states, a small fraction of the data read."""
    import uuid

    import zarr

    from tsexplore.testing.http import StoreServer

    values = np.random.default_rng(4).standard_normal((128, 48, 40)).astype("float32")
    local = tmp_path / "long.zarr"
    group = zarr.open_group(str(local), mode="w")
    arr = group.create_array("temp", shape=values.shape, chunks=(8, 24, 20), dtype="float32",
                             dimension_names=("time", "y", "x"))
    arr[...] = values
    zarr.consolidate_metadata(str(local))
    url = moto_s3.upload(local, f"dist-{uuid.uuid4().hex[:6]}/long.zarr")
    with StoreServer(upstream=moto_s3.endpoint) as proxy:  # sees (and counts) every request
        _reduce_through(client, moto_s3, url, proxy, values)


def _reduce_through(client, moto_s3, url, proxy, values):  # type: ignore[no-untyped-def]
    from distributed import get_task_stream

    ds = tse.open_dataset(url, storage_options=moto_s3.storage_options(proxy.url))
    nchunks = 16 * 2 * 2
    before = len(proxy.requests)
    requests_of = lambda: tse.stats().store_requests  # noqa: E731 - run on each worker
    workers_before = client.run(requests_of)
    with get_task_stream(client) as stream:
        got = tse.reduce(ds["temp"], "mean", dim="time", client=client, progress=False)
    np.testing.assert_allclose(got.values, values.astype(np.float64).mean(0), rtol=1e-6)
    chunk_gets = [p for m, p, s in proxy.requests[before:] if "/temp/c/" in p and m == "GET"]
    assert len(chunk_gets) == len(set(chunk_gets)) == nchunks  # every chunk, once
    # ... and by the workers: their engines made those requests, this process read nothing
    per_worker = {k: v - workers_before.get(k, 0) for k, v in client.run(requests_of).items()}
    assert sum(per_worker.values()) == nchunks and all(per_worker.values()), per_worker
    assert tse.get_engine().cache.bytes_now == 0
    results = [t["nbytes"] for t in stream.data if "tsexplore-reduce" in str(t["key"])]
    assert len(results) >= 2  # the tasks ran on the workers
    # sum and count per output cell at most, and the worker's statistics
    assert 0 < sum(results) < values.nbytes / 8, (results, values.nbytes)
