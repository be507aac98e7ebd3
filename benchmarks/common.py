"""Shared pieces of the benchmarks: the data, the metrics, the options, the HTTP server.

The machinery is split in four small modules: this one; :mod:`.pagecache` (cold page
cache before every run); :mod:`.runner` (one subprocess per system and run, RSS sampling);
:mod:`.report` (medians, ratios, targets, the table and the JSON document).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
VARIABLE = "temp"
MARKER = "@@BENCH-RESULT@@ "
REFERENCE = "tsexplore"


@dataclass(frozen=True)
class DataSpec:
    """A benchmark cube: where it lives and how it is shaped."""

    path: Path
    shape: tuple[int, int, int]
    chunks: tuple[int, int, int]
    size: str

    @property
    def nbytes(self) -> int:
        n = 4
        for s in self.shape:
            n *= s
        return n


FULL = DataSpec(ROOT / "data" / "bench_cube.zarr", (512, 1024, 1024), (16, 256, 256), "full")
SMALL = DataSpec(ROOT / "data" / "bench_cube_small.zarr", (64, 256, 256), (16, 64, 64), "small")


@dataclass(frozen=True)
class Metric:
    """One column of the table: ``key`` in each run's result, and which direction is better."""

    key: str
    label: str
    better: str  # "lower" or "higher"
    fmt: str = "{:.2f}"

    def show(self, value: Any) -> str:
        if value is None or (isinstance(value, float) and value != value):
            return "-"
        return self.fmt.format(value)


RSS = Metric("peak_rss_mb", "peak RSS MB", "lower", "{:.0f}")
#: tsexplore's own counters, in every benchmark (peers show "-")
ENGINE_METRICS = [
    Metric("decoded_ratio", "decoded/useful", "lower"),
    Metric("prefetch_issued", "prefetch guesses", "lower", "{:.0f}"),
    Metric("prefetch_used_pct", "guesses used %", "higher", "{:.0f}"),
]


def engine_counters() -> dict[str, Any]:
    """tsexplore's counters after a run: the top-level keys of :data:`ENGINE_METRICS`, and
    the rest under ``stats`` (call in the child, after the work)."""
    import tsexplore as tse

    s = tse.stats()
    stats = {k: getattr(s, k) for k in (
        "hits", "misses", "joined", "reads", "part_reads", "encoded_hits", "prefetch_reads",
        "speculative_reads", "prefetch_used", "bytes_read", "bytes_decoded", "bytes_useful",
        "cache_budget", "cache_high_water", "cache_encoded_bytes", "evictions", "cancelled")}
    return {
        "decoded_ratio": s.decoded_ratio if s.bytes_useful else None,
        "prefetch_issued": s.speculative_reads,
        "prefetch_used_pct": 100 * s.prefetch_used_ratio if s.speculative_reads else None,
        "stats": stats,
    }


def parser(name: str, description: str, systems: Sequence[str]) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark shares."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks {name}", description=description)
    p.add_argument("--path", type=Path, default=None,
                   help="the Zarr cube (default data/bench_cube.zarr, written on first use)")
    p.add_argument("--small", action="store_true",
                   help="quick check on a 64x256x256 cube (16x64x64 chunks)")
    p.add_argument("--repeat", type=int, default=3, help="runs per system (medians are reported)")
    p.add_argument("--systems", default=",".join(systems),
                   help=f"comma-separated subset of: {','.join(systems)}")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per system run")
    p.add_argument("--json-only", action="store_true",
                   help="print only the JSON document (one line), no table")
    p.add_argument("--check", action="store_true",
                   help="exit with status 2 when a target is missed")
    p.add_argument("--remote", action="store_true",
                   help="serve the store over loopback HTTP (--latency per request) and point "
                        "every system at its URL")
    p.add_argument("--latency", type=float, default=0.02,
                   help="seconds per HTTP request with --remote (default 0.02)")
    p.add_argument("--no-drop-caches", action="store_true",
                   help="skip the machine-wide drop_caches; only posix_fadvise the store's files")
    p.add_argument("--from-all", action="store_true", help=argparse.SUPPRESS)
    return p


