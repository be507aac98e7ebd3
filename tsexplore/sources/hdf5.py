"""HDF5 datasets read by byte range: where each chunk's bytes are, and how to decode them.

Pure functions over h5py, for any seekable file object (an fsspec file over HTTP or S3 that
reads by range, a local file, ``BytesIO``) -- nothing here parses HDF5 by hand:

- :func:`open_metadata`: the file's variables, attributes and encoding exactly as xarray's
  h5netcdf engine gives them (its ``H5NetCDFStore`` over the file object), and
  :func:`dataset_path`, the HDF5 dataset behind a variable;
- :func:`read_layout`: one dataset's :class:`ChunkLayout`, read once through h5py's chunk
  iteration (``DatasetID.chunk_iter``, as kerchunk's HDF5 scanner reads it): the chunk
  shape and, for every stored chunk, its byte offset, stored size and filter mask. Chunks
  that were never written are not in it and read as the dataset's fill value. A contiguous
  dataset is one byte range, split into a virtual grid of about 4 MiB per chunk; compact,
  external and virtual layouts, and types whose bytes are not the values (variable-length
  strings, references), are read through h5py instead (:attr:`ChunkLayout.by_range` is
  False);
- :meth:`ChunkLayout.ranges` and :meth:`ChunkLayout.decode`: the byte ranges of one chunk,
  and its values from the bytes fetched, decoded through the dataset's filter pipeline
  (:class:`FilterPipeline`: deflate, shuffle, fletcher32 with its checksum verified, and
  blosc, zstd, lz4 and bzip2 as hdf5plugin writes them; any other filter HDF5 itself can
  apply -- szip, scaleoffset, nbit, bitshuffle, blosc2... when their plugins are installed --
  through HDF5's own pipeline on an in-memory file). The size a chunk decodes to is checked
  before anything that size is allocated; a chunk that fails raises
  :class:`~tsexplore.errors.CorruptChunkError` (or
  :class:`~tsexplore.errors.UnsupportedFilterError`) naming the dataset and the chunk.

Values come out as h5py reads them, in the machine's byte order; a caller's ``out`` buffer
is decoded into directly when the chunk is whole and in that order.
"""

from __future__ import annotations

import bz2
import io
import math
import struct
import threading
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ChunkReadError, CorruptChunkError, SourceError, UnsupportedFilterError
from .base import native_dtype, normalize_chunks

#: HDF5's registered filter identifiers (https://portal.hdfgroup.org/documentation/ "Filters")
FILTER_NAMES = {
    1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset",
    307: "bzip2", 32001: "blosc", 32004: "lz4", 32008: "bitshuffle", 32013: "zfp",
    32015: "zstd", 32017: "sz", 32018: "fcidecomp", 32024: "sz3", 32026: "blosc2",
}
DEFLATE, SHUFFLE, FLETCHER32, BZIP2, BLOSC, LZ4, ZSTD = 1, 2, 3, 307, 32001, 32004, 32015
#: filters decoded here; every other one goes through HDF5's own pipeline
NATIVE_FILTERS = frozenset({DEFLATE, SHUFFLE, FLETCHER32, BZIP2, BLOSC, LZ4, ZSTD})
#: the parameters a user gives a filter whose ``set_local`` fills in the others when a
#: dataset is created (the file stores them all): given those, HDF5 rebuilds the same
#: pipeline for a dataset of the same type and chunk shape
USER_VALUES = {
    4: lambda v: v[:2],  # szip: options mask, pixels per block
    5: lambda v: (),  # nbit: all computed
    6: lambda v: v[:2],  # scaleoffset: scale type, factor
    32001: lambda v: v[4:],  # blosc: (version, version, type size, chunk bytes) first
    32008: lambda v: v[3:],  # bitshuffle: (version, version, element size) first
    32026: lambda v: v[4:],  # blosc2: as blosc
}
#: a contiguous dataset's virtual chunks hold about this many bytes
VIRTUAL_CHUNK_BYTES = 4 * 2**20
#: a virtual chunk of a contiguous dataset is read as its runs up to this many, else as the
#: one range that holds them all
MAX_RUNS = 64


def load_plugins() -> bool:
    """Register hdf5plugin's filters with HDF5 (True when it is installed)."""
    try:
        import hdf5plugin  # noqa: F401 - importing it registers the filters
    except ImportError:
        return False
    return True


