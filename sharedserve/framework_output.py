"""What TensorFlow and PyTorch print on their own: quiet unless ``--log-level debug``.

Each framework has a switch for its native logging, read once when it is imported
(``QUIET_ENV``); the CLI sets them before any import, and only where the user has not. They do not
reach everything: TensorFlow writes its start-up lines (the oneDNN notice, "Could not find cuda
drivers", cuInit's failure on a host without a GPU) through the copies of absl bundled in its
shared libraries, from their static initialisers or before its own level takes effect, so no
switch hides them. ``framework_startup`` hides what is written to the process's stderr while a
framework is imported and finds its devices; sharedserve then says in one line of its own
whether a GPU is there and the cap enforced.

Stdlib only, and inert until the CLI calls ``hide_startup_output``: a library user of sharedserve
sees the frameworks exactly as they print. ``framework_needed`` turns a framework that is not
installed into one line that says what to install (a ``ConfigError``), not an import traceback;
``require_installed`` says it before any work, without importing the framework.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator

from sharedserve.enums import Framework
from sharedserve.errors import ConfigError

__all__ = [
    "FRAMEWORK_LOGGERS",
    "QUIET_ENV",
    "framework_needed",
    "framework_startup",
    "hide_startup_output",
    "require_installed",
]

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
}


@contextlib.contextmanager
def framework_needed(framework: str) -> Iterator[None]:
    """Around an import of ``framework`` ("torch" or "tensorflow"): if it is not installed,
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


def require_installed(framework: Framework) -> None:
    """``framework_needed``'s ConfigError now, if ``framework`` is not installed, found without
    importing it (milliseconds): a server or pack says so before anything else it would print
    (the GPU it looked for), not seconds later."""
    key = "torch" if framework is Framework.TORCH else "tensorflow"
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
