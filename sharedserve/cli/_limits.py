"""``serve``'s limits on requests and connections, and its stop, kept beside its module (the
README's limits table says the same)."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = [
    "PANEL_CONNECTIONS",
    "PANEL_REQUESTS",
    "BodyTimeout",
    "DrainDelay",
    "GrpcMaxMessageBytes",
    "HeaderTimeout",
    "KeepAliveTimeout",
    "MaxArrivingBytes",
    "MaxBodyBytes",
    "MaxConnections",
    "MaxDecodingBytes",
    "MaxHeaderBytes",
    "MaxInflightPerModel",
    "MaxRequestElements",
    "ShutdownGrace",
]

# serve --help's panels for these (cli/_help.py).
PANEL_REQUESTS = "Request limits"
PANEL_CONNECTIONS = "Connections and shutdown"

MaxBodyBytes = Annotated[
    int,
    typer.Option(
        help="Largest REST request body in bytes; larger gets HTTP 413.",
        rich_help_panel=PANEL_REQUESTS,
    ),
]

GrpcMaxMessageBytes = Annotated[
    int,
    typer.Option(
        help="Largest gRPC message received or sent, in bytes; more gets RESOURCE_EXHAUSTED. "
        "grpcio copies each message whole on the server's event loop, and REST requests, "
        "health probes included, wait meanwhile: 76-82 ms at the default on 2 cores. Raise it "
        "for larger batches, knowing the probe waits longer.",
        rich_help_panel=PANEL_REQUESTS,
    ),
]

MaxRequestElements = Annotated[
    int | None,
    typer.Option(
        help="Most elements a request's tensors may hold, counted from their shapes before "
        "anything is allocated; more gets 413 / RESOURCE_EXHAUSTED.",
        show_default="--max-body-bytes / 2, what a full JSON body can carry",
        rich_help_panel=PANEL_REQUESTS,
    ),
]

MaxInflightPerModel = Annotated[
    int,
    typer.Option(
        help="Requests of one model queued or running at most, unless its model file sets "
        "max_inflight; more get 503 / RESOURCE_EXHAUSTED at once, naming the model.",
        rich_help_panel=PANEL_REQUESTS,
    ),
]

MaxDecodingBytes = Annotated[
    int | None,
    typer.Option(
        help="Request-body bytes decoded from JSON at once; decoding takes ~18x a body's size "
        "in memory, so this bounds a burst of large bodies. A body that finds no room waits up "
        "to 10 s, then gets 503.",
        show_default="--max-body-bytes",
        rich_help_panel=PANEL_REQUESTS,
    ),
]

MaxArrivingBytes = Annotated[
    int | None,
    typer.Option(
        help="Bytes held at once by request bodies still arriving, over all connections; a "
        "body's memory grows with what arrived, and one that would pass this gets 503 at once, "
        "so slow clients declaring large bodies cannot fill memory.",
        show_default="4 x --max-body-bytes",
        rich_help_panel=PANEL_REQUESTS,
    ),
]

MaxHeaderBytes = Annotated[
    int,
    typer.Option(
        help="Bytes of a REST request's line and headers at most; more gets 431 and a close.",
        show_default=True,
        rich_help_panel=PANEL_REQUESTS,
    ),
]

DrainDelay = Annotated[
    float,
    typer.Option(
        help="Seconds after SIGTERM that requests are still served while readiness answers "
        "not-ready, for the endpoints to be removed; 0 where the pod's preStop hook waits.",
        show_default=True,
        rich_help_panel=PANEL_CONNECTIONS,
    ),
]

ShutdownGrace = Annotated[
    float,
    typer.Option(
        help="Seconds from SIGTERM to exit at most (drain delay included): listeners close, "
        "in-flight requests finish, what is left then is cut. Keep it under the pod's "
        "terminationGracePeriodSeconds.",
        show_default=True,
        rich_help_panel=PANEL_CONNECTIONS,
    ),
]

KeepAliveTimeout = Annotated[
    float,
    typer.Option(
        help="Seconds a connection may sit idle between requests (REST and gRPC); longer than "
        "the 60 s of the proxies usually in front, as nginx's.",
        show_default=True,
        rich_help_panel=PANEL_CONNECTIONS,
    ),
]

HeaderTimeout = Annotated[
    float,
    typer.Option(
        help="Seconds a request's line and headers (gRPC: its connection preface) may take to "
        "arrive; then 408, or a close if nothing came.",
        show_default=True,
        rich_help_panel=PANEL_CONNECTIONS,
    ),
]

BodyTimeout = Annotated[
    float,
    typer.Option(
        help="Longest pause in seconds between two reads of a request body; then 408.",
        show_default=True,
        rich_help_panel=PANEL_CONNECTIONS,
    ),
]

MaxConnections = Annotated[
    int,
    typer.Option(
        help="Open connections per API at most; past it REST answers 503 and closes, gRPC "
        "closes the connection.",
        show_default=True,
        rich_help_panel=PANEL_CONNECTIONS,
    ),
]