def open_file(obj: Any) -> Any:
    """An ``h5py.File`` (read-only) over a path or a seekable file object, hdf5plugin's
    filters registered first."""
    import h5py

    load_plugins()
    return h5py.File(obj, "r")


def open_metadata(obj: Any, group: str | None = None, **kwargs: Any) -> tuple[Any, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(store, variables, attrs, encoding) of ``group`` of an HDF5/NetCDF4 file or file
    object, as xarray's h5netcdf engine reads them: its ``H5NetCDFStore`` opened as that
    engine opens it (``kwargs``: ``phony_dims``, ``decode_vlen_strings``...), its raw
    (undecoded) variables. Close the store when done."""
    from xarray.backends.h5netcdf_ import H5NetCDFStore

    load_plugins()
    kwargs.setdefault("phony_dims", "access")
    kwargs.setdefault("decode_vlen_strings", True)
    store = H5NetCDFStore.open(obj, group=group, **kwargs)
    try:
        variables, attrs = store.load()
        encoding = dict(store.get_encoding())
    except BaseException:
        store.close()
        raise
    return store, dict(variables), dict(attrs), encoding


def dataset_path(store: Any, name: str) -> str:
    """The HDF5 path (``"/g/temp"``) of the dataset behind variable ``name`` of an open
    ``H5NetCDFStore``."""
    return str(store.ds.variables[name]._h5ds.name)


@dataclass(frozen=True)
class Filter:
    """One filter of a dataset's pipeline, as HDF5 lists it: its id, flags and parameters."""

    id: int
    flags: int = 0
    values: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return FILTER_NAMES.get(self.id, f"filter {self.id}")


def pipeline_of(dcpl: Any) -> tuple[Filter, ...]:
    """The filters of an h5py dataset creation property list, in the order they are applied
    when writing."""
    out = []
    for i in range(dcpl.get_nfilters()):
        fid, flags, values, _name = dcpl.get_filter(i)
        out.append(Filter(int(fid), int(flags), tuple(int(v) for v in values)))
    return tuple(out)


# -- checksums and filters ----------------------------------------------------------------------


def fletcher32(data: Any) -> int:
    """HDF5's Fletcher-32 checksum of ``data`` (``H5_checksum_fletcher32``: big-endian 16-bit
    words, a trailing odd byte as the high byte of a last word, sums kept modulo 65535 with
    a non-zero multiple of 65535 kept as 65535)."""
    b = np.frombuffer(data, np.uint8)
    if b.size % 2:
        b = np.concatenate([b, np.zeros(1, np.uint8)])
    words = b.view(">u2").astype(np.uint64)
    if not words.size:
        return 0
    prefix = np.cumsum(words)  # < 65535 * 2**32 words: no overflow
    total1 = int(prefix[-1])
    total2 = int((prefix % 65535).sum())  # sum of the running sums, modulo 65535

    def fold(value: int, nonzero: bool) -> int:
        rest = value % 65535
        return 65535 if rest == 0 and nonzero else rest

    sum1 = fold(total1, total1 != 0)
    sum2 = fold(total2, total1 != 0)  # the running sums are all 0 only when every word is
    return (sum2 << 16) | sum1


def _check_fletcher32(buf: memoryview, where: str) -> memoryview:
    if len(buf) < 4:
        raise CorruptChunkError(f"{where}: {len(buf)} bytes cannot hold a Fletcher-32 checksum")
    data, stored = buf[:-4], struct.unpack("<I", buf[-4:])[0]
    computed = fletcher32(data)
    # HDF5 before 1.6.3 stored it with the bytes of each half swapped; HDF5 accepts both
    swapped = ((computed & 0x00FF00FF) << 8) | ((computed & 0xFF00FF00) >> 8)
    if stored not in (computed, swapped):
        raise CorruptChunkError(
            f"{where}: Fletcher-32 checksum mismatch (stored {stored:#010x}, computed "
            f"{computed:#010x}): the chunk's bytes changed since they were written"
        )
    return data


def unshuffle(buf: Any, itemsize: int, out: Any = None) -> memoryview:
    """HDF5's shuffle filter undone: byte ``k`` of every element was stored together; the
    trailing bytes that make no whole element are kept as they are."""
    src = np.frombuffer(buf, np.uint8)
    dest = np.empty(src.size, np.uint8) if out is None else np.frombuffer(out, np.uint8)
    count = src.size // itemsize if itemsize > 1 else 0
    whole = count * itemsize
    if count:
        dest[:whole].reshape(count, itemsize)[...] = src[:whole].reshape(itemsize, count).T
    dest[whole:] = src[whole:]
    return dest.data


def _too_big(where: str, name: str, size: int, bound: int) -> CorruptChunkError:
    return CorruptChunkError(
        f"{where}: its {name} stream decodes to {size} bytes or more, more than the "
        f"{bound} the chunk holds (the bytes are not this chunk's, or are corrupt)"
    )


def _inflate(buf: memoryview, bound: int, where: str) -> memoryview:
    d = zlib.decompressobj()
    try:
        out = d.decompress(buf, bound + 1)
    except zlib.error as exc:
        raise CorruptChunkError(f"{where}: deflate stream is corrupt ({exc})") from exc
    if len(out) > bound or d.unconsumed_tail:
        raise _too_big(where, "deflate", len(out), bound)
    if not d.eof:
        raise CorruptChunkError(f"{where}: deflate stream ends early (the chunk's bytes are cut short)")
    return memoryview(out)


def _bunzip(buf: memoryview, bound: int, where: str) -> memoryview:
    d = bz2.BZ2Decompressor()
    try:
        out = d.decompress(buf, bound + 1)
    except (OSError, ValueError) as exc:
        raise CorruptChunkError(f"{where}: bzip2 stream is corrupt ({exc})") from exc
    if len(out) > bound or (not d.eof and d.needs_input is False):
        raise _too_big(where, "bzip2", len(out), bound)
    if not d.eof:
        raise CorruptChunkError(f"{where}: bzip2 stream ends early (the chunk's bytes are cut short)")
    return memoryview(out)


def _blosc(buf: memoryview, bound: int, where: str, out: Any = None) -> memoryview:
    from numcodecs import blosc

    if len(buf) < 16:
        raise CorruptChunkError(f"{where}: {len(buf)} bytes cannot hold a blosc header")
    nbytes, _blocksize, cbytes = struct.unpack("<III", buf[4:16])  # blosc1's header
    if nbytes > bound:
        raise _too_big(where, "blosc", nbytes, bound)
    if cbytes > len(buf):
        raise CorruptChunkError(f"{where}: blosc frame of {cbytes} bytes cut short at {len(buf)}")
    dest = np.empty(nbytes, np.uint8) if out is None or len(memoryview(out)) != nbytes else out
    try:
        blosc.decompress(buf, dest)
    except RuntimeError as exc:
        raise CorruptChunkError(f"{where}: blosc frame is corrupt ({exc})") from exc
    return memoryview(dest).cast("B")  # type: ignore[arg-type]


def _zstd(buf: memoryview, bound: int, where: str) -> memoryview:
    from numcodecs.zstd import Zstd

    size = _zstd_content_size(buf)
    if size is None:  # HDF5's zstd filter always declares it: not one of its frames
        raise CorruptChunkError(f"{where}: zstd frame does not declare its decoded size")
    if size > bound:
        raise _too_big(where, "zstd", size, bound)
    try:
        out = Zstd().decode(buf)
    except RuntimeError as exc:
        raise CorruptChunkError(f"{where}: zstd frame is corrupt ({exc})") from exc
    if len(out) > bound:
        raise _too_big(where, "zstd", len(out), bound)
    return memoryview(out).cast("B")


def _zstd_content_size(buf: memoryview) -> int | None:
    """The decoded size a zstd frame header declares (None when it declares none)."""
    if len(buf) < 6 or bytes(buf[:4]) != b"\x28\xb5\x2f\xfd":
        return None
    descriptor = buf[4]
    fcs_flag, single = descriptor >> 6, (descriptor >> 5) & 1
    did = (0, 1, 2, 4)[descriptor & 3]
    pos = 5 + (0 if single else 1) + did
    width = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if not width or len(buf) < pos + width:
        return None
    value = int.from_bytes(bytes(buf[pos : pos + width]), "little")
    return value + 256 if width == 2 else value


def _lz4(buf: memoryview, bound: int, where: str) -> memoryview:
    """The HDF5 lz4 filter's format: the decoded size (8 bytes) and block size (4 bytes),
    big-endian, then each block as its stored size (4 bytes, big-endian) and its bytes
    (kept raw when lz4 would not make it smaller)."""
    from numcodecs import lz4

    if len(buf) < 12:
        raise CorruptChunkError(f"{where}: {len(buf)} bytes cannot hold an lz4 header")
    total, block = struct.unpack(">QI", buf[:12])
    if total > bound:
        raise _too_big(where, "lz4", total, bound)
    if block == 0 and total:
        raise CorruptChunkError(f"{where}: lz4 header gives a block size of 0")
    out = np.empty(total, np.uint8)
    pos, done = 12, 0
    while done < total:
        n = min(block, total - done)
        if pos + 4 > len(buf):
            raise CorruptChunkError(f"{where}: lz4 stream ends early (the chunk's bytes are cut short)")
        stored = struct.unpack(">I", buf[pos : pos + 4])[0]
        pos += 4
        data = buf[pos : pos + stored]
        if len(data) < stored:
            raise CorruptChunkError(f"{where}: lz4 block cut short ({len(data)} of {stored} bytes)")
        if stored == n:  # kept raw
            out[done : done + n] = np.frombuffer(data, np.uint8)
        else:
            framed = struct.pack("<I", n) + bytes(data)  # numcodecs' lz4 frame: its size first
            try:
                lz4.decompress(framed, out[done : done + n])
            except RuntimeError as exc:
                raise CorruptChunkError(f"{where}: lz4 block is corrupt ({exc})") from exc
        pos += stored
        done += n
    return out.data


@dataclass(frozen=True)
class FilterPipeline:
    """A dataset's filters (in the order they were applied when writing), undone for one
    chunk's stored bytes: natively for :data:`NATIVE_FILTERS`, else through HDF5."""

    filters: tuple[Filter, ...]
    dtype: np.dtype
    chunks: tuple[int, ...]

    @property
    def native(self) -> bool:
        """Every filter is decoded here (none needs HDF5)."""
        return all(f.id in NATIVE_FILTERS for f in self.filters)

    @property
    def chunk_nbytes(self) -> int:
        return math.prod(self.chunks) * self.dtype.itemsize

    def decode(self, raw: Any, filter_mask: int = 0, where: str = "a chunk", out: Any = None) -> memoryview:
        """The chunk's decoded bytes (``chunk_nbytes`` of them, in the file's byte order).
        ``out``: a writable buffer of that size the last step may decode into (the answer is
        then a view of it, or a copy's)."""
        expected = self.chunk_nbytes
        if not self.native:
            return self._through_hdf5(raw, filter_mask, where)
        buf = memoryview(raw).cast("B")
        active = [i for i in range(len(self.filters)) if not (filter_mask >> i) & 1]
        for i in reversed(active):
            f = self.filters[i]
            # what this step may give: the chunk, plus the checksums still to strip
            bound = expected + 4 * sum(1 for j in active if j < i and self.filters[j].id == FLETCHER32)
            last = i == active[0]
            dest = out if last and out is not None and len(memoryview(out)) == bound else None
            if f.id == FLETCHER32:
                buf = _check_fletcher32(buf, where)
            elif f.id == SHUFFLE:
                size = f.values[0] if f.values else self.dtype.itemsize
                buf = unshuffle(buf, size, dest) if size > 1 else buf
            elif f.id == DEFLATE:
                buf = _inflate(buf, bound, where)
            elif f.id == BLOSC:
                buf = _blosc(buf, bound, where, dest)
            elif f.id == ZSTD:
                buf = _zstd(buf, bound, where)
            elif f.id == LZ4:
                buf = _lz4(buf, bound, where)
            elif f.id == BZIP2:
                buf = _bunzip(buf, bound, where)
        if len(buf) != expected:
            raise CorruptChunkError(
                f"{where}: decodes to {len(buf)} bytes where a chunk of shape {self.chunks} "
                f"and dtype {self.dtype} holds {expected}"
            )
        return buf

    def _through_hdf5(self, raw: Any, filter_mask: int, where: str) -> memoryview:
        """HDF5's own pipeline: the stored bytes written as the one chunk of a dataset with
        the same type, chunk shape and filters in an in-memory file, then read back."""
        import h5py

        load_plugins()
        for f in self.filters:
            if not h5py.h5z.filter_avail(f.id):
                raise UnsupportedFilterError(
                    f"{where}: compressed with the HDF5 {f.name} filter (id {f.id}), which is "
                    "not available; pip install hdf5plugin (it registers the common ones)"
                )
        with _HDF5_LOCK:
            dset = _SCRATCH.get(self)
            if dset is None:
                dset = _SCRATCH[self] = self._scratch_dataset()
            try:
                dset.id.write_direct_chunk((0,) * len(self.chunks), bytes(raw), filter_mask)
                values = np.empty(self.chunks, self.dtype)
                dset.read_direct(values)
            except (OSError, ValueError, RuntimeError) as exc:
                raise CorruptChunkError(f"{where}: HDF5 cannot decode it ({exc})") from exc
        return values.reshape(-1).view(np.uint8).data

    def rebuilds(self) -> bool:
        """HDF5 rebuilds this pipeline (every filter available, the same parameters) for
        an in-memory dataset: chunks then decode through HDF5's own filters."""
        try:
            with _HDF5_LOCK:
                if self not in _SCRATCH:
                    _SCRATCH[self] = self._scratch_dataset()
        except (UnsupportedFilterError, OSError, ValueError, RuntimeError):
            return False
        return True

    def _scratch_dataset(self) -> Any:
        """The one chunk's dataset in an in-memory file; refused (UnsupportedFilterError)
        when HDF5 does not rebuild the file's filter parameters exactly."""
        import h5py

        f = h5py.File(f"tsexplore-{uuid.uuid4().hex}.h5", "w", driver="core", backing_store=False)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(self.chunks)
        for filt in self.filters:
            user = USER_VALUES.get(filt.id, lambda v: v)(filt.values)
            dcpl.set_filter(filt.id, filt.flags, tuple(user))
        space = h5py.h5s.create_simple(self.chunks)
        dsid = h5py.h5d.create(f.id, b"chunk", h5py.h5t.py_create(self.dtype, logical=True), space, dcpl=dcpl)
        rebuilt = pipeline_of(dsid.get_create_plist())
        if tuple((g.id, g.values) for g in rebuilt) != tuple((g.id, g.values) for g in self.filters):
            f.close()
            raise UnsupportedFilterError(
                f"HDF5 does not rebuild the filters {[g.name for g in self.filters]} with the "
                f"file's parameters ({self.filters} became {rebuilt}): read through h5py"
            )
        return h5py.Dataset(dsid)


_HDF5_LOCK = threading.Lock()
#: one in-memory dataset per pipeline that HDF5 decodes (kept: pipelines are few)
_SCRATCH: dict[FilterPipeline, Any] = {}


# -- the layout of one dataset ----------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ChunkLayout:
    """Where the bytes of one HDF5 dataset's chunks are, and how they decode.

    ``layout``: ``"chunked"`` (``offsets``/``sizes``/``masks``: one entry per chunk of the
    grid, offset -1 for a chunk never written), ``"contiguous"`` (``offset``, ``size``: the
    whole array in C order; ``chunks`` a virtual grid; offset -1 when never written) or
    ``"h5py"`` (read through h5py: ``why`` says why). ``dtype`` is the file's (h5py's), the
    values come out in :attr:`out_dtype`. NetCDF3 variables are contiguous layouts too
    (:mod:`.netcdf3`), a record variable with the record's length as its first stride."""

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...]
    layout: str
    fill_value: Any
    filters: tuple[Filter, ...] = ()
    offsets: np.ndarray | None = None
    sizes: np.ndarray | None = None
    masks: np.ndarray | None = None
    offset: int = -1
    size: int = 0
    why: str = ""
    pipeline: FilterPipeline | None = None
    #: contiguous layouts: the byte step along each axis (None: C order); NetCDF3 record
    #: variables step by the whole record along their first axis
    strides: tuple[int, ...] | None = None
    #: what ``path`` names, for messages
    what: str = "HDF5 dataset"

    @property
    def by_range(self) -> bool:
        """Chunks are read by byte range (False: through h5py)."""
        return self.layout in ("chunked", "contiguous")

    @property
    def out_dtype(self) -> np.dtype:
        return native_dtype(self.dtype)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(math.ceil(s / c) if s else 0 for s, c in zip(self.shape, self.chunks))

    @property
    def stored_chunks(self) -> int:
        """How many chunks have bytes in the file."""
        if self.layout == "chunked":
            assert self.offsets is not None
            return int(np.count_nonzero(self.offsets >= 0))
        return int(self.layout == "contiguous" and self.offset >= 0)

    def region(self, index: Sequence[int]) -> tuple[slice, ...]:
        """The part of the array chunk ``index`` covers (trimmed at the edge)."""
        if len(index) != len(self.shape) or any(not 0 <= i < g for i, g in zip(index, self.grid_shape)):
            raise IndexError(f"chunk {tuple(index)} is outside the grid {self.grid_shape} of {self.path}")
        return tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, self.chunks, self.shape))

    def where(self, index: Sequence[int]) -> str:
        return f"chunk {tuple(index)} of {self.what} {self.path}"

    def ranges(self, index: Sequence[int]) -> list[tuple[int, int]] | None:
        """The byte ranges ``[(start, stop), ...]`` in the file that hold chunk ``index``,
        or None when the chunk was never written (it reads as :attr:`fill_value`)."""
        region = self.region(index)
        if self.layout == "chunked":
            at = self.offsets[tuple(index)]  # type: ignore[index]
            if at < 0:
                return None
            return [(int(at), int(at) + int(self.sizes[tuple(index)]))]  # type: ignore[index]
        if self.layout == "contiguous":
            if self.offset < 0:
                return None
            runs = _runs(region, self.shape, self.dtype.itemsize, self.strides)
            return [(self.offset + a, self.offset + b) for a, b in runs]
        raise ChunkReadError(f"{self.where(index)} is read through h5py ({self.why}), not by byte range")

    def filter_mask(self, index: Sequence[int]) -> int:
        return int(self.masks[tuple(index)]) if self.layout == "chunked" else 0  # type: ignore[index]

    def fill(self, index: Sequence[int]) -> np.ndarray:
        """Chunk ``index`` as a chunk never written reads: the fill value."""
        shape = tuple(sl.stop - sl.start for sl in self.region(index))
        return np.full(shape, self.fill_value, dtype=self.out_dtype)

    def decode(self, index: Sequence[int], parts: Sequence[Any], out: np.ndarray | None = None) -> np.ndarray:
        """Chunk ``index`` (trimmed at the array's edge, in :attr:`out_dtype`) from the bytes
        of its :meth:`ranges`, one buffer per range. ``out``: an array of that shape and
        dtype to decode into (returned)."""
        region = self.region(index)
        shape = tuple(sl.stop - sl.start for sl in region)
        if out is not None and (out.shape != shape or out.dtype != self.out_dtype or not out.flags.c_contiguous):
            raise ValueError(f"out must be a C-contiguous {self.out_dtype} array of shape {shape}; got "
                             f"{out.dtype} {out.shape}")
        where = self.where(index)
        if self.layout == "chunked":
            if len(parts) != 1:
                raise ValueError(f"{where}: one buffer expected, got {len(parts)}")
            stored = int(self.sizes[tuple(index)])  # type: ignore[index]
            if len(memoryview(parts[0]).cast("B")) != stored:
                raise CorruptChunkError(
                    f"{where}: {len(memoryview(parts[0]).cast('B'))} bytes read where the file stores {stored}"
                )
            whole = shape == self.chunks and self.dtype.isnative
            dest = None if out is None or not whole else out.reshape(-1).view(np.uint8).data
            assert self.pipeline is not None
            got = self.pipeline.decode(parts[0], self.filter_mask(index), where, dest)
            if dest is not None and _same_memory(got, dest):
                return out  # type: ignore[return-value]
            full = np.frombuffer(got, self.dtype).reshape(self.chunks)
            values = full[tuple(slice(0, n) for n in shape)]
        else:
            values = self._contiguous(region, shape, parts, where)
        if out is None:
            arr = np.ascontiguousarray(values, dtype=self.out_dtype)
            if not arr.flags.writeable or any(np.shares_memory(arr, np.frombuffer(p, np.uint8)) for p in parts):
                arr = arr.copy()  # never a view of the caller's (or an immutable) buffer
            return arr
        np.copyto(out, values)
        return out

    def hull(self, index: Sequence[int]) -> tuple[int, int] | None:
        """The one byte range from the first to the last byte of chunk ``index`` (what
        :meth:`ranges` gives when it is one range; None when never written). Its bytes
        decode too (:meth:`decode` with it as the one part)."""
        found = self.ranges(index)
        return None if found is None else (found[0][0], found[-1][1])

    def _contiguous(self, region: tuple[slice, ...], shape: tuple[int, ...], parts: Sequence[Any],
                    where: str) -> np.ndarray:
        """The region's values from the bytes of its runs, or of the one range that holds
        them all (:func:`_runs`, :meth:`hull`)."""
        runs = _runs(region, self.shape, self.dtype.itemsize, self.strides)
        sizes = [len(memoryview(p).cast("B")) for p in parts]
        expected = math.prod(shape) * self.dtype.itemsize
        hull = runs[-1][1] - runs[0][0]
        if sizes == [b - a for a, b in runs] and (len(parts) > 1 or sizes[0] == expected):
            joined = parts[0] if len(parts) == 1 else b"".join(bytes(p) for p in parts)
            return np.frombuffer(joined, self.dtype).reshape(shape)
        if sizes != [hull]:
            raise CorruptChunkError(
                f"{where}: {sizes} bytes read where the file stores {[b - a for a, b in runs]} "
                f"(or {hull} from the first to the last)"
            )
        # one range from the region's first byte to its last: the array's own strides
        return strided(parts[0], self.dtype, shape, self.strides or c_strides(self.shape, self.dtype.itemsize))


