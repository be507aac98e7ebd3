"""Shared pieces of the benchmarks: the data, the metrics, the options, the HTTP server.

The machinery is split in four small modules: this one; :mod:`.pagecache` (cold page
cache before every run); :mod:`.runner` (one subprocess per system and run, RSS sampling);
:mod:`.report` (medians, ratios, targets, the table and the JSON document).
"""

from __future__ import annotations

import argparse
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
    """A benchmark cube: where it lives, how it is shaped, which cube (:mod:`.cubes`) it is."""

    path: Path
    shape: tuple[int, int, int]
    chunks: tuple[int, int, int]
    size: str
    cube: str = "own"
    zarr_format: int = 3
    #: the ``--layout`` this store is (None: the cube itself)
    layout: str | None = None

    @property
    def nbytes(self) -> int:
        n = 4
        for s in self.shape:
            n *= s
        return n


#: ``--layout``: the first 128 frames (32 with --small) of a cube stored three ways
LAYOUT_NAMES = ("unsharded", "sharded-16", "sharded-1")


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
    the rest under ``stats`` (call in the child, after the work). A counter this version of
    tsexplore does not have is None (``benchmarks ab`` runs older versions too)."""
    import tsexplore as tse

    s = tse.stats()
    stats = {k: getattr(s, k, None) for k in (
        "hits", "misses", "joined", "reads", "part_reads", "encoded_hits", "prefetch_reads",
        "speculative_reads", "prefetch_used", "bytes_read", "bytes_decoded", "bytes_useful",
        "cache_budget", "cache_high_water", "cache_encoded_bytes", "evictions", "cancelled",
        "retries", "store_requests", "range_requests", "index_reads", "batched", "views_ahead",
        "views_ahead_used", "taken_over", "concurrency")}
    guesses = getattr(s, "speculative_reads", None)
    return {
        "decoded_ratio": getattr(s, "decoded_ratio", None) if stats["bytes_useful"] else None,
        "prefetch_issued": guesses,
        "prefetch_used_pct": (100 * s.prefetch_used_ratio
                              if guesses and hasattr(s, "prefetch_used_ratio") else None),
        "stats": stats,
    }


def split_label(label: str) -> tuple[str, str | None, str]:
    """A run's label -> (system, A/B variant or None, tag): ``"tsexplore@443a17c seed=3"`` ->
    ``("tsexplore", "443a17c", "seed=3")``; ``"naive"`` -> ``("naive", None, "")``."""
    head, _, tag = label.partition(" ")
    system, _, variant = head.partition("@")
    return system, variant or None, tag


def join_label(system: str, variant: str | None = None, tag: str = "") -> str:
    """The inverse of :func:`split_label`."""
    return system + (f"@{variant}" if variant else "") + (f" {tag}" if tag else "")


def parser(name: str, description: str, systems: Sequence[str]) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark shares."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks {name}", description=description)
    p.add_argument("--cube", default="own",
                   help="the cube: own (the project's), noisy (+ N(0, 0.1), blosc-zstd 3), zstd "
                        "(zarr v3's default codec), v2lz4 (zarr v2 blosc-lz4 as xarray writes "
                        "it); several comma-separated, or all: one run each and one table "
                        "(written to data/ on first use; see benchmarks/cubes.py)")
    p.add_argument("--path", type=Path, default=None,
                   help="another Zarr store with a 3-d variable 'temp' (instead of --cube)")
    p.add_argument("--small", action="store_true",
                   help="quick check on the 64x256x256 cubes (16x64x64 chunks)")
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
    p.add_argument("--bandwidth", type=parse_bytes, default=0,
                   help="with --remote or --s3: the link's bytes/s shared by all requests "
                        "(e.g. 200MB; default: no cap)")
    p.add_argument("--s3", action="store_true",
                   help="serve the store from a moto S3 server (behind the --latency / "
                        "--bandwidth link) and point every system at its s3:// URL")
    p.add_argument("--reader", choices=("auto", "obstore", "fsspec"), default=None,
                   help="tsexplore's remote reader (tse.config remote_reader; default: its own)")
    p.add_argument("--layout", choices=LAYOUT_NAMES, default=None,
                   help="the cube's first 128 frames stored unsharded, or in 16x1024x1024 "
                        "shards of 16x256x256 or 1x256x256 inner chunks, with the cube's codec "
                        "(Zarr v3 cubes; *_sharded_*.zarr in --data-dir, written once)")
    p.add_argument("--data-dir", type=Path, default=ROOT / "data",
                   help="where --layout stores live (default data/)")
    p.add_argument("--no-drop-caches", action="store_true",
                   help="skip the machine-wide drop_caches; only posix_fadvise the store's files")
    p.add_argument("--warm", action="store_true",
                   help="warm page cache instead: read every file of the store before each "
                        "child (the engine's own cost, without the disk)")
    p.add_argument("--code", default=None, metavar="REF",
                   help="run tsexplore's children with the tsexplore of git ref REF (exported "
                        "to /tmp/tsexplore-ab/; see python -m benchmarks ab)")
    p.add_argument("--from-all", action="store_true", help=argparse.SUPPRESS)
    return p


def parse(p: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``; under ``all`` (``--from-all``) options of other benchmarks are skipped."""
    if "--from-all" not in argv:
        args = p.parse_args(argv)
    else:
        args, unknown = p.parse_known_args(argv)
        if unknown:
            log(f"({p.prog}: ignoring {' '.join(unknown)})")
    from . import runner

    runner.warm = bool(getattr(args, "warm", False))
    if getattr(args, "code", None):
        from .ab import code_option

        code_option(args.code)
    return args


