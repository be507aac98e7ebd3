"""Mergeable partials (tsexplore.compute.ops, .plan): properties against NumPy in float64."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tsexplore.compute.ops import histogram_edges, make_op
from tsexplore.compute.plan import ReducePlan, normalize_axes
from tsexplore.errors import ConfigError

MOMENT_OPS = ("sum", "mean", "var", "std", "count", "min", "max")


def reference(name: str, x: np.ndarray, axes: tuple[int, ...], ddof: int = 0) -> np.ndarray:
    """NumPy in float64 with xarray's skipna rules (all-NaN slices: NaN, sums: 0)."""
    v = x.astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if name == "sum":
            return np.nansum(v, axis=axes)
        if name == "mean":
            return np.nanmean(v, axis=axes)
        if name == "var":
            return np.nanvar(v, axis=axes, ddof=ddof)
        if name == "std":
            return np.nanstd(v, axis=axes, ddof=ddof)
        if name == "count":
            return np.sum(~np.isnan(v), axis=axes)
        if name == "min":
            return np.nanmin(v, axis=axes)
        if name == "max":
            return np.nanmax(v, axis=axes)
    raise AssertionError(name)


@st.composite
def arrays_and_axes(draw, dtypes=(np.float32, np.float64, np.int16)):
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=7))
    if np.dtype(dtype).kind == "f":
        elements = st.floats(-1e3, 1e3, width=np.dtype(dtype).itemsize * 8) | st.just(np.nan)
    else:
        elements = st.integers(-1000, 1000)
    x = draw(hnp.arrays(dtype, shape, elements=elements))
    axes = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    return x, axes


def assert_close(got, want, rtol=1e-6, atol=1e-9):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol, atol=atol)


@settings(max_examples=150, deadline=None)
@given(arrays_and_axes(), st.sampled_from(MOMENT_OPS))
def test_partial_then_finalize_matches_numpy(case, name):
    x, axes = case
    op = make_op(name, x.dtype)
    got = op.finalize(op.partial(x, axes))
    assert_close(got, reference(name, x, axes), rtol=1e-5 if x.dtype == np.float32 else 1e-9)


@settings(max_examples=150, deadline=None)
@given(arrays_and_axes(), st.sampled_from(MOMENT_OPS), st.data())
def test_merge_of_two_pieces_equals_the_whole(case, name, data):
    x, axes = case
    axis = data.draw(st.sampled_from(axes))
    cut = data.draw(st.integers(0, x.shape[axis]))
    a, b = np.split(x, [cut], axis=axis)
    op = make_op(name, x.dtype)
    pieces = [op.partial(p, axes) for p in (a, b) if p.shape[axis] > 0]
    out_shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    merged = op.empty(out_shape)
    for p in pieces:
        merged = op.merge(merged, p)
    # merge_into on a larger accumulator must agree with merge
    acc = op.empty((2, *out_shape))
    region = (1, Ellipsis)  # a view even when the output is a scalar
    for p in pieces:
        op.merge_into(acc, region, p)
    want = reference(name, x, axes)
    tol = 1e-5 if x.dtype == np.float32 else 1e-9
    assert_close(op.finalize(merged), want, rtol=tol)
    assert_close(op.finalize(tuple(s[1] for s in acc)), want, rtol=tol)


def test_var_is_stable_for_a_large_offset():
    """Chan's merge with shifted sums keeps the variance of 1e6 + small noise exact."""
    rng = np.random.default_rng(0)
    x = (1e6 + rng.standard_normal((64, 5))).astype(np.float64)
    op = make_op("var", x.dtype)
    state = op.empty((5,))
    for piece in np.array_split(x, 9, axis=0):
        state = op.merge(state, op.partial(piece, (0,)))
    np.testing.assert_allclose(op.finalize(state), x.var(axis=0), rtol=1e-9)


def test_var_float32_near_mean_is_exact_enough():
    x = (288.15 + 0.01 * np.random.default_rng(1).standard_normal((4000,))).astype(np.float32)
    op = make_op("std", x.dtype)
    got = op.finalize(op.partial(x, (0,)))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, x.astype(np.float64).std(), rtol=1e-5)


def test_ddof_and_too_few_values():
    x = np.array([[1.0, np.nan], [3.0, np.nan]])
    op = make_op("var", x.dtype, ddof=1)
    got = op.finalize(op.partial(x, (0,)))
    np.testing.assert_allclose(got, [2.0, np.nan])


def test_skipna_false_propagates_nan():
    x = np.array([[1.0, 2.0], [np.nan, 4.0]])
    for name in ("sum", "mean", "var", "min", "max"):
        op = make_op(name, x.dtype, skipna=False)
        got = op.finalize(op.partial(x, (0,)))
        assert np.isnan(got[0]) and not np.isnan(got[1]), name
    op = make_op("count", x.dtype, skipna=False)
    assert list(op.finalize(op.partial(x, (0,)))) == [2, 2]


@pytest.mark.parametrize("skipna", [True, False])
@pytest.mark.parametrize("name", ["sum", "mean", "var", "std", "min", "max", "count"])
def test_empty_is_the_identity_of_merge(name, skipna):
    """A reduction starts from ``empty``: merging a partial into it gives the partial."""
    x = np.array([[1.0, 2.0, np.nan], [np.nan, 4.0, np.nan], [5.0, -3.0, np.nan]])
    op = make_op(name, x.dtype, skipna=skipna)
    want = op.finalize(op.partial(x, (0,)))
    acc = op.empty((3,))
    op.merge_into(acc, (slice(0, 3),), op.partial(x, (0,)))
    np.testing.assert_array_equal(op.finalize(acc), want)
    np.testing.assert_array_equal(op.finalize(op.merge(op.empty((3,)), op.partial(x, (0,)))), want)


