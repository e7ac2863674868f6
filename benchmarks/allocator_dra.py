"""NodePrepareResources of the DRA driver, for ``allocator.py``: 64 claims on 8 GPUs.

Starts the real ``sharedserve allocator --api dra`` on a stand-in node (tests/support/dra_node.py:
the kubelet's plugin registration and DRA calls over real unix sockets, and a fake API server
behind the real ``kubernetes`` client, in this process). 64 allocated claims, 8 per GPU of 8 GiB
each, are put into the API server; then, per round, each claim is prepared in its own call (as
the kubelet does for a pod's claims) and then unprepared, and the latency of every call is kept.
A second pass prepares each claim twice and times the repeat, which the checkpoint answers
without the API server. One call with all 64 claims at once is timed too.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sharedserve.contract import DRA_DRIVER  # noqa: E402
from tests.support.apiserver import allocated_claim  # noqa: E402
from tests.support.dra_node import NODE, DraNode  # noqa: E402

CLAIMS, GPUS, CLAIM_GIB = 64, 8, 8
Ref = tuple[str, str, str]


def _uid(n: int, prefix: str = "5f0c1a2b-3333-4000-8000") -> str:
    return f"{prefix}-{n:012x}"


def _gpus() -> list[dict[str, object]]:
    return [
        {
            "uuid": f"GPU-{i:08x}-5f0c-4a1b-8000-00000000{i:04x}",
            "index": i,
            "name": "H100 (simulated)",
            "memory_mib": 81559,
            "numa_node": i // 4,
        }
        for i in range(GPUS)
    ]


def _claims(node: DraNode) -> list[Ref]:
    refs = []
    for n in range(CLAIMS):
        result = {
            "request": "gpu",
            "driver": DRA_DRIVER,
            "pool": NODE,
            "device": f"gpu-{n % GPUS}",
            "consumedCapacity": {"memory": f"{CLAIM_GIB}Gi"},
            "shareID": _uid(n, "5f0c1a2b-2222-4000-8000"),
        }
        name = f"model-{n}"
        node.api.set_claim(allocated_claim("models", name, _uid(n), [result], node=NODE))
        refs.append(("models", _uid(n), name))
    return refs


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure_prepare(rounds: int) -> dict[str, list[float]]:
    """Seconds per call: ``prepare`` (first time), ``repeat`` (checkpointed), ``unprepare``,
    ``all 64 in one call``."""
    node = DraNode([], _gpus())
    samples: dict[str, list[float]] = {
        "prepare": [],
        "repeat": [],
        "unprepare": [],
        "all": [],
    }
    try:
        node.registered(timeout=30)
        node.slice()
        refs = _claims(node)
        kubelet = node.kubelet

        def check(answer: object, refs_: list[Ref]) -> None:
            claims = answer.claims  # type: ignore[attr-defined]
            errors = [claims[r[1]].error for r in refs_ if claims[r[1]].error]
            assert not errors, errors

        kubelet.prepare(refs[:1])  # warm-up: the first call sets up the channel and the client
        kubelet.unprepare(refs[:1])

        def prepare(refs_: list[Ref]) -> Callable[[], None]:
            return lambda: check(kubelet.prepare(refs_), refs_)

        def unprepare(refs_: list[Ref]) -> Callable[[], object]:
            return lambda: kubelet.unprepare(refs_)

        for _ in range(rounds):
            for ref in refs:
                samples["prepare"].append(_timed(prepare([ref])))
                samples["repeat"].append(_timed(prepare([ref])))
            for ref in refs:
                samples["unprepare"].append(_timed(unprepare([ref])))
            samples["all"].append(_timed(prepare(refs)))
            kubelet.unprepare(refs)
    finally:
        log = node.log()
        code = node.close()
        if code != 0 or "Traceback" in log:
            raise SystemExit(f"the DRA driver failed (exit {code}):\n{log}")
    return samples
