"""Decode blosc chunks with C-Blosc2, called through ``ctypes`` so the GIL is released.

C-Blosc2 reads the blosc1 frames that Zarr stores hold and decodes them markedly faster
than the C-Blosc 1 bundled with numcodecs (on the zstd + shuffle chunks of the benchmark
cube about 0.85 GB/s per core against 0.55). The ``blosc2`` wheel ships the shared library;
it is loaded directly (importing the ``blosc2`` Python package costs about 0.4 s and its
``decompress`` holds the GIL), with one decompression context per thread so that the
engine's read threads decode in parallel.

:func:`decoder` returns None when the library is missing or fails its self-test; callers
then fall back to numcodecs. :func:`item_decoder` is C-Blosc2's ``blosc2_getitem_ctx``: it
decodes only the blocks that hold a range of items (see :mod:`.blosc_partial`).
:func:`stream_decoder` gives the two pieces of a block's decode that C-Blosc2 exports, for
decoding only the front of a block (:func:`.blosc_partial.decode_box`): the LZ4 library it
bundles (``LZ4_decompress_safe_partial``: a stream decoded up to a given length, no further)
and its byte unshuffle (``blosc2_unshuffle``). :func:`zstd_stream` gives the streaming
decoder of the Zstandard library it bundles, for decoding only the front of a zstd chunk
(:mod:`.zstd_front`).
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import struct
import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

DecodeFn = Callable[[object, np.ndarray], int]
#: ``getitem(src, start, nitems, dest_address, dest_nbytes) -> decoded bytes or < 0``
ItemsFn = Callable[[np.ndarray, int, int, int, int], int]


class Streams(NamedTuple):
    """C functions on raw addresses (``ctypes`` lets go of the GIL for each call)."""

    #: ``lz4_front(src, dest, src_nbytes, nbytes) -> bytes decoded``: the first ``nbytes`` of
    #: the LZ4 block ``src`` (fewer, or < 0: corrupt). It copies a match byte by byte, so a
    #: stream of long matches is decoded quicker whole.
    lz4_front: Callable[[int, int, int, int], int]
    #: ``lz4_whole(src, dest, src_nbytes, capacity) -> bytes decoded`` (< 0: corrupt)
    lz4_whole: Callable[[int, int, int, int], int]
    #: ``unshuffle(typesize, nbytes, src, dest) -> nbytes or < 0``: blosc's byte unshuffle of
    #: ``nbytes`` (``typesize`` streams of ``nbytes / typesize`` bytes, one after the other)
    unshuffle: Callable[[int, int, int, int], int]


class _DParams(ctypes.Structure):
    """``blosc2_dparams`` of C-Blosc2 2.x/3.x (passed by value to ``blosc2_create_dctx``)."""

    _fields_ = [
        ("nthreads", ctypes.c_int16),
        ("schunk", ctypes.c_void_p),
        ("postfilter", ctypes.c_void_p),
        ("postparams", ctypes.c_void_p),
        ("typesize", ctypes.c_int32),
    ]


class ZstdStream(NamedTuple):
    """Zstandard's streaming decoder, on raw addresses (``ctypes`` lets go of the GIL)."""

    #: ``create() -> context``: a decoding context that writes straight into the caller's
    #: output buffer (``ZSTD_d_stableOutBuffer``: no window buffer of its own); 0 on failure
    create: Callable[[], int]
    #: ``free(context)``
    free: Callable[[int], None]
    #: ``decompress(context, dest, capacity, dest_pos, src, src_nbytes, src_pos) -> (code,
    #: dest_pos, src_pos)``: goes on decoding; ``dest`` and ``capacity`` must be the same at
    #: every call of a context. ``code`` 0: the frame is decoded to its end; an error when
    #: ``is_error(code)``
    decompress: Callable[[int, int, int, int, int, int, int], tuple[int, int, int]]
    is_error: Callable[[int], bool]
    error_name: Callable[[int], str]
    #: ``sizeof(context)``: the bytes a context holds
    sizeof: Callable[[int], int]


_lock = threading.Lock()
_zstd: ZstdStream | None = None
_loaded: DecodeFn | None = None
_items: ItemsFn | None = None
_streams: Streams | None = None
_tried = False


