"""``tse.reduce``: a streaming reduction of a DataArray, returned as a DataArray."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from .. import config
from ..errors import ConfigError
from .feed import Feed, feed_for, read_locally
from .gpu import BACKENDS, check_cupy_installed, start_backend
from .job import Progress, ReductionCancelledError, ReductionJob
from .ops import MinMaxOp, Op, State, make_op
from .plan import ReducePlan, normalize_axes

#: an accumulator larger than this share of RAM is refused (reduce over more dims instead)
MAX_STATE_SHARE = 0.25


def reduce(
    da: Any,
    op: str,
    dim: Any = None,
    *,
    backend: str = "numpy",
    client: Any = None,
    progress: bool = True,
    background: bool = False,
    skipna: bool | None = None,
    ddof: int = 0,
    bins: Any = None,
    range: Any = None,  # noqa: A002 - mirrors numpy.histogram
    keep_attrs: bool = True,
) -> Any:
    """Reduce ``da`` over ``dim`` chunk by chunk through the engine.

    ``op``: ``"sum"``, ``"mean"``, ``"var"``, ``"std"``, ``"min"``, ``"max"``, ``"count"`` or
    ``"histogram"`` (``bins``: a count with ``range=(lo, hi)``, or explicit edges; without
    ``range`` a first pass finds the data's min and max). NaNs are skipped like xarray's
    defaults (``skipna``); ``ddof`` applies to var and std. ``dim``: a name, a list of names,
    or None for all dims. Partial results are accumulated in float64 (Chan's merge for var
    and std); the answer is a DataArray with the remaining dims and their coords, like
    ``da.mean(dim)`` (histograms add a trailing ``bin`` dim).

    ``backend``: ``"numpy"``, ``"cupy"`` (each chunk is copied to the GPU and reduced there;
    the chunks read while the GPU starts reduce on the CPU, and the two partial results
    merge) or ``"auto"`` (CuPy when a GPU is usable, else NumPy). ``client``: a
    ``dask.distributed.Client`` to spread chunk ranges over its workers. ``progress`` shows
    a bar (a widget in a notebook, tqdm in a terminal). ``background=True`` returns a
    :class:`~tsexplore.compute.ReductionJob` at once (``.progress``, ``.cancel()``,
    ``.result(timeout=)``).
    """
    request = _prepare(da, op, dim, backend, client, skipna, ddof, bins, range, keep_attrs)
    bar = bool(progress)
    prog = Progress(request.plan.nchunks * request.passes, request.total_bytes, request.desc, bar)
    if background:
        return ReductionJob(lambda cancel: _run(request, prog, cancel), prog, request.desc)
    return _run(request, prog, None)


@dataclass
class _Request:
    """Everything a run needs, checked up front (errors surface before any thread starts)."""

    da: xr.DataArray
    name: str
    dims: tuple[str, ...]
    axes: tuple[int, ...]
    feed: Feed
    plan: ReducePlan
    op: Op | None
    op_kwargs: dict[str, Any]
    backend: str
    client: Any
    keep_attrs: bool
    passes: int
    total_bytes: int
    desc: str


def _prepare(
    da: Any,
    op: str,
    dim: Any,
    backend: str,
    client: Any,
    skipna: bool | None,
    ddof: int,
    bins: Any,
    range_: Any,
    keep_attrs: bool,
) -> _Request:
    if isinstance(da, xr.Dataset):
        raise ConfigError(
            "tse.reduce takes a DataArray; pick a variable, e.g. tse.reduce(ds['temp'], ...)"
        )
    if not isinstance(da, xr.DataArray):
        raise ConfigError(f"tse.reduce takes an xarray.DataArray, got {type(da).__name__}")
    if not isinstance(op, str):
        raise ConfigError(f"op must be the name of a reduction, got {op!r}")
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if client is not None:
        from .distributed import check_client

        check_client(client)
    elif backend == "cupy":
        check_cupy_installed()  # no CuPy: say so now (a GPU that cannot start raises later)
    if op != "histogram" and (bins is not None or range_ is not None):
        raise ConfigError(f"bins= and range= apply to op='histogram', not to {op!r}")
    if op not in ("var", "std") and ddof != 0:
        raise ConfigError(f"ddof= applies to var and std, not to {op!r}")
    dims = tuple(str(d) for d in da.dims)
    axes = normalize_axes(dims, dim)
    kwargs = {"skipna": skipna, "ddof": ddof, "bins": bins, "range": range_}
    passes = 1
    if op == "histogram" and range_ is None and (bins is None or np.ndim(bins) == 0):
        reduced_op = None  # the range comes from a first min/max pass
        passes = 2
        make_op(op, da.dtype, skipna=skipna, bins=bins, range=(0.0, 1.0))  # check bins now
    else:
        reduced_op = make_op(op, da.dtype, **kwargs)
    if op in ("min", "max") and any(da.shape[a] == 0 for a in axes):
        raise ConfigError(f"cannot take the {op} over an empty dimension (shape {da.shape})")
    feed = feed_for(da)
    source = feed.source
    plan = ReducePlan(tuple(source.shape), tuple(source.chunks), axes)
    _check_state_size(plan, reduced_op, op, bins)
    nbytes = math.prod(source.shape) * np.dtype(source.dtype).itemsize
    return _Request(
        da=da,
        name=op,
        dims=dims,
        axes=axes,
        feed=feed,
        plan=plan,
        op=reduced_op,
        op_kwargs=kwargs,
        backend=backend,
        client=client,
        keep_attrs=keep_attrs,
        passes=passes,
        total_bytes=nbytes * passes,
        desc=f"tse.reduce {op}" + (f" over {', '.join(dims[a] for a in axes)}" if axes else ""),
    )


def _check_state_size(plan: ReducePlan, op: Op | None, name: str, bins: Any) -> None:
    per_element = {"var": 24, "std": 24, "mean": 16}.get(name, 8)
    if name == "histogram":
        nb = len(op.edges) - 1 if op is not None else int(bins or 64)  # type: ignore[attr-defined]
        per_element = 8 * nb
    need = math.prod(plan.out_shape) * per_element
    limit = int(config.total_ram() * MAX_STATE_SHARE)
    if need > limit:
        raise ConfigError(
            f"reducing over {plan.axes} would keep an accumulator of {need / 2**30:.1f} GiB "
            f"(output shape {plan.out_shape}); reduce over more dims or select a smaller region"
        )


def _run(request: _Request, prog: Progress, cancel: threading.Event | None) -> xr.DataArray:
    ok = False
    try:
        op = request.op
        if op is None:
            op = _histogram_op_from_data(request, prog, cancel)
        state = _execute(request, op, request.plan, prog, cancel)
        result = _to_dataarray(request, op, state)
        ok = True
        return result
    finally:
        prog.close(ok)


def _histogram_op_from_data(
    request: _Request, prog: Progress, cancel: threading.Event | None
) -> Op:
    da = request.da
    full = ReducePlan(request.plan.shape, request.plan.chunks, tuple(range(len(request.dims))))
    both = MinMaxOp("minmax", np.dtype(da.dtype))
    state = _execute(request, both, full, prog, cancel)
    lo, hi = float(state[0]), float(state[1])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0  # all NaN: an empty histogram on numpy's default range
    kwargs = dict(request.op_kwargs)
    kwargs["range"] = (lo, hi)
    return make_op("histogram", da.dtype, **{k: v for k, v in kwargs.items() if k != "ddof"})


def _execute(
    request: _Request,
    op: Op,
    plan: ReducePlan,
    prog: Progress,
    cancel: threading.Event | None,
) -> State:
    """Run ``op`` over ``plan`` here or on the dask cluster; returns a host-side state."""
    source = request.feed.source
    if request.client is not None:
        from .distributed import run_distributed

        return run_distributed(
            request.client,
            request.feed,
            plan,
            op,
            request.backend,
            progress=prog,
            cancel=cancel,
        )
    from .stream import accumulate, warm_kernels

    # the backend starts on its own thread; chunks read before it is up reduce on the CPU
    first = tuple(min(c, n) for c, n in zip(source.chunks, source.shape))
    warm = warm_kernels(op, plan, first, source.dtype)
    starting = start_backend(request.backend, source.chunk_nbytes(), warm)
    chunks = None if request.feed.through_engine else read_locally(source, plan.order())
    return accumulate(source, plan, op, starting, progress=prog, cancel=cancel, chunks=chunks,
                      wait=config.get().wait_timeout)


def _to_dataarray(request: _Request, op: Op, state: State) -> xr.DataArray:
    da = request.da
    values = np.asarray(op.finalize(state, np))
    kept = [request.dims[i] for i in request.plan.kept]
    out_dims = list(kept)
    coords: dict[Any, Any] = {}
    for name, coord in da.coords.items():
        if set(map(str, coord.dims)) <= set(kept):
            coords[name] = coord.variable
    if op.name == "histogram":
        edges = np.asarray(op.edges)  # type: ignore[attr-defined]
        out_dims.append("bin")
        coords["bin"] = ("bin", (edges[:-1] + edges[1:]) / 2, {"long_name": "bin centre"})
        coords["bin_lower"] = ("bin", edges[:-1])
        coords["bin_upper"] = ("bin", edges[1:])
    attrs = dict(da.attrs) if request.keep_attrs else {}
    if op.name == "histogram":
        attrs = {"long_name": f"histogram of {da.name or 'values'}"}
    name = da.name if op.name != "histogram" else f"{da.name or 'data'}_histogram"
    return xr.DataArray(values, dims=out_dims, coords=coords, attrs=attrs, name=name)


__all__ = ["ReductionCancelledError", "reduce"]