def test_result_dtypes_follow_xarray():
    import xarray as xr

    for dtype in (np.float32, np.float64, np.int16, np.uint8, np.bool_):
        x = np.ones((3, 4), dtype=dtype)
        da = xr.DataArray(x, dims=("a", "b"))
        for name in ("sum", "mean", "var", "std", "min", "max", "count"):
            op = make_op(name, x.dtype)
            got = op.finalize(op.partial(x, (0,)))
            assert got.dtype == getattr(da, name)("a").dtype, (dtype, name)


def test_integer_sum_is_exact():
    x = np.full((4,), 2**60, dtype=np.int64)
    op = make_op("sum", x.dtype)
    assert int(op.finalize(op.merge(op.partial(x[:2], (0,)), op.partial(x[2:], (0,))))) == 2**62


@settings(max_examples=100, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=1, max_dims=3, max_side=9),
        elements=st.floats(-50, 50, width=32) | st.just(np.nan),
    ),
    st.integers(1, 12),
    st.tuples(st.floats(-60, 0), st.floats(0.5, 60)),
)
def test_histogram_matches_numpy(x, bins, rng):
    op = make_op("histogram", x.dtype, bins=bins, range=rng)
    got = op.finalize(op.partial(x, tuple(range(x.ndim))))
    v = x.astype(np.float64)
    want, _ = np.histogram(v[~np.isnan(v)], bins=np.asarray(op.edges))
    np.testing.assert_array_equal(got, want)


def test_histogram_per_element_and_explicit_edges():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(10, 3, 4)).astype(np.float32)
    x[0, 0, 0] = np.nan
    edges = [-3, -1, 0, 0.5, 2, 3]
    op = make_op("histogram", x.dtype, bins=edges)
    assert not op.uniform
    a = op.partial(x[:4], (0,))
    b = op.partial(x[4:], (0,))
    got = op.finalize(op.merge(a, b))
    assert got.shape == (3, 4, 5)
    for j, k in itertools.product(range(3), range(4)):
        col = x[:, j, k].astype(np.float64)
        want, _ = np.histogram(col[~np.isnan(col)], bins=edges)
        np.testing.assert_array_equal(got[j, k], want)


def test_histogram_edge_values_land_like_numpy():
    edges = np.linspace(0.1, 0.7, 7)
    x = np.concatenate([edges, edges + 1e-12, edges - 1e-12]).astype(np.float64)
    op = make_op("histogram", x.dtype, bins=6, range=(0.1, 0.7))
    got = op.finalize(op.partial(x, (0,)))
    np.testing.assert_array_equal(got, np.histogram(x, bins=6, range=(0.1, 0.7))[0])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bins": 0, "range": (0, 1)},
        {"bins": 4},
        {"bins": [1.0]},
        {"bins": [3, 2, 1]},
        {"bins": 4, "range": (2, 1)},
        {"bins": 4, "range": (0, np.inf)},
    ],
)
def test_bad_histogram_arguments(kwargs):
    with pytest.raises(ConfigError):
        histogram_edges(kwargs.get("bins"), kwargs.get("range"))


def test_bad_ops_and_dtypes():
    with pytest.raises(ConfigError, match="unknown reduction 'median'"):
        make_op("median", np.float32)
    with pytest.raises(ConfigError, match="complex|support"):
        make_op("mean", np.complex64)
    with pytest.raises(ConfigError, match="ddof"):
        make_op("var", np.float32, ddof=-1)


# -- plan ---------------------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(
    hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=9),
    st.data(),
)
def test_plan_order_visits_every_chunk_once_grouped_by_output_block(shape, data):
    chunks = tuple(data.draw(st.integers(1, s)) for s in shape)
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1)))))
    plan = ReducePlan(shape, chunks, axes)
    order = list(plan.order())
    grid = tuple(math.ceil(s / c) for s, c in zip(shape, chunks))
    assert sorted(order) == sorted(itertools.product(*(range(g) for g in grid)))
    # chunks of one output block are consecutive
    blocks = [plan.kblock(i) for i in order]
    seen, last = set(), None
    for b in blocks:
        if b != last:
            assert b not in seen
            seen.add(b)
            last = b
    # ranges of positions regenerate the same order and cover it exactly
    parts = data.draw(st.integers(1, 7))
    ranges = plan.split(parts)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(order)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    rebuilt = [i for a, b in ranges for i in plan.order(a, b)]
    assert rebuilt == order
    # regions tile the output
    out = np.zeros(plan.out_shape, dtype=int)
    for kb in dict.fromkeys(blocks):
        out[plan.region(kb)] += 1
    assert (out == 1).all()


def test_normalize_axes():
    dims = ("time", "y", "x")
    assert normalize_axes(dims, None) == (0, 1, 2)
    assert normalize_axes(dims, "y") == (1,)
    assert normalize_axes(dims, ["x", "time"]) == (0, 2)
    with pytest.raises(ConfigError, match="'lat'"):
        normalize_axes(dims, "lat")
    with pytest.raises(ConfigError, match="twice"):
        normalize_axes(dims, ["x", "x"])
