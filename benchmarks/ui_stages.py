"""``python -m benchmarks ui --stages``: one Explorer move in the kernel, stage by stage.

Headless (no browser, no comm: the canvas's ``send`` is a no-op and each frame is acked at
once), on the same warm 64 x N x N cube as the browser part: the time of a whole slider move
(the canvas's ``slider_value`` set, as its comm handler does) and of each stage it runs --
``read`` (the frame assembled from cached chunks), ``range`` (the robust colour range),
``quantise`` (``to_uint8``), ``histogram`` (``frame_histogram``), ``show`` (the canvas:
copy, encoding, message) -- beside the bare canvas's whole move (``show`` of a precomputed
``uint8`` frame). Times are the thread's CPU time (``time.thread_time``), p50 and p95 over
``--moves`` moves, so other programs on the machine do not count; ``wall`` is the move's
wall time too. Moves come 60 ms apart (the browser part's pace), so a frame made ahead on the
controller's thread (a steady slider: ``tsexplore.controller.ahead``) is ready; the process's
CPU time per move and pause counts that work too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _times(fn: Callable[[int], Any], n: int, pause: float = 0.0) -> dict[str, float]:
    cpu, wall, proc = [], [], []
    for i in range(n):
        t0, w0, p0 = time.thread_time(), time.perf_counter(), time.process_time()
        fn(i)
        cpu.append((time.thread_time() - t0) * 1e3)
        wall.append((time.perf_counter() - w0) * 1e3)
        if pause:
            time.sleep(pause)
        proc.append((time.process_time() - p0) * 1e3)
    return {"p50": float(np.percentile(cpu, 50)), "p95": float(np.percentile(cpu, 95)),
            "wall_p50": float(np.percentile(wall, 50)), "process_p50": float(np.percentile(proc, 50))}


def stages(path: Path, px: int, moves: int = 50) -> dict[str, Any]:
    """Per-stage CPU times of an Explorer move and the bare canvas's move (milliseconds)."""
    import tsexplore as tse
    from tsexplore.controller import frame_histogram, robust_range, to_uint8
    from tsexplore.engine.array import read_selection
    from tsexplore.ui.canvas import ImageCanvas

    ds = tse.open_dataset(str(path))
    nt = int(ds.temp.shape[0])
    _ = ds.temp.values  # warm cache, as the browser page's
    ex = ds.tse.explore(width=px, height=px, stats=False, slider="canvas", dispatch=None)
    canvas = ex.canvas
    canvas._ready = True
    canvas.send = lambda content, buffers=None: None
    engine = tse.get_engine()
    out: dict[str, Any] = {"frame": [px, px], "moves": moves}
    try:
        def move(i: int) -> None:
            canvas.slider_value = 1 + i % (nt - 1) if canvas.slider_value != 1 + i % (nt - 1) else 0
            if canvas.flow.in_flight is not None:
                canvas.flow.ack(canvas.flow.in_flight.seq)

        for i in range(5):
            move(i)
        out["explorer_move"] = _times(move, moves, PAUSE)
        ahead = getattr(ex.controller, "ahead", None)  # (an older tsexplore has none)
        out["frames_ahead"] = {"made": ahead.made, "used": ahead.used} if ahead is not None else {}
        ctl = ex.controller
        req = ctl.request()
        src = ctl.levels[req.level].source
        frames = [read_selection(src, (t, *req.key[1:]), engine=engine) for t in range(min(nt, 8))]
        pick = lambda i: frames[i % len(frames)]  # noqa: E731
        out["read"] = _times(lambda i: read_selection(src, (i % nt, *req.key[1:]), engine=engine), moves)
        out["range"] = _times(lambda i: robust_range(pick(i)), moves)
        clims = [robust_range(f) for f in frames]
        out["quantise"] = _times(lambda i: to_uint8(pick(i), clims[i % len(frames)]), moves)
        out["histogram"] = _times(lambda i: frame_histogram(pick(i), clims[i % len(frames)]), moves)
        images = [to_uint8(f, c) for f, c in zip(frames, clims)]
        hists = [frame_histogram(f, c) for f, c in zip(frames, clims)]

        def show(i: int) -> None:
            k = i % len(frames)
            canvas.show(images[k], clim=clims[k], index=i, label=f"frame {i}", hists=(hists[k],))
            canvas.flow.ack(canvas.flow.in_flight.seq)

        out["show"] = _times(show, moves)
        bare = ImageCanvas(shape=(px, px), width=px, height=px, encoding="raw", dispatch=None)
        bare._ready = True
        bare.send = lambda content, buffers=None: None
        rng = np.random.default_rng(0)
        precomputed = [rng.integers(1, 256, (px, px), dtype=np.uint8) for _ in range(8)]

        def bare_move(i: int) -> None:
            bare.show(precomputed[i % 8], index=i, label=f"frame {i}")
            bare.flow.ack(bare.flow.in_flight.seq)

        out["canvas_move"] = _times(bare_move, moves, PAUSE)
    finally:
        ex.close()
        tse.close()
    return out


STAGES = ("read", "range", "quantise", "histogram", "show")
#: seconds between two moves (the browser part's pace: 50-67 ms after each paint)
PAUSE = 0.06


def describe(s: dict[str, Any]) -> str:
    """The stages on one line each."""
    lines = [f"kernel, one move of a {s['frame'][0]}x{s['frame'][1]} frame (CPU ms, p50 / p95 of "
             f"{s['moves']}):"]
    for k in ("explorer_move", *STAGES, "canvas_move"):
        t = s[k]
        extra = f", process CPU p50 {t['process_p50']:.2f} per move and pause" if k.endswith("move") else ""
        lines.append(f"  {k:14s} {t['p50']:6.2f} / {t['p95']:6.2f}   (wall p50 {t['wall_p50']:.2f}{extra})")
    parts = sum(s[k]["p50"] for k in STAGES)
    ahead = s.get("frames_ahead") or {}
    lines.append(f"  stages sum {parts:.2f}; Explorer move - bare canvas move = "
                 f"{s['explorer_move']['p50'] - s['canvas_move']['p50']:.2f} ms at p50 (the move's "
                 f"thread; frames made ahead {ahead.get('made', '-')}, used {ahead.get('used', '-')})")
    return "\n".join(lines)