class serve:
    """``with serve(path, args) as (url, server)``: the store over a modelled link.

    ``--remote``: a loopback StoreServer serving the folder; ``--s3``: a moto S3 server
    (the store uploaded once) behind a StoreServer proxy; both with ``--latency`` seconds
    per request and ``--bandwidth`` bytes/s shared. Without either, the url is the local
    path and the server None. ``storage_options`` and ``env`` are what children need to
    reach it. The servers run in this (parent) process, which only waits on its children.
    """

    def __init__(self, path: Path, args: argparse.Namespace) -> None:
        self.path, self.args = path, args
        self.server: Any = None
        self.moto: Any = None
        self.storage_options: dict[str, Any] | None = None
        self.env: dict[str, str] = {}
        self._count = 0
        self._bytes = 0
        self.resets = 0
        if getattr(args, "reader", None):
            self.env["TSEXPLORE_REMOTE_READER"] = args.reader

    @property
    def remote(self) -> bool:
        return bool(self.args.remote or getattr(self.args, "s3", False))

    def describe(self) -> str:
        """The link in words, for titles."""
        if not self.remote:
            return "local"
        bw = getattr(self.args, "bandwidth", 0)
        return (f"{'S3 (moto)' if getattr(self.args, 's3', False) else 'HTTP'}, "
                f"{self.args.latency * 1e3:.0f} ms/request"
                + (f", {bw / 1e6:.0f} MB/s" if bw else ""))

    def __enter__(self) -> tuple[str, Any]:
        if not self.remote:
            return str(self.path), None
        from tsexplore.testing.http import StoreServer

        bandwidth = float(getattr(self.args, "bandwidth", 0) or 0)
        if getattr(self.args, "s3", False):
            from tsexplore.testing.s3 import KEY, REGION, SECRET, MotoS3

            self.moto = MotoS3()
            log(f"uploading {self.path} to moto S3 (once per benchmark)")
            url = self.moto.upload(self.path, self.path.name)
            self.server = server = self.moto.proxy(self.args.latency, bandwidth)
            self.storage_options = self.moto.storage_options(server.url)
            self.env.update({"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
                             "AWS_REGION": REGION, "AWS_ENDPOINT_URL": server.url})
        else:
            self.server = server = StoreServer(self.path, latency=self.args.latency,
                                               bandwidth=bandwidth)
            url = server.url

        def quiet(request: Any, client_address: Any) -> None:
            # a child that exits with reads in flight resets its connections: count them
            self.resets += 1

        server._httpd.handle_error = quiet  # type: ignore[method-assign]
        return url, server

    def before(self, system: str) -> None:
        """Hook for :func:`run_matrix`: remember the request and byte counts."""
        if self.server is not None:
            self._count = len(self.server.requests)
            self._bytes = self.server.bytes_sent

    def after(self, system: str, result: dict[str, Any]) -> None:
        """Hook for :func:`run_matrix`: the requests and bytes this run moved over the link."""
        if self.server is None:
            return
        requests = len(self.server.requests) - self._count
        moved = self.server.bytes_sent - self._bytes
        result["http_requests"] = requests
        result["link_mb"] = moved / 1e6
        result["requests_per_gb"] = requests / (moved / 1e9) if moved else None
        seconds = result.get("elapsed_s") or result.get("total_s") or result.get("work_s")
        if seconds:
            result["link_mbps"] = moved / 1e6 / seconds
            bandwidth = getattr(self.args, "bandwidth", 0)
            if bandwidth:
                result["link_share"] = moved / seconds / bandwidth

    def __exit__(self, *exc: object) -> None:
        if self.moto is not None:
            self.moto.close()  # and its proxy
        elif self.server is not None:
            self.server.close()


