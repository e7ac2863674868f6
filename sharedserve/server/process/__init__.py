"""The model server process: ``run`` is ``sharedserve serve`` below its flags. A face of its
own, apart from ``sharedserve.server``'s, because importing it imports uvicorn and grpc."""

from sharedserve.server.process.run import run

__all__ = ["run"]
