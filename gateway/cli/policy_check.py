"""`switchyard policy check FILE`: validate a policy file before (re)loading it."""

from __future__ import annotations

import argparse
import sys

from gateway.routing.policy import PolicyError, load_policy


def _check(args: argparse.Namespace) -> int:
    try:
        policy = load_policy(args.file)
    except PolicyError as exc:
        print(f"{exc.source}: INVALID", file=sys.stderr)
        for line in exc.errors:
            print(f"  {line}", file=sys.stderr)
        return 1
    engines = ", ".join(policy.engines.enabled())
    print(f"{args.file}: OK (engines: {engines}; {len(policy.rules)} rules; exploration: {policy.exploration.kind})")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    policy = subparsers.add_parser("policy", help="routing policy tools")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    check = policy_sub.add_parser("check", help="validate a policy YAML file (exit 1 if invalid)")
    check.add_argument("file", help="path to the policy YAML file")
    check.set_defaults(func=_check)
