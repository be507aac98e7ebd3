"""The parity suite's record of what was compared (its settings are ``_parity.SETTINGS``).

At the end of the session the counts of
datasets and files compared per format and path go to ``test-artifacts/parity-counts.json``
(git-ignored) and to the terminal summary.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tsexplore.testing.artifacts import publish

ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "parity-counts.json"


# ``_parity`` is not imported here: its SETTINGS read ``TSEXPLORE_PARITY_EXAMPLES`` on import,
# which tests/conftest.py sets in pytest_configure; when ``tests/parity`` is named on the
# command line this conftest loads before that hook, so the test modules import it first


def _report() -> dict:
    from _parity import ABSENT, COUNTS, DIFFERED, FILES, PARTS, SELECTIONS, XARRAY_LAZY_DIVERGES

    per_path: dict[str, dict[str, int]] = {}
    for (fmt, path), n in sorted(COUNTS.items()):
        per_path.setdefault(fmt, {})[path] = n
    selections: dict[str, dict[str, int]] = {}
    for (fmt, kind), n in sorted(SELECTIONS.items()):
        selections.setdefault(fmt, {})[kind] = n
    return {
        "compared": per_path,
        "selections": selections,
        "files": dict(sorted(FILES.items())),
        "absent_chunks_read_as_fill": dict(ABSENT),
        "xarray_lazy_reader_differs_from_numpy": dict(XARRAY_LAZY_DIVERGES),
        "differed": {f"{fmt}:{path}": n for (fmt, path), n in sorted(DIFFERED.items())},
        # counted by the comparisons themselves (each one that found a difference failed)
        "differences": sum(DIFFERED.values()),
        "compared_total": sum(COUNTS.values()) + sum(SELECTIONS.values()),
        "blosc_part_reads": dict(PARTS),
    }


def _anything() -> bool:
    parity = sys.modules.get("_parity")  # not imported: no parity test ran in this process
    return parity is not None and bool(
        parity.COUNTS or parity.SELECTIONS or parity.XARRAY_LAZY_DIVERGES
    )


def pytest_sessionfinish(session, exitstatus) -> None:  # type: ignore[no-untyped-def]
    if not _anything():
        return
    # under pytest-xdist each worker writes its part; tests/conftest.py adds them up
    publish(session.config, ARTIFACT.name, _report())


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if not _anything():
        return
    report = _report()
    terminalreporter.section("tsexplore parity (compared with xarray's own backends)")
    for fmt, paths in report["compared"].items():
        line = ", ".join(f"{p} {n}" for p, n in paths.items())
        terminalreporter.write_line(f"{fmt}: {line}")
    terminalreporter.write_line(f"isel selections: {report['selections']}")
    terminalreporter.write_line(f"real files compared: {len(report['files'])}")
    terminalreporter.write_line(f"absent chunks read as fill values: {report['absent_chunks_read_as_fill']}")
    terminalreporter.write_line(
        f"xarray's lazy reader differs from NumPy (tsexplore matches NumPy): "
        f"{report['xarray_lazy_reader_differs_from_numpy']}"
    )
    terminalreporter.write_line(
        f"compared {report['compared_total']}, differed {report['differences']} {report['differed']}")
    terminalreporter.write_line(f"written to {ARTIFACT}")
