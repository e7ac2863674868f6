"""The files a user writes or a command writes for another (fleet files, pack specs, plan.json)
as typed documents: one pydantic dataclass per format reads it, writes it and publishes its JSON
Schema (``sharedserve schema``), so the reader, the writer and an editor's checks cannot drift.
Pure.

pydantic checks; this module says what it found in the user's terms. Its own messages name a
type (``Input should be a valid integer``) and a location tuple; ours name the file, the place
(``models[2] (fraud)``) and the key, say what the key must be and what it got, and suggest the
closest key for a misspelt one, as the readers did before they were typed.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError, PydanticOmit, core_schema

from sharedserve.errors import ConfigError

__all__ = [
    "DOCUMENT",
    "INTERNAL",
    "Must",
    "Positive",
    "PositiveWhole",
    "Text",
    "dump",
    "json_schema",
    "number",
    "parse",
    "read_document",
    "refuse",
    "repeated",
    "unknown_key",
    "whole",
]

T = TypeVar("T")

DOCUMENT = ConfigDict(extra="forbid", use_attribute_docstrings=True)
"""Every document type's pydantic config: unknown keys are refused (a misspelt optional key
would otherwise be ignored without a word), and field docstrings become the schema's
descriptions, which an editor shows on hover."""


class _Internal:
    """pydantic's ``SkipJsonSchema``, as a marker mypy takes as a value."""

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> Any:
        raise PydanticOmit


INTERNAL = _Internal()
"""``Annotated[T, INTERNAL]``: a field the program sets, never the file: left out of the schema
and refused in a file."""

# libyaml's safe loader where PyYAML was built with it (its wheels are): a fleet file of 10,000
# models took the pure-Python one six seconds.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclasses.dataclass(frozen=True)
class Must:
    """A key's rule, in words: ``Annotated[int, Field(gt=0), Must("a positive whole number",
    ...)]``. ``Field`` puts the bound in the schema; ``Must`` checks the raw value first, so a
    YAML ``yes`` or ``1.5`` is refused for a whole number rather than coerced, and the error says
    ``must be a positive whole number, got 1.5``. None passes to the type (optional keys)."""

    what: str
    ok: Callable[[Any], bool]

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return core_schema.no_info_before_validator_function(self._check, handler(source))

    def _check(self, value: Any) -> Any:
        if value is not None and not self.ok(value):
            raise PydanticCustomError(
                "must", "must be {what}, got {got}", {"what": self.what, "got": repr(value)}
            )
        return value


def number(value: Any) -> bool:
    """A YAML or JSON number, not a boolean (bool is an int subclass): for a ``Must``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def whole(value: Any) -> bool:
    """A YAML or JSON whole number, not a boolean: for a ``Must``."""
    return isinstance(value, int) and not isinstance(value, bool)


def repeated(names: Iterable[str]) -> list[str]:
    """The names given more than once, sorted (a document's names must be unique); counted
    once each, not by list.count: a fleet has thousands."""
    return sorted(n for n, times in Counter(names).items() if times > 1)


Positive = Annotated[float, Field(gt=0), Must("a positive number", lambda v: number(v) and v > 0)]
PositiveWhole = Annotated[
    int, Field(gt=0), Must("a positive whole number", lambda v: whole(v) and v > 0)
]
Text = Annotated[
    str, Field(min_length=1), Must("a non-empty string", lambda v: isinstance(v, str) and v != "")
]
"""A non-empty string (a YAML number is refused, not turned into one)."""


def refuse(message: str) -> PydanticCustomError:
    """A rule over several keys broken (raised in a ``model_validator``): ``message`` is shown
    after the place, as it is."""
    return PydanticCustomError("rule", message)


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(kind: Any) -> TypeAdapter[Any]:
    """One per type: building one walks the whole type."""
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def read_document(path: Path, what: str) -> Any:
    """A YAML file parsed (JSON by its ``.json`` suffix; JSON is YAML too, but its errors read
    better from a JSON parser); ConfigError says which ``what`` could not be read and why."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {path} is not UTF-8 text: {e}") from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except ValueError as e:
            raise ConfigError(f"{what} {path} is not valid JSON: {e}") from e
        except RecursionError:  # the parser recurses per level; libyaml has its own bound
            raise ConfigError(f"{what} {path} is nested too deeply to be read") from None
    try:
        return yaml.load(text, Loader=_LOADER)  # a safe loader, C or Python
    except yaml.YAMLError as e:
        raise ConfigError(f"{what} {path} is not valid YAML: {e}") from e


def unknown_key(key: object, known: tuple[str, ...], where: str) -> ConfigError:
    """The error for a key not in ``known``, with the closest known one when there is one."""
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return ConfigError(f"{where}: unknown key {key!r}{hint}")


def parse(kind: type[T], data: Any, *, where: str, context: dict[str, Any] | None = None) -> T:
    """``data`` (a parsed file) checked into ``kind``; ConfigError names ``where`` (the file),
    the place and the key of the first fault."""
    if isinstance(data, dict):
        for key in _internal(kind):
            if key in data:
                raise unknown_key(key, _known(kind), where)
    try:
        checked: T = _adapter(kind).validate_python(data, context=context)
        return checked
    except ValidationError as e:
        errors = e.errors()
        # A misspelt key first: the required key it was meant to be is missing because of it.
        unknown = [x for x in errors if x["type"] in _UNKNOWN]
        raise ConfigError(_message(kind, data, (unknown or errors)[0], where)) from None


