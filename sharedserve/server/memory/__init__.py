"""Model memory: what each version holds against the process's cap, and paging by least
recent use (``paging.py``)."""

from sharedserve.server.memory.paging import DEFAULT_PAGE_IN_TIMEOUT_S, Memory

__all__ = ["DEFAULT_PAGE_IN_TIMEOUT_S", "Memory"]
