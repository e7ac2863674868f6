"""A replica's p50 and p99 at its planned rate: ``forecast`` says which figure a model gets (its
profile's row, or a simulation) and why; ``queueing`` simulates one server process's queue;
``interference`` which measured neighbourhood its GPU's other processes slow it as; ``page_ins``
when a paged model's request waits for its page-in; ``corrections`` the factors ``size
--verify`` runs measured, by which a model's predictions are corrected. Pure.
"""

from sharedserve.size.predict.corrections import (
    MOST_REPLICAS,
    Correction,
    load_corrections,
    meet_objective,
    replanned,
)
from sharedserve.size.predict.forecast import (
    REQUESTS,
    LatencyForecaster,
    PredictedLatency,
    calls_at_once,
    slots_of,
)
from sharedserve.size.predict.interference import (
    ALONE,
    UNMEASURED,
    Neighbour,
    Slowdown,
    lookup,
    neighbour,
    planned,
)
from sharedserve.size.predict.page_ins import ready_times
from sharedserve.size.predict.queueing import Batching, ModelLoad, Prediction, simulate

__all__ = [
    "ALONE",
    "MOST_REPLICAS",
    "REQUESTS",
    "UNMEASURED",
    "Batching",
    "Correction",
    "LatencyForecaster",
    "ModelLoad",
    "Neighbour",
    "PredictedLatency",
    "Prediction",
    "Slowdown",
    "calls_at_once",
    "load_corrections",
    "lookup",
    "meet_objective",
    "neighbour",
    "planned",
    "ready_times",
    "replanned",
    "simulate",
    "slots_of",
]
