"""Random slider jumps through the view controller (issue 13): does prefetch stay quiet?

The Explorer's controller (:class:`tsexplore.controller.ViewController`, the default 600x800
screen) shows the cube with a 512 MB cache budget (``--budget``). For ``--seconds`` (default
30) the slider jumps to a random frame, waits for that frame to be painted, and dwells a
random 0..2x ``--dwell`` seconds; then it plays 128 frames at 30 fps. Reported per phase:
jumps, slider-to-frame latency p50 / p95, the engine's read latency p95, prefetch guesses and
the share used, decoded bytes per useful byte, and the cache's high water. Targets: >= 70 %
of guesses used (or prefetch stays off) during the jumps, >= 90 % during play, high water
<= budget. tsexplore only (the peers have no prefetcher).
"""

from __future__ import annotations

import random
import time
from typing import Any

from . import common, report, runner
from .common import Metric

SYSTEMS = ("tsexplore",)
METRICS = [
    Metric("jumps", "jumps", "higher", "{:.0f}"),
    Metric("jump_p50_ms", "jump p50 ms", "lower", "{:.1f}"),
    Metric("jump_p95_ms", "jump p95 ms", "lower", "{:.1f}"),
    Metric("read_p95_ms", "read p95 ms", "lower", "{:.1f}"),
    Metric("jump_guesses", "jump guesses", "lower", "{:.0f}"),
    Metric("jump_used_pct", "jump used %", "higher", "{:.0f}"),
    Metric("play_guesses", "play guesses", "higher", "{:.0f}"),
    Metric("play_used_pct", "play used %", "higher", "{:.0f}"),
    Metric("play_p95_ms", "play p95 ms", "lower", "{:.1f}"),
    Metric("decoded_ratio", "decoded/useful", "lower"),
    Metric("high_water_mb", "high water MB", "lower", "{:.0f}"),
]


def run_system(system: str, params: dict[str, Any], sampler: runner.RssSampler) -> dict[str, Any]:
    """The soak: random jumps for ``seconds``, then 128 frames of play."""
    import tsexplore as tse
    from tsexplore.controller import PlaneGeometry, ViewController

    if system != "tsexplore":
        raise ValueError(f"unknown system {system!r}; known: {SYSTEMS}")
    sampler.mark_baseline()
    tse.config.set(cache_bytes=params["budget"])
    ds = tse.open_dataset(params["url"])
    src = next(s for s in ds.tse.sources if getattr(s, "name", None) == common.VARIABLE)
    rng = random.Random(params["seed"])
    nt = src.shape[0]
    engine = tse.get_engine()
    with ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=engine) as ctl:
        start = tse.stats()
        lat: list[float] = []
        deadline = time.perf_counter() + params["seconds"]
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            ctl.wait(ctl.update(indices={"time": rng.randrange(nt)}), timeout=60)
            lat.append((time.perf_counter() - t0) * 1e3)
            time.sleep(rng.uniform(0, 2 * params["dwell"]))
        jumps = tse.stats() - start
        play: list[float] = []
        first = rng.randrange(nt - 128)
        tick = time.perf_counter()
        for t in range(first, first + 128):
            tick += 1 / 30
            t0 = time.perf_counter()
            ctl.wait(ctl.update(indices={"time": t}), timeout=60)
            play.append((time.perf_counter() - t0) * 1e3)
            time.sleep(max(0.0, tick - time.perf_counter()))
        played = tse.stats() - start - jumps
    end = tse.stats()

    def used(s: Any) -> float | None:
        return 100 * s.prefetch_used_ratio if s.speculative_reads else None

    return {
        "jumps": len(lat), "jump_p50_ms": runner.percentile(lat, 50),
        "jump_p95_ms": runner.percentile(lat, 95), "read_p95_ms": jumps.latency_p95 * 1e3,
        "jump_guesses": jumps.speculative_reads, "jump_used_pct": used(jumps),
        "play_guesses": played.speculative_reads, "play_used_pct": used(played),
        "play_p95_ms": runner.percentile(play, 95),
        "decoded_ratio": end.decoded_ratio, "high_water_mb": end.cache_high_water / 1e6,
        "budget_mb": params["budget"] / 1e6, "stats": common.engine_counters()["stats"],
        "trace": {"jump_ms": [round(x, 2) for x in lat], "play_ms": [round(x, 2) for x in play]},
    }


def main(argv: list[str]) -> int:
    """``python -m benchmarks soak``."""
    p = common.parser("soak", "random slider jumps through the view controller, then play", SYSTEMS)
    p.add_argument("--seconds", type=float, default=30.0, help="seconds of random jumps")
    p.add_argument("--dwell", type=float, default=0.04, help="mean pause after a jump (s)")
    p.add_argument("--budget", type=common.parse_bytes, default=512_000_000)
    p.add_argument("--seed", type=int, default=13)
    args = common.parse(p, argv)
    systems = common.pick_systems(args.systems, SYSTEMS, args.from_all)
    spec = common.data_spec(args)
    served = common.serve(spec.path, args)
    with served as (url, _server):
        common.log(f"soak: {args.seconds:.0f} s of random jumps on {url}, budget "
                   f"{args.budget / 1e6:.0f} MB, then 128 frames of play")
        runs = runner.run_matrix(
            "soak", systems,
            lambda s, r: {"url": url, "seconds": args.seconds, "dwell": args.dwell,
                          "budget": args.budget, "seed": args.seed + r},
            repeat=args.repeat, timeout=args.timeout, store=spec.path,
            drop_caches=not args.no_drop_caches, before=served.before, after=served.after,
            describe=lambda r: (f"{r['jumps']} jumps, p95 {r['jump_p95_ms']:.1f} ms, guesses "
                                f"{r['jump_guesses']} (play {r['play_guesses']}, "
                                f"{r['play_used_pct'] or 0:.0f} % used)"))
    doc = report.document("soak", args, spec, systems, runs, METRICS, primary="jump_p95_ms")
    med = lambda k: report.median_of(doc["summary"], "tsexplore", k)  # noqa: E731
    targets = []
    guesses = med("jump_guesses")
    if guesses is not None and guesses > 16:
        targets.append(report.target("prefetch guesses used during random jumps",
                                     med("jump_used_pct"), ">=", 70.0, "%"))
    elif guesses is not None:
        targets.append(report.flag(f"prefetch stays off during random jumps ({guesses:.0f} guesses)", True))
    targets.append(report.target("prefetch guesses used during play", med("play_used_pct"), ">=", 90.0, "%"))
    hw = [r["high_water_mb"] for r in runs["tsexplore"] if r.get("ok")]
    targets.append(report.target("cache high water (worst run) <= budget", max(hw) if hw else None,
                                 "<=", args.budget / 1e6, "MB"))
    doc["targets"] = targets
    title = (f"soak ({args.seconds:.0f} s of random slider jumps through the view controller, "
             f"then 128 frames of play; median of {args.repeat} runs)")
    report.report(doc, METRICS, title, args.json_only)
    return report.exit_status(doc, args.check)
