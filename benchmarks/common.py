"""Shared machinery: data, cold page cache, one subprocess per system, medians, the table.

The parent process never reads the data itself. For each repeat and each system it drops
the store's pages from the page cache (:func:`cold_cache`), starts
``python -m benchmarks._run <module> <system> <json>`` (:func:`run_child`), and collects the
one JSON line the child prints. :func:`summarize` takes medians over repeats and
:func:`advantages` says how many times better tsexplore is than each peer on each metric.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
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


# -- options -----------------------------------------------------------------------------------
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
    p.add_argument("--ignore-unknown-systems", action="store_true", help=argparse.SUPPRESS)
    return p


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


# -- cold page cache -----------------------------------------------------------------------------
def store_files(path: Path) -> list[Path]:
    """Every regular file under the store."""
    out = []
    for root, _dirs, files in os.walk(path):
        out.extend(Path(root) / f for f in files)
    return out


def cold_cache(path: Path) -> dict[str, Any]:
    """Drop the store's pages from the page cache; say which methods worked.

    Tries ``sync; echo 3 > /proc/sys/vm/drop_caches`` (needs root outside a container) and
    always also ``posix_fadvise(DONTNEED)`` on every file, then measures with ``mincore``
    how much of the store is still resident.
    """
    out: dict[str, Any] = {}
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        out["drop_caches"] = "ok"
    except OSError as exc:
        out["drop_caches"] = f"failed: {exc.strerror or exc}"
    files = store_files(path)
    done, errors = 0, []
    for name in files:
        try:
            fd = os.open(name, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                done += 1
            finally:
                os.close(fd)
        except OSError as exc:
            errors.append(f"{name.name}: {exc}")
    out["fadvise"] = f"ok ({done} files)" if not errors else f"{done} ok, {len(errors)} failed"
    out["resident_after"] = resident_fraction(files)
    return out


def cold_summary(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One line for the report: which method worked and the worst residency seen."""
    recs = [r for r in records if r]
    if not recs:
        return {}
    drops = {r.get("drop_caches") for r in recs}
    resident = [r["resident_after"] for r in recs if r.get("resident_after") is not None]
    methods = []
    if drops == {"ok"}:
        methods.append("drop_caches")
    methods.append("posix_fadvise(DONTNEED)")
    return {
        "methods": methods,
        "drop_caches": sorted(d for d in drops if d),
        "fadvise": recs[-1].get("fadvise"),
        "max_resident_after": max(resident) if resident else None,
        "checks": len(recs),
    }


_libc: Any = None


def resident_fraction(files: Sequence[Path]) -> float | None:
    """Fraction of the files' pages in the page cache (``mincore``); None where unsupported."""
    global _libc
    try:
        if _libc is None:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.mmap.restype = ctypes.c_void_p
            lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_int, ctypes.c_long]
            lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_ubyte)]
            _libc = lib
        page = os.sysconf("SC_PAGE_SIZE")
        resident = total = 0
        for name in files:
            size = os.path.getsize(name)
            if size == 0:
                continue
            npages = (size + page - 1) // page
            fd = os.open(name, os.O_RDONLY)
            try:
                addr = _libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
                if addr in (None, ctypes.c_void_p(-1).value):
                    return None
                try:
                    vec = (ctypes.c_ubyte * npages)()
                    if _libc.mincore(addr, size, vec) != 0:
                        return None
                    resident += sum(v & 1 for v in vec)
                finally:
                    _libc.munmap(addr, size)
            finally:
                os.close(fd)
            total += npages
        return resident / total if total else 0.0
    except (OSError, AttributeError, ValueError):
        return None


