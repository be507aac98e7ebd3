"""Mergeable partial results of streaming reductions (pure functions, NumPy or CuPy).

A reduction is an :class:`Op`. For every chunk it computes a *partial* (a tuple of arrays
shaped like the chunk without its reduced axes), partials *merge* associatively, and
``finalize`` turns the merged partial into the answer:

- ``sum``: the sum (float64 or the platform integer); ``mean``: sum and count;
- ``var`` / ``std``: count, mean and M2, merged with Chan's parallel formula;
- ``min`` / ``max``: the extreme (in the input dtype); ``count``: non-NaN values;
- ``histogram``: counts per bin.

NaNs are skipped like xarray's defaults (``skipna=True``). The functions take the array
module ``xp`` (``numpy`` or ``cupy``) so the GPU backend runs the same code on the device.
With ``xp`` not NumPy they avoid data-dependent Python branches (no device syncs).

Properties the tests check with hypothesis: ``merge(chunk(a), chunk(b)) == chunk(a ++ b)``
and ``finalize(chunk(x))`` equals NumPy in float64 on ``x``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError

Axes = tuple[int, ...]
State = tuple[Any, ...]

OPS = ("sum", "mean", "var", "std", "min", "max", "count", "histogram")


def _is_numpy(xp: Any) -> bool:
    return xp is np


def _n_along(shape: Sequence[int], axes: Axes) -> int:
    return math.prod(shape[a] for a in axes)


def _sum_dtype(dtype: np.dtype) -> np.dtype:
    """Accumulator of a sum: float64 for floats, NumPy's sum type for ints and bools."""
    if dtype.kind == "f":
        return np.dtype("f8")
    return np.sum(np.zeros(1, dtype=dtype)).dtype


def _work_dtype(dtype: np.dtype) -> np.dtype:
    """Dtype in which deviations from a mean are formed (exact for float32 near the mean)."""
    return np.dtype("f4") if dtype == np.dtype("f4") else np.dtype("f8")


def _expand(a: Any, axes: Axes, xp: Any) -> Any:
    """Re-insert the reduced axes (length 1) so ``a`` broadcasts against the chunk."""
    return xp.expand_dims(a, axis=axes) if axes else a


def _zero_where(d: Any, mask: Any, xp: Any) -> Any:
    if _is_numpy(xp):
        np.copyto(d, 0, where=mask)
        return d
    return xp.where(mask, xp.zeros((), dtype=d.dtype), d)


@dataclass(frozen=True)
class Op:
    """A reduction: ``partial`` per chunk, associative ``merge``, ``finalize``."""

    name: str
    dtype: np.dtype  # the input dtype
    skipna: bool = True

    # -- to be provided -------------------------------------------------------------------
    def partial(self, x: Any, axes: Axes, xp: Any = np) -> State:
        raise NotImplementedError

    def merge(self, a: State, b: State, xp: Any = np) -> State:
        """A new state equal to the reduction over both inputs (pure)."""
        raise NotImplementedError

    def empty(self, shape: tuple[int, ...], xp: Any = np) -> State:
        """The identity of ``merge`` for an output of ``shape``."""
        raise NotImplementedError

    def finalize(self, state: State, xp: Any = np) -> Any:
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------
    def merge_into(self, acc: State, region: tuple[Any, ...], part: State, xp: Any = np) -> None:
        """Merge ``part`` into the slab ``region`` of the accumulator ``acc`` in place."""
        merged = self.merge(tuple(a[region] for a in acc), part, xp)
        for a, m in zip(acc, merged):
            a[region] = m

    @property
    def nan_aware(self) -> bool:
        return self.skipna and self.dtype.kind in "fc"

    def result_dtype(self) -> np.dtype:
        raise NotImplementedError

    def extra_shape(self) -> tuple[int, ...]:
        """Trailing dims that the op adds to the output (the histogram's bins)."""
        return ()


