"""What every env server of agentrl checks before a request reaches its app (pure ASGI, no
dependency): ``python -m agentrl.pool.serve`` and ``python -m agentrl.envs.openenv serve`` both
wrap their app in :class:`RequestGuard`.

- **Host** (DNS rebinding): a web page on a domain that resolves to 127.0.0.1 reaches a local
  server with its own name in the ``Host`` header; only the names the server answers to pass
  (loopback names, the bound address, ``--allow-host``), as local development servers do.
- **Origin**: a browser names the page that sent a request (also on a cross-origin ``text/plain``
  POST, which needs no CORS preflight, and on WebSocket handshakes); a request with an
  ``Origin`` whose host is not one of the allowed names is refused. Programs (httpx, OpenEnv's
  clients) send no ``Origin``.
- **Body size**: a declared ``Content-Length`` over the limit is refused before the body is
  read, and a body without one is counted as it arrives and cut at the limit.
- **Errors**: an exception that escapes the app is answered with a one-line JSON 500 (no
  traceback, no file path) on the same connection, and logged as one line.

Refusals are ``{"error": "<one line>"}`` with 400 (no Host), 403 (Host, Origin) or 413 (size);
a refused WebSocket handshake is closed (HTTP 403) before it is accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["LOOPBACK_NAMES", "RequestGuard", "allowed_hosts", "host_name", "serve"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Names that always mean this machine.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
_WILDCARD_BINDS = ("0.0.0.0", "::", "")


def host_name(value: str) -> str:
    """The host of a ``Host`` header or of a URL's authority, lower case, without port or
    brackets: ``[::1]:8600`` -> ``::1``, ``Example.org:80`` -> ``example.org``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a server bound to ``bind`` answers to: the loopback names, ``bind``
    itself (unless it is a wildcard address) and ``extra`` (``"*"``: any)."""
    names = {*LOOPBACK_NAMES, *(host_name(h) for h in extra if h != "*")}
    if host_name(bind) not in _WILDCARD_BINDS:
        names.add(host_name(bind))
    if "*" in extra:
        names.add("*")
    return frozenset(names)


class _TooLarge(Exception):
    pass


class RequestGuard:
    """ASGI middleware: Host and Origin checks, a body size limit and one-line 500s.

    Args:
        app: the ASGI app to guard.
        hosts: allowed host names (:func:`allowed_hosts`); ``"*"`` among them allows any Host
            and any Origin.
        max_body: the largest request body in bytes (``None``: no limit).
        name: the server's name in logged lines.
    """

    def __init__(
        self, app: ASGIApp, *, hosts: Iterable[str], max_body: int | None, name: str = "server"
    ):
        self.app, self.hosts, self.max_body, self.name = app, frozenset(hosts), max_body, name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        why = self._refusal(scope)
        if why is not None:
            status, message = why
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
            else:
                await _answer(send, status, message)
            return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, self._counted(scope, receive), tracked_send)
        except _TooLarge:
            if not started:
                await _answer(send, 413, f"request body is over the {self.max_body}-byte limit")
        except asyncio.CancelledError:  # the server is stopping and does not wait for this call
            if not started:
                with contextlib.suppress(Exception):
                    await _answer(send, 503, "the server is shutting down")
        except Exception as exc:  # noqa: BLE001 - any bug in a handler: one line, one 500
            print(
                f"{self.name}: {scope.get('method', '')} {scope.get('path', '')} failed: "
                f"{type(exc).__name__}: {_first_line(exc)}",
                file=sys.stderr,
                flush=True,
            )
            if not started:
                await _answer(
                    send, 500, f"internal server error ({type(exc).__name__}); see the server log"
                )

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        any_host = "*" in self.hosts
        host = headers.get("host")
        if host is None:
            return 400, "the request has no Host header"
        if not any_host and host_name(host) not in self.hosts:
            return 403, (
                f"Host {host!r} is not a name of this server (allowed: "
                f"{', '.join(sorted(self.hosts))}; add one with --allow-host)"
            )
        origin = headers.get("origin")
        if origin is not None and not any_host:
            origin_host = host_name(urlsplit(origin).netloc) if "://" in origin else ""
            if origin_host not in self.hosts:
                return 403, f"requests from web pages are refused (Origin {origin[:80]!r})"
        if scope["type"] == "http" and self.max_body is not None:
            size = headers.get("content-length")
            if size is not None and (not size.strip().isdigit() or int(size) > self.max_body):
                return 413, (
                    f"request body of {size[:20]} bytes is over the {self.max_body}-byte limit"
                )
        return None

    def _counted(self, scope: Scope, receive: Receive) -> Receive:
        if self.max_body is None:
            return receive
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise _TooLarge
            return message

        return counted


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


async def _answer(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def serve(config: Any, sockets: list[Any]) -> int:
    """Run ``uvicorn.Server(config)`` on ``sockets`` until SIGINT or SIGTERM; returns the signal
    that stopped it (0: none). Unlike uvicorn's own handling, the signal is not raised again
    afterwards, so the caller closes what it holds and exits with one line and no traceback."""
    import signal

    import uvicorn

    stopped: list[int] = []

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            stopped.append(sig)
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            signals = (signal.SIGINT, signal.SIGTERM)
            originals = {sig: signal.signal(sig, self.handle_exit) for sig in signals}
            try:
                yield
            finally:
                for sig, handler in originals.items():
                    signal.signal(sig, handler)

    _Server(config).run(sockets=sockets)
    return stopped[0] if stopped else 0
