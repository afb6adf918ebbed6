"""Env pool backend: envs served over HTTP by ``python -m agentrl.pool.serve`` (:class:`HTTPEnvPool`).

Env ``i`` is a session on server ``i % len(urls)``; every pool call sends one batched request per
server, to all servers at once, under one deadline. The failure contract is the other
backends' (:class:`agentrl.pool.base.BasePool`):

- an env that raises, crashes or hangs on the server costs its own episode: the server's own
  process pool cuts it (truncated, ``info["error"]``) and restarts its worker;
- a server that dies, hangs past the deadline, answers with an error status or a malformed
  reply ends the episodes it held (truncated, ``info["error"]`` naming the server and what
  happened); its sessions are opened again on the next reset, so a restarted server is used
  again (a reset or call that still fails raises ``RuntimeError`` naming the server);
- a result the protocol cannot carry (a set in ``info``...) ends only its own episode, naming
  the field.

The deadline of a call is ``step_timeout`` per env on the busiest server worker, plus
:data:`GRACE` seconds for the server to answer after its own deadline; ``step_timeout`` should
be the server's (``--step-timeout``). httpx is the client (maintained; sync API, connection
pooling, per-request timeouts).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import shlex
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from .base import BasePool, EnvFn, EnvSpec, StepResult, WorkerFault
from .checks import ERROR_KINDS, Fault
from .wire import PROTOCOL, from_wire, to_wire
from .worker import Reply

__all__ = ["GRACE", "HTTPEnvPool", "serve_command", "server_problem", "servers_problems"]

# httpx logs every request at INFO; a run's log should not hold one line per env call (a user
# who sets the logger's level keeps it)
if logging.getLogger("httpx").level == logging.NOTSET:
    logging.getLogger("httpx").setLevel(logging.WARNING)

#: Seconds a server gets past the step deadline to answer (its own deadline fires first).
GRACE = 10.0
#: Seconds an idle connection to a server is kept: below uvicorn's keep-alive (5 s), so a request
#: rarely goes out on a connection the server is closing.
KEEPALIVE_S = 2.0
#: How the server's pool names the env in a cut episode's error (its slot, not the client's env).
_SLOT_PREFIX = re.compile(r"^env \d+ \([^)]*\): ")


def serve_command(spec: EnvSpec, sessions: int, url: str) -> str:
    """The ``python -m agentrl.pool.serve`` line that serves ``spec`` with ``sessions`` sessions
    on ``url``'s port."""
    args = ["python", "-m", "agentrl.pool.serve", spec.name]
    if spec.kwargs:
        args.append("--kwargs")
        for k, v in spec.kwargs.items():
            text = v if isinstance(v, str) else json.dumps(v)  # YAML reads JSON values back
            args.append(f"{k}={text}")
    port = url.rsplit(":", 1)[-1].split("/")[0]
    args += ["--max-sessions", str(sessions)] + (["--port", port] if port.isdigit() else [])
    return " ".join(shlex.quote(a) for a in args)


def server_problem(health: Any, url: str, spec: EnvSpec, sessions: int) -> str | None:
    """Why the server at ``url`` (its ``/v1/health`` answer) cannot hold ``sessions`` envs of
    ``spec``, with the command to start instead; ``None`` when it can."""
    if not isinstance(health, dict) or health.get("protocol") != PROTOCOL:
        got = health.get("protocol") if isinstance(health, dict) else health
        return f"env server {url} speaks protocol {got!r}, not {PROTOCOL}"
    served = health.get("env")
    same_env = served == spec.name or str(served).endswith(f"/{spec.name}")
    same_kwargs = health.get("kwargs") == to_wire(dict(spec.kwargs))
    free = health.get("free_sessions")
    if not isinstance(free, int):  # a server of an earlier release
        free = int(health.get("max_sessions") or 0) - int(health.get("open_sessions") or 0)
    if same_env and same_kwargs and free >= sessions:
        return None
    if not same_env or not same_kwargs:
        try:
            kwargs = from_wire(health.get("kwargs"))
        except ValueError:
            kwargs = health.get("kwargs")
        what = f"serves {served} with kwargs {kwargs}, this run needs {spec.name} with kwargs {dict(spec.kwargs)}"
    else:
        what = (
            f"has {free} free sessions of {health.get('max_sessions')}, this run needs {sessions}"
        )
    return f"env server {url} {what}; start: {serve_command(spec, sessions, url)}"


