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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentrl import envs
from agentrl.envs.registry import parse_kwargs
from agentrl.envs.webguard import RequestGuard, allowed_hosts, serve

from .base import StepResult
from .process import EnvPool
from .wire import MAX_ACTION_CHARS, PROTOCOL, WireError, from_wire, to_wire

__all__ = ["EnvService", "create_app", "main"]

DEFAULT_CALLS = ("task_ids", "expert_action", "current_observation")
#: Reset options a client may send by default: ``task_id`` (a task the env lists or draws).
#: Others (Sokoban's ``room``: a task the client writes) cost what the client makes them cost,
#: so a server takes them only when told (``--allow-reset-options``).
DEFAULT_RESET_OPTIONS = ("task_id",)
MAX_BODY = 8 * 2**20  # bytes: 4096 actions of 2 kB
#: The largest ``limit`` of ``call task_ids`` (a listing is built and sent in one reply).
MAX_TASK_IDS = 100_000
#: Seconds a session may stay idle before another client may take its env.
SESSION_TTL = 600.0
#: Seconds a stopping server (SIGTERM, Ctrl-C) waits for requests in flight.
SHUTDOWN_GRACE = 1.0


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
    """The sessions of one served env over env pools of fixed size.

    The envs are split into shards, one :class:`~agentrl.pool.EnvPool` of one worker process
    each (env slot ``s`` in shard ``s % workers``), each with its own lock: a request waits only
    for the shards its own sessions live on, so a slow call holds the sessions of one worker at
    most, for at most its deadline (``step_timeout`` per env). The shards of one request run
    concurrently. With ``workers=0`` one shard keeps every env in the server process.

    Sessions idle for ``session_ttl`` seconds are reclaimed when a client needs their envs.
    Client-supplied reset options are refused unless listed in ``reset_options`` (``task_id``
    by default); ``call task_ids`` takes a ``limit`` of at most ``max_task_ids``.
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
        reset_options: Sequence[str] = DEFAULT_RESET_OPTIONS,
        session_ttl: float = SESSION_TTL,
        max_task_ids: int = MAX_TASK_IDS,
        imports: Sequence[str] = (),
    ):
        self.env_id, self.kwargs = env_id, dict(kwargs or {})
        recipe = ServedEnv(env_id, self.kwargs, tuple(imports))
        recipe().close()  # a bad id or kwarg fails here, not per request
        self.max_sessions, self.workers = max_sessions, min(workers, max_sessions)
        self.step_timeout, self.session_ttl = step_timeout, session_ttl
        self.allow_calls = frozenset(allow_calls)
        self.reset_options = frozenset(reset_options)
        self.max_task_ids = max_task_ids
        n_shards = max(self.workers, 1)
        self.shards = [
            EnvPool(
                [recipe] * len(range(k, max_sessions, n_shards)),
                num_workers=1 if self.workers else 0,
                step_timeout=step_timeout,
                worker_memory_mb=worker_memory_mb,
            )
            for k in range(n_shards)
        ]
        self._shard_locks = [threading.Lock() for _ in self.shards]
        self._fan_out = ThreadPoolExecutor(max_workers=n_shards, thread_name_prefix="shard")
        self._free = list(range(max_sessions))
        self._slot: dict[str, int] = {}
        self._used: dict[str, float] = {}
        self._lock = threading.Lock()  # the session tables (held briefly, never over env calls)
        self.closing = False

    # -- sessions ----------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        with self._lock:
            open_sessions, free = len(self._slot), len(self._free) + len(self._expired())
        return {
            "protocol": PROTOCOL,
            "env": self.env_id,
            "kwargs": to_wire(self.kwargs),
            "max_sessions": self.max_sessions,
            "open_sessions": open_sessions,
            "free_sessions": free,
            "session_ttl": self.session_ttl,
            "workers": self.workers,
            "step_timeout": self.step_timeout,
            "worker_memory_mb": self.shards[0].worker_memory_mb,
            "reset_options": sorted(self.reset_options),
            "restarts": sum(p.restarts for p in self.shards),
            "replayed": sum(p.replayed for p in self.shards),
            "worker_pids": [pid for p in self.shards for pid in p.worker_pids()],
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
                for sid in self._expired():
                    self._release(sid)
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
            # a restart must not replay a closed session's episode (a list assignment: safe
            # while the shard runs a call)
            self.shards[slot % len(self.shards)].end_episodes([slot // len(self.shards)])
            self._free.append(slot)
        return slot is not None

    def _expired(self) -> list[str]:
        cutoff = time.monotonic() - self.session_ttl
        return [s for s, t in self._used.items() if t < cutoff]

    def _slots(self, sessions: list[str]) -> list[int]:
        if len(set(sessions)) != len(sessions):
            raise ServiceError(400, "a session appears twice in one request")
        with self._lock:
            missing = [s for s in sessions if s not in self._slot]
            if missing:
                raise ServiceError(404, f"unknown session(s) {', '.join(missing[:3])}")
            now = time.monotonic()
            for s in sessions:
                self._used[s] = now
            return [self._slot[s] for s in sessions]

    def _run(self, slots: list[int], job) -> list[Any]:
        """``job(pool, envs, positions)`` on each shard holding some of ``slots`` (under that
        shard's lock, the shards at once); the results back in the order of ``slots``."""
        if self.closing:
            raise ServiceError(503, "the server is shutting down")
        n = len(self.shards)
        by_shard: dict[int, list[int]] = {}
        for k, slot in enumerate(slots):
            by_shard.setdefault(slot % n, []).append(k)

        def one(shard: int) -> list[tuple[int, Any]]:
            ks = by_shard[shard]
            with self._shard_locks[shard]:
                if self.closing:
                    raise ServiceError(503, "the server is shutting down")
                out = job(self.shards[shard], [slots[k] // n for k in ks], ks)
            return list(zip(ks, out))

        if len(by_shard) == 1:
            pairs = one(next(iter(by_shard)))
        else:
            futures = [self._fan_out.submit(one, shard) for shard in by_shard]
            pairs = [p for f in futures for p in f.result()]
        results: list[Any] = [None] * len(slots)
        for k, value in pairs:
            results[k] = value
        return results

    # -- env calls ---------------------------------------------------------------------------
    def reset(self, req: ResetRequest) -> dict[str, Any]:
        options = []
        for it in req.items:
            extra = sorted(set(it.options or {}) - self.reset_options)
            if extra:
                allowed = ", ".join(sorted(self.reset_options)) or "none"
                raise ServiceError(
                    403,
                    f"reset option(s) {', '.join(map(repr, extra))} not allowed on this server "
                    f"(allowed: {allowed}; a server takes client-written tasks only with "
                    "--allow-reset-options)",
                )
            options.append(_unwire(it.options, "options"))
        slots = self._slots([it.session for it in req.items])
        seeds = [it.seed for it in req.items]

        def job(pool: EnvPool, envs_: list[int], ks: list[int]):
            return pool.try_reset(envs_, [seeds[k] for k in ks], [options[k] for k in ks])

        out = self._run(slots, job)
        return {"results": [_reply(ok, v, _reset_body) for ok, v in out]}

    def step(self, req: StepRequest) -> dict[str, Any]:
        slots = self._slots([it.session for it in req.items])
        actions = [it.action for it in req.items]
        out = self._run(slots, lambda pool, e, ks: pool.step(e, [actions[k] for k in ks]))
        return {"results": [_reply(True, r, _step_body) for r in out]}

    def call(self, req: CallRequest) -> dict[str, Any]:
        bad = sorted({it.method for it in req.items} - self.allow_calls)
        if bad:
            raise ServiceError(
                403,
                f"method(s) {', '.join(bad)} not allowed (--allow-call: {', '.join(sorted(self.allow_calls))})",
            )
        args = [_unwire(it.args, "args") for it in req.items]
        for it, a in zip(req.items, args):
            if it.method == "task_ids":
                self._check_task_ids_args(a)
        slots = self._slots([it.session for it in req.items])
        methods = [it.method for it in req.items]

        def job(pool: EnvPool, envs_: list[int], ks: list[int]):
            return [pool.try_call([e], methods[k], *args[k])[0] for e, k in zip(envs_, ks)]

        out = self._run(slots, job)
        return {
            "results": [_reply(ok, v, lambda x: {"result": to_wire(x, "result")}) for ok, v in out]
        }

    def _check_task_ids_args(self, args: list[Any]) -> None:
        limit = args[1] if len(args) > 1 else None
        ok_type = limit is None or (isinstance(limit, int) and not isinstance(limit, bool))
        if (
            len(args) > 2
            or not ok_type
            or (limit is not None and not 0 <= limit <= self.max_task_ids)
        ):
            raise ServiceError(
                400,
                f"task_ids takes (split, limit) with limit null or an integer in "
                f"0..{self.max_task_ids}, got {len(args)} argument(s), limit {str(limit)[:40]}",
            )

    def close(self, wait: float = 5.0) -> None:
        """End the env workers: each gets ``wait`` seconds to finish its call, then is killed
        (a stopping server passes 0: an env call in flight is not waited for)."""
        self.closing = True
        for pool in self.shards:
            pool.close(timeout=wait)
        self._fan_out.shutdown(wait=False, cancel_futures=True)


def _unwire(value: Any, where: str) -> Any:
    try:
        return from_wire(value)
    except ValueError as exc:
        raise ServiceError(400, f"invalid {where}: {exc}") from None


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


async def _read(request: Request, model: type[BaseModel]) -> BaseModel:
    body = await request.body()  # its size is capped by the RequestGuard before it is read
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ServiceError(400, f"invalid {model.__name__}: {where}: {first['msg']}") from None


def create_app(
    service: EnvService,
    *,
    token: str | None = None,
    max_body: int = MAX_BODY,
    hosts: Sequence[str] | None = None,
):
    """The ASGI app serving ``service`` (``token``: required bearer token; ``hosts``: the
    Host names it answers to, default :func:`~agentrl.envs.webguard.allowed_hosts` of
    loopback; requests from web pages and bodies over ``max_body`` bytes are refused)."""

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
                body = await _read(request, model)
                return JSONResponse(await run_in_threadpool(method, body))
            except ServiceError as exc:
                return JSONResponse({"error": str(exc)}, status_code=exc.status)

        return handle

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    routes = [
        Route("/v1/health", endpoint(None, service.health), methods=["GET"]),
        Route("/v1/sessions", endpoint(SessionsRequest, service.open), methods=["POST"]),
        Route("/v1/reset", endpoint(ResetRequest, service.reset), methods=["POST"]),
        Route("/v1/step", endpoint(StepRequest, service.step), methods=["POST"]),
        Route("/v1/call", endpoint(CallRequest, service.call), methods=["POST"]),
        Route("/v1/close", endpoint(CloseRequest, service.close_sessions), methods=["POST"]),
    ]
    guard = Middleware(
        RequestGuard,
        hosts=allowed_hosts("127.0.0.1") if hosts is None else frozenset(hosts),
        max_body=max_body,
        name="agentrl.pool.serve",
    )
    return Starlette(
        routes=routes, middleware=[guard], exception_handlers={HTTPException: http_error}
    )


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
    ap.add_argument("--allow-reset-options", nargs="*", default=list(DEFAULT_RESET_OPTIONS),
                    metavar="KEY", help="reset options clients may send (default: task_id)")  # fmt: skip
    ap.add_argument("--allow-host", nargs="*", default=[], metavar="NAME",
                    help="Host names besides loopback and --host the server answers to (*: any)")  # fmt: skip
    ap.add_argument("--session-ttl", type=float, default=SESSION_TTL,
                    help="s a session may idle before its env may go to another client")  # fmt: skip
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
        if not args.session_ttl > 0:
            raise ValueError("--session-ttl must be > 0 seconds")
        service = EnvService(
            args.env,
            parse_kwargs(args.kwargs),
            max_sessions=args.max_sessions,
            workers=args.workers,
            step_timeout=args.step_timeout,
            worker_memory_mb=args.worker_memory_mb,
            allow_calls=args.allow_call,
            reset_options=args.allow_reset_options,
            session_ttl=args.session_ttl,
            imports=args.imports,
        )
    except Exception as exc:  # noqa: BLE001 - every start-up problem is one line and exit 2
        print(f"agentrl.pool.serve: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
        sock.listen(1024)  # clients may connect as soon as the line below is printed
    except OSError as exc:
        service.close(wait=0)
        print(f"agentrl.pool.serve: cannot listen on {args.host}:{args.port}: {exc}",
              file=sys.stderr)  # fmt: skip
        return 2
    host, port = sock.getsockname()[:2]
    if token is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print("warning: serving beyond loopback without --token-env", file=sys.stderr)
    print(f"serving {args.env} on http://{host}:{port} ({args.max_sessions} sessions, "
          f"{service.workers} workers)", flush=True)  # fmt: skip
    app = create_app(service, token=token, hosts=allowed_hosts(args.host, args.allow_host))
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE)
    try:
        stopped = serve(config, [sock])
    finally:
        service.close(wait=0)  # env calls still in flight are not waited for
    return 128 + stopped if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
