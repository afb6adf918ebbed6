"""``python -m agentrl.pool.serve ENV``: serve a registered env over HTTP for ``env.backend=http``.

The server holds an agentrl env pool of ``--max-sessions`` envs in ``--workers`` processes (the
process backend, with its failure contract: an env that raises, crashes or hangs past
``--step-timeout`` costs only its own episode, and its worker is restarted). Clients open
sessions (one env each) and send batched ``reset`` / ``step`` / ``call`` requests: one request
per server and pool call, so the server's workers step a client's envs concurrently. The
protocol (docs/envs/serving.md): JSON over HTTP, version :data:`~agentrl.pool.wire.PROTOCOL`.

Safety: binds to 127.0.0.1 unless ``--host`` says otherwise; with ``--token-env VAR`` every
request needs ``Authorization: Bearer $VAR``; every body is size-capped and validated (unknown
fields, wrong types, out-of-range seeds are 400s); the env id and kwargs are fixed at start (a
client cannot make the server build anything else); ``call`` reaches only the methods in
``--allow-call`` (default: the contract's ``task_ids``, ``expert_action``,
``current_observation``). Nothing received is evaluated or unpickled.

Built on Starlette (routing, requests; the ASGI toolkit FastAPI is made of) and uvicorn (the
server), both maintained, small, and already in the ``train`` extra's dependency tree through
vLLM; pydantic validates the bodies.
"""

from __future__ import annotations

import argparse
import hmac
import importlib
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentrl import envs
from agentrl.envs.registry import parse_kwargs

from .base import StepResult
from .process import EnvPool
from .wire import MAX_ACTION_CHARS, PROTOCOL, WireError, from_wire, to_wire

__all__ = ["EnvService", "create_app", "main"]

DEFAULT_CALLS = ("task_ids", "expert_action", "current_observation")
MAX_BODY = 8 * 2**20  # bytes: 4096 actions of 2 kB


# -- request bodies (validated: unknown fields, wrong types and out-of-range values are 400s) ---
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SessionsRequest(_Body):
    """``POST /v1/sessions``: open ``count`` sessions of the served env (id and kwargs must be the
    served ones: a client never chooses what the server builds)."""

    env: str = Field(max_length=200)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    count: int = Field(ge=1, le=4096)


class _ResetItem(_Body):
    session: str = Field(max_length=64)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    options: dict[str, Any] | None = None


class ResetRequest(_Body):
    items: list[_ResetItem] = Field(min_length=1, max_length=4096)


class _StepItem(_Body):
    session: str = Field(max_length=64)
    action: str = Field(max_length=MAX_ACTION_CHARS)


class StepRequest(_Body):
    items: list[_StepItem] = Field(min_length=1, max_length=4096)


class _CallItem(_Body):
    session: str = Field(max_length=64)
    method: str = Field(max_length=64)
    args: list[Any] = Field(default_factory=list, max_length=16)


class CallRequest(_Body):
    items: list[_CallItem] = Field(min_length=1, max_length=4096)


class CloseRequest(_Body):
    sessions: list[str] = Field(max_length=4096)


