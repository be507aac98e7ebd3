"""Bounded chunk decoding: check the decoded size *before* allocating, name the chunk on error.

Covers the codec chains that real stores use (blosc, zstd, gzip/zlib, lz4 and none, with an
optional crc32c checksum). A chain outside this set is decoded by zarr itself. Blosc frames
are decoded by C-Blosc2 when the ``blosc2`` wheel is installed (see :mod:`._cblosc2`).
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CorruptChunkError
from . import buffers
from ._cblosc2 import decoder

ZSTD_MAGIC = 0xFD2FB528


def blosc_nbytes(buf: bytes | memoryview) -> int:
    """Decoded size stored in a blosc header (bytes 4..8)."""
    if len(buf) < 16:
        raise ValueError("blosc buffer shorter than its 16-byte header")
    return struct.unpack_from("<I", buf, 4)[0]


def zstd_content_size(buf: bytes | memoryview) -> int | None:
    """Frame content size from a zstd frame header, or None when the frame omits it."""
    if len(buf) < 5 or struct.unpack_from("<I", buf, 0)[0] != ZSTD_MAGIC:
        raise ValueError("not a zstd frame (bad magic number)")
    fhd = buf[4]
    fcs_flag = fhd >> 6
    single_segment = (fhd >> 5) & 1
    dict_flag = fhd & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    size = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if size == 0:
        return None
    if len(buf) < pos + size:
        raise ValueError("zstd frame header is truncated")
    value = int.from_bytes(bytes(buf[pos : pos + size]), "little")
    return value + 256 if size == 2 else value


@dataclass(frozen=True)
class CodecChain:
    """What is needed to turn a stored chunk into an array, without zarr's machinery."""

    compressor: Any  # a numcodecs codec or None
    dtype: np.dtype  # dtype as stored (may be big-endian)
    order: str = "C"
    crc32c: bool = False

    def decode(self, buf: bytes | memoryview, chunk_shape: tuple[int, ...], where: object,
               out: np.ndarray | None = None) -> np.ndarray:
        """``buf`` decoded into a fresh (recycled) buffer, or into ``out`` (``uint8``, of the
        decoded size: a scratch the caller copies from); ``where`` names the chunk in errors
        (formatted only then)."""
        expected = math.prod(chunk_shape) * self.dtype.itemsize
        data: Any = buf
        if self.crc32c:
            data = _check_crc32c(buf, where)
        if out is None:
            out = _buffer(expected)
        comp = self.compressor
        try:
            if comp is None:
                if len(data) != expected:
                    raise CorruptChunkError(
                        f"{where}: stored chunk has {len(data)} bytes, expected {expected}"
                    )
                out[:] = np.frombuffer(data, dtype=np.uint8)
            else:
                cid = comp.codec_id
                if cid == "blosc":
                    n = blosc_nbytes(data)
                    if n != expected:
                        raise CorruptChunkError(
                            f"{where}: blosc header says {n} decoded bytes, expected {expected}"
                        )
                    fast = decoder()
                    if fast is None:
                        comp.decode(data, out=out)
                    elif fast(data, out) != expected:
                        raise CorruptChunkError(f"{where}: blosc cannot decode the stored bytes")
                elif cid == "zstd":
                    fcs = zstd_content_size(data)
                    if fcs is not None and fcs != expected:
                        raise CorruptChunkError(
                            f"{where}: zstd frame says {fcs} decoded bytes, expected {expected}"
                        )
                    comp.decode(data, out=out)  # bounded by ``out`` even without a size
                elif cid in ("gzip", "zlib"):
                    wbits = 31 if cid == "gzip" else 15
                    d = zlib.decompressobj(wbits)
                    raw = d.decompress(data, expected + 1)
                    if len(raw) != expected or not d.eof:
                        raise CorruptChunkError(
                            f"{where}: {cid} stream decodes to "
                            f"{'more than ' if len(raw) > expected else ''}{len(raw)} bytes, "
                            f"expected {expected}"
                        )
                    out[:] = np.frombuffer(raw, dtype=np.uint8)
                else:
                    decoded = np.frombuffer(comp.decode(data), dtype=np.uint8)
                    if decoded.size != expected:
                        raise CorruptChunkError(
                            f"{where}: {cid} decodes to {decoded.size} bytes, expected {expected}"
                        )
                    out[:] = decoded
        except CorruptChunkError:
            raise
        except Exception as exc:  # noqa: BLE001 - any codec failure is a corrupt chunk
            raise CorruptChunkError(f"{where}: cannot decode the stored bytes ({exc})") from exc
        arr = out.view(self.dtype).reshape(chunk_shape, order=self.order)  # type: ignore[call-overload]
        if not self.dtype.isnative:
            arr = arr.astype(self.dtype.newbyteorder("="))
        elif self.order == "F":
            arr = np.ascontiguousarray(arr)
        return arr


