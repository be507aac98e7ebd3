"""Cold random access (issue 13): ``jump`` and ``profile``.

- ``jump``: 200 random frames of the cube (``--frames``; ``--seed``) in random order, each
  system in a fresh process with a cold page cache and an empty cache: per-frame latency
  p50 / p95 / max. Target: tsexplore p95 <= 10 ms locally, and either >= 70 % of its
  prefetch guesses used or (nearly) no guesses at all.
- ``profile``: one pixel's full time series (all ``time`` values; a different pixel in each
  repeat), cold: seconds for the profile.

Systems: tsexplore, TensorStore (zarr3 driver, 1 GB cache pool), zarr, zarr with the zarrs
codec pipeline (``zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})``) and
xarray (``xr.open_zarr(..., chunks=None)``). Every system's values are checked against the
first system's (sampled sums, rtol 1e-6).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

from . import common, report, runner
from .common import Metric
from .play_scrub import TS_CACHE_BYTES, open_tensorstore

SYSTEMS = ("tsexplore", "tensorstore", "zarr", "zarr-zarrs", "xarray")
#: jump also runs the floor: two threads read and decode the frame's chunk-row, no cache
JUMP_SYSTEMS = ("tsexplore", "naive", *SYSTEMS[1:])
#: ``jump --revisit``: frames drawn with replacement from every frame, with this seed
REVISIT_SEED = 19
IMPORTS = {"tsexplore": ("tsexplore", "zarr", "dask.array"), "zarr": ("zarr",),
           "naive": ("numcodecs",),
           "zarr-zarrs": ("zarr", "zarrs"), "xarray": ("xarray", "zarr", "dask.array"),
           "tensorstore": ("tensorstore",)}

JUMP_METRICS = [
    Metric("p50_ms", "p50 ms", "lower"),
    Metric("p95_ms", "p95 ms", "lower"),
    Metric("max_ms", "max ms", "lower", "{:.1f}"),
    Metric("open_s", "open s", "lower", "{:.3f}"),
]
PROFILE_METRICS = [
    Metric("profile_ms", "profile ms", "lower", "{:.1f}"),
    Metric("open_s", "open s", "lower", "{:.3f}"),
]


# -- child side ----------------------------------------------------------------------------------
def open_getter(system: str, url: str, storage_options: dict | None = None) -> Callable[[tuple], Any]:
    """``get(key) -> np.ndarray`` for a basic (int / slice) key on the cube's variable."""
    var = common.VARIABLE
    if system == "tsexplore":
        import tsexplore as tse

        da = tse.open_dataset(url, storage_options=storage_options)[var]
        return lambda key: da[key].values
    if system == "naive":  # random frames: the frame's own chunk-row only, nothing ahead
        from .naive import open_naive

        cube = open_naive(url, var)
        return lambda key: cube.frame(key[0], ahead=0)
    if system in ("zarr", "zarr-zarrs"):
        import zarr

        if system == "zarr-zarrs":
            zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
        arr = zarr.open_array(url, path=var, mode="r", storage_options=storage_options)
        return lambda key: arr[key]
    if system == "xarray":
        import xarray as xr

        xda = xr.open_zarr(url, chunks=None, storage_options=storage_options)[var]
        return lambda key: xda[key].values
    if system == "tensorstore":
        ts = open_tensorstore(url, TS_CACHE_BYTES, storage_options)
        return lambda key: ts[key].read().result()
    raise ValueError(f"unknown system {system!r}; known: {SYSTEMS}")


def run_system(system: str, params: dict[str, Any], sampler: runner.RssSampler) -> dict[str, Any]:
    """One run of ``params["bench"]`` (jump or profile) for ``system``."""
    import importlib

    import numpy as np

    for name in IMPORTS.get(system, ()):
        importlib.import_module(name)
    sampler.mark_baseline()
    t0 = time.perf_counter()
    get = open_getter(system, params["url"], params.get("storage_options"))
    open_s = time.perf_counter() - t0
    out: dict[str, Any] = {"open_s": open_s}
    if params["bench"] == "profile":
        y, x = params["pixel"]
        t1 = time.perf_counter()
        values = np.asarray(get((slice(None), y, x)))
        out["profile_ms"] = (time.perf_counter() - t1) * 1e3
        out["values"] = int(values.size)
        checks = [float(values.astype(np.float64).sum())]
    else:
        lat, checks = [], []
        for t in params["order"]:
            t1 = time.perf_counter()
            frame = np.asarray(get((t,)))
            lat.append((time.perf_counter() - t1) * 1e3)
            checks.append(float(frame[::61, ::67].sum(dtype=np.float64)))
        out.update({"frames": len(lat), "p50_ms": runner.percentile(lat, 50),
                    "p95_ms": runner.percentile(lat, 95), "max_ms": max(lat),
                    "mean_ms": sum(lat) / len(lat), "trace": {"latency_ms": [round(v, 3) for v in lat]}})
    out.setdefault("trace", {})["checks"] = checks
    if system == "tsexplore":
        out.update(common.engine_counters())
    return out


