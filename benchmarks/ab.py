"""``python -m benchmarks ab OLD [--new NEW]``: two versions of tsexplore, alternating in one run.

OLD (any git ref: ``443a17c``, ``main~3``) has its ``tsexplore`` package exported with
``git archive`` into ``/tmp/tsexplore-ab/<commit>/``; NEW is this checkout's working tree (or
``--new REF``, exported the same way). Each workload runs with ``--systems tsexplore`` and
every run of it becomes three alternating children -- ``tsexplore@<old>``, ``tsexplore`` (new)
and ``tsexplore@again`` (new once more: two runs of the same code, which measure the noise) --
each cold, ``--repeat`` (3) times. The harness is this checkout's for all of them; a child
imports the other version through ``TSEXPLORE_BENCH_CODE`` (see ``_run.py``), and the table
says where each arm's tsexplore came from.

The table: per workload and metric, old, new and new-again medians, new vs old (x, above 1:
new is better), new vs new-again (the same-code noise, at least :data:`MIN_NOISE`) and the
runs' spread within the old and new arms; a metric is ``SLOWER`` when new is worse than old
beyond both, ``slower?`` when beyond the same-code noise but within the spread.

Default workloads: scrub, play, jump --revisit, scan, patches and scrub on both sharded
layouts (``--workloads``, names as in ``figures``), on the own cube (``--cube``). Other
options go to each benchmark (``--small``, ``--timeout``, ``--seeds``, ...).
``--code REF`` on any benchmark runs its tsexplore children from REF the same way.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import combined, cubes, figures, report, runner
from .common import ROOT, log, split_label

DEFAULT = ("scrub", "play", "jump-revisit", "scan", "patches", "scrub-sharded-16",
           "scrub-sharded-1")
EXPORT_ROOT = Path(tempfile.gettempdir()) / "tsexplore-ab"
#: the smallest noise assumed between two runs of the same code (ratios closer to 1 than
#: this are never called slower)
MIN_NOISE = 1.05


def resolve(ref: str) -> str:
    """The full commit id of ``ref`` in this checkout's repository."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                             check=True, capture_output=True, text=True, timeout=30)
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"{ref!r} is not a commit of {ROOT}: {exc.stderr.strip()}") from exc
    return out.stdout.strip()


def export(ref: str) -> tuple[str, Path]:
    """``tsexplore/`` of commit ``ref`` in ``/tmp/tsexplore-ab/<commit>/`` (once); (short id,
    folder). The folder holds only the package, so ``benchmarks`` still comes from here."""
    commit = resolve(ref)
    folder = EXPORT_ROOT / commit
    done = folder / ".exported"
    if not done.exists():
        folder.mkdir(parents=True, exist_ok=True)
        log(f"exporting tsexplore/ of {commit[:12]} ({ref}) to {folder}")
        with tempfile.TemporaryFile() as tar:
            subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "tsexplore"],
                           check=True, stdout=tar, timeout=120)
            tar.seek(0)
            with tarfile.open(fileobj=tar) as tf:
                tf.extractall(folder, filter="data")
        # compiled now, as the checkout's are, so that no run pays for compiling a lazy import
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(folder)], check=False,
                       timeout=600)
        done.write_text(commit + "\n")
    return commit[:9], folder


def arms_for(old: str, new: str | None, again: bool) -> list[runner.Arm]:
    """The arms: old, new (the working tree unless ``new``), and new again."""
    old_id, old_dir = export(old)
    new_dir = str(export(new)[1]) if new else None
    arms = [runner.Arm(old_id, str(old_dir)), runner.Arm(None, new_dir)]
    if again:
        arms.append(runner.Arm("again", new_dir))
    return arms


def _ratio(better: str, new: float | None, old: float | None) -> float | None:
    """How many times better ``new`` is than ``old`` (above 1: better)."""
    if new is None or old is None or new <= 0 or old <= 0:
        return None
    return new / old if better == "higher" else old / new


def _spread(summary: dict[str, Any], label: str, key: str) -> float | None:
    """max / min over one arm's runs of a metric (1.0: every run the same)."""
    cell = summary.get(label, {}).get(key)
    vals = [v for v in (cell or {}).get("values", []) if v > 0]
    return max(vals) / min(vals) if len(vals) > 1 else None


def verdict(vs_old: float | None, same: float, spread: float) -> str:
    """``faster`` / ``same`` / ``slower?`` (worse than old by more than the same-code noise,
    within the runs' spread) / ``SLOWER`` (beyond both)."""
    if vs_old is None:
        return "-"
    if vs_old > same:
        return "faster"
    if vs_old >= 1 / same:
        return "same"
    return "slower?" if vs_old >= 1 / spread else "SLOWER"


