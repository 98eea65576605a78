"""The server's connections: uvicorn's, with the bounds it does not have, and a stop that ends
every stream properly.

uvicorn closes a kept-alive connection that stays idle after an answer (timeout_keep_alive),
but a connection that never sends a request, or sends its headers a byte at a time, stays open
for ever, and one client may open as many as it likes until the process runs out of file
descriptors. `GuardedHttp` is uvicorn's HTTP protocol (httptools) with three additions:

- at most `max_connections_per_client` open connections per client address: one more is
  held unread for a while (RefusalPacing), then closed, so that a client reconnecting in a loop
  is turned away a few times a second and not as fast as it can connect (at most
  `max_held_connections`, and a quarter of the process's file descriptors, are held at a
  time; past that one is closed at once); trusted addresses are exempt;
- a request's headers must be complete within `header_timeout_s` of the connection opening,
  or of the previous answer: otherwise the connection is closed;
- at most `max_header_bytes` of headers: more gets 431 and the connection closed;
- a request the parser cannot read gets its 400 in OpenAI's error shape, like every other error.

A client is the connection's own address: uvicorn's proxy headers are off, so no header a
client sends can make it someone else.

`Server` is uvicorn's server that, when told to stop, first calls `on_stop` (the app ends
every open stream with a finish reason and [DONE]), then closes connections as uvicorn does.
"""
from __future__ import annotations

import json
import resource
from collections import defaultdict

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .limits import RefusalPacing, ServerLimits
from .openai_schema import error_body


def guarded_http(limits: ServerLimits) -> type:
    """An HTTP protocol class enforcing `limits`, with its own count of connections per address."""
    open_from: dict[str, int] = defaultdict(int)
    pacing = RefusalPacing(limits)                  # connections held before being closed
    max_held = min(limits.max_held_connections, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4)

    class GuardedHttp(HttpToolsProtocol):
        _header_timer = None
        _header_bytes = 0
        _counted = ""
        _held = ""

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            host = self.client[0] if self.client else ""
            if limits.per_client and host not in limits.trusted_clients:
                if open_from[host] >= limits.max_connections_per_client:
                    if pacing.total < max_held:   # no answer: it has not asked anything yet
                        self._held = host
                        transport.pause_reading()
                        self.loop.call_later(pacing.hold(host), transport.close)
                    else:
                        transport.close()
                    return
                open_from[host] += 1
                self._counted = host
            self._await_headers()

        def connection_lost(self, exc) -> None:
            self._stop_timer()
            if self._held:
                pacing.release(self._held)
                self._held = ""
            if self._counted:
                open_from[self._counted] -= 1
                if not open_from[self._counted]:
                    del open_from[self._counted]
                self._counted = ""
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            self._header_bytes = 0
            super().on_message_begin()

        def on_header(self, name: bytes, value: bytes) -> None:
            self._header_bytes += len(name) + len(value)
            if self._header_bytes > limits.max_header_bytes:
                self._refuse(431)
                return
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._stop_timer()
            if not self.transport.is_closing():      # not refused for its headers' size
                super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if self.cycle is not None:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if self.cycle is not None:
                super().on_message_complete()

        def on_response_complete(self) -> None:
            pipelined = bool(self.pipeline)          # its next request's headers are already in
            super().on_response_complete()
            if not pipelined and not self.transport.is_closing():
                self._await_headers()

        def _await_headers(self) -> None:
            self._stop_timer()
            self._header_timer = self.loop.call_later(limits.header_timeout_s, self._too_slow)

        def _stop_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def send_400_response(self, msg: str) -> None:
            self._answer(400, b"Bad Request", f"{msg} (the request could not be read as HTTP/1.1)")

        def _refuse(self, status: int) -> None:
            self._answer(status, b"Request Header Fields Too Large",
                         f"request headers are over {limits.max_header_bytes:,} bytes, the limit")

        def _answer(self, status: int, phrase: bytes, message: str) -> None:
            """An error in OpenAI's shape, written before any request reached the app; then close."""
            if self.transport.is_closing():
                return
            body = json.dumps(error_body(status, message)).encode()
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\nconnection: close\r\n\r\n" % (status, phrase, len(body)) + body)
            self.transport.close()

    return GuardedHttp


def server_config(app, limits: ServerLimits, **kw) -> uvicorn.Config:
    """uvicorn's settings for the engine server: the guarded protocol and the keep-alive timeout."""
    return uvicorn.Config(app, http=guarded_http(limits), timeout_keep_alive=limits.keep_alive_s,
                          proxy_headers=False, **kw)


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_stop=None):
        super().__init__(config)
        self.on_stop = on_stop

    async def shutdown(self, sockets=None) -> None:
        if self.on_stop is not None:
            await self.on_stop()
        await super().shutdown(sockets)