# -- parent side ---------------------------------------------------------------------------------
def _parser(name: str, systems: tuple[str, ...]) -> argparse.ArgumentParser:
    p = common.parser(name, __doc__.split("\n\n")[0], systems)
    p.add_argument("--frames", type=int, default=200, help="random frames per run (jump; default 200)")
    p.add_argument("--seed", type=int, default=None,
                   help="random seed of the frames and pixels (default 13; 19 with --revisit)")
    if name == "jump":
        p.add_argument("--revisit", action="store_true",
                       help="draw the frames with replacement from all frames of the cube "
                            "(frames and chunks come back; seed 19)")
    return p


def main_jump(argv: list[str]) -> int:
    """``python -m benchmarks jump``."""
    return _main("jump", argv)


def main_profile(argv: list[str]) -> int:
    """``python -m benchmarks profile``."""
    return _main("profile", argv)


def _main(bench: str, argv: list[str]) -> int:
    known = JUMP_SYSTEMS if bench == "jump" else SYSTEMS
    args = common.parse(_parser(bench, known), argv)
    revisit = bool(getattr(args, "revisit", False))
    systems = common.pick_systems(args.systems, known, args.from_all)
    spec = common.data_spec(args)
    seed = args.seed if args.seed is not None else (REVISIT_SEED if revisit else 13)
    rng = random.Random(seed)
    nt, ny, nx = spec.shape
    if revisit:
        order = rng.choices(range(nt), k=args.frames)
    else:
        order = rng.sample(range(nt), min(args.frames, nt))
    pixels = [(rng.randrange(ny), rng.randrange(nx)) for _ in range(args.repeat)]
    served = common.serve(spec.path, args)
    systems = common.local_only(systems, served, args.systems == ",".join(known))
    metrics = [*(JUMP_METRICS if bench == "jump" else PROFILE_METRICS), *common.ENGINE_METRICS,
               *common.remote_metrics(served)]
    with served as (url, _server):
        def params(system: str, r: int) -> dict[str, Any]:
            return {"bench": bench, "url": url, "order": order, "pixel": pixels[r],
                    "storage_options": served.storage_options}

        describe = ((lambda r: f"p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms") if bench == "jump"
                    else (lambda r: f"{r['profile_ms']:.1f} ms"))
        common.log(f"{bench}: {systems} x {args.repeat} on {url}"
                   + (f" ({len(order)} random frames)" if bench == "jump" else f" (pixels {pixels})"))
        runs = runner.run_matrix("jump", systems, params, repeat=args.repeat, timeout=args.timeout,
                                 store=spec.path, drop_caches=not args.no_drop_caches,
                                 describe=describe, before=served.before, after=served.after,
                                 env_for=lambda s: served.env)
    primary = "p95_ms" if bench == "jump" else "profile_ms"
    doc = report.document(bench, args, spec, systems, runs, metrics, primary=primary,
                          where="remote" if args.remote else "local", frames=len(order),
                          revisit=revisit, seed=seed)
    doc["agreement"] = _agreement(runs)
    doc["targets"] = _targets(bench, doc, args.remote, revisit)
    what = (f"{len(order)} random frames" + (" drawn with replacement" if revisit else "")
            if bench == "jump" else "one pixel's time series")
    title = (f"{bench} ({'remote' if args.remote else 'local'}; {what}, cold page cache and "
             f"cache; median of {args.repeat} runs, each system in its own process)")
    report.report(doc, metrics, title, args.json_only)
    return report.exit_status(doc, args.check)


def _agreement(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Do all systems read the same values? (per repeat: sampled sums, rtol 1e-6)"""
    import numpy as np

    out: dict[str, Any] = {}
    reference: dict[int, Any] = {}
    for system, rs in runs.items():
        ok = True
        for r in rs:
            if not r.get("ok"):
                continue
            checks = np.asarray(r["trace"]["checks"])
            ref = reference.setdefault(r["repeat"], checks)
            ok = ok and len(checks) == len(ref) and bool(np.allclose(checks, ref, rtol=1e-6))
        out[system] = ok
    return {"reference": next(iter(runs), None), "same_values": out}


def _targets(bench: str, doc: dict[str, Any], remote: bool, revisit: bool = False
             ) -> list[dict[str, Any]]:
    med = lambda k: report.median_of(doc["summary"], "tsexplore", k)  # noqa: E731
    out = [report.flag("every system reads the same values",
                       all(doc["agreement"]["same_values"].values()) or None)]
    if bench == "jump" and not remote and revisit:
        out.append(report.target("tsexplore revisit jump p95", med("p95_ms"), "<=", 25.0, "ms"))
        out.append(report.target("tsexplore decoded/useful", med("decoded_ratio"), "<=", 1.5, "x"))
    elif bench == "jump" and not remote:
        out.append(report.target("tsexplore cold random jump p95", med("p95_ms"), "<=", 10.0, "ms"))
    used, issued = med("prefetch_used_pct"), med("prefetch_issued")
    if issued is not None and issued > 16:  # (a steady run now and then may probe)
        out.append(report.target("tsexplore prefetch guesses used", used, ">=", 70.0, "%"))
    elif issued is not None:
        out.append(report.flag(f"tsexplore prefetch stays off ({issued:.0f} guesses)", True))
    return out
