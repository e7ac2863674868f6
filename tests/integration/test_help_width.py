"""Every command's ``--help`` as it reads in a terminal of 80 columns: no option name is cut.

A real ``sharedserve X --help`` process in a pseudo-terminal whose window is 80 columns wide
(and COLUMNS=80), as a user at a narrow terminal runs it: rich then lays the help out as for that
terminal, colours and all. Every name of every option, negative names (``--no-live``) included,
must start a row of its panel whole, nothing may be cut with an ellipsis, and no line may pass the
80 columns.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time

import pytest

from tests.support.cli_commands import COMMANDS, command_at
from tests.support.servers import SHAREDSERVE, clean_env

WIDTH = 80
# Colours and styles (SGR) and the other CSI sequences rich writes to a terminal.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A panel's row: the border, a "required" mark perhaps, then the option's name.
ROW_NAME = re.compile(r"^│\s+(?:\*\s+)?(-[-\w]+)")
GROUPS = [(), ("k8s",), ("models",)]


def help_in_terminal(path: tuple[str, ...], timeout: float = 60) -> str:
    """What ``sharedserve PATH --help`` writes to an 80-column terminal, without styles."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, WIDTH, 0, 0))
    env = clean_env(COLUMNS=str(WIDTH), TERM="xterm-256color")
    env.pop("TERMINAL_WIDTH", None)  # typer's own override of the width
    process = subprocess.Popen(
        [*SHAREDSERVE, *path, "--help"], stdin=child, stdout=child, stderr=child, env=env
    )
    os.close(child)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1)
            if not ready:
                continue
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the child's end closed
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(main)
        process.kill()
        process.wait()
    assert process.returncode in (0, -9), process.returncode
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


@pytest.mark.parametrize("path", [*GROUPS, *COMMANDS], ids=lambda p: " ".join(p) or "sharedserve")
def test_every_option_name_is_whole_at_80_columns(path: tuple[str, ...]) -> None:
    text = help_in_terminal(path)
    assert "Usage:" in text, text
    assert "…" not in text, text
    lines = text.splitlines()
    too_wide = [line for line in lines if len(line.rstrip()) > WIDTH]
    assert not too_wide, "\n".join(too_wide)
    starting_rows = {m.group(1) for line in lines if (m := ROW_NAME.match(line))}
    command = command_at(path)
    names = [
        name
        for param in command.params
        if type(param).__name__.endswith("Option") and not param.hidden
        for name in (*param.opts, *param.secondary_opts)
    ]
    names.append("--help")  # click adds it to every command, outside ``params``
    missing = [name for name in names if name not in starting_rows]
    assert not missing, f"not whole at the start of a row: {missing}\n{text}"
