"""What one loaded model version holds in memory, as measured at its load. Pure.

Measured, not guessed, so that a budget holds what the model really takes: on a GPU from the
framework's own allocator counters, the bytes it handed out for the load (weights) and the most
it held during a warm-up at the largest batch the model serves (peak); on a host without one,
from the model's tensors' bytes plus the warm-up's inputs and outputs. Between the two, what a
batch costs grows with its rows, so the warm-up's growth per row tells what a larger request
would need (``need``): a model that would grow past its budget is refused that request instead
of taking its neighbours' memory.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MIB", "Footprint", "mib", "shown"]

MIB = 1024 * 1024


def mib(size: int | None) -> float | None:
    """Bytes as MiB for a report, to about a byte (tiny models weigh a few hundred)."""
    return None if size is None else round(size / MIB, 6)


def shown(size: int) -> str:
    """Bytes as an error message says them: MiB to three figures."""
    return f"{size / MIB:.3g} MiB"


@dataclass(frozen=True)
class Footprint:
    weights: int
    """Bytes the loaded model holds while idle."""
    peak: int
    """The most bytes it held serving its warm-up batch, weights included."""
    rows: int
    """The warm-up batch's rows: the largest batch the model serves (1 without batching)."""
    on_gpu: bool
    """Read from the framework's GPU allocator; else counted from the tensors' bytes."""

    def need(self, rows: int) -> int:
        """Bytes a batch of ``rows`` would hold at its peak: the weights plus the warm-up's
        growth per row (never below the measured peak: a smaller batch can still need it)."""
        per_row = max(self.peak - self.weights, 0) / max(self.rows, 1)
        return max(self.peak, self.weights + int(per_row * rows))
