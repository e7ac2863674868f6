"""The checks of the fake API server (tests/support/apiserver.py) that need no HTTP: decoding a
body as the API server decodes it, the validation it does, and its Status answers.

Bodies are checked against the Kubernetes 1.36 strict JSON schemas of ``kubernetes-validate``,
with the real server's outcomes: a value of the wrong type is 400 BadRequest (a decoding
error); an unknown field is dropped with a ``Warning`` header (kept in ``warnings``), or is 400
with ``fieldValidation=Strict``; a missing required field is 422 Invalid. Then a few checks of
pkg/apis/resource/validation/validation.go that no schema expresses, 422 Invalid:

- ``ValidateResourceSlice``: metadata.name a DNS subdomain.
- ``validateResourceSliceSpec``: driver and pool names; exactly one of nodeName, nodeSelector,
  allNodes, perDeviceNodeSelection; at most 128 devices (64 when any has taints or
  consumesCounters); device names DNS labels (``validateDeviceName``) and unique; on update,
  driver, nodeName and pool.name immutable.
- ``validateResourcePool``: resourceSliceCount > 0, generation >= 0.
- ``validateSingleAllocatableDeviceCapacity``: requestPolicy only with allowMultipleAllocations.
- ``validateRequestPolicy`` and below: validValues or validRange, not both; a default, which is
  one of validValues or within [min, max] and a multiple of step from min (as max must be);
  nothing above the capacity's value.

``check_claim`` and ``allocated_claim`` give a test ResourceClaims the API server could hold.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource

from sharedserve.errors import ConfigError
from sharedserve.quantity import parse_quantity

__all__ = [
    "API_VERSION",
    "GROUP",
    "ApiError",
    "FieldError",
    "Obj",
    "allocated_claim",
    "check_claim",
    "check_preconditions",
    "decode",
    "invalid",
    "not_found",
    "schema_errors",
    "slice_errors",
]

Obj = dict[str, Any]
GROUP = "resource.k8s.io"
API_VERSION = f"{GROUP}/v1"
SCHEMAS = "v1.36.0-local-strict"
_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}
_REASONS |= {405: "MethodNotAllowed", 409: "Conflict", 415: "UnsupportedMediaType"}
_REASONS |= {422: "Invalid", 429: "TooManyRequests", 500: "InternalError"}
_REASONS |= {503: "ServiceUnavailable", 504: "Timeout"}
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = re.compile(_LABEL)
_DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class ApiError(Exception):
    """An error answer: its Status object (``reason`` defaults to the code's usual one)."""

    def __init__(
        self,
        code: int,
        message: str,
        details: Obj | None = None,
        unexpected: bool = False,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.message, self.details, self.unexpected = code, message, details, unexpected
        self.reason = reason or _REASONS.get(code, "Unknown")

    def status(self) -> Obj:
        status: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        status |= {"message": self.message, "reason": self.reason}
        if self.details is not None:
            status["details"] = self.details
        return status | {"code": self.code}


def not_found(resource: str, name: str) -> ApiError:
    details = {"name": name, "group": GROUP, "kind": resource}
    return ApiError(404, f'{resource}.{GROUP} "{name}" not found', details)


@dataclass(frozen=True)
class FieldError:
    """One field.Error: its type (Invalid, Required, Duplicate, Forbidden, TooMany)."""

    type: str
    field: str
    value: Any = None
    detail: str = ""

    def message(self) -> str:
        if self.type in ("Invalid", "Duplicate"):
            text = f"{self.type} value: {json.dumps(self.value)}"
            return f"{text}: {self.detail}" if self.detail else text
        if self.type == "Required":
            return "Required value" + (f": {self.detail}" if self.detail else "")
        if self.type == "TooLong":
            return f"Too long: {self.detail} bytes"
        if self.type == "TooMany":
            return f"Too many: {self.value}: must have at most {self.detail} items"
        return f"{self.type}: {self.detail}"


def invalid(kind: str, name: str, errors: list[FieldError]) -> ApiError:
    texts = [f"{e.field}: {e.message()}" for e in errors]
    summary = texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"
    causes = [
        {"reason": f"FieldValue{e.type}", "message": e.message(), "field": e.field} for e in errors
    ]
    details = {"name": name, "group": GROUP, "kind": kind, "causes": causes}
    return ApiError(422, f'{kind}.{GROUP} "{name}" is invalid: {summary}', details)


# -- decoding: the strict schemas --------------------------------------------------------------


@cache
def _validator(kind: str) -> Draft202012Validator:
    folder = resources.files("kubernetes_validate") / "kubernetes-json-schema" / SCHEMAS
    schema = json.loads((folder / f"{kind.lower()}-resource-v1.json").read_text())
    definitions = json.loads((folder / "_definitions.json").read_text())
    registry: Registry[Any] = Registry().with_resources(
        [(d["$id"], Resource.from_contents(d)) for d in (schema, definitions)]
    )
    return Draft202012Validator(schema, registry=registry)


def _path(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


def schema_errors(obj: Obj, kind: str) -> Iterator[ValidationError]:
    errors: Iterator[ValidationError] = _validator(kind).iter_errors(obj)
    return errors


def decode(body: bytes, kind: str, field_validation: str | None) -> tuple[Obj, list[str]]:
    """The object in ``body``, unknown fields dropped, and the warnings; ApiError as the API
    server decodes it."""
    cannot = f'{kind} in version "v1" cannot be handled as a {kind}'
    try:
        obj = json.loads(body or b"null")
    except ValueError as e:
        raise ApiError(400, f"{cannot}: {e}") from None
    if not isinstance(obj, dict):
        raise ApiError(400, f"{cannot}: the body is not a JSON object")
    for key, want in (("apiVersion", API_VERSION), ("kind", kind)):
        if obj.setdefault(key, want) != want:
            raise ApiError(400, f"the {key} in the data ({obj[key]}) does not match {want}")
    unknown: list[str] = []
    for error in list(schema_errors(obj, kind)):
        if error.validator == "additionalProperties":
            known = error.schema.get("properties", {})
            for key in sorted(set(error.instance) - set(known)):
                unknown.append(_path([*error.absolute_path, key]))
                del error.instance[key]
    warnings = [f'unknown field "{u}"' for u in unknown]
    if unknown and field_validation == "Strict":
        raise ApiError(400, f"{cannot}: strict decoding error: {', '.join(warnings)}")
    required: list[FieldError] = []
    for error in schema_errors(obj, kind):
        where = list(error.absolute_path)
        if error.validator == "required":
            missing = [k for k in error.validator_value if k not in error.instance]
            required += [FieldError("Required", _path([*where, k])) for k in missing]
        else:
            raise ApiError(400, f"{cannot}: {_path(where)}: {error.message}")
    if required:
        name = obj.get("metadata", {}).get("name", "")
        raise invalid(kind, name, required)
    return _prune(obj), ([] if field_validation == "Ignore" else warnings)


def _prune(value: Any) -> Any:
    """Nulls are absent fields, as Go decodes them."""
    if isinstance(value, dict):
        return {k: _prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


# -- validation.go -----------------------------------------------------------------------------


def _quantity(value: Any, where: str) -> Decimal:
    try:
        return parse_quantity(str(value), where)
    except ConfigError as e:
        raise ApiError(400, f"quantities must match the regular expression: {e}") from None


def _dns(value: Any, where: str, label: bool = False) -> list[FieldError]:
    pattern, limit = (_DNS_LABEL, 63) if label else (_DNS_SUBDOMAIN, 253)
    if isinstance(value, str) and len(value) <= limit and pattern.fullmatch(value):
        return []
    what = "RFC 1123 label" if label else "RFC 1123 subdomain"
    detail = f"a lowercase {what} of at most {limit} characters must consist of lower case "
    detail += "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric"
    return [FieldError("Invalid", where, value, detail + f" (regex {pattern.pattern!r})")]


def slice_errors(obj: Obj, old: Obj | None = None) -> list[FieldError]:
    meta, spec = obj.get("metadata", {}), obj["spec"]
    errors = _dns(meta.get("name", ""), "metadata.name")
    driver = spec["driver"]
    if len(driver) > 63:  # ValidateCSIDriverName
        errors.append(FieldError("TooLong", "spec.driver", driver, "may not be more than 63"))
    errors += _dns(driver.lower(), "spec.driver")
    pool = spec["pool"]
    errors += [e for part in pool["name"].split("/") for e in _dns(part, "spec.pool.name")]
    if pool["resourceSliceCount"] <= 0:
        count = pool["resourceSliceCount"]
        errors.append(FieldError("Invalid", "spec.pool.resourceSliceCount", count, "must be > 0"))
    if pool["generation"] < 0:
        errors.append(FieldError("Invalid", "spec.pool.generation", pool["generation"], ">= 0"))
    if old is not None:
        for where, new_value, old_value in (
            ("spec.pool.name", pool["name"], old["spec"]["pool"]["name"]),
            ("spec.driver", driver, old["spec"]["driver"]),
            ("spec.nodeName", spec.get("nodeName"), old["spec"].get("nodeName")),
        ):
            if new_value != old_value:
                errors.append(FieldError("Invalid", where, new_value, "field is immutable"))
    scopes = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
    scope = [s for s in scopes if s in spec]
    if len(scope) != 1:
        text = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`"
        errors.append(FieldError("Required" if not scope else "Invalid", "spec", scope, text))
    if "nodeName" in spec:
        errors += _dns(spec["nodeName"], "spec.nodeName")
    devices = spec.get("devices", [])
    limit = 64 if any("taints" in d or "consumesCounters" in d for d in devices) else 128
    if len(devices) > limit:
        errors.append(FieldError("TooMany", "spec.devices", len(devices), str(limit)))
    seen: set[str] = set()
    for i, device in enumerate(devices):
        where = f"spec.devices[{i}]"
        errors += _dns(device["name"], f"{where}.name", label=True)
        if device["name"] in seen:
            errors.append(FieldError("Duplicate", f"{where}.name", device["name"]))
        seen.add(device["name"])
        for key, capacity in device.get("capacity", {}).items():
            policy, at = capacity.get("requestPolicy"), f"{where}.capacity[{key}].requestPolicy"
            if policy is not None and not device.get("allowMultipleAllocations"):
                errors.append(
                    FieldError("Forbidden", at, None, "allowMultipleAllocations must be true")
                )
            elif policy is not None:
                errors += _request_policy(_quantity(capacity["value"], at), policy, at)
    return errors


def _request_policy(value: Decimal, policy: Obj, at: str) -> list[FieldError]:
    values: list[Any] = policy.get("validValues", [])
    span: Obj | None = policy.get("validRange")
    if values and span is not None:
        text = 'exactly one policy can be specified, cannot specify "validValues" and "validRange"'
        return [FieldError("Forbidden", at, None, text + " at the same time")]
    if not values and span is None:
        return []
    if "default" not in policy:
        which = "validValues" if values else "validRange"
        return [FieldError("Required", f"{at}.default", None, f"required when {which} is defined")]
    default = _quantity(policy["default"], f"{at}.default")
    errors: list[FieldError] = []

    def check(bad: bool, where: str, shown: Any, text: str) -> None:
        if bad:
            errors.append(FieldError("Invalid", f"{at}.{where}", str(shown), text))

    if values:
        numbers = [_quantity(v, f"{at}.validValues") for v in values]
        check(numbers != sorted(numbers), "validValues", values, "values must be sorted ascending")
        check(len(set(numbers)) != len(numbers), "validValues", values, "duplicate values")
        check(max(numbers) > value, "validValues", values, "option is larger than capacity value")
        check(default not in numbers, "validValues", policy["default"], "default is not valid")
        return errors
    assert span is not None
    low = _quantity(span["min"], f"{at}.validRange.min")
    check(low > value, "validRange.min", span["min"], "min is larger than capacity value")
    check(default < low, "validRange.min", policy["default"], "default is less than min")
    high = _quantity(span["max"], f"{at}.validRange.max") if "max" in span else None
    if high is not None:
        check(low > high, "validRange.max", span["min"], "min is larger than max")
        check(high > value, "validRange.max", span["max"], "max is larger than capacity value")
        check(default > high, "validRange.max", policy["default"], "default is more than max")
    if "step" in span:
        step = _quantity(span["step"], f"{at}.validRange.step")
        check(low + step > value, "validRange.step", span["step"], "one step is over capacity")
        for shown, number in ((policy["default"], default), (span.get("max"), high)):
            if number is not None and step > 0:
                off = (number - low) % step != 0
                check(off, "validRange.step", shown, "value is not a multiple of step from min")
    return errors


def check_claim(claim: Obj) -> None:
    """AssertionError unless the API server could hold ``claim`` (schema and the checks of
    validateDeviceRequestAllocationResult the test could get wrong)."""
    problems = [
        f"{_path(e.absolute_path)}: {e.message}" for e in schema_errors(claim, "ResourceClaim")
    ]
    meta = claim.get("metadata", {})
    problems += [f"metadata.{k} is required" for k in ("name", "namespace", "uid") if k not in meta]
    requests = {r["name"] for r in claim.get("spec", {}).get("devices", {}).get("requests", [])}
    allocation = claim.get("status", {}).get("allocation", {})
    for i, result in enumerate(allocation.get("devices", {}).get("results", [])):
        where = f"status.allocation.devices.results[{i}]"
        if result.get("request", "").split("/")[0] not in requests:
            problems.append(
                f"{where}.request {result.get('request')!r} is not in {sorted(requests)}"
            )
        errors = _dns(result.get("device"), f"{where}.device", label=True)
        errors += _dns(str(result.get("driver")).lower(), f"{where}.driver")
        problems += [f"{e.field}: {e.message()}" for e in errors]
        if "shareID" in result and not _UUID.fullmatch(str(result["shareID"])):
            problems.append(f"{where}.shareID {result['shareID']!r} is not a lowercase UUID")
    assert not problems, "not a ResourceClaim the API server would hold:\n" + "\n".join(problems)


def allocated_claim(
    namespace: str,
    name: str,
    uid: str,
    results: list[Obj],
    *,
    node: str | None = None,
    device_class: str = "gpu.sharedserve.io",
    reserved_for: list[Obj] | None = None,
) -> Obj:
    """A ResourceClaim as the scheduler leaves it: one request per distinct ``request`` of
    ``results`` (``consumedCapacity`` becomes its capacity request, with the API server's
    defaults allocationMode ExactCount and a count), allocated to ``results``."""
    requests: dict[str, Obj] = {}
    for result in results:
        exactly = requests.setdefault(result["request"], {"deviceClassName": device_class})
        exactly |= {"allocationMode": "ExactCount", "count": exactly.get("count", 0) + 1}
        if "consumedCapacity" in result:
            exactly["capacity"] = {"requests": dict(result["consumedCapacity"])}
    allocation: Obj = {"devices": {"results": copy.deepcopy(results)}}
    if node is not None:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        allocation["nodeSelector"] = {"nodeSelectorTerms": [term]}
    status: Obj = {"allocation": allocation}
    if reserved_for:
        status["reservedFor"] = copy.deepcopy(reserved_for)
    claim: Obj = {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"devices": {"requests": [{"name": r, "exactly": e} for r, e in requests.items()]}},
        "status": status,
    }
    check_claim(claim)
    return claim


def check_preconditions(name: str, given: Obj, meta: Obj) -> None:
    """409 Conflict unless the ``uid`` and ``resourceVersion`` given (if any) are those stored."""
    for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        if given.get(key) and given[key] != meta[key]:
            detail = f"Precondition failed: {label} in precondition: {given[key]}, "
            detail += f"{label} in object meta: {meta[key]}"
            if key == "resourceVersion":
                detail = "the object has been modified; please apply your changes to the latest "
                detail += "version and try again"
            details = {"name": name, "group": GROUP, "kind": "resourceslices"}
            text = f'Operation cannot be fulfilled on resourceslices.{GROUP} "{name}": {detail}'
            raise ApiError(409, text, details)