def strided(buf: Any, dtype: np.dtype, shape: tuple[int, ...], strides: Sequence[int]) -> np.ndarray:
    """A read-only view of ``buf`` (bytes from an array's first wanted element to its last)
    as an array of ``shape`` with byte ``strides`` (any, e.g. a NetCDF3 record's length,
    which need not be a multiple of the item size); numpy checks it stays inside ``buf``."""
    view = np.ndarray(shape, dtype=dtype, buffer=memoryview(buf).cast("B"), strides=tuple(strides))
    view.flags.writeable = False
    return view


def _same_memory(a: memoryview, b: memoryview) -> bool:
    return np.shares_memory(np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8))


def c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    """The byte strides of a C-order array of ``shape``."""
    return tuple(itemsize * math.prod(shape[k + 1 :]) for k in range(len(shape)))


def _runs(region: tuple[slice, ...], shape: tuple[int, ...], itemsize: int,
          strides: Sequence[int] | None = None, max_runs: int | None = None) -> list[tuple[int, int]]:
    """The byte ranges (relative to the array's first byte) of an array of ``shape`` laid
    out with byte ``strides`` (default C order) that hold ``region``: one per run of
    contiguous elements (a whole trailing block where the region spans those axes and they
    are laid out one after the other), or the one range from the region's first byte to its
    last when there are more than ``max_runs`` (default :data:`MAX_RUNS`)."""
    import itertools

    ndim = len(shape)
    if ndim == 0:
        return [(0, itemsize)]
    strides = tuple(strides) if strides is not None else c_strides(shape, itemsize)
    if strides[-1] != itemsize:  # elements apart (a 1-D NetCDF3 record variable): one run each
        axis, run = ndim, itemsize
    else:
        # the innermost axis a run starts at: every axis after it is whole and packed after it
        axis = ndim - 1
        while (axis > 0 and region[axis].start == 0 and region[axis].stop == shape[axis]
               and strides[axis - 1] == strides[axis] * shape[axis]):
            axis -= 1
        run = (region[axis].stop - region[axis].start) * strides[axis]
    outer = [range(sl.start, sl.stop) for sl in region[:axis]]
    count = math.prod(len(r) for r in outer)
    first = sum(sl.start * st for sl, st in zip(region, strides))
    if count > (MAX_RUNS if max_runs is None else max_runs):
        last = sum((sl.stop - 1) * st for sl, st in zip(region, strides)) + itemsize
        return [(first, last)]
    out = []
    inner = region[axis].start * strides[axis] if axis < ndim else 0
    for pos in itertools.product(*outer):
        start = sum(p * st for p, st in zip(pos, strides)) + inner
        out.append((start, start + run))
    return out


