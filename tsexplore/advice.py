"""``tse.advise(source, pattern)``: measured advice on chunk shape and codec for an access pattern.

It reads a few chunks through the engine to measure what one chunk costs here (latency,
decoded MB/s, compression ratio), computes the *read amplification* of the pattern on the
current grid (decoded bytes per byte the pattern actually uses) and proposes a grid for the
pattern with its amplification. Patterns: ``"scrub"`` (whole frames along the first
dimension, one after another), ``"viewport"`` (a 1024 x 1024 window of one frame),
``"scan"`` (everything, once) and ``"patches"`` (16 x 64 x 64 windows at random).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ConfigError
from .sources.base import ChunkSource

PATTERNS = ("scrub", "viewport", "scan", "patches")
TARGET_CHUNK_BYTES = 4 * 2**20


@dataclass(frozen=True)
class Advice:
    """What was measured and what is proposed for one pattern."""

    pattern: str
    dims: tuple[str, ...]
    chunks: tuple[int, ...]
    chunk_mb: float
    compression_ratio: float | None
    decode_mb_s: float
    chunk_latency_ms: float
    amplification: float
    proposed_chunks: tuple[int, ...]
    proposed_amplification: float
    notes: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        lines = [
            f"<Advice for {self.pattern!r} on dims {self.dims}",
            f"  now: chunks {self.chunks} ({self.chunk_mb:.1f} MB decoded), "
            f"read amplification x{self.amplification:.1f}",
            f"  measured: {self.chunk_latency_ms:.1f} ms per chunk, {self.decode_mb_s:.0f} MB/s "
            f"decoded" + (f", compression x{self.compression_ratio:.2f}" if self.compression_ratio else ""),
            f"  proposed: chunks {self.proposed_chunks}, read amplification "
            f"x{self.proposed_amplification:.1f}",
        ]
        lines += [f"  - {n}" for n in self.notes]
        return "\n".join(lines) + ">"


def _window(pattern: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The region one access of ``pattern`` uses."""
    nd = len(shape)
    if pattern == "scrub":
        return (1,) + shape[1:]
    if pattern == "viewport":
        return (1,) * (nd - 2) + tuple(min(1024, s) for s in shape[-2:])
    if pattern == "patches":
        base = (16, 64, 64)[-nd:] if nd <= 3 else (1,) * (nd - 3) + (16, 64, 64)
        return tuple(min(b, s) for b, s in zip(base, shape))
    return shape


def amplification(window: tuple[int, ...], chunks: tuple[int, ...], aligned: bool) -> float:
    """Decoded elements per used element when reading ``window`` from a grid of ``chunks``.

    ``aligned`` windows start on chunk boundaries; others start anywhere (expected value).
    """
    ratio = 1.0
    for w, c in zip(window, chunks):
        touched = math.ceil(w / c) if aligned else (w - 1) / c + 1
        ratio *= touched * c / w
    return ratio


def _propose(pattern: str, shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The grid with the least read amplification for ``pattern`` among chunks of
    256 KiB..16 MiB (ties: closest to 4 MiB, so per-chunk overhead stays small)."""
    window = _window(pattern, shape)
    aligned = pattern in ("scrub", "scan")
    nd = len(shape)
    leads = (1, 2, 4, 8, 16, 32, 64) if nd >= 3 else (None,)
    sides = (64, 128, 256, 512, 1024, 2048, 4096)
    best: tuple[float, float, tuple[int, ...]] | None = None
    for lead in leads:
        for side in sides:
            if nd >= 3:
                cand = (min(lead or 1, shape[0]),) + (1,) * (nd - 3) + tuple(min(side, s) for s in shape[-2:])
            elif nd == 2:
                cand = tuple(min(side, s) for s in shape)
            else:
                cand = (min(shape[0], TARGET_CHUNK_BYTES // itemsize),)
            nbytes = math.prod(cand) * itemsize
            in_range = 256 * 2**10 <= nbytes <= 16 * 2**20 or nbytes >= math.prod(shape) * itemsize
            if not in_range:
                continue
            score = (round(amplification(window, cand, aligned), 3), abs(math.log2(nbytes / TARGET_CHUNK_BYTES)), cand)
            if best is None or score[:2] < best[:2]:
                best = score
    return best[2] if best is not None else tuple(shape)


def advise(source: Any, pattern: str = "scrub", *, samples: int = 4, variable: str | None = None) -> Advice:
    """Measure ``source`` (a path, Dataset, DataArray or ChunkSource) and advise for ``pattern``."""
    if pattern not in PATTERNS:
        raise ConfigError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    src = _source_of(source, variable)
    from .engine import get_engine

    engine = get_engine()
    rng = np.random.default_rng(0)
    grid = src.grid_shape
    picks = {tuple(int(rng.integers(g)) for g in grid) for _ in range(max(1, samples))}
    before = engine.snapshot()
    t0 = time.perf_counter()
    for idx in picks:
        engine.cache.discard([engine.key(src, idx)])
        engine.fetch(src, [idx])
    elapsed = time.perf_counter() - t0
    delta = engine.snapshot() - before
    decoded = max(1, delta.bytes_decoded)
    ratio = decoded / delta.bytes_read if delta.bytes_read and delta.bytes_read != decoded else None
    window = _window(pattern, src.shape)
    aligned = pattern in ("scrub", "scan")
    now = amplification(window, src.chunks, aligned)
    proposed = _propose(pattern, src.shape, src.dtype.itemsize)
    notes = []
    if pattern == "scrub" and src.chunks[0] > 1:
        notes.append(
            f"each frame decodes {src.chunks[0]} frames; tsexplore's prefetch hides that when "
            "playing forward, but random jumps pay it in full"
        )
    if pattern == "patches":
        notes.append(
            "amplification is for windows read one by one (a DataLoader over zarr); "
            "tse.batches decodes each chunk once per epoch and draws many windows from it"
        )
    if ratio is not None and ratio < 1.3:
        notes.append("data compresses poorly; a faster codec (blosc-lz4) costs little space")
    return Advice(
        pattern=pattern,
        dims=src.dims,
        chunks=src.chunks,
        chunk_mb=src.chunk_nbytes() / 1e6,
        compression_ratio=ratio,
        decode_mb_s=decoded / elapsed / 1e6,
        chunk_latency_ms=elapsed / len(picks) * 1e3,
        amplification=now,
        proposed_chunks=proposed,
        proposed_amplification=amplification(window, proposed, aligned),
        notes=notes,
    )


def _source_of(obj: Any, variable: str | None) -> ChunkSource:
    """The source to measure: ``obj`` itself, or exactly the selection a DataArray holds."""
    if isinstance(obj, ChunkSource):
        return obj
    import xarray as xr

    from .resolve import resolve
    from .xarray import open_dataset

    if not isinstance(obj, (xr.Dataset, xr.DataArray)):
        obj = open_dataset(obj)
    if isinstance(obj, xr.Dataset):
        names = [variable] if variable else [n for n in obj.data_vars if obj[n].ndim >= 2]
        if not names:
            raise ConfigError("the dataset has no variable with 2 or more dimensions to advise on")
        obj = obj[names[0]]
    return resolve(obj).as_source()
