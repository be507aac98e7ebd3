"""Frame benchmarks (issue 2): ``play``, ``scrub`` and ``memory``.

- ``play``: frames ``t = 0..N-1`` requested on a 30 fps clock (sleep to the next 1/30 s
  tick, then read one ``time`` slice); per-frame latency p50 / p95 / p99, the first frame and
  the worst after it, frames later than one tick. Targets (issue 30): tsexplore p95 <= 5 ms,
  p99 <= 16.7 ms, the first frame <= 200 ms, none after it over 50 ms; with ``--remote``
  p99 <= 33 ms and no frame late after the first second.
- ``scrub``: the same frames as fast as possible; frames/s and latency. Targets (issue 30):
  >= 1.0x naive and >= 1.0x TensorStore (``--layout``: >= 1.0x TensorStore).
- both: minor page faults and CPU time (user + system) per frame over the timed loop;
  target: tsexplore's page faults per frame within 2x naive's.
- ``memory``: 8 threads read random frames with a small cache budget (tsexplore's
  ``cache_high_water`` must stay <= budget; peers show their RSS), and tsexplore opens a
  10^15-element ``tse.synthetic`` array (time and RSS).

Systems: tsexplore, zarr, xarray (``chunks=None``), xarray-dask (default chunks),
TensorStore (zarr3 driver, 1 GB ``cache_pool``) and zarrs (zarr-python with the zarrs codec
pipeline). ``--remote`` serves the store from a loopback HTTP server (``--latency`` per
request, 20 ms by default, and ``--bandwidth``) and points every system at its URL; ``--s3``
does the same through a moto S3 server; remote play reports p99 and the frames late after
the first second. ``--layout`` reads a sharded (or the unsharded) 128-frame cube.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from . import common, report, runner
from .common import Metric

SYSTEMS = ("tsexplore", "naive", "zarr", "xarray", "xarray-dask", "tensorstore", "zarrs")
#: the systems of ``scrub --layout`` (sharded stores): zarr with its own and with zarrs' pipeline
LAYOUT_SYSTEMS = ("tsexplore", "zarr", "zarrs", "tensorstore")
MEMORY_SYSTEMS = ("tsexplore", "zarr", "tensorstore")
FPS = 30.0
TS_CACHE_BYTES = 1_000_000_000

#: per frame over the timed loop: minor page faults and CPU (user + system, all threads)
USAGE_METRICS = [
    Metric("faults_per_frame", "faults/frame", "lower", "{:.0f}"),
    Metric("cpu_ms_per_frame", "CPU ms/frame", "lower", "{:.2f}"),
]
PLAY_METRICS = [
    Metric("p50_ms", "p50 ms", "lower"),
    Metric("p95_ms", "p95 ms", "lower"),
    Metric("p99_ms", "p99 ms", "lower"),
    Metric("first_ms", "first ms", "lower", "{:.1f}"),
    Metric("max_after_first_ms", "worst after first ms", "lower", "{:.1f}"),
    Metric("late_after_1s", "late after 1 s", "lower", "{:.0f}"),
    Metric("late_frames", "late frames", "lower", "{:.0f}"),
    *USAGE_METRICS,
    Metric("open_s", "open s", "lower", "{:.3f}"),
]
SCRUB_METRICS = [
    Metric("fps", "frames/s", "higher", "{:.1f}"),
    Metric("p50_ms", "p50 ms", "lower"),
    Metric("p95_ms", "p95 ms", "lower"),
    Metric("max_ms", "max ms", "lower", "{:.1f}"),
    *USAGE_METRICS,
    Metric("open_s", "open s", "lower", "{:.3f}"),
]
MEMORY_METRICS = [
    Metric("reads_per_s", "frames/s (8 threads)", "higher", "{:.1f}"),
    Metric("high_water_mb", "cache high water MB", "lower", "{:.1f}"),
    Metric("synthetic_open_s", "1e15 open s", "lower", "{:.4f}"),
    Metric("synthetic_rss_mb", "1e15 open RSS +MB", "lower", "{:.1f}"),
]


# -- child side ----------------------------------------------------------------------------------
IMPORTS = {"tsexplore": ("tsexplore", "zarr", "dask.array"), "zarr": ("zarr",),
           "naive": ("numcodecs",),
           "zarrs": ("zarr", "zarrs"),
           "xarray": ("xarray", "zarr", "dask.array"),
           "xarray-dask": ("xarray", "zarr", "dask.array"), "tensorstore": ("tensorstore",)}


def import_system(system: str) -> float:
    """Import what ``system`` needs (not timed as opening); the seconds it took."""
    import importlib

    t0 = time.perf_counter()
    for name in IMPORTS.get(system, ()):
        importlib.import_module(name)
    return time.perf_counter() - t0


def open_reader(system: str, url: str, storage_options: dict | None = None
                ) -> tuple[Callable[[int], Any], Callable[[], dict]]:
    """``read(t) -> np.ndarray`` for one system, and a function giving its stats afterwards."""
    var = common.VARIABLE
    if system == "tsexplore":
        import tsexplore as tse

        da = tse.open_dataset(url, storage_options=storage_options)[var]
        return (lambda t: da.isel(time=t).values), common.engine_counters
    if system == "naive":  # the floor: two threads read + decode, two chunk-rows ahead
        from .naive import open_naive

        return open_naive(url, var).frame, dict
    if system in ("zarr", "zarrs"):
        import zarr

        if system == "zarrs":  # zarr-python with the Rust codec pipeline
            zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
        arr = zarr.open_array(url, path=var, mode="r", storage_options=storage_options)
        return (lambda t: arr[t]), dict
    if system in ("xarray", "xarray-dask"):
        import xarray as xr

        kw: dict[str, Any] = {"chunks": None} if system == "xarray" else {}
        da = xr.open_zarr(url, storage_options=storage_options, **kw)[var]
        return (lambda t: da.isel(time=t).values), dict
    if system == "tensorstore":
        arr = open_tensorstore(url, TS_CACHE_BYTES, storage_options)
        return (lambda t: arr[t].read().result()), dict
    raise ValueError(f"unknown system {system!r}; known: {SYSTEMS}")


def open_tensorstore(url: str, cache_bytes: int, storage_options: dict | None = None) -> Any:
    """The cube's variable through TensorStore's ``zarr3`` driver, or its ``zarr`` (v2) driver
    for a Zarr v2 cube (file, http or s3 kvstore)."""
    import tensorstore as ts

    if url.startswith("s3://"):
        bucket, _, prefix = url[len("s3://"):].partition("/")
        opts = storage_options or {}
        kvstore: dict[str, Any] = {"driver": "s3", "bucket": bucket,
                                   "path": f"{prefix}/{common.VARIABLE}/",
                                   "aws_region": opts.get("client_kwargs", {}).get("region_name",
                                                                                   "us-east-1")}
        if opts.get("endpoint_url"):
            kvstore["endpoint"] = opts["endpoint_url"]
    elif "://" in url:
        kvstore = {"driver": "http", "base_url": url, "path": f"/{common.VARIABLE}/"}
    else:
        kvstore = {"driver": "file", "path": os.path.join(url, common.VARIABLE) + "/"}
    spec = {"driver": "zarr3", "kvstore": kvstore,
            "context": {"cache_pool": {"total_bytes_limit": int(cache_bytes)}},
            "recheck_cached_data": "open"}
    if "://" not in url:
        if os.path.exists(os.path.join(url, common.VARIABLE, ".zarray")):
            spec["driver"] = "zarr"
        return ts.open(spec, read=True).result()
    try:
        return ts.open(spec, read=True).result()
    except ValueError:  # no zarr.json: a Zarr v2 array
        return ts.open({**spec, "driver": "zarr"}, read=True).result()


def run_system(system: str, params: dict[str, Any], sampler: runner.RssSampler) -> dict[str, Any]:
    """One run of ``params["bench"]`` (play, scrub or memory) for ``system``."""
    if params["bench"] == "memory":
        return _run_memory(system, params, sampler)
    import numpy as np

    import_s = import_system(system)
    sampler.mark_baseline()
    t0 = time.perf_counter()
    read, stats = open_reader(system, params["url"], params.get("storage_options"))
    open_s = time.perf_counter() - t0
    frames = list(range(params["frames"]))
    period = 1.0 / params["fps"] if params["bench"] == "play" else 0.0
    lat: list[float] = []
    late_after_1s = 0
    checks: list[float] = []
    usage = runner.Usage()
    start = time.perf_counter()
    due = start
    for t in frames:
        if period:  # wait for the next tick; after a late frame, the next tick still ahead
            now = time.perf_counter()
            if now < due:
                time.sleep(due - now)
        t1 = time.perf_counter()
        frame = read(t)
        t2 = time.perf_counter()
        lat.append(t2 - t1)
        if period and t1 - start > 1.0 and t2 - t1 > period:
            late_after_1s += 1
        checks.append(float(np.asarray(frame)[::61, ::67].sum(dtype=np.float64)))
        if period:
            due = max(due + period, start + math.ceil((t2 - start) / period) * period)
    total = time.perf_counter() - start
    used = usage.per(len(frames))
    ms = [x * 1e3 for x in lat]
    return {
        "import_s": import_s, "open_s": open_s, "frames": len(frames), "total_s": total,
        "fps": len(frames) / total, **used,
        "first_ms": ms[0], "max_after_first_ms": max(ms[1:]) if len(ms) > 1 else None,
        "p50_ms": runner.percentile(ms, 50), "p95_ms": runner.percentile(ms, 95),
        "p99_ms": runner.percentile(ms, 99), "late_after_1s": late_after_1s,
        "max_ms": max(ms), "mean_ms": sum(ms) / len(ms),
        "late_frames": sum(1 for x in lat if period and x > period),
        "frame_shape": list(np.asarray(frame).shape), **stats(),
        "trace": {"latency_ms": [round(x, 3) for x in ms], "checks": checks},
    }


def _run_memory(system: str, params: dict[str, Any], sampler: runner.RssSampler) -> dict[str, Any]:
    """8 threads reading random frames under a small budget; then the 10^15-element open."""
    budget = int(params["budget"])
    url = params["url"]
    var = common.VARIABLE
    import_system(system)
    sampler.mark_baseline()
    high_water: Callable[[], int | None] = lambda: None  # noqa: E731
    if system == "tsexplore":
        import tsexplore as tse

        tse.config.set(cache_bytes=budget)
        da = tse.open_dataset(url)[var]
        read: Callable[[int], Any] = lambda t: da.isel(time=t).values  # noqa: E731
        high_water = lambda: tse.stats().cache_high_water  # noqa: E731
    elif system == "zarr":
        import zarr

        arr = zarr.open_array(url, path=var, mode="r")
        read = lambda t: arr[t]  # noqa: E731
    elif system == "tensorstore":
        tsarr = open_tensorstore(url, budget)
        read = lambda t: tsarr[t].read().result()  # noqa: E731
    else:
        raise ValueError(f"unknown system {system!r} for memory; known: {MEMORY_SYSTEMS}")
    nt = params["nt"]
    per_thread = params["reads_per_thread"]
    errors: list[str] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(per_thread):
                read(rng.randrange(nt))
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(k,), name=f"tsexplore-bench-reader-{k}")
               for k in range(params["threads"])]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join(params["timeout"])
    elapsed = time.perf_counter() - t0
    if any(th.is_alive() for th in threads):
        raise TimeoutError(f"reader threads still running after {params['timeout']} s")
    if errors:
        raise RuntimeError(f"{len(errors)} reader thread(s) failed; first: {errors[0]}")
    hw = high_water()
    counters = common.engine_counters() if system == "tsexplore" else {}
    out: dict[str, Any] = {**counters,
        "threads": params["threads"], "reads": params["threads"] * per_thread,
        "elapsed_s": elapsed, "reads_per_s": params["threads"] * per_thread / elapsed,
        "budget_mb": budget / 1e6, "high_water_mb": None if hw is None else hw / 1e6,
        "rss_after_reads_mb": sampler.now() / 1e6,
    }
    if system == "tsexplore":
        out.update(_synthetic_open(params["synthetic_shape"]))
    return out


def _synthetic_open(shape: list[int]) -> dict[str, Any]:
    """Open a 10^15-element synthetic array: seconds, RSS growth, one 256x256 read."""
    import gc

    import numpy as np
    import psutil

    import tsexplore as tse

    gc.collect()
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    t0 = time.perf_counter()
    ds = tse.synthetic(tuple(shape), chunks=(16, 256, 256))
    open_s = time.perf_counter() - t0
    rss1 = proc.memory_info().rss
    name = next(iter(ds.data_vars))
    t1 = time.perf_counter()
    win = ds[name][5, 1000:1256, 2000:2256].values
    read_s = time.perf_counter() - t1
    return {"synthetic_shape": shape, "synthetic_elements": float(np.prod(shape, dtype=float)),
            "synthetic_open_s": open_s, "synthetic_rss_mb": (rss1 - rss0) / 1e6,
            "synthetic_read_s": read_s, "synthetic_window": list(win.shape)}


# -- parent side ---------------------------------------------------------------------------------
def _parser(name: str, systems: tuple[str, ...]) -> argparse.ArgumentParser:
    p = common.parser(name, __doc__.split("\n\n")[0], systems)
    p.add_argument("--frames", type=int, default=256, help="frames t = 0..N-1 (default 256)")
    return p


def main_play(argv: list[str]) -> int:
    """``python -m benchmarks play``."""
    return _frames("play", argv)


def main_scrub(argv: list[str]) -> int:
    """``python -m benchmarks scrub``."""
    return _frames("scrub", argv)


def _frames(bench: str, argv: list[str]) -> int:
    args = common.parse(_parser(bench, SYSTEMS), argv)
    default = LAYOUT_SYSTEMS if args.layout and args.systems == ",".join(SYSTEMS) else None
    systems = common.pick_systems(",".join(default) if default else args.systems, SYSTEMS,
                                  args.from_all)
    spec = common.data_spec(args)
    frames = max(1, min(args.frames, spec.shape[0]))
    served = common.serve(spec.path, args)
    systems = common.local_only(systems, served, args.systems == ",".join(SYSTEMS))
    metrics = [*(PLAY_METRICS if bench == "play" else SCRUB_METRICS), *common.ENGINE_METRICS,
               *common.remote_metrics(served)]
    with served as (url, _server):
        describe = ((lambda r: f"p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms, "
                     f"p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.0f} ms") if bench == "play" else
                    (lambda r: f"{r['fps']:.1f} frames/s, p95 {r['p95_ms']:.1f} ms"))
        common.log(f"{bench}: {systems} x {args.repeat} on {url} ({frames} frames)")
        options = served.storage_options
        runs = runner.run_matrix(
            "play_scrub", systems,
            lambda s, r: {"bench": bench, "url": url, "frames": frames, "fps": FPS,
                          "storage_options": options},
            repeat=args.repeat, timeout=args.timeout, store=spec.path,
            drop_caches=not args.no_drop_caches, env_for=lambda s: served.env,
            describe=describe, before=served.before, after=served.after)
    headline = (["p95_ms", "p99_ms", "first_ms", "max_after_first_ms"] if bench == "play"
                else ["fps", "p95_ms"])
    doc = report.document(bench, args, spec, systems, runs, metrics,
                          primary="p95_ms" if bench == "play" else "fps",
                          where=served.describe(), layout=args.layout,
                          frames=frames, fps=FPS if bench == "play" else None,
                          headline=[*headline, "faults_per_frame", "cpu_ms_per_frame",
                                    "decoded_ratio", "peak_rss_mb"])
    doc["agreement"] = _agreement(runs)
    doc["targets"] = _targets(bench, doc, served.remote, args.layout)
    title = (f"{bench} ({served.describe()}"
             + (f"; layout {args.layout}" if args.layout else "")
             + f"; {frames} frames"
             + f"{' at 30 fps' if bench == 'play' else ' as fast as possible'}; "
             f"median of {args.repeat} runs, each system in its own cold process)")
    report.report(doc, metrics, title, args.json_only)
    return report.exit_status(doc, args.check)


def _agreement(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Do all systems return the same frames? (sampled sums, rtol 1e-6, vs the first one)"""
    import numpy as np

    ref_name, ref = None, None
    out: dict[str, Any] = {}
    for system, rs in runs.items():
        for r in rs:
            if not r.get("ok"):
                continue
            checks = np.asarray(r["trace"]["checks"])
            if ref is None:
                ref_name, ref = system, checks
            out[system] = bool(len(checks) == len(ref) and np.allclose(checks, ref, rtol=1e-6))
            if not out[system]:
                break
    return {"reference": ref_name, "same_frames": out}