def _library_path() -> str | None:
    spec = importlib.util.find_spec("blosc2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(folder, "lib", "libblosc2.so*")))
        found += sorted(glob.glob(os.path.join(folder, "lib", "libblosc2*.dylib")))
        if found:
            return found[0]
    return None


def _load(lib: ctypes.CDLL) -> tuple[DecodeFn, ItemsFn, Streams | None] | None:
    lib.blosc2_init.restype = None
    lib.blosc2_init.argtypes = []
    lib.blosc2_create_dctx.restype = ctypes.c_void_p
    lib.blosc2_create_dctx.argtypes = [_DParams]
    lib.blosc2_decompress_ctx.restype = ctypes.c_int
    lib.blosc2_decompress_ctx.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_int32,
    ]
    lib.blosc2_getitem_ctx.restype = ctypes.c_int
    lib.blosc2_getitem_ctx.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_int32,
    ]
    lib.blosc2_free_ctx.restype = None
    lib.blosc2_free_ctx.argtypes = [ctypes.c_void_p]
    lib.blosc2_init()
    streams = _streams_of(lib)
    local = threading.local()
    run = lib.blosc2_decompress_ctx
    getitem = lib.blosc2_getitem_ctx

    class Context:
        """One thread's decompression context, freed when the thread ends."""

        def __init__(self) -> None:
            self.ptr = lib.blosc2_create_dctx(_DParams(1, None, None, None, 8))

        def __del__(self) -> None:
            if self.ptr:
                lib.blosc2_free_ctx(self.ptr)

    def context() -> int:
        ctx = getattr(local, "ctx", None)
        if ctx is None:
            ctx = local.ctx = Context()  # thread-local: dropped with the thread
        return int(ctx.ptr or 0)

    def decode(src: object, out: np.ndarray) -> int:
        """Decode the blosc frame ``src`` into the contiguous ``out``; the decoded size or < 0."""
        ptr = context()
        view = np.frombuffer(src, dtype=np.uint8)  # type: ignore[call-overload]
        if not ptr or view.size >= 1 << 31 or out.nbytes >= 1 << 31:
            return -1
        got = int(run(ptr, view.ctypes.data, view.size, out.ctypes.data, out.nbytes))
        if got != out.nbytes or _special(view):
            local.ctx = None  # see _special
        return got

    def items(src: np.ndarray, start: int, nitems: int, dest: int, nbytes: int) -> int:
        """Decode items ``start .. start + nitems`` of the frame ``src`` (only the blocks
        holding them) to the address ``dest`` (``nbytes`` long); the bytes written or < 0."""
        ptr = context()
        if not ptr or src.size >= 1 << 31 or nbytes >= 1 << 31:
            return -1
        got = int(getitem(ptr, src.ctypes.data, src.size, start, nitems, dest, nbytes))
        if got != nbytes or _special(src):
            local.ctx = None  # see _special
        return got

    if not _self_test(decode, items):
        return None
    return decode, items, (streams if streams is not None and _self_test_streams(streams) else None)


def _streams_of(lib: ctypes.CDLL) -> Streams | None:
    """The library's LZ4 partial decoder and byte unshuffle, where it exports them."""
    try:
        front = lib.LZ4_decompress_safe_partial
        whole = lib.LZ4_decompress_safe
        unshuffle = lib.blosc2_unshuffle
    except AttributeError:
        return None
    front.restype = ctypes.c_int
    front.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    whole.restype = ctypes.c_int
    whole.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    unshuffle.restype = ctypes.c_int32
    unshuffle.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p]

    def lz4_front(src: int, dest: int, src_nbytes: int, nbytes: int) -> int:
        return int(front(src, dest, src_nbytes, nbytes, nbytes))

    def lz4_whole(src: int, dest: int, src_nbytes: int, capacity: int) -> int:
        return int(whole(src, dest, src_nbytes, capacity))

    def unshuffled(typesize: int, nbytes: int, src: int, dest: int) -> int:
        return int(unshuffle(typesize, nbytes, src, dest))

    return Streams(lz4_front, lz4_whole, unshuffled)


