"""``python -m benchmarks pyspy WORKLOAD [options]``: one workload under py-spy.

Runs ``python -m benchmarks WORKLOAD`` (scrub, scan, jump, play, overhead, ...) with each
system's child under ``py-spy record`` (``--rate`` samples/s, default 200; ``--native`` adds
C frames; ``--gil`` keeps only samples holding the GIL) and writes, per child, a speedscope
profile (open it at https://www.speedscope.app) and a text summary -- the frames with the most
*self* time, over all threads and per thread -- into ``benchmarks/results/``. The workload's
own options follow it; ``--repeat`` defaults to 1 and ``--systems`` to tsexplore here.
The summary's busy time leaves out threads that wait (their innermost Python frame is a queue,
a condition, a selector; with ``--native`` the C of the wait sits below it) and, with
``--native``, threads taking the GIL back after a C call (summed apart: contention for it).
py-spy needs ptrace rights (root, or ``kernel.yama.ptrace_scope = 0``).
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import itertools
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from . import common, runner

#: frames listed in the summary
TOP = 30
#: the innermost Python frames of a thread that waits (py-spy samples some of them as busy;
#: with ``--native`` the leaf below them is the C of the wait: a futex, ``epoll_wait``): left out
WAITING = ("EpollSelector.select ", "Condition.wait ", "_worker (", "Thread.join ",
           "Thread._wait_for_tstate_lock ", "Event.wait ", "Semaphore.acquire ")
#: C frames of a thread taking the GIL back (``--native``): left out as waiting for the GIL
GIL_WAITS = ("pthread_cond_timedwait ", "pthread_cond_wait ", "pthread_mutex_lock ")
#: the benchmark's own RSS sampler thread: left out
HARNESS = ("tsexplore-bench-rss",)


def find_pyspy() -> str:
    """The py-spy executable: beside this interpreter, else on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    found = str(here) if here.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy is not installed; pip install 'tsexplore[bench]' (or py-spy)")
    return found


def main(argv: list[str]) -> int:
    """``python -m benchmarks pyspy WORKLOAD [--rate N] [--native] [--gil] [workload options]``."""
    p = argparse.ArgumentParser(prog="python -m benchmarks pyspy", description=__doc__.split("\n\n")[0])
    p.add_argument("workload", help="the benchmark to profile (scrub, scan, jump, play, ...)")
    p.add_argument("--rate", type=int, default=200, help="samples per second (default 200)")
    p.add_argument("--native", action="store_true", help="include native (C) frames")
    p.add_argument("--gil", action="store_true", help="only samples that hold the GIL")
    args, rest = p.parse_known_args(argv)
    if args.workload in ("pyspy", "all"):
        raise SystemExit(f"pyspy profiles one workload, not {args.workload!r}")
    if "--repeat" not in rest:
        rest += ["--repeat", "1"]
    if "--systems" not in rest:
        rest += ["--systems", "tsexplore"]
    pyspy = find_pyspy()
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    written: list[tuple[str, Path]] = []
    counter = itertools.count(1)

    def wrap(system: str) -> list[str]:
        out = common.RESULTS_DIR / f"pyspy-{args.workload}-{system}-{stamp}-{next(counter)}.speedscope.json"
        written.append((system, out))
        return [pyspy, "record", "--format", "speedscope", "--output", str(out),
                "--rate", str(args.rate), *(["--native"] if args.native else []),
                *(["--gil"] if args.gil else []), "--"]

    from .__main__ import main as dispatch

    runner.wrap = wrap
    try:
        status = int(dispatch([args.workload, *rest]) or 0)
    finally:
        runner.wrap = None
    for system, path in written:
        if not path.exists():
            common.log(f"pyspy: no profile at {path} (py-spy failed? it needs ptrace rights)")
            status = max(status, 1)
            continue
        text = summarize(json.loads(path.read_text()), f"{args.workload} / {system}")
        summary = path.with_name(path.name.replace(".speedscope.json", ".txt"))
        summary.write_text(text)
        print(text)
        common.log(f"pyspy: {path}\npyspy: {summary}")
    return status


def _frame_name(frame: dict[str, Any]) -> str:
    file = str(frame.get("file") or "")
    for marker in ("site-packages/", "/tsexplore/", "/benchmarks/", "lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
            if marker in ("/tsexplore/", "/benchmarks/"):
                file = marker.strip("/") + "/" + file
            break
    line = frame.get("line")
    return f"{frame.get('name', '?')} ({file}{':' + str(line) if line else ''})"


def summarize(doc: dict[str, Any], title: str, top: int = TOP) -> str:
    """The frames with the most self time (the leaf of a sample), over all threads and per
    thread, and each thread's share of the samples, from a py-spy speedscope document."""
    frames = [_frame_name(f) for f in doc["shared"]["frames"]]
    #: samples inside an import are not the workload's (imports happen before the timing)
    imports = {i for i, f in enumerate(doc["shared"]["frames"])
               if str(f.get("file", "")).startswith("<frozen importlib")}
    #: Python frames (a ``--native`` profile adds C frames: shared libraries, addresses)
    python = {i for i, f in enumerate(doc["shared"]["frames"])
              if str(f.get("file", "")).endswith(".py") or str(f.get("file", "")).startswith("<")}
    #: CPython 3.11 takes the GIL back after a C call with a pthread mutex and condition
    #: (its ``threading`` locks wait on semaphores): a ``--native`` sample there waits for it
    gil = {i for i, name in enumerate(frames) if name.startswith(GIL_WAITS)}
    total: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    per_thread: dict[str, collections.Counter[str]] = {}
    thread_weight: collections.Counter[str] = collections.Counter()
    waited = for_gil = 0.0
    for prof in doc["profiles"]:
        name = str(prof.get("name", "?"))
        if any(h in name for h in HARNESS):
            continue
        mine = per_thread.setdefault(name, collections.Counter())
        weights = prof.get("weights") or [1] * len(prof["samples"])
        for stack, w in zip(prof["samples"], weights):
            if not stack or any(i in imports for i in stack):
                continue
            leaf = frames[stack[-1]]
            inner = next((frames[i] for i in reversed(stack) if i in python), leaf)
            if inner.startswith(WAITING):
                waited += w
                continue
            if gil.intersection(stack):
                for_gil += w
                continue
            total[leaf] += w
            mine[leaf] += w
            thread_weight[name] += w
            for f in {frames[i] for i in stack}:
                inclusive[f] += w
    n = sum(thread_weight.values()) or 1
    gil_text = f", {for_gil:.1f} s waiting for the GIL" if for_gil else ""
    lines = [f"py-spy profile: {title}; {n:.1f} s busy in all threads (left out: {waited:.1f} s "
             f"waiting{gil_text}, imports, the RSS sampler); percentages of the busy time", "",
             f"top {top} frames by self time:", "   self%   incl%  frame"]
    for frame, w in total.most_common(top):
        lines.append(f"  {100 * w / n:6.1f}  {100 * inclusive[frame] / n:6.1f}  {frame}")
    lines += ["", "threads (share of samples), with their top 8 frames by self time:"]
    for name, w in thread_weight.most_common():
        lines.append(f"  {100 * w / n:5.1f}%  {name}")
        for frame, fw in per_thread[name].most_common(8):
            lines.append(f"           {100 * fw / n:5.1f}%  {frame}")
    return "\n".join(lines) + "\n"
