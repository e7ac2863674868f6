"""The allocator: GPU shares for pods, through a kubelet device plugin that advertises N vGPUs
per physical GPU (``deviceplugin/``) or a DRA driver (``dra/``).

Importing this package does no work: gRPC, NVML and the generated APIs load only in the modules
that need them (the two transports and ``run``), never from the pure ones (``inventory``,
``placement``, ``allocation``, ``health_state``).
"""