# -- children ------------------------------------------------------------------------------------
def run_child(module: str, system: str, params: dict[str, Any], timeout: float,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one system in a fresh interpreter; its result dict (``ok`` False on any failure)."""
    cmd = [sys.executable, "-m", "benchmarks._run", module, system, json.dumps(params)]
    child_env = dict(os.environ)
    child_env.update(env or {})
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate(timeout=30)
        return {"ok": False, "error": f"timed out after {timeout:.0f} s",
                "stderr_tail": _tail(err), "wall_s": time.perf_counter() - t0}
    finally:
        _kill_group(proc)  # strays (DataLoader workers, dask pools) of this child only
    wall = time.perf_counter() - t0
    for line in reversed(out.splitlines()):
        if line.startswith(MARKER):
            result = json.loads(line[len(MARKER):])
            result["wall_s"] = wall
            if not result.get("ok"):
                result["stderr_tail"] = _tail(err)
            return result
    return {"ok": False, "error": f"no result line (exit status {proc.returncode})",
            "stderr_tail": _tail(err), "stdout_tail": _tail(out), "wall_s": wall}


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(text: str | None, n: int = 1500) -> str:
    return (text or "")[-n:]


def run_matrix(module: str, systems: Sequence[str], params_for: Callable[[str, int], dict],
               *, repeat: int, timeout: float, store: Path,
               env_for: Callable[[str], dict[str, str]] | None = None,
               describe: Callable[[dict[str, Any]], str] | None = None,
               before: Callable[[str], None] | None = None,
               after: Callable[[str, dict[str, Any]], None] | None = None,
               ) -> dict[str, list[dict[str, Any]]]:
    """All systems, ``repeat`` rounds, interleaved (so machine noise spreads evenly).

    ``before(system)`` runs just before a child starts, ``after(system, result)`` just after.
    """
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for r in range(repeat):
        for system in systems:
            cold = cold_cache(store)
            if before:
                before(system)
            res = run_child(module, system, params_for(system, r), timeout,
                            env_for(system) if env_for else None)
            res["cold_cache"] = cold
            res["repeat"] = r
            if after:
                after(system, res)
            runs[system].append(res)
            if res.get("ok"):
                what = describe(res) if describe else f"{res['wall_s']:.1f} s"
            else:
                what = "FAILED: " + str(res.get("error"))[:200]
            log(f"  {system:<14} run {r + 1}/{repeat}: {what}")
    return runs


# -- child side helpers ----------------------------------------------------------------------------
class RssSampler:
    """Peak RSS of this process plus its children, sampled every ``interval`` seconds."""

    def __init__(self, interval: float = 0.05) -> None:
        import psutil

        self._proc = psutil.Process()
        self._stop = threading.Event()
        self.peak = 0
        self.baseline = self.now()
        self._thread = threading.Thread(target=self._loop, args=(interval,),
                                        name="tsexplore-bench-rss", daemon=True)
        self._thread.start()

    def now(self) -> int:
        import psutil

        total = self._proc.memory_info().rss
        for child in self._proc.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total

    def mark_baseline(self) -> None:
        """Record RSS now (after imports, before the work) as the baseline."""
        self.baseline = self.now()

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.peak = max(self.peak, self.now())
            except Exception:  # noqa: BLE001 - a child vanished mid-sample
                pass

    def close(self) -> dict[str, float]:
        import resource

        self._stop.set()
        self._thread.join(1)
        self.peak = max(self.peak, self.now())
        ru_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        ru_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        return {
            "peak_rss_mb": max(self.peak, ru_self) / 1e6,
            "ru_maxrss_mb": ru_self / 1e6,
            "ru_maxrss_children_mb": ru_children / 1e6,
            "rss_tree_peak_mb": self.peak / 1e6,
            "rss_baseline_mb": self.baseline / 1e6,
        }


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of a non-empty sequence."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# -- summary -----------------------------------------------------------------------------------
def summarize(runs: dict[str, list[dict[str, Any]]], metrics: Sequence[Metric]
              ) -> dict[str, dict[str, Any]]:
    """Per system: median / min / max / p95 over the successful runs of each metric."""
    out: dict[str, dict[str, Any]] = {}
    for system, rs in runs.items():
        ok = [r for r in rs if r.get("ok")]
        entry: dict[str, Any] = {"runs_ok": len(ok), "runs": len(rs),
                                 "errors": [r.get("error") for r in rs if not r.get("ok")]}
        for m in [*metrics, RSS]:
            vals = [float(r[m.key]) for r in ok if r.get(m.key) is not None]
            if vals:
                entry[m.key] = {"median": statistics.median(vals), "min": min(vals),
                                "max": max(vals), "p95": percentile(vals, 95), "values": vals}
        out[system] = entry
    return out


def median_of(summary: dict[str, dict[str, Any]], system: str, key: str) -> float | None:
    cell = summary.get(system, {}).get(key)
    return None if cell is None else cell["median"]


def advantages(summary: dict[str, dict[str, Any]], metrics: Sequence[Metric],
               reference: str = REFERENCE) -> dict[str, dict[str, float]]:
    """``{peer: {metric: x}}``: x > 1 means tsexplore is x times better than the peer."""
    out: dict[str, dict[str, float]] = {}
    for peer in summary:
        if peer == reference:
            continue
        row = {}
        for m in [*metrics, RSS]:
            ref, other = median_of(summary, reference, m.key), median_of(summary, peer, m.key)
            if ref is None or other is None or ref <= 0 or other <= 0:
                continue
            row[m.key] = other / ref if m.better == "lower" else ref / other
        out[peer] = row
    return out


def target(name: str, value: float | None, op: str, goal: float, unit: str = "") -> dict[str, Any]:
    """A target line: ``value op goal`` (op is "<=" or ">="); ``passed`` None when not measured."""
    passed = None if value is None else (value <= goal if op == "<=" else value >= goal)
    return {"name": name, "value": value, "op": op, "goal": goal, "unit": unit, "passed": passed}


# -- output ------------------------------------------------------------------------------------
def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def environment() -> dict[str, Any]:
    """Host facts that help read a result later."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "loadavg": load, "host": platform.node()}


def document(name: str, args: argparse.Namespace, spec: DataSpec, systems: Sequence[str],
             runs: dict[str, list[dict[str, Any]]], metrics: Sequence[Metric],
             primary: str, **extra: Any) -> dict[str, Any]:
    """The JSON document of one benchmark."""
    summary = summarize(runs, metrics)
    return {
        "benchmark": name,
        "timestamp": _dt.datetime.now().isoformat(timespec="seconds"),
        "data": {"path": str(spec.path), "shape": list(spec.shape), "chunks": list(spec.chunks),
                 "dtype": "float32", "nbytes": spec.nbytes, "size": spec.size},
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "systems": list(systems),
        "environment": environment(),
        "cold_cache": cold_summary(r.get("cold_cache", {}) for rs in runs.values() for r in rs),
        "metrics": [{"key": m.key, "label": m.label, "better": m.better} for m in metrics],
        "primary": primary,
        "summary": summary,
        "advantage": advantages(summary, metrics),
        "runs": runs,
        **extra,
    }


def strip_bulky(obj: Any) -> Any:
    """The document without per-frame traces (kept in the results file only)."""
    if isinstance(obj, dict):
        return {k: strip_bulky(v) for k, v in obj.items() if k != "trace"}
    if isinstance(obj, list):
        return [strip_bulky(v) for v in obj]
    return obj


def table(doc: dict[str, Any], metrics: Sequence[Metric], title: str) -> str:
    """A plain-text table: medians per system, then tsexplore's advantage on the primary metric."""
    primary = next(m for m in metrics if m.key == doc["primary"])
    cols = [*metrics, RSS]
    header = ["system", *[m.label for m in cols], f"tsexplore vs ({primary.label})"]
    rows = []
    for system in doc["systems"]:
        entry = doc["summary"][system]
        cells = [system]
        for m in cols:
            cell = entry.get(m.key)
            cells.append(m.show(cell["median"] if cell else None))
        if system == REFERENCE:
            cells.append("(reference)")
        elif entry["runs_ok"] == 0:
            cells.append("failed")
        else:
            adv = doc["advantage"].get(system, {}).get(primary.key)
            cells.append("-" if adv is None else f"{adv:.2f}x {'better' if adv >= 1 else 'worse'}")
        if entry["runs_ok"] < entry["runs"]:
            cells[0] += f" ({entry['runs'] - entry['runs_ok']} failed)"
        rows.append(cells)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                              for i, (c, w) in enumerate(zip(r, widths)))
    lines = [title, fmt(header), fmt(["-" * w for w in widths]), *[fmt(r) for r in rows]]
    cold = doc.get("cold_cache") or {}
    if cold:
        res = cold.get("max_resident_after")
        lines.append(f"cold page cache: {' + '.join(cold['methods'])}"
                     + ("" if res is None else f"; at most {res:.1%} of the store resident after"))
    for system in doc["systems"]:
        for err in doc["summary"][system]["errors"][:1]:
            lines.append(f"{system} failed: {str(err)[:300]}")
    for t in doc.get("targets", []):
        mark = {True: "PASS", False: "MISS", None: "n/a "}[t["passed"]]
        val = "-" if t["value"] is None else f"{t['value']:.3g}"
        lines.append(f"[{mark}] {t['name']}: {val} {t['op']} {t['goal']:g} {t['unit']}".rstrip())
    return "\n".join(lines)


def report(doc: dict[str, Any], metrics: Sequence[Metric], title: str, json_only: bool) -> Path:
    """Write the results file, print the JSON document and (unless ``json_only``) the table."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = RESULTS_DIR / f"{doc['benchmark']}-{stamp}.json"
    doc["results_file"] = str(out)
    out.write_text(json.dumps(doc, indent=1, default=str))
    slim = strip_bulky(doc)
    if json_only:
        print(json.dumps(slim, default=str), flush=True)
    else:
        slim.pop("runs", None)  # per-run details are in the file
        print(json.dumps(slim, indent=1, default=str))
        print()
        print(table(doc, metrics, title))
        print(f"(full results with every run: {out.relative_to(ROOT)})")
    return out


def exit_status(doc: dict[str, Any], check: bool) -> int:
    """1 when tsexplore itself failed; 2 with ``--check`` when a measured target was missed."""
    ref = doc["summary"].get(REFERENCE)
    if ref is not None and ref["runs_ok"] == 0:
        return 1
    if check and any(t["passed"] is False for t in doc.get("targets", [])):
        return 2
    return 0