def _check_crc32c(buf: bytes | memoryview, where: object) -> memoryview:
    from numcodecs import CRC32C

    if len(buf) < 4:
        raise CorruptChunkError(f"{where}: chunk shorter than its crc32c checksum")
    try:
        return memoryview(CRC32C().decode(buf))
    except Exception as exc:  # noqa: BLE001
        raise CorruptChunkError(f"{where}: crc32c checksum mismatch ({exc})") from exc


def chain_from_zarr(metadata: Any) -> CodecChain | None:
    """A :class:`CodecChain` for a zarr array's metadata, or None if zarr must decode."""
    if getattr(metadata, "zarr_format", None) == 2:
        if metadata.filters:
            return None
        comp = metadata.compressor
        if comp is not None and not hasattr(comp, "codec_id"):
            return None
        dtype = np.dtype(metadata.dtype.to_native_dtype())
        if dtype.kind not in "biufc":
            return None
        return CodecChain(comp, dtype, metadata.order)
    return chain_from_codecs(metadata.codecs, np.dtype(metadata.dtype.to_native_dtype()))


def chain_from_codecs(codecs: Any, native: np.dtype) -> CodecChain | None:
    """A :class:`CodecChain` for a Zarr v3 codec list (``bytes``, then at most one of
    blosc/zstd/gzip, then an optional ``crc32c``) over ``native`` values, or None.

    Also decodes what a shard keeps besides its chunks: the inner chunks' codecs and the
    shard index's (``bytes`` + ``crc32c`` over ``uint64`` pairs).
    """
    import numcodecs
    from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec

    codecs = list(codecs)
    if not codecs or not isinstance(codecs[0], BytesCodec):
        return None
    if native.kind not in "biufc":
        return None
    endian = getattr(codecs[0].endian, "value", codecs[0].endian)
    dtype = native.newbyteorder("<" if endian == "little" else ">") if native.itemsize > 1 else native
    crc = False
    if codecs and isinstance(codecs[-1], Crc32cCodec):
        crc = True
        codecs = codecs[:-1]
        try:
            from numcodecs import CRC32C  # noqa: F401
        except ImportError:
            return None
    rest = codecs[1:]
    if not rest:
        return CodecChain(None, dtype, "C", crc)
    if len(rest) != 1:
        return None
    c = rest[0]
    if isinstance(c, BloscCodec):
        shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[str(getattr(c.shuffle, "value", c.shuffle))]
        cname = getattr(c.cname, "value", c.cname)
        comp = numcodecs.Blosc(cname=cname, clevel=c.clevel, shuffle=shuffle, blocksize=c.blocksize)
    elif isinstance(c, ZstdCodec):
        comp = numcodecs.Zstd(level=c.level, checksum=c.checksum)
    elif isinstance(c, GzipCodec):
        comp = numcodecs.GZip(level=c.level)
    else:
        return None
    return CodecChain(comp, dtype, "C", crc)


#: free buffers of its size a decoded chunk leaves to the frames readers assemble
SPARE_FOR_READERS = 2


def _buffer(nbytes: int) -> np.ndarray:
    """A fresh, uninitialised output buffer for one decoded chunk (see :mod:`.buffers`)."""
    return buffers.empty(nbytes, SPARE_FOR_READERS)
