"""``overhead``: the engine's Python work per chunk read, with nothing to read or decode.

A NumPy array of ``--chunks`` (10,000) tiny chunks (1x4x4 float32) behind an ``ArraySource``:

- **uncached**: each chunk read once, in a random order (so no prefetch pattern forms),
  through ``read_selection`` (what ``StreamingArray`` calls): the scheduler's round trip per
  chunk (admit, dispatch, a read thread, check, cache, wake the caller);
- **cached**: ``--reads`` (100,000) reads of those chunks, now cached, in a random order:
  the engine's cost per cached read (plan, cache lookup, counters, assemble);
- **xarray cached**: ``da.isel(time=i).values`` on the same cached chunks (``--reads`` / 10):
  what xarray's lazy indexing adds on top.

Prints the microseconds per read of each (median over ``--repeat`` processes). Target: a
cached read costs <= 50 us outside xarray.
"""

from __future__ import annotations

import time
from typing import Any

from . import common, report, runner
from .common import Metric

SYSTEMS = ("tsexplore",)
METRICS = [
    Metric("cached_us", "cached read us", "lower", "{:.1f}"),
    Metric("uncached_us", "uncached read us", "lower", "{:.1f}"),
    Metric("xarray_cached_us", "xarray cached read us", "lower", "{:.1f}"),
]


def run_system(system: str, params: dict[str, Any], sampler: runner.RssSampler) -> dict[str, Any]:
    """Time the three loops in this (child) process."""
    import numpy as np
    import xarray as xr

    import tsexplore as tse
    from tsexplore.engine.array import read_selection
    from tsexplore.sources import ArraySource

    n, reads = int(params["chunks"]), int(params["reads"])
    values = np.arange(n * 16, dtype="float32").reshape(n, 4, 4)
    source = ArraySource(values, dims=("time", "y", "x"), chunks=(1, 4, 4), name="tiny")
    rng = np.random.default_rng(0)
    every = slice(None)
    sampler.mark_baseline()
    read_selection(source, (0, every, every))  # start the engine (not timed)

    order = [int(i) for i in rng.permutation(n)]
    t0 = time.perf_counter()
    for i in order:
        read_selection(source, (i, every, every))
    uncached = time.perf_counter() - t0

    order = [int(i) for i in rng.integers(0, n, reads)]
    t0 = time.perf_counter()
    for i in order:
        read_selection(source, (i, every, every))
    cached = time.perf_counter() - t0

    da = xr.DataArray(values, dims=("time", "y", "x"))
    ds = tse.open_dataset(da.to_dataset(name="tiny"), chunks=None)
    var = ds["tiny"]
    for i in range(n):  # its own source: cache it first
        var.isel(time=i).values  # noqa: B018
    few = order[: max(1, reads // 10)]
    t0 = time.perf_counter()
    for i in few:
        var.isel(time=i).values  # noqa: B018
    xcached = time.perf_counter() - t0
    check = float(read_selection(source, (n - 1, every, every)).sum())
    return {"chunks": n, "reads": reads, "uncached_us": uncached / n * 1e6,
            "cached_us": cached / reads * 1e6, "xarray_cached_us": xcached / len(few) * 1e6,
            "check": check, **common.engine_counters()}


def main(argv: list[str]) -> int:
    """``python -m benchmarks overhead``."""
    p = common.parser("overhead", __doc__.split("\n\n")[0], SYSTEMS)
    p.add_argument("--chunks", type=int, default=10_000, help="tiny chunks (default 10,000)")
    p.add_argument("--reads", type=int, default=100_000, help="cached reads (default 100,000)")
    args = common.parse(p, argv)
    systems = common.pick_systems(args.systems, SYSTEMS, args.from_all)
    if args.cube != "own" or args.path or args.layout:
        common.log("overhead reads no cube (tiny chunks of a NumPy array): --cube, --path and "
                   "--layout are ignored")
    common.log(f"overhead: {args.chunks} tiny chunks, {args.reads} cached reads x {args.repeat}")
    runs = runner.run_matrix(
        "overhead", systems, lambda s, r: {"chunks": args.chunks, "reads": args.reads},
        repeat=args.repeat, timeout=args.timeout, store=common.ROOT / "benchmarks",
        drop_caches=False,
        describe=lambda r: (f"cached {r['cached_us']:.1f} us, uncached {r['uncached_us']:.1f} us, "
                            f"xarray cached {r['xarray_cached_us']:.1f} us per read"))
    spec = common.DataSpec(common.ROOT / "benchmarks", (args.chunks, 4, 4), (1, 4, 4), "tiny")
    metrics = [*METRICS, *common.ENGINE_METRICS]
    doc = report.document("overhead", args, spec, systems, runs, metrics, primary="cached_us")
    doc["targets"] = [report.target("tsexplore cached chunk read",
                                    report.median_of(doc["summary"], "tsexplore", "cached_us"),
                                    "<=", 50.0, "us")]
    title = (f"overhead ({args.chunks} tiny uncached chunks, {args.reads} cached reads; "
             f"median of {args.repeat} runs)")
    report.report(doc, metrics, title, args.json_only)
    return report.exit_status(doc, args.check)
