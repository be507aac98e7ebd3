"""The report: medians over repeats, tsexplore's advantage, targets, the table, the JSON.

Results go to stdout and to ``benchmarks/results/<name>-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .common import REFERENCE, RESULTS_DIR, ROOT, RSS, DataSpec, Metric, join_label, split_label
from .runner import percentile

#: every document reported in this process, in order (a multi-cube run, ``figures`` and
#: ``ab`` build their combined tables from it)
collected: list[dict[str, Any]] = []


def summarize(runs: dict[str, list[dict[str, Any]]], metrics: Sequence[Metric]
              ) -> dict[str, dict[str, Any]]:
    """Per system: median / min / max / p95 over the successful runs of each metric."""
    out: dict[str, dict[str, Any]] = {}
    for system, rs in runs.items():
        ok = [r for r in rs if r.get("ok")]
        entry: dict[str, Any] = {"runs_ok": len(ok), "runs": len(rs),
                                 "errors": [r.get("error") for r in rs if not r.get("ok")]}
        for m in [*metrics, RSS]:
            vals = [float(r[m.key]) for r in ok if r.get(m.key) is not None]
            if vals:
                entry[m.key] = {"median": statistics.median(vals), "min": min(vals),
                                "max": max(vals), "p95": percentile(vals, 95), "values": vals}
        out[system] = entry
    return out


def median_of(summary: dict[str, dict[str, Any]], system: str, key: str) -> float | None:
    cell = summary.get(system, {}).get(key)
    return None if cell is None else cell["median"]


def reference_of(label: str, reference: str = REFERENCE) -> str:
    """The label a peer's label is compared with: tsexplore with the same tag."""
    return join_label(reference, None, split_label(label)[2])


def advantages(summary: dict[str, dict[str, Any]], metrics: Sequence[Metric],
               reference: str = REFERENCE) -> dict[str, dict[str, float]]:
    """``{peer: {metric: x}}``: x > 1 means tsexplore is x times better than the peer (a
    tagged peer, ``naive seed=3``, against tsexplore with the same tag)."""
    out: dict[str, dict[str, float]] = {}
    for peer in summary:
        ref_label = reference_of(peer, reference)
        if peer == ref_label:
            continue
        row = {}
        for m in [*metrics, RSS]:
            ref, other = median_of(summary, ref_label, m.key), median_of(summary, peer, m.key)
            if ref is None or other is None or ref <= 0 or other <= 0:
                continue
            row[m.key] = other / ref if m.better == "lower" else ref / other
        out[peer] = row
    return out


def target(name: str, value: float | None, op: str, goal: float, unit: str = "") -> dict[str, Any]:
    """A target line: ``value op goal`` (op is "<=" or ">="); ``passed`` None when not measured."""
    passed = None if value is None else (value <= goal if op == "<=" else value >= goal)
    return {"name": name, "value": value, "op": op, "goal": goal, "unit": unit, "passed": passed}


def flag(name: str, ok: bool | None) -> dict[str, Any]:
    """A yes/no target (e.g. "the result matches the reference")."""
    return {"name": name, "value": ok, "op": "is", "goal": True, "unit": "", "passed": ok}


#: fresh anonymous memory :func:`first_touch` writes, per mapping (4,096 pages of 4 KiB)
TOUCH_BYTES = 16 << 20