HTTP_REQUESTS = Metric("http_requests", "HTTP requests", "lower", "{:.0f}")
REQUESTS_PER_GB = Metric("requests_per_gb", "requests/GB", "lower", "{:.0f}")
LINK_MBPS = Metric("link_mbps", "link MB/s (encoded)", "higher", "{:.1f}")


def remote_metrics(served: serve, throughput: bool = False) -> list[Metric]:
    """The columns a remote run adds: requests, requests per GB (and link MB/s)."""
    if not served.remote:
        return []
    return [HTTP_REQUESTS, REQUESTS_PER_GB, *([LINK_MBPS] if throughput else [])]


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


#: systems that read local chunk files only (the ``naive`` floor)
LOCAL_ONLY = ("naive",)


def local_only(systems: list[str], served: serve, defaulted: bool) -> list[str]:
    """``systems`` without the local-only ones when the store is remote and the systems were
    not named (naming one for a remote run fails it, as it should)."""
    if not served.remote or not defaulted:
        return systems
    return [s for s in systems if s not in LOCAL_ONLY]


def data_spec(args: argparse.Namespace) -> DataSpec:
    """The store for these options (``--cube``, ``--small``, ``--layout``, ``--path``); a
    cube or layout store is written (with a progress bar) when missing.

    ``--path`` to an existing store uses that store's own shape and chunks. A ``--layout`` of
    a cube that has none (Zarr v2) raises :class:`.cubes.NoLayout` (a SystemExit with status
    0), which a multi-cube run reports as skipped.
    """
    from . import cubes

    if args.path is not None:
        path = Path(args.path).resolve()
        found = cubes.existing(path)
        if found is None:
            raise SystemExit(f"{path} is not a complete benchmark cube (a Zarr store whose "
                             f"group has attrs complete=true and a 3-d variable "
                             f"{VARIABLE!r}); write one with python -m benchmarks cubes")
        return found
    names = cubes.names(getattr(args, "cube", "own"))
    if len(names) != 1:
        raise SystemExit(f"--cube {args.cube}: one cube per run here; several are run by "
                         "python -m benchmarks <name> --cube a,b (the dispatcher)")
    size = "small" if args.small else "full"
    spec = cubes.spec_for(names[0], size, getattr(args, "layout", None),
                          Path(getattr(args, "data_dir", cubes.DATA_DIR)))
    cubes.ensure([spec])
    return spec


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


def link_targets(doc: dict[str, Any], args: argparse.Namespace, primary: str) -> list[dict[str, Any]]:
    """Remote targets of throughput benchmarks: >= 80 % of ``--bandwidth`` (encoded MB/s on
    the link) and ahead of TensorStore on ``primary`` in the same run."""
    from . import report

    out = []
    bandwidth = getattr(args, "bandwidth", 0)
    if bandwidth:
        mbps = report.median_of(doc["summary"], "tsexplore", "link_mbps")
        out.append(report.target("tsexplore reads >= 80 % of the link (encoded MB/s)", mbps,
                                 ">=", 0.8 * bandwidth / 1e6, "MB/s"))
    adv = doc["advantage"].get("tensorstore", {}).get(primary)
    if adv is not None:
        out.append(report.target("tsexplore vs TensorStore", adv, ">=", 1.0, "x"))
    return out