def dump(value: Any, *, drop_none: bool = False, by_alias: bool = False) -> Any:
    """A document as plain JSON values, keys in their fields' order (the order written);
    ``by_alias``: under the keys a file spells (a chart's camelCase values)."""
    return _adapter(type(value)).dump_python(
        value, mode="json", exclude_none=drop_none, by_alias=by_alias
    )


def json_schema(kind: type[Any], title: str) -> dict[str, Any]:
    """``kind``'s JSON Schema (draft 2020-12, what pydantic writes and editors read)."""
    schema = _tidy(_adapter(kind).json_schema())
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title} | {
        k: v for k, v in schema.items() if k != "title"
    }


def _tidy(node: Any) -> Any:
    """Descriptions on one line, in Markdown's backticks (an editor shows them on hover); no
    titles made up from field names (``Peak Qps``)."""
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "description" and isinstance(value, str):
            out[key] = " ".join(value.split()).replace("``", "`")
        elif key == "properties" and isinstance(value, dict):
            out[key] = {
                name: _tidy({k: v for k, v in prop.items() if k != "title"})
                for name, prop in value.items()
            }
        else:
            out[key] = _tidy(value)
    return out


# -- errors in the user's terms ----------------------------------------------------------------

_UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument")


def _hints(kind: Any) -> dict[str, Any]:
    return (
        typing.get_type_hints(kind, include_extras=True) if dataclasses.is_dataclass(kind) else {}
    )


def _internal(kind: Any) -> tuple[str, ...]:
    return tuple(k for k, hint in _hints(kind).items() if _marked(hint, _Internal))


def _known(kind: Any) -> tuple[str, ...]:
    hidden = _internal(kind)
    return tuple(f.name for f in dataclasses.fields(kind) if f.name not in hidden)


def _marked(hint: Any, marker: type) -> Any:
    """The first ``marker`` instance in ``hint``'s Annotated metadata, through unions."""
    if typing.get_origin(hint) is Annotated:
        for extra in hint.__metadata__:
            if isinstance(extra, marker):
                return extra
        return _marked(typing.get_args(hint)[0], marker)
    for arg in typing.get_args(hint):
        found = _marked(arg, marker)
        if found is not None:
            return found
    return None


def _document_in(hint: Any) -> Any:
    """The dataclass a field holds (itself, or in a list, tuple or union), if any."""
    # A class only: an Annotated's metadata (a Must(...)) is a dataclass instance, not a document.
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        found = _document_in(arg)
        if found is not None:
            return found
    return None


def _what(hint: Any) -> str | None:
    """What a key must be, in words, where its type says: its ``Must``, or a mapping."""
    must = _marked(hint, Must)
    if must is not None:
        return str(must.what)
    return "a mapping" if _document_in(hint) is not None else None


def _message(kind: Any, data: Any, error: Any, where: str) -> str:
    """``where: models[2] (fraud): replicas must be a positive whole number, got 0``."""
    loc = [part for part in error["loc"] if not str(part).startswith("function-")]
    places, node, owner, i = [], data, kind, 0
    key: str | None = None
    while i < len(loc):
        part = loc[i]
        hint = _hints(owner).get(str(part))
        inner = None if hint is None else _document_in(hint)
        if isinstance(part, str) and (i == len(loc) - 1 or inner is None):
            key = part  # a key's own value (a list's items included) is at fault
            break
        child = node.get(part) if isinstance(node, dict) else None
        owner = inner
        if i + 1 < len(loc) and isinstance(loc[i + 1], int):
            index = loc[i + 1]
            child = child[index] if isinstance(child, list) and index < len(child) else None
            name = child.get("name") if isinstance(child, dict) else None
            places.append(f"{part}[{index}]" + (f" ({name})" if isinstance(name, str) else ""))
            i += 2
        else:
            places.append(str(part))
            i += 1
        node = child
    place = ": ".join([where, *places])
    kind_of_error = error["type"]
    if kind_of_error in _UNKNOWN and key is not None:
        return unknown_key(key, _known(owner), place).message
    if key is None:  # the place itself: an entry that is not a mapping, or a rule over keys
        if kind_of_error == "rule":
            return f"{place}: {error['msg']}"
        if not places:
            return f"{place}: expected a mapping, got {error['input']!r}"
        return f"{place} must be a mapping, got {error['input']!r}"
    what = _what(_hints(owner).get(key))
    if kind_of_error == "missing":
        return f"{place}: {key} " + (
            "is required" if what is None else f"must be {what} (required)"
        )
    if kind_of_error == "must":
        return f"{place}: {key} {error['msg']}"
    if kind_of_error == "rule" or what is None:  # a rule's words, or pydantic's for a plain type
        return f"{place}: {key}: {error['msg']}"
    return f"{place}: {key} must be {what}, got {error['input']!r}"