def servers_problems(
    urls: Sequence[str],
    spec: EnvSpec,
    num_envs: int,
    token: str | None = None,
    timeout: float = 10.0,
) -> list[str]:
    """What keeps ``num_envs`` envs of ``spec`` (env ``i`` on ``urls[i % n]``) from starting on
    these servers, one line each (down, another env or kwargs, too few free sessions)."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    problems = []
    for g, url in enumerate(urls):
        url = url.rstrip("/")
        need = len(range(g, num_envs, len(urls)))
        try:
            r = httpx.get(url + "/v1/health", headers=headers, timeout=timeout)
            health = r.json()
            if r.status_code != 200:
                why = health.get("error") if isinstance(health, dict) else health
                raise ValueError(f"HTTP {r.status_code}: {why}")
        except (httpx.HTTPError, ValueError) as exc:
            problems.append(
                f"env server {url} cannot be used ({type(exc).__name__}: {exc}); start: "
                f"{serve_command(spec, need, url)}"
            )
            continue
        problem = server_problem(health, url, spec, need)
        if problem:
            problems.append(problem)
    return problems


class ServerError(RuntimeError):
    """A server that cannot be used for this call (down, late, an error status, a bad reply);
    ``kind`` is the pool's error kind it counts as (``crash``, ``timeout``, ``info``)."""

    def __init__(self, message: str, kind: str = "crash", status: int | None = None):
        super().__init__(message)
        self.kind, self.status = kind, status


