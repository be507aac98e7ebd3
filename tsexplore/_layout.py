"""Chunk layouts: a chunk shape, a codec and optional shards, as ``tse.advise`` measures them
and ``tse.rechunk`` writes them (Zarr v3).

Codecs are named ``"none"``, ``"blosc-<cname>-<level>"`` (byte shuffle; add ``-bitshuffle`` or
``-noshuffle`` to change it), ``"zstd-<level>"`` or ``"gzip-<level>"``; zarr codec objects are
accepted too. :func:`shapes_for` proposes chunk shapes for an access pattern (frames,
viewport tiles, time series, patches, scan blocks) and :func:`shard_variants` groups small
chunks into shards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from .errors import ConfigError

#: the codecs ``tse.advise`` compares on the best chunk shape: blosc (byte shuffle) with lz4
#: and with zstd at two levels (blosc's levels 1 and 2 are zstd's 1 and 3), plain zstd, none
ADVISE_CODECS = ("blosc-lz4-5", "blosc-zstd-1", "blosc-zstd-2", "zstd-1", "none")
#: the codec of the first round (chunk shapes): fast to write and to read
SHAPE_CODEC = "blosc-lz4-5"
#: chunks and shards are kept below this many decoded bytes
MAX_CHUNK_BYTES = 16 * 2**20
SHUFFLES = ("shuffle", "noshuffle", "bitshuffle")


def compressors(codec: Any) -> tuple[Any, ...]:
    """Zarr v3 compressors for ``codec``: a name (see the module doc), a codec, or a sequence."""
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

    if isinstance(codec, str):
        parts = codec.lower().split("-")
        try:
            if parts == ["none"]:
                return ()
            if parts[0] == "blosc" and 2 <= len(parts) <= 4:
                shuffle = parts[3] if len(parts) == 4 else "shuffle"
                level = int(parts[2]) if len(parts) >= 3 else 5
                if shuffle in SHUFFLES and 0 <= level <= 9:
                    cname: Any = parts[1]  # zarr checks the name
                    return (BloscCodec(cname=cname, clevel=level, shuffle=cast(Any, shuffle)),)
            if parts[0] == "zstd" and len(parts) <= 2:
                return (ZstdCodec(level=int(parts[1]) if len(parts) == 2 else 3),)
            if parts[0] == "gzip" and len(parts) <= 2:
                return (GzipCodec(level=int(parts[1]) if len(parts) == 2 else 5),)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"codec {codec!r} is not valid: {exc}") from None
        raise ConfigError(
            f"unknown codec {codec!r}; use 'none', 'blosc-<cname>-<level>' (e.g. 'blosc-lz4-5', "
            "'blosc-zstd-1', add '-bitshuffle' or '-noshuffle'), 'zstd-<level>' or 'gzip-<level>', "
            "or pass zarr codec objects"
        )
    if isinstance(codec, Sequence):
        return tuple(c for item in codec for c in compressors(item))
    if hasattr(codec, "to_dict"):  # a zarr v3 codec object
        return (codec,)
    raise ConfigError(f"codec must be a name or zarr codec objects, got {codec!r}")


def codec_label(codec: Any) -> str:
    """A short name for ``codec`` (names stay as given; codec objects are described)."""
    if isinstance(codec, str):
        return codec
    parts = []
    for c in compressors(codec):
        kind = type(c).__name__
        if kind == "BloscCodec":
            shuffle = str(getattr(c.shuffle, "value", c.shuffle))
            parts.append(f"blosc-{getattr(c.cname, 'value', c.cname)}-{c.clevel}"
                         + ("" if shuffle == "shuffle" else f"-{shuffle}"))
        elif kind in ("ZstdCodec", "GzipCodec"):
            parts.append(f"{kind[:-5].lower()}-{c.level}")
        else:
            parts.append(kind)
    return "+".join(parts) or "none"


@dataclass(frozen=True)
class Layout:
    """One way to store an array: ``chunks`` (one length per dim), ``codec``, ``shards``."""

    chunks: tuple[int, ...]
    codec: Any = SHAPE_CODEC
    shards: tuple[int, ...] | None = None
    name: str = ""

    @property
    def label(self) -> str:
        text = f"{self.name + ' ' if self.name else ''}{'x'.join(map(str, self.chunks))} {codec_label(self.codec)}"
        if self.shards:
            text += f" shards {'x'.join(map(str, self.shards))}"
        return text

    def chunk_bytes(self, itemsize: int) -> int:
        return math.prod(self.chunks) * itemsize

    def within(self, shape: Sequence[int]) -> Layout:
        """The layout clipped to an array of ``shape`` (shards stay whole multiples of chunks)."""
        chunks = tuple(max(1, min(c, s)) for c, s in zip(self.chunks, shape))
        shards = None
        if self.shards is not None:
            shards = tuple(
                max(ck, min(sh // c * ck, math.ceil(s / ck) * ck))
                for sh, c, ck, s in zip(self.shards, self.chunks, chunks, shape)
            )
            if shards == chunks:
                shards = None
        return replace(self, chunks=chunks, shards=shards)


def check_layout(chunks: Sequence[int], shards: Sequence[int] | None, shape: Sequence[int]) -> None:
    """Raise :class:`ConfigError` unless chunks are positive and shards whole multiples of them."""
    if len(chunks) != len(shape) or any(int(c) <= 0 for c in chunks):
        raise ConfigError(f"chunks {tuple(chunks)} must give one positive length per dim of {tuple(shape)}")
    if shards is not None:
        if len(shards) != len(shape) or any(int(s) % int(c) for s, c in zip(shards, chunks)):
            raise ConfigError(
                f"shards {tuple(shards)} must be whole multiples of the chunks {tuple(chunks)}, "
                "one per dim"
            )


def _families(shape: tuple[int, ...], itemsize: int) -> dict[str, tuple[int, ...]]:
    """Chunk shapes by family for an array of 3 or more dims (lead, middle dims, y, x)."""
    nd = len(shape)
    lead, ny, nx = shape[0], shape[-2], shape[-1]

    def mk(depth: int, side: int) -> tuple[int, ...]:
        return (min(depth, lead),) + (1,) * (nd - 3) + (min(side, ny), min(side, nx))

    frame_side = max(ny, nx)
    while frame_side * frame_side * itemsize > MAX_CHUNK_BYTES and frame_side > 64:
        frame_side //= 2
    out = {"frame": mk(1, frame_side), "frames-4": mk(4, frame_side)}
    for side in (128, 256, 512):
        out[f"tile-{side}"] = mk(1, side)
    for side in (16, 32, 64):
        out[f"series-{side}"] = mk(max(1, MAX_CHUNK_BYTES // (side * side * itemsize)), side)
    out.update({"patch": mk(16, 64), "patch-32": mk(32, 64), "patch-128": mk(16, 128),
                "block": mk(16, 256), "block-64": mk(64, 256)})
    return out


#: the chunk-shape families measured first for each pattern (the current layout is added)
FAMILIES = {
    "scrub": ("frame", "frames-4", "tile-512", "tile-256", "block"),
    "jump": ("frame", "tile-512", "tile-256", "frames-4", "block"),
    "viewport": ("tile-128", "tile-256", "tile-512", "frame", "block"),
    "profile": ("series-16", "series-32", "series-64", "block-64", "patch"),
    "patches": ("patch", "patch-32", "patch-128", "block", "series-32"),
    "scan": ("block", "block-64", "frame", "frames-4", "series-64"),
    "custom": ("frame", "tile-256", "series-32", "patch", "block"),
}


def shapes_for(pattern: str, shape: tuple[int, ...], itemsize: int) -> list[tuple[str, tuple[int, ...]]]:
    """``(family, chunks)`` proposals for ``pattern`` on an array of ``shape`` (full-size chunks)."""
    if len(shape) >= 3:
        fam = _families(shape, itemsize)
        return [(name, fam[name]) for name in FAMILIES.get(pattern, FAMILIES["custom"])]
    if len(shape) == 2:
        sides = {"patches": (64, 128, 256), "scan": (256, 512, 1024)}.get(pattern, (128, 256, 512, 1024))
        return [(f"tile-{s}", (min(s, shape[0]), min(s, shape[1]))) for s in sides]
    raise ConfigError(f"advise needs an array of 2 or more dims, got shape {shape}")


def shard_variants(layout: Layout, shape: tuple[int, ...], itemsize: int) -> list[Layout]:
    """Up to two sharded versions of ``layout``: more chunks per shard along the plane (the
    last two dims), or along the first dim, until a shard holds about 16-32 MiB."""
    if layout.shards is not None or layout.chunk_bytes(itemsize) >= MAX_CHUNK_BYTES // 2:
        return []
    nd = len(shape)
    groups = [tuple(range(max(0, nd - 2), nd))] + ([(0,)] if nd >= 3 else [])
    out = []
    for axes in groups:
        shards = list(layout.chunks)
        while math.prod(shards) * itemsize < MAX_CHUNK_BYTES:
            grow = [a for a in axes if shards[a] < shape[a]]
            if not grow:
                break
            for a in grow:
                c = layout.chunks[a]
                shards[a] = min(2 * shards[a], math.ceil(shape[a] / c) * c)
        if tuple(shards) != layout.chunks:
            out.append(replace(layout, shards=tuple(shards)))
    return out


def layout_of(src: Any, da: Any) -> Layout:
    """The current layout of ``da`` (a DataArray) read from ``src`` (its engine source or None):
    the chunks, and for Zarr the codec and shards. Other sources get codec ``"none"`` when they
    are raw files (``.npy``) and zarr's default (``"zstd-0"``) otherwise."""
    if src is not None:
        chunks = tuple(int(c) for c in src.chunks)
    elif getattr(da, "chunks", None):
        chunks = tuple(int(c[0]) for c in da.chunks)
    else:
        enc = da.encoding.get("chunks")
        chunks = tuple(int(c) for c in enc) if enc else tuple(int(s) for s in da.shape)
    arr = getattr(src, "_array", None)  # a ZarrSource keeps its zarr.Array
    if arr is None:
        raw = type(src).__name__ == "MemmapSource"
        return Layout(chunks, "none" if raw else "zstd-0", None, "current")
    try:
        codec = _codec_name(arr.compressors)
        shards = tuple(int(s) for s in arr.shards) if getattr(arr, "shards", None) else None
    except (ValueError, AttributeError, KeyError):  # filters or codecs without a v3 name
        codec, shards = SHAPE_CODEC, None
    return Layout(chunks, codec, shards, "current")


def _codec_name(comps: Sequence[Any]) -> str:
    """A codec name for zarr v3 compressors or numcodecs (Zarr v2) compressors."""
    names = []
    for c in comps or ():
        cid = getattr(c, "codec_id", None)
        if cid == "blosc":
            shuffle = {0: "-noshuffle", 1: "", 2: "-bitshuffle"}[int(c.shuffle)]
            names.append(f"blosc-{c.cname}-{c.clevel}{shuffle}")
        elif cid in ("zstd", "gzip"):
            names.append(f"{cid}-{c.level}")
        elif cid is not None:
            raise ValueError(f"no zarr v3 codec name for {cid}")
        else:
            names.append(codec_label((c,)))
    if len(names) > 1:
        raise ValueError("more than one compressor")
    return names[0] if names else "none"