def table(docs: Sequence[dict[str, Any]], old_id: str) -> tuple[str, list[dict[str, Any]]]:
    """The A/B table and its rows (for the JSON)."""
    header = ["workload", "cube", "tag", "metric", f"old {old_id}", "new", "new again",
              "new vs old", "same code", "run spread", "verdict"]
    rows: list[list[str]] = []
    data: list[dict[str, Any]] = []
    for doc in docs:
        tags = list(dict.fromkeys(split_label(label)[2] for label in doc["systems"]))
        for tag in tags:
            sep = f" {tag}" if tag else ""
            labels = {"old": f"tsexplore@{old_id}{sep}", "new": f"tsexplore{sep}",
                      "again": f"tsexplore@again{sep}"}
            for m in combined.metrics_of(doc):
                med = {k: report.median_of(doc["summary"], v, m.key) for k, v in labels.items()}
                if med["old"] is None and med["new"] is None:
                    continue
                vs_old = _ratio(m.better, med["new"], med["old"])
                again = _ratio(m.better, med["again"], med["new"])
                same = max(MIN_NOISE, again, 1 / again) if again else MIN_NOISE
                spreads = [x for k in ("old", "new") if (x := _spread(doc["summary"], labels[k], m.key))]
                spread = max([same, *spreads])
                row = {"workload": combined.workload_name(doc), "cube": doc.get("cube"),
                       "tag": tag, "metric": m.key, **med, "new_vs_old": vs_old,
                       "same_code": same, "run_spread": spread,
                       "verdict": verdict(vs_old, same, spread)}
                data.append(row)
                rows.append([row["workload"], str(row["cube"]), tag, m.label,
                             *(m.show(med[k]) for k in ("old", "new", "again")),
                             "-" if vs_old is None else f"{vs_old:.2f}x", f"{same:.2f}x",
                             f"{spread:.2f}x", row["verdict"]])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < 4 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths)))

    notes = ["new vs old: above 1, new is better (higher frames/s or GB/s, lower ms); same code: "
             "new vs new again (at least 1.05x); run spread: max/min over an arm's runs; "
             "SLOWER: new worse than old beyond both; slower?: beyond the same-code noise only"]
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows), *notes]), data


def origins(docs: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """Where each arm's children imported tsexplore from (read from the runs' files)."""
    out: dict[str, set[str]] = {}
    for doc in docs:
        try:
            runs = json.loads(Path(doc["results_file"]).read_text())["runs"]
        except (OSError, KeyError, ValueError):
            continue
        for label, rs in runs.items():
            head = label.partition(" ")[0]
            for r in rs:
                if r.get("tsexplore_from"):
                    out.setdefault(head, set()).add(r["tsexplore_from"])
    return {k: sorted(v) for k, v in out.items()}


def main(argv: list[str]) -> int:
    """``python -m benchmarks ab OLD [--new REF] [--workloads ...] [--cube own] ...``."""
    p = argparse.ArgumentParser(prog="python -m benchmarks ab", description=__doc__.split("\n\n")[0],
                                epilog="Every other option goes to each benchmark that knows it "
                                       "(--repeat, --small, --timeout, --seeds, --frames, ...).")
    p.add_argument("old", help="the git ref to compare with (e.g. 443a17c)")
    p.add_argument("--new", default=None,
                   help="a git ref for the new side (default: this checkout's working tree)")
    p.add_argument("--workloads", default=",".join(DEFAULT),
                   help=f"comma-separated, from: {', '.join(figures.WORKLOADS)} "
                        f"(default {','.join(DEFAULT)})")
    p.add_argument("--cube", default="own", help="cubes, comma-separated, or all (default own)")
    p.add_argument("--no-again", action="store_true",
                   help="leave out the second run of the new code (the noise measure)")
    p.add_argument("--json-only", action="store_true", help="print only the JSON document")
    args, rest = p.parse_known_args(argv)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in figures.WORKLOADS]
    if unknown or not workloads:
        raise SystemExit(f"unknown workload(s) {unknown}; choose from {', '.join(figures.WORKLOADS)}")
    if "--systems" not in rest:
        rest += ["--systems", "tsexplore"]
    if args.json_only:
        rest.append("--json-only")
    arms = arms_for(args.old, args.new, not args.no_again)
    old_id = str(arms[0].variant)
    runner.arms = arms
    report.tables_only = not args.json_only
    report.silent = args.json_only
    first = len(report.collected)
    status = 0
    try:
        for cube in cubes.names(args.cube):
            for name in workloads:
                bench, wargv = figures.workload_argv(name, rest, every_system=True)
                log(f"\n===== A/B {name} / cube {cube}: {old_id} vs "
                    f"{args.new or 'the working tree'} =====")
                from .__main__ import dispatch, with_cube

                try:
                    status = max(status, dispatch(bench, with_cube(wargv, cube)))
                except cubes.NoLayout as skip:
                    log(skip.message)
    finally:
        runner.arms = []
    docs = report.collected[first:]
    text, rows = table(docs, old_id)
    where = origins(docs)
    doc = combined.document("ab", docs, old=args.old, old_commit=resolve(args.old),
                            new=args.new or "working tree", rows=rows, tsexplore_from=where)
    out = report.results_path({"benchmark": "ab", "cube": None, "data": {}})
    doc["results_file"] = str(out)
    out.write_text(json.dumps(doc, indent=1, default=str))
    if args.json_only:
        print(json.dumps(doc, default=str))
    else:
        print(f"\nA/B: tsexplore {args.old} ({old_id}) vs {args.new or 'the working tree'}, "
              "alternating in one run, cold; medians of each arm's runs")
        print(text)
        print("tsexplore imported from: " + "; ".join(f"{k}: {', '.join(v)}"
                                                      for k, v in where.items()))
        expected = {f"tsexplore@{a.variant}" if a.variant else "tsexplore":
                    a.code or str(ROOT) for a in arms}
        wrong = [k for k, v in where.items() if k in expected
                 and not all(x.startswith(expected[k]) for x in v)]
        if wrong:
            print(f"WARNING: {wrong} imported tsexplore from elsewhere than expected: "
                  f"{ {k: expected[k] for k in wrong} }")
        slower = [r for r in rows if r["verdict"] == "SLOWER"]
        print(f"{len(slower)} metric(s) SLOWER beyond the noise"
              + (": " + "; ".join(f"{r['workload']} {r['tag']} {r['metric']}".replace("  ", " ")
                                  for r in slower) if slower else ""))
        print(f"(A/B results: {out.relative_to(ROOT)})")
    return status


def code_option(ref: str) -> None:
    """``--code REF`` on any benchmark: its tsexplore children import REF's tsexplore."""
    _id, folder = export(ref)
    runner.arms = [runner.Arm(None, str(folder))]
