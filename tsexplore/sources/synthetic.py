"""A synthetic array of any size: content is a deterministic function of the position.

Nothing is enumerated or allocated at open time, so a 10^15-element array opens in
microseconds. ``evaluate(region)`` computes any region directly (the tests' ground truth);
``read_chunk`` computes one chunk and optionally sleeps ``latency`` seconds first, which makes
the source a stand-in for a slow store.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

import numpy as np

from ..errors import ConfigError
from .base import DEFAULT_OPTIONS, ChunkIndex, SourceOptions, SyncChunkSource, normalize_chunks


class SyntheticSource(SyncChunkSource):
    def __init__(
        self,
        shape: tuple[int, ...],
        chunks: Any = None,
        dtype: Any = "float32",
        latency: float = 0.0,
        dims: tuple[str, ...] | None = None,
        seed: int = 0,
        *,
        name: str = "data",
        options: SourceOptions = DEFAULT_OPTIONS,
    ) -> None:
        shape = tuple(int(s) for s in shape)
        if not shape or any(s < 0 for s in shape):
            raise ConfigError(f"synthetic shape must be non-empty and non-negative, got {shape}")
        if latency < 0:
            raise ConfigError(f"latency must be >= 0 seconds, got {latency}")
        self.shape = shape
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "iuf":
            raise ConfigError(f"synthetic dtype must be an int or float type, got {self.dtype}")
        default_dims = ("time", "y", "x")[-len(shape):] if len(shape) <= 3 else None
        self.dims = tuple(dims) if dims else (default_dims or tuple(f"dim_{i}" for i in range(len(shape))))
        self.chunks = normalize_chunks(chunks, shape, self.dims, 4 * 2**20, self.dtype.itemsize)
        self.name = name
        self.options = options
        self.latency = float(latency)
        self.seed = int(seed)
        self.fill_value = None
        self.attrs = {"source": "tsexplore synthetic", "seed": seed}
        ident = f"{shape}{self.chunks}{self.dtype}{seed}".encode()
        self.token = "synthetic-" + hashlib.sha1(ident).hexdigest()[:16]

    def evaluate(self, region: tuple[slice, ...]) -> np.ndarray:
        """The content of ``region`` (slices with step 1), independent of the chunk grid."""
        axes = [np.arange(sl.start, sl.stop, dtype=np.float64) for sl in region]
        total = np.zeros(tuple(len(a) for a in axes), dtype=np.float64)
        ndim = len(axes)
        for k, a in enumerate(axes):
            period = 37.0 + 23.0 * k + self.seed
            shape = [1] * ndim
            shape[k] = len(a)
            total += np.sin(a * (2 * math.pi / period) + k).reshape(shape)
        # a little texture that depends on every coordinate (integer hash, wraps around)
        h = np.zeros(total.shape, dtype=np.uint64)
        for k, a in enumerate(axes):
            shape = [1] * ndim
            shape[k] = len(a)
            h = h ^ (a.astype(np.uint64) * np.uint64(2654435761 + 97 * k)).reshape(shape)
        total += (h % np.uint64(1000)).astype(np.float64) / 10000.0
        if self.dtype.kind in "iu":
            info = np.iinfo(self.dtype)
            total = np.clip(np.round(total * 10), info.min, info.max)
        return total.astype(self.dtype)

    def read_chunk_sync(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        if self.latency:
            time.sleep(self.latency)
        data = self.evaluate(self.chunk_slices(index))
        return data, data.nbytes
