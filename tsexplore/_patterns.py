"""Access patterns that ``tse.advise`` times, and the region of the source it copies for them.

The first dim is the slider dim (time); the last two are the image plane; dims in between
are taken at index 0. A pattern is a fixed list of positional keys (same seed, same keys on
every candidate), each key one access:

- ``"scrub"``: frames 0, 1, 2, ... one after another (at most 64);
- ``"jump"``: 24 frames in random order;
- ``"viewport"``: 24 windows of 512 x 512 at random places of random frames;
- ``"profile"``: 24 pixels' series along the first dim;
- ``"patches"``: 48 windows of 16 x 64 x 64 at random places;
- ``"scan"``: the whole region once, streamed by ``tse.reduce``;
- a callable: ``fn(da)`` once per run (its result's ``nbytes``, if any, count as used bytes).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import ConfigError

PATTERNS = ("scrub", "jump", "viewport", "profile", "scan", "patches")
#: patterns of scattered accesses: each access starts with the candidate's chunks dropped from
#: the engine cache, as on an array much larger than the region copied
SCATTERED = ("jump", "viewport", "profile", "patches")
FRAME_PATTERNS = ("scrub", "jump", "profile")
VIEWPORT = 512
PATCH = (16, 64, 64)


def check_pattern(pattern: Any, ndim: int) -> str:
    """The pattern's name (``"custom"`` for a callable); a clear error for anything else."""
    if callable(pattern):
        return "custom"
    if pattern not in PATTERNS:
        raise ConfigError(f"pattern must be one of {PATTERNS} or a callable on a DataArray, got {pattern!r}")
    if ndim < 2 or (pattern in FRAME_PATTERNS and ndim < 3):
        need = 3 if pattern in FRAME_PATTERNS else 2
        raise ConfigError(f"pattern {pattern!r} needs an array of {need} or more dims, got {ndim}")
    return str(pattern)


def region_for(
    pattern: str, shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int, budget: int
) -> tuple[slice, ...]:
    """A chunk-aligned region of at most ``budget`` bytes that keeps what ``pattern`` needs:
    whole frames for frame patterns, whole series for ``"profile"``, proportions otherwise."""
    nd = len(shape)
    size = [int(s) for s in shape]
    for d in range(1, nd - 2):  # middle dims: one source chunk deep (accesses take index 0)
        size[d] = min(size[d], chunks[d])
    plane = list(range(max(0, nd - 2), nd))
    lead = [0] if nd >= 3 else []
    if pattern in ("scrub", "jump", "viewport"):
        order = [(lead, 64), (plane, 256), (lead, 8), (plane, 64)]
    elif pattern == "profile":
        order = [(plane, 64), (lead, 16), (plane, 16)]
    else:
        order = [(lead + plane, 64), (lead + plane, 16)]
    for axes, floor in order:
        while math.prod(size) * itemsize > budget:
            # halve the largest dim of the group that is still above its floor
            grow = [a for a in axes if size[a] // 2 >= min(floor, shape[a])]
            if not grow:
                break
            a = max(grow, key=lambda d: size[d])
            size[a] = _round_down(size[a] // 2, chunks[a])
    if math.prod(size) * itemsize > budget:
        raise ConfigError(
            f"budget_bytes={budget} is too small for a representative region of {shape} "
            f"(the smallest is {math.prod(size) * itemsize / 2**20:.1f} MiB); raise it"
        )
    out = []
    for d, (n, s, c) in enumerate(zip(size, shape, chunks)):
        start = 0 if (pattern == "profile" and d == 0) else (s - n) // 2 // c * c
        out.append(slice(start, start + n))
    return tuple(out)


def _round_down(n: int, chunk: int) -> int:
    """``n`` rounded down to a multiple of ``chunk`` when it is at least one chunk long."""
    return n - n % chunk if n >= chunk else max(1, n)


def keys_for(pattern: str, shape: tuple[int, ...], seed: int = 0) -> list[tuple[Any, ...]]:
    """The accesses of ``pattern`` on an array of ``shape`` (positional keys)."""
    rng = np.random.default_rng(seed)
    nd = len(shape)
    mid = (0,) * max(0, nd - 3)
    all_ = slice(None)

    def window(lengths: tuple[int, ...], axes: tuple[int, ...]) -> list[slice]:
        out = []
        for n, a in zip(lengths, axes):
            n = min(n, shape[a])
            start = int(rng.integers(0, shape[a] - n + 1))
            out.append(slice(start, start + n))
        return out

    if pattern == "scrub":
        return [(t, *mid, all_, all_) for t in range(min(shape[0], 64))]
    if pattern == "jump":
        return [(int(t), *mid, all_, all_) for t in rng.permutation(shape[0])[:24]]
    if pattern == "profile":
        cells = rng.permutation(shape[-2] * shape[-1])[:24]
        return [(all_, *mid, int(c // shape[-1]), int(c % shape[-1])) for c in cells]
    if pattern == "viewport":
        keys = []
        for _ in range(24):
            lead = (int(rng.integers(0, shape[0])), *mid) if nd >= 3 else ()
            keys.append((*lead, *window((VIEWPORT, VIEWPORT), (nd - 2, nd - 1))))
        return keys
    if pattern == "patches":
        if nd == 2:
            return [tuple(window(PATCH[1:], (0, 1))) for _ in range(48)]
        return [(window(PATCH[:1], (0,))[0], *mid, *window(PATCH[1:], (nd - 2, nd - 1)))
                for _ in range(48)]
    return [()]  # scan and callables: one access of the whole region


def run(
    da: Any, pattern: Any, keys: list[tuple[Any, ...]], max_seconds: float,
    between: Callable[[], None],
) -> tuple[int, float, int]:
    """Time the accesses on ``da``; ``(accesses done, seconds, bytes used)``.

    Stops early (after at least one access) once ``max_seconds`` of access time is spent.
    ``between`` runs after each access of a scattered pattern, outside the timing.
    """
    done, spent, used = 0, 0.0, 0
    for key in keys:
        t0 = time.perf_counter()
        if callable(pattern):
            result = pattern(da)
            nbytes = int(getattr(result, "nbytes", 0) or 0)
        elif pattern == "scan":
            from .compute import reduce

            reduce(da, "sum", progress=False)
            nbytes = int(da.nbytes)
        else:
            nbytes = int(da[key].values.nbytes)
        spent += time.perf_counter() - t0
        done += 1
        used += nbytes
        if pattern in SCATTERED:
            between()
        if spent >= max_seconds:
            break
    return done, spent, used
