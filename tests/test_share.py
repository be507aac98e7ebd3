"""``IOLoop.share``: a thread shares jobs with the engine's read threads free meanwhile."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator

import pytest

import tsexplore as tse
from tsexplore.engine.loop import IOLoop


@pytest.fixture
def io() -> Iterator[IOLoop]:
    loop = IOLoop(dataclasses.replace(tse.config.get(), io_threads=3), name="tsexplore-io-share")
    yield loop
    loop.close()


def test_one_job_runs_in_the_calling_thread(io: IOLoop) -> None:
    seen = []
    assert io.share([3], lambda j: seen.append(threading.current_thread()) or j * 10, 1.0) == [30]
    assert seen == [threading.current_thread()]


def test_free_threads_take_jobs_and_the_results_keep_the_jobs_order(io: IOLoop) -> None:
    """The caller's first job waits until another thread has run a job: it ends only if a
    read thread really took one (and the results still come back in the jobs' order)."""
    helped = threading.Event()
    me = threading.current_thread()

    def run(job: int) -> int:
        if threading.current_thread() is not me:
            helped.set()
        elif job == 0:
            assert helped.wait(5.0), "no read thread took a job"
        return job * job

    assert io.share(list(range(8)), run, 5.0) == [j * j for j in range(8)]
    assert helped.is_set()


def test_read_threads_that_never_start_do_not_hold_the_caller(io: IOLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read thread busy: the help asked for never runs; the caller runs all."""
    monkeypatch.setattr(io, "submit", lambda fn, *args: None)
    assert io.share([1, 2, 3], lambda j: -j, 1.0) == [-1, -2, -3]


def test_a_job_that_fails_on_a_read_thread_raises_in_the_caller(io: IOLoop) -> None:
    me = threading.current_thread()
    helped = threading.Event()

    def run(job: int) -> int:
        if threading.current_thread() is not me:
            helped.set()
            raise ValueError(f"job {job} failed")
        assert helped.wait(5.0)  # the caller's job waits until a read thread has failed
        return job

    with pytest.raises(ValueError, match="failed"):
        io.share([0, 1, 2, 3], run, 5.0)


def test_a_job_a_read_thread_holds_past_the_timeout_raises_a_read_timeout(io: IOLoop) -> None:
    """Nothing waits for ever: a job stuck on a read thread ends the wait with a
    ReadTimeoutError that says what to do."""
    from tsexplore.errors import ReadTimeoutError

    me = threading.current_thread()
    taken, release = threading.Event(), threading.Event()

    def run(job: int) -> int:
        if threading.current_thread() is not me:
            taken.set()
            release.wait(10.0)  # stuck until the test lets it go
        else:
            assert taken.wait(5.0), "no read thread took a job"
        return job

    try:
        with pytest.raises(ReadTimeoutError, match="wait_timeout"):
            io.share([0, 1, 2], run, 0.2)
    finally:
        release.set()
