"""Children: each system runs in ``python -m benchmarks._run`` with a timeout.

:func:`run_matrix` drops the page cache and runs every system ``repeat`` times, interleaved;
:class:`RssSampler` (used in the child) records the peak memory of the child's process tree.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import MARKER, ROOT, join_label, log, split_label

#: ``--warm``: read the store's files before each child instead of evicting them
warm = False


@dataclass(frozen=True)
class Arm:
    """One side of an A/B run (``python -m benchmarks ab``): tsexplore's systems run once per
    arm, alternating. ``variant`` tags the label (``tsexplore@443a17c``; None: the label
    unchanged); ``code`` is a folder holding the ``tsexplore`` package the child imports
    instead of the checkout's (None: the checkout's)."""

    variant: str | None
    code: str | None


#: set by ``benchmarks ab``: every tsexplore system runs once per arm
arms: list[Arm] = []
#: the environment variable that points a child at another tsexplore (see ``_run.py``)
CODE_ENV = "TSEXPLORE_BENCH_CODE"
#: when set (``python -m benchmarks pyspy``), the command line every child runs under:
#: ``wrap(system)`` -> the words put before ``python -m benchmarks._run ...``
wrap: Callable[[str], list[str]] | None = None


def warm_cache(store: Path) -> dict[str, Any]:
    """Read every file of ``store`` (so the page cache holds it); how much is resident."""
    from .pagecache import resident_fraction, store_files

    files = store_files(store)
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 22):
                pass
    return {"warm": True, "resident_after": resident_fraction(files)}


def run_child(module: str, system: str, params: dict[str, Any], timeout: float,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one system in a fresh interpreter; its result dict (``ok`` False on any failure)."""
    cmd = [sys.executable, "-m", "benchmarks._run", module, system, json.dumps(params)]
    if wrap is not None:
        cmd = [*wrap(system), *cmd]
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
               *, repeat: int, timeout: float, store: Path, drop_caches: bool = True,
               env_for: Callable[[str], dict[str, str]] | None = None,
               describe: Callable[[dict[str, Any]], str] | None = None,
               before: Callable[[str], None] | None = None,
               after: Callable[[str, dict[str, Any]], None] | None = None,
               ) -> dict[str, list[dict[str, Any]]]:
    """All systems, ``repeat`` rounds, interleaved (so machine noise spreads evenly).

    ``systems`` are labels: a system name, optionally followed by a space and a tag (``naive
    seed=3``); the child runs the system, and ``params_for(label, r)``, ``env_for(label)``,
    ``before(label)`` and ``after(label, result)`` get the label. Under an A/B run
    (:data:`arms`) every tsexplore label runs once per arm, as ``tsexplore@<variant> <tag>``,
    the callbacks still getting the arm-less label; the arms' order turns round by round.
    """
    from .pagecache import cold_cache

    def plan(r: int) -> list[tuple[str, str, Arm | None]]:
        """Round ``r``: (label in the results, label asked, arm); the arms take turns at
        going first, so no version always runs first or last in a round."""
        out: list[tuple[str, str, Arm | None]] = []
        turn = arms[r % len(arms):] + arms[:r % len(arms)] if arms else []
        for label in systems:
            system, _variant, tag = split_label(label)
            if turn and system.startswith("tsexplore"):
                out += [(join_label(system, arm.variant, tag), label, arm) for arm in turn]
            else:
                out.append((label, label, None))
        return out

    runs: dict[str, list[dict[str, Any]]] = {shown: [] for shown, _, _ in plan(0)}
    for r in range(repeat):
        for shown, label, arm in plan(r):
            cold = warm_cache(store) if warm else cold_cache(store, drop_caches)
            if before:
                before(label)
            env = dict(env_for(label)) if env_for else {}
            if arm is not None and arm.code:
                env[CODE_ENV] = arm.code
            res = run_child(module, split_label(label)[0], params_for(label, r), timeout, env)
            res["cold_cache"] = cold
            res["repeat"] = r
            if after:
                after(label, res)
            runs[shown].append(res)
            if res.get("ok"):
                what = describe(res) if describe else f"{res['wall_s']:.1f} s"
            else:
                what = "FAILED: " + str(res.get("error"))[:200]
            log(f"  {shown:<20} run {r + 1}/{repeat}: {what}")
    return runs


class RssSampler:
    """Peak memory of this process tree, sampled every ``interval`` seconds.

    The tree's memory is this process's RSS plus each child's USS (the pages only that
    child holds), so pages a forked worker shares with its parent are counted once.
    """

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
                total += child.memory_full_info().uss
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
        """The peak: the sampled tree peak or, when higher, this process's own high-water RSS
        (``VmHWM``). ``ru_maxrss`` is reported but not used: Linux carries it over ``exec``
        from the forking parent, so a child of a big parent reports the parent's RSS."""
        import resource

        self._stop.set()
        self._thread.join(1)
        self.peak = max(self.peak, self.now())
        hwm = _vm_hwm()
        ru_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        ru_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        return {
            "peak_rss_mb": max(self.peak, hwm or 0) / 1e6,
            "vm_hwm_mb": None if hwm is None else hwm / 1e6,
            "ru_maxrss_mb": ru_self / 1e6,
            "ru_maxrss_children_mb": ru_children / 1e6,
            "rss_tree_peak_mb": self.peak / 1e6,
            "rss_baseline_mb": self.baseline / 1e6,
        }


def _vm_hwm() -> int | None:
    """This process's high-water resident set (``VmHWM`` in /proc/self/status), in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class Usage:
    """This process's minor page faults and CPU time (user + system, every thread) from
    creation to :meth:`per`: ``with`` nothing, just ``u = Usage(); work; u.per(frames)``."""

    def __init__(self) -> None:
        import resource

        self._ru = resource.getrusage(resource.RUSAGE_SELF)

    def per(self, n: int, unit: str = "frame") -> dict[str, float]:
        """``faults_per_<unit>``, ``major_faults``, ``cpu_ms_per_<unit>`` and ``cpu_s`` since
        creation, over ``n`` units of work."""
        import resource

        now, was = resource.getrusage(resource.RUSAGE_SELF), self._ru
        cpu = (now.ru_utime - was.ru_utime) + (now.ru_stime - was.ru_stime)
        n = max(1, n)
        return {f"faults_per_{unit}": (now.ru_minflt - was.ru_minflt) / n,
                "major_faults": float(now.ru_majflt - was.ru_majflt),
                f"cpu_ms_per_{unit}": cpu / n * 1e3, "cpu_s": cpu}


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of a non-empty sequence."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
