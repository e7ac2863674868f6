"""``size --verify``: ``run`` benches one GPU's pack spec as it is (once or ``--repeat`` times on
the same servers) and compares its QPS, p50 and p99 with the plan's; ``advice`` whether the
measurement can be trusted and repeats, what a miss means and what to do next.
"""

from sharedserve.size.verify.advice import (
    BUSY_BEFORE,
    LATE_LIMIT,
    REPEAT_TARGETS,
    TARGETS,
    TARGETS_TEXT,
    advice,
    conditions,
    repeat_spread,
    spread,
)
from sharedserve.size.verify.run import compare, gpu_predictions, verify_gpu

__all__ = [
    "BUSY_BEFORE",
    "LATE_LIMIT",
    "REPEAT_TARGETS",
    "TARGETS",
    "TARGETS_TEXT",
    "advice",
    "compare",
    "conditions",
    "gpu_predictions",
    "repeat_spread",
    "spread",
    "verify_gpu",
]
