"""``naive``: the floor the engine must beat -- a plain two-thread read + decode loop.

Two threads; each reads a chunk file and decodes it with the array's own codec through
numcodecs (``Blosc``, ``Zstd``, ``GZip``, ... as the metadata names it) into a reused buffer
(both release the GIL); the caller's thread copies the chunks' slices into the frame. Reads
run two chunk-rows (a row: every chunk of one time-chunk) ahead of a reader that moves
forward along ``time``; there is no cache beyond the rows in flight and the one in use. It
reads a local, unsharded Zarr v2 or v3 array: chunk keys, byte order, memory order (v2
``order``) and fill value as its metadata says.
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

#: chunk-rows read ahead of a reader that moves forward
AHEAD = 2
#: Zarr v3 blosc ``shuffle`` names -> numcodecs' numbers
_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


class StoredArray:
    """What naive needs of a Zarr array's metadata: shape, chunks, the stored dtype (byte
    order included), memory order, fill value, the chunk key of an index, and the codecs
    that turn a chunk file back into the chunk's bytes (numcodecs, in decode order)."""

    def __init__(self, root: str) -> None:
        self.root = root
        if os.path.exists(os.path.join(root, "zarr.json")):
            self._v3(_load(os.path.join(root, "zarr.json")))
        else:
            self._v2(_load(os.path.join(root, ".zarray")))

    def _v2(self, meta: dict[str, Any]) -> None:
        from numcodecs import get_codec

        self.zarr_format = 2
        self.shape, self.chunks = tuple(meta["shape"]), tuple(meta["chunks"])
        self.dtype = np.dtype(meta["dtype"])
        self.order = meta.get("order", "C")
        self.fill = _fill(meta.get("fill_value"), self.dtype)
        self.separator = meta.get("dimension_separator") or "."
        self.prefix: tuple[str, ...] = ()
        configs = ([meta["compressor"]] if meta.get("compressor") else [])
        configs += list(reversed(meta.get("filters") or []))
        self.codecs = [get_codec(dict(c)) for c in configs]

    def _v3(self, meta: dict[str, Any]) -> None:
        import numcodecs

        self.zarr_format = 3
        self.shape = tuple(meta["shape"])
        self.chunks = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        self.order = "C"
        endian = "little"
        self.codecs = []
        for codec in meta["codecs"]:
            name, conf = codec["name"], codec.get("configuration", {})
            if name == "bytes":
                endian = conf.get("endian", "little")
            elif name == "blosc":
                self.codecs.append(numcodecs.Blosc(
                    cname=conf["cname"], clevel=conf["clevel"],
                    shuffle=_SHUFFLE[conf.get("shuffle", "shuffle")],
                    blocksize=conf.get("blocksize", 0)))
            elif name == "zstd":
                self.codecs.append(numcodecs.Zstd(level=conf.get("level", 0),
                                                  checksum=conf.get("checksum", False)))
            elif name == "gzip":
                self.codecs.append(numcodecs.GZip(level=conf.get("level", 5)))
            elif name == "crc32c":
                self.codecs.append(numcodecs.CRC32C())
            else:
                raise ValueError(f"naive reads unsharded arrays with the bytes codec and blosc, "
                                 f"zstd, gzip or crc32c; {self.root} has codec {name!r}")
        self.codecs.reverse()  # decode order
        self.dtype = np.dtype(meta["data_type"]).newbyteorder("<" if endian == "little" else ">")
        self.fill = _fill(meta.get("fill_value"), self.dtype)
        keys = meta.get("chunk_key_encoding", {"name": "default"})
        self.separator = keys.get("configuration", {}).get(
            "separator", "/" if keys["name"] == "default" else ".")
        self.prefix = ("c",) if keys["name"] == "default" else ()

    def path(self, index: tuple[int, ...]) -> str:
        """The chunk file of grid ``index``."""
        key = self.separator.join([*self.prefix, *map(str, index)])
        return os.path.join(self.root, *key.split("/"))

    def decode_into(self, data: bytes, out: np.ndarray) -> None:
        """Decode a chunk file's bytes into ``out`` (the chunk's flat bytes, reused)."""
        if len(self.codecs) == 1:  # a compressor alone: straight into the buffer
            self.codecs[0].decode(data, out=out)
            return
        from numcodecs.compat import ensure_contiguous_ndarray

        decoded: Any = data
        for codec in self.codecs:  # v2 filters after the compressor: through their own output
            decoded = codec.decode(decoded)
        out[...] = ensure_contiguous_ndarray(decoded).view(np.uint8)

    def describe(self) -> str:
        codecs = " <- ".join(type(c).__name__ + (f"({c.cname} {c.clevel})" if hasattr(c, "cname")
                                                  else "") for c in self.codecs)
        return (f"zarr v{self.zarr_format}, {self.dtype.str}, order {self.order}, "
                f"{codecs or 'uncompressed'}")


def _load(path: str) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def _fill(value: Any, dtype: np.dtype) -> Any:
    """A Zarr fill value (v2 or v3 JSON) as a NumPy scalar."""
    if value is None:
        return np.zeros((), dtype)[()]
    if isinstance(value, str):
        special = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}
        if value in special:
            return dtype.type(special[value])
        if value.startswith("0x"):  # v3: the value's bytes in hex
            return np.frombuffer(int(value, 16).to_bytes(dtype.itemsize, "big"),
                                 dtype.newbyteorder(">"))[0]
        return np.frombuffer(base64.b64decode(value), dtype)[0]  # v2: base64 of the bytes
    return dtype.type(value)


class NaiveCube:
    """One variable of a local Zarr store, read by rows of chunks with two threads."""

    def __init__(self, path: str, variable: str, threads: int = 2) -> None:
        self.array = StoredArray(os.path.join(path, variable))
        self.shape, self.chunks = self.array.shape, self.array.chunks
        self.dtype = self.array.dtype
        #: frames come out in native byte order
        self.frame_dtype = self.dtype.newbyteorder("=")
        self.pool = cf.ThreadPoolExecutor(threads, thread_name_prefix="naive")
        self.grid = [range(0, n, c) for n, c in zip(self.shape[1:], self.chunks[1:])]
        self.rows: dict[int, tuple[list[np.ndarray], list[cf.Future]]] = {}
        self.spare: list[list[np.ndarray]] = []
        self._nbytes = int(np.prod(self.chunks)) * self.dtype.itemsize

    def describe(self) -> str:
        return self.array.describe()

    def _buffer(self) -> np.ndarray:
        """A reused chunk buffer: flat bytes, seen as the chunk in its stored dtype and order."""
        flat = np.empty(self._nbytes, np.uint8)
        return flat.view(self.dtype).reshape(self.chunks, order=self.array.order)

    def _decode(self, index: tuple[int, ...], out: np.ndarray) -> None:
        try:
            with open(self.array.path(index), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            out[...] = self.array.fill
            return
        self.array.decode_into(data, out.reshape(-1, order="A").view(np.uint8))

    def _start(self, row: int) -> None:
        """Queue the reads of chunk-row ``row`` into a reused set of buffers."""
        if row in self.rows or not 0 <= row * self.chunks[0] < self.shape[0]:
            return
        spots = list(itertools.product(*(range(len(g)) for g in self.grid)))
        bufs = self.spare.pop() if self.spare else [self._buffer() for _ in spots]
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
        out = np.empty(self.shape[1:], self.frame_dtype)
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
