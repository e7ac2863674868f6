"""What a model was measured beside: a row of it beside other models' processes (``profile
--beside``), and the neighbourhood sizing reads from it or from its own density rows. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sharedserve.size.profile import ProfilePoint

__all__ = ["BESIDE", "BesideRow", "Neighbourhood"]

BESIDE = "beside-"
"""How a profile directory's folder of a row beside other models' processes is named
(``profile --beside``'s ``OUT/beside-NAME``): its report is read as a neighbourhood of the
directory's model, not as points of it or a profile of its neighbour."""


@dataclass(frozen=True)
class BesideRow:
    """A model in a row measured beside other models' processes (``profile --beside``)."""

    point: ProfilePoint
    neighbours: tuple[tuple[str, float], ...]
    """Each other model of the row and its busy share there (``in_flight``)."""
    source: str
    """The report's folder, for the plan."""


@dataclass(frozen=True)
class Neighbourhood:
    """Other processes a model was measured beside, and how much slower it was among them."""

    kind: str
    """The neighbours' model, as profiled (of several, the one with the largest busy share)."""
    neighbours: str
    """Who they were, in words: ``resnet50``, ``3 copies of itself``."""
    busy_share: float
    """Their busy shares summed (``in_flight``: from the row's throughput and latencies)."""
    p50_slowdown: float
    """The model's p50 there over its p50 alone (the same pattern's row of one replica)."""
    p99_slowdown: float
    """The same of its p99."""
    source: str
    """Where it was measured: the profile and the row."""

    @property
    def description(self) -> str:
        return (
            f"interference measured beside {self.neighbours} at {self.busy_share:.2g} busy "
            f"({self.source})"
        )
