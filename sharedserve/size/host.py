"""Host memory of a plan's processes, per node. Pure.

The rule, from ``benchmarks/results/multimodel_memory_cpu.md`` (held pages, on CPU): a ``serve``
process pays its runtime once, ``host_memory_per_process_mib`` in the fleet file (178 MiB a
torch process measured, 246 a TensorFlow one), and each model it holds adds about
``HOST_PER_FILE_MIB`` times its files' size (a 13.5 MiB mobilenet_v2 added 39.9 MiB to a torch
server, 67.8 MiB to a TensorFlow one: 3x and 5x; the larger is kept). A model without files in
the fleet adds nothing the plan can know. So a shared server of N models pays one runtime where
N dedicated replicas pay N, which is most of what it saves in host memory.
"""

from __future__ import annotations

from collections.abc import Iterable

from sharedserve.size.demand import Demand

__all__ = ["HOST_PER_FILE_MIB", "process_host_mib"]

HOST_PER_FILE_MIB = 5.0
"""Host MiB a model adds to its process per MiB of its files (TensorFlow's measured 5x)."""


def process_host_mib(models: Iterable[Demand], runtime_mib: float) -> float:
    """One process's host memory: its runtime once, and each of its models' share."""
    return runtime_mib + sum(HOST_PER_FILE_MIB * (d.files_mib or 0.0) for d in models)
