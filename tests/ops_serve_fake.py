"""A gateway process for the shutdown tests: `switchyard serve`'s wiring (adaptive router, router
metrics, router.start/close, run_server) over SpeculativeFake instead of a model.

python -m tests.ops_serve_fake --port P --policy FILE --state FILE --drain S --step S
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from gateway.config import GatewayConfig
from gateway.http.server import run_server
from tests.ops_helpers import SpeculativeFake, serve_like_app

LONG_REPLY = " ".join(f"w{i}" for i in range(400))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--policy", type=Path, required=True)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--drain", type=float, required=True, help="shutdown_timeout_seconds")
    parser.add_argument("--step", type=float, default=0.05, help="seconds per fake engine step")
    args = parser.parse_args()
    logging.basicConfig(level="INFO", format="%(levelname)s %(name)s: %(message)s")
    config = GatewayConfig(port=args.port, shutdown_timeout_seconds=args.drain)
    app, router = serve_like_app(SpeculativeFake(reply=LONG_REPLY, step_seconds=args.step), args.policy,
                                 args.state, config)
    try:
        router.start()
        return run_server(app, config, log_level="warning")
    finally:
        router.close()


if __name__ == "__main__":
    sys.exit(main())
