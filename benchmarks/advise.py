"""``python -m benchmarks advise``: chunk choice by measurement, then the layout itself (issue 14).

Each step runs in its own child process (``python -m benchmarks._run advise <step>``):

- ``advise``: ``tse.advise(cube, --pattern, budget_bytes=--budget)``; its wall time and winner;
- ``rechunk``: ``tse.rechunk(cube, copy, <the winner>, max_mem=--max-mem)`` of the whole cube,
  then ``fdatasync`` of every file written (as ``dd conv=fdatasync``); wall time with and
  without the flush, bytes written, and the child's peak RSS (``VmHWM``: ``ru_maxrss`` of a
  child also counts the parent it was forked from);
- ``profile-current`` / ``profile-rechunked``: ``--pixels`` random pixels' time series
  ``temp[:, y, x]``, each read cold (the store's files dropped from the page cache, a fresh
  open: an empty engine cache), median ms per series; ``--repeat`` rounds, interleaved.

The disk's write speed is measured first with ``dd`` (2 GiB, ``conv=fdatasync``; 256 MiB with
``--small``), so the rechunk can be compared with it. The rechunked copy goes beside the cube
(``<cube>.<pattern>.zarr``) and is deleted at the end unless ``--keep``.

Targets: advise <= 60 s; the rechunked layout reads a series >= 5x faster than the current one;
rechunk writes at >= 50 % of the disk's write speed.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from . import common, report, runner
from .pagecache import cold_cache

SYSTEMS = ("advise", "rechunk", "profile-current", "profile-rechunked")


# -- child side ----------------------------------------------------------------------------------
def _vmhwm_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM"):
                return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return None


def _cold_series_ms(path: str, pixels: list[list[int]]) -> list[float]:
    import tsexplore as tse
    from tsexplore.testing.pagecache import evict, store_files

    files = [f for f in store_files(Path(path)) if f.name != "zarr.json"]
    out = []
    for y, x in pixels:
        evict(files, sync=False)
        da = tse.open_dataset(path, prefetch="off")[common.VARIABLE]
        t0 = time.perf_counter()
        da[:, y, x].load()
        out.append(1e3 * (time.perf_counter() - t0))
    return out


def run_system(system: str, params: dict[str, Any], sampler: runner.RssSampler) -> dict[str, Any]:
    import dask.array  # noqa: F401 - imported before the clock starts (rechunk needs them)
    import rechunker.algorithm  # noqa: F401
    import xarray.backends.zarr  # noqa: F401

    import tsexplore as tse
    from tsexplore.testing.pagecache import evict

    sampler.mark_baseline()
    t0 = time.perf_counter()
    if system == "advise":
        advice = tse.advise(params["path"], params["pattern"], budget_bytes=params["budget"],
                            progress=False)
        win = advice.winner
        return {"elapsed_s": time.perf_counter() - t0, "winner": win.label,
                "chunks": list(win.chunks), "codec": str(win.codec),
                "shards": list(win.shards) if win.shards else None, "sure": advice.sure,
                "margin": advice.margin, "speedup_in_advise": advice.speedup,
                "table": advice.table.to_dict(orient="records"), "notes": list(advice.notes)}
    if system == "rechunk":
        dims = ("time", "y", "x")
        shards = dict(zip(dims, params["shards"])) if params["shards"] else None
        out = tse.rechunk(params["path"], params["target"], chunks=dict(zip(dims, params["chunks"])),
                          codec=params["codec"], shards=shards, max_mem=params["max_mem"],
                          overwrite=True, progress=False)
        unflushed = time.perf_counter() - t0
        files = [f for f in Path(out).rglob("*") if f.is_file()]
        evict(files, sync=True)  # on disk, as dd's conv=fdatasync is (and out of the page cache)
        elapsed = time.perf_counter() - t0
        written = sum(f.stat().st_size for f in files)
        return {"elapsed_s": elapsed, "unflushed_s": unflushed, "written_mb": written / 1e6,
                "write_mb_s": written / elapsed / 1e6, "decoded_gb_s": params["nbytes"] / elapsed / 1e9,
                "vmhwm_mb": _vmhwm_mb()}
    times = _cold_series_ms(params["store"], params["pixels"])
    return {"elapsed_s": time.perf_counter() - t0, "series_ms": statistics.median(times),
            "series_ms_p95": sorted(times)[int(0.95 * (len(times) - 1))]}


# -- parent side ---------------------------------------------------------------------------------
def disk_write_mb_s(folder: Path, nbytes: int) -> float | None:
    """``dd`` of ``nbytes`` of zeros with ``conv=fdatasync`` in ``folder``; MB/s (file removed)."""
    probe = folder / ".dd-write-speed.tmp"
    try:
        done = subprocess.run(["dd", "if=/dev/zero", f"of={probe}", "bs=16M",
                               f"count={max(1, nbytes // 2**24)}", "conv=fdatasync"],
                              capture_output=True, text=True, timeout=600, check=False)
    finally:
        probe.unlink(missing_ok=True)
    m = re.search(r"copied, ([\d.]+) s", done.stderr)
    return max(1, nbytes // 2**24) * 2**24 / float(m.group(1)) / 1e6 if m else None


def _child(system: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    res = runner.run_child("advise", system, params, timeout)
    if not res.get("ok"):
        raise SystemExit(f"{system} failed: {res.get('error')}\n{res.get('stderr_tail', '')}")
    common.log(f"  {system}: {res['elapsed_s']:.1f} s")
    return res


def main(argv: list[str]) -> int:
    p = common.parser("advise", __doc__.split("\n\n")[0], SYSTEMS)
    p.add_argument("--pattern", default="profile", help="the access pattern to advise on")
    p.add_argument("--budget", type=common.parse_bytes, default=256 * 2**20, help="advise's budget_bytes")
    p.add_argument("--max-mem", default="1GB", help="rechunk's max_mem")
    p.add_argument("--pixels", type=int, default=24, help="series timed per profile run")
    p.add_argument("--keep", action="store_true", help="keep the rechunked copy")
    args = common.parse(p, argv)
    spec = common.data_spec(args)
    target = spec.path.with_name(f"{spec.path.stem}.{args.pattern}.zarr")
    common.log(f"disk write speed (dd, conv=fdatasync) in {spec.path.parent} ...")
    disk = disk_write_mb_s(spec.path.parent, 2**28 if args.small else 2**31)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    try:
        cold_cache(spec.path, not args.no_drop_caches)
        adv = _child("advise", {"path": str(spec.path), "pattern": args.pattern,
                                "budget": args.budget}, args.timeout)
        runs["advise"].append(adv)
        common.log(f"  winner: {adv['winner']}")
        cold_cache(spec.path, not args.no_drop_caches)
        runs["rechunk"].append(_child("rechunk", {
            "path": str(spec.path), "target": str(target), "chunks": adv["chunks"],
            "codec": adv["codec"], "shards": adv["shards"], "max_mem": args.max_mem,
            "nbytes": spec.nbytes}, args.timeout))
        import numpy as np

        rng = np.random.default_rng(0)
        pixels = [[int(rng.integers(spec.shape[1])), int(rng.integers(spec.shape[2]))]
                  for _ in range(args.pixels)]
        for _ in range(args.repeat):
            for name, store in (("profile-current", spec.path), ("profile-rechunked", target)):
                runs[name].append(_child(name, {"store": str(store), "pixels": pixels}, args.timeout))
    finally:
        if not args.keep:
            shutil.rmtree(target, ignore_errors=True)
    doc = _document(args, spec, runs, disk)
    out = report.RESULTS_DIR / f"advise-{time.strftime('%Y%m%d-%H%M%S')}.json"
    report.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=str))
    slim = {k: v for k, v in doc.items() if k != "runs"}
    print(json.dumps(slim, default=str) if args.json_only else json.dumps(slim, indent=1, default=str))
    if not args.json_only:
        for t in doc["targets"]:
            mark = {True: "PASS", False: "MISS", None: "n/a "}[t["passed"]]
            val = "-" if t["value"] is None else f"{t['value']:.3g}"
            print(f"[{mark}] {t['name']}: {val} {t['op']} {t['goal']:g} {t['unit']}".rstrip())
    return 2 if args.check and any(t["passed"] is False for t in doc["targets"]) else 0


def _document(args: Any, spec: common.DataSpec, runs: dict[str, list[dict[str, Any]]],
              disk: float | None) -> dict[str, Any]:
    adv, rc = runs["advise"][0], runs["rechunk"][0]
    before = statistics.median(r["series_ms"] for r in runs["profile-current"])
    after = statistics.median(r["series_ms"] for r in runs["profile-rechunked"])
    ratio = rc["write_mb_s"] / disk if disk else None
    return {
        "benchmark": "advise", "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "data": {"path": str(spec.path), "shape": list(spec.shape), "chunks": list(spec.chunks)},
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "environment": report.environment(),
        "advise": {k: adv[k] for k in ("elapsed_s", "winner", "sure", "margin", "speedup_in_advise", "notes")},
        "rechunk": {k: rc.get(k) for k in ("elapsed_s", "unflushed_s", "written_mb", "write_mb_s",
                                           "decoded_gb_s", "vmhwm_mb")},
        "disk_write_mb_s": disk,
        "profile_ms": {"current": before, "rechunked": after, "speedup": before / after if after else None},
        "targets": [
            report.target(f"advise {args.pattern!r} seconds", adv["elapsed_s"], "<=", 60, "s"),
            report.target("profile speedup after rechunk", before / after if after else None, ">=", 5, "x"),
            report.target("rechunk write speed / disk write speed", ratio, ">=", 0.5),
        ],
        "runs": runs,
    }