def _targets(bench: str, doc: dict[str, Any], remote: bool, layout: str | None = None
             ) -> list[dict[str, Any]]:
    """Issue 30's figures: play p95 / p99 / first / worst after it; scrub >= 1.0x naive and
    TensorStore; page faults per frame within 2x naive's (remote: issue 9's play targets)."""
    s = doc["summary"]
    med = lambda sys_, k: report.median_of(s, sys_, k)  # noqa: E731
    adv = lambda peer, k: doc["advantage"].get(peer, {}).get(k)  # noqa: E731
    if bench == "play" and remote:
        return [report.target("tsexplore play p99 (remote)", med("tsexplore", "p99_ms"),
                              "<=", 33.0, "ms"),
                report.target("tsexplore frames late after the first second",
                              med("tsexplore", "late_after_1s"), "<=", 0.0, "")]
    out = []
    if bench == "play":
        out += [report.target("tsexplore play p95", med("tsexplore", "p95_ms"), "<=", 5.0, "ms"),
                report.target("tsexplore play p99", med("tsexplore", "p99_ms"), "<=", 16.7, "ms"),
                report.target("tsexplore play first frame", med("tsexplore", "first_ms"), "<=",
                              200.0, "ms"),
                report.target("tsexplore play worst frame after the first",
                              med("tsexplore", "max_after_first_ms"), "<=", 50.0, "ms")]
    elif layout:
        out.append(report.target(f"tsexplore scrub vs TensorStore ({layout}{_spread(s, 'tensorstore')})",
                                 adv("tensorstore", "fps"), ">=", 1.0, "x"))
    else:
        out += [report.target(f"tsexplore scrub vs naive (aim 1.25x{_spread(s, 'naive')})",
                              adv("naive", "fps"), ">=", 1.0, "x"),
                report.target(f"tsexplore scrub vs TensorStore (aim 1.5x{_spread(s, 'tensorstore')})",
                              adv("tensorstore", "fps"), ">=", 1.0, "x")]
    faults, naive_faults = med("tsexplore", "faults_per_frame"), med("naive", "faults_per_frame")
    if faults is not None and naive_faults is not None and not remote:
        out.append(report.target(f"tsexplore {bench} page faults/frame <= 2x naive's "
                                 f"({naive_faults:.0f})", faults, "<=", 2 * naive_faults, ""))
    return out