class SumOp(Op):
    def result_dtype(self) -> np.dtype:
        return self.dtype if self.dtype.kind == "f" else _sum_dtype(self.dtype)

    def _sum(self, x: Any, axes: Axes, xp: Any) -> Any:
        acc = _sum_dtype(self.dtype)
        if not self.nan_aware:
            return xp.sum(x, axis=axes, dtype=acc)
        if _is_numpy(xp):
            s = np.add.reduce(x, axis=axes, dtype=acc)
            if not np.isnan(s).any():  # no NaN in the chunk (the cheap common case)
                return s
            return np.nansum(x, axis=axes, dtype=acc)
        return xp.sum(xp.where(xp.isnan(x), 0, x), axis=axes, dtype=acc)

    def partial(self, x: Any, axes: Axes, xp: Any = np) -> State:
        return (self._sum(x, axes, xp),)

    def merge(self, a: State, b: State, xp: Any = np) -> State:
        return (a[0] + b[0],)

    def merge_into(self, acc: State, region: tuple[Any, ...], part: State, xp: Any = np) -> None:
        view = acc[0][region]
        xp.add(view, part[0], out=view)

    def empty(self, shape: tuple[int, ...], xp: Any = np) -> State:
        return (xp.zeros(shape, dtype=_sum_dtype(self.dtype)),)

    def finalize(self, state: State, xp: Any = np) -> Any:
        return state[0].astype(self.result_dtype(), copy=False)


class CountOp(Op):
    def result_dtype(self) -> np.dtype:
        return np.dtype("i8")

    def _count(self, x: Any, axes: Axes, xp: Any) -> Any:
        if self.nan_aware:
            return xp.sum(~xp.isnan(x), axis=axes, dtype=np.int64)
        shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
        return xp.full(shape, _n_along(x.shape, axes), dtype=np.int64)

    def partial(self, x: Any, axes: Axes, xp: Any = np) -> State:
        return (self._count(x, axes, xp),)

    def merge(self, a: State, b: State, xp: Any = np) -> State:
        return (a[0] + b[0],)

    def merge_into(self, acc: State, region: tuple[Any, ...], part: State, xp: Any = np) -> None:
        view = acc[0][region]
        xp.add(view, part[0], out=view)

    def empty(self, shape: tuple[int, ...], xp: Any = np) -> State:
        return (xp.zeros(shape, dtype=np.int64),)

    def finalize(self, state: State, xp: Any = np) -> Any:
        return state[0]


class MeanOp(SumOp):
    """State: (sum float64, count int64)."""

    def result_dtype(self) -> np.dtype:
        return self.dtype if self.dtype.kind == "f" else np.dtype("f8")

    def partial(self, x: Any, axes: Axes, xp: Any = np) -> State:
        if self.nan_aware:
            if _is_numpy(xp):
                s = np.add.reduce(x, axis=axes, dtype=np.float64)
                if not np.isnan(s).any():
                    return s, _n_along(x.shape, axes)
            nan = xp.isnan(x)
            s = xp.sum(xp.where(nan, 0, x), axis=axes, dtype=np.float64)
            return s, xp.sum(~nan, axis=axes, dtype=np.int64)
        return xp.sum(x, axis=axes, dtype=np.float64), _n_along(x.shape, axes)

    def merge(self, a: State, b: State, xp: Any = np) -> State:
        return (a[0] + b[0], a[1] + b[1])

    def merge_into(self, acc: State, region: tuple[Any, ...], part: State, xp: Any = np) -> None:
        for a, p in zip(acc, part):
            view = a[region]
            xp.add(view, p, out=view)

    def empty(self, shape: tuple[int, ...], xp: Any = np) -> State:
        return (xp.zeros(shape, dtype=np.float64), xp.zeros(shape, dtype=np.int64))

    def finalize(self, state: State, xp: Any = np) -> Any:
        s, n = state
        n = xp.asarray(n)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = xp.where(n > 0, s / xp.maximum(n, 1), xp.nan)
        return out.astype(self.result_dtype(), copy=False)


