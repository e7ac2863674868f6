"""ONE placement routine: heterogeneous replicas onto GPUs, for ``size`` and ``pack``. Pure.

``place`` puts replicas (memory with a context reserve, busy share, measured density, spread)
onto GPUs opened as needed over a fleet's nodes (``OpenEnded``) or onto one host's GPUs
(``Host``), by ``bundle`` or ``spread``. ``policy.preference`` defines what each policy prefers,
for ``place`` and for the allocator's kubelet adapter alike.
"""

from sharedserve.placement.place import place
from sharedserve.placement.policy import preference
from sharedserve.placement.types import (
    Host,
    OpenEnded,
    PlacedReplica,
    Placement,
    PlannedGpu,
    Replicas,
)

__all__ = [
    "Host",
    "OpenEnded",
    "PlacedReplica",
    "Placement",
    "PlannedGpu",
    "Replicas",
    "place",
    "preference",
]
