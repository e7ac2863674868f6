"""Walk a README's ``sh`` blocks top to bottom, in one directory, as a reader copies them.

Each block is cut into simple commands (continuations joined, comments dropped, split at ``;``,
``|``, ``&``, ``&&``, ``||`` and the shell's loop words). A command is either run (the caller's
``run``, for the cheap ones it names) or checked where it stands in the walk:

- ``sharedserve`` commands: every subcommand is one the CLI has, every flag one its command
  takes (the parameters its ``--help`` lists), and every path it reads (a value with a ``/`` or a
  ``.yaml``/``.json`` name, other than an output flag's) is there: in the checkout (tracked
  files), in the walk's directory, or written by an earlier command. A spec or fleet file found
  is opened and its ``model:`` and ``profile:`` paths (relative to it) are held to the same rule.
  What a command not run writes (``--out``, ``--targets-out``, ``--log-dir``, a ``models build``'s
  ``OUT/NAME``) counts as written from then on.
- ``make T``: the Makefile has target T. ``cp``, ``mkdir``, ``bash SCRIPT``: what they read is
  there; what they write counts as written. ``curl``, ``kubectl`` and the rest are not looked at.

So a block moved above the one that builds what it reads is a problem (that path is there
neither in the checkout nor in the walk yet), and so is a block naming a flag that is gone.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
import yaml

__all__ = ["Invocation", "Walk", "sh_blocks"]

_SEPARATORS = {";", "|", "&", "&&", "||", "(", ")", ";;"}
# Shell words that open or close a compound command: what follows them is a command.
_KEYWORDS = {"do", "done", "then", "else", "fi", "until", "while", "if", "elif", "!", "{", "}"}
_WRITES = {"--out", "--targets-out", "--log-dir"}
_SPEC_KEYS = {"model", "profile"}


def sh_blocks(text: str) -> list[tuple[int, str]]:
    """Each ```` ```sh ```` block's body with the README line its first command is on."""
    return [
        (text.count("\n", 0, m.start()) + 2, m.group(1))
        for m in re.finditer(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)
    ]


def _commands(body: str, first: int) -> Iterator[tuple[int, list[str]]]:
    """(README line, argv with redirections kept) of each simple command in a block."""
    number = first
    for logical in re.split(r"(?<!\\)\n", body):
        line, number = number, number + logical.count("\n") + 1
        lexer = shlex.shlex(logical.replace("\\\n", " "), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True  # words are split at blanks only, '=' and '/' kept
        argv: list[str] = []
        for token in [*lexer, ";"]:
            if token not in _SEPARATORS:
                argv.append(token)
                continue
            while argv and argv[0] in _KEYWORDS:
                argv.pop(0)
            if argv and argv[0] != "for":  # `for x in a b c`: words, not a command
                yield line, argv
            argv = []


@dataclass
class Invocation:
    """A ``sharedserve`` command line, parsed as its CLI parses it."""

    argv: list[str]
    command: tuple[str, ...]
    """The subcommand's path: ``("models", "build")``."""
    positionals: list[str]
    options: dict[str, str]
    """Each option given, by the flag as written: ``{"--out": "models/"}`` (flags: ``""``)."""


Runner = Callable[[Invocation], None]


@dataclass
class Walk:
    """One reader's session: ``cwd`` is the directory every block runs in, ``checkout`` the
    repository the README belongs to; ``run`` runs the commands named in ``runnable`` (checked
    first like any other), the rest are only checked."""

    cwd: Path
    checkout: Path
    run: Runner | None = None
    runnable: frozenset[tuple[str, ...]] = frozenset()
    problems: list[str] = field(default_factory=list)
    ran: list[Invocation] = field(default_factory=list)
    written: set[str] = field(default_factory=set)
    _tracked: set[str] | None = None

    def readme(self, text: str) -> list[str]:
        for first, body in sh_blocks(text):
            self.block(first, body)
        return self.problems

    def block(self, first: int, body: str) -> None:
        for line, argv in _commands(body, first):
            self.command(line, argv)

    def command(self, line: int, argv: list[str]) -> None:
        words, redirected = _redirections(argv)
        if not words:
            return
        where = f"README line {line}, `{' '.join(words)}`"
        program, args = words[0], words[1:]
        plain = [a for a in args if not a.startswith("-")]
        if program == "sharedserve":
            self._sharedserve(where, args)
        elif program == "make":
            targets = set(
                re.findall(r"^([\w.-]+):", (self.checkout / "Makefile").read_text(), re.M)
            )
            for target in plain:
                if target not in targets:
                    self.problems.append(f"{where}: the Makefile has no target {target!r}")
        elif program == "cp" and len(plain) >= 2:
            for source in plain[:-1]:
                self._read(where, source)
            self._write(plain[-1])
        elif program == "mkdir":
            for made in plain:
                self._write(made)
        elif program in ("bash", "sh") and plain:
            self._read(where, plain[0])
        for target in redirected:
            self._write(target)

    def _sharedserve(self, where: str, args: list[str]) -> None:
        parsed = _parse(args)
        if isinstance(parsed, str):
            self.problems.append(f"{where}: {parsed}")
            return
        for flag, value in parsed.options.items():
            if flag not in _WRITES and _path_like(value):
                self._read(where, value, spec=flag in ("--spec", "--fleet"))
        for value in parsed.positionals:
            if _path_like(value):
                self._read(where, value)
        if parsed.command in self.runnable and self.run is not None:
            self.run(parsed)
            self.ran.append(parsed)
            return
        if parsed.command == ("models", "build"):
            # Its --out is where OUT/NAME go, not a model: only those count as written.
            out = parsed.options.get("--out", ".")
            for name in parsed.positionals:
                self._write(posixpath.join(out, name))
            return
        for flag, value in parsed.options.items():
            if flag in _WRITES:
                self._write(value)

    def _read(self, where: str, path: str, *, spec: bool = False) -> None:
        if "$" in path or path.startswith("/"):
            return  # a loop variable's path, or the machine's own (/dev/null)
        norm = posixpath.normpath(path)
        if not self.present(norm):
            self.problems.append(
                f"{where}: reads {path}, which is neither in the checkout nor made by a block "
                "above it"
            )
            return
        source = self.cwd / norm if (self.cwd / norm).is_file() else self.checkout / norm
        if spec and source.is_file():
            for ref in _spec_paths(yaml.safe_load(source.read_text())):
                joined = posixpath.normpath(posixpath.join(posixpath.dirname(norm), ref))
                self._read(f"{where} ({path})", joined)

    def _write(self, path: str) -> None:
        if "$" not in path and not path.startswith("/"):
            self.written.add(posixpath.normpath(path))

    def present(self, norm: str) -> bool:
        """``norm`` is in the walk's directory, tracked in the checkout, or written above."""
        if (self.cwd / norm).exists() or self._in_checkout(norm):
            return True
        return any(norm == w or norm.startswith(w + "/") for w in self.written)

    def _in_checkout(self, norm: str) -> bool:
        # Tracked files only: a developer's own models/ in the checkout is no reader's.
        if not (self.checkout / ".git").exists():
            return (self.checkout / norm).exists()  # not a git checkout: what is there
        if self._tracked is None:
            listed = subprocess.run(
                ["git", "ls-files"], cwd=self.checkout, capture_output=True, text=True, check=True
            ).stdout.splitlines()
            self._tracked = set(listed)
            for name in listed:
                parts = name.split("/")
                self._tracked.update("/".join(parts[:i]) for i in range(1, len(parts)))
        return norm in self._tracked


def _redirections(argv: list[str]) -> tuple[list[str], list[str]]:
    words, targets = [], []
    tokens = iter(argv)
    for token in tokens:
        if token in (">", ">>"):
            targets.append(next(tokens, ""))
        elif token == "<":
            next(tokens, None)
        else:
            words.append(token)
    return words, targets


def _path_like(value: str) -> bool:
    # A path the README names: a slash, or a spec's name; not a URL or an image (REGISTRY/x:tag).
    return bool(value) and ":" not in value and ("/" in value or value.endswith(_SPEC_SUFFIXES))


_SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def _spec_paths(spec: Any) -> Iterator[str]:
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key in _SPEC_KEYS and isinstance(value, str):
                yield value
            else:
                yield from _spec_paths(value)
    elif isinstance(spec, list):
        for item in spec:
            yield from _spec_paths(item)


def _parse(args: list[str]) -> Invocation | str:
    """``args`` as the CLI's own command tree takes them, or what it would refuse."""
    from sharedserve.cli import app

    root: Any = typer.main.get_command(app)
    command = root
    path: list[str] = []
    rest = list(args)
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        if name not in command.commands:
            return f"`sharedserve {' '.join([*path, name])}` is no command"
        command, path = command.commands[name], [*path, name]
    takes_value = _options(command)
    if command.context_settings.get("ignore_unknown_options"):
        # pack and bench hand the flags they do not know to each replica's `serve`.
        takes_value = {**_options(root.commands["serve"]), **takes_value}
    invocation = Invocation(list(args), tuple(path), [], {})
    while rest:
        word = rest.pop(0)
        if not word.startswith("-") or word == "-":
            invocation.positionals.append(word)
            continue
        flag, equals, value = word.partition("=")
        if flag not in takes_value:
            return f"`sharedserve {' '.join(path)}` has no flag {flag}"
        if takes_value[flag] and not equals:
            value = rest.pop(0) if rest else ""
        invocation.options[flag] = value
    return invocation


def _options(command: Any) -> dict[str, bool]:
    """The options ``command``'s --help lists, and whether each takes a value (typer vendors
    click: by click's attribute names rather than its classes)."""
    return {
        opt: not getattr(param, "is_flag", False) and not getattr(param, "count", False)
        for param in command.params
        if param.param_type_name == "option"
        for opt in (*param.opts, *param.secondary_opts)
    }
