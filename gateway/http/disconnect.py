"""Notice a client hanging up while its request waits or generates (streaming or not)."""

from __future__ import annotations

import asyncio
from typing import Callable

from starlette.types import Receive


class DisconnectWatcher:
    """Listens on the ASGI receive channel (the body is already read) and calls on_disconnect once."""

    def __init__(self, receive: Receive, on_disconnect: Callable[[], None]):
        self.disconnected = False
        self._on_disconnect = on_disconnect
        self._task = asyncio.get_running_loop().create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                self._on_disconnect()
                return

    def stop(self) -> None:
        self._task.cancel()
