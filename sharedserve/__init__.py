"""sharedserve: pack many inference models onto one GPU, and measure how many is too many.

Importing this package does no work: no framework import, no CUDA context, no environment reads.
"""

from sharedserve.errors import SharedServeError

__all__ = ["SharedServeError", "__version__"]

__version__ = "0.1.0"
