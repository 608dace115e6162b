"""What every handler of one app shares."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from contracts.engine import Backend
from gateway.config import GatewayConfig
from gateway.observability.metrics import GatewayMetrics
from gateway.routing.interface import Router
from gateway.worker.scheduler import Scheduler


def model_names(model_id: str, aliases: tuple[str, ...]) -> frozenset[str]:
    """Names a request's `model` may use: the served id, its directory name, "default", config aliases."""
    base = os.path.basename(model_id.rstrip("/")) or model_id
    return frozenset({model_id, base, "default", *aliases})


@dataclass
class GatewayState:
    backend: Backend
    router: Router
    config: GatewayConfig
    scheduler: Scheduler
    metrics: GatewayMetrics
    model_names: frozenset[str] = field(default_factory=frozenset)
    created: int = field(default_factory=lambda: int(time.time()))  # for /v1/models
