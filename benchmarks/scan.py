"""Scan benchmark (issue 4): the mean over ``time`` of the whole cube, cold page cache.

Systems:

- ``tsexplore``: ``tse.reduce(ds["temp"], "mean", dim="time", backend=...)`` (``--backend
  numpy,cupy`` adds ``tsexplore backend=cupy``: both backends in one run)
- ``tsexplore-dask``: ``tse.open_dataset(path, chunks={})["temp"].mean("time").compute()``
- ``xarray-dask``: ``xr.open_zarr(path).temp.mean("time").compute()``
- ``zarr``: a loop over time-chunk slabs, summed in float64 (the reference result)
- ``tensorstore``: the same loop through TensorStore (zarr3 driver, no cache)
- ``naive``: the floor -- two threads read and decode chunk files (numcodecs ``Blosc``, into
  reused buffers) two chunk-rows ahead; each row summed in float64 (:mod:`.naive`)

Reports GB/s of decoded data (the cube's ``nbytes`` over the wall time, opening included),
tsexplore's advantage over each peer, peak RSS, and whether every result matches the zarr
loop (rtol 1e-6). Targets (issue 30): tsexplore >= 1.0x naive, and ``tse.reduce`` >= the
dask path over the engine. ``--quarter-budget`` sets tsexplore's cache budget to 1/4 of the data and
checks that its peak RSS stays <= budget + 300 MB.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from . import common, report, runner
from .common import Metric

SYSTEMS = ("tsexplore", "naive", "tsexplore-dask", "xarray-dask", "zarr", "tensorstore")
TSE_SYSTEMS = ("tsexplore", "tsexplore-dask")
REFERENCE_SYSTEM = "zarr"
RTOL = 1e-6
RSS_MARGIN_MB = 300.0

METRICS = [
    Metric("gbps", "GB/s", "higher"),
    Metric("elapsed_s", "seconds", "lower"),
    Metric("cpu_s", "CPU s", "lower", "{:.1f}"),
]
IMPORTS = {"tsexplore": ("tsexplore", "zarr", "dask.array"),
           "tsexplore-dask": ("tsexplore", "zarr", "dask.array"),
           "xarray-dask": ("xarray", "zarr", "dask.array"), "zarr": ("zarr",),
           "tensorstore": ("tensorstore",), "naive": ("numcodecs",)}


# -- child side ----------------------------------------------------------------------------------
def _tsexplore(path: str, params: dict[str, Any]) -> Any:
    import tsexplore as tse

    ds = tse.open_dataset(path, storage_options=params.get("storage_options"))
    kwargs = {"backend": params["backend"]} if params.get("backend") else {}
    res = tse.reduce(ds[common.VARIABLE], "mean", dim="time", **kwargs)
    return getattr(res, "values", res)


def _tsexplore_dask(path: str, params: dict[str, Any]) -> Any:
    import tsexplore as tse

    ds = tse.open_dataset(path, chunks={}, storage_options=params.get("storage_options"))
    return ds[common.VARIABLE].mean("time").compute().values


def _xarray_dask(path: str, params: dict[str, Any]) -> Any:
    import xarray as xr

    options = params.get("storage_options")
    return xr.open_zarr(path, storage_options=options)[common.VARIABLE].mean("time").compute().values


def _slab_loop(read: Any, shape: tuple[int, ...], step: int) -> Any:
    import numpy as np

    acc = np.zeros(shape[1:], dtype=np.float64)
    for t0 in range(0, shape[0], step):
        acc += np.asarray(read(t0, min(shape[0], t0 + step))).sum(axis=0, dtype=np.float64)
    return acc / shape[0]


def _zarr(path: str, params: dict[str, Any]) -> Any:
    import zarr

    arr = zarr.open_array(path, path=common.VARIABLE, mode="r",
                          storage_options=params.get("storage_options"))
    return _slab_loop(lambda a, b: arr[a:b], arr.shape, arr.chunks[0])


def _tensorstore(path: str, params: dict[str, Any]) -> Any:
    from .play_scrub import open_tensorstore

    arr = open_tensorstore(path, 0, params.get("storage_options"))
    step = arr.chunk_layout.read_chunk.shape[0]
    return _slab_loop(lambda a, b: arr[a:b].read().result(), tuple(arr.shape), step)


def _naive(path: str, params: dict[str, Any]) -> Any:
    from .naive import open_naive

    cube = open_naive(path, common.VARIABLE)
    try:
        return cube.mean_time()
    finally:
        cube.close()


SCANS = {"tsexplore": _tsexplore, "naive": _naive, "tsexplore-dask": _tsexplore_dask,
         "xarray-dask": _xarray_dask, "zarr": _zarr, "tensorstore": _tensorstore}


def run_system(system: str, params: dict[str, Any], sampler: runner.RssSampler) -> dict[str, Any]:
    """Scan the cube once with ``system``; the result goes to ``params["out"]`` (.npy)."""
    import importlib

    import numpy as np

    if system not in SCANS:
        raise ValueError(f"unknown system {system!r}; known: {SYSTEMS}")
    t0 = time.perf_counter()
    for name in IMPORTS[system]:
        importlib.import_module(name)
    import_s = time.perf_counter() - t0
    sampler.mark_baseline()
    usage = runner.Usage()
    t1 = time.perf_counter()
    result = np.asarray(SCANS[system](params["path"], params))
    elapsed = time.perf_counter() - t1
    used = usage.per(1, "scan")
    np.save(params["out"], result)
    out: dict[str, Any] = {"import_s": import_s, "elapsed_s": elapsed, "cpu_s": used["cpu_s"],
                           "faults": used["faults_per_scan"],
                           "gbps": params["nbytes"] / elapsed / 1e9,
                           "result_shape": list(result.shape), "result_dtype": str(result.dtype)}
    if system in TSE_SYSTEMS:
        out.update(common.engine_counters())
    return out


# -- parent side ---------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    """``python -m benchmarks scan``."""
    p = common.parser("scan", "mean over time of the cube, cold page cache", SYSTEMS)
    p.add_argument("--backend", default=None,
                   help='passed to tse.reduce (e.g. "cupy"); several, comma-separated '
                        '("numpy,cupy"): the first is tsexplore\'s, each other one runs as '
                        '"tsexplore backend=NAME" in the same run')
    p.add_argument("--budget", type=common.parse_bytes, default=None,
                   help="tsexplore cache budget (e.g. 512MB; default: the engine's own)")
    p.add_argument("--quarter-budget", action="store_true",
                   help="budget = 1/4 of the data; check peak RSS <= budget + 300 MB")
    args = common.parse(p, argv)
    systems = common.pick_systems(args.systems, SYSTEMS, args.from_all)
    backends = [b.strip() for b in (args.backend or "").split(",") if b.strip()] or [None]
    if "tsexplore" in systems:
        at = systems.index("tsexplore") + 1
        systems[at:at] = [common.join_label("tsexplore", None, f"backend={b}") for b in backends[1:]]
    spec = common.data_spec(args)
    budget = spec.nbytes // 4 if args.quarter_budget else args.budget
    tmp = Path(tempfile.mkdtemp(prefix="tsexplore-bench-scan-"))
    served = common.serve(spec.path, args)
    systems = common.local_only(systems, served, args.systems == ",".join(SYSTEMS))
    metrics = [*METRICS, *common.ENGINE_METRICS, *common.remote_metrics(served, throughput=True)]
    try:
        with served as (url, _server):
            common.log(f"scan: {systems} x {args.repeat} on {url} "
                       f"({spec.nbytes / 1e9:.2f} GB decoded)"
                       + (f", tsexplore budget {budget / 1e6:.0f} MB" if budget else ""))
            runs = runner.run_matrix(
                "scan", systems,
                lambda s, r: {"path": url, "nbytes": spec.nbytes,
                              "backend": _backend(s, backends[0]),
                              "out": str(tmp / f"{s}-{r}.npy"),
                              "storage_options": served.storage_options},
                repeat=args.repeat, timeout=args.timeout, store=spec.path,
                drop_caches=not args.no_drop_caches,
                env_for=lambda s: {**served.env, **({"TSEXPLORE_CACHE_BYTES": str(budget)}
                                                    if budget and common.split_label(s)[0] in TSE_SYSTEMS
                                                    else {})},
                before=served.before, after=served.after,
                describe=lambda r: f"{r['gbps']:.3f} GB/s, peak RSS {r['peak_rss_mb']:.0f} MB")
        correctness = _check_results(runs, tmp, spec.path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    doc = report.document("scan", args, spec, systems, runs, metrics, primary="gbps",
                          budget=budget, correctness=correctness,
                          headline=["gbps", "cpu_s", "decoded_ratio", "peak_rss_mb"])
    doc["targets"] = _targets(doc, budget if args.quarter_budget else None)
    if served.remote:
        doc["targets"] += common.link_targets(doc, args, "gbps")
    title = (f"scan (mean over time of {spec.nbytes / 1e9:.2f} GB, {served.describe()}, cold page cache; "
             f"median of {args.repeat} runs"
             + (f"; tsexplore cache budget {budget / 1e6:.0f} MB" if budget else "") + ")")
    report.report(doc, metrics, title, args.json_only)
    status = report.exit_status(doc, args.check)
    if args.check and any(v is False for v in correctness["matches"].values()):
        status = max(status, 2)
    return status


def _backend(label: str, default: str | None) -> str | None:
    """The backend a run of ``label`` passes to tse.reduce (its ``backend=`` tag, if any)."""
    tag = common.split_label(label)[2]
    return tag.removeprefix("backend=") if tag.startswith("backend=") else default


def _check_results(runs: dict[str, list[dict[str, Any]]], tmp: Path, store: Path
                   ) -> dict[str, Any]:
    """Compare every run's result with the zarr loop's (computed here if zarr did not run)."""
    import numpy as np

    ref = None
    for r in runs.get(REFERENCE_SYSTEM, []):
        f = tmp / f"{REFERENCE_SYSTEM}-{r['repeat']}.npy"
        if r.get("ok") and f.exists():
            ref = np.load(f)
            break
    if ref is None:
        import zarr

        arr = zarr.open_array(str(store), path=common.VARIABLE, mode="r")
        ref = _slab_loop(lambda a, b: arr[a:b], arr.shape, arr.chunks[0])
    matches: dict[str, bool] = {}
    max_rel: dict[str, float] = {}
    for system, rs in runs.items():
        for r in rs:
            f = tmp / f"{system}-{r['repeat']}.npy"
            if not r.get("ok") or not f.exists():
                continue
            got = np.load(f)
            if got.shape != ref.shape:
                r["matches_reference"] = False
                matches[system] = False
                continue
            rel = float(np.nanmax(np.abs(got.astype(np.float64) - ref) / np.abs(ref)))
            ok = bool(np.allclose(got, ref, rtol=RTOL, atol=0, equal_nan=True))
            r["matches_reference"], r["max_rel_error"] = ok, rel
            matches[system] = matches.get(system, True) and ok
            max_rel[system] = max(max_rel.get(system, 0.0), rel)
    return {"reference": f"{REFERENCE_SYSTEM} loop (float64)", "rtol": RTOL,
            "matches": matches, "max_rel_error": max_rel}


def _targets(doc: dict[str, Any], budget: int | None) -> list[dict[str, Any]]:
    out = [report.flag(f"{system} result matches the zarr loop (rtol {RTOL:g})", ok)
           for system, ok in doc["correctness"]["matches"].items()]
    naive = doc["advantage"].get("naive", {}).get("gbps")
    out.append(report.target("tsexplore scan vs naive", naive, ">=", 1.0, "x"))
    dask = doc["advantage"].get("tsexplore-dask", {}).get("gbps")
    out.append(report.target("tse.reduce vs dask over the engine (tsexplore-dask)", dask, ">=",
                             1.0, "x"))
    if budget:
        for system in TSE_SYSTEMS:
            rss = report.median_of(doc["summary"], system, common.RSS.key)
            if rss is not None:
                out.append(report.target(f"{system} peak RSS <= budget + {RSS_MARGIN_MB:.0f} MB",
                                         rss, "<=", budget / 1e6 + RSS_MARGIN_MB, "MB"))
    return out
