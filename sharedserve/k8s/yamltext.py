"""A small YAML writer for manifests: block style, keys in the order given.

Why not PyYAML: core sharedserve has no YAML dependency, and manifests need only mappings,
sequences, strings, integers, booleans and null. Output that users read and commit should be
YAML rather than JSON, so this writes block style and quotes a string whenever a YAML 1.1 or 1.2
reader could take it for anything but that string (``"500m"``, ``"8501"``, ``"true"``, ``"on"``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["dump", "dump_all"]

# Plain (unquoted) only for strings that start with a letter, "_", "/" or dashes and a letter
# ("--model") and hold no character with a meaning in YAML (":" only inside, never before a
# space or at the end); everything else is double-quoted, JSON escapes being valid YAML ones.
_PLAIN = re.compile(r"(?:[A-Za-z_/]|-+[A-Za-z])(?:[A-Za-z0-9_./-]|:(?!$))*")
# YAML 1.1 reads these as booleans or null (compared lower-cased; quoting an extra is harmless).
_RESERVED = frozenset({"y", "yes", "n", "no", "true", "false", "on", "off", "null"})
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        # Manifests hold names, paths and image references, all ASCII; anything else is a bug
        # upstream, not something to escape quietly.
        if not _PRINTABLE_ASCII.fullmatch(value):
            raise ValueError(f"not printable ASCII: {value!r}")
        if _PLAIN.fullmatch(value) and value.lower() not in _RESERVED:
            return value
        return json.dumps(value)
    raise TypeError(f"cannot write {type(value).__name__} as a manifest value: {value!r}")


def _is_block(value: Any) -> bool:
    """A non-empty mapping or sequence, written on lines of its own."""
    return isinstance(value, Mapping | list | tuple) and len(value) > 0


def _inline(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, list | tuple):
        return "[]"
    return _scalar(value)


def _lines(value: Mapping[str, Any] | Sequence[Any], indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"mapping keys must be strings, got {key!r}")
            if _is_block(item):
                lines.append(f"{pad}{_scalar(key)}:")
                lines += _lines(item, indent + 2)
            else:
                lines.append(f"{pad}{_scalar(key)}: {_inline(item)}")
        return lines
    for item in value:
        if _is_block(item):
            nested = _lines(item, indent + 2)
            # The item's first line carries the dash; the rest stay aligned under it.
            nested[0] = f"{pad}- {nested[0][indent + 2 :]}"
            lines += nested
        else:
            lines.append(f"{pad}- {_inline(item)}")
    return lines


def dump(document: Mapping[str, Any]) -> str:
    """One YAML document (no ``---``), ending in a newline."""
    if not document:
        return "{}\n"
    return "\n".join(_lines(document, 0)) + "\n"


def dump_all(documents: Sequence[Mapping[str, Any]]) -> str:
    """Several documents, separated by ``---`` as ``kubectl apply -f`` reads them."""
    return "---\n".join(dump(d) for d in documents)
