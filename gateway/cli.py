"""The `switchyard` command. Each subsystem registers its own subcommands (see COMMAND_MODULES)."""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules exposing `register(subparsers)`; each adds its subcommands and sets `func` on its parser.
COMMAND_MODULES: tuple[str, ...] = (
    "gateway.serve_cli",
    "classifier.cli",
    "gateway.policy_cli",
    "gateway.bench_cli",
    "gateway.service_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description="Local LLM gateway with adaptive decoding engines")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # subsystem not present in this build
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
