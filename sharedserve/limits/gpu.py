"""The per-process GPU memory cap: where it comes from, what it amounts to, how it is applied.

The cap arrives either as flags or through the env contract the allocator and the packer set
(``SHAREDSERVE_GPU_MEMORY_FRACTION`` / ``SHAREDSERVE_GPU_MEMORY_MIB``). Flags win over
the environment; within one source an absolute MiB figure wins over a fraction, because the
allocator computed it against the real card. Resolution is pure; only ``apply_tensorflow`` and
``apply_torch`` touch a framework (``apply_onnxruntime`` says whether onnxruntime's sessions
hold it, which they do from the cap it returns), and each must run before it first touches the
GPU: TensorFlow fixes its device configuration on first use and refuses later changes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from sharedserve.config import NO_CAP, CapSource, GpuCapRequest
from sharedserve.contract import (
    GpuShare,
    Grant,
    fraction_of,
    mib_of,
    parse_fraction,
    parse_mib,
)
from sharedserve.errors import ConfigError
from sharedserve.framework_output import framework_startup
from sharedserve.gpu.backend import GpuInfo

__all__ = [
    "CapSource",
    "GpuCap",
    "GpuCapRequest",
    "apply_onnxruntime",
    "apply_tensorflow",
    "apply_torch",
    "parse_cap_request",
    "resolve_cap",
    "select_visible_gpu",
]

log = logging.getLogger(__name__)

_MIB = 1 << 20


@dataclass(frozen=True)
class GpuCap:
    """The cap in force, as reported on ``/sharedserve/v1/limits``: the request sized against
    the GPU the server uses, so it carries both figures wherever the GPU's size is known."""

    share: GpuShare
    """The GPU (``uuid``, None without one) and the cap on it (neither figure without a cap)."""
    source: CapSource
    total_mib: int | None
    """The GPU's memory in MiB, from NVML; None without a GPU."""
    enforced: bool = False
    """True only once a framework has been configured with the cap on a real GPU."""


def parse_cap_request(
    flag_fraction: float | None, flag_mib: int | None, grant: Grant | None = None
) -> GpuCapRequest:
    """Validate the flags and combine them with the env contract's ``grant``; flags win.

    A grant of several GPUs is served on the first, with that GPU's cap: the server uses one
    GPU, CUDA's device 0, which is the first of the grant (NVML index order).
    """
    if flag_fraction is not None and flag_mib is not None:
        raise ConfigError("give --gpu-memory-fraction or --gpu-memory-mib, not both")
    if flag_fraction is not None:
        fraction = parse_fraction(flag_fraction, "--gpu-memory-fraction")
        return GpuCapRequest.of(CapSource.FLAG, fraction=fraction)
    if flag_mib is not None:
        return GpuCapRequest.of(CapSource.FLAG, mib=parse_mib(flag_mib, "--gpu-memory-mib"))
    if grant is None or all(g.mib is None and g.fraction is None for g in grant.gpus):
        return NO_CAP
    if len(grant.gpus) > 1:
        log.warning(
            "the env contract grants %d GPUs; sharedserve serve uses one: serving on the first "
            "(CUDA device 0) with its cap, the others go unused",
            len(grant.gpus),
        )
    first = grant.gpus[0]
    if first.mib is not None:  # computed by the writer against the real card: it wins
        return GpuCapRequest.of(CapSource.ENV, mib=first.mib)
    return GpuCapRequest.of(CapSource.ENV, fraction=first.fraction)


def select_visible_gpu(gpus: list[GpuInfo], visible_devices: str | None) -> GpuInfo | None:
    """The GPU a framework will call device 0, given ``CUDA_VISIBLE_DEVICES``'s value.

    Entries are indices or UUIDs (a UUID prefix is accepted, as CUDA does). An empty value hides
    every GPU. Indices are taken in NVML order, which is CUDA's only with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (the packer sets it); UUIDs are unambiguous either way.
    NVIDIA_VISIBLE_DEVICES needs no handling: the container runtime already hid the
    other GPUs from NVML.
    """
    if not gpus:
        return None
    if visible_devices is None:
        return min(gpus, key=lambda g: g.index)
    first = visible_devices.split(",")[0].strip()
    if not first or first in {"none", "void", "-1"}:
        return None
    if first.isascii() and first.isdigit():
        return next((g for g in gpus if g.index == int(first)), None)
    return next((g for g in gpus if g.uuid.startswith(first)), None)


def resolve_cap(request: GpuCapRequest, gpu: GpuInfo | None) -> GpuCap:
    """Turn the request into both figures against the GPU's real size (the contract's one
    conversion); without a GPU the figure asked for is all there is."""
    asked = request.share
    if request.source is CapSource.NONE or (asked.mib is None and asked.fraction is None):
        if gpu is None:
            return GpuCap(GpuShare(None), CapSource.NONE, None)
        return GpuCap(GpuShare(gpu.uuid), CapSource.NONE, gpu.memory_mib)
    if gpu is None:
        return GpuCap(GpuShare(None, asked.fraction, asked.mib), request.source, None)
    if asked.mib is not None:
        if asked.mib > gpu.memory_mib:
            raise ConfigError(
                f"GPU memory cap {asked.mib} MiB exceeds the {gpu.name}'s {gpu.memory_mib} MiB"
            )
        share = GpuShare.of_mib(gpu.uuid, asked.mib, gpu.memory_mib)
    else:
        assert asked.fraction is not None  # checked above
        share = GpuShare.of_fraction(gpu.uuid, asked.fraction, gpu.memory_mib)
    return GpuCap(share, request.source, gpu.memory_mib)


