"""``tse.advise(source, pattern)``: choose a chunk layout by measuring it, not by a model.

A representative region of the source (at most ``budget_bytes`` decoded) is copied once into a
temporary Zarr v3 store per candidate layout, and the access pattern is timed on each through
the engine. Every run starts from a cold page cache (the candidate's files are written back
and dropped with ``posix_fadvise(DONTNEED)``; nothing else on the machine is touched) and an
empty engine cache (each run opens the candidate afresh). Scattered patterns (jump, viewport,
profile, patches) run without read-ahead and drop the candidate's chunks from the engine cache
between accesses, as on an array much larger than the region, so each access pays for its own
chunks; scrub and scan keep the cache and the prefetcher, which is how they stream.

Without ``candidates=`` the search goes in three rounds, every candidate measured: chunk
shapes around the pattern (frames, viewport tiles, time series, patches, scan blocks, and the
current layout) with one fast codec; the codecs on the fastest shape; sharded variants of the
fastest so far. The winner is the candidate with the lowest median time per access over
``repeats`` runs; a candidate whose first run is ``RACE_FACTOR`` times slower than the best so
far is not run again (it cannot win).

Memory: the region (at most ``budget_bytes``) plus what one run caches of it. Temporary
stores live in ``workdir`` (default: the system's temporary folder) and are removed as soon
as each is measured, and also on errors and KeyboardInterrupt.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ._layout import (
    ADVISE_CODECS,
    SHAPE_CODEC,
    Layout,
    codec_label,
    compressors,
    layout_of,
    shapes_for,
    shard_variants,
)
from ._patterns import SCATTERED, check_pattern, keys_for, region_for, run
from .errors import ConfigError
from .sources.base import ChunkSource

DEFAULT_BUDGET = 256 * 2**20
#: a candidate whose first run is this many times slower than the best so far runs only once
RACE_FACTOR = 4.0
PATTERNS = ("scrub", "jump", "viewport", "profile", "scan", "patches")


@dataclass(frozen=True)
class Measured:
    """What one candidate layout cost on the pattern (times are per access, one per run)."""

    layout: Layout
    ms: tuple[float, ...]
    accesses: int
    used_bytes: float
    decoded_bytes: float
    disk_bytes: int
    region_bytes: int
    write_s: float
    resident: float | None
    round: str

    @property
    def ms_median(self) -> float:
        return float(statistics.median(self.ms))

    @property
    def spread(self) -> float:
        """(slowest - fastest run) / median."""
        return (max(self.ms) - min(self.ms)) / self.ms_median if self.ms_median else 0.0

    @property
    def mb_s(self) -> float:
        """Bytes the pattern used per second (MB/s)."""
        return self.used_bytes / self.ms_median / 1e3 if self.ms_median else math.inf

    @property
    def amplification(self) -> float:
        """Bytes decoded per byte the pattern used."""
        return self.decoded_bytes / self.used_bytes if self.used_bytes else math.nan

    @property
    def ratio(self) -> float:
        """Compression ratio: decoded bytes over bytes on disk."""
        return self.region_bytes / self.disk_bytes if self.disk_bytes else math.nan


@dataclass(frozen=True)
class Advice:
    """The measured table, the winner and how sure it is. ``rows`` are fastest first."""

    pattern: str
    variable: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    region: tuple[tuple[int, int], ...]
    current: Layout
    rows: tuple[Measured, ...]
    seconds: float
    notes: tuple[str, ...] = ()
    source: Any = field(default=None, compare=False, repr=False)

    @property
    def winner(self) -> Layout:
        """The layout with the lowest median time per access."""
        return self.rows[0].layout

    @property
    def margin(self) -> float:
        """How many times slower the runner-up is (median against median)."""
        if len(self.rows) < 2 or not self.rows[0].ms_median:
            return math.inf
        return self.rows[1].ms_median / self.rows[0].ms_median

    @property
    def sure(self) -> bool:
        """True when every run of the winner beat every run of the runner-up."""
        return len(self.rows) < 2 or max(self.rows[0].ms) < min(self.rows[1].ms)

    @property
    def speedup(self) -> float | None:
        """Current layout's median time per access over the winner's (None if not measured)."""
        now = [r for r in self.rows if r.layout.name == "current"]
        if not now or not self.rows[0].ms_median:
            return None
        return now[0].ms_median / self.rows[0].ms_median

    @property
    def table(self) -> Any:
        """The measurements as a :class:`pandas.DataFrame`, fastest first."""
        import pandas as pd

        return pd.DataFrame([_row(r) for r in self.rows])

    def summary(self) -> str:
        """One line: the winner, how sure, and the gain over the current layout."""
        how = "sure" if self.sure else "close call"
        text = (f"{self.pattern}: {self.winner.label} wins ({self.rows[0].ms_median:.2f} ms per access; "
                f"runner-up x{self.margin:.2f} slower, {how})")
        if self.speedup is not None:
            text += f"; x{self.speedup:.1f} faster than the current layout"
        return text

    def __repr__(self) -> str:
        lines = [f"<Advice for {self.pattern!r} on {self.variable} {self.dims} {self.shape}: "
                 f"{len(self.rows)} layouts measured in {self.seconds:.1f} s", "  " + self.summary()]
        for r in self.rows[:8]:
            lines.append(f"  {r.ms_median:9.2f} ms  {r.mb_s:8.1f} MB/s  x{r.amplification:6.1f} decoded  "
                         f"x{r.ratio:5.2f} compr  {r.layout.label}")
        lines += [f"  - {n}" for n in self.notes]
        return "\n".join(lines) + ">"

    def _repr_html_(self) -> str:
        notes = "".join(f"<li>{n}</li>" for n in self.notes)
        table = self.table.to_html(index=False, float_format=lambda v: f"{v:.3g}")
        return (f"<p><b>tse.advise {self.pattern!r}</b> on <code>{self.variable}</code> "
                f"{self.shape}, region {[f'{a}:{b}' for a, b in self.region]} &mdash; "
                f"{self.summary()}</p>{table}" + (f"<ul>{notes}</ul>" if notes else ""))

    def plot(self, top: int = 12) -> Any:
        """A holoviews chart: ms per access of each layout (median, whiskers from the fastest
        to the slowest run), fastest first. Needs the ``lab`` extra."""
        import holoviews as hv

        rows = self.rows[:top]
        labels = [r.layout.label for r in rows]
        lo = min(min(r.ms) for r in rows) / 2
        hi = max(max(r.ms) for r in rows) * 2
        ms = hv.Dimension("ms per access", range=(lo, hi))  # log axis: no bar may start at 0
        bars = hv.Bars([(lab, r.ms_median) for lab, r in zip(labels, rows)], kdims=["layout"], vdims=[ms])
        errs = hv.ErrorBars([(lab, r.ms_median, r.ms_median - min(r.ms), max(r.ms) - r.ms_median)
                             for lab, r in zip(labels, rows)],
                            kdims=["layout"], vdims=[ms, "below", "above"])
        chart = (bars * errs).relabel(f"tse.advise {self.pattern!r}: ms per access (lower is better)")
        if not hv.Store.renderers:  # styling needs a plotting extension: hv.extension("bokeh")
            return chart
        return chart.opts(
            hv.opts.Bars(invert_axes=True, width=680, height=max(200, 26 * len(rows)), logx=True,
                         tools=["hover"], color="#4c78a8"),
            hv.opts.ErrorBars(invert_axes=True),
        )

    def apply(self, target: str | os.PathLike[str], **kwargs: Any) -> Path:
        """Write the whole source in the winning layout with :func:`tsexplore.rechunk.rechunk`."""
        from .rechunk import rechunk

        if self.source is None:
            raise ConfigError("this Advice does not know its source; call tse.rechunk yourself")
        win = self.winner
        shards = dict(zip(self.dims, win.shards)) if win.shards else None
        return rechunk(self.source, target, chunks=dict(zip(self.dims, win.chunks)),
                       codec=win.codec, shards=shards, **kwargs)


def _row(r: Measured) -> dict[str, Any]:
    return {
        "layout": r.layout.name, "chunks": "x".join(map(str, r.layout.chunks)),
        "codec": codec_label(r.layout.codec),
        "shards": "x".join(map(str, r.layout.shards)) if r.layout.shards else "",
        "ms/access": r.ms_median, "spread %": 100 * r.spread, "MB/s": r.mb_s,
        "decoded/used": r.amplification, "compression": r.ratio,
        "MB on disk": r.disk_bytes / 1e6, "write s": r.write_s, "accesses": r.accesses,
        "round": r.round,
    }


def advise(
    source: Any,
    pattern: Any = "scrub",
    *,
    budget_bytes: int = DEFAULT_BUDGET,
    candidates: Sequence[Any] | None = None,
    codecs: Sequence[Any] = ADVISE_CODECS,
    repeats: int = 3,
    max_run_seconds: float = 0.5,
    variable: str | None = None,
    workdir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> Advice:
    """Measure candidate layouts of ``source`` for ``pattern`` and return an :class:`Advice`.

    ``source``: a path/URL, Dataset, DataArray or ChunkSource (read only, never written).
    ``pattern``: ``"scrub"``, ``"jump"``, ``"viewport"``, ``"profile"``, ``"scan"``,
    ``"patches"`` (see :mod:`tsexplore._patterns`) or a callable ``fn(da)`` doing one access.
    ``candidates``: layouts to measure instead of the search (:class:`Layout`, dicts with
    ``chunks``/``codec``/``shards``, or chunk tuples). ``repeats`` cold runs per candidate;
    a run stops after ``max_run_seconds`` of accesses (at least one access).
    """
    t_start = time.perf_counter()
    if not isinstance(budget_bytes, (int, np.integer)) or budget_bytes <= 0:
        raise ConfigError(f"budget_bytes must be a positive number of bytes, got {budget_bytes!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats must be an int >= 1, got {repeats!r}")
    da, src = _source_of(source, variable)
    name = check_pattern(pattern, da.ndim)
    shape, itemsize = tuple(int(s) for s in da.shape), da.dtype.itemsize
    current = layout_of(src, da)
    region = region_for(name, shape, current.chunks, itemsize, int(budget_bytes))
    given = [_as_layout(c, da.dims) for c in candidates] if candidates is not None else None
    notes: list[str] = []
    with _workspace(workdir, notes) as folder, _bar(progress, name) as bar:
        bench = _Bench(da, region, pattern, folder, repeats, max_run_seconds, seed, bar)
        if given is not None:
            bar.total = len(given)
            rows = [bench.measure(lay, "given") for lay in given]
        else:
            rows = _search(bench, name, current, shape, itemsize, codecs)
    rows.sort(key=lambda r: r.ms_median)
    resident = [r.resident for r in rows if r.resident is not None]
    if resident and max(resident) > 0.05:
        notes.append(f"up to {max(resident):.0%} of a candidate's files stayed in the page cache "
                     "after eviction: runs were not fully cold")
    if src is not None and getattr(src, "remote", False):
        notes.append("the source is remote; candidates were measured on local disk")
    if "scale_factor" in da.encoding or "add_offset" in da.encoding:
        notes.append("the source is packed (scale_factor/add_offset); candidates hold the "
                     f"decoded {da.dtype} values, so their compression differs from a packed copy")
    return Advice(
        pattern=name, variable=bench.name, dims=tuple(map(str, da.dims)), shape=shape,
        region=tuple((s.start, s.stop) for s in region), current=current, rows=tuple(rows),
        seconds=time.perf_counter() - t_start, notes=tuple(notes), source=source,
    )


def _search(bench: _Bench, pattern: str, current: Layout, shape: tuple[int, ...], itemsize: int,
            codecs: Sequence[Any]) -> list[Measured]:
    """Three rounds: shapes (one codec), codecs on the best shape, shards of the best."""
    layouts = [current] + [Layout(c, SHAPE_CODEC, None, n) for n, c in shapes_for(pattern, shape, itemsize)]
    seen: set[tuple[Any, ...]] = set()
    first = []
    for lay in layouts:
        key = (lay.within(bench.shape).chunks, lay.shards, codec_label(lay.codec))
        if key not in seen:
            seen.add(key)
            first.append(lay)
    bench.bar.total = len(first) + max(0, len(codecs) - 1) + 2
    rows = [bench.measure(lay, "shape") for lay in first]
    best = _renamed(min(rows, key=lambda r: r.ms_median).layout)
    for codec in codecs:
        if codec_label(codec) != codec_label(best.codec):
            rows.append(bench.measure(replace(best, codec=codec, shards=None), "codec"))
    best = _renamed(min(rows, key=lambda r: r.ms_median).layout)
    variants = shard_variants(best, shape, itemsize)
    bench.bar.total = len(rows) + len(variants)
    rows += [bench.measure(lay, "shards") for lay in variants]
    return rows


def _renamed(layout: Layout) -> Layout:
    """Variants of the current layout are not the current layout."""
    return replace(layout, name="current-shape") if layout.name == "current" else layout


class _Bench:
    """Writes the region once per layout into ``folder`` and times the pattern on it."""

    def __init__(self, da: Any, region: tuple[slice, ...], pattern: Any, folder: Path,
                 repeats: int, max_run_seconds: float, seed: int, bar: Any) -> None:
        self.name = str(da.name) if da.name is not None else "data"
        self.region_da = _copy_region(da, region).rename(self.name)
        self.shape = tuple(int(s) for s in self.region_da.shape)
        self.pattern = pattern
        self.keys = keys_for(pattern if isinstance(pattern, str) else "custom", self.shape, seed)
        if isinstance(pattern, str) and pattern != "scan":
            # one untimed access of the region in memory: xarray imports dask.array the first
            # time a variable is indexed (its duck-array check), ~0.4 s that was timed as the
            # first candidate's first access (and made it lose against a slower one)
            self.region_da[self.keys[0]].values  # noqa: B018
        self.folder, self.repeats, self.max_s, self.bar = folder, repeats, max_run_seconds, bar
        self._n = 0
        self.best = math.inf  # the lowest median ms per access so far

    def measure(self, layout: Layout, round_: str) -> Measured:
        from .testing.pagecache import store_files

        self._n += 1
        path = self.folder / f"candidate-{self._n}.zarr"
        self.bar.set_postfix_str(layout.label, refresh=False)
        try:
            write_s = self._write(path, layout.within(self.shape))
            files = [f for f in store_files(path / self.name) if f.name != "zarr.json"]
            disk = sum(f.stat().st_size for f in files)
            ms, counts, used, decoded, resident = self._runs(path, files)
        finally:
            shutil.rmtree(path, ignore_errors=True)
        self.best = min(self.best, float(statistics.median(ms)))
        self.bar.update(1)
        known = [r for r in resident if r is not None]
        return Measured(layout, tuple(ms), min(counts), used, decoded, disk,
                        int(self.region_da.nbytes), write_s, max(known) if known else None, round_)

    def _runs(self, path: Path, files: list[Path]) -> tuple[list[float], list[int], float, float, list]:
        """Cold runs of the pattern; a candidate far slower than the best so far gets one."""
        from .engine.scheduler import get_engine
        from .resolve import sources_of
        from .testing.pagecache import evict
        from .xarray import open_dataset

        engine = get_engine()
        ms: list[float] = []
        counts, resident, used, decoded = [], [], 0.0, 0.0
        prefetch = "off" if self.pattern in SCATTERED else "auto"
        for i in range(self.repeats):
            resident.append(evict(files, sync=i == 0))  # written back once, dropped every time
            da = open_dataset(path, prefetch=prefetch)[self.name]
            src = sources_of(da)[0]
            before = engine.snapshot()
            n, secs, nbytes = run(da, self.pattern, self.keys, self.max_s, partial(_forget, engine, src))
            delta = engine.snapshot() - before
            _forget(engine, src)
            ms.append(1e3 * secs / n)
            counts.append(n)
            decoded += delta.bytes_decoded / n
            used += nbytes / n
            if ms[0] > RACE_FACTOR * self.best:  # it cannot win: one run says so
                break
        return ms, counts, used / len(ms), decoded / len(ms), resident

    def _write(self, path: Path, layout: Layout) -> float:
        ds = self.region_da.to_dataset()
        encoding: dict[str, dict[str, Any]] = {
            self.name: {"chunks": layout.chunks, "shards": layout.shards,
                        "compressors": compressors(layout.codec), "_FillValue": None}
        }
        for c in ds.coords:
            encoding[str(c)] = {"_FillValue": None}
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zarr's notes on v3 specifics
            ds.to_zarr(path, mode="w-", zarr_format=3, encoding=encoding, consolidated=False,
                       write_empty_chunks=True)
        return time.perf_counter() - t0


def _copy_region(da: Any, region: tuple[slice, ...]) -> Any:
    """The region's values and coordinates in memory (read through the engine)."""
    from .engine.scheduler import current_engine

    engine = current_engine()
    before = set(engine.cache.keys()) if engine is not None else set()
    out = da[region].load()
    out.encoding = {}
    for c in out.coords.values():
        c.encoding = {k: v for k, v in c.encoding.items() if k in ("units", "calendar", "dtype")}
    engine = current_engine()
    if engine is not None:  # the copy is read once: drop what it added to the cache
        engine.cache.discard([k for k in engine.cache.keys() if k not in before])
    return out