def _raw_dtype_problem(dtype: np.dtype) -> str:
    """Why a dataset's stored bytes are not its values ("" when they are)."""
    import h5py

    if dtype.hasobject or h5py.check_dtype(vlen=dtype) is not None:
        return "variable-length values live in the file's heap"
    if h5py.check_dtype(ref=dtype) is not None:
        return "references"
    return ""


def read_layout(dataset: Any, grid: Any = None) -> ChunkLayout:
    """The :class:`ChunkLayout` of an ``h5py.Dataset``: its chunk index read once (h5py's
    chunk iteration: ranged reads of the B-tree through the file object). ``grid``: the
    virtual chunk shape of a contiguous dataset (default: about 4 MiB a chunk, leading axes
    split first)."""
    import h5py

    dsid = dataset.id
    dcpl = dsid.get_create_plist()
    shape = tuple(int(s) for s in dataset.shape or ())
    dtype = np.dtype(dataset.dtype)
    path = str(dataset.name)
    fill = _fill_value(dataset, dtype)
    layout = dcpl.get_layout()
    filters = pipeline_of(dcpl)
    problem = _raw_dtype_problem(dtype)
    chunks = tuple(int(c) for c in (dataset.chunks or ()))

    def through_h5py(why: str) -> ChunkLayout:
        grid_ = chunks or normalize_chunks(grid, shape, ("",) * len(shape), VIRTUAL_CHUNK_BYTES, dtype.itemsize)
        return ChunkLayout(path, shape, dtype, grid_ if shape else (), "h5py", fill, filters, why=why)

    if problem:
        return through_h5py(problem)
    if not shape or 0 in shape:
        return through_h5py("it holds no chunks" if shape else "a scalar")
    if layout == h5py.h5d.CHUNKED:
        grid_shape = tuple(math.ceil(s / c) for s, c in zip(shape, chunks))
        offsets = np.full(grid_shape, -1, np.int64)
        sizes = np.zeros(grid_shape, np.int64)
        masks = np.zeros(grid_shape, np.uint32)

        def visit(info: Any) -> None:
            at = tuple(o // c for o, c in zip(info.chunk_offset, chunks))
            if any(i >= g for i, g in zip(at, grid_shape)):
                return  # past the dataset's extent: h5py never reads it
            offsets[at] = info.byte_offset
            sizes[at] = info.size
            masks[at] = info.filter_mask

        if hasattr(dsid, "chunk_iter"):
            dsid.chunk_iter(visit)
        else:  # pragma: no cover - HDF5 < 1.12.3: one call per chunk
            for i in range(dsid.get_num_chunks()):
                visit(dsid.get_chunk_info(i))
        pipeline = FilterPipeline(filters, dtype, chunks)
        if not pipeline.native and not pipeline.rebuilds():
            missing = [f.name for f in filters if f.id not in NATIVE_FILTERS]
            return through_h5py(f"its {', '.join(missing)} filter(s) are applied by HDF5 itself")
        return ChunkLayout(path, shape, dtype, chunks, "chunked", fill, filters, offsets, sizes, masks,
                           pipeline=pipeline)
    if layout == h5py.h5d.CONTIGUOUS:
        if dcpl.get_external_count():
            return through_h5py("its data lives in external files")
        at = dsid.get_offset()
        virtual = normalize_chunks(grid, shape, ("",) * len(shape), VIRTUAL_CHUNK_BYTES, dtype.itemsize)
        return ChunkLayout(path, shape, dtype, virtual, "contiguous", fill, filters,
                           offset=-1 if at is None else int(at), size=int(dsid.get_storage_size()))
    kind = {h5py.h5d.COMPACT: "compact (its data lives in the object header)"}.get(layout, "virtual")
    return through_h5py(f"the {kind} layout")


def _fill_value(dataset: Any, dtype: np.dtype) -> Any:
    """What h5py reads for a chunk never written: the dataset's fill value (0 when it has
    none)."""
    try:
        value = dataset.fillvalue
    except Exception:  # noqa: BLE001 - a type without a fill value: zeros, as HDF5 reads it
        value = None
    if value is None:
        return np.zeros((), native_dtype(dtype))[()]
    return np.asarray(value, dtype=dtype).astype(native_dtype(dtype))[()]


def read_layouts(h5file: Any, paths: Sequence[str], grid: Any = None) -> dict[str, ChunkLayout]:
    """The :class:`ChunkLayout` of each dataset of ``paths`` in an open ``h5py.File``."""
    out = {}
    for path in paths:
        found = h5file.get(path)
        if found is None or not hasattr(found, "dtype"):
            raise SourceError(f"{path} is not an HDF5 dataset of {h5file.filename}")
        out[path] = read_layout(found, grid)
    return out


def read_through_h5py(dataset: Any, layout: ChunkLayout, index: Sequence[int]) -> np.ndarray:
    """Chunk ``index`` read by h5py itself (layouts not read by range)."""
    region = layout.region(index)
    values = dataset[region] if region else dataset[()]
    return np.ascontiguousarray(values, dtype=layout.out_dtype if not layout.dtype.hasobject else None)


def scan(obj: Any, grid: Any = None) -> dict[str, ChunkLayout]:
    """Every dataset of an HDF5 file (a path or file object): path -> :class:`ChunkLayout`."""
    found: list[str] = []
    with open_file(obj if not isinstance(obj, (bytes, bytearray)) else io.BytesIO(obj)) as f:
        f.visititems(lambda name, node: found.append("/" + name) if hasattr(node, "dtype") else None)
        return read_layouts(f, found, grid)