@dataclass(frozen=True)
class ServedEnv:
    """The server's env recipe: import ``imports`` (the modules that register the env), then
    ``envs.make``; picklable, so the pool's worker processes build the same env."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    imports: tuple[str, ...] = ()

    def __call__(self):
        for module in self.imports:
            importlib.import_module(module)
        return envs.make(self.name, **self.kwargs)


class ServiceError(Exception):
    """A request the service refuses: ``status`` and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class EnvService:
    """The sessions of one served env over an :class:`~agentrl.pool.EnvPool` of fixed size.

    Pool calls are serialised by one lock (a pool is not thread-safe); each call is batched, so
    the workers still run concurrently. Sessions idle for ``session_ttl`` seconds are reclaimed
    when the pool is full.
    """

    def __init__(
        self,
        env_id: str,
        kwargs: dict[str, Any] | None = None,
        *,
        max_sessions: int = 16,
        workers: int = 1,
        step_timeout: float | None = 30.0,
        worker_memory_mb: float | None = None,
        allow_calls: Sequence[str] = DEFAULT_CALLS,
        session_ttl: float = 3600.0,
        imports: Sequence[str] = (),
    ):
        self.env_id, self.kwargs = env_id, dict(kwargs or {})
        recipe = ServedEnv(env_id, self.kwargs, tuple(imports))
        recipe().close()  # a bad id or kwarg fails here, not per request
        self.max_sessions, self.workers = max_sessions, min(workers, max_sessions)
        self.step_timeout, self.session_ttl = step_timeout, session_ttl
        self.allow_calls = frozenset(allow_calls)
        self.pool = EnvPool(
            [recipe] * max_sessions,
            num_workers=self.workers,
            step_timeout=step_timeout,
            worker_memory_mb=worker_memory_mb,
        )
        self._free = list(range(max_sessions))
        self._slot: dict[str, int] = {}
        self._used: dict[str, float] = {}
        self._lock = threading.Lock()

    # -- sessions ----------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return {
            "protocol": PROTOCOL,
            "env": self.env_id,
            "kwargs": to_wire(self.kwargs),
            "max_sessions": self.max_sessions,
            "open_sessions": len(self._slot),
            "workers": self.workers,
            "step_timeout": self.step_timeout,
            "worker_memory_mb": self.pool.worker_memory_mb,
            "restarts": self.pool.restarts,
            "replayed": self.pool.replayed,
            "worker_pids": self.pool.worker_pids(),
        }

    def open(self, req: SessionsRequest) -> dict[str, Any]:
        same = envs.registry.resolve_id(req.env) == envs.registry.resolve_id(self.env_id)
        if not same or req.kwargs != to_wire(self.kwargs):
            raise ServiceError(
                409,
                f"this server serves {self.env_id} with kwargs {self.kwargs}; the client asked "
                f"for {req.env} with kwargs {req.kwargs}",
            )
        with self._lock:
            if len(self._free) < req.count:
                self._reclaim()
            if len(self._free) < req.count:
                raise ServiceError(
                    503,
                    f"server full: {req.count} sessions asked, {len(self._free)} of "
                    f"{self.max_sessions} free (--max-sessions)",
                )
            sids = [uuid.uuid4().hex for _ in range(req.count)]
            now = time.monotonic()
            for sid in sids:
                self._slot[sid] = self._free.pop(0)
                self._used[sid] = now
        return {"sessions": sids}

    def close_sessions(self, req: CloseRequest) -> dict[str, Any]:
        with self._lock:
            closed = [sid for sid in req.sessions if self._release(sid)]
        return {"closed": len(closed)}

    def _release(self, sid: str) -> bool:
        slot = self._slot.pop(sid, None)
        self._used.pop(sid, None)
        if slot is not None:
            self.pool.end_episodes([slot])  # a restart must not replay a closed session's episode
            self._free.append(slot)
        return slot is not None

    def _reclaim(self) -> None:
        cutoff = time.monotonic() - self.session_ttl
        for sid in [s for s, t in self._used.items() if t < cutoff]:
            self._release(sid)

    def _slots(self, sessions: list[str]) -> list[int]:
        if len(set(sessions)) != len(sessions):
            raise ServiceError(400, "a session appears twice in one request")
        missing = [s for s in sessions if s not in self._slot]
        if missing:
            raise ServiceError(404, f"unknown session(s) {', '.join(missing[:3])}")
        now = time.monotonic()
        for s in sessions:
            self._used[s] = now
        return [self._slot[s] for s in sessions]

    # -- env calls ---------------------------------------------------------------------------
    def reset(self, req: ResetRequest) -> dict[str, Any]:
        with self._lock:
            slots = self._slots([it.session for it in req.items])
            seeds = [it.seed for it in req.items]
            options = [from_wire(it.options) for it in req.items]
            try:
                out = [(True, r) for r in self.pool.reset(slots, seeds, options)]
            except RuntimeError:  # find which failed: one by one (rare)
                out = [
                    self._one(self.pool.reset, [s], [sd], [o])
                    for s, sd, o in zip(slots, seeds, options)
                ]
        return {"results": [_reply(ok, v, _reset_body) for ok, v in out]}

    def step(self, req: StepRequest) -> dict[str, Any]:
        with self._lock:
            slots = self._slots([it.session for it in req.items])
            out = self.pool.step(slots, [it.action for it in req.items])
        return {"results": [_reply(True, r, _step_body) for r in out]}

    def call(self, req: CallRequest) -> dict[str, Any]:
        bad = sorted({it.method for it in req.items} - self.allow_calls)
        if bad:
            raise ServiceError(
                403,
                f"method(s) {', '.join(bad)} not allowed (--allow-call: {', '.join(sorted(self.allow_calls))})",
            )
        with self._lock:
            slots = self._slots([it.session for it in req.items])
            out = [
                self._one(self.pool.call, [s], it.method, *from_wire(it.args))
                for s, it in zip(slots, req.items)
            ]
        return {
            "results": [_reply(ok, v, lambda x: {"result": to_wire(x, "result")}) for ok, v in out]
        }

    @staticmethod
    def _one(fn, *args) -> tuple[bool, Any]:
        try:
            return True, fn(*args)[0]
        except RuntimeError as exc:
            return False, str(exc)

    def close(self) -> None:
        self.pool.close()


def _reset_body(value: tuple[str, dict]) -> dict[str, Any]:
    return {"observation": to_wire(value[0], "observation"), "info": to_wire(value[1], "info")}


