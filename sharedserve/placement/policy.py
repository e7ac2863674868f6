"""What ``bundle`` and ``spread`` prefer, defined once for every placement. Pure.

Both policies rank the places a request fits (a GPU for a replica, a GPU's free vGPUs for the
kubelet's request) by two figures: the *room* the place would have left and the share of it
already *used*. The placement routine (``placement.place``) and the allocator's kubelet adapter
(``allocator.placement.preferred_allocation``) measure them in their own units (a share of a GPU's
tighter resource; free vGPUs) and rank by the same key, lowest first, ties going to the lower NVML
index:

- ``bundle`` is best fit: the least room left first, then the fuller. Small requests fill partly
  used GPUs and whole GPUs stay free for a big one (the bin-packing argument of IBM's "bundle vs
  spread" example).
- ``spread`` is least used first, then the one with more room: each gets more of a GPU's compute,
  at the cost of fragmenting free room across GPUs.

The figures may be numbers or numpy arrays (one entry a GPU); the key is then a pair of arrays.
"""

from __future__ import annotations

from typing import Any, overload

import numpy as np
import numpy.typing as npt

from sharedserve.enums import PlacementPolicy

__all__ = ["preference"]

Figures = npt.NDArray[np.float64]


@overload
def preference(policy: PlacementPolicy, *, room: float, used: float) -> tuple[float, float]: ...


@overload
def preference(
    policy: PlacementPolicy, *, room: Figures, used: Figures
) -> tuple[Figures, Figures]: ...


def preference(policy: PlacementPolicy, *, room: Any, used: Any) -> tuple[Any, Any]:
    """The sort key of a place under ``policy``, lowest first (see the module's docstring)."""
    if policy is PlacementPolicy.BUNDLE:
        return room, -used
    return used, -room
