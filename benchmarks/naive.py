"""``naive``: the floor the engine must beat -- a plain two-thread read + decode loop.

Two threads; each reads a chunk file and decodes it with numcodecs' ``Blosc`` into a reused
buffer (both release the GIL); the caller's thread copies the chunks' slices into the frame.
Reads run two chunk-rows (a row: every chunk of one time-chunk) ahead of a reader that moves
forward along ``time``; there is no cache beyond the rows in flight and the one in use. Only
a local Zarr v3 cube written by ``tse.sample_data`` (blosc codec, default chunk keys) is read.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

#: chunk-rows read ahead of a reader that moves forward
AHEAD = 2


class NaiveCube:
    """One variable of a local Zarr v3 store, read by rows of chunks with two threads."""

    def __init__(self, path: str, variable: str, threads: int = 2) -> None:
        from numcodecs import Blosc

        self.root = os.path.join(path, variable)
        with open(os.path.join(self.root, "zarr.json")) as f:
            meta = json.load(f)
        self.shape = tuple(meta["shape"])
        self.chunks = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        self.dtype = np.dtype(meta["data_type"])
        fill = meta.get("fill_value")
        self.fill = np.nan if fill == "NaN" else fill
        self.codec = Blosc()
        self.pool = cf.ThreadPoolExecutor(threads, thread_name_prefix="naive")
        self.grid = [range(0, n, c) for n, c in zip(self.shape[1:], self.chunks[1:])]
        self.rows: dict[int, tuple[list[np.ndarray], list[cf.Future]]] = {}
        self.spare: list[list[np.ndarray]] = []

    def _decode(self, index: tuple[int, ...], out: np.ndarray) -> None:
        name = os.path.join(self.root, "c", *map(str, index))
        try:
            with open(name, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            out[...] = self.fill
            return
        self.codec.decode(data, out=out)

    def _start(self, row: int) -> None:
        """Queue the reads of chunk-row ``row`` into a reused set of buffers."""
        if row in self.rows or not 0 <= row * self.chunks[0] < self.shape[0]:
            return
        spots = list(itertools.product(*(range(len(g)) for g in self.grid)))
        bufs = self.spare.pop() if self.spare else [
            np.empty(self.chunks, self.dtype) for _ in spots]
        futs = [self.pool.submit(self._decode, (row, *spot), buf) for spot, buf in zip(spots, bufs)]
        self.rows[row] = (bufs, futs)

    def row(self, row: int, ahead: int = AHEAD) -> list[np.ndarray]:
        """The decoded chunks of ``row`` (waited for); rows ``row+1..row+ahead`` queued."""
        for old in [r for r in self.rows if r < row or r > row + ahead]:
            bufs, futs = self.rows.pop(old)
            cf.wait(futs)
            self.spare.append(bufs)
        self._start(row)
        for r in range(row + 1, row + 1 + ahead):
            self._start(r)
        bufs, futs = self.rows[row]
        for fut in futs:
            fut.result()
        return bufs

    def frame(self, t: int, ahead: int = AHEAD) -> np.ndarray:
        """Frame ``t``: 16 chunk slices copied into a new array."""
        ct, cy, cx = self.chunks
        bufs = self.row(t // ct, ahead)
        out = np.empty(self.shape[1:], self.dtype)
        for buf, (y, x) in zip(bufs, itertools.product(*self.grid)):
            h, w = min(cy, self.shape[1] - y), min(cx, self.shape[2] - x)
            out[y:y + h, x:x + w] = buf[t % ct, :h, :w]
        return out

    def rows_in_order(self) -> Iterator[tuple[int, list[np.ndarray]]]:
        """Every chunk-row along ``time``, two ahead of the consumer."""
        for row in range(-(-self.shape[0] // self.chunks[0])):
            yield row, self.row(row)

    def mean_time(self) -> np.ndarray:
        """The mean over ``time`` (summed in float64), rows read two ahead."""
        ct, cy, cx = self.chunks
        acc = np.zeros(self.shape[1:], np.float64)
        for row, bufs in self.rows_in_order():
            n = min(ct, self.shape[0] - row * ct)
            for buf, (y, x) in zip(bufs, itertools.product(*self.grid)):
                h, w = min(cy, self.shape[1] - y), min(cx, self.shape[2] - x)
                acc[y:y + h, x:x + w] += buf[:n, :h, :w].sum(axis=0, dtype=np.float64)
        return acc / self.shape[0]

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def open_naive(url: str, variable: str) -> Any:
    """A :class:`NaiveCube` for a local path (a remote URL is refused: naive reads files)."""
    if "://" in url:
        raise ValueError("naive reads local chunk files only; drop --remote/--s3 for it")
    return NaiveCube(url, variable)