def _special(frame: np.ndarray) -> bool:
    """Whether ``frame`` is a blosc2 special chunk (zeros, NaN, one value: no blocks).

    After a context has decoded one (whole or by items), C-Blosc2's getitem with that context
    decodes every later frame's items as zeros (found by the test suite: a thread that had
    decoded a special chunk then read parts of ordinary chunks as zeros). So a context that
    decoded a special chunk, or failed, is dropped and the thread makes a new one."""
    return frame.size >= 32 and bool(frame[2] & 0x01 and frame[2] & 0x04 and (frame[31] >> 4) & 7)


def _self_test(decode: DecodeFn, items: ItemsFn) -> bool:
    """Decode frames written by numcodecs' C-Blosc (whole, and a range of items) and compare
    with the original values."""
    try:
        from numcodecs import Blosc

        data = (np.arange(50_000, dtype=np.float32) * 0.37).reshape(250, 200)
        for cname, shuffle in (("zstd", Blosc.SHUFFLE), ("lz4", Blosc.BITSHUFFLE), ("blosclz", 0)):
            frame = Blosc(cname=cname, clevel=3, shuffle=shuffle).encode(data)
            out = np.empty(data.nbytes, dtype=np.uint8)
            if decode(frame, out) != data.nbytes:
                return False
            if not np.array_equal(out.view(np.float32).reshape(data.shape), data):
                return False
            src = np.frombuffer(frame, dtype=np.uint8)
            part = np.empty(7_000, dtype=np.float32)
            if items(src, 20_000, part.size, part.ctypes.data, part.nbytes) != part.nbytes:
                return False
            if not np.array_equal(part, data.ravel()[20_000:27_000]):
                return False
        return True
    except Exception:  # noqa: BLE001 - any failure means: do not use this library
        return False


def _self_test_streams(streams: Streams) -> bool:
    """Take apart a block of a frame numcodecs' C-Blosc wrote with LZ4 and the byte shuffle:
    the front of each of its streams, unshuffled, must be the front of the values."""
    try:
        from numcodecs import Blosc

        data = (np.arange(8192, dtype=np.float32) * 0.37) // 3
        frame = np.frombuffer(Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE, blocksize=len(data) * 4)
                              .encode(data), dtype=np.uint8)
        if frame[2] != 0x21:  # byte shuffle, split into streams, LZ4
            return False
        n = len(data)  # one block: 4 streams of n bytes; take the first 1000 values
        front = np.empty(4 * 1000, dtype=np.uint8)
        whole = np.empty(n, dtype=np.uint8)
        pos = 16 + 4
        for j in range(4):
            csize = struct.unpack_from("<i", frame.data, pos)[0]
            if not 0 < csize < n:
                return False
            at = frame.ctypes.data + pos + 4
            if streams.lz4_front(at, front.ctypes.data + j * 1000, csize, 1000) != 1000:
                return False
            if streams.lz4_whole(at, whole.ctypes.data, csize, n) != n or not np.array_equal(
                    whole[:1000], front[j * 1000 : (j + 1) * 1000]):
                return False
            pos += 4 + csize
        out = np.empty(1000, dtype=np.float32)
        if streams.unshuffle(4, front.nbytes, front.ctypes.data, out.ctypes.data) != front.nbytes:
            return False
        return bool(np.array_equal(out, data[:1000]))
    except Exception:  # noqa: BLE001 - any failure means: do not use these functions
        return False


def _ensure() -> None:
    """Open the library once and take what passes its self-test: the blosc decoders, and
    Zstandard's streaming decoder."""
    global _loaded, _items, _streams, _zstd, _tried
    with _lock:
        if not _tried:
            path = _library_path() if os.environ.get("TSEXPLORE_CBLOSC2", "1") != "0" else None
            if path is not None:
                try:
                    lib = ctypes.CDLL(path)
                    found = _load(lib)
                    _zstd = _zstd_of(lib)
                except OSError:
                    found = None
                if found is not None:
                    _loaded, _items, _streams = found
            _tried = True


#: ``ZSTD_d_stableOutBuffer`` (``ZSTD_d_experimentalParam2`` of ``zstd.h``, 1.4.4 and later)
_STABLE_OUT = 1001
_ZSTD_MIN_VERSION = 10404


