"""sharedserve's copy of TF Serving's ``ModelServerConfig`` (``tfserving/api/``) is upstream's,
field for field: every message and enum of the copied files has the names, numbers, types and
cardinality that TF Serving's own generated module (tensorflow-serving-api, a dev extra) has, so
protobuf's text format reads a TF Serving user's config file exactly as TF Serving does."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor, text_format
from tensorflow_serving.config import model_server_config_pb2 as upstream

from sharedserve.server.protos.tfserving import model_server_config_pb2 as ours

pytestmark = [pytest.mark.tensorflow]

DATA = Path(__file__).resolve().parents[2] / "data" / "tfserving_config"


def shape(message: descriptor.Descriptor) -> dict[str, object]:
    """A message's fields, nested types and enums, without the package."""
    return {
        "fields": sorted(
            (
                f.name,
                f.number,
                f.type,
                f.is_repeated,
                f.has_presence,
                f.message_type and f.message_type.name,
            )
            for f in message.fields
        ),
        "oneofs": sorted((o.name, sorted(f.name for f in o.fields)) for o in message.oneofs),
        "nested": {m.name: shape(m) for m in message.nested_types},
        "enums": {e.name: sorted((v.name, v.number) for v in e.values) for e in message.enum_types},
    }


def messages(file: descriptor.FileDescriptor) -> dict[str, object]:
    """Every message reachable from ``file``'s, through the files it imports (but protobuf's)."""
    seen: dict[str, object] = {}

    def walk(f: descriptor.FileDescriptor) -> None:
        if f.package == "google.protobuf":
            return
        for name, message in f.message_types_by_name.items():
            seen[name] = shape(message)
        for name, enum in f.enum_types_by_name.items():
            seen[name] = sorted((v.name, v.number) for v in enum.values)
        for dependency in f.dependencies:
            walk(dependency)

    walk(file)
    return seen


def test_every_message_is_upstreams_field_for_field() -> None:
    copied = messages(ours.DESCRIPTOR)
    assert {"ModelServerConfig", "ModelConfig", "LoggingConfig", "SamplingConfig"} <= set(copied)
    assert copied == messages(upstream.DESCRIPTOR)


def test_tf_servings_documented_config_reads_the_same_into_both() -> None:
    for example in sorted(DATA.glob("*.config")):
        text = example.read_text()
        theirs = text_format.Parse(text, upstream.ModelServerConfig())
        mine = text_format.Parse(text, ours.ModelServerConfig())
        assert mine.SerializeToString(deterministic=True) == theirs.SerializeToString(
            deterministic=True
        ), example.name
