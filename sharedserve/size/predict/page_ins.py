"""When a paged model's requests may queue for a slot: after the page-in they wait for. Pure.

A shared server that pages (``serve --paging lru``) is planned with GPU room for its pinned
models and its largest paged one, not for each (``size.grouping``), so the simulation counts on
one paged model resident at a time: a request for a paged model that is not the last paged model
requested starts a page-in (``fleet.paging.page_in_ms``) and waits for it, as do its model's
requests that arrive before it ends; page-ins run one after another. A page-in holds no
model-call slot (``server/paging.py`` moves weights in a worker thread), so it delays a request
before its queue, not its call. Where several paged models fit in that room at once, the server
pages less than this counts: the prediction errs towards the worse.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["ready_times"]


def ready_times(
    arrivals: Sequence[np.ndarray], page_in_s: Sequence[float | None]
) -> list[np.ndarray]:
    """Per model, when each request may queue for a slot (seconds, as its sorted ``arrivals``):
    its arrival, or for a paged model's (``page_in_s`` its page-in time, else None) the end of
    the page-in it waits for. One paged model alone is never paged out: nothing else asks for
    its room."""
    page = {k: p for k, p in enumerate(page_in_s) if p is not None}
    paged = list(page)
    if len(paged) < 2:
        return list(arrivals)  # nothing waits: no copies on the simulation's common path
    ready = [a.copy() for a in arrivals]
    times = np.concatenate([arrivals[k] for k in paged])
    owner = np.concatenate([np.full(len(arrivals[k]), k) for k in paged])
    index = np.concatenate([np.arange(len(arrivals[k])) for k in paged])
    order = np.argsort(times, kind="stable")
    resident, last_end = -1, -math.inf
    loaded = dict.fromkeys(paged, -math.inf)
    for t, k, i in zip(*(a[order].tolist() for a in (times, owner, index)), strict=True):
        if k != resident:
            last_end = max(t, last_end) + page[k]
            resident, loaded[k] = k, last_end
        ready[k][i] = max(t, loaded[k])
    return ready