@dataclass(frozen=True)
class VarOp(Op):
    """State: (count int64, mean float64, M2 float64); Chan et al.'s merge."""

    ddof: int = 0
    sqrt: bool = False

    def result_dtype(self) -> np.dtype:
        return self.dtype if self.dtype.kind == "f" else np.dtype("f8")

    def partial(self, x: Any, axes: Axes, xp: Any = np) -> State:
        work = _work_dtype(self.dtype)
        nan_path = self.nan_aware
        nan = None
        if nan_path and _is_numpy(xp):
            s = np.add.reduce(x, axis=axes, dtype=np.float64)
            nan_path = bool(np.isnan(s).any())
        if nan_path:
            nan = xp.isnan(x)
            n = xp.sum(~nan, axis=axes, dtype=np.int64)
            s = xp.sum(xp.where(nan, 0, x), axis=axes, dtype=np.float64)
        else:
            n = _n_along(x.shape, axes)
            if not _is_numpy(xp) or not self.nan_aware:
                s = xp.sum(x, axis=axes, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            nn = xp.maximum(n, 1) if nan is not None else max(n, 1)
            shift = (s / nn).astype(work)  # a shift near the mean keeps the sums exact
            d = x.astype(work, copy=True) if x.dtype != work else x.copy()
            d -= _expand(shift, axes, xp)
            if nan is not None:
                d = _zero_where(d, nan, xp)
            s1 = xp.sum(d, axis=axes, dtype=np.float64)
            d *= d
            s2 = xp.sum(d, axis=axes, dtype=np.float64)
            mean = shift.astype(np.float64) + s1 / nn
            m2 = s2 - s1 * s1 / nn
        if work != np.dtype("f8") and _is_numpy(xp) and not np.isfinite(s2).all():
            # float32 squares overflowed: redo the chunk in float64
            return VarOp(self.name, np.dtype("f8"), self.skipna, self.ddof, self.sqrt).partial(
                x.astype(np.float64), axes, xp
            )
        m2 = xp.maximum(m2, 0)
        if nan is not None:
            mean = xp.where(n > 0, mean, 0.0)
        return n, mean, m2

    def merge(self, a: State, b: State, xp: Any = np) -> State:
        na, ma, m2a = a
        nb, mb, m2b = b
        n = na + nb
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = nb / xp.maximum(n, 1) if not isinstance(n, int) else nb / max(n, 1)
            delta = mb - ma
            mean = ma + delta * frac
            m2 = m2a + m2b + delta * delta * na * frac
        return n, mean, m2

    def merge_into(self, acc: State, region: tuple[Any, ...], part: State, xp: Any = np) -> None:
        na_v, ma_v, m2a_v = (a[region] for a in acc)
        nb, mb, m2b = part
        na = na_v.copy()
        na_v += nb  # n
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = nb / xp.maximum(na_v, 1)
            delta = mb - ma_v
            ma_v += delta * frac
            m2a_v += m2b
            m2a_v += delta * delta * na * frac

    def empty(self, shape: tuple[int, ...], xp: Any = np) -> State:
        return (
            xp.zeros(shape, dtype=np.int64),
            xp.zeros(shape, dtype=np.float64),
            xp.zeros(shape, dtype=np.float64),
        )

    def finalize(self, state: State, xp: Any = np) -> Any:
        n, _, m2 = state
        n = xp.asarray(n)
        dof = n - self.ddof
        with np.errstate(invalid="ignore", divide="ignore"):
            var = xp.where(dof > 0, m2 / xp.maximum(dof, 1), xp.nan)
        out = xp.sqrt(var) if self.sqrt else var
        return out.astype(self.result_dtype(), copy=False)


@dataclass(frozen=True)
class ExtremeOp(Op):
    """``min`` or ``max`` in the input dtype; all-NaN slices give NaN."""

    def result_dtype(self) -> np.dtype:
        return self.dtype

    def _fn(self, xp: Any) -> Any:
        if self.nan_aware:
            return xp.fmin if self.name == "min" else xp.fmax
        return xp.minimum if self.name == "min" else xp.maximum

    def partial(self, x: Any, axes: Axes, xp: Any = np) -> State:
        if _is_numpy(xp):
            return (self._fn(xp).reduce(x, axis=axes),)
        reduce = xp.min if self.name == "min" else xp.max
        if not self.nan_aware:
            return (reduce(x, axis=axes),)
        nan = xp.isnan(x)
        fill = np.inf if self.name == "min" else -np.inf
        out = reduce(xp.where(nan, fill, x), axis=axes)
        return (xp.where(xp.all(nan, axis=axes), xp.nan, out).astype(self.dtype),)

    def merge(self, a: State, b: State, xp: Any = np) -> State:
        return (self._fn(xp)(a[0], b[0]),)

    def merge_into(self, acc: State, region: tuple[Any, ...], part: State, xp: Any = np) -> None:
        view = acc[0][region]
        self._fn(xp)(view, part[0], out=view)

    def empty(self, shape: tuple[int, ...], xp: Any = np) -> State:
        if self.dtype.kind in "fc":
            # the identity of fmin/fmax is NaN; of minimum/maximum (skipna=False) it is ±inf,
            # as NaN would win every merge
            fill = np.nan if self.nan_aware else (np.inf if self.name == "min" else -np.inf)
            return (xp.full(shape, fill, dtype=self.dtype),)
        if self.dtype.kind == "b":
            return (xp.full(shape, self.name == "min", dtype=self.dtype),)
        info = np.iinfo(self.dtype)
        return (xp.full(shape, info.max if self.name == "min" else info.min, dtype=self.dtype),)

    def finalize(self, state: State, xp: Any = np) -> Any:
        return state[0]


@dataclass(frozen=True)
class MinMaxOp(Op):
    """min and max in one pass (the range of a histogram); state ``(min, max)``."""

    @property
    def _parts(self) -> tuple[ExtremeOp, ExtremeOp]:
        return ExtremeOp("min", self.dtype, self.skipna), ExtremeOp("max", self.dtype, self.skipna)

    def result_dtype(self) -> np.dtype:
        return self.dtype

    def partial(self, x: Any, axes: Axes, xp: Any = np) -> State:
        lo, hi = self._parts
        return lo.partial(x, axes, xp) + hi.partial(x, axes, xp)

    def merge(self, a: State, b: State, xp: Any = np) -> State:
        lo, hi = self._parts
        return lo.merge(a[:1], b[:1], xp) + hi.merge(a[1:], b[1:], xp)

    def merge_into(self, acc: State, region: tuple[Any, ...], part: State, xp: Any = np) -> None:
        lo, hi = self._parts
        lo.merge_into(acc[:1], region, part[:1], xp)
        hi.merge_into(acc[1:], region, part[1:], xp)

    def empty(self, shape: tuple[int, ...], xp: Any = np) -> State:
        lo, hi = self._parts
        return lo.empty(shape, xp) + hi.empty(shape, xp)

    def finalize(self, state: State, xp: Any = np) -> Any:
        return state


@dataclass(frozen=True)
class HistogramOp(Op):
    """Counts of values in ``edges`` bins (NumPy's rule: the last bin includes its right edge).

    With reduced axes and kept axes, one histogram per output element (trailing ``bin`` dim).
    """

    edges: tuple[float, ...] = ()
    uniform: bool = True

    @property
    def nbins(self) -> int:
        return len(self.edges) - 1

    def result_dtype(self) -> np.dtype:
        return np.dtype("i8")

    def extra_shape(self) -> tuple[int, ...]:
        return (self.nbins,)

    def _bin_index(self, x: Any, xp: Any) -> tuple[Any, Any]:
        """Bin of every value (float64 arithmetic, corrected against the edges) and validity."""
        edges = xp.asarray(self.edges, dtype=np.float64)
        lo, hi = self.edges[0], self.edges[-1]
        v = x.astype(np.float64, copy=False)
        with np.errstate(invalid="ignore"):
            valid = (v >= lo) & (v <= hi)  # NaN compares False: skipped
        nb = self.nbins
        if self.uniform:
            with np.errstate(invalid="ignore", over="ignore"):
                idx = ((v - lo) * (nb / (hi - lo))).astype(np.int64)
            idx = xp.clip(idx, 0, nb - 1)
            # correct values that rounding put in a neighbour bin (as numpy.histogram does)
            idx -= v < edges[idx]
            idx += (v >= edges[xp.minimum(idx + 1, nb)]) & (idx != nb - 1)
        else:
            idx = xp.searchsorted(edges, v, side="right") - 1
            idx = xp.clip(idx, 0, nb - 1)
        return idx, valid

    def partial(self, x: Any, axes: Axes, xp: Any = np) -> State:
        kept_shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
        nb = self.nbins
        idx, valid = self._bin_index(x, xp)
        nkept = math.prod(kept_shape)
        if nkept > 1:
            kept_axes = [i for i in range(x.ndim) if i not in axes]
            shape = [1] * x.ndim
            for k, i in enumerate(kept_axes):
                shape[i] = kept_shape[k]
            element = xp.arange(nkept, dtype=np.int64).reshape(shape) * nb
            idx = idx + element
        # NaNs and values outside the edges are never counted (NumPy's rule)
        # invalid values go to one overflow slot that is dropped (no boolean compaction)
        total = nkept * nb
        idx = xp.where(valid, idx, total)
        counts = xp.bincount(idx.ravel(), minlength=total + 1)[:total]
        return (counts.astype(np.int64).reshape(kept_shape + (nb,)),)

    def merge(self, a: State, b: State, xp: Any = np) -> State:
        return (a[0] + b[0],)

    def merge_into(self, acc: State, region: tuple[Any, ...], part: State, xp: Any = np) -> None:
        view = acc[0][region]
        xp.add(view, part[0], out=view)

    def empty(self, shape: tuple[int, ...], xp: Any = np) -> State:
        return (xp.zeros(shape + (self.nbins,), dtype=np.int64),)

    def finalize(self, state: State, xp: Any = np) -> Any:
        return state[0]


def histogram_edges(bins: Any, range_: Any) -> tuple[tuple[float, ...], bool]:
    """Edges from ``bins`` (a count with ``range``, or explicit edges) and whether uniform."""
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        if bins < 1:
            raise ConfigError(f"bins must be a positive number of bins, got {bins}")
        if range_ is None:
            raise ConfigError("histogram needs range=(lo, hi) with an integer bins")
        lo, hi = (float(r) for r in range_)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ConfigError(f"histogram range must be finite, got {range_!r}")
        if hi == lo:  # numpy widens a degenerate range the same way
            lo, hi = lo - 0.5, hi + 0.5
        if hi < lo:
            raise ConfigError(f"histogram range must be (lo, hi) with lo <= hi, got {range_!r}")
        return tuple(float(e) for e in np.linspace(lo, hi, int(bins) + 1)), True
    edges = np.asarray(bins, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 2 or not np.all(np.diff(edges) > 0):
        raise ConfigError(
            f"bins must be an int or a 1-D increasing sequence of at least 2 edges, got {bins!r}"
        )
    if not np.all(np.isfinite(edges)):
        raise ConfigError("histogram edges must be finite")
    return tuple(float(e) for e in edges), False


def make_op(
    name: str,
    dtype: Any,
    *,
    skipna: bool | None = None,
    ddof: int = 0,
    bins: Any = None,
    range: Any = None,  # noqa: A002 - mirrors numpy.histogram
) -> Op:
    """Build the :class:`Op` called ``name`` for inputs of ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "biuf":
        raise ConfigError(
            f"tsexplore reductions support bool, integer and float arrays, got dtype {dtype}"
        )
    skip = True if skipna is None else bool(skipna)
    if name == "sum":
        return SumOp(name, dtype, skip)
    if name == "mean":
        return MeanOp(name, dtype, skip)
    if name in ("var", "std"):
        if not isinstance(ddof, (int, np.integer)) or ddof < 0:
            raise ConfigError(f"ddof must be a non-negative int, got {ddof!r}")
        return VarOp(name, dtype, skip, int(ddof), name == "std")
    if name in ("min", "max"):
        return ExtremeOp(name, dtype, skip)
    if name == "count":
        return CountOp(name, dtype, skip)
    if name == "histogram":
        edges, uniform = histogram_edges(64 if bins is None else bins, range)
        return HistogramOp(name, dtype, skip, edges, uniform)
    raise ConfigError(f"unknown reduction {name!r}; choose one of {', '.join(OPS)}")
