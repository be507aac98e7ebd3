"""The link model: reads in flight from the latency, capped by what the link delivers."""

from __future__ import annotations

import math

from tsexplore.sources.link import GAIN, HIGHEST, LOWEST, LinkModel


class Clock:
    now = 100.0


def _depth(model: LinkModel, latency: float, now: float | None = None) -> int:
    """The model's concurrency when a read's moving average latency is ``latency``."""
    model.read_latency = latency
    return model.concurrency(now=now)


def _round(model: LinkModel, clock: Clock, n: int, size: int, seconds: float) -> None:
    for _ in range(n):
        model.start(now=clock.now)
    clock.now += seconds
    for _ in range(n):
        model.record(size, seconds, now=clock.now)


def _simulate(model: LinkModel, clock: Clock, bandwidth: float, latency: float, size: int,
              rounds: int = 20) -> list[int]:
    """Rounds of as many requests as the model allows over a fair link of ``bandwidth``
    bytes/s and ``latency`` seconds to first byte; the depths it chose."""
    depths = []
    for _ in range(rounds):
        n = _depth(model, 10.0, now=clock.now)  # the latency rule out of the way
        depths.append(n)
        _round(model, clock, n, size, latency + n * size / bandwidth)
    return depths


def test_a_new_link_starts_small_whatever_the_latency() -> None:
    model = LinkModel()
    assert _depth(model, 0.1) == LOWEST  # not 80 requests that would all arrive late
    assert _depth(model, 0.0005) == LOWEST


def test_an_unlimited_link_lets_the_depth_grow_to_the_latency_rule() -> None:
    model, clock = LinkModel(), Clock()
    depths = _simulate(model, clock, 1e12, 0.1, 1_000_000, rounds=30)
    assert depths[:3] == [LOWEST, LOWEST + 2 * 4, LOWEST + 2 * 16]  # slow start
    # then twice what each busy second delivered: with no cap on the link, that keeps growing
    assert depths[-1] == HIGHEST
    # and the latency rule still bounds it: 5 ms needs 4 in flight, not 128
    assert _depth(model, 0.005, now=clock.now) == LOWEST


def test_a_full_link_settles_near_twice_its_bandwidth_delay_product() -> None:
    model, clock = LinkModel(), Clock()
    size, bandwidth, latency = 2_000_000, 200e6, 0.1
    depths = _simulate(model, clock, bandwidth, latency, size, rounds=30)
    bdp = bandwidth * latency / size  # 10 requests
    settled = depths[-10:]
    assert all(1.5 * bdp <= d <= 3 * bdp + LOWEST for d in settled), depths
    assert max(settled) < 80  # what the latency rule alone would keep in flight


def test_between_bursts_the_measured_bandwidth_keeps_the_depth() -> None:
    """A player's bursts: the link idles between them; the bandwidth is per busy second."""
    model, clock = LinkModel(), Clock()
    for _ in range(10):
        _round(model, clock, 16, 2_000_000, 0.26)
        clock.now += 0.5
    assert math.isclose(model.bandwidth, 16 * 2_000_000 / 0.26)
    # long after the last completion the short-term rule has nothing: the bandwidth has
    cap = _depth(model, 10.0, now=clock.now)
    full = GAIN * model.bandwidth * 0.26 / 2_000_000 + LOWEST  # less a little decay
    assert 0.85 * full <= cap <= full + 1
    assert _depth(model, 10.0, now=clock.now + 40) < cap  # and it decays


# -- the look-ahead's depth and batches -----------------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tsexplore.engine.lookahead import look_ahead  # noqa: E402


@given(st.integers(0, 60), st.integers(1, 12), st.booleans(), st.integers(0, 60))
def test_look_ahead_yields_in_order_within_its_depth(n, ahead, many, stop_at) -> None:  # type: ignore[no-untyped-def]
    issued: list[list[int]] = []
    waited: list[int] = []
    abandoned: list[int] = []
    depths = iter(range(1, 10_000))  # a depth that grows, asked again each time

    def issue(i: int) -> int:
        issued.append([i])
        return i

    def issue_many(items: list[int]) -> list[int]:
        issued.append(list(items))
        return list(items)

    def wait(i: int, handle: int) -> int:
        waited.append(i)
        outstanding = sum(len(b) for b in issued) - len(waited)
        assert outstanding < (ahead if not many else 10_000)
        return handle * 10

    gen = look_ahead(range(n), issue, wait, ahead=(lambda: min(ahead, next(depths))) if many else ahead,
                     abandon=abandoned.append, issue_many=issue_many if many else None)
    out = []
    for item, value in gen:
        out.append((item, value))
        if len(out) == stop_at:
            break
    gen.close()
    assert out == [(i, i * 10) for i in range(len(out))]
    flat = [i for b in issued for i in b]
    assert flat == list(range(len(flat)))  # issued in order, each once
    assert sorted(abandoned) == flat[len(out):]  # what was issued but not used
    if many:
        assert all(len(b) <= ahead for b in issued)
