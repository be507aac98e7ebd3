"""Coordinate <-> index mapping for the axes shown by the Explorer (pure NumPy)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class AxisMap:
    """One dimension: index ``i`` sits at coordinate ``c0 + i * dc`` (uniform coordinates),
    or at ``i`` itself (``dc == 1, c0 == 0``) when the coordinate is absent or not uniform."""

    dim: str
    size: int
    c0: float = 0.0
    dc: float = 1.0
    units: str = ""
    labels: Any = None  # the coordinate values, for readouts (any dtype), or None

    @classmethod
    def of(cls, obj: Any, dim: str) -> AxisMap:
        """From an xarray object's coordinate ``dim`` (index space if there is none)."""
        size = int(obj.sizes[dim])
        if dim not in obj.coords:
            return cls(dim, size)
        coord = obj.coords[dim]
        units = str(coord.attrs.get("units", ""))
        values = np.asarray(coord.values)
        if values.ndim == 1 and values.dtype.kind in "iuf" and size >= 2:
            v = values.astype(np.float64)
            step = (v[-1] - v[0]) / (size - 1)
            if step != 0 and np.allclose(np.diff(v), step, rtol=1e-4, atol=abs(step) * 1e-4):
                return cls(dim, size, float(v[0]), float(step), units, values)
        return cls(dim, size, 0.0, 1.0, units, values if values.ndim == 1 else None)

    def to_index(self, value: float) -> float:
        """Continuous index of coordinate ``value``."""
        return (float(value) - self.c0) / self.dc

    def edges(self, i0: int, i1: int, step: int) -> tuple[float, float]:
        """Coordinates of the outer edges of samples ``range(i0, i1, step)`` (low, high)."""
        n = len(range(i0, i1, step))
        a = self.c0 + (i0 - 0.5) * self.dc
        b = self.c0 + (i0 + n * step - 0.5) * self.dc
        return (min(a, b), max(a, b))

    def label(self, i: int) -> str:
        """A readout of index ``i``: its coordinate value and units."""
        if self.labels is None:
            return f"{self.dim}[{i}]"
        value = self.labels[i]
        if isinstance(value, (float, np.floating)):
            text = f"{float(value):.6g}"
        elif isinstance(value, np.datetime64):
            text = str(np.datetime_as_string(value, unit="auto"))
        else:
            text = str(value)
        return f"{text} {self.units}".strip()

    def index_range(self, lo: float | None, hi: float | None) -> tuple[float, float] | None:
        """A coordinate range as a continuous index range (None stays None)."""
        if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
            return None
        a, b = self.to_index(lo), self.to_index(hi)
        return (min(a, b), max(a, b))
