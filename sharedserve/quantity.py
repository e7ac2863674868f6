"""Kubernetes resource quantities (``500m``, ``0.5``, ``2Gi``), read as the API server reads them.

Checked here, before anything reaches a cluster, because the API server's own messages arrive
late (at apply time) and one classic mistake is valid syntax: ``memory: 500m`` is half a byte.
"""

from __future__ import annotations

import re
from decimal import Decimal

from sharedserve.errors import ConfigError

__all__ = ["format_cpu", "parse_cpu", "parse_memory", "parse_quantity"]

# k8s.io/apimachinery/pkg/api/resource: <signedNumber><binarySI | decimalSI | decimalExponent>.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?"
)
_MULTIPLIERS = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_MILLI = Decimal("0.001")


def parse_quantity(text: str, flag: str) -> Decimal:
    """The quantity's value in base units (cores, bytes); ConfigError naming ``flag`` if invalid."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ConfigError(
            f"{flag} {text!r} is not a Kubernetes quantity (examples: 500m, 0.5, 2, 512Mi, 2Gi)"
        )
    suffix = match["suffix"] or ""
    number = Decimal(match["number"])
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * _MULTIPLIERS[suffix]


def parse_cpu(text: str, flag: str = "--cpu") -> Decimal:
    """CPU in cores; positive, at most millicore precision (the finest Kubernetes allows)."""
    cores = parse_quantity(text, flag)
    if cores <= 0:
        raise ConfigError(f"{flag} must be positive, got {text!r}")
    if cores % _MILLI != 0:
        raise ConfigError(f"{flag} {text!r} is finer than 1m (one millicore), the CPU precision")
    return cores


def parse_memory(text: str, flag: str = "--memory") -> Decimal:
    """Memory in bytes; positive and a whole number of bytes."""
    size = parse_quantity(text, flag)
    if size <= 0:
        raise ConfigError(f"{flag} must be positive, got {text!r}")
    if size % 1 != 0:
        # "m" is milli, not mebi: 500m of memory is half a byte.
        raise ConfigError(f"{flag} {text!r} is a fraction of a byte; did you mean Mi (mebibytes)?")
    return size


def format_cpu(cores: float, flag: str = "--cpu") -> str:
    """``cores`` as Kubernetes writes a CPU quantity: whole cores bare (``1``), else millicores
    (``500m``); ConfigError naming ``flag`` when not positive or finer than 1m."""
    # From the shortest repr, so 0.1 is 100m rather than the binary float's 100.000000000000005m.
    value = Decimal(str(cores))
    if not value.is_finite() or not value > 0:
        raise ConfigError(f"{flag} must be a positive number of cores, got {cores!r}")
    if value % _MILLI != 0:
        raise ConfigError(f"{flag} {cores!r} is finer than 1m (one millicore), the CPU precision")
    if value % 1 == 0:
        return str(int(value))
    return f"{int(value / _MILLI)}m"
