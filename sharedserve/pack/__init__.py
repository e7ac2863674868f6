"""The local packer: N capped model servers on one host, supervised (``sharedserve pack``)."""

from sharedserve.pack.prepare import check_pack
from sharedserve.pack.probe import client_tls
from sharedserve.pack.supervisor import Pack, PackInterrupted
from sharedserve.pack.targets import Target, read_targets, write_targets

__all__ = [
    "Pack",
    "PackInterrupted",
    "Target",
    "check_pack",
    "client_tls",
    "read_targets",
    "write_targets",
]