def _forget(engine: Any, source: ChunkSource, timeout: float = 10.0) -> None:
    """Let the reads of ``source`` finish (read-ahead included), drop its chunks from the cache."""
    token = source.token
    deadline = time.monotonic() + timeout
    while any(k.array == token for k in engine.in_flight_keys()) and time.monotonic() < deadline:
        time.sleep(0.002)
    engine.cache.discard([k for k in engine.cache.keys() if k.array == token])


def _as_layout(obj: Any, dims: Sequence[Any]) -> Layout:
    """A :class:`Layout` from a Layout, a dict (chunks/codec/shards/name) or a chunk tuple."""
    if isinstance(obj, Layout):
        return obj
    if isinstance(obj, dict) and "chunks" in obj:
        chunks = obj["chunks"]
        shards = obj.get("shards")
        if isinstance(chunks, dict):
            chunks = tuple(int(chunks[d]) for d in dims)
        if isinstance(shards, dict):
            shards = tuple(int(shards[d]) for d in dims)
        return Layout(tuple(chunks), obj.get("codec", SHAPE_CODEC),
                      tuple(shards) if shards else None, obj.get("name", ""))
    if isinstance(obj, (tuple, list)) and all(isinstance(c, (int, np.integer)) for c in obj):
        return Layout(tuple(int(c) for c in obj))
    raise ConfigError(f"a candidate must be a Layout, a dict with 'chunks', or a chunk tuple; got {obj!r}")


