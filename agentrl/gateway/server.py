"""The OpenAI-compatible gateway: ``/v1/models``, ``/v1/chat/completions`` and the session API.

:class:`Gateway` serves a :class:`~agentrl.backends.base.Backend` (any engine: the trainer's
in-process one, a vLLM engine, a fleet) on a loopback port, from a thread of the process that
owns the backend (the trainer starts one for ``env=agent``; ``python -m agentrl.gateway`` runs
one on its own). It renders prompts with the policy's chat template, samples token in / token
out, reads tool calls with the tool-call format's reader and records every call
(:mod:`agentrl.gateway.sessions`).

Which session a call belongs to: the ``X-Session-Id`` header when present, else the API key
(``Authorization: Bearer <key>``). The API key is the default because every OpenAI client sends
it and takes it from ``OPENAI_API_KEY`` or one constructor argument, so a program that was never
written for agentrl is bound to its episode without a code change; a header needs the program to
set it. Routes:

- ``GET /v1/models``: the one model;
- ``POST /v1/chat/completions``: OpenAI's chat completions (streaming or not: a streamed reply
  that cannot become a tool call, with no tools or ``tool_choice="none"``, is sent in pieces as
  the engine samples it where the engine streams (the Hugging Face and vLLM engines, the
  fleet); otherwise in one piece once sampled);
- ``POST /v1/sessions/{name}/reward``: the session's reward (``{"reward": r}``, optional
  ``step_rewards`` and ``state_keys``, one per call, and ``success``);
- ``GET /v1/sessions/{name}``: the session's record (every call's ids, log-probs, version, ...).

Errors come back as OpenAI's error object (``{"error": {"message", "type", "param"}}``): 400 for
a malformed request, 401 for a call without a session (or an unknown one, when the trainer opens
sessions), 409 for a call into a closed session, 500 when the engine fails.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
import threading
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentrl.envs.webguard import RequestGuard, allowed_hosts

from ..backends.base import Backend, SamplingParams
from ..backends.trie import allowed_per_position
from ..rollout.tools import detect_syntax
from .chat import BadRequest, Call, ChatRequest, Renderer, Reply, parse_request, read_reply
from .engine import Engine
from .sessions import CallRecord, Session, SessionError, Sessions, outcome_of
from .strict import allowed_calls

__all__ = ["SESSION_HEADER", "Gateway"]

log = logging.getLogger(__name__)

#: The header that names a call's session, over the API key.
SESSION_HEADER = "X-Session-Id"
#: The largest request body (bytes): a long agent dialogue with its tools is well under it.
MAX_BODY = 16 * 2**20


try:  # orjson (vLLM's dependency) reads and writes the bodies several times faster
    import orjson

    def _loads(data: bytes) -> Any:
        return orjson.loads(data)

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

except ImportError:  # pragma: no cover - the standard library's

    def _loads(data: bytes) -> Any:
        return json.loads(data)

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


class _JSON(Response):
    """A JSON response written with :func:`_dumps`."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return _dumps(content)


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
            409: "conflict_error"}.get(status, "server_error")  # fmt: skip
    return JSONResponse({"error": {"message": message, "type": kind, "param": param,
                                   "code": None}}, status_code=status)  # fmt: skip


def session_name(request: Request) -> str | None:
    """The session a request names: ``X-Session-Id``, else the bearer token."""
    header = request.headers.get(SESSION_HEADER, "").strip()
    if header:
        return header
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return None


