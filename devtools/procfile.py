"""The root Procfile, read as a platform reads it: `name: command` lines, commands run by a shell.

The production smoke test and the benchmarks start processes from here, so what they measure
is the recipe production runs, not a copy of it.
"""

from __future__ import annotations

from pathlib import Path

PROCFILE = Path(__file__).resolve().parent.parent / "Procfile"


def procfile_commands(path: Path = PROCFILE) -> dict[str, str]:
    """Process name -> command line, in file order; blank lines and comments skipped."""
    commands: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, command = line.partition(":")
        if not sep or not name.strip().isidentifier() or not command.strip():
            raise ValueError(f"{path}:{number}: expected 'name: command', got {line!r}")
        if name.strip() in commands:
            raise ValueError(f"{path}:{number}: process {name.strip()!r} is defined twice")
        commands[name.strip()] = command.strip()
    return commands


def procfile_argv(name: str, *, path: Path = PROCFILE) -> list[str]:
    """The argv that runs one Procfile line as a platform does: through `sh -c`, so `$PORT`
    and `${VAR:-default}` expand from the process's environment (ProcessGroup stops the
    shell's whole process group, children included)."""
    return ["sh", "-c", procfile_commands(path)[name]]