class HTTPEnvPool(BasePool):
    """Many envs, each a session on one of the env servers at ``urls``.

    Args:
        env_fns: one :class:`~agentrl.pool.EnvSpec` per env; each server must serve that id and
            those kwargs (checked when the pool starts).
        urls: the servers' base URLs (``http://127.0.0.1:8600``); env ``i`` uses ``urls[i % n]``.
        step_timeout: seconds per env call (the servers'); ``None``: wait forever.
        token: bearer token the servers require (``None``: none).
        connect_timeout: seconds to connect to a server.
    """

    def __init__(
        self,
        env_fns: Sequence[EnvFn],
        urls: Sequence[str],
        *,
        step_timeout: float | None = 30.0,
        token: str | None = None,
        connect_timeout: float = 10.0,
    ):
        specs = list(env_fns)
        if not urls:
            raise ValueError("env.backend=http needs at least one server url (env.http.urls)")
        bad = [type(f).__name__ for f in specs if not isinstance(f, EnvSpec)]
        if bad:
            raise ValueError(f"env.backend=http builds envs by id: got {bad[0]}, not an EnvSpec")
        super().__init__(specs, num_groups=len(urls), step_timeout=step_timeout)
        self.urls = [u.rstrip("/") for u in urls][: self.num_groups]
        # A server's sessions die with it: the client cannot replay them elsewhere (the server
        # replays its own workers' episodes), so a failed server's episodes end, named.
        self._replayable = [False] * self.num_envs
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._connect = connect_timeout
        # idle connections closed before the server's keep-alive (uvicorn's 5 s) closes them: a
        # step sent on a connection the server drops at that moment would end its episode
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
        )
        self._threads = ThreadPoolExecutor(max_workers=max(1, self.num_groups))
        self._session: dict[int, str] = {}  # env index -> session id on its server
        self._workers: dict[int, int] = {}  # server -> its env processes (from /v1/health)
        for g in range(self.num_groups):
            self._check_server(g)

    # -- servers -----------------------------------------------------------------------------
    def _check_server(self, g: int) -> None:
        """The server serves this protocol, env id and kwargs, with a free session for each of
        this pool's envs on it (a mismatch is a config error, named in one line)."""
        try:
            h = self._request(g, "GET", "/v1/health", None, self._connect + 5)
        except ServerError as exc:
            raise RuntimeError(f"env server {self.urls[g]} cannot be used: {exc}") from None
        problem = server_problem(h, self.urls[g], self.env_fns[g], len(self._group_envs(g)))
        if problem:
            raise RuntimeError(problem)
        self._workers[g] = max(1, int(h.get("workers") or 1))

    def _request(self, g: int, method: str, path: str, body: Any, timeout: float | None) -> dict:
        url = self.urls[g]
        try:
            r = self._client.request(method, url + path, json=body, timeout=timeout)
        except httpx.TimeoutException:
            raise ServerError(
                f"env server {url} did not answer within {timeout:g} s", "timeout"
            ) from None
        except httpx.HTTPError as exc:
            raise ServerError(
                f"env server {url} cannot be reached: {type(exc).__name__}: {exc}"
            ) from None
        try:
            data = r.json()
        except ValueError:
            raise ServerError(
                f"env server {url} sent a reply that is not JSON (HTTP {r.status_code})"
            ) from None
        if r.status_code != 200:
            why = data.get("error") if isinstance(data, dict) else None
            raise ServerError(
                f"env server {url} answered HTTP {r.status_code}: {why or data}",
                status=r.status_code,
            )
        if not isinstance(data, dict):
            raise ServerError(f"env server {url} sent a malformed reply: not a JSON object")
        return data

    def _open(self, g: int, envs: list[int], timeout: float | None) -> None:
        missing = [i for i in envs if i not in self._session]
        if not missing:
            return
        spec = self.env_fns[g]
        body = {"env": spec.name, "kwargs": to_wire(dict(spec.kwargs)), "count": len(missing)}
        sids = self._request(g, "POST", "/v1/sessions", body, timeout).get("sessions")
        if not (
            isinstance(sids, list)
            and len(sids) == len(missing)
            and all(isinstance(s, str) for s in sids)
        ):
            raise ServerError(f"env server {self.urls[g]} sent a malformed sessions reply")
        self._session.update(zip(missing, sids))

    # -- the backend contract ------------------------------------------------------------------
    def _exchange(
        self,
        op: str,
        by_group: dict[int, list[tuple[int, tuple]]],
        budget: tuple[float | None, str],
    ) -> tuple[list[Reply], dict[int, WorkerFault]]:
        if not by_group:  # nothing to send (every env of the call is cut until its reset)
            return [], {}
        deadline = self._call_deadline(by_group)
        jobs = {
            g: self._threads.submit(self._serve, g, op, items, deadline)
            for g, items in by_group.items()
        }
        replies: list[Reply] = []
        failed: dict[int, WorkerFault] = {}
        for g, job in jobs.items():
            try:
                replies.extend(job.result())
            except ServerError as exc:
                failed[g] = WorkerFault(exc.kind, str(exc), None)
                for i in self._group_envs(g):  # its sessions are reopened on the next reset
                    self._session.pop(i, None)
                    if self._episodes[i] is not None:  # its live episodes end, naming the server
                        self._break(i, Fault(exc.kind, str(exc)))
        return replies, failed

    def _call_deadline(self, by_group: dict[int, list]) -> float | None:
        """``step_timeout`` per env of the call on the busiest server worker, plus :data:`GRACE`
        (the server's own deadline fires first and it still answers)."""
        if self.step_timeout is None:
            return None
        most = max(math.ceil(len(items) / self._workers.get(g, 1)) for g, items in by_group.items())
        return time.monotonic() + self.step_timeout * most + GRACE

    def _serve(
        self, g: int, op: str, items: list[tuple[int, tuple]], deadline: float | None
    ) -> list[Reply]:
        def left() -> float | None:
            if deadline is None:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServerError(f"env server {self.urls[g]} did not answer in time", "timeout")
            return remaining

        envs = [i for i, _ in items]
        if op != "step":  # sessions open on first use (a call may come before any reset)
            self._open(g, envs, left())
        elif any(i not in self._session for i in envs):
            raise ServerError(f"env server {self.urls[g]}: no open session (reset the env first)")
        body = {"items": [self._item(op, self._session[i], a) for i, a in items]}
        try:
            results = self._request(g, "POST", f"/v1/{op}", body, left()).get("results")
        except ServerError as exc:
            if op == "call" and exc.status == 403:  # a method the server does not allow: that
                return [(i, False, Fault("exception", str(exc))) for i in envs]  # call fails
            raise
        if not isinstance(results, list) or len(results) != len(items):
            raise ServerError(
                f"env server {self.urls[g]} sent a malformed reply: wrong result count"
            )
        return [(i, *self._value(g, op, r)) for i, r in zip(envs, results)]

    @staticmethod
    def _item(op: str, session: str, args: tuple) -> dict[str, Any]:
        if op == "reset":
            seed, options = args
            return {"session": session, "seed": seed, "options": to_wire(options)}
        if op == "step":
            return {"session": session, "action": args[0]}
        method, call_args = args
        return {"session": session, "method": method, "args": to_wire(list(call_args))}

    def _value(self, g: int, op: str, r: Any) -> tuple[bool, Any]:
        """``(ok, value)`` of one result, in the shape the in-process pool returns."""
        try:
            if not r["ok"]:  # the env raised, or its result cannot be sent (JSON)
                kind = "unpicklable" if "cannot be sent" in str(r["error"]) else "exception"
                return False, Fault(kind, f"env server {self.urls[g]}: {r['error']}")
            if op == "reset":
                return True, (r["observation"], from_wire(r["info"]))
            if op == "step":
                info = from_wire(r["info"])
                cut = self._server_cut(g, info) if r["truncated"] is True else None
                if cut is not None:
                    return False, cut
                return True, StepResult(
                    r["observation"], from_wire(r["reward"]), r["terminated"], r["truncated"], info
                )
            return True, from_wire(r["result"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ServerError(
                f"env server {self.urls[g]} sent a malformed {op} result ({type(exc).__name__}: {exc})"
            ) from None

    def _server_cut(self, g: int, info: Any) -> Fault | None:
        """The fault of an episode the server's own pool cut (its env raised, crashed, hung...),
        as this pool's: the client books it like any fault, and its error names this pool's env
        (``env 3 (Sokoban-v0): env server <url>: ...``), not the server's slot."""
        if not isinstance(info, dict) or info.get("error_kind") not in ERROR_KINDS:
            return None
        # the server's error_detail is its fault's whole text; its error, that text's first line
        # after the server's own "env <slot> (<name>): "
        text = info.get("error_detail") or _SLOT_PREFIX.sub("", str(info.get("error", "")), count=1)
        return Fault(str(info["error_kind"]), f"env server {self.urls[g]}: {text or 'episode cut'}")

    def worker_pids(self) -> list[int]:
        """None here: the envs live in the servers' processes."""
        return []

    def close(self) -> None:
        by_server: dict[int, list[str]] = {}
        for i, sid in self._session.items():
            by_server.setdefault(i % self.num_groups, []).append(sid)
        for g, sids in by_server.items():
            with contextlib.suppress(ServerError):
                self._request(g, "POST", "/v1/close", {"sessions": sids}, self._connect + 5)
        self._session.clear()
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._client.close()
