"""The load generator: Locust, always in a process of its own (``python -m
sharedserve.bench.loadgen master|worker``; ``bench.launch`` starts it and reads its result).

``import locust`` monkey-patches the whole interpreter with gevent, so only the modules that run
in that process import it: ``process`` (the user classes and the master's and workers' roles,
and ``main``), ``measure`` (the measurement windows each process records) and ``senders`` (the
requests). This face imports none of them: ``-m`` imports it first, and anything else importing
it gets the pure open-loop schedule (``schedule``) and no gevent.
"""

from sharedserve.bench.loadgen.schedule import (
    BLOCK_MIN,
    BLOCK_S,
    arrivals,
    block_count,
    block_span,
)

__all__ = ["BLOCK_MIN", "BLOCK_S", "arrivals", "block_count", "block_span"]
