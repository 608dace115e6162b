"""The `switchyard` command. Subcommands are plugins: every package that has commands registers
them in pyproject.toml's `switchyard.commands` entry-point group (a `register(subparsers)` function
that adds its subparser and sets `func`), so this module imports none of them by name."""

from __future__ import annotations

import argparse
from importlib.metadata import entry_points

COMMAND_GROUP = "switchyard.commands"
FIRST = ("serve",)  # shown first in --help; the rest alphabetically


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description="Local LLM gateway with adaptive decoding engines")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = sorted(entry_points(group=COMMAND_GROUP), key=lambda ep: (ep.name not in FIRST, ep.name))
    if not commands:
        parser.error("no commands are registered: install the package (pip install -e .) so its entry points exist")
    for command in commands:
        command.load()(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)
