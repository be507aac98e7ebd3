"""In-memory objects as sources: NumPy arrays, dask arrays and xarray variables."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from .base import (
    DEFAULT_OPTIONS,
    ChunkIndex,
    SourceOptions,
    SyncChunkSource,
    native_dtype,
    normalize_chunks,
)


def _regular_dask_chunks(chunks: tuple[tuple[int, ...], ...]) -> tuple[int, ...] | None:
    out = []
    for c in chunks:
        if not c:
            out.append(1)
            continue
        if len(c) > 1 and (len(set(c[:-1])) != 1 or c[-1] > c[0]):
            return None
        out.append(c[0])
    return tuple(out)


class ArraySource(SyncChunkSource):
    """Wraps anything with NumPy-style basic slicing (NumPy, dask, xarray Variable data)."""

    def __init__(
        self,
        array: Any,
        dims: tuple[str, ...] | None = None,
        chunks: Any = None,
        attrs: dict | None = None,
        name: str = "data",
        *,
        options: SourceOptions = DEFAULT_OPTIONS,
    ) -> None:
        self._array = array
        self.options = options
        self.shape = tuple(int(s) for s in array.shape)
        self.dtype = native_dtype(array.dtype)  # chunks come out native-endian
        self.dims = tuple(dims) if dims else tuple(f"dim_{i}" for i in range(len(self.shape)))
        native = getattr(array, "chunks", None)
        if chunks is None and isinstance(native, tuple) and native and isinstance(native[0], tuple):
            chunks = _regular_dask_chunks(native)
        self.chunks = normalize_chunks(chunks, self.shape, self.dims, 4 * 2**20, self.dtype.itemsize)
        self.attrs = dict(attrs or {})
        self.fill_value = None
        self.name = name
        self.token = f"memory-{name}-{uuid.uuid4().hex[:12]}"

    def read_chunk_sync(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        region = self._array[self.chunk_slices(index)]
        if hasattr(region, "compute"):
            region = region.compute()
        data = np.array(region, dtype=self.dtype, copy=True)
        return data, data.nbytes
