"""Shared fixtures: small data, the shared NetCDF files, and a clean engine per test."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

os.environ.setdefault("TSEXPLORE_SAMPLE_SIZE", "small")

import tsexplore as tse  # noqa: E402
from tsexplore.testing.artifacts import clear_parts, merge_parts  # noqa: E402


def _find_shared_data() -> Path:
    """``shared/data`` beside the repository, or beside a folder above it (a worktree)."""
    root = Path(__file__).resolve().parents[1]
    for parent in root.parents:
        candidate = parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return root.parent / "shared" / "data"


SHARED_DATA = _find_shared_data()

#: tests that need a whole program beside the test process, by the fixture or file that
#: starts it; plain ``pytest`` leaves them out (pyproject.toml's ``addopts``), ``make test``
#: runs them (``-m ""``)
FIXTURE_MARKS = {"moto_s3": "s3", "run_notebook": "notebook"}
FILE_MARKS = {"test_compute_distributed.py": "cluster"}
#: on one pytest-xdist worker, one after the other: each starts a kernel or a browser
SERIAL = {"notebook", "browser"}


def pytest_configure(config: pytest.Config) -> None:
    """The quick set (plain ``pytest``) draws 5 generated examples per parity format; a run of
    every test (``-m ""``: ``make test``) the suite's full 30 (``test_resolve``'s costly
    property test draws 10 more). ``TSEXPLORE_PARITY_EXAMPLES`` set by hand wins."""
    full = not config.option.markexpr
    os.environ.setdefault("TSEXPLORE_PARITY_EXAMPLES", "30" if full else "5")
    _keep_bytecode()


def _keep_bytecode() -> None:
    """Python's bytecode cache is written, whatever ``PYTHONDONTWRITEBYTECODE`` says (this
    kind of machine image sets it): the suite starts ~30 Python processes (two xdist workers,
    notebook kernels, JupyterLab, LocalCluster and DataLoader workers, subprocess tests), and
    without the cache each one compiles every module it imports again (importing tsexplore,
    xarray, zarr, dask and holoviews: 12 s of CPU without it, 5 s with it). Set here, before
    pytest-xdist starts its workers, so that they and every process the tests start inherit
    it; the ``.pyc`` files go to ``__pycache__`` folders (ignored by git)."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``tests/peer`` (xarray's own test modules, ~14 s to import) is not even imported when
    the ``-m`` expression leaves its tests out (plain ``pytest``'s quick set)."""
    if collection_path.name == "peer" and collection_path.parent.name == "tests":
        from _pytest.mark.expression import Expression  # pytest's own -m evaluator

        if config.option.markexpr and not Expression.compile(config.option.markexpr).evaluate(
            lambda name, **kwargs: name == "peer"
        ):
            return True
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        clear_parts(session.config.rootpath)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Add up what the suites' counts were in each pytest-xdist worker (tests/parity,
    tests/peer: ``tsexplore.testing.artifacts``)."""
    if not hasattr(session.config, "workerinput"):
        for path in merge_parts(session.config.rootpath):
            print(f"\ncounts of all workers written to {path}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, mark in FIXTURE_MARKS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(mark)
        mark = FILE_MARKS.get(item.path.name)
        if mark:
            item.add_marker(mark)
        if any(item.get_closest_marker(m) for m in SERIAL):
            item.add_marker(pytest.mark.xdist_group("ui"))
        elif item.get_closest_marker("xdist_group") is None:
            group = _shared_fixture_group(item)
            if group:
                item.add_marker(pytest.mark.xdist_group(group))


def _shared_fixture_group(item: pytest.Item) -> str | None:
    """The tests that share a module- or class-scoped fixture (a LocalCluster, stores written
    once) run on one pytest-xdist worker, one after the other: spread over both workers, or
    interleaved with other modules' tests on one, each worker would build the fixture again,
    and again after every interleaved test (``--dist loadgroup`` sends ungrouped tests one at
    a time)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    scopes = {fd.scope for defs in info.name2fixturedefs.values() for fd in defs}
    if "module" in scopes:
        return item.path.name
    cls = getattr(item, "cls", None)
    if "class" in scopes and cls is not None:
        return f"{item.path.name}::{cls.__name__}"
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the repository (skips when a fresh clone has none)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent (only present beside the project's checkout)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def small_cube(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tutorial cube at its small size (32 x 128 x 128, chunks 8 x 64 x 64)."""
    path = tmp_path_factory.mktemp("cube") / "cube.zarr"
    return tse.sample_data("cube", path, size="small", progress=False)


@pytest.fixture(scope="session")
def moto_s3():
    """A real S3 API (moto's server) on 127.0.0.1 for the whole session, one bucket."""
    pytest.importorskip("moto.server")
    from tsexplore.testing.s3 import MotoS3

    server = MotoS3()
    try:
        yield server
    finally:
        server.close()


#: seconds a test's teardown waits for the engine's threads to stop after ``tse.close()``
THREAD_STOP_BOUND = 30.0


@pytest.fixture(autouse=True)
def fresh_engine():
    """Every test starts and ends with no engine threads running, and with the settings it
    found (``tse.config.set``, e.g. the one cache budget, lasts for the process)."""
    settings = tse.config.get()
    tse.close()
    yield
    tse.close()
    tse.config._settings = settings
    # close() asks every engine thread to stop; a loaded machine may take a while to get
    # there, so wait on the threads themselves (generously) and name any that is left
    deadline = time.monotonic() + THREAD_STOP_BOUND
    for thread in [t for t in threading.enumerate() if t.name.startswith("tsexplore-io")]:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threading.enumerate() if t.name.startswith("tsexplore-io")]
    if alive:
        pytest.fail(
            f"engine threads still alive {THREAD_STOP_BOUND:.0f} s after tse.close(): {alive}; "
            f"all threads: {sorted(t.name for t in threading.enumerate())}"
        )


@pytest.fixture
def run_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run a notebook top to bottom in a real kernel on small data under ``tmp_path / "data"``;
    fails on any cell error. Returns ``(code cells' outputs, their stream text)``."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")

    def run(notebook: Path, timeout: int = 300) -> tuple[list, str]:
        monkeypatch.setenv("TSEXPLORE_SAMPLE_SIZE", "small")
        monkeypatch.setenv("TSEXPLORE_DATA_DIR", str(tmp_path / "data"))
        nb = nbformat.read(notebook, as_version=4)
        assert nb.metadata["kernelspec"]["name"] == "python3"
        client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                         resources={"metadata": {"path": str(notebook.parent)}})
        client.execute()
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
        errors = [o for o in outputs if o.get("output_type") == "error"]
        assert not errors, errors
        text = "\n".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
        return outputs, text

    return run
