"""tse.advise: the winner is the measured fastest layout, the source is never written, and
the temporary stores go away whatever happens."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import tsexplore as tse
import tsexplore.xarray as tx
from tsexplore._layout import ADVISE_CODECS, Layout
from tsexplore.errors import ConfigError
from tsexplore.resolve import sources_of
from tsexplore.testing.wrappers import LatencySource

SERIES = Layout((32, 16, 16), "blosc-lz4-5", None, "series")
FRAMES = Layout((1, 128, 128), "blosc-lz4-5", None, "frames")
FAST = dict(repeats=2, max_run_seconds=0.3, progress=False)


def fingerprint(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``root``: size, mtime and a hash of its bytes."""
    out = {}
    for f in sorted(root.rglob("*")):
        if f.is_file():
            st = f.stat()
            out[str(f.relative_to(root))] = (st.st_size, st.st_mtime_ns, hashlib.sha256(f.read_bytes()).hexdigest())
    return out


def slowed(monkeypatch: pytest.MonkeyPatch, chunks: tuple[int, ...], seconds: float) -> list[int]:
    """Open candidates with ``chunks`` through a LatencySource (every chunk read waits)."""
    real = tx.open_dataset
    wrapped = []

    def open_dataset(obj, *args, **kwargs):
        ds = real(obj, *args, **kwargs)
        if isinstance(obj, Path) and obj.name.startswith("candidate-"):
            src = sources_of(ds["temp"])[0]
            if src.chunks == chunks:
                wrapped.append(1)
                slow = LatencySource(src, seconds)
                slow.name = "temp"
                return real(slow, *args, **kwargs)
        return ds

    monkeypatch.setattr(tx, "open_dataset", open_dataset)
    return wrapped


def test_winner_is_the_argmin_of_the_measured_table(small_cube: Path) -> None:
    advice = tse.advise(small_cube, "profile", candidates=[FRAMES, SERIES, (8, 32, 32)], **FAST)
    ms = [r.ms_median for r in advice.rows]
    assert len(advice.rows) == 3 and ms == sorted(ms)
    assert advice.winner == min(advice.rows, key=lambda r: r.ms_median).layout
    assert list(advice.table["ms/access"]) == pytest.approx(ms)
    for r in advice.rows:
        assert 1 <= len(r.ms) <= 2 and r.accesses >= 1 and r.disk_bytes > 0
        assert r.used_bytes == 32 * 4  # one pixel's series of 32 float32 values
        # each access decodes the series' values and at most the chunks that hold it (a
        # pixel of a blosc-lz4 chunk: its blocks only up to the pixel)
        depth = math.ceil(32 / r.layout.chunks[0])
        assert 1 <= r.amplification <= depth * math.prod(r.layout.chunks) * 4 / 128 + 1e-9
    assert advice.margin >= 1 and isinstance(advice.sure, bool)


@pytest.mark.parametrize("slow", [SERIES, FRAMES])
def test_a_candidate_made_slow_loses(small_cube: Path, monkeypatch: pytest.MonkeyPatch, slow: Layout) -> None:
    """Whichever layout is slowed (150 ms per chunk read) loses: the winner is measured, not
    modelled (a model would pick the series layout for profiles every time)."""
    wrapped = slowed(monkeypatch, slow.chunks, 0.15)
    advice = tse.advise(small_cube, "profile", candidates=[SERIES, FRAMES], **FAST)
    assert wrapped, "the slowed candidate was never opened"
    assert advice.winner != slow
    (slowed_row,) = [r for r in advice.rows if r.layout == slow]
    assert min(slowed_row.ms) >= 150  # at least one waiting read per access
    assert advice.rows[-1].layout == slow


