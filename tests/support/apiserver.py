"""A fake Kubernetes API server for the resource.k8s.io/v1 calls a DRA driver makes, over real
HTTP on loopback, so that the real ``kubernetes`` client talks to it.

Served: ResourceSlices (create, replace, delete, get, list with ``fieldSelector`` and equality
``labelSelector``) and ResourceClaims (get; the test puts them in with ``add_claim``). Anything
else is a 404 (405 on a served path) and is marked ``unexpected`` in the request log.

Played as the API server plays it: Status objects with the right code and reason; one
resourceVersion counter, bumped only by a write that changes something; ``generateName``;
``generation`` 1 on create and +1 when a replace changes the spec; ``resourceVersion`` and
``uid`` in a PUT are preconditions (stale: 409 Conflict), and a PUT without them is
unconditional, which ResourceSlice allows (``AllowUnconditionalUpdate`` is true in
pkg/registry/resource/resourceslice/strategy.go); a PUT of an absent slice is 404
(``AllowCreateOnUpdate`` is false); a bearer token other than ``TOKEN`` is 401.

Bodies are decoded and validated as the real server does it: see tests/support/apiserver_checks.py.
"""

from __future__ import annotations

import copy
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from tests.support.apiserver_checks import (
    API_VERSION,
    GROUP,
    ApiError,
    FieldError,
    Obj,
    allocated_claim,
    check_claim,
    check_preconditions,
    decode,
    invalid,
    not_found,
    slice_errors,
)

# Re-exported: tests import the claim helpers from here, next to FakeApiServer.
__all__ = ["TOKEN", "ApiError", "FakeApiServer", "Request", "allocated_claim", "check_claim"]

TOKEN = "sharedserve-fake-token"
# names.SimpleNameGenerator: five of these after generateName.
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_SELECTABLE: dict[str, Callable[[Obj], str]] = {
    "metadata.name": lambda o: o["metadata"]["name"],
    "spec.nodeName": lambda o: o["spec"].get("nodeName", ""),
    "spec.driver": lambda o: o["spec"]["driver"],
}


# -- the server --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    status: int
    unexpected: bool = False
    """Not an endpoint this fake serves: the driver called something it should not."""