def _not_enforced(cap: GpuCap, framework: str) -> GpuCap:
    """No GPU visible to the framework: the cap is kept for reports, and the log says so."""
    if cap.source is not CapSource.NONE:
        log.warning(
            "no GPU visible to %s: GPU memory cap (fraction=%s, mib=%s) is recorded "
            "but NOT enforced",
            framework,
            cap.share.fraction,
            cap.share.mib,
        )
    return replace(cap, enforced=False)


def apply_onnxruntime(cap: GpuCap, cuda: bool) -> GpuCap:
    """Whether onnxruntime holds the cap: only where its CUDA provider is installed (``cuda``,
    the ``onnxruntime-gpu`` build), a GPU is visible and a cap is in force; its sessions then
    run on the GPU, each with ``gpu_mem_limit`` (``backends/onnx.py``). Else the sessions run on
    its CPU provider and the cap is recorded, not enforced. The limit is per session, not per
    process: a process of one model is held to the cap, one of several to each model's budget
    (``gpu_memory_mib``) where it has one, to the cap where it has not."""
    if not cuda or cap.source is CapSource.NONE or cap.share.uuid is None:
        return _not_enforced(cap, "onnxruntime")
    if cap.share.mib is None:
        raise ConfigError(
            "a GPU memory fraction needs the GPU's size, but NVML did not report it; "
            "pass --gpu-memory-mib instead"
        )
    log.info("GPU memory cap enforced by onnxruntime's CUDA provider: %d MiB", cap.share.mib)
    return replace(cap, enforced=True)


def apply_tensorflow(cap: GpuCap) -> GpuCap:
    """Configure TensorFlow's visible GPUs with the cap; returns the cap with ``enforced`` set.

    Must run before TensorFlow initialises a GPU (before any op, model load or device query other
    than ``list_physical_devices``). This is the TF 2 form of TF Serving's
    ``--per_process_gpu_memory_fraction``: one logical device per GPU with ``memory_limit``.
    """
    # Finding the devices is where a host without a GPU gets cuInit's failure as an E-line.
    with framework_startup():
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return _not_enforced(cap, "TensorFlow")
    if cap.source is CapSource.NONE:
        # No cap: still stop TensorFlow from grabbing the whole card up front, or a second
        # process on the same GPU could not start at all.
        for device in gpus:
            tf.config.experimental.set_memory_growth(device, True)
        log.info("no GPU memory cap; memory growth enabled on %d GPU(s)", len(gpus))
        return replace(cap, enforced=False)
    # TensorFlow takes MiB; resolve_cap has already turned a fraction into them (mib_of).
    mib = cap.share.mib
    if mib is None:
        raise ConfigError(
            "a GPU memory fraction needs the GPU's size, but NVML did not report it; "
            "pass --gpu-memory-mib instead"
        )
    for device in gpus:
        tf.config.set_logical_device_configuration(
            device, [tf.config.LogicalDeviceConfiguration(memory_limit=mib)]
        )
    log.info("GPU memory cap enforced by TensorFlow: %d MiB on %d GPU(s)", mib, len(gpus))
    return replace(cap, enforced=True)


def apply_torch(cap: GpuCap) -> GpuCap:
    """Cap PyTorch's CUDA caching allocator on device 0; returns the cap with ``enforced`` set.

    torch takes the cap as a fraction of the card as *it* measures it, so an absolute MiB cap is
    converted against ``total_memory`` from torch itself rather than NVML's figure; a bare
    fraction needs no NVML at all. The cap covers tensors (the caching allocator), not the CUDA
    context (a few hundred MiB per process) that every process on the GPU also pays. Past the
    cap torch raises ``torch.cuda.OutOfMemoryError`` in this process only.

    Like ``apply_tensorflow`` it must run before the model loads; ``torch.cuda.is_available()``
    is called here, never at import time, so importing sharedserve creates no CUDA state.
    """
    with framework_startup():
        import torch

        cuda = torch.cuda.is_available()
    if not cuda:
        return _not_enforced(cap, "PyTorch")
    if cap.source is CapSource.NONE:
        # torch's caching allocator grows on demand, so without a cap nothing is reserved up
        # front and other processes can still start on the same GPU.
        log.info("no GPU memory cap; PyTorch allocates on demand")
        return replace(cap, enforced=False)
    properties = torch.cuda.get_device_properties(0)
    # torch measures the card in bytes; in whole MiB it is floor(bytes) for a fraction's MiB
    # and ceil(bytes) for a MiB cap's fraction, so that neither stands for more than the other.
    total_mib = properties.total_memory // _MIB
    asked = cap.share
    if asked.mib is not None:
        ceiling_mib = -(-properties.total_memory // _MIB)
        # NVML's figure, which resolve_cap checked the cap against, may exceed torch's.
        fraction = fraction_of(min(asked.mib, ceiling_mib), ceiling_mib)
        mib = asked.mib
    elif asked.fraction is not None:
        fraction = asked.fraction
        mib = mib_of(asked.fraction, total_mib)
    else:  # a source other than NONE always carries a figure; resolve_cap guarantees it
        raise ConfigError(f"GPU memory cap from {cap.source.value} has neither MiB nor fraction")
    torch.cuda.set_per_process_memory_fraction(fraction, device=0)
    log.info(
        "GPU memory cap enforced by PyTorch: %d MiB (%s of %d MiB) on %s",
        mib,
        fraction,
        total_mib,
        properties.name,
    )
    uuid = asked.uuid if asked.uuid is not None else f"GPU-{properties.uuid}"
    reported = asked.fraction if asked.fraction is not None else fraction
    return replace(
        cap,
        share=replace(asked, uuid=uuid, fraction=reported, mib=mib),
        total_mib=cap.total_mib if cap.total_mib is not None else total_mib,
        enforced=True,
    )