def parse(p: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``; under ``all`` (``--from-all``) options of other benchmarks are skipped."""
    if "--from-all" not in argv:
        return p.parse_args(argv)
    args, unknown = p.parse_known_args(argv)
    if unknown:
        log(f"({p.prog}: ignoring {' '.join(unknown)})")
    return args


class serve:
    """``with serve(path, args) as (url, server)``: a loopback StoreServer under ``--remote``.

    Without ``--remote`` the url is the local path and the server None. The server runs in
    this (parent) process, which only waits on its children, so its threads have the CPU.
    """

    def __init__(self, path: Path, args: argparse.Namespace) -> None:
        self.path, self.args = path, args
        self.server: Any = None
        self._count = 0

    def __enter__(self) -> tuple[str, Any]:
        if not self.args.remote:
            return str(self.path), None
        from tsexplore.testing.http import StoreServer

        self.server = server = StoreServer(self.path, latency=self.args.latency)
        # a child that exits with reads in flight resets its connections: count, don't print
        self.resets = 0

        def quiet(request: Any, client_address: Any) -> None:
            self.resets += 1

        server._httpd.handle_error = quiet  # type: ignore[method-assign]
        return server.url, server

    def before(self, system: str) -> None:
        """Hook for :func:`run_matrix`: remember the request count."""
        if self.server is not None:
            self._count = len(self.server.requests)

    def after(self, system: str, result: dict[str, Any]) -> None:
        """Hook for :func:`run_matrix`: the HTTP requests this run made."""
        if self.server is not None:
            result["http_requests"] = len(self.server.requests) - self._count

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.close()


HTTP_REQUESTS = Metric("http_requests", "HTTP requests", "lower", "{:.0f}")


def pick_systems(requested: str, known: Sequence[str], lenient: bool = False) -> list[str]:
    """The systems named in ``--systems``, checked against ``known``; order kept.

    ``lenient`` (used by ``all``) drops names this benchmark does not know.
    """
    names = [s.strip() for s in requested.split(",") if s.strip()]
    unknown = [s for s in names if s not in known]
    if lenient:
        names = [s for s in names if s in known] or list(known)
    elif unknown:
        raise SystemExit(f"unknown system(s) {unknown}; choose from {list(known)}")
    if not names:
        raise SystemExit(f"--systems is empty; choose from {list(known)}")
    return names


def data_spec(args: argparse.Namespace) -> DataSpec:
    """The cube for these options; written (with a progress bar) when missing.

    ``--path`` to an existing store uses that store's own shape and chunks.
    """
    base = SMALL if args.small else FULL
    if args.path is None:
        spec = base
    else:
        path = Path(args.path).resolve()
        spec = _existing(path) or DataSpec(path, base.shape, base.chunks, base.size)
    found = _existing(spec.path)
    if found is None or (args.path is None and found.shape != spec.shape):
        if spec.path.exists() and spec.path not in (FULL.path, SMALL.path):
            raise SystemExit(f"{spec.path} is not a complete sample cube; pass another --path")
        log(f"writing the benchmark cube {spec.path} {spec.shape}, chunks {spec.chunks} (once)")
        import tsexplore as tse

        tse.sample_data("cube", spec.path, shape=spec.shape, chunks=spec.chunks,
                        size=spec.size, overwrite=True, progress=True)
        tse.close()
    return spec


def _existing(path: Path) -> DataSpec | None:
    """The spec of a complete cube at ``path`` (read from its metadata), else None."""
    try:
        group = json.loads((path / "zarr.json").read_text())
        meta = json.loads((path / VARIABLE / "zarr.json").read_text())
    except (OSError, ValueError):
        return None
    if not group.get("attributes", {}).get("complete", False):
        return None
    shape = tuple(int(s) for s in meta["shape"])
    chunks = tuple(int(c) for c in meta["chunk_grid"]["configuration"]["chunk_shape"])
    size = "small" if path == SMALL.path else "full"
    return DataSpec(path, shape, chunks, size)  # type: ignore[arg-type]


def parse_bytes(text: str) -> int:
    """``"256MB"``, ``"1.5GiB"``, ``"1000000"`` -> bytes."""
    units = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
             "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
    s = text.strip().lower().replace(" ", "")
    num = s.rstrip("kmgtib")
    unit = s[len(num):]
    if unit not in units or not num:
        raise argparse.ArgumentTypeError(f"cannot read {text!r} as a size; try 256MB or 1GiB")
    return int(float(num) * units[unit])


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
