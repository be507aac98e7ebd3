"""Cold random access (issue 13): ``jump`` and ``profile``.

- ``jump``: 200 random frames of the cube (``--frames``) in random order, each system in a
  fresh process with a cold page cache and an empty cache, for each of several random orders
  (``--seeds``, default 1,2,3,7,11; ``--revisit``: 7,19,23,1,2): per seed, per-frame latency
  p50 / p95 / max, page faults and CPU per frame, tsexplore's decoded / useful bytes (on blosc
  cubes beside :func:`decoded_floor`: what decoding only each frame's blocks decodes; on zstd
  cubes the p95 beside :func:`read_floor`: reading only what each frame's fronts need). The
  frames split in two: *cold* ones, the first of the order in their chunk-row (every system
  reads their chunks from the disk), and *revisits* (a later frame of a chunk-row seen before:
  a cache's hit, the page cache's for a loop without one): the p95 of the cold frames and the
  p50 of the revisits. With 200 frames of 512 in chunk-rows of 16, 32 frames of 200 are cold:
  the p95 of all frames is a cold frame's.
  Targets (issue 30): tsexplore p95 <= 25 ms for every seed, decoded <= 1.5x useful for every
  seed on blosc cubes, and either >= 70 % of its prefetch guesses used or (nearly) no
  guesses at all.
- ``profile``: one pixel's full time series (all ``time`` values; a different pixel in each
  repeat), cold: seconds for the profile.

Systems: tsexplore, TensorStore (zarr3 driver, 1 GB cache pool), zarr, zarr with the zarrs
codec pipeline (``zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})``) and
xarray (``xr.open_zarr(..., chunks=None)``). Every system's values are checked against the
first system's (sampled sums, rtol 1e-6).
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import common, report, runner
from .common import Metric
from .play_scrub import TS_CACHE_BYTES, open_tensorstore

SYSTEMS = ("tsexplore", "tensorstore", "zarr", "zarr-zarrs", "xarray")
#: jump also runs the floor: two threads read and decode the frame's chunk-row, no cache
JUMP_SYSTEMS = ("tsexplore", "naive", *SYSTEMS[1:])
#: the random orders of ``jump`` (cold: frames drawn without replacement) ...
SEEDS = (1, 2, 3, 7, 11)
#: ... and of ``jump --revisit`` (drawn with replacement from every frame)
REVISIT_SEEDS = (7, 19, 23, 1, 2)
#: the seed of ``profile``'s pixels
PROFILE_SEED = 13
IMPORTS = {"tsexplore": ("tsexplore", "zarr", "dask.array"), "zarr": ("zarr",),
           "naive": ("numcodecs",),
           "zarr-zarrs": ("zarr", "zarrs"), "xarray": ("xarray", "zarr", "dask.array"),
           "tensorstore": ("tensorstore",)}

JUMP_METRICS = [
    Metric("p50_ms", "p50 ms", "lower"),
    Metric("p95_ms", "p95 ms", "lower"),
    Metric("max_ms", "max ms", "lower", "{:.1f}"),
    Metric("cold_p95_ms", "cold p95 ms", "lower"),
    Metric("revisit_p50_ms", "revisit p50 ms", "lower"),
    Metric("faults_per_frame", "faults/frame", "lower", "{:.0f}"),
    Metric("cpu_ms_per_frame", "CPU ms/frame", "lower", "{:.2f}"),
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
        usage = runner.Usage()
        for t in params["order"]:
            t1 = time.perf_counter()
            frame = np.asarray(get((t,)))
            lat.append((time.perf_counter() - t1) * 1e3)
            checks.append(float(frame[::61, ::67].sum(dtype=np.float64)))
        out.update(usage.per(len(lat)))
        cold, again = split_cold(params["order"], lat, params["chunk_t"])
        out.update({"frames": len(lat), "p50_ms": runner.percentile(lat, 50),
                    "p95_ms": runner.percentile(lat, 95), "max_ms": max(lat),
                    "cold_frames": len(cold), "cold_p95_ms": runner.percentile(cold, 95),
                    "revisit_p50_ms": runner.percentile(again, 50),
                    "mean_ms": sum(lat) / len(lat), "trace": {"latency_ms": [round(v, 3) for v in lat]}})
    out.setdefault("trace", {})["checks"] = checks
    if system == "tsexplore":
        out.update(common.engine_counters())
    return out


def split_cold(order: list[int], latency_ms: list[float], chunk_t: int) -> tuple[list[float], list[float]]:
    """The latencies of the cold frames (the first of ``order`` in their chunk-row, ``chunk_t``
    frames long) and of the revisits, in order."""
    seen: set[int] = set()
    cold, again = [], []
    for t, ms in zip(order, latency_ms):
        row = t // chunk_t
        (again if row in seen else cold).append(ms)
        seen.add(row)
    return cold, again


# -- parent side ---------------------------------------------------------------------------------
def _parser(name: str, systems: tuple[str, ...]) -> argparse.ArgumentParser:
    p = common.parser(name, __doc__.split("\n\n")[0], systems)
    p.add_argument("--frames", type=int, default=200, help="random frames per run (jump; default 200)")
    if name == "jump":
        p.add_argument("--seeds", default=None,
                       help="comma-separated seeds of the random orders, each its own cold run "
                            f"(default {','.join(map(str, SEEDS))}; with --revisit "
                            f"{','.join(map(str, REVISIT_SEEDS))})")
        p.add_argument("--seed", type=int, default=None, help="one seed (as --seeds N)")
        p.add_argument("--revisit", action="store_true",
                       help="draw the frames with replacement from all frames of the cube "
                            "(frames and chunks come back)")
    else:
        p.add_argument("--seed", type=int, default=None,
                       help=f"random seed of the pixels (default {PROFILE_SEED})")
    return p


def main_jump(argv: list[str]) -> int:
    """``python -m benchmarks jump``."""
    return _main("jump", argv)


def main_profile(argv: list[str]) -> int:
    """``python -m benchmarks profile``."""
    return _main("profile", argv)


def seeds_of(args: argparse.Namespace, revisit: bool) -> list[int]:
    if args.seed is not None:
        return [args.seed]
    if getattr(args, "seeds", None):
        try:
            return [int(s) for s in args.seeds.split(",") if s.strip()]
        except ValueError as exc:
            raise SystemExit(f"--seeds {args.seeds!r}: comma-separated integers, e.g. 1,2,3") from exc
    return list(REVISIT_SEEDS if revisit else SEEDS)


def _main(bench: str, argv: list[str]) -> int:
    known = JUMP_SYSTEMS if bench == "jump" else SYSTEMS
    args = common.parse(_parser(bench, known), argv)
    revisit = bool(getattr(args, "revisit", False))
    systems = common.pick_systems(args.systems, known, args.from_all)
    spec = common.data_spec(args)
    nt, ny, nx = spec.shape
    served = common.serve(spec.path, args)
    systems = common.local_only(systems, served, args.systems == ",".join(known))
    # one label per system and seed ("naive seed=3"), each seed its own random order
    orders: dict[str, list[int]] = {}
    labels: dict[str, str] = {}
    pixels: list[tuple[int, int]] = []
    if bench == "jump":
        seeds = seeds_of(args, revisit)
        for seed in seeds:
            rng = random.Random(seed)
            orders[f"seed={seed}"] = (rng.choices(range(nt), k=args.frames) if revisit
                                      else rng.sample(range(nt), min(args.frames, nt)))
        for tag in orders:
            for system in systems:
                labels[common.join_label(system, None, tag)] = tag
    else:
        seeds = [args.seed if args.seed is not None else PROFILE_SEED]
        rng = random.Random(seeds[0])
        pixels = [(rng.randrange(ny), rng.randrange(nx)) for _ in range(args.repeat)]
        labels = {s: "" for s in systems}
    metrics = [*(JUMP_METRICS if bench == "jump" else PROFILE_METRICS), *common.ENGINE_METRICS,
               *common.remote_metrics(served)]
    with served as (url, _server):
        def params(label: str, r: int) -> dict[str, Any]:
            return {"bench": bench, "url": url, "order": orders.get(labels[label], []), "chunk_t": spec.chunks[0],
                    "pixel": pixels[r] if pixels else None,
                    "storage_options": served.storage_options}

        describe = ((lambda r: f"p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms") if bench == "jump"
                    else (lambda r: f"{r['profile_ms']:.1f} ms"))
        common.log(f"{bench}: {systems} x {args.repeat} on {url}"
                   + (f" ({args.frames} random frames{' with replacement' if revisit else ''}, "
                      f"seeds {seeds})" if bench == "jump" else f" (pixels {pixels})"))
        runs = runner.run_matrix("jump", list(labels), params, repeat=args.repeat,
                                 timeout=args.timeout, store=spec.path,
                                 drop_caches=not args.no_drop_caches, describe=describe,
                                 before=served.before, after=served.after,
                                 env_for=lambda s: served.env)
    primary = "p95_ms" if bench == "jump" else "profile_ms"
    frames = len(next(iter(orders.values()))) if orders else 0
    doc = report.document(bench, args, spec, systems, runs, metrics, primary=primary,
                          where="remote" if args.remote else "local", frames=frames,
                          revisit=revisit, seeds=seeds, tags=list(orders),
                          headline=(["p50_ms", "p95_ms", "decoded_ratio", "faults_per_frame",
                                     "cpu_ms_per_frame", "peak_rss_mb"] if bench == "jump" else
                                    ["profile_ms", "open_s", "decoded_ratio", "peak_rss_mb"]))
    doc["agreement"] = _agreement(runs)
    if bench == "jump":
        doc["decoded_floor"] = {tag: decoded_floor(spec.path, order) for tag, order in orders.items()}
        if not args.remote:
            doc["read_floor"] = read_floor(spec.path, orders)
    doc["targets"] = _targets(bench, doc, args.remote, spec.cube)
    what = (f"{frames} random frames of {nt}" + (" drawn with replacement" if revisit else "")
            + f", seeds {','.join(map(str, seeds))}"
            if bench == "jump" else "one pixel's time series")
    title = (f"{bench} ({'remote' if args.remote else 'local'}; {what}, cold page cache and "
             f"cache; median of {args.repeat} runs, each system in its own process)")
    report.report(doc, metrics, title, args.json_only)
    return report.exit_status(doc, args.check)


def decoded_floor(store: str | os.PathLike[str], order: list[int]) -> float | None:
    """Decoded / useful bytes of decoding, for each frame of ``order``, only the blosc blocks
    of its chunks that hold it -- each run of blocks up to the frame's last byte where the
    blocks decode by the fronts of their LZ4 streams, whole blocks otherwise -- and keeping
    no decoded bytes from one frame to the next: tsexplore's ``decode_box`` on the first
    chunk of variable ``temp`` (every chunk of these cubes is whole and alike). What a
    reader of single frames decodes at least with these blocks. None: not one blosc codec
    (or not a local, unsharded array)."""
    import numpy as np

    from tsexplore.sources.blosc_partial import PartsUnsupported, decode_box, parse_head

    from .naive import StoredArray

    try:
        arr = StoredArray(os.path.join(store, "temp"))
    except (OSError, ValueError, KeyError):  # not a local unsharded Zarr array
        return None
    if len(arr.codecs) != 1 or type(arr.codecs[0]).__name__ != "Blosc" or not order:
        return None
    try:
        with open(arr.path((0,) * len(arr.shape)), "rb") as f:
            buf = np.frombuffer(f.read(), dtype=np.uint8)
        head = parse_head(buf, "chunk 0")
    except (OSError, PartsUnsupported):
        return None
    depth, rest = arr.chunks[0], tuple((0, n) for n in arr.chunks[1:])
    decoded = [decode_box(buf, head, arr.chunks, arr.dtype, ((t, t + 1), *rest), "chunk 0")[1]
               for t in range(depth)]
    useful = int(np.prod(arr.chunks[1:])) * arr.dtype.itemsize
    return sum(decoded[t % depth] for t in order) / (len(order) * useful)


def read_floor(store: str | os.PathLike[str], orders: dict[str, list[int]]) -> dict[str, Any] | None:
    """For a cube of zstd chunks (one stream each, no blocks): per order, the p95 over its
    frames of the time this disk takes to read only the stored bytes the frame's fronts need
    -- each chunk's stream from where the frames before it in its chunk-row left it to where
    the stream has decoded the frame's last byte (tsexplore's ``Front`` fed 16 KiB at a time,
    on the 16 chunks of the first row, for every row) -- at the rate one cold chunk-row is
    read with 4 threads (measured here, median of 3). Decoding is left out: a floor. None:
    not one zstd codec (or not a local, unsharded array)."""
    import concurrent.futures as cf

    import numpy as np

    from tsexplore.sources._cblosc2 import zstd_stream
    from tsexplore.sources.requests import AuxKey
    from tsexplore.sources.zstd_front import Front

    from .naive import StoredArray
    from .pagecache import cold_cache

    try:
        arr = StoredArray(os.path.join(store, "temp"))
    except (OSError, ValueError, KeyError):  # not a local unsharded Zarr array
        return None
    stream = zstd_stream()
    if len(arr.codecs) != 1 or type(arr.codecs[0]).__name__ != "Zstd" or stream is None or not orders:
        return None
    depth = arr.chunks[0]
    frame = int(np.prod(arr.chunks[1:])) * arr.dtype.itemsize
    grid = [range(-(-n // c)) for n, c in zip(arr.shape[1:], arr.chunks[1:])]
    paths = [arr.path((0, *spot)) for spot in itertools.product(*grid)]
    need = np.zeros(depth + 1, dtype=np.int64)  # stored bytes of the row up to frame t's end
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        front = Front(AuxKey("floor", "front", (0,)), depth * frame, stream)
        t, piece = 0, 16 << 10
        for at in range(0, len(data), piece):
            front.feed(data[at : at + piece], at, at + piece >= len(data), path)
            while t < depth and front.done >= (t + 1) * frame:
                need[t + 1] += min(len(data), at + piece)
                t += 1

    def read_row() -> float:
        cold_cache(Path(store))
        start = time.perf_counter()
        with cf.ThreadPoolExecutor(4) as pool:
            got = sum(pool.map(lambda p: len(Path(p).read_bytes()), paths))
        return got / (time.perf_counter() - start)

    rate = float(np.median([read_row() for _ in range(3)]))
    p95 = {}
    for tag, order in orders.items():
        deepest: dict[int, int] = {}
        seconds = []
        for t in order:
            row, at = divmod(t, depth)
            held = deepest.get(row, -1)
            seconds.append(max(0, int(need[at + 1] - need[held + 1])) / rate)
            deepest[row] = max(held, at)
        p95[tag] = float(np.percentile(seconds, 95)) * 1e3
    return {"gbps": rate / 1e9, "p95_ms": p95}


def _agreement(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Do all systems read the same values? (per seed and repeat: sampled sums, rtol 1e-6)"""
    import numpy as np

    out: dict[str, Any] = {}
    reference: dict[tuple[str, int], Any] = {}
    for label, rs in runs.items():
        ok = True
        tag = common.split_label(label)[2]
        for r in rs:
            if not r.get("ok"):
                continue
            checks = np.asarray(r["trace"]["checks"])
            ref = reference.setdefault((tag, r["repeat"]), checks)
            ok = ok and len(checks) == len(ref) and bool(np.allclose(checks, ref, rtol=1e-6))
        out[label] = ok
    return {"reference": next(iter(runs), None), "same_values": out}