@contextmanager
def _workspace(workdir: Any, notes: list[str]) -> Iterator[Path]:
    """A temporary folder for the candidate stores, removed on the way out (whatever happens)."""
    folder = Path(tempfile.mkdtemp(prefix="tsexplore-advise-", dir=workdir))
    if _on_tmpfs(folder):
        notes.append(f"{folder.parent} is in memory (tmpfs): cold reads were memory reads; "
                     "pass workdir= a folder on the disk the data will live on")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _on_tmpfs(path: Path) -> bool:
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return False
    best = max((m for m in mounts if len(m) > 2 and str(path).startswith(m[1])),
               key=lambda m: len(m[1]), default=None)
    return best is not None and best[2] in ("tmpfs", "ramfs")


@contextmanager
def _bar(enabled: bool, pattern: str) -> Iterator[Any]:
    """A tqdm bar over candidates (a widget in a notebook, text in a terminal)."""
    if not enabled:
        class _Null:
            total = 0

            def update(self, n: int) -> None: ...
            def set_postfix_str(self, s: str, refresh: bool = True) -> None: ...

        yield _Null()
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=0, desc=f"advise {pattern}", unit="layout")
    try:
        yield bar
    finally:
        bar.close()


def _source_of(obj: Any, variable: str | None) -> tuple[Any, ChunkSource | None]:
    """The DataArray to advise on and the engine source behind it (None for other arrays)."""
    import xarray as xr

    from .resolve import sources_of
    from .xarray import open_dataset

    if not isinstance(obj, (xr.Dataset, xr.DataArray)):
        obj = open_dataset(obj)
    if isinstance(obj, xr.Dataset):
        names = [variable] if variable else [n for n in obj.data_vars if obj[n].ndim >= 2]
        if not names or names[0] not in obj.data_vars:
            raise ConfigError(f"no variable {variable!r} with 2 or more dims to advise on; "
                              f"the dataset has {list(obj.data_vars)}")
        obj = obj[names[0]]
    found = sources_of(obj)
    src = found[0] if found and tuple(found[0].shape) == tuple(obj.shape) else None
    return obj, src