def _spread(summary: dict[str, Any], peer: str) -> str:
    """``; runs max/min: tsexplore 1.04x, naive 1.09x``: how far the frames/s of each
    system's runs lie apart (what a ratio of their medians near 1.0 is to be read against);
    empty with fewer than two runs of each."""
    parts = []
    for name in ("tsexplore", peer):
        values = [v for v in (summary.get(name, {}).get("fps") or {}).get("values", []) if v]
        if len(values) < 2:
            return ""
        parts.append(f"{name} {max(values) / min(values):.2f}x")
    return "; runs max/min: " + ", ".join(parts)


def main_memory(argv: list[str]) -> int:
    """``python -m benchmarks memory``."""
    p = common.parser("memory", "cache high water under 8 reader threads; 10^15-element open",
                      MEMORY_SYSTEMS)
    p.add_argument("--budget", type=common.parse_bytes, default=None,
                   help="cache budget (default 256MB; 4MB with --small)")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--reads", type=int, default=None,
                   help="random frames per thread (default 16; 32 with --small)")
    args = common.parse(p, argv)
    systems = common.pick_systems(args.systems, MEMORY_SYSTEMS, args.from_all)
    spec = common.data_spec(args)
    budget = args.budget or (4_000_000 if args.small else 256_000_000)
    reads = args.reads or (32 if args.small else 16)
    served = common.serve(spec.path, args)
    metrics = [*MEMORY_METRICS, *common.ENGINE_METRICS, *common.remote_metrics(served)]
    with served as (url, _server):
        params = {"bench": "memory", "url": url, "budget": budget, "nt": spec.shape[0],
                  "threads": args.threads, "reads_per_thread": reads, "timeout": args.timeout,
                  "synthetic_shape": [10**5, 10**5, 10**5]}
        common.log(f"memory: {systems} x {args.repeat} on {url}, budget {budget / 1e6:.0f} MB, "
                   f"{args.threads} threads x {reads} frames")
        runs = runner.run_matrix(
            "play_scrub", systems, lambda s, r: params, repeat=args.repeat,
            timeout=args.timeout, store=spec.path, drop_caches=not args.no_drop_caches,
            before=served.before, after=served.after,
            describe=lambda r: (f"{r['reads_per_s']:.1f} frames/s, "
                                f"peak RSS {r['peak_rss_mb']:.0f} MB"))
    doc = report.document("memory", args, spec, systems, runs, metrics,
                          primary="reads_per_s", budget=budget)
    hw = [float(r["high_water_mb"]) for r in runs.get("tsexplore", [])
          if r.get("ok") and r.get("high_water_mb") is not None]
    med = lambda k: report.median_of(doc["summary"], "tsexplore", k)  # noqa: E731
    doc["targets"] = [
        report.target("tsexplore cache high water (worst run) <= budget",
                      max(hw) if hw else None, "<=", budget / 1e6, "MB"),
        report.target("open a 10^15-element tse.synthetic", med("synthetic_open_s"), "<=", 1.0,
                      "s"),
        report.target("RSS growth opening it", med("synthetic_rss_mb"), "<=", 50.0, "MB"),
    ]
    title = (f"memory ({args.threads} threads x {reads} random frames, cache budget "
             f"{budget / 1e6:.0f} MB; median of {args.repeat} runs)")
    report.report(doc, metrics, title, args.json_only)
    return report.exit_status(doc, args.check)
