"""The one path of a request, under every wire format: admission, decoding, validation
(``validate.py``, the one check), the model call in the process's fair scheduler
(``scheduler.py``, ``fair_queue.py``), dynamic batching (``batching.py``, its rules in
``batching_policy.py``), encoding (``path.py``)."""

from sharedserve.server.inference.batching import Batcher, BatcherStats
from sharedserve.server.inference.batching_policy import parse_batching_parameters
from sharedserve.server.inference.path import Call, InferencePath, SignatureOf
from sharedserve.server.inference.scheduler import (
    DEFAULT_MAX_INFLIGHT,
    DEFAULT_SHARE,
    SPARE_THREADS,
    Scheduler,
    Share,
    model_call_slots,
    model_call_threads,
)
from sharedserve.server.inference.validate import (
    MAX_DIMS,
    check_inputs,
    check_rank,
    check_shape,
    dtype_name,
)

__all__ = [
    "DEFAULT_MAX_INFLIGHT",
    "DEFAULT_SHARE",
    "MAX_DIMS",
    "SPARE_THREADS",
    "Batcher",
    "BatcherStats",
    "Call",
    "InferencePath",
    "Scheduler",
    "Share",
    "SignatureOf",
    "check_inputs",
    "check_rank",
    "check_shape",
    "dtype_name",
    "model_call_slots",
    "model_call_threads",
    "parse_batching_parameters",
]
