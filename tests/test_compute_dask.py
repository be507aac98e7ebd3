"""open_dataset(chunks={}): dask tasks that read through the engine (cache and statistics)."""

from __future__ import annotations

import pickle

import dask
import numpy as np
import xarray as xr
from dask.utils import key_split

import tsexplore as tse
from tsexplore.engine.array import StreamingArray, dask_source


def test_dask_reduction_streams_through_the_engine(small_cube):
    ds = tse.open_dataset(small_cube, chunks={})
    ref = xr.open_zarr(small_cube)["temp"].load()
    arr = ds["temp"].data
    assert arr.chunksize == (8, 64, 64)
    before = tse.stats()
    with dask.config.set(scheduler="threads"):
        got = ds["temp"].mean("time").compute()
    delta = tse.stats() - before
    xr.testing.assert_allclose(got, ref.mean("time"), rtol=1e-6)
    nchunks = int(np.prod(arr.numblocks))
    assert delta.reads == nchunks and delta.bytes_decoded == ref.nbytes  # each chunk once
    # a dask graph reads each chunk once: what it read (or had read ahead) is not kept...
    assert tse.stats().cache_bytes == before.cache_bytes
    # ...but chunks that are cached serve its tasks
    src = dask_source(arr)
    tse.get_engine().fetch(src, [tuple(i) for i in np.ndindex(*arr.numblocks)])
    before = tse.stats()
    with dask.config.set(scheduler="threads"):
        got = ds["temp"].std("time").compute()
    delta = tse.stats() - before
    xr.testing.assert_allclose(got, ref.std("time"), rtol=1e-5)
    assert delta.reads == 0 and delta.hits == nchunks


def test_task_names_are_readable_and_deterministic(small_cube):
    a = tse.open_dataset(small_cube, chunks={})["temp"].data
    src = tse.open_dataset(small_cube)["temp"].tse.sources[0]
    # the name is a token of (source version, chunks): no per-process hash() in it
    assert StreamingArray(src).to_dask().name == StreamingArray(src).to_dask().name
    assert key_split(a.name) == "tsexplore-temp"
    c = tse.open_dataset(small_cube, chunks={"time": 16})["temp"].data
    assert c.name != a.name and c.chunksize == (16, 64, 64)


def test_graph_pickles_and_non_native_chunks(small_cube):
    ds = tse.open_dataset(small_cube, chunks={"time": 12, "x": 50})
    ref = xr.open_zarr(small_cube)["temp"].load()
    arr = pickle.loads(pickle.dumps(ds["temp"].data))
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(arr.compute(), ref.values)
        got = ds["temp"].max(["time", "x"]).compute()
    xr.testing.assert_allclose(got, ref.max(["time", "x"]))
