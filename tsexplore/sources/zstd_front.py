"""Parts of zstd chunks: a box decoded from the front of the chunk's stream only.

A zstd chunk (Zarr v3's default codec, numcodecs' ``Zstd``) is one stream with no table of
blocks: byte ``n`` of the decoded chunk comes out after every byte before it, and the
stored bytes that hold it are a front of the stored object. A box that ends before the
chunk does (a frame of a chunk deep along time) needs only that front: the stored bytes up
to where the decoder has written the box's last byte, decoded up to there.

:class:`ZstdFronts` is the ``blocks`` of a Zarr array whose chunks are C-ordered zstd frames
in local files (with C-Blosc2's bundled Zstandard loaded: :func:`._cblosc2.zstd_stream`).
For a :class:`~.requests.Blocks` request it answers the pipeline's questions:

- **worth**: any box that is not the whole chunk;
- **locate**: the chunk's :class:`Front` -- what its stream decoded so far and the decoder's
  state, kept in the encoded tier under ``AuxKey(token, "front", index)`` -- answers a box it
  covers with no read; else the stored bytes from where the front stopped (the object's
  start when there is none) to an estimate of where the box's end is: the stored / decoded
  ratio the array's fronts showed (until one did, 1: zstd stores a block raw when it does not
  shrink) with a margin and one whole block. The range may run past the object's end
  (``open_end``): the object is shorter than the estimate near its end;
- **decode**: the front goes on with those bytes, as far as they take it (past the box
  when they hold more), and the box is copied out of it. A whole chunk whose front the
  cache holds is the rest of the object, decoded on from there (:meth:`ZstdFronts.locate_whole`). Bytes that end before the box does
  (a short estimate) raise :class:`~.requests.MoreBytes` with the next range, read in another
  round; a stream that ends before the chunk, decodes to more than the chunk or fails to
  decode is a :class:`~tsexplore.errors.CorruptChunkError`.

The engine keeps a front in the encoded tier and answers the parts it covers from it without
a read (:meth:`ZstdFronts.held`). So random frames of a chunk read and decode it once, front
to back, as far as the deepest frame asked for, instead of the whole chunk at the first
frame; a front that reaches the chunk's end is the whole chunk (``Front.whole``), which the
engine keeps in the decoded tier instead.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import CorruptChunkError
from . import buffers
from ._cblosc2 import ZstdStream
from .bytes import ByteRange
from .codecs import zstd_content_size
from .requests import AuxKey, Box, ChunkIndex, Located, MoreBytes, Resumable

#: the largest zstd block (``ZSTD_BLOCKSIZE_MAX``) and its header: the block that holds a
#: box's last byte is decoded only once it is read whole
BLOCK = (128 << 10) + 3
#: a frame header is at most this long
FRAME_HEADER = 18
#: margin on the learned stored / decoded ratio (the ratio varies along a chunk)
MARGIN = 1.1


class Front(Resumable):
    """The decoded front of one chunk's zstd stream and the decoder's state to go on with it.

    ``out`` is the whole chunk's buffer (the decoder writes into it in place, so the context
    keeps no window of its own); ``done`` bytes of it are decoded, from the first
    ``consumed`` stored bytes. Pages of ``out`` are made only as far as the stream goes
    (each feed makes those its bytes will take, in one call).
    One decode at a time (``lock``); the decoder is freed with the front."""

    __slots__ = ("aux", "out", "done", "consumed", "size", "ended", "whole", "failed", "lock", "_stream",
                 "_ptr", "__weakref__")

    def __init__(self, aux: AuxKey, nbytes: int, stream: ZstdStream) -> None:
        self.aux = aux
        self.out = buffers.empty(nbytes, populate=False)
        self.done = 0
        self.consumed = 0
        self.size: int | None = None  # the stored object's size, once a read came back short
        self.ended = False  # the stream decoded to the chunk's end
        self.whole: np.ndarray | None = None  # then the chunk's values, as the source gives them
        self.failed: CorruptChunkError | None = None
        self.lock = threading.Lock()
        self._stream = stream
        self._ptr = stream.create()
        if not self._ptr:
            raise MemoryError("Zstandard could not make a decoding context")
        weakref.finalize(self, stream.free, self._ptr)

    @property
    def nbytes(self) -> int:
        """Bytes the front holds: the chunk's buffer and the decoder's context."""
        return self.out.nbytes + self._stream.sizeof(self._ptr)

    def feed(self, data: Any, at: int, ends: bool, where: object) -> None:
        """Go on decoding with stored bytes ``data``, which start at byte ``at`` of the object
        (bytes before :attr:`consumed` are skipped); ``ends``: the object ends with them.
        Call with :attr:`lock` held."""
        if self.failed is not None:
            raise self.failed
        view = np.frombuffer(data, dtype=np.uint8) if len(data) else np.empty(0, dtype=np.uint8)
        if ends:
            self.size = at + view.size
        skip = self.consumed - at
        if skip < 0 or skip >= view.size or self.ended:
            return  # bytes another decode of this front went past, or after a gap (read again)
        view = view[skip:]
        if self.consumed == 0:
            self._check_header(view, where)
        stream, out = self._stream, self.out
        ratio = self.consumed / self.done if self.done else 1.0
        buffers.make_pages(out, self.done, min(out.nbytes, self.done + int(view.size / max(ratio, 0.01))))
        src, pos = view.ctypes.data, 0
        while pos < view.size:
            code, done, used = stream.decompress(self._ptr, out.ctypes.data, out.nbytes, self.done, src,
                                                 view.size, pos)
            if stream.is_error(code):
                self.failed = CorruptChunkError(
                    f"{where}: the zstd stream cannot be decoded past stored byte {self.consumed + pos} "
                    f"({stream.error_name(code)})")
                raise self.failed
            progress = used > pos or done > self.done
            self.consumed += used - pos
            self.done, pos = done, used
            if code == 0 and done == out.nbytes:
                self.ended = True
                return
            if not progress:
                break

    def _check_header(self, view: np.ndarray, where: object) -> None:
        try:
            size = zstd_content_size(view[:FRAME_HEADER].tobytes())
        except ValueError as exc:
            self.failed = CorruptChunkError(f"{where}: {exc}")
            raise self.failed from exc
        if size is not None and size != self.out.nbytes:
            self.failed = CorruptChunkError(
                f"{where}: zstd frame says {size} decoded bytes, expected {self.out.nbytes}")
            raise self.failed


class ZstdFronts:
    """Reads boxes of the chunks of one zstd-compressed array (chunks of ``shape``, stored as
    ``dtype``, byte order included) from the fronts of their streams."""

    #: a reader's parts go to the read threads (each front is a read and a decode of up to
    #: the whole chunk: several run at once, the disk reading one while another decodes)
    inline = False

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, stream: ZstdStream,
                 finish: Callable[[np.ndarray, ChunkIndex], np.ndarray]) -> None:
        self.shape = tuple(shape)  # stored chunks are whole, also at the edges
        self.dtype = np.dtype(dtype)
        self.stream: ZstdStream | None = stream  # None: unpickled where it is not loaded
        #: a whole decoded chunk (stored shape and dtype) as the source gives it (trimmed at
        #: the edges, in native byte order)
        self._finish = finish
        self.ratio: float | None = None  # stored / decoded bytes of the last front (:meth:`_learn`)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "stream": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        from ._cblosc2 import zstd_stream

        self.__dict__.update(state)
        self.stream = zstd_stream()

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def end(self, box: Box) -> int:
        """One past the last decoded byte of the chunk that ``box`` needs (C order)."""
        last = 0
        for (_, hi), n in zip(box, self.shape):
            last = last * n + (hi - 1)
        return (last + 1) * self.dtype.itemsize

    # -- planning ----------------------------------------------------------------------------
    def worth(self, box: Box, shape: tuple[int, ...] | None = None) -> bool:
        """Whether ``box`` is a part at all: any box but the whole (stored) chunk."""
        return self.stream is not None and any(lo > 0 or hi < n for (lo, hi), n in zip(box, self.shape))

    # -- locate ------------------------------------------------------------------------------
    def stored_for(self, front: Front | None, need: int, ratio: float | None) -> ByteRange:
        """The stored bytes to read for the decoded bytes up to ``need``: from where the
        front stopped to an estimate (``ratio``; None: a stream of raw blocks). A front
        extended again reads at least as far again as it holds: frames asked for one after
        another (a scrub's first frames, before it reads whole chunks) take the chunk in a
        few reads, not one per frame."""
        start, done = (0, 0) if front is None else (front.consumed, front.done)
        span = max(0, need - done, done)  # a front extended again at least doubles
        blocks = math.ceil(span / (BLOCK - 3)) + 1
        guess = span * ratio * MARGIN if ratio is not None else span + 3 * blocks
        stop = start + math.ceil(guess) + BLOCK + (FRAME_HEADER if start == 0 else 0)
        if front is not None and front.size is not None:
            stop = min(stop, front.size)
        return ByteRange(start, stop, open_end=True)

    def locate(self, token: str, index: ChunkIndex, box: Box, key: str, aux: Any,
               ranges_pay: Any = None) -> Located:
        """The chunk's front answers ``box`` when it covers it (no bytes to read); else the
        stored bytes that take it there."""
        name = AuxKey(token, "front", index)
        front = aux(name)
        need = self.end(box)
        if front is not None and (front.done >= need or front.ended):
            return Located(key, (), front)
        rng = self.stored_for(front, need, self.ratio)
        return Located(key, (rng,), self._front(name) if front is None else front)

    def _front(self, aux: AuxKey) -> Front:
        if self.stream is None:  # parts are planned only with the decoder loaded (``worth``)
            raise RuntimeError("Zstandard's streaming decoder is not loaded in this process")
        return Front(aux, self.nbytes, self.stream)

    def _learn(self, front: Front) -> None:
        """The stored / decoded ratio from ``front``: exact once it ended (its stored size), else
        a low bound (the decoder holds up to a block of the bytes it took without output yet),
        taken once it decoded a few blocks' worth."""
        if front.ended and front.size is not None:
            self.ratio = front.size / front.out.nbytes
        elif front.done >= 4 * BLOCK:
            self.ratio = max(0.01, (front.consumed - BLOCK) / front.done)

    def held(self, request: Any, look: Any) -> np.ndarray | None:
        """The values of part ``request`` when the cache holds its chunk's front as far as
        it (``look``: the cache's), else None: a read-only view for the reader, which the
        cache does not keep."""
        front = look(AuxKey(request.array, "front", request.index))
        if front is None:
            return None
        box = request.box
        with front.lock:
            if front.done < self.end(box) and not front.ended:
                return None
            return self._cut(front, box, copy=False)

    def _cut(self, front: Front, box: Box, copy: bool) -> np.ndarray:
        """``box`` of ``front``: a copy (values a read may keep in the cache, counted for their
        own bytes), or a read-only view for a reader (the decoder only ever writes past
        :attr:`Front.done`; the view keeps the buffer alive while the reader holds it)."""
        chunk = front.out.view(self.dtype).reshape(self.shape)
        piece = chunk[tuple(slice(lo, hi) for lo, hi in box)]
        if copy:
            values = buffers.empty(piece.nbytes).view(self.dtype).reshape(piece.shape)
            values[...] = piece
            return values
        piece.flags.writeable = False
        return piece

    def locate_whole(self, token: str, index: ChunkIndex, key: str, aux: Any) -> Located:
        """A whole chunk: the object, whole; or, when the cache holds the chunk's front, the
        rest of its bytes, decoded on from where the front stopped."""
        front = aux(AuxKey(token, "front", index))
        if front is None:
            return Located(key)
        return Located(key, (ByteRange(front.consumed),), front)

    # -- decode ------------------------------------------------------------------------------
    def decode(self, located: Located, data: list[Any], index: ChunkIndex, box: Box | None,
               where: object) -> tuple[np.ndarray, int]:
        """The values of ``box`` (stored dtype; None: the whole chunk as the source gives it)
        and the bytes decoded for them. ``located`` holds the front to go on with, or none:
        ``data`` is the whole stored chunk (held in the encoded tier), decoded as far as the
        box by a front of its own."""
        front = located.how
        if front is None:
            front = self._front(AuxKey("", "front", index))
        need = self.nbytes if box is None else self.end(box)
        with front.lock:
            before = front.done
            if data:
                rng = located.ranges[0] if located.ranges else None  # None: the whole object
                ends = rng is None or rng.stop is None or len(data[0]) < len(rng)
                front.feed(data[0], 0 if rng is None else rng.start, ends, where)
            if not (front.ended if box is None else (front.done >= need or front.ended)):
                if front.size is not None and front.consumed >= front.size:
                    front.failed = CorruptChunkError(
                        f"{where}: the zstd stream ends at stored byte {front.size} after "
                        f"{front.done} decoded bytes, expected {front.out.nbytes}")
                    raise front.failed
                raise MoreBytes(Located(located.key, (self.stored_for(front, need, None),), front))
            self._learn(front)
            if front.ended and front.whole is None:
                front.whole = self._finish(front.out.view(self.dtype).reshape(self.shape), index)
            values = front.whole if box is None else self._cut(front, box, copy=True)
        return values, front.done - before
