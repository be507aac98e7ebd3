"""``.npy`` files and raw binary files through a read-only ``numpy.memmap``.

The chunk grid is virtual (about 4 MiB per chunk, leading dimensions split first, so a chunk
is usually one contiguous byte range). Before every read the file's size is checked against
the header: a file truncated under us raises :class:`TruncatedFileError` instead of killing
the process with SIGBUS.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from ..errors import SourceError, TruncatedFileError
from .base import DEFAULT_OPTIONS, ChunkIndex, SourceOptions, SyncChunkSource, normalize_chunks


class MemmapSource(SyncChunkSource):
    def __init__(
        self,
        path: str | os.PathLike[str],
        shape: tuple[int, ...],
        dtype: Any,
        offset: int = 0,
        order: str = "C",
        chunks: Any = None,
        dims: tuple[str, ...] | None = None,
        *,
        name: str | None = None,
        options: SourceOptions = DEFAULT_OPTIONS,
    ) -> None:
        self.path = os.fspath(path)
        self.name = name or os.path.splitext(os.path.basename(self.path))[0]
        self.options = options
        self.shape = tuple(int(s) for s in shape)
        self.file_dtype: np.dtype = np.dtype(dtype)  # as stored (may be big-endian)
        self.dtype = self.file_dtype.newbyteorder("=")  # chunks come out native-endian
        self.offset = int(offset)
        self.order = order
        self.dims = tuple(dims) if dims else tuple(f"dim_{i}" for i in range(len(self.shape)))
        self.chunks = normalize_chunks(chunks, self.shape, self.dims, 4 * 2**20, self.dtype.itemsize)
        self.fill_value = None
        self.attrs = {"source_file": self.path}
        self.expected_size = self.offset + math.prod(self.shape) * self.dtype.itemsize
        st = os.stat(self.path)
        if st.st_size < self.expected_size:
            raise SourceError(
                f"{self.path} has {st.st_size} bytes but its header promises "
                f"{self.expected_size}; the file is truncated"
            )
        self.token = f"memmap-{os.path.abspath(self.path)}@{st.st_mtime_ns}-{st.st_size}"
        self._mm: np.memmap | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_mm": None}

    def _map(self) -> np.memmap:
        if self._mm is None:
            self._mm = np.memmap(  # type: ignore[call-overload]
                self.path, dtype=self.file_dtype, mode="r", offset=self.offset,
                shape=self.shape, order=self.order,
            )
        return self._mm

    def read_chunk_sync(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        size = os.stat(self.path).st_size
        if size < self.expected_size:
            self._mm = None
            raise TruncatedFileError(
                f"{self.path} shrank to {size} bytes while open (expected {self.expected_size}); "
                f"chunk {tuple(index)} cannot be read. Re-open the file once it is complete",
                source=self.token,
                index=tuple(index),
            )
        data = np.array(self._map()[self.chunk_slices(index)], dtype=self.dtype, copy=True)
        return data, data.nbytes

    def close(self) -> None:
        self._mm = None


def open_npy(
    path: str | os.PathLike[str], chunks: Any = None, options: SourceOptions = DEFAULT_OPTIONS
) -> MemmapSource:
    """A :class:`MemmapSource` for a ``.npy`` file (header parsed, never loaded)."""
    from numpy.lib import format as npformat

    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            version = npformat.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = npformat.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = npformat.read_array_header_2_0(f)
            offset = f.tell()
    except (OSError, ValueError) as exc:
        raise SourceError(f"{path} is not a readable .npy file: {exc}") from exc
    if dtype.hasobject:
        raise SourceError(f"{path} holds Python objects; tsexplore reads numeric .npy files only")
    order = "F" if fortran else "C"
    return MemmapSource(path, shape, dtype, offset, order, chunks, options=options)