class FakeApiServer:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.warnings: list[str] = []
        """Every Warning header sent (unknown fields dropped), in order."""
        self._slices: dict[str, Obj] = {}
        self._claims: dict[tuple[str, str], Obj] = {}
        self._version = 0
        self._failures: list[int] = []
        self._changed = threading.Condition()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> FakeApiServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.api = self  # type: ignore[attr-defined]
        serve = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="fake-apiserver", daemon=True
        )
        serve.start()
        self._server = server
        return self

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the fake API server first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def write_kubeconfig(self, path: Path) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- test controls ----------------------------------------------------------------------

    @property
    def slices(self) -> dict[str, Obj]:
        """A copy of the stored ResourceSlices by name."""
        with self._changed:
            return copy.deepcopy(self._slices)

    @property
    def unexpected(self) -> list[Request]:
        return [r for r in self.requests if r.unexpected]

    def add_claim(self, claim: Obj) -> Obj:
        """Store a new ResourceClaim (a full object, e.g. from ``allocated_claim``)."""
        key = (claim["metadata"]["namespace"], claim["metadata"]["name"])
        assert key not in self._claims, f"claim {key} already exists: use set_claim"
        return self.set_claim(claim)

    def set_claim(self, claim: Obj) -> Obj:
        """Store or replace a ResourceClaim; the server's metadata fields are filled in."""
        check_claim(claim)
        stored = copy.deepcopy(claim)
        with self._changed:
            meta = stored["metadata"]
            old = self._claims.get((meta["namespace"], meta["name"]))
            since = old["metadata"]["creationTimestamp"] if old else _now()
            meta["creationTimestamp"] = meta.get("creationTimestamp", since)
            meta["resourceVersion"] = self._bump()
            self._claims[(meta["namespace"], meta["name"])] = stored
            return copy.deepcopy(stored)

    def delete_claim(self, namespace: str, name: str) -> None:
        with self._changed:
            del self._claims[(namespace, name)]

    def wipe_slices(self, node: str, driver: str | None = None) -> list[str]:
        """What a starting kubelet does (DeleteCollection of the node's slices, of one driver
        after its plugin is gone for a while); the names deleted."""
        with self._changed:
            gone = [
                n
                for n, s in self._slices.items()
                if s["spec"].get("nodeName") == node and driver in (None, s["spec"]["driver"])
            ]
            for name in gone:
                del self._slices[name]
            if gone:
                self._bump()
            return gone

    def fail_next(self, count: int, status: int = 500) -> None:
        """The next ``count`` requests, whatever they are, answer ``status`` with a Status."""
        with self._changed:
            self._failures += [status] * count

    def wait_for_slice(self, predicate: Callable[[Obj], bool], timeout: float = 10) -> Obj:
        """The first stored slice (by name) that satisfies ``predicate``, once one does."""
        found = self.wait_until(
            lambda s: [o for _, o in sorted(s.items()) if predicate(o)], timeout
        )
        return copy.deepcopy(found[0])

    def wait_until(self, predicate: Callable[[dict[str, Obj]], Any], timeout: float = 10) -> Any:
        """Wait until ``predicate(slices by name)`` is truthy; its value."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (result := predicate(self._slices)):
                left = deadline - time.monotonic()
                if left <= 0:
                    log = "\n".join(
                        f"  {r.method} {r.path}?{r.query} -> {r.status}"
                        for r in self.requests[-20:]
                    )
                    raise AssertionError(
                        f"no match within {timeout} s; slices: {sorted(self._slices)}; "
                        f"last requests:\n{log or '  none'}"
                    )
                self._changed.wait(left)
            return result

    # -- serving ----------------------------------------------------------------------------

    def _bump(self) -> str:
        self._version += 1
        self._changed.notify_all()
        return str(self._version)

    def serve(
        self, method: str, target: str, headers: Any, body: bytes
    ) -> tuple[int, Obj, list[str]]:
        """(status, JSON body, warnings) for one request."""
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        warnings: list[str] = []
        unexpected = False
        try:
            with self._changed:
                failure = self._failures.pop(0) if self._failures else None
            if failure is not None:
                raise ApiError(failure, f"injected failure {failure} (fail_next)")
            if headers.get("Authorization") != f"Bearer {TOKEN}":
                raise ApiError(401, "Unauthorized")
            kind = headers.get("Content-Type", "application/json").split(";")[0].strip()
            if body and kind != "application/json":
                raise ApiError(415, f"the body of the request was in an unknown format - {kind}")
            code, answer, warnings = self._route(method, url.path, query, body)
        except ApiError as e:
            code, answer, unexpected = e.code, e.status(), e.unexpected
        except Exception as e:  # a gap in this fake: answered, and loud in the request log
            gap = ApiError(500, f"fake API server failed: {e!r}", unexpected=True)
            code, answer, unexpected = 500, gap.status(), True
        with self._changed:
            self.requests.append(Request(method, url.path, url.query, code, unexpected))
            self.warnings += warnings
        return code, answer, warnings

    def _route(
        self, method: str, path: str, query: dict[str, str], body: bytes
    ) -> tuple[int, Obj, list[str]]:
        parts = path.strip("/").split("/")
        prefix = ["apis", GROUP, "v1"]
        served: dict[str, Callable[[], tuple[int, Obj, list[str]]]] = {}
        if parts[:4] == [*prefix, "resourceslices"] and len(parts) <= 5:
            if len(parts) == 4:
                served = {
                    "GET": lambda: (200, self._list(query), []),
                    "POST": lambda: self._create(query, body),
                }
            else:
                name = parts[4]
                served = {
                    "GET": lambda: (200, self._get(name), []),
                    "PUT": lambda: self._replace(name, query, body),
                    "DELETE": lambda: (200, self._delete(name, query, body), []),
                }
        elif (
            len(parts) == 7
            and parts[:4] == [*prefix, "namespaces"]
            and parts[5] == "resourceclaims"
        ):
            served = {"GET": lambda: (200, self._claim(parts[4], parts[6]), [])}
        if not served:
            raise ApiError(404, "the server could not find the requested resource", unexpected=True)
        if method not in served:
            raise ApiError(
                405, f"{method} is not supported here by the fake API server", unexpected=True
            )
        if query.get("watch") in ("true", "1"):
            raise ApiError(400, "watch is not supported by the fake API server", unexpected=True)
        return served[method]()

    def _get(self, name: str) -> Obj:
        with self._changed:
            if name not in self._slices:
                raise not_found("resourceslices", name)
            return _typed(self._slices[name])

    def _claim(self, namespace: str, name: str) -> Obj:
        with self._changed:
            claim = self._claims.get((namespace, name))
            if claim is None:
                raise not_found("resourceclaims", name)
            return copy.deepcopy(claim)

    def _list(self, query: dict[str, str]) -> Obj:
        tests = [_requirement(t, _SELECTABLE, "field") for t in _terms(query.get("fieldSelector"))]
        tests += [_requirement(t, None, "label") for t in _terms(query.get("labelSelector"))]
        with self._changed:
            items = [
                copy.deepcopy(s)
                for _, s in sorted(self._slices.items())
                if all(t(s) for t in tests)
            ]
            meta = {"resourceVersion": str(self._version)}
        return {
            "apiVersion": API_VERSION,
            "kind": "ResourceSliceList",
            "metadata": meta,
            "items": items,
        }

    def _create(self, query: dict[str, str], body: bytes) -> tuple[int, Obj, list[str]]:
        obj, warnings = decode(body, "ResourceSlice", query.get("fieldValidation"))
        meta = obj.setdefault("metadata", {})
        if "resourceVersion" in meta:
            text = "resourceVersion should not be set on objects to be created"
            raise ApiError(500, f"Internal error occurred: {text}")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"][:58] + "".join(random.choices(_NAME_CHARS, k=5))
        meta.pop("namespace", None)
        meta |= {"uid": str(uuid.uuid4()), "creationTimestamp": _now(), "generation": 1}
        errors = slice_errors(obj)
        if not meta.get("name"):
            errors.insert(
                0, FieldError("Required", "metadata.name", None, "name or generateName is required")
            )
        if errors:
            raise invalid("ResourceSlice", meta.get("name", ""), errors)
        with self._changed:
            if meta["name"] in self._slices:
                name = meta["name"]
                details = {"name": name, "group": GROUP, "kind": "resourceslices"}
                text = f'resourceslices.{GROUP} "{name}" already exists'
                raise ApiError(409, text, details, reason="AlreadyExists")
            if query.get("dryRun") != "All":
                meta["resourceVersion"] = self._bump()
                self._slices[meta["name"]] = copy.deepcopy(obj)
        return 201, obj, warnings

    def _replace(self, name: str, query: dict[str, str], body: bytes) -> tuple[int, Obj, list[str]]:
        obj, warnings = decode(body, "ResourceSlice", query.get("fieldValidation"))
        meta = obj.setdefault("metadata", {})
        if meta.get("name") != name:
            given = meta.get("name", "")
            text = f"the name of the object ({given}) does not match the name on the URL ({name})"
            raise ApiError(400, text)
        with self._changed:
            old = self._slices.get(name)
            if old is None:
                raise not_found("resourceslices", name)
            check_preconditions(name, meta, old["metadata"])
            errors = slice_errors(obj, old)
            if errors:
                raise invalid("ResourceSlice", name, errors)
            meta.pop("namespace", None)
            kept = {k: old["metadata"][k] for k in ("uid", "creationTimestamp", "resourceVersion")}
            meta |= kept | {
                "generation": old["metadata"]["generation"] + (obj["spec"] != old["spec"])
            }
            if obj != old and query.get("dryRun") != "All":
                meta["resourceVersion"] = self._bump()
                self._slices[name] = copy.deepcopy(obj)
        return 200, obj, warnings

    def _delete(self, name: str, query: dict[str, str], body: bytes) -> Obj:
        try:
            options = json.loads(body) if body else {}
        except ValueError as e:
            raise ApiError(400, f"DeleteOptions: {e}") from None
        with self._changed:
            old = self._slices.get(name)
            if old is None:
                raise not_found("resourceslices", name)
            check_preconditions(name, options.get("preconditions") or {}, old["metadata"])
            if query.get("dryRun") != "All":
                del self._slices[name]
                self._bump()
            return _typed(old)


def _typed(obj: Obj) -> Obj:
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice", **copy.deepcopy(obj)}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _terms(selector: str | None) -> list[str]:
    return [t.strip() for t in (selector or "").split(",") if t.strip()]


def _requirement(
    term: str, fields: dict[str, Callable[[Obj], str]] | None, what: str
) -> Callable[[Obj], bool]:
    """One ``key=value``, ``key==value``, ``key!=value`` (or, for labels, ``key``, ``!key``)."""
    if "(" in term or " in " in term or " notin " in term:
        raise ApiError(
            400, f"set-based {what} selectors are not supported by the fake", unexpected=True
        )
    match = re.fullmatch(r"(!?)([^=!]+)(?:(==|=|!=)(.*))?", term)
    if match is None or (fields is not None and match[3] is None):
        raise ApiError(400, f"invalid {what} selector: {term!r}")
    negate, key, op, value = match[1] == "!", match[2], match[3], match[4]
    if fields is not None and key not in fields:
        raise ApiError(400, f'"{key}" is not a known field selector: only "{", ".join(fields)}"')

    def get(obj: Obj) -> str | None:
        if fields is not None:
            return fields[key](obj)
        labels: dict[str, str] = obj["metadata"].get("labels", {})
        return labels.get(key)

    if op is None:
        return lambda o: (get(o) is None) == negate
    return lambda o: (get(o) == value) == (op != "!=")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
    # Headers and body go out in two writes; with Nagle's algorithm the body then waits for the
    # client's delayed ACK of the headers, 40 ms on Linux, which a real API server never adds.
    disable_nagle_algorithm = True

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        api: FakeApiServer = self.server.api  # type: ignore[attr-defined]
        code, answer, warnings = api.serve(self.command, self.path, self.headers, body)
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for warning in warnings:
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request log is FakeApiServer.requests