def test_advise_never_writes_the_source_and_cleans_up(small_cube: Path, tmp_path: Path) -> None:
    before = fingerprint(small_cube)
    work = tmp_path / "work"
    work.mkdir()
    advice = tse.advise(small_cube, "scrub", candidates=[FRAMES, (8, 64, 64)], workdir=work, **FAST)
    assert len(advice.rows) == 2
    assert fingerprint(small_cube) == before
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_temporary_stores_go_away_on_error(small_cube: Path, tmp_path: Path, error: type) -> None:
    calls = []

    def access(da: xr.DataArray) -> None:
        calls.append(da.shape)
        raise error("stop here")

    with pytest.raises(error, match="stop here"):
        tse.advise(small_cube, access, candidates=[FRAMES], workdir=tmp_path, **FAST)
    assert calls == [(32, 128, 128)]  # the whole small cube fits the budget: it is the region
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_default_search_measures_shapes_codecs_and_shards(small_cube: Path) -> None:
    advice = tse.advise(small_cube, "scrub", repeats=1, max_run_seconds=0.05, progress=False)
    rounds = {r.round for r in advice.rows}
    assert rounds == {"shape", "codec", "shards"}
    (current,) = [r for r in advice.rows if r.layout.name == "current"]
    assert current.layout.chunks == (8, 64, 64) and current.layout.codec == "blosc-zstd-1"
    (best_shape,) = {r.layout.chunks for r in advice.rows if r.round == "codec"}
    codecs = {r.layout.codec for r in advice.rows if r.layout.chunks == best_shape and not r.layout.shards}
    assert set(ADVISE_CODECS) <= codecs  # every codec measured on the fastest shape
    for r in advice.rows:
        if r.layout.codec == "none":
            assert r.ratio == pytest.approx(1.0, rel=0.01)  # plus the shard index, if any
        else:
            assert r.ratio > 1.05  # the cube keeps 0.01 degC: every codec here compresses it
        if r.layout.shards:
            assert all(s % c == 0 for s, c in zip(r.layout.shards, r.layout.chunks))
    assert advice.winner == advice.rows[0].layout
    assert advice.speedup is not None and advice.speedup >= 1  # the current layout is a candidate
    assert "scrub" in repr(advice) and "<table" in advice._repr_html_()
    assert advice.table.columns[:5].tolist() == ["layout", "chunks", "codec", "shards", "ms/access"]


def test_plot_and_apply(small_cube: Path, tmp_path: Path) -> None:
    pytest.importorskip("holoviews")
    advice = tse.advise(small_cube, "profile", candidates=[SERIES, FRAMES], **FAST)
    chart = advice.plot()
    assert "ms per access" in str(chart)
    out = advice.apply(tmp_path / "applied.zarr", progress=False)
    ds = tse.open_dataset(out)
    assert ds["temp"].tse.sources[0].chunks == advice.winner.chunks
    xr.testing.assert_identical(ds, tse.open_dataset(small_cube))


def test_advise_accepts_datasets_and_arrays(small_cube: Path) -> None:
    ds = tse.open_dataset(small_cube)
    by_dataset = tse.advise(ds, "jump", candidates=[FRAMES], **FAST)
    assert by_dataset.variable == "temp" and by_dataset.current.chunks == (8, 64, 64)
    plain = xr.DataArray(np.ones((16, 32, 32), "float32"), dims=("t", "y", "x"), name="ones")
    by_numpy = tse.advise(plain, "viewport", candidates=[(1, 32, 32)], **FAST)
    assert by_numpy.shape == (16, 32, 32) and by_numpy.current.chunks == (16, 32, 32)
    assert by_numpy.rows[0].used_bytes == 32 * 32 * 4  # the viewport is clipped to the plane


def test_advise_rejects_bad_input(small_cube: Path) -> None:
    with pytest.raises(ConfigError, match="pattern must be one of"):
        tse.advise(small_cube, "zigzag")
    with pytest.raises(ConfigError, match="budget_bytes"):
        tse.advise(small_cube, "scrub", budget_bytes=0)
    with pytest.raises(ConfigError, match="too small for a representative region"):
        tse.advise(small_cube, "scrub", budget_bytes=1000)
    with pytest.raises(ConfigError, match="a candidate must be"):
        tse.advise(small_cube, "scrub", candidates=["big"], progress=False)
    plane = xr.DataArray(np.zeros((64, 64), "float32"), dims=("y", "x"), name="plane")
    with pytest.raises(ConfigError, match="needs an array of 3 or more dims"):
        tse.advise(plane, "profile")
