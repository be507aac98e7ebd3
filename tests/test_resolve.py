"""The one resolver: an xarray object -> (source, selection), and everything that streams it.

Ground truth is NumPy on the same selection: ``sel.values`` of an xarray selection of an
in-memory array, computed without the engine.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tsexplore as tse
from tsexplore.controller import PlaneGeometry, ViewController
from tsexplore.engine import get_engine
from tsexplore.engine.array import dask_source
from tsexplore.errors import IndexingError, NotStreamableError
from tsexplore.resolve import Resolved, SelectionSource, resolve, sources_of, try_resolve
from tsexplore.sources import SyntheticSource

SHAPE = (8, 64, 64)
GRID = (2, 16, 16)
VALUES = np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE)
COORDS = {"t": np.arange(8) * 10, "y": np.linspace(-5, 5, 64), "x": 100 + np.arange(64)}


def dataset() -> xr.Dataset:
    """The same values twice: through tsexplore (``ds``) and in memory (``ref``)."""
    ref = xr.Dataset({"v": (("t", "y", "x"), VALUES)}, coords=COORDS)
    return tse.open_dataset(ref, grid=GRID), ref


# -- the resolver itself --------------------------------------------------------------------


def test_isel_and_sel_compose_into_one_selection():
    ds, ref = dataset()
    cases = [
        {},
        {"y": slice(10, 20), "x": slice(5, 50)},
        {"t": 3, "x": [9, 1, 1, 40]},
        {"y": slice(None, None, -3), "x": slice(60, 2, -7)},
        {"t": [True, False] * 4},
    ]
    for case in cases:
        sel, want = ds.v.isel(**case), ref.v.isel(**case)
        found = resolve(sel)
        assert found.dims == want.dims and found.shape == want.shape
        np.testing.assert_array_equal(found.read(), want.values)
    chained = ds.v.isel(y=slice(3, 60, 2)).sel(x=slice(110, 140)).isel(y=[4, 0, 9], t=slice(1, None))
    want = ref.v.isel(y=slice(3, 60, 2)).sel(x=slice(110, 140)).isel(y=[4, 0, 9], t=slice(1, None))
    found = resolve(chained)
    np.testing.assert_array_equal(found.read(), want.values)
    # a further selection of a selection, and a key on it
    np.testing.assert_array_equal(found.read((slice(None, None, 2), 1)), want.values[::2, 1])
    assert found.source is resolve(ds.v).source and resolve(ds.v).is_whole
    assert not found.is_whole and sources_of(chained) == [found.source]


def test_the_dask_array_of_open_dataset_chunks_resolves_to_its_source():
    ds = tse.open_dataset(dataset()[1], grid=GRID, chunks={})
    found = resolve(ds.v)
    assert found.is_whole and found.source is dask_source(ds.v.data)
    np.testing.assert_array_equal(found.read(), VALUES)
    with pytest.raises(NotStreamableError, match="dask array computed"):
        resolve(ds.v.isel(t=slice(1, 3)))


def test_what_cannot_be_streamed_says_why_and_what_to_do():
    ds, ref = dataset()
    for obj, why in [
        (ds.v * 2, "in memory"),
        (ds.v.transpose("x", "t", "y"), "transposed"),
        (ds.v.isel(x=xr.DataArray([1, 2], dims="p"), y=xr.DataArray([3, 4], dims="p")), "point-wise"),
        (ref.v, "in memory"),
    ]:
        with pytest.raises(NotStreamableError, match=why) as info:
            resolve(obj)
        assert "tse.open_dataset" in str(info.value)
        assert try_resolve(obj) is None
    with pytest.raises(NotStreamableError, match="got a Dataset; pick one"):
        resolve(ds)
    with pytest.raises(NotStreamableError, match="got ndarray"):
        resolve(VALUES)


def test_cf_decoding_that_changes_values_is_not_a_selection(tmp_path):
    packed = xr.Dataset({"p": (("y", "x"), np.arange(12, dtype="int16").reshape(3, 4),
                               {"scale_factor": 0.5, "add_offset": 1.0})})
    path = tmp_path / "packed.zarr"
    packed.to_zarr(path, zarr_format=3)
    ds = tse.open_dataset(path)
    with pytest.raises(NotStreamableError, match="CF decoding|decoding or a cast"):
        resolve(ds.p)
    (stored,) = sources_of(ds.p)  # where the data comes from: found behind the decoding
    assert stored.dtype == np.int16 and stored.shape == (3, 4)
    # the consumers still get the decoded values, through a wrapper
    np.testing.assert_allclose(tse.reduce(ds.p, "sum", progress=False).values, ds.p.values.sum())


def test_keys_out_of_range_are_refused():
    found = Resolved.whole(SyntheticSource((4, 5), (2, 2)))
    with pytest.raises(IndexingError, match="out of range"):
        found.sub((4,))
    with pytest.raises(IndexingError, match="too many indices"):
        found.sub((0, 0, 0))
    assert found.sub((-1, [0, -1])).source_key()[1].tolist() == [0, 4]


def test_a_selection_source_has_exactly_the_selection_chunk_by_chunk():
    ds, ref = dataset()
    sel = dict(t=slice(1, 8, 3), y=slice(10, 50), x=[5, 3, 40, 41])
    view = resolve(ds.v.isel(**sel)).as_source()
    assert isinstance(view, SelectionSource) and view.shape == ref.v.isel(**sel).shape
    out = np.empty(view.shape, dtype=view.dtype)
    for index in view.iter_chunks():
        out[view.chunk_slices(index)] = get_engine().fetch(view, [index])[0]
    np.testing.assert_array_equal(out, ref.v.isel(**sel).values)


# -- property: every consumer works on exactly the selection --------------------------------


def _part(draw: st.DrawFn, n: int, keep: bool) -> object:
    kind = draw(st.sampled_from(["slice", "array", "int"] if not keep else ["slice", "array"]))
    if kind == "int":
        return draw(st.integers(-n, n - 1))
    if kind == "array":
        return draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=6))
    start = draw(st.one_of(st.none(), st.integers(0, n - 1)))
    step = draw(st.sampled_from([1, 1, 2, 3, -1, -2, 5]))
    stop = draw(st.one_of(st.none(), st.integers(0, n)))
    key = slice(start, stop, step)
    if len(range(*key.indices(n))) == 0:
        key = slice(None, None, step)
    return key


@st.composite
def selections(draw: st.DrawFn) -> tuple[dict, dict]:
    """An ``isel`` selection keeping at least y and x, and a ``sel`` on the coordinates."""
    isel = {d: _part(draw, n, keep=d != "t") for d, n in zip(("t", "y", "x"), SHAPE)}
    lo, hi = sorted(draw(st.lists(st.integers(100, 163), min_size=2, max_size=2)))
    return isel, {"x": slice(lo, hi)}


SETTINGS = settings(
    # each example builds a view, a reduction, a loader and an advice run: 40 examples when
    # every test runs, 15 in the quick set (conftest sets TSEXPLORE_PARITY_EXAMPLES: 30 or 5)
    max_examples=int(os.environ.get("TSEXPLORE_PARITY_EXAMPLES", "30")) + 10, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(choice=selections())
def test_explorer_reduce_batches_and_advise_see_exactly_the_selection(choice):
    isel, sel = choice
    # no grace after the view's frame: it would hold each reduction's chunks 0.5 s (the
    # visible-first behaviour is tested in test_visible_first.py; here it only costs time)
    tse.config.set(visible_grace=0.0)
    ds, ref = dataset()
    if not np.all(np.diff(ref.v.isel(**isel).x.values) > 0):
        sel = {}  # label slices need a unique, increasing coordinate
    got_da = ds.v.isel(**isel).sel(**sel)
    want_da = ref.v.isel(**isel).sel(**sel)
    want = want_da.values
    if 0 in want.shape:
        return
    found = resolve(got_da)
    assert found.shape == want.shape and found.dims == want_da.dims
    # the Explorer's plane, through the headless controller (what the Explorer builds)
    geom = PlaneGeometry.of(found, "y", "x")
    with ViewController(found, geom, engine=get_engine()) as ctl:
        last = {d: n - 1 for d, n in zip(geom.dims, geom.shape) if d in geom.slider_dims}
        frame = ctl.wait(ctl.update(indices=last), timeout=20)
        plane = want_da.isel(**last).transpose("y", "x").values
        step_y, step_x = frame.request.step
        np.testing.assert_array_equal(frame.data, plane[::step_y, ::step_x])
    # tse.reduce over the first kept dim
    dim = want_da.dims[0]
    got = tse.reduce(got_da, "sum", dim=dim, progress=False)
    np.testing.assert_allclose(got.values, want.astype(np.float64).sum(axis=0), rtol=1e-6)
    # tse.batches: windows of one cell along the first dim, whole along the others
    sample = {d: (1 if d == dim else n) for d, n in want_da.sizes.items()}
    seen = np.zeros(want.shape[0], dtype=int)
    for batch in tse.batches(got_da, sample=sample, batch_size=3, shuffle=True, seed=1, return_index=True):
        for window, start in zip(batch["v"], batch["index"]):
            np.testing.assert_array_equal(window[0], want[start[0]])
            seen[start[0]] += 1
    assert (seen == 1).all()
    # tse.advise measures the selection itself: its dims, its shape, its values
    if want.ndim >= 2:
        copied: list[np.ndarray] = []
        advice = tse.advise(got_da, lambda da: copied.append(da.values), candidates=[want.shape],
                            repeats=1, progress=False)
        assert advice.dims == want_da.dims and advice.shape == want.shape
        np.testing.assert_array_equal(copied[0], want)  # the whole selection fits the budget
    view = found.as_source()
    assert view.shape == want.shape
    whole = get_engine().fetch(view, list(view.iter_chunks())) if view.nchunks <= 64 else None
    if whole is not None:
        out = np.empty(want.shape, dtype=want.dtype)
        for index, chunk in zip(view.iter_chunks(), whole):
            out[view.chunk_slices(index)] = chunk
        np.testing.assert_array_equal(out, want)