class Gateway:
    """An OpenAI-compatible server in front of ``backend`` (see the module docstring).

    Args:
        backend: the policy's engine.
        tokenizer: the policy's tokenizer (its chat template renders the prompts).
        model_name: the id ``/v1/models`` lists (any ``model`` a request names is accepted).
        open_sessions: a call naming an unknown session opens it (standalone use); ``False``:
            only sessions opened with :meth:`open_session` take calls (the trainer's).
        max_tokens: the response cap of a call that sets none.
        max_tokens_limit: the largest cap a call may ask for (more is a 400): what one request
            may cost the engine.
        hosts: host names the server answers to besides those of the address it binds
            (:func:`agentrl.envs.webguard.allowed_hosts`; ``"*"``: any).
        max_body: the largest request body in bytes (more is a 413).
        seed: the sampling seed of calls in sessions that pin none and requests that set none.
        syntax: the tool-call syntax (default: read from the chat template).
        version: the weights' version, for engines that do not report it per generation.
        switch_interval: the interpreter's thread switch interval (s) while the gateway serves
            (``sys.setswitchinterval``; restored on :meth:`close`; ``None``: left as it is). The
            HTTP loop and an in-process engine share one interpreter, and at the default 5 ms the
            loop waits for the engine thread's Python between every step of a request; 0.5 ms
            lets it take and answer requests while the engine samples
            (docs/benchmarks.md, "Gateway overhead per call").
        stream_interval_s: the least time between two pieces of a streamed reply (each piece
            takes the interpreter from the engine's thread; docs/benchmarks.md, "Streamed
            replies").
    """

    def __init__(
        self,
        backend: Backend,
        tokenizer: Any,
        *,
        model_name: str = "agentrl-policy",
        open_sessions: bool = True,
        max_tokens: int = 256,
        max_tokens_limit: int = 8192,
        hosts: Iterable[str] = (),
        max_body: int = MAX_BODY,
        seed: int = 0,
        syntax: str | None = None,
        version: Callable[[], int] | None = None,
        switch_interval: float | None = 0.0005,
        stream_interval_s: float = 0.01,
    ):
        self.tokenizer, self.model_name = tokenizer, model_name
        template = getattr(tokenizer, "chat_template", None)
        self.syntax = syntax or detect_syntax(template)
        self.renderer = Renderer(tokenizer, self.syntax)
        self.engine = Engine(backend)
        self.sessions = Sessions(open_sessions)
        self.max_tokens, self.seed = int(max_tokens), int(seed)
        self.max_tokens_limit, self.max_body = int(max_tokens_limit), int(max_body)
        self.hosts = tuple(hosts)
        self.version = version or (lambda: 0)
        self.app = Starlette(
            routes=[
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/sessions/{name:path}/reward", self._reward, methods=["POST"]),
                Route("/v1/sessions/{name:path}", self._session, methods=["GET"]),
                Route("/health", lambda _: JSONResponse({"ok": True}), methods=["GET"]),
            ]
        )
        self.switch_interval = switch_interval
        self.stream_interval_s = float(stream_interval_s)  # the least time between two pieces
        self._saved_interval: float | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0: a free port) from a thread; returns the base URL
        (``http://host:port/v1``)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        # Host and Origin checks (no web page reaches it, nor a rebound DNS name), a body limit
        app = RequestGuard(self.app, hosts=allowed_hosts(host, self.hosts),
                           max_body=self.max_body, name="agentrl gateway")  # fmt: skip
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="gateway", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the gateway could not start on {host}:{port}")
            time.sleep(0.01)
        self.base_url = f"http://{host}:{sock.getsockname()[1]}/v1"
        if self.switch_interval is not None and self._saved_interval is None:
            self._saved_interval = sys.getswitchinterval()
            sys.setswitchinterval(self.switch_interval)
        return self.base_url

    def close(self) -> None:
        """Stop serving and stop the engine thread (the backend stays open: its owner closes it)."""
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._server = None
        self.engine.close()
        if self._saved_interval is not None:
            sys.setswitchinterval(self._saved_interval)
            self._saved_interval = None

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- sessions ----------------------------------------------------------------------------------
    def open_session(self, name: str, **pinned: Any) -> Session:
        """Open session ``name``; ``pinned`` (``seed``, ``temperature``, ``top_p``,
        ``max_tokens``) overrides what its calls ask for (the trainer samples every episode at
        its own temperature, which the learner's ratio assumes)."""
        return self.sessions.open(name, **pinned)

    def close_session(self, name: str) -> Session:
        return self.sessions.close(name)

    # -- routes ------------------------------------------------------------------------------------
    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": self.model_name, "object": "model", "created": 0, "owned_by": "agentrl"}]})  # fmt: skip

    async def _session(self, request: Request) -> Response:
        try:
            s = self.sessions.get(request.path_params["name"])
        except SessionError as exc:
            return _error(404, exc.message)
        return _JSON(s.to_json())

    async def _reward(self, request: Request) -> Response:
        try:
            s = self.sessions.get(request.path_params["name"])
        except SessionError as exc:
            return _error(404, exc.message)
        try:
            body = await request.json()
            s.outcome = outcome_of(body)
        except ValueError as exc:
            return _error(400, f"bad reward: {exc}")
        return JSONResponse({"ok": True})

    async def _chat(self, request: Request) -> Response:
        name = session_name(request)
        if not name:
            return _error(401, "name a session: set the API key (Authorization: Bearer <session>) "
                               f"or the {SESSION_HEADER} header")  # fmt: skip
        try:
            body = _loads(await request.body())
        except ValueError:
            return _error(400, "the body is not JSON")
        try:
            session = self.sessions.get(name, create=True)
            req = parse_request(body)
            if req.stream and self._streams_live(req):
                return await self._live(session, req)
            record = await self.complete(session, req)
        except BadRequest as exc:
            return _error(400, str(exc), exc.param)
        except SessionError as exc:
            return _error(exc.status, exc.message)
        except Exception as exc:  # the engine failed: the program gets the reason
            return _error(500, f"generation failed: {type(exc).__name__}: {exc}")
        if req.stream:
            return StreamingResponse(self._sse(record, req), media_type="text/event-stream")
        return _JSON(self._completion(record))

    def _streams_live(self, req: ChatRequest) -> bool:
        """A streamed reply goes out in pieces as sampled where the engine streams and the
        reply is its text as sampled: no tools, or ``tool_choice="none"`` (with tools a reply
        is a call or text, known only once the whole response is read)."""
        return self.engine.streams and (not req.tools or req.tool_choice == "none")

    async def _live(self, session: Session, req: ChatRequest) -> Response:
        """Start the call and answer with its stream once the engine has taken it: an error
        before the first token (a bad request, a closed session) is still an HTTP error."""
        tokens = _Tokens(asyncio.get_running_loop())
        task = asyncio.ensure_future(self.complete(session, req, sink=tokens.put))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # always retrieved
        await tokens.wait(task)
        if task.done() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        return StreamingResponse(self._sse_live(task, tokens, req), media_type="text/event-stream")

    def _settled(self, ids: list[int], stops: tuple[str, ...]) -> tuple[str, bool]:
        """The text of the tokens so far that the reply will certainly begin with, and whether
        more may follow: none once a ``stop`` string appeared (the record's reply says where it
        cuts); a tail that may be the start of a stop string, or of a character whose bytes are
        not all sampled yet, waits."""
        body = ids[:-1] if ids and ids[-1] == self.renderer.stop_id else ids
        text = self.tokenizer.decode(body, skip_special_tokens=True)
        if any(s in text for s in stops):
            return "", False
        hold = 0
        for s in stops:
            hold = max([hold] + [k for k in range(1, len(s)) if text.endswith(s[:k])])
        return text[: len(text) - hold].rstrip("\ufffd"), True

    async def _sse_live(
        self, task: asyncio.Future, tokens: _Tokens, req: ChatRequest
    ) -> AsyncIterator[str]:
        """OpenAI's stream while the engine samples: the role, the text as it settles (see
        :meth:`_settled`; at most a piece every ``stream_interval_s``, so the HTTP loop takes
        the interpreter from the engine's thread that often at most), then what the recorded
        reply has beyond it, the finish and the usage. The pieces add up to the reply a plain
        call gets."""
        chunk = self._chunker()
        yield chunk({"role": "assistant", "content": ""})
        ids: list[int] = []
        sent, live = "", True
        while not task.done():
            await tokens.wait(task)
            ids.extend(tokens.take())
            if live and not task.done():
                text, live = self._settled(ids, req.stop)
                if len(text) > len(sent) and text.startswith(sent):
                    yield chunk({"content": text[len(sent) :]})
                    sent = text
                    await asyncio.wait({task}, timeout=self.stream_interval_s)
        try:
            r: CallRecord = task.result()
        except Exception as exc:  # noqa: BLE001 - the stream has begun: the error is an event
            why = exc.message if isinstance(exc, SessionError) else (
                f"generation failed: {type(exc).__name__}: {exc}")  # fmt: skip
            error = {"message": why, "type": "server_error", "param": None}
            yield f"data: {_dumps({'error': error}).decode()}\n\n"
            return
        content = r.reply.content or ""
        if content.startswith(sent):
            if len(content) > len(sent):
                yield chunk({"content": content[len(sent) :]})
        else:  # the tokenizer decodes a prefix of the tokens to other text: cannot be taken back
            log.warning("gateway: the pieces streamed for call %d are not the start of its "
                        "reply's text (the tokenizer decodes a prefix differently)", r.index)  # fmt: skip
        yield chunk({}, r.reply.finish_reason)
        if req.include_usage:
            yield chunk.usage(self._usage(r))
        yield "data: [DONE]\n\n"

    # -- one call ----------------------------------------------------------------------------------
    async def complete(
        self,
        session: Session,
        req: ChatRequest,
        sink: Callable[[list[int]], None] | None = None,
    ) -> CallRecord:
        """Render, sample and record one call of ``session`` (the prefix rule included);
        ``sink`` gets the response's tokens as they are sampled, where the engine streams."""
        t0 = time.perf_counter()
        base = session.base(req.messages, req.tools)
        if base is not None:
            prev, new = base
            prompt = self.renderer.extend(
                prev.prompt_ids, prev.response_ids, new, req.tools, req.tools_key
            )
        else:
            prompt = self.renderer.full(req.messages, req.tools, req.tools_key)
        if req.max_tokens is not None and req.max_tokens > self.max_tokens_limit:
            raise BadRequest(f"max_tokens may be at most {self.max_tokens_limit}, got "
                             f"{req.max_tokens}", "max_tokens")  # fmt: skip
        cap = req.max_tokens or self.max_tokens
        if session.max_tokens is not None:
            cap = min(cap, session.max_tokens)
        seed = session.seed if session.seed is not None else req.seed
        index = session.next_request()
        request_id = 0 if seed is not None and session.seed is None else (
            zlib.crc32(f"{session.name}/{index}".encode()) & 0x7FFFFFFF)  # fmt: skip
        stop = () if self.renderer.stop_id is None else (self.renderer.stop_id,)
        sampling = SamplingParams(
            max_new_tokens=int(cap),
            temperature=session.temperature if session.temperature is not None else req.temperature,
            top_p=session.top_p if session.top_p is not None else req.top_p,
            stop_token_ids=stop,
            seed=self.seed if seed is None else int(seed),
        )
        calls = allowed_calls(req.tools, req.tool_choice, req.tool_name, self.syntax)
        seqs = None if calls is None else [self.renderer.response_ids(c[2]) for c in calls]
        gen = await asyncio.wrap_future(
            self.engine.submit(prompt, sampling, request_id, session.name, seqs, sink)
        )
        ids, logprobs, finish = list(gen.token_ids), list(gen.logprobs), gen.finish_reason
        if seqs is None:
            text, ids, logprobs, finish = self._stop_strings(ids, logprobs, finish, req.stop)
            reply = read_reply(text, finish, req.tools, req.tool_choice, self.syntax)
            allowed = None
        else:  # constrained: the response is one of the allowed calls (or cut at the cap)
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            reply = self._constrained_reply(ids, seqs, calls, text, finish, req)
            allowed = allowed_per_position(seqs, ids)
        with session.lock:
            if session.closed:
                raise SessionError(
                    f"session {session.name[:60]!r} is closed (its episode has ended)", 409
                )
            extends = session.extends(prompt)
            if not extends:
                session.prefix_breaks += 1
                self.sessions.prefix_breaks += 1
            record = CallRecord(
                index=len(session.calls), prompt_ids=prompt, response_ids=ids, logprobs=logprobs,
                policy_version=int(gen.extra.get("policy_version", self.version())),
                engine_finish=finish, text=text, reply=reply, messages=req.messages,
                tools=req.tools, extends=extends, reused=base is not None, allowed=allowed,
                latency_s=time.perf_counter() - t0,
                request={"temperature": req.temperature, "top_p": req.top_p,
                         "max_tokens": req.max_tokens, "seed": req.seed,
                         "tool_choice": req.tool_choice, "tool_name": req.tool_name,
                         "stop": list(req.stop)},
                sampling={"seed": sampling.seed, "request_id": request_id,
                          "temperature": sampling.temperature, "top_p": sampling.top_p,
                          "max_new_tokens": sampling.max_new_tokens,
                          "allowed_calls": None if calls is None else len(calls)},
            )  # fmt: skip
            session.add(record)
        return record

    def _constrained_reply(self, ids, seqs, calls, text, finish, req) -> Reply:
        """The call whose allowed token sequence the response is; a response cut at the token
        cap is text (``finish_reason`` length), as read from its text."""
        for seq, (name, args, _) in zip(seqs, calls):
            if tuple(ids) == seq:
                return Reply(None, [Call(f"call_{uuid.uuid4().hex[:24]}", name, dict(args))],
                             "tool_calls")  # fmt: skip
        return read_reply(text, finish, req.tools, req.tool_choice, self.syntax)

    def _stop_strings(
        self, ids: list[int], logprobs: list[float], finish: str, stops: tuple[str, ...]
    ) -> tuple[str, list[int], list[float], str]:
        """The reply text (stop token removed) and, with ``stop`` strings, the response cut after
        the token that completed the first one (its text before the stop string is the reply)."""
        body = ids[:-1] if ids and ids[-1] == self.renderer.stop_id and finish == "stop" else ids
        text = self.tokenizer.decode(body, skip_special_tokens=True)
        hits = [text.find(s) for s in stops if s in text]
        if not hits:
            return text, ids, logprobs, finish
        for k in range(1, len(body) + 1):
            part = self.tokenizer.decode(body[:k], skip_special_tokens=True)
            at = [part.find(s) for s in stops if s in part]
            if at:
                return part[: min(at)], ids[:k], logprobs[:k], "stop"
        return text[: min(hits)], ids, logprobs, "stop"

    # -- replies -----------------------------------------------------------------------------------
    def _usage(self, r: CallRecord) -> dict[str, int]:
        p, c = len(r.prompt_ids), len(r.response_ids)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def _completion(self, r: CallRecord) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [{"index": 0, "message": r.reply.message(), "logprobs": None,
                         "finish_reason": r.reply.finish_reason}],
            "usage": self._usage(r),
        }  # fmt: skip

    def _chunker(self) -> _Chunker:
        return _Chunker({"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
                         "created": int(time.time()), "model": self.model_name})  # fmt: skip

    async def _sse(self, r: CallRecord, req: ChatRequest) -> AsyncIterator[str]:
        """The reply as OpenAI's stream, in one piece once sampled: the role, the content,
        each call, then the finish."""
        chunk = self._chunker()
        yield chunk({"role": "assistant", "content": ""})
        if r.reply.content:
            yield chunk({"content": r.reply.content})
        for i, call in enumerate(r.reply.message().get("tool_calls", [])):
            yield chunk({"tool_calls": [{"index": i, **call}]})
        yield chunk({}, r.reply.finish_reason)
        if req.include_usage:
            yield chunk.usage(self._usage(r))
        yield "data: [DONE]\n\n"


