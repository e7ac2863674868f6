"""The vGPU allocator: a kubelet device plugin that advertises N vGPUs per physical GPU.

Importing this package does no work: gRPC, NVML and the generated API load only in the modules
that need them (``plugin``, ``kubelet``, ``run``), never from the pure ones (``inventory``,
``placement``, ``allocation``, ``health_state``).
"""
