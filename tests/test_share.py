"""``sources.base.share``: a read thread shares jobs with the read threads free meanwhile."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tsexplore.sources.base import ReadServices, read_services, share


def _services(helper):  # type: ignore[no-untyped-def]
    return ReadServices(lambda name, n: None, lambda key: None, lambda key, value: False, helper=helper)


def test_outside_the_engine_the_calling_thread_runs_every_job_in_order() -> None:
    seen = []
    assert share([3, 1, 2], lambda j: seen.append(threading.current_thread()) or j * 10, 1.0) == [30, 10, 20]
    assert set(seen) == {threading.current_thread()}


def test_free_threads_take_jobs_and_the_results_keep_the_jobs_order() -> None:
    """The caller's first job waits until another thread has run a job: it ends only if a
    helper really took one (and the results still come back in the jobs' order)."""
    helped = threading.Event()
    me = threading.current_thread()

    def run(job: int) -> int:
        if threading.current_thread() is not me:
            helped.set()
        elif job == 0:
            assert helped.wait(5.0), "no helper took a job"
        return job * job

    with ThreadPoolExecutor(3) as pool:
        token = read_services.set(_services(pool.submit))
        try:
            assert share(list(range(8)), run, 5.0) == [j * j for j in range(8)]
        finally:
            read_services.reset(token)
    assert helped.is_set()


def test_helpers_that_never_start_do_not_hold_the_caller() -> None:
    """Every read thread busy: the helpers asked for never run; the caller runs all."""
    token = read_services.set(_services(lambda fn: None))
    try:
        assert share([1, 2, 3], lambda j: -j, 1.0) == [-1, -2, -3]
    finally:
        read_services.reset(token)


def test_a_job_that_fails_on_a_helper_raises_in_the_caller() -> None:
    me = threading.current_thread()
    helped = threading.Event()

    def run(job: int) -> int:
        if threading.current_thread() is not me:
            helped.set()
            raise ValueError(f"job {job} failed")
        assert helped.wait(5.0)  # the caller's job waits until a helper has failed
        return job

    with ThreadPoolExecutor(2) as pool:
        token = read_services.set(_services(pool.submit))
        try:
            with pytest.raises(ValueError, match="failed"):
                share([0, 1, 2, 3], run, 5.0)
        finally:
            read_services.reset(token)


def test_a_job_a_helper_holds_past_the_timeout_raises_a_read_timeout() -> None:
    """Nothing waits for ever: a job stuck on a helper ends the wait with a ReadTimeoutError
    that says what to do."""
    from tsexplore.errors import ReadTimeoutError

    me = threading.current_thread()
    taken, release = threading.Event(), threading.Event()

    def run(job: int) -> int:
        if threading.current_thread() is not me:
            taken.set()
            release.wait(10.0)  # stuck until the test lets it go
        else:
            assert taken.wait(5.0), "no helper took a job"
        return job

    with ThreadPoolExecutor(1) as pool:
        token = read_services.set(_services(pool.submit))
        try:
            with pytest.raises(ReadTimeoutError, match="wait_timeout"):
                share([0, 1, 2], run, 0.2)
        finally:
            release.set()
            read_services.reset(token)
