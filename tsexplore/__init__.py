"""tsexplore: stream giant N-dimensional arrays into Jupyter.

>>> import tsexplore as tse
>>> ds = tse.open_dataset("data/cube.zarr")          # lazy xarray.Dataset, engine-backed
>>> ds["temp"].isel(time=3).values                     # reads only the chunks it needs
>>> tse.stats()                                        # cache hits, I/O rates, latency

Importing this package never imports ipywidgets, holoviews, torch, tensorflow or cupy.
"""

from __future__ import annotations

from typing import Any

from . import accessor as _accessor  # noqa: F401 - registers the .tse accessor
from . import config, errors
from .engine import Priority, StatsSnapshot, close_engine, get_engine
from .engine import snapshot as _snapshot
from .errors import TsExploreError

# the functions, not the submodules of the same names (imported here, so they stay functions)
from .pyramid import pyramid
from .rechunk import rechunk
from .sample import sample_data
from .sources import SourceOptions, SyntheticSource
from .xarray import open_dataset, open_datatree

__version__ = "0.1.0"

__all__ = [
    "Priority",
    "advise",
    "StatsSnapshot",
    "TsExploreError",
    "batches",
    "close",
    "explore",
    "reduce",
    "stats_panel",
    "config",
    "errors",
    "open_dataset",
    "open_datatree",
    "pyramid",
    "rechunk",
    "sample_data",
    "stats",
    "synthetic",
]


def stats() -> StatsSnapshot:
    """A frozen snapshot of the engine's statistics (hits, bytes, rates, latency, queues).

    Zeros when no engine runs (asking for statistics never starts one).
    """
    return _snapshot()


def reset_stats() -> None:
    """Zero the engine's counters (the cache keeps its contents)."""
    from .engine import current_engine

    engine = current_engine()
    if engine is not None:
        engine.stats.reset()


def close() -> None:
    """Stop the engine's threads and drop the cache; the next read starts a fresh engine."""
    close_engine()


def synthetic(
    shape: tuple[int, ...],
    chunks: Any = None,
    dtype: Any = "float32",
    latency: float = 0.0,
    *,
    name: str = "data",
    dims: tuple[str, ...] | None = None,
    prefetch: Any = "auto",
    missing: str = "fill",
) -> Any:
    """A lazy Dataset over a virtual array of any size (content is a function of position).

    ``prefetch`` and ``missing`` as for :func:`open_dataset` (a synthetic array has every
    chunk, so ``missing`` only matters to wrappers that drop some).
    """
    options = SourceOptions(missing, prefetch)
    src = SyntheticSource(shape, chunks, dtype, latency, dims, name=name, options=options)
    return open_dataset(src, prefetch=prefetch, missing=missing)


def explore(*objs: Any, **kwargs: Any) -> Any:
    """An Explorer widget on a Dataset/DataArray (needs the ``lab`` extra); a pyramid the
    data is a level of is shown at the level that fits the screen. Several objects: linked
    views, their slider, pan and zoom in step (``tsexplore.ui.LinkedViews``)."""
    from .pyramid import explorer_options
    from .ui import explore as _explore
    from .ui import link

    if len(objs) <= 1 or isinstance(objs[1], str):
        return _explore(*objs, **explorer_options(objs[0], kwargs) if objs else kwargs)
    stats = kwargs.pop("stats", True)
    return link(*[_explore(o, **explorer_options(o, {**kwargs, "stats": stats and k == 0}))
                  for k, o in enumerate(objs)])


def stats_panel(**kwargs: Any) -> Any:
    """The live StatsPanel widget on its own (needs the ``lab`` extra)."""
    from .ui import stats_panel as _stats_panel

    return _stats_panel(**kwargs)


def reduce(da: Any, op: str, dim: Any = None, **kwargs: Any) -> Any:
    """Streaming reduction of a DataArray through the engine; see :mod:`tsexplore.compute`."""
    from .compute import reduce as _reduce

    return _reduce(da, op, dim=dim, **kwargs)


def batches(obj: Any, sample: Any, **kwargs: Any) -> Any:
    """Chunk-aware shuffled batches for ML; see :mod:`tsexplore.loader`."""
    from .loader import batches as _batches

    return _batches(obj, sample, **kwargs)


def advise(source: Any, pattern: Any = "scrub", **kwargs: Any) -> Any:
    """Measure candidate chunk layouts for an access pattern; see :mod:`tsexplore.advice`."""
    from .advice import advise as _advise

    return _advise(source, pattern, **kwargs)


class _Session:
    """``with tse.session(): ...`` closes the engine on exit."""

    def __enter__(self) -> _Session:
        get_engine()
        return self

    def __exit__(self, *exc: object) -> None:
        close()


def session() -> _Session:
    return _Session()
