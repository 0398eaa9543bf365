"""Retry delays and the client-side token bucket."""

import asyncio
import random

import pytest

from tidegate.kube.backoff import Backoff
from tidegate.kube.ratelimit import TokenBucket


def test_backoff_grows_and_is_capped() -> None:
    backoff = Backoff(initial_seconds=0.1, max_seconds=1.0)
    rng = random.Random(7)
    delays = [backoff.delay(attempt, rng=rng) for attempt in range(8)]
    for attempt, delay in enumerate(delays):
        ceiling = min(0.1 * 2**attempt, 1.0)
        assert ceiling / 2 <= delay <= ceiling
    assert max(delays) <= 1.0


def test_retry_after_overrides_and_is_capped() -> None:
    backoff = Backoff(initial_seconds=0.1, max_seconds=5.0)
    assert backoff.delay(0, retry_after_seconds=3) == 3
    assert backoff.delay(4, retry_after_seconds=60) == 5.0
    assert backoff.delay(0, retry_after_seconds=0) == 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_arithmetic() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert bucket.delay_for_next() == 0
    bucket._tokens = 0.0  # drained
    assert bucket.delay_for_next() == pytest.approx(0.1)
    clock.now += 0.05
    assert bucket.delay_for_next() == pytest.approx(0.05)
    clock.now += 10
    assert bucket.delay_for_next() == 0
    assert bucket._tokens == 3  # refill stops at the burst size


async def test_bucket_paces_requests_beyond_the_burst() -> None:
    clock = FakeClock()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    bucket = TokenBucket(qps=200, burst=5, clock=clock, sleep=sleep)
    for _ in range(25):
        await bucket.acquire()
    # 5 free, then 20 more at 200/s, each waiting its 5 ms
    assert len(slept) == 20
    assert sum(slept) == pytest.approx(0.1)
    assert all(s == pytest.approx(0.005) for s in slept)


async def test_waiters_queue_in_order() -> None:
    clock = FakeClock()

    async def sleep(seconds: float) -> None:
        clock.now += seconds
        await asyncio.sleep(0)

    bucket = TokenBucket(qps=10, burst=1, clock=clock, sleep=sleep)
    order: list[int] = []

    async def take(index: int) -> None:
        await bucket.acquire()
        order.append(index)

    await asyncio.gather(*(take(i) for i in range(5)))
    assert order == [0, 1, 2, 3, 4]
    assert clock.now == pytest.approx(100.4)


async def test_zero_qps_is_unlimited() -> None:
    bucket = TokenBucket(qps=0, burst=1)
    for _ in range(1000):
        await bucket.acquire()
    assert bucket.delay_for_next() == 0
