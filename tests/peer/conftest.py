"""What xarray's backend tests need from xarray's own conftest (which the wheel does not
ship whole), the skips of the tests xarray's own engine does not pass here, and the counts.

- xarray's ``skip_if_param`` marker (used by ``skip_if_zarr_format_2/3``): skip the
  parametrization whose parameters match the marker's;
- the tests ``xarray_own.json`` lists (they fail with xarray's own engine on this machine)
  are skipped, the reason saying what xarray's engine did;
- every test is marked ``peer`` (``pytest -m "not peer"`` leaves the suite out, ``-m peer``
  runs it alone, e.g. ``-n 2``) and put in one of two pytest-xdist groups (Zarr classes,
  NetCDF and DataTree classes: about equal time), so ``--dist loadgroup`` runs them on two
  workers;
- per class, the tests run / passed / failed / skipped go to ``test-artifacts/peer-counts.json``
  (``peer-counts-own.json`` for the unchanged classes of ``own_classes.py``).
"""

from __future__ import annotations

from collections import Counter

import pytest
from _classes import own_outcomes
from xarray.tests.conftest import *  # noqa: F403 - xarray's fixtures (time_unit, ...)

from tsexplore.testing.artifacts import publish

MARKERS = (
    "xdist_group(name): pytest-xdist's (--dist loadgroup keeps a group on one worker)",
    "skip_if_param(**params, reason, condition=True): xarray's: skip the matching parametrization",
    "skip_with_dask_array: xarray's: skip with the dask-array chunk manager",
    "xfail_with_dask_array: xarray's: xfail with the dask-array chunk manager",
    "flaky: xarray's: flaky tests (skipped, as xarray skips them without --run-flaky)",
    "network: xarray's: needs the internet (skipped)",
    "asyncio: xarray's async tests (pytest-asyncio is not installed: pytest skips them)",
)

COUNTS: dict[str, Counter] = {}


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


def xdist_group(item: pytest.Item) -> str:
    """Two pytest-xdist groups of about equal time: the Zarr classes, and the NetCDF and
    DataTree ones (each group imports xarray's test modules once, on its worker)."""
    cls = getattr(item, "cls", None)
    name = cls.__name__ if cls is not None else ""
    return "peer-zarr" if name.startswith("TestZarr") else "peer-netcdf"


def _key(item: pytest.Item) -> str | None:
    cls = getattr(item, "cls", None)
    return f"{cls.__name__}::{item.name}" if cls is not None else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    own = own_outcomes()
    for item in items:
        if "tests/peer/" not in item.nodeid.split("::")[0]:
            continue
        item.add_marker(pytest.mark.peer)  # -m peer / -m "not peer"
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
        params = getattr(getattr(item, "callspec", None), "params", {})
        for mark in item.iter_markers("skip_if_param"):
            kwargs = dict(mark.kwargs)
            reason = kwargs.pop("reason", "skip_if_param")
            if not kwargs.pop("condition", True):
                continue
            if all(k in params and params[k] == v for k, v in kwargs.items()):
                item.add_marker(pytest.mark.skip(reason=reason))
        if "flaky" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="flaky (xarray runs these only with --run-flaky)"))
        if "network" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="needs the internet"))
        key = _key(item)
        if key in own and "test_peer_backends" in item.nodeid:
            why = own[key]
            item.add_marker(pytest.mark.skip(
                reason=f"xarray's own engine {why['outcome']} here too: {why['why']}"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path, _, rest = report.nodeid.partition("::")
    if "tests/peer/" not in path or "::" not in rest:
        return
    cls = rest.split("::")[0]
    suite = "own" if path.endswith("own_classes.py") else "tsexplore"
    counts = COUNTS.setdefault(f"{suite}:{cls}", Counter())
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if report.passed:
            counts["passed"] += 1
        elif report.skipped:
            counts["xfailed" if hasattr(report, "wasxfail") else "skipped"] += 1
        else:
            counts["failed" if report.when == "call" else "errors"] += 1
    elif report.when == "teardown" and report.failed:
        counts["errors"] += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Per class counts; under pytest-xdist each worker writes its part (tests/conftest.py
    adds them up: the controller never loads this conftest)."""
    if not COUNTS:
        return
    for suite in ("tsexplore", "own"):
        per = {k.split(":", 1)[1]: dict(v) for k, v in sorted(COUNTS.items()) if k.startswith(suite)}
        if not per:
            continue
        for c in per.values():
            c["run"] = c.get("passed", 0) + c.get("failed", 0) + c.get("errors", 0)
        name = "peer-counts.json" if suite == "tsexplore" else "peer-counts-own.json"
        publish(session.config, name, per)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if not COUNTS:
        return
    terminalreporter.section("xarray's backend tests (tests/peer)")
    for key, c in sorted(COUNTS.items()):
        run = c.get("passed", 0) + c.get("failed", 0) + c.get("errors", 0)
        terminalreporter.write_line(
            f"{key}: {c.get('passed', 0)}/{run} passed, {c.get('skipped', 0)} skipped, "
            f"{c.get('xfailed', 0)} xfailed")
