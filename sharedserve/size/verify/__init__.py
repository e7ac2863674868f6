"""``size --verify``: ``run`` benches one GPU's pack spec as it is and compares its QPS, p50 and
p99 with the plan's; ``advice`` what a miss means and what to do next.
"""

from sharedserve.size.verify.advice import BUSY_BEFORE, TARGETS, TARGETS_TEXT, advice, conditions
from sharedserve.size.verify.run import compare, gpu_predictions, verify_gpu

__all__ = [
    "BUSY_BEFORE",
    "TARGETS",
    "TARGETS_TEXT",
    "advice",
    "compare",
    "conditions",
    "gpu_predictions",
    "verify_gpu",
]
