"""The queueing simulation against closed forms, fair turns, saturation and batching."""

from __future__ import annotations

import decimal
import heapq
import math

import numpy as np
import pytest

from sharedserve.bench.histogram import LatencyHistogram
from sharedserve.server.inference.fair_queue import FairQueue
from sharedserve.size.predict import Batching, ModelLoad, simulate
from sharedserve.size.predict.queueing import _serve
from sharedserve.size.service_times import ServiceTimes, cpu_slots

MEAN_MS = 10.0
MU = 1000 / MEAN_MS  # calls/s one slot serves


def exponential(mean_ms: float, points: int = 10_000) -> ServiceTimes:
    """An exponential distribution as the histogram of its quantiles, one count each."""
    q = (np.arange(points) + 0.5) / points
    return ServiceTimes.of([(-math.log1p(-x) * mean_ms, 1) for x in q])


def constant(ms: float) -> ServiceTimes:
    return ServiceTimes.of([(ms, 1)])


def only(load: ModelLoad, slots: int = 1, requests: int = 600_000):
    (found,) = simulate([load], slots, requests=requests)
    return found


def md1_wait_cdf(t: float, lam: float, d: float) -> float:
    """Erlang's M/D/1 waiting-time distribution, P(W <= t), in 80 digits: its alternating
    terms grow far past what a float cancels exactly."""
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        lam_, t_, d_ = decimal.Decimal(lam), decimal.Decimal(t), decimal.Decimal(d)
        total = sum(
            (lam_ * (k * d_ - t_)) ** k / math.factorial(k) * (-lam_ * (k * d_ - t_)).exp()
            for k in range(int(t // d) + 1)
        )
        return float((1 - lam_ * d_) * total)


def bisect(f, low: float, high: float, target: float) -> float:
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < target else (low, mid)
    return (low + high) / 2


def erlang_c(c: int, a: float) -> float:
    """The probability an arrival waits in an M/M/c queue at offered load ``a`` (Erlangs)."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_mm1_sojourn_percentiles_match_the_exponential_closed_form(rho):
    lam = rho * MU
    found = only(ModelLoad("m", lam, exponential(MEAN_MS)))
    # An M/M/1 queue's sojourn time is exponential with rate mu - lambda.
    p99 = math.log(100) / (MU - lam) * 1000
    p50 = math.log(2) / (MU - lam) * 1000
    assert found.p99_ms == pytest.approx(p99, rel=0.05)
    assert found.p50_ms == pytest.approx(p50, rel=0.03)
    assert not found.saturated and found.qps == lam
    assert found.requests == pytest.approx(0.9 * 600_000, rel=0.01)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_p99_matches_erlangs_waiting_time_distribution(rho):
    lam = rho * MU
    found = only(ModelLoad("m", lam, constant(MEAN_MS)))
    d = MEAN_MS / 1000
    wait_p99 = bisect(lambda t: md1_wait_cdf(t, lam, d), 0.0, 100 * d, 0.99)
    assert found.p99_ms == pytest.approx((wait_p99 + d) * 1000, rel=0.03)


def test_mmc_mean_wait_matches_erlang_c():
    c, rho = 3, 0.7
    lam = rho * c * MU
    found = only(ModelLoad("m", lam, exponential(MEAN_MS)), slots=c, requests=400_000)
    wait_ms = erlang_c(c, lam / MU) / (c * MU - lam) * 1000
    assert found.mean_ms - MEAN_MS == pytest.approx(wait_ms, rel=0.06)


def test_a_light_model_keeps_its_turn_beside_a_heavy_one_on_one_slot():
    heavy = ModelLoad("heavy", 95, constant(10.0))
    light = ModelLoad("light", 5, constant(1.0))
    got_heavy, got_light = simulate([heavy, light], 1, requests=100_000)
    # Fair turns: a light call waits for the call running and, when it ties with the heavy
    # model's next turn (a second light call soon after the first), that one: 20 ms at most.
    assert got_light.p99_ms <= 1.0 + 20.0
    assert got_heavy.p99_ms > 10 * got_light.p99_ms
    assert not got_heavy.saturated and not got_light.saturated


@pytest.mark.parametrize("rate", [100.0, 120.0])
def test_a_saturated_model_has_no_finite_percentile_and_its_qps_is_capped(rate):
    found = only(ModelLoad("m", rate, constant(10.0)), requests=20_000)
    assert found.saturated
    assert found.p99_ms == math.inf and found.p50_ms == math.inf
    assert found.qps == pytest.approx(100.0)


def test_a_saturated_neighbour_leaves_a_light_model_its_share():
    hot = ModelLoad("hot", 150, constant(10.0))
    light = ModelLoad("light", 5, constant(1.0))
    got_hot, got_light = simulate([hot, light], 1, requests=50_000)
    assert got_hot.saturated and got_hot.qps == pytest.approx((1 - 5 * 0.001) / 0.01)
    assert not got_light.saturated and got_light.p99_ms <= 1.0 + 20.0


def test_weights_split_the_slots_between_saturated_models():
    a = ModelLoad("a", 1000, constant(10.0), weight=3)
    b = ModelLoad("b", 1000, constant(10.0), weight=1)
    got_a, got_b = simulate([a, b], 2, requests=20_000)
    assert got_a.saturated and got_b.saturated
    assert (got_a.qps, got_b.qps) == pytest.approx((150.0, 50.0))


def test_batching_waits_its_timeout_alone_and_carries_what_one_call_could_not():
    slow = Batching(max_batch_size=8, timeout_ms=5.0)
    alone = only(ModelLoad("m", 1.0, constant(10.0), batching=slow), requests=2_000)
    # At 1 QPS no request finds company: each waits the whole timeout, then its call.
    assert alone.p50_ms == pytest.approx(15.0)
    # 150 QPS of 10 ms calls saturate one slot; in batches of up to 8 that cost one call, not.
    busy = ModelLoad("m", 150.0, constant(10.0), batching=Batching(8, 2.0))
    assert not only(busy, requests=30_000).saturated
    assert only(ModelLoad("m", 150.0, constant(10.0)), requests=30_000).saturated
    # A batch that costs as much per row as a call does is no help.
    costly = ModelLoad("m", 150.0, constant(10.0), batching=Batching(8, 2.0, row_cost=1.0))
    assert only(costly, requests=30_000).saturated


def test_service_times_from_a_bench_histogram():
    hist = LatencyHistogram()
    for micros in (5000, 5000, 7000, 20000):
        hist.record(micros)
    service = ServiceTimes.from_histogram(hist.to_dict())
    assert service.values_ms == (5.0, 7.0, 20.0) and service.counts == (2, 1, 1)
    assert service.mean_ms == pytest.approx(hist.mean_us() / 1000)


def test_the_same_seed_gives_the_same_figures_and_bad_input_is_refused():
    loads = [ModelLoad("a", 40, exponential(MEAN_MS)), ModelLoad("b", 20, constant(5.0))]
    assert simulate(loads, 2, seed=7) == simulate(loads, 2, seed=7)
    assert simulate(loads, 2, seed=7) != simulate(loads, 2, seed=8)
    with pytest.raises(ValueError):
        simulate(loads, 0)
    with pytest.raises(ValueError):
        simulate([loads[0], loads[0]], 1)
    with pytest.raises(ValueError):
        simulate([ModelLoad("a", 0, constant(1.0))], 1)


def reference(times, models, services, weights, slots):
    """The scheduler's own FairQueue driven event by event: each call's completion time."""
    queue: FairQueue[int] = FairQueue()
    for model, weight in enumerate(weights):
        queue.set_weight(str(model), weight)
    running: list[float] = []
    done = [0.0] * len(times)
    i = 0
    while i < len(times) or running:
        if i < len(times) and (not running or times[i] <= running[0]):
            now = times[i]
            queue.push(str(models[i]), i)
            i += 1
        else:
            now = heapq.heappop(running)
        while len(running) < slots and (popped := queue.pop()) is not None:
            j = popped[1]
            done[j] = now + services[j]
            heapq.heappush(running, done[j])
    return done


@pytest.mark.parametrize("slots", [1, 2, 4])
def test_the_simulated_turns_are_the_schedulers_own(slots):
    rng = np.random.default_rng(3)
    n, weights = 3000, [1.0, 2.0, 0.5, 1.0]
    times = np.sort(rng.uniform(0, n / (0.9 * slots * 100), n)).tolist()
    models = rng.integers(0, len(weights), n).tolist()
    services = rng.exponential(0.01, n).tolist()
    expected = reference(times, models, services, weights, slots)
    inverse = [1 / w for w in weights]
    found = _serve((times, models, list(range(n)), services), {}, inverse, slots)
    assert sorted(j for _, j, _, _ in found) == list(range(n))
    assert all(d == pytest.approx(expected[j], abs=1e-12) for _, j, _, d in found)


@pytest.mark.parametrize(
    ("cpu_limit", "default_cores", "slots"),
    [
        (None, 1, 1),  # profile's default: a row without a limit
        (None, 6.0, 6),  # predict's default: the node's cores
        (None, 0.5, 1),
        (0.35, 8, 1),  # under a core: still one slot
        (1.9, 8, 1),  # whole cores only: 0.9 of a core runs no call of its own
        (2.0, 8, 2),
        (3.5, 1, 3),  # a limit wins over the default
    ],
)
def test_cpu_slots_are_the_whole_cores_of_the_limit(cpu_limit, default_cores, slots):
    assert cpu_slots(cpu_limit, default_cores) == slots
