"""Per-GPU health as a small state machine: what each observation does to it. Pure.

Three kinds of observation arrive (from ``health.py``): the periodic probe passing or failing, a
critical XID event from the driver, and NVML itself failing. Any failure makes the GPU, and so
every vGPU on it, Unhealthy at once. Recovery takes consecutive passing probes: one after a probe
or NVML failure (the probe is the evidence), ``xid_recovery_probes`` after a critical XID,
because a GPU that raised one often still answers queries and may raise it again. The public
device plugins never turn a device Healthy again; a GPU that was reset comes back here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum

__all__ = [
    "DEFAULT_IGNORED_XIDS",
    "Cause",
    "GpuHealth",
    "Health",
    "HealthBook",
    "NvmlFailed",
    "Observation",
    "ProbeFailed",
    "ProbePassed",
    "Xid",
    "step",
]

#: Application errors, which leave the GPU healthy. The same list NVIDIA's k8s-device-plugin
#: ignores (internal/rm/health.go, getDisabledHealthCheckXids): 13 graphics engine exception,
#: 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video
#: processor exception, 109 context switch timeout. All are raised by a faulty CUDA program.
DEFAULT_IGNORED_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})


class Health(str, Enum):
    """A device's health; the values are the kubelet's (``Device.health``)."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


class Cause(str, Enum):
    """Why a GPU is Unhealthy."""

    PROBE = "probe"
    XID = "xid"
    NVML = "nvml"


@dataclass(frozen=True)
class ProbePassed:
    pass


@dataclass(frozen=True)
class ProbeFailed:
    reason: str


@dataclass(frozen=True)
class Xid:
    code: int


@dataclass(frozen=True)
class NvmlFailed:
    reason: str


Observation = ProbePassed | ProbeFailed | Xid | NvmlFailed


@dataclass(frozen=True)
class GpuHealth:
    health: Health = Health.HEALTHY
    cause: Cause | None = None
    reason: str = ""
    passes_needed: int = 0
    """Consecutive passing probes needed to become Healthy again."""
    passes: int = 0
    """Consecutive passing probes seen since the last failure."""


_HEALTHY = GpuHealth()


def _fail(state: GpuHealth, cause: Cause, reason: str, needed: int) -> GpuHealth:
    # A new failure restarts the count, and never lowers what an earlier one asked for.
    already = state.passes_needed if state.health is Health.UNHEALTHY else 0
    return GpuHealth(Health.UNHEALTHY, cause, reason, max(already, needed), 0)


def step(
    state: GpuHealth,
    observation: Observation,
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS,
    xid_recovery_probes: int = 3,
) -> GpuHealth:
    """The state after ``observation``."""
    if isinstance(observation, ProbePassed):
        if state.health is Health.HEALTHY:
            return state
        passes = state.passes + 1
        return _HEALTHY if passes >= state.passes_needed else replace(state, passes=passes)
    if isinstance(observation, ProbeFailed):
        return _fail(state, Cause.PROBE, observation.reason, 1)
    if isinstance(observation, Xid):
        if observation.code in ignored_xids:
            return state
        reason = f"critical XID {observation.code}"
        return _fail(state, Cause.XID, reason, max(1, xid_recovery_probes))
    return _fail(state, Cause.NVML, observation.reason, 1)


class HealthBook:
    """Health of every GPU on the node, by UUID. Not thread-safe: one owner (the event loop)."""

    def __init__(
        self,
        uuids: Iterable[str],
        ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS,
        xid_recovery_probes: int = 3,
    ) -> None:
        self._states = {uuid: _HEALTHY for uuid in uuids}
        self._ignored = ignored_xids
        self._xid_probes = xid_recovery_probes

    def observe(self, uuid: str | None, observation: Observation) -> list[str]:
        """Apply ``observation`` to one GPU, or to all when ``uuid`` is None (the driver could
        not say which GPU). Returns the UUIDs whose health changed; unknown UUIDs are ignored."""
        targets = list(self._states) if uuid is None else [uuid]
        changed = []
        for target in targets:
            old = self._states.get(target)
            if old is None:
                continue
            new = step(old, observation, self._ignored, self._xid_probes)
            self._states[target] = new
            if new.health is not old.health:
                changed.append(target)
        return changed

    def state(self, uuid: str) -> GpuHealth:
        return self._states[uuid]

    def snapshot(self) -> Mapping[str, Health]:
        """A copy: readers in other threads (metrics) never see it change under them."""
        return {uuid: state.health for uuid, state in self._states.items()}
