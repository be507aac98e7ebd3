"""One table for several benchmark documents: every workload x cube x system, then the targets
per cube with a PASS / MISS summary line each.

Used by ``python -m benchmarks <name> --cube a,b|all`` (one run per cube), by ``figures``
and (for its documents) by ``ab``. The documents come from :data:`.report.collected`.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence
from typing import Any

from . import report
from .common import RESULTS_DIR, ROOT, RSS, Metric, join_label, split_label

#: column order: these first (when present), then the others as first seen
FIRST = ("tsexplore", "naive", "tensorstore")


def workload_name(doc: dict[str, Any]) -> str:
    """``scrub``, ``scrub sharded-1``, ``jump revisit``, ..."""
    data = doc.get("data") or {}
    parts = [doc["benchmark"], data.get("layout"), "revisit" if doc.get("revisit") else None]
    return " ".join(p for p in parts if p)


def metrics_of(doc: dict[str, Any]) -> list[Metric]:
    """The document's headline metrics (all of them when it names none)."""
    known = {m["key"]: Metric(m["key"], m["label"], m["better"]) for m in doc["metrics"]}
    known[RSS.key] = RSS
    keys = doc.get("headline") or [*known]
    fmts = {m.key: m.fmt for m in _all_metrics()}
    return [Metric(k, known[k].label, known[k].better, fmts.get(k, "{:.2f}"))
            for k in keys if k in known]


def _all_metrics() -> list[Metric]:
    """Every metric the benchmarks define (for their number formats)."""
    from . import common, jump, play_scrub, scan

    return [*play_scrub.PLAY_METRICS, *play_scrub.SCRUB_METRICS, *jump.JUMP_METRICS,
            *scan.METRICS, *common.ENGINE_METRICS, RSS]


def columns(docs: Sequence[dict[str, Any]]) -> list[str]:
    """The systems (with their A/B variant) of all documents, in column order."""
    seen: dict[str, None] = {}
    for doc in docs:
        for label in doc["systems"]:
            system, variant, _tag = split_label(label)
            seen[join_label(system, variant)] = None
    first = [s for name in FIRST for s in seen if split_label(s)[0] == name]
    return [*first, *[s for s in seen if s not in first]]


def table(docs: Sequence[dict[str, Any]], title: str) -> str:
    """Rows: workload, cube, tag (seed), metric; columns: systems; cells: medians."""
    cols = columns(docs)
    header = ["workload", "cube", "tag", "metric", *cols]
    rows: list[list[str]] = []
    for doc in docs:
        tags = list(dict.fromkeys(split_label(label)[2] for label in doc["systems"]))
        for tag in tags:
            for m in metrics_of(doc):
                cells = []
                for col in cols:
                    system, variant, _ = split_label(col)
                    label = join_label(system, variant, tag)
                    entry = doc["summary"].get(label)
                    if entry is None:
                        cells.append("")
                    elif entry["runs_ok"] == 0:
                        cells.append("failed")
                    else:
                        cell = entry.get(m.key)
                        cells.append(m.show(cell["median"] if cell else None))
                if all(c in ("", "-") for c in cells):
                    continue
                rows.append([workload_name(doc), str(doc.get("cube", "")), tag, m.label, *cells])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < 4 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths)))

    lines = [title, fmt(header), fmt(["-" * w for w in widths])]
    last = None
    for r in rows:
        key = (r[0], r[1], r[2])
        shown = list(r) if key != last else ["", "", "", *r[3:]]
        lines.append(fmt(shown))
        last = key
    return "\n".join(lines)


def targets_by_cube(docs: Sequence[dict[str, Any]]) -> str:
    """Each cube's targets (PASS / MISS / n/a), then one summary line per cube."""
    cubes = list(dict.fromkeys(str(d.get("cube")) for d in docs))
    lines = []
    summary = []
    for cube in cubes:
        mine = [(workload_name(d), t) for d in docs if str(d.get("cube")) == cube
                for t in d.get("targets", [])]
        lines.append(f"targets, cube {cube}:")
        for workload, t in mine:
            lines.append(f"  {_mark(t)} {workload}: {_describe(t)}")
        passed = sum(1 for _, t in mine if t["passed"] is True)
        missed = [(w, t) for w, t in mine if t["passed"] is False]
        unknown = sum(1 for _, t in mine if t["passed"] is None)
        summary.append(
            f"{cube:<6} {'PASS' if not missed and passed else 'MISS' if missed else 'n/a '}  "
            f"{passed} passed, {len(missed)} missed, {unknown} not measured"
            + ("; missed: " + "; ".join(f"{w}: {_describe(t)}" for w, t in missed) if missed
               else ""))
    return "\n".join([*lines, "", "summary per cube (every target of every workload):",
                      *summary])


def _mark(t: dict[str, Any]) -> str:
    return {True: "[PASS]", False: "[MISS]", None: "[n/a ]"}[t["passed"]]


def _describe(t: dict[str, Any]) -> str:
    if t["op"] == "is":
        return str(t["name"])
    val = "-" if t["value"] is None else f"{t['value']:.3g}"
    return f"{t['name']}: {val} {t['op']} {t['goal']:g} {t['unit']}".rstrip()


def document(kind: str, docs: Sequence[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The combined JSON document: each benchmark's summary, advantage and targets (its runs
    are in its own results file, named here)."""
    keep = ("benchmark", "cube", "data", "systems", "summary", "advantage", "targets", "primary",
            "headline", "seeds", "revisit", "agreement", "correctness", "results_file", "options")
    return {"kind": kind, "timestamp": _dt.datetime.now().isoformat(timespec="seconds"),
            "environment": report.environment(),
            "benchmarks": [report.strip_bulky({k: d.get(k) for k in keep}) for d in docs],
            **extra}


def finish(kind: str, docs: Sequence[dict[str, Any]], title: str, json_only: bool,
           **extra: Any) -> int:
    """Write ``benchmarks/results/<kind>-<time>.json`` and print the table and the targets
    (``json_only``: the JSON document only); 1 if a tsexplore label failed every run."""
    doc = document(kind, docs, **extra)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = RESULTS_DIR / f"{kind}-{stamp}.json"
    doc["results_file"] = str(out)
    out.write_text(json.dumps(doc, indent=1, default=str))
    if json_only:
        print(json.dumps(doc, default=str), flush=True)
    else:
        print("\n" + table(docs, title))
        print()
        print(targets_by_cube(docs))
        print(f"(combined results: {out.relative_to(ROOT)}; every run in each benchmark's file)")
    failed = any(entry["runs_ok"] == 0 for d in docs for label, entry in d["summary"].items()
                 if split_label(label)[0] == "tsexplore")
    return 1 if failed else 0