def _zstd_of(lib: ctypes.CDLL) -> ZstdStream | None:
    """The library's Zstandard streaming decoder, where it exports one recent enough."""
    try:
        version = lib.ZSTD_versionNumber
        create, free, set_param = lib.ZSTD_createDCtx, lib.ZSTD_freeDCtx, lib.ZSTD_DCtx_setParameter
        run, is_error, name, sizeof = (lib.ZSTD_decompressStream_simpleArgs, lib.ZSTD_isError,
                                       lib.ZSTD_getErrorName, lib.ZSTD_sizeof_DCtx)
    except AttributeError:
        return None
    version.restype = ctypes.c_uint
    if version() < _ZSTD_MIN_VERSION:
        return None
    create.restype = ctypes.c_void_p
    create.argtypes = []
    free.restype = ctypes.c_size_t
    free.argtypes = [ctypes.c_void_p]
    set_param.restype = ctypes.c_size_t
    set_param.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    size_p = ctypes.POINTER(ctypes.c_size_t)
    run.restype = ctypes.c_size_t
    run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, size_p,
                    ctypes.c_void_p, ctypes.c_size_t, size_p]
    is_error.restype = ctypes.c_uint
    is_error.argtypes = [ctypes.c_size_t]
    name.restype = ctypes.c_char_p
    name.argtypes = [ctypes.c_size_t]
    sizeof.restype = ctypes.c_size_t
    sizeof.argtypes = [ctypes.c_void_p]

    def made() -> int:
        ptr = create()
        if ptr and is_error(set_param(ptr, _STABLE_OUT, 1)):
            free(ptr)
            return 0
        return int(ptr or 0)

    def decompress(ptr: int, dest: int, capacity: int, dest_pos: int, src: int, src_nbytes: int,
                   src_pos: int) -> tuple[int, int, int]:
        out_pos, in_pos = ctypes.c_size_t(dest_pos), ctypes.c_size_t(src_pos)
        code = int(run(ptr, dest, capacity, ctypes.byref(out_pos), src, src_nbytes, ctypes.byref(in_pos)))
        return code, out_pos.value, in_pos.value

    def error_name(code: int) -> str:
        return (name(code) or b"unknown error").decode("ascii", "replace")

    stream = ZstdStream(made, free, decompress, lambda code: bool(is_error(code)), error_name,
                        lambda ptr: int(sizeof(ptr)))
    return stream if _self_test_zstd(stream) else None


def _self_test_zstd(stream: ZstdStream) -> bool:
    """Decode a frame numcodecs' Zstd wrote in pieces, stopping where the input stops: each
    front must be the front of the values, and the whole frame the values."""
    try:
        from numcodecs import Zstd

        data = (np.arange(300_000, dtype=np.float32) * 0.37) // 3
        frame = np.frombuffer(Zstd(level=3).encode(data), dtype=np.uint8)
        out = np.empty(data.nbytes, dtype=np.uint8)
        ptr = stream.create()
        if not ptr:
            return False
        try:
            done = used = 0
            for stop in (frame.size // 3, frame.size // 2, frame.size):
                code, done, used = stream.decompress(ptr, out.ctypes.data, out.nbytes, done,
                                                     frame.ctypes.data, stop, used)
                if stream.is_error(code) or used != stop:
                    return False
                if not np.array_equal(out[:done], data.view(np.uint8)[:done]):
                    return False
            return code == 0 and done == out.nbytes
        finally:
            stream.free(ptr)
    except Exception:  # noqa: BLE001 - any failure means: do not use this library
        return False


def zstd_stream() -> ZstdStream | None:
    """The Zstandard streaming decoder C-Blosc2 bundles, or None (not exported, older than
    1.4.4, or its self-test failed: zstd chunks are then decoded whole)."""
    if not _tried:
        _ensure()
    return _zstd


def decoder() -> DecodeFn | None:
    """The C-Blosc2 decode function, or None (not installed, or its self-test failed)."""
    if not _tried:
        _ensure()
    return _loaded


def item_decoder() -> ItemsFn | None:
    """C-Blosc2's ``getitem`` (decodes only the blocks that hold a range of items), or None
    (then blosc chunks are decoded whole)."""
    if not _tried:
        _ensure()
    return _items


def stream_decoder() -> Streams | None:
    """C-Blosc2's LZ4 partial decoder and byte unshuffle, or None (then a block is decoded
    whole, :func:`item_decoder`)."""
    if not _tried:
        _ensure()
    return _streams