def environment() -> dict[str, Any]:
    """Host facts that help read a result later."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "loadavg": load, "host": platform.node(), **first_touch()}


def first_touch() -> dict[str, Any]:
    """What fresh memory costs on this host: microseconds to make a page of anonymous memory
    at its first write (median over 3 new mappings of :data:`TOUCH_BYTES`, one write a page)
    and the transparent-huge-page mode. Every chunk a system decodes into memory it has not
    used before pays this once a page (the tables' page faults a frame); it differs between
    hosts (a guest whose page tables its host shadows pays the most), so results from two
    hosts compare only beside it."""
    import mmap

    import numpy as np

    page = mmap.PAGESIZE
    per_page = []
    for _ in range(3):
        with mmap.mmap(-1, TOUCH_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as m:
            pages = np.frombuffer(m, dtype=np.uint8)
            start = time.perf_counter()
            pages[::page] = 1
            per_page.append((time.perf_counter() - start) / (TOUCH_BYTES // page))
            del pages
    try:
        modes = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().split()
        thp = next((mode.strip("[]") for mode in modes if mode.startswith("[")), None)
    except OSError:
        thp = None
    return {"first_touch_us_per_page": statistics.median(per_page) * 1e6, "transparent_hugepages": thp}


def document(name: str, args: argparse.Namespace, spec: DataSpec, systems: Sequence[str],
             runs: dict[str, list[dict[str, Any]]], metrics: Sequence[Metric],
             primary: str, **extra: Any) -> dict[str, Any]:
    """The JSON document of one benchmark (``systems``: the labels run, in order; an A/B run
    adds labels, so the runs' own keys are used)."""
    from .pagecache import cold_summary

    summary = summarize(runs, metrics)
    return {
        "benchmark": name,
        "timestamp": _dt.datetime.now().isoformat(timespec="seconds"),
        "cube": spec.cube,
        "data": {"path": str(spec.path), "shape": list(spec.shape), "chunks": list(spec.chunks),
                 "dtype": "float32", "nbytes": spec.nbytes, "size": spec.size,
                 "cube": spec.cube, "zarr_format": spec.zarr_format, "layout": spec.layout},
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "systems": list(runs) or list(systems),
        "environment": environment(),
        "cold_cache": cold_summary(r.get("cold_cache", {}) for rs in runs.values() for r in rs),
        "metrics": [{"key": m.key, "label": m.label, "better": m.better} for m in metrics],
        "primary": primary,
        "summary": summary,
        "advantage": advantages(summary, metrics),
        "runs": runs,
        **extra,
    }


def strip_bulky(obj: Any) -> Any:
    """The document without per-frame traces (kept in the results file only)."""
    if isinstance(obj, dict):
        return {k: strip_bulky(v) for k, v in obj.items() if k != "trace"}
    if isinstance(obj, list):
        return [strip_bulky(v) for v in obj]
    return obj


def table(doc: dict[str, Any], metrics: Sequence[Metric], title: str) -> str:
    """A plain-text table: medians per system, then tsexplore's advantage on the primary metric."""
    primary = next(m for m in metrics if m.key == doc["primary"])
    cols = [*metrics, RSS]
    header = ["system", *[m.label for m in cols], f"tsexplore vs ({primary.label})"]
    rows = []
    for system in doc["systems"]:
        entry = doc["summary"][system]
        cells = [system]
        for m in cols:
            cell = entry.get(m.key)
            cells.append(m.show(cell["median"] if cell else None))
        if system == reference_of(system):
            cells.append("(reference)")
        elif entry["runs_ok"] == 0:
            cells.append("failed")
        else:
            adv = doc["advantage"].get(system, {}).get(primary.key)
            cells.append("-" if adv is None else f"{adv:.2f}x {'better' if adv >= 1 else 'worse'}")
        if entry["runs_ok"] < entry["runs"]:
            cells[0] += f" ({entry['runs'] - entry['runs_ok']} failed)"
        rows.append(cells)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                              for i, (c, w) in enumerate(zip(r, widths)))
    lines = [f"{title}\n{cube_line(doc)}", fmt(header), fmt(["-" * w for w in widths]),
             *[fmt(r) for r in rows]]
    cold = doc.get("cold_cache") or {}
    if doc.get("options", {}).get("warm"):
        lines.append("WARM page cache (--warm): every file of the store read before each child")
    elif cold:
        res = cold.get("max_resident_after")
        lines.append(f"cold page cache: {' + '.join(cold['methods'])}"
                     + ("" if res is None else f"; at most {res:.1%} of the store resident after"))
    touch = doc.get("environment", {}).get("first_touch_us_per_page")
    if touch is not None:
        lines.append(f"fresh memory on this host: {touch:.2f} us a page at its first write "
                     f"(transparent huge pages: {doc['environment'].get('transparent_hugepages')})")
    for system in doc["systems"]:
        for err in doc["summary"][system]["errors"][:1]:
            lines.append(f"{system} failed: {str(err)[:300]}")
    lines.extend(doc.get("notes", []))
    for t in doc.get("targets", []):
        mark = {True: "PASS", False: "MISS", None: "n/a "}[t["passed"]]
        if t["op"] == "is":
            lines.append(f"[{mark}] {t['name']}")
            continue
        val = "-" if t["value"] is None else f"{t['value']:.3g}"
        lines.append(f"[{mark}] {t['name']}: {val} {t['op']} {t['goal']:g} {t['unit']}".rstrip())
    return "\n".join(lines)


def cube_line(doc: dict[str, Any]) -> str:
    """The data in words: cube, codec, format, shape, chunks, layout."""
    from .cubes import CUBES

    data = doc.get("data", {})
    cube = CUBES.get(str(doc.get("cube")))
    what = f"cube {doc.get('cube')}" + (f" ({cube.codec}, Zarr v{cube.zarr_format})" if cube else "")
    if data.get("zarr_format") == 0:
        what = f"the {doc.get('cube')} cube's values in NetCDF4 (zlib + shuffle)"
    shape = "x".join(map(str, data.get("shape", [])))
    chunks = "x".join(map(str, data.get("chunks", [])))
    return (f"data: {what}, {shape} in {chunks} chunks"
            + (f", layout {data['layout']}" if data.get("layout") else "") + f"; {data.get('path')}")


def results_path(doc: dict[str, Any]) -> Path:
    """``benchmarks/results/<name>[-<layout>]-<cube>-<time>.json``, never one already there."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    layout = (doc.get("data") or {}).get("layout")
    stem = "-".join(str(p) for p in (doc["benchmark"], layout, doc.get("cube"), stamp) if p)
    out, n = RESULTS_DIR / f"{stem}.json", 1
    while out.exists():
        n += 1
        out = RESULTS_DIR / f"{stem}-{n}.json"
    return out


#: set by multi-cube runs, ``figures`` and ``ab``: print each benchmark's table but not its
#: JSON document (it is in its results file; the combined document is printed at the end)
tables_only = False
#: set by those with ``--json-only``: print nothing per benchmark (only the combined JSON)
silent = False


def report(doc: dict[str, Any], metrics: Sequence[Metric], title: str, json_only: bool) -> Path:
    """Write the results file, print the JSON document and (unless ``json_only``) the table."""
    out = results_path(doc)
    doc["results_file"] = str(out)
    out.write_text(json.dumps(doc, indent=1, default=str))
    collected.append(doc)
    slim = strip_bulky(doc)
    if silent:
        pass
    elif tables_only:
        print(table(doc, metrics, title), flush=True)
        print(f"(full results with every run: {out.relative_to(ROOT)})\n", flush=True)
    elif json_only:
        print(json.dumps(slim, default=str), flush=True)
    else:
        slim.pop("runs", None)  # per-run details are in the file
        print(json.dumps(slim, indent=1, default=str))
        print()
        print(table(doc, metrics, title))
        print(f"(full results with every run: {out.relative_to(ROOT)})")
    return out


def exit_status(doc: dict[str, Any], check: bool) -> int:
    """1 when tsexplore itself failed; 2 with ``--check`` when a measured target was missed."""
    ref = doc["summary"].get(REFERENCE)
    if ref is not None and ref["runs_ok"] == 0:
        return 1
    if check and any(t["passed"] is False for t in doc.get("targets", [])):
        return 2
    return 0
