"""``python -m benchmarks figures``: issue 30's table -- every workload on every cube, every
system, in one run, one table, and a PASS / MISS line per cube.

By default: ``scrub``, ``play``, ``jump`` (five seeds), ``scan`` and ``scrub --layout
sharded-1`` on the cubes own, noisy, zstd and v2lz4 (``--cube``; the layout is skipped on
the Zarr v2 cube, which has no sharding), cube after cube, each benchmark with its usual
machinery (one cold process per system and run, interleaved, timeouts, medians of
``--repeat``, a results file each). ``--workloads`` picks others from :data:`WORKLOADS`.
Every other option goes to each benchmark that knows it (``--repeat``, ``--small``,
``--timeout``, ``--seeds``, ``--no-drop-caches``, ``--warm``, ``--systems``, ...).

The systems: those in :data:`SYSTEMS` per workload (issue 29 and 30's peers), or with
``--every-system`` every system each benchmark knows; ``--systems`` names them outright.
"""

from __future__ import annotations

import argparse
import sys

from . import combined, cubes, report

#: name -> (benchmark, its extra options)
WORKLOADS: dict[str, tuple[str, list[str]]] = {
    "scrub": ("scrub", []),
    "play": ("play", []),
    "jump": ("jump", []),
    "jump-revisit": ("jump", ["--revisit"]),
    "scan": ("scan", []),
    "patches": ("patches", []),
    "profile": ("profile", []),
    "memory": ("memory", []),
    "scrub-unsharded": ("scrub", ["--layout", "unsharded"]),
    "scrub-sharded-16": ("scrub", ["--layout", "sharded-16"]),
    "scrub-sharded-1": ("scrub", ["--layout", "sharded-1"]),
    "play-sharded-1": ("play", ["--layout", "sharded-1"]),
}
DEFAULT = ("scrub", "play", "jump", "scan", "scrub-sharded-1")
#: the systems each workload runs by default here (None: the benchmark's own default)
SYSTEMS: dict[str, str | None] = {
    "scrub": "tsexplore,naive,tensorstore,zarr",
    "play": "tsexplore,naive,tensorstore,zarr",
    "jump": "tsexplore,naive,tensorstore",
    "jump-revisit": "tsexplore,naive,tensorstore",
    "scan": "tsexplore,naive,tsexplore-dask,xarray-dask,tensorstore,zarr",
}


def workload_argv(name: str, rest: list[str], every_system: bool) -> tuple[str, list[str]]:
    """The benchmark to call for workload ``name`` and its argv."""
    bench, extra = WORKLOADS[name]
    argv = [*rest, *extra]
    if "--systems" not in rest and not every_system and SYSTEMS.get(name):
        argv += ["--systems", str(SYSTEMS[name])]
    return bench, [*argv, "--from-all"]


def run(kind: str, workloads: list[str], cube_names: list[str], rest: list[str],
        every_system: bool, json_only: bool, title: str, **extra: object) -> int:
    """Every workload on every cube (cube after cube); one combined table at the end."""
    from .__main__ import dispatch, with_cube

    report.tables_only = not json_only
    report.silent = json_only
    first = len(report.collected)
    status = 0
    for cube in cube_names:
        for name in workloads:
            bench, argv = workload_argv(name, rest, every_system)
            print(f"\n===== {name} / cube {cube} =====", file=sys.stderr, flush=True)
            try:
                status = max(status, dispatch(bench, with_cube(argv, cube)))
            except cubes.NoLayout as skip:
                print(skip.message, file=sys.stderr, flush=True)
    docs = report.collected[first:]
    if not docs:
        return status or 1
    return max(status, combined.finish(kind, docs, title, json_only, workloads=workloads,
                                       cubes=cube_names, **extra))


def main(argv: list[str]) -> int:
    """``python -m benchmarks figures [--cube all] [--workloads a,b] [--every-system] ...``."""
    p = argparse.ArgumentParser(prog="python -m benchmarks figures",
                                description=__doc__.split("\n\n")[0],
                                epilog="Every other option goes to each benchmark that knows it "
                                       "(--repeat, --small, --timeout, --seeds, --frames, "
                                       "--no-drop-caches, --warm, --systems, ...).")
    p.add_argument("--cube", default="all", help="cubes, comma-separated, or all (default)")
    p.add_argument("--workloads", default=",".join(DEFAULT),
                   help=f"comma-separated, from: {', '.join(WORKLOADS)} "
                        f"(default {','.join(DEFAULT)})")
    p.add_argument("--every-system", action="store_true",
                   help="every system each benchmark knows, not the issue's peers")
    p.add_argument("--json-only", action="store_true", help="print only the combined JSON")
    args, rest = p.parse_known_args(argv)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown or not workloads:
        raise SystemExit(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    cube_names = cubes.names(args.cube)
    if args.json_only:
        rest.append("--json-only")
    size = "small cubes" if "--small" in rest else "full-size cubes"
    title = (f"issue-30 figures: {', '.join(workloads)} on cubes {', '.join(cube_names)} "
             f"({size}; medians; each system in its own cold process)")
    return run("figures", workloads, cube_names, rest, args.every_system, args.json_only, title)
