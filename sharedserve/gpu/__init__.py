"""GPU discovery behind one protocol. The only package that imports ``pynvml``."""

from sharedserve.gpu.backend import GpuBackend, GpuInfo, open_gpu_backend

__all__ = ["GpuBackend", "GpuInfo", "open_gpu_backend"]
