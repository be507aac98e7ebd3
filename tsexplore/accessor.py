"""The ``.tse`` accessor on xarray objects (registered by ``import tsexplore``).

``ds.tse`` and ``da.tse`` give the engine's statistics, the sources behind the variables and
the Explorer; ``da.tse`` adds the streaming reductions (``mean``, ``std``, ...) and
``batches``. It sits at the top of the package because it calls every layer below.
"""

from __future__ import annotations

from typing import Any

import xarray as xr

from .engine import StatsSnapshot, snapshot
from .resolve import sources_of
from .sources.base import ChunkSource


class _Accessor:
    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def stats(self) -> StatsSnapshot:
        """The engine's statistics (one engine serves the whole process)."""
        return snapshot()

    @property
    def sources(self) -> list[ChunkSource]:
        """The engine sources behind the variables (whatever selection or decoding they carry)."""
        return sources_of(self._obj)

    @property
    def levels(self) -> Any:
        """The multiscale pyramid this object is a level of (a :class:`tsexplore.pyramid.Levels`:
        OME-NGFF, ndpyramid/DataTree, or one written by ``tse.pyramid``), or None."""
        from .pyramid import levels_of

        return levels_of(self._obj)

    def explore(self, **kwargs: Any) -> Any:
        """An Explorer widget on this object (needs the ``lab`` extra); a pyramid this object
        is a level of is shown at the level that fits the screen."""
        from .pyramid import explorer_options
        from .ui import explore

        return explore(self._obj, **explorer_options(self._obj, kwargs))


class _ReduceMethods:
    """``da.tse.mean("time")`` and friends: streaming reductions through the engine."""

    _obj: Any

    def reduce(self, op: str, dim: Any = None, **kwargs: Any) -> Any:
        from .compute import reduce as _reduce

        return _reduce(self._obj, op, dim=dim, **kwargs)

    def sum(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("sum", dim, **kwargs)

    def mean(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("mean", dim, **kwargs)

    def var(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("var", dim, **kwargs)

    def std(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("std", dim, **kwargs)

    def min(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("min", dim, **kwargs)

    def max(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("max", dim, **kwargs)

    def count(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("count", dim, **kwargs)

    def histogram(self, bins: Any = 64, range: Any = None, dim: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        return self.reduce("histogram", dim, bins=bins, range=range, **kwargs)

    def batches(self, sample: Any, **kwargs: Any) -> Any:
        from .loader import batches as _batches

        return _batches(self._obj, sample, **kwargs)


@xr.register_dataset_accessor("tse")
class DatasetAccessor(_Accessor):
    """``ds.tse``: statistics, sources and the Explorer."""


@xr.register_dataarray_accessor("tse")
class DataArrayAccessor(_Accessor, _ReduceMethods):
    """``da.tse``: statistics, sources, the Explorer and streaming reductions."""