class _Tokens:
    """A streamed call's tokens, put by the engine's thread and taken by the HTTP loop, which
    is woken only when it waits for them (once per piece, not per token)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.lock = loop, threading.Lock()
        self.ids: list[int] = []
        self.waiting = False
        self.ready = asyncio.Event()

    def put(self, ids: list[int]) -> None:  # on the engine's thread
        with self.lock:
            self.ids.extend(ids)
            wake, self.waiting = self.waiting, False
        if wake:
            self.loop.call_soon_threadsafe(self.ready.set)

    def take(self) -> list[int]:
        with self.lock:
            ids, self.ids = self.ids, []
        return ids

    async def wait(self, task: asyncio.Future) -> None:
        """Until tokens are there or ``task`` is done."""
        with self.lock:
            if self.ids:
                return
            self.ready.clear()
            self.waiting = True
        ready = asyncio.ensure_future(self.ready.wait())
        try:
            await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            with self.lock:
                self.waiting = False


class _Chunker:
    """Server-sent events of one streamed reply (OpenAI's ``chat.completion.chunk``)."""

    def __init__(self, head: dict[str, Any]):
        self.head = head

    def __call__(self, delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return f"data: {_dumps({**self.head, 'choices': [choice]}).decode()}\n\n"

    def usage(self, usage: dict[str, int]) -> str:
        return f"data: {_dumps({**self.head, 'choices': [], 'usage': usage}).decode()}\n\n"
