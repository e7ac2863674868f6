"""What TensorFlow and PyTorch print on their own: quiet unless ``--log-level debug``.

Each framework has a switch for its native logging, read once when it is imported
(``QUIET_ENV``); the CLI sets them before any import, and only where the user has not. They do not
reach everything: TensorFlow writes its start-up lines (the oneDNN notice, "Could not find cuda
drivers", cuInit's failure on a host without a GPU) through the copies of absl bundled in its
shared libraries, from their static initialisers or before its own level takes effect, so no
switch hides them. ``framework_startup`` hides what is written to the process's stderr while a
framework is imported and finds its devices; sharedserve then says in one line of its own
whether a GPU is there and the cap enforced.

PyTorch deprecates TorchScript, the format sharedserve builds and serves torch models in, and
warns (a ``FutureWarning`` since 2.14) on every script, save and load.
``route_upstream_deprecations`` turns those warnings into one line of sharedserve's log per
process, with where to read more.

Stdlib only, and inert until the CLI calls ``hide_startup_output`` and
``route_upstream_deprecations``: a library user of sharedserve sees the frameworks exactly as
they print. ``framework_needed`` turns a framework that is not
installed into one line that says what to install (a ``ConfigError``), not an import traceback;
``require_installed`` says it before any work, without importing the framework.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib.metadata
import importlib.util
import logging
import os
import re
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import TextIO

from sharedserve.enums import Framework
from sharedserve.errors import ConfigError

__all__ = [
    "FRAMEWORK_LOGGERS",
    "QUIET_ENV",
    "framework_needed",
    "framework_startup",
    "hide_startup_output",
    "keep_triton_out",
    "require_installed",
    "route_upstream_deprecations",
]

log = logging.getLogger(__name__)

QUIET_ENV = {
    # TensorFlow's C++ logging: 2 drops INFO and WARNING, keeps ERROR and FATAL.
    "TF_CPP_MIN_LOG_LEVEL": "2",
    # PyTorch's C++ logging (c10), the same cut: e.g. NNPACK's "Unsupported hardware" warning.
    "TORCH_CPP_LOG_LEVEL": "ERROR",
}
"""Environment switches, read by each framework when imported, that quiet its native logging."""

FRAMEWORK_LOGGERS = ("absl", "tensorflow")
"""Python loggers through which the frameworks report routine steps at INFO."""


_INSTALL = {
    # framework: (the top-level modules it brings, what needs it, its name, the extra to install)
    "torch": (("torch",), "TorchScript models", "PyTorch", "torch"),
    "tensorflow": (("tensorflow", "keras"), "SavedModels", "TensorFlow", "tensorflow"),
    "onnx": (("onnxruntime", "onnx"), "ONNX models", "onnxruntime", "onnx"),
    "export": (("torch",), "torch.export models", "PyTorch", "torch"),
}
_KEYS = {
    Framework.TENSORFLOW: "tensorflow",
    Framework.TORCH: "torch",
    Framework.ONNX: "onnx",
    Framework.EXPORT: "export",
}


@contextlib.contextmanager
def framework_needed(framework: str) -> Iterator[None]:
    """Around an import of ``framework`` ("torch", "tensorflow", "onnx" or "export", which is
    torch too): if it is not installed,
    a ``ConfigError`` naming the extra to install, e.g. "TorchScript models need PyTorch: pip
    install 'sharedserve[torch]'". A module missing *inside* an installed framework (one of its
    own dependencies) is not this case and propagates as it is.
    """
    modules = _INSTALL[framework][0]
    try:
        yield
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] not in modules:
            raise
        raise ConfigError(_not_installed(framework)) from e


def keep_triton_out() -> None:
    """Before torch reads a ``torch.export`` file: make ``import triton`` fail in this process,
    unless it is imported already. torch's export loader imports its compiler stack, which
    imports triton where it is installed; triton's native library crashes the process
    (SIGSEGV) when TensorFlow's is loaded before it, as in a server of both. Serving neither
    compiles nor needs triton: a program runs torch's own kernels, and an AOTInductor package
    carries its compiled ones. (Imported first, triton lets TensorFlow load after it.)"""
    if "triton" not in sys.modules:
        sys.modules["triton"] = None  # type: ignore[assignment]  # import fails: not installed
        # torch then warns, once, that it cannot count the flops of triton kernels: none run.
        logging.getLogger("torch.utils.flop_counter").setLevel(logging.ERROR)
        log.debug(
            "triton kept out of this process: it is not needed to serve, and crashes it "
            "beside TensorFlow"
        )


def require_installed(framework: Framework) -> None:
    """``framework_needed``'s ConfigError now, if ``framework`` is not installed, found without
    importing it (milliseconds): a server or pack says so before anything else it would print
    (the GPU it looked for), not seconds later."""
    key = _KEYS[framework]
    try:
        found = importlib.util.find_spec(_INSTALL[key][0][0]) is not None
    except ValueError:  # imported already, in a form without a spec: it is there
        found = True
    if not found:
        raise ConfigError(_not_installed(key))


def _not_installed(framework: str) -> str:
    _, needs, name, extra = _INSTALL[framework]
    return f"{needs} need {name}, which is not installed: pip install 'sharedserve[{extra}]'"


class _Switch:
    hidden = False


_switch = _Switch()


def hide_startup_output(hidden: bool) -> None:
    """Whether ``framework_startup`` hides what the frameworks print (the CLI: unless debug)."""
    _switch.hidden = hidden


@contextlib.contextmanager
def framework_startup() -> Iterator[None]:
    """Around a framework's import and device discovery: its output is hidden if so set.

    The process's stderr (file descriptor 2, which native code writes to) goes to a temporary
    file meanwhile. Kept only for the block: nothing of sharedserve's own may log inside it. If
    the block raises, what was hidden is printed after all, since it may say why. A fatal signal
    inside it (a framework aborting) still reaches the real stderr, as a Python traceback.
    Call only while no other thread writes to stderr (start-up, before the servers start).
    """
    if not _switch.hidden:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    # One the user turned on is theirs to point; it then writes into the sink meanwhile.
    own_faulthandler = not faulthandler.is_enabled()
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        if own_faulthandler:
            faulthandler.enable(file=saved, all_threads=True)
        failed = True
        try:
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            if own_faulthandler:
                faulthandler.disable()
            os.close(saved)
            if failed:
                sink.seek(0)
                with open(2, "wb", closefd=False) as stderr:
                    stderr.write(sink.read())


TORCHSCRIPT_DOCS = "https://docs.pytorch.org/docs/stable/jit.html"
"""Where PyTorch says that TorchScript is deprecated, and what it recommends instead."""

# torch.jit.script, .save and .load warn with this message: a FutureWarning from torch 2.14, a
# DeprecationWarning (hidden by Python's default filters) before it. Matched from the start.
_TORCHSCRIPT_DEPRECATED = re.compile(r"`torch\.jit\.\w+` is deprecated")


class _DeprecationRouter:
    """``warnings.showwarning`` that turns TorchScript's deprecation into one log line per
    process and passes every other warning on as it was (and that one too with debug)."""

    def __init__(self, shown: Callable[..., None]) -> None:
        self.shown = shown
        self._lock = threading.Lock()
        self._said = False

    def __call__(  # noqa: PLR0917 - warnings.showwarning's signature
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        said_by_torch = _TORCHSCRIPT_DEPRECATED.match(str(message))
        if said_by_torch is None or not issubclass(category, (FutureWarning, DeprecationWarning)):
            self.shown(message, category, filename, lineno, file, line)
            return
        with self._lock:
            said, self._said = self._said, True
        if not said:
            log.info(
                "TorchScript is deprecated upstream (PyTorch %s: %s); sharedserve builds and "
                "serves TorchScript models as before. Read more: %s",
                _torch_version(),
                said_by_torch.group(),
                TORCHSCRIPT_DOCS,
            )
        if not _switch.hidden:  # --log-level debug: the framework as it prints, too
            self.shown(message, category, filename, lineno, file, line)


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # torch from a source tree, say
        return "installed"


def route_upstream_deprecations() -> None:
    """From now on in this process, PyTorch's warnings that TorchScript is deprecated are one
    INFO line of the log (the first time), not a ``FutureWarning`` on the terminal at every
    build, serve and load; any other warning is shown as before. Idempotent."""
    for category in (FutureWarning, DeprecationWarning):
        # "default": shown (to the router) once per place in torch that warns, whatever filter
        # was there before; DeprecationWarning included, so that torch before 2.14 says so too.
        warnings.filterwarnings(
            "default", message=_TORCHSCRIPT_DEPRECATED.pattern, category=category
        )
    if not isinstance(warnings.showwarning, _DeprecationRouter):
        warnings.showwarning = _DeprecationRouter(warnings.showwarning)