def _step_body(r: StepResult) -> dict[str, Any]:
    return {
        "observation": to_wire(r.observation, "observation"),
        "reward": to_wire(r.reward, "reward"),
        "terminated": to_wire(r.terminated, "terminated"),
        "truncated": to_wire(r.truncated, "truncated"),
        "info": to_wire(r.info, "info"),
    }


def _reply(ok: bool, value: Any, body) -> dict[str, Any]:
    """One item's answer; a value the protocol cannot carry fails that item alone, named."""
    if not ok:
        return {"ok": False, "error": str(value)}
    try:
        return {"ok": True, **body(value)}
    except WireError as exc:
        return {"ok": False, "error": f"the result cannot be sent: {exc}"}


async def _read(request: Request, model: type[BaseModel], max_body: int) -> BaseModel:
    size = int(request.headers.get("content-length") or 0)
    if size > max_body:
        raise ServiceError(413, f"request body of {size} bytes is over the {max_body}-byte limit")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body:
            raise ServiceError(413, f"request body is over the {max_body}-byte limit")
    try:
        return model.model_validate_json(bytes(body))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ServiceError(400, f"invalid {model.__name__}: {where}: {first['msg']}") from None


def create_app(service: EnvService, *, token: str | None = None, max_body: int = MAX_BODY):
    """The ASGI app serving ``service`` (``token``: required bearer token)."""

    def authorised(request: Request) -> None:
        if token is None:
            return
        got = request.headers.get("authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
            raise ServiceError(401, "missing or wrong bearer token")

    def endpoint(model: type[BaseModel] | None, method):
        async def handle(request: Request) -> JSONResponse:
            try:
                authorised(request)
                if model is None:
                    return JSONResponse(method())
                body = await _read(request, model, max_body)
                return JSONResponse(await run_in_threadpool(method, body))
            except ServiceError as exc:
                return JSONResponse({"error": str(exc)}, status_code=exc.status)

        return handle

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)

    routes = [
        Route("/v1/health", endpoint(None, service.health), methods=["GET"]),
        Route("/v1/sessions", endpoint(SessionsRequest, service.open), methods=["POST"]),
        Route("/v1/reset", endpoint(ResetRequest, service.reset), methods=["POST"]),
        Route("/v1/step", endpoint(StepRequest, service.step), methods=["POST"]),
        Route("/v1/call", endpoint(CallRequest, service.call), methods=["POST"]),
        Route("/v1/close", endpoint(CloseRequest, service.close_sessions), methods=["POST"]),
    ]
    handlers = {HTTPException: http_error, Exception: server_error}
    return Starlette(routes=routes, exception_handlers=handlers)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m agentrl.pool.serve", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("env", help="registered env id, e.g. Sokoban-v0")
    ap.add_argument("--kwargs", nargs="*", default=[], metavar="KEY=VALUE", help="env kwargs")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    ap.add_argument("--port", type=int, default=8600, help="port (0: a free one, printed)")
    ap.add_argument("--max-sessions", type=int, default=16, help="envs the server holds")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="env processes")
    ap.add_argument("--step-timeout", type=float, default=30.0, help="s per env call")
    ap.add_argument("--worker-memory-mb", type=float, default=None,
                    help="resident MiB one env process may use (default: no limit)")  # fmt: skip
    ap.add_argument("--token-env", metavar="VAR", help="require the bearer token in $VAR")
    ap.add_argument("--allow-call", nargs="*", default=list(DEFAULT_CALLS), help="callable methods")
    ap.add_argument("--import", dest="imports", nargs="*", default=[], metavar="MODULE",
                    help="modules to import first (they register envs)")  # fmt: skip
    args = ap.parse_args(argv)
    try:
        token = None
        if args.token_env:
            token = os.environ.get(args.token_env)
            if not token:
                raise ValueError(f"--token-env {args.token_env}: the variable is empty or unset")
        if args.max_sessions < 1 or args.workers < 0:
            raise ValueError("--max-sessions must be >= 1 and --workers >= 0")
        service = EnvService(
            args.env,
            parse_kwargs(args.kwargs),
            max_sessions=args.max_sessions,
            workers=args.workers,
            step_timeout=args.step_timeout,
            worker_memory_mb=args.worker_memory_mb,
            allow_calls=args.allow_call,
            imports=args.imports,
        )
    except Exception as exc:  # noqa: BLE001 - every start-up problem is one line and exit 2
        print(f"agentrl.pool.serve: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(1024)  # clients may connect as soon as the line below is printed
    host, port = sock.getsockname()[:2]
    if token is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print("warning: serving beyond loopback without --token-env", file=sys.stderr)
    print(f"serving {args.env} on http://{host}:{port} ({args.max_sessions} sessions, "
          f"{service.workers} workers)", flush=True)  # fmt: skip
    server = uvicorn.Server(uvicorn.Config(create_app(service, token=token), log_level="warning"))
    try:
        server.run(sockets=[sock])
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
