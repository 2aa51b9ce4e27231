"""The top-level `woolf --help`: commands grouped by role, each with its whole first sentence.

Usage:
    @click.group(cls=RoleGroup)          # in cli/main.py
    ROLES["History and results"]         # ["log", "show", ...]: built from cli/history/'s COMMANDS

The roles are cli/'s packages (PACKAGES: demo, participant, validator, maintainer, history), each
with a TITLE and its COMMANDS in the help's order: a new command joins a role by joining its
package's COMMANDS. A command registered outside them is still listed, under "Other", so a new
command never disappears from the help before it is given a role.
"""

from __future__ import annotations

import re

import click

from woolf.cli import demo, history, maintainer, participant, validator

PACKAGES = (demo, participant, validator, maintainer, history)  # the help's sections, in order
ROLES: dict[str, list[str]] = {p.TITLE: [c.name for c in p.COMMANDS] for p in PACKAGES}


class RoleGroup(click.Group):
    """A click group whose help lists its commands by role, in the order of ROLES."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}
        commands = {n: c for n, c in commands.items() if c is not None and not c.hidden}
        placed = {n for names in ROLES.values() for n in names}
        sections = [(title, [n for n in names if n in commands]) for title, names in ROLES.items()]
        sections.append(("Other", sorted(set(commands) - placed)))
        for title, names in sections:
            if names:
                with formatter.section(title):
                    formatter.write_dl([(n, first_sentence(commands[n])) for n in names])


def first_sentence(command: click.Command) -> str:
    """The command's short help, or its docstring's first sentence, whole (write_dl wraps it; click's
    own short help cuts it at 45 characters with '...')."""
    text = command.short_help or (command.help or "").split("\n\n")[0]
    text = " ".join(text.split())
    end = re.search(r"(?<!\.)\.\s", text)  # "VERSION..." is no sentence's end
    return text[: end.start() + 1] if end else text
