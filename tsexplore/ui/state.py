"""A saved view: ``ex.state`` as a JSON-able dict, and ``tse.explore(ds, state=s)`` restoring it.

As neuroglancer keeps a viewer's whole state in one JSON tree, an Explorer's view is one dict
of plain values (it round-trips through ``json``) that says everything needed to paint the
same picture again from the same data::

    {"version": 1, "variable": "temp", "dims": {"y": "y", "x": "x"}, "indices": {"time": 7},
     "view": {"y_range": [..], "x_range": [..]}, "size": {"width": 560, "height": 420},
     "colormap": "viridis", "ranges": {"mode": "fixed", "clims": [[12.5, 28.0]]},
     "channels": {"dim": null, "on": []}, "labels": {"variable": null, "opacity": 0.5},
     "crosshair": null, "projection": null}

``view`` holds the region on screen in index coordinates (the zoom and the pan); ``ranges`` the
colour range of each channel (``null``: the frame's robust range); ``crosshair`` the
orthogonal planes' dim and point; ``projection`` its op and dim.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

VERSION = 1
KEYS = ("version", "variable", "dims", "indices", "view", "size", "colormap", "ranges", "channels", "labels",
        "crosshair", "projection")


def state_of(ex: Any) -> dict[str, Any]:
    """The Explorer's view as a JSON-able dict (see the module docstring)."""
    ctl = ex.controller
    if ctl is None:
        raise ConfigError("the Explorer is not built yet")
    s = ctl.state
    g = ex.geometry
    ranges = [None if r is None else [float(r[0]), float(r[1])] for r in ex.colour.fixed]
    ortho, proj = ex.ortho, ex.projection
    return {
        "version": VERSION,
        "variable": str(ex.var_picker.value),
        "dims": {"y": g.ydim, "x": g.xdim},
        "indices": {d: int(i) for d, i in s.indices},
        "view": {"y_range": [float(v) for v in s.y_range] if s.y_range else None,
                 "x_range": [float(v) for v in s.x_range] if s.x_range else None},
        "size": {"width": int(ex.width), "height": int(ex.height)},
        "colormap": str(ex.cmap_picker.value),
        "ranges": {"mode": str(ex.clim_mode.value), "clims": ranges},
        "channels": {"dim": g.channel, "on": [bool(b) for b in ex.canvas.channel_on]},
        "labels": {"variable": ex.labels, "opacity": float(ex.label_opacity)},
        "crosshair": None if ortho is None else {"dim": ortho.z, "point": {d: int(v) for d, v in ortho.point.items()}},
        "projection": None if proj is None else {"op": proj.op, "dim": proj.dim},
    }


def check(state: Any) -> dict[str, Any]:
    """``state`` checked: a dict of this version with every key; else a :class:`ConfigError`
    saying what is wrong."""
    if not isinstance(state, dict):
        raise ConfigError(f"state= takes the dict ex.state gave, got {type(state).__name__}")
    if state.get("version") != VERSION:
        raise ConfigError(f"state= is of version {state.get('version')!r}; this tsexplore reads version {VERSION}")
    missing = [k for k in KEYS if k not in state]
    if missing:
        raise ConfigError(f"state= lacks {missing}; pass the dict ex.state gave")
    return state


def explorer_arguments(state: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The Explorer's arguments that ``state`` sets (arguments ``given`` explicitly win)."""
    s = check(state)
    out: dict[str, Any] = {
        "var": s["variable"], "y": s["dims"]["y"], "x": s["dims"]["x"], "cmap": s["colormap"],
        "width": s["size"]["width"], "height": s["size"]["height"],
        "view": {**s["indices"], "y_range": s["view"]["y_range"], "x_range": s["view"]["x_range"]},
        "channel": s["channels"]["dim"],
    }
    if s["labels"]["variable"] is not None:
        out["labels"] = s["labels"]["variable"]
    if s["crosshair"] is not None:
        out["ortho"] = s["crosshair"]["dim"]
    return {k: v for k, v in out.items() if given.get(k) is None}


def restore(ex: Any, state: dict[str, Any]) -> None:
    """Put the parts of ``state`` the constructor does not take on the built Explorer: the
    channels shown, the label opacity, the crosshair's point and the projection."""
    s = check(state)
    on = s["channels"]["on"]
    if on and len(on) == len(ex.canvas.channel_on):
        ex.canvas.channel_on = [bool(b) for b in on]
    ex.label_opacity = float(s["labels"]["opacity"])
    if s["crosshair"] is not None and ex.ortho is not None:
        ex.ortho.move(**s["crosshair"]["point"])
    if s["projection"] is not None:
        ex.project(s["projection"]["op"], dim=s["projection"]["dim"])


def initial_ranges(state: dict[str, Any]) -> tuple[str, list[Any]]:
    """The colour range mode and each channel's range (``None``: robust) of ``state``."""
    r = check(state)["ranges"]
    return str(r["mode"]), [None if c is None else (float(c[0]), float(c[1])) for c in r["clims"]]
