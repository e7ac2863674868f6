"""Each model's CPU seconds by phase (``metrics/cpu.py``): charges from many threads at once are
all counted, a thread that ended keeps its figures, and the scrape and ``totals`` agree."""

from __future__ import annotations

import threading
import time

from prometheus_client.parser import text_string_to_metric_families

from sharedserve.server.metrics import CpuPhase, CpuSeconds, Metrics

PHASES = {"decode", "call", "encode", "paging"}


def _charge_from_threads(cpu: CpuSeconds, threads: int, charges: int) -> None:
    """``threads`` threads at once, each charging 0.5 s ``charges`` times to each of two models
    (halves add up exactly in binary, so the sums compare with ==)."""
    start = threading.Barrier(threads)

    def work(phase: CpuPhase) -> None:
        start.wait()
        for _ in range(charges):
            cpu.charge("a", phase, 0.5)
            cpu.charge("b", CpuPhase.CALL, 0.5)

    pool = [threading.Thread(target=work, args=(list(CpuPhase)[i % 4],)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()


def test_charges_from_many_threads_are_all_counted_after_the_threads_end() -> None:
    cpu = CpuSeconds()
    _charge_from_threads(cpu, threads=8, charges=20_000)
    # Each phase of "a" had 2 of the 8 threads; "b"'s calls all 8.
    assert cpu.totals() == {
        "a": dict.fromkeys(PHASES, 2 * 20_000 * 0.5),
        "b": {"decode": 0.0, "call": 8 * 20_000 * 0.5, "encode": 0.0, "paging": 0.0},
    }
    # Read again: the ended threads' figures were folded in once, not twice, nor lost.
    assert cpu.totals()["b"]["call"] == 80_000.0
    _charge_from_threads(cpu, threads=2, charges=10)
    assert cpu.totals()["b"]["call"] == 80_010.0


def test_a_live_threads_charges_are_read_while_it_runs() -> None:
    cpu = CpuSeconds()
    charged, done = threading.Event(), threading.Event()

    def work() -> None:
        cpu.charge("a", CpuPhase.DECODE, 1.5)
        charged.set()
        assert done.wait(30)

    thread = threading.Thread(target=work)
    thread.start()
    try:
        assert charged.wait(30)
        assert cpu.of("a")["decode"] == 1.5
    finally:
        done.set()
        thread.join()
    assert cpu.of("a")["decode"] == 1.5


def test_a_model_without_charges_reads_zero_in_every_phase() -> None:
    cpu = CpuSeconds()
    cpu.charge("a", CpuPhase.ENCODE, 0.25)
    assert cpu.of("idle") == dict.fromkeys(PHASES, 0.0)
    assert set(cpu.totals(["idle"])) == {"a", "idle"}
    assert set(cpu.totals()) == {"a"}


def test_the_scrape_has_every_phase_of_every_charged_model() -> None:
    metrics = Metrics("*")
    metrics.cpu.charge("light", CpuPhase.DECODE, 0.125)
    started = time.thread_time()
    sum(i * i for i in range(200_000))  # some of this thread's own CPU time, charged as a call
    metrics.cpu.charge("heavy", CpuPhase.CALL, time.thread_time() - started)
    samples = {
        (sample.labels["model"], sample.labels["phase"]): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
        if sample.name == "sharedserve_model_cpu_seconds_total"
    }
    assert set(samples) == {(model, phase) for model in ("light", "heavy") for phase in PHASES}
    assert samples["light", "decode"] == 0.125
    assert samples["heavy", "call"] > 0
    assert samples["heavy", "decode"] == 0.0


def test_a_fresh_scrape_declares_the_family() -> None:
    """Before any charge the counter is declared, with no series yet."""
    text = Metrics("tiny").render().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["sharedserve_model_cpu_seconds"].type == "counter"
    assert families["sharedserve_model_cpu_seconds"].samples == []
