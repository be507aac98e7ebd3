"""The pure parts of tse.advise: codec names, layouts clipped to a region, shard variants, the
region copied for a pattern and the accesses of each pattern."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, ZstdCodec

from tsexplore._layout import (
    ADVISE_CODECS,
    Layout,
    codec_label,
    compressors,
    shapes_for,
    shard_variants,
)
from tsexplore._patterns import PATTERNS, keys_for, region_for
from tsexplore.errors import ConfigError


def test_codec_names_round_trip() -> None:
    (blosc,) = compressors("blosc-zstd-2")
    assert isinstance(blosc, BloscCodec) and blosc.clevel == 2
    assert str(getattr(blosc.shuffle, "value", blosc.shuffle)) == "shuffle"
    assert compressors("none") == ()
    assert compressors(["zstd-1"]) == (ZstdCodec(level=1),)
    for name in (*ADVISE_CODECS, "blosc-lz4-5-bitshuffle", "gzip-6"):
        assert codec_label(compressors(name)) == name
    with pytest.raises(ConfigError, match="unknown codec"):
        compressors("brotli-3")
    with pytest.raises(ConfigError, match="not valid"):
        compressors("zstd-high")


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_layout_within_a_region_keeps_shards_whole_multiples(data: st.DataObject) -> None:
    nd = data.draw(st.integers(1, 4))
    chunks = tuple(data.draw(st.integers(1, 64)) for _ in range(nd))
    shards = tuple(c * data.draw(st.integers(1, 8)) for c in chunks)
    shape = tuple(data.draw(st.integers(1, 300)) for _ in range(nd))
    got = Layout(chunks, "none", shards).within(shape)
    assert got.chunks == tuple(min(c, s) for c, s in zip(chunks, shape))
    if got.shards is not None:
        assert all(sh % c == 0 for sh, c in zip(got.shards, got.chunks))
        assert all(sh <= math.ceil(s / c) * c for sh, c, s in zip(got.shards, got.chunks, shape))
        assert got.shards != got.chunks


def test_shard_variants_group_small_chunks() -> None:
    series = Layout((512, 16, 16), "blosc-lz4-5")
    variants = shard_variants(series, (512, 1024, 1024), 4)
    assert [v.shards for v in variants] == [(512, 128, 128)]  # the first dim is whole already
    frame = Layout((1, 1024, 1024), "none")
    assert [v.shards for v in shard_variants(frame, (512, 1024, 1024), 4)] == [(4, 1024, 1024)]
    assert shard_variants(Layout((64, 256, 256)), (512, 1024, 1024), 4) == []  # 16 MiB: enough


def test_shapes_for_each_pattern_are_chunk_shapes_of_the_array() -> None:
    shape = (512, 1024, 1024)
    for pattern in (*PATTERNS, "custom"):
        proposals = shapes_for(pattern, shape, 4)
        assert len(proposals) == 5
        for _name, chunks in proposals:
            assert len(chunks) == 3 and all(1 <= c <= s for c, s in zip(chunks, shape))
            assert math.prod(chunks) * 4 <= 16 * 2**20
    assert ("series-16", (512, 16, 16)) in shapes_for("profile", shape, 4)
    assert ("frame", (1, 1024, 1024)) in shapes_for("scrub", shape, 4)
    with pytest.raises(ConfigError, match="2 or more dims"):
        shapes_for("scan", (100,), 4)


@settings(max_examples=100, deadline=None)
@given(
    pattern=st.sampled_from(PATTERNS),
    shape=st.tuples(st.integers(1, 4096), st.integers(1, 4096), st.integers(1, 4096)),
    chunks=st.tuples(st.integers(1, 64), st.integers(1, 512), st.integers(1, 512)),
    budget=st.integers(2**20, 2**28),
)
def test_region_is_inside_the_array_within_budget_and_chunk_aligned(
    pattern: str, shape: tuple, chunks: tuple, budget: int
) -> None:
    try:
        region = region_for(pattern, shape, chunks, 4, budget)
    except ConfigError:
        return  # a budget too small for this array: refused, with a message
    sizes = [r.stop - r.start for r in region]
    assert math.prod(sizes) * 4 <= budget
    for r, s, c in zip(region, shape, chunks):
        assert 0 <= r.start < r.stop <= s
        assert r.start % c == 0  # starts on a chunk boundary: the copy reads whole chunks
    if pattern == "profile":
        assert region[0] == slice(0, sizes[0]) and (sizes[0] == shape[0] or sizes[-1] * sizes[-2] <= 64 * 64 * 4)


def test_region_keeps_what_the_pattern_needs() -> None:
    cube, chunks, budget = (512, 1024, 1024), (16, 256, 256), 256 * 2**20
    assert region_for("profile", cube, chunks, 4, budget) == (slice(0, 512), slice(256, 512), slice(256, 768))
    scrub = region_for("scrub", cube, chunks, 4, budget)
    assert scrub[1:] == (slice(0, 1024), slice(0, 1024)) and scrub[0].stop - scrub[0].start == 64
    assert region_for("scan", (32, 128, 128), (8, 64, 64), 4, budget) == (slice(0, 32), slice(0, 128), slice(0, 128))


def test_keys_of_each_pattern() -> None:
    shape = (40, 600, 700)
    arr = np.zeros(shape, dtype=np.uint8)
    scrub = keys_for("scrub", shape)
    assert [k[0] for k in scrub] == list(range(40)) and arr[scrub[0]].shape == (600, 700)
    jump = keys_for("jump", shape)
    assert len({k[0] for k in jump}) == 24
    assert {arr[k].shape for k in keys_for("profile", shape)} == {(40,)}
    assert {arr[k].shape for k in keys_for("viewport", shape)} == {(512, 512)}
    assert {arr[k].shape for k in keys_for("patches", shape)} == {(16, 64, 64)}
    assert keys_for("patches", shape, seed=1) != keys_for("patches", shape, seed=2)
    assert keys_for("profile", shape, seed=3) == keys_for("profile", shape, seed=3)
    assert keys_for("scan", shape) == [()]