def _targets(bench: str, doc: dict[str, Any], remote: bool, cube: str = "own"
             ) -> list[dict[str, Any]]:
    """Issue 30: for every seed p95 <= 25 ms, and on blosc cubes decoded <= 1.5x useful (the
    worst seed is the value); prefetch guesses used (the worst seed)."""
    from .cubes import CUBES

    s = doc["summary"]
    tags = doc.get("tags") or [""]
    med = lambda k, tag: report.median_of(s, common.join_label("tsexplore", None, tag), k)  # noqa: E731

    def worst(key: str, pick: Any = max) -> tuple[float | None, str]:
        vals = [(v, tag) for tag in tags if (v := med(key, tag)) is not None]
        return pick(vals) if vals else (None, "")

    out = [report.flag("every system reads the same values",
                       all(doc["agreement"]["same_values"].values()) or None)]
    if bench == "jump" and not remote:
        p95, at = worst("p95_ms")
        floor = doc.get("read_floor")
        beside = (f"; reading only what its frames' zstd fronts need at the disk's cold "
                  f"{floor['gbps']:.2f} GB/s: p95 {floor['p95_ms'][at]:.1f} ms"
                  if floor and at in floor["p95_ms"] else "")
        out.append(report.target(f"tsexplore random p95, every seed (worst: {at or '-'}{beside})",
                                 p95, "<=", 25.0, "ms"))
        if CUBES.get(cube) is None or CUBES[cube].blosc:
            ratio, at = worst("decoded_ratio")
            floor = (doc.get("decoded_floor") or {}).get(at)
            beside = f"; decoding only each frame's blocks: {floor:.3f}" if floor is not None else ""
            out.append(report.target(f"tsexplore decoded/useful, every seed (worst: {at or '-'}{beside})",
                                     ratio, "<=", 1.5, "x"))
    issued, _ = worst("prefetch_issued")
    if issued is not None and issued > 16:  # (a steady run now and then may probe)
        used, at = worst("prefetch_used_pct", min)
        out.append(report.target(f"tsexplore prefetch guesses used (worst: {at or '-'})", used,
                                 ">=", 70.0, "%"))
    elif issued is not None:
        out.append(report.flag(f"tsexplore prefetch stays off (at most {issued:.0f} guesses)",
                               True))
    return out
