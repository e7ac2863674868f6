"""A minimal TF Serving look-alike over real HTTP on loopback, with a latency law we choose.

It answers ``GET /v1/models/NAME/metadata`` with a one-input signature and
``POST /v1/models/NAME:predict`` after sleeping the latency the law gives the n-th request, so
a benchmark's percentiles can be checked against known values. With no latency it is the no-op
endpoint the load-generator capacity benchmark drives. HTTP/1.1 keep-alive, asyncio streams, no
framework: as little server cost as Python allows.

Run alone: ``python -m tests.support.stub_server --port 8501 [--base-ms 5 --slow-ms 50
--slow-every 50]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import threading
from collections.abc import Callable

__all__ = ["StubServer", "two_level_law"]

_METADATA = json.dumps(
    {
        "model_spec": {"name": "stub", "signature_name": "", "version": "1"},
        "metadata": {
            "signature_def": {
                "signature_def": {
                    "serving_default": {
                        "inputs": {
                            "x": {
                                "dtype": "DT_FLOAT",
                                "tensor_shape": {
                                    "dim": [{"size": "-1", "name": ""}, {"size": "4", "name": ""}],
                                    "unknown_rank": False,
                                },
                                "name": "x:0",
                            }
                        },
                        "outputs": {},
                        "method_name": "tensorflow/serving/predict",
                    }
                }
            }
        },
    }
).encode()
_PREDICTION = b'{"outputs": [[0.0]]}'


def two_level_law(base_ms: float, slow_ms: float, slow_every: int) -> Callable[[int], float]:
    """Request n takes ``slow_ms`` when ``n % slow_every == 0``, else ``base_ms`` (seconds out).

    With ``slow_every`` = 50, 2% of requests are slow: P50 is ``base_ms`` and P99 ``slow_ms``.
    """
    return lambda n: (slow_ms if n % slow_every == 0 else base_ms) / 1000.0


def _response(status: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class StubServer:
    """Serve on ``127.0.0.1:port`` in a background thread (``start``/``stop``) or."""

    def __init__(self, port: int, law: Callable[[int], float] | None = None) -> None:
        self.port = port
        self._law = law
        self._counter = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = 0
                for line in lines[1:]:
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                if length:
                    await reader.readexactly(length)
                if method == "GET" and path.endswith("/metadata"):
                    writer.write(_response("200 OK", _METADATA))
                elif method == "POST" and path.endswith(":predict"):
                    if self._law is not None:
                        await asyncio.sleep(self._law(next(self._counter)))
                    writer.write(_response("200 OK", _PREDICTION))
                else:
                    writer.write(_response("404 Not Found", b'{"error": "not found"}'))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def serve(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self._ready.set()
        async with server:
            await self._stopping.wait()

    def start(self) -> None:
        def run() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self.serve())
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=run, name="stub-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("stub server did not start")

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--base-ms", type=float, default=0.0)
    parser.add_argument("--slow-ms", type=float, default=0.0)
    parser.add_argument("--slow-every", type=int, default=50)
    args = parser.parse_args()
    law = None
    if args.base_ms or args.slow_ms:
        law = two_level_law(args.base_ms, args.slow_ms, args.slow_every)
    asyncio.run(StubServer(args.port, law).serve())


if __name__ == "__main__":
    main()
