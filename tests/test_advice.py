import math

import numpy as np
import pytest

import tsexplore as tse
from tsexplore.advice import amplification
from tsexplore.errors import ConfigError


def brute_amplification(window, chunks, shape, start):
    """Decoded elements / used elements for one window at ``start``, by counting chunks."""
    touched = 1
    for w, c, s0 in zip(window, chunks, start):
        touched *= (s0 + w - 1) // c - s0 // c + 1
    return touched * math.prod(chunks) / math.prod(window)


def test_aligned_amplification_matches_counting():
    assert amplification((1, 1024, 1024), (16, 256, 256), aligned=True) == 16.0
    assert amplification((16, 64, 64), (16, 64, 64), aligned=True) == 1.0
    assert amplification((1, 100, 100), (1, 64, 64), aligned=True) == pytest.approx(4 * 64 * 64 / 1e4)
    assert amplification((1, 1024, 1024), (16, 256, 256), aligned=True) == brute_amplification(
        (1, 1024, 1024), (16, 256, 256), None, (0, 0, 0)
    )


def test_unaligned_amplification_is_the_mean_over_positions():
    window, chunks = (16, 64, 64), (16, 256, 256)
    rng = np.random.default_rng(1)
    starts = [tuple(int(rng.integers(0, 10_000)) for _ in range(3)) for _ in range(20_000)]
    mean = np.mean([brute_amplification(window, chunks, None, s) for s in starts])
    assert amplification(window, chunks, aligned=False) == pytest.approx(mean, rel=0.03)


def test_advise_measures_and_proposes(small_cube):
    ds = tse.open_dataset(small_cube)
    advice = tse.advise(ds, "scrub")
    src = ds["temp"].tse.sources[0]
    assert advice.chunks == src.chunks == (8, 64, 64)
    assert advice.amplification == 8.0  # one frame of an 8-frame chunk
    # a 128 x 128 frame is 64 KiB: the smallest chunk allowed (256 KiB) holds 4 frames
    assert advice.proposed_chunks == (4, 128, 128)
    assert advice.proposed_amplification == 4.0 < advice.amplification
    assert advice.decode_mb_s > 0 and advice.chunk_latency_ms > 0
    assert advice.compression_ratio is not None and advice.compression_ratio > 1
    assert "scrub" in repr(advice)
    assert tse.advise(small_cube, "scan").amplification == 1.0


def test_advise_rejects_unknown_pattern(small_cube):
    with pytest.raises(ConfigError, match="pattern must be one of"):
        tse.advise(small_cube, "zigzag")
