"""Rollouts on a fleet of vLLM OpenAI servers apart from the trainer (``rollout=fleet``).

:class:`FleetBackend` implements :class:`~agentrl.backends.base.Backend` over N vLLM servers,
launched here (``rollout.fleet.servers``, each ``python -m agentrl.serve MODEL --fleet-member``
in its own process session) or started elsewhere (``rollout.fleet.urls``). What the in-process
engine guarantees holds over HTTP:

- token in, token out: each request goes to vLLM's ``/inference/v1/generate`` with the prompt's
  token ids and vLLM's own sampling parameters (the in-process engine's, built by the same
  code: seed, stop tokens, ``ignore_eos``, ``logprobs=0``, the allowed sequences of the trie
  logits processor in ``extra_args``); the reply carries the response's token ids, the engine's
  processed log-prob of each, and the weight version that sampled each token;
- weights travel through vLLM's weight-transfer API (:mod:`agentrl.backends.fleet_transfer`):
  each server is paused (its prefix cache cleared), receives the learner's tensors, takes the
  new version label with ``/finish_weight_update`` and resumes. Version ``v`` is the ``v``-th
  sync (0: the weights the servers started with); every :class:`Generation` records it in
  ``extra["policy_version"]``;
- a server holding other weights is refused before it samples for training: at attach, a
  seeded probe's log-probs must match the trainer's own model (another model, other weights);
  at every call, the server's ``/weight_info`` must be the fleet's version, and every reply's
  version spans too (a server someone else updated, one a sync missed);
- streaming (``generate(..., on_tokens=...)``, the gateway's streamed replies): a free request
  is sent with vLLM's ``stream`` and its tokens handed over chunk by chunk; a replay hands over
  only the tokens past those already sent (the same seed gives the same tokens on the same
  weights).

Routing: the calls of one conversation (``SamplingParams.sessions``, an episode) go to the
server that served its first call while that server lives (its prefix cache holds the growing
context); other requests go to the server with the fewest outstanding tokens (prompt plus token
cap of the requests in flight).

Keep mode (``rollout.partial_rollouts``): a sync freezes the requests in flight in each
server's queue (``/pause?mode=keep``), drops their cache computed with the old weights and
resumes them on the new ones; each reply's version spans give every token's version
(``extra["token_versions"]``; ``extra["policy_version"]`` is the oldest).

Faults: a request that fails (connection refused or reset, a timeout, an HTTP error) is replayed
on another server with the same body, seed included, so its result is the one the first server
would have given (on the same server, up to ``max_failures`` tries, where it still answers and no
other can take it); one that timed out is first aborted on its server (``/abort_requests``, best
effort). A server launched here whose process exited, or whose ``/health`` no longer answers
(it is stopped), is relaunched by a restart thread (the same command, then the fleet's weights
and version) and rejoins the rotation; each failed relaunch counts as a failure of it. A server
given by url that is gone leaves the fleet; one that answers but fails
``rollout.fleet.max_failures`` calls (or relaunches) in a row stops the run with one line naming
it, as does a fleet with no server left. :meth:`FleetBackend.close`
(also at interpreter exit) stops every server this process launched, with their engine
processes (their own process group).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import logging
import math
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import distributed as D
from .base import BackendError, Generation, Handover, SamplingParams, TokenSink
from .fleet_lora import merged_state, wire_adapter
from .fleet_transfer import BACKEND, HTTPClient, TransferError, open_sender, send, state_source
from .remote import quiet_http_logs
from .trie import ALLOWED_KEY, Trie, leaf_only_tokens, trie_prefix
from .vllm_server import MEMBER_ENV, member_command, member_placement, member_transfer
from .weight_names import checkpoint_items

__all__ = ["FleetBackend", "FleetError", "Server"]

log = logging.getLogger(__name__)
PROBE_PROMPT = (1, 5, 9, 13, 17, 21, 25, 29)
MAX_SESSIONS = 100_000  # conversations remembered for affinity (oldest forgotten first)
ABORT_TIMEOUT = 2.0  # seconds for the best-effort abort of a timed-out request


class FleetError(BackendError):
    """The fleet cannot go on: one line naming the server and why."""


#: Seconds an idle connection to a server is kept (below vLLM's ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``,
#: 5 s by default: a request sent on a connection the server closes at that moment is dropped).
KEEPALIVE_S = 2.0


class _RequestFailed(Exception):
    """One request failed on one server (replayed elsewhere); ``timed_out``: it ran past the
    request timeout (the server may still be computing it)."""

    def __init__(self, why: str, timed_out: bool = False):
        super().__init__(why)
        self.timed_out = timed_out


def _die_with_parent() -> None:
    """In a launched server, before it runs: SIGTERM when the trainer dies, even by SIGKILL
    (Linux's parent-death signal, sent when the thread that launched it ends: the fleet is
    built on the trainer's main thread; elsewhere than Linux nothing)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class _DaemonPool:
    """``map`` over daemon threads: a request stuck on a half-dead server (one that keeps its
    connection open and never answers) cannot hold the interpreter's exit, as the joined
    threads of a ``ThreadPoolExecutor`` would, for up to ``rollout.fleet.request_timeout``."""

    def __init__(self, workers: int):
        self._jobs: queue.Queue = queue.Queue()
        self._threads = [
            threading.Thread(target=self._work, name=f"fleet-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, arg, future = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(arg))
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)

    def map(self, fn: Any, items: Sequence[Any]) -> list[Any]:
        futures = [Future() for _ in items]
        for item, future in zip(items, futures, strict=True):
            self._jobs.put((fn, item, future))
        return [f.result() for f in futures]

    def shutdown(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` names them ([] on CPU)."""
    if not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        return [g.strip() for g in listed.split(",") if g.strip()]
    return [str(g) for g in range(torch.cuda.device_count())]


@dataclass
class Server:
    """One member of the fleet, as the trainer sees it."""

    url: str  # the server root (no /v1)
    proc: subprocess.Popen | None = None  # launched here: its process (group leader)
    log_path: Path | None = None
    alive: bool = True
    failures: int = 0  # calls in a row in which it failed a request
    outstanding: int = 0  # tokens of the requests in flight (prompt + cap)
    version: int = 0
    sender: Any = None  # the trainer's weight-transfer engine for it (opened at the first sync)
    why_out: str = ""
    served: int = 0  # requests answered
    cmd: list[str] | None = None  # launched here: its command (a restart runs it again)
    restarting: bool = False  # its process died: being launched again (out of the rotation)
    starts: int = 0  # launches so far (a request that failed on one launch may use the next)
    aborted: int = 0  # timed-out requests it acknowledged aborting
    env: dict[str, str] = field(default_factory=dict)  # launched here: its placement (GPU, cores)
    client: HTTPClient = field(init=False)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/").removesuffix("/v1")
        self.client = HTTPClient(self.url)

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def log_tail(self, n: int = 1500) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return ""
        return " ".join(self.log_path.read_text(errors="replace")[-n:].split())


def _post(http: Any, url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One JSON POST on the fleet's kept-alive connections (``http``: an ``httpx.Client``)."""
    import httpx

    try:
        reply = http.post(url, json=body, timeout=timeout)
    except httpx.TransportError as exc:  # refused, reset, timed out
        timed_out = isinstance(exc, httpx.TimeoutException)
        raise _RequestFailed(f"{type(exc).__name__}: {exc}", timed_out) from None
    if reply.status_code != 200:
        detail = " ".join(reply.text.split())[:300]
        raise _RequestFailed(f"HTTP {reply.status_code}: {detail}")
    try:
        return reply.json()
    except ValueError as exc:
        raise _RequestFailed(f"a reply that is not JSON: {exc}") from None


def _post_stream(
    http: Any, url: str, body: dict[str, Any], timeout: float, sink: Callable[[list[int]], None]
) -> dict[str, Any]:
    """The same POST with ``stream: true``: vLLM's token chunks, the tokens so far handed to
    ``sink`` after each, gathered into the reply a plain POST gives (token ids, log-probs,
    the final chunk's version spans and finish reason). ``timeout`` bounds the whole reply."""
    import httpx

    deadline = time.monotonic() + timeout
    tokens: list[int] = []
    logprobs: list[Any] = []
    last: dict[str, Any] = {}
    try:
        with http.stream("POST", url, json={**body, "stream": True}, timeout=timeout) as reply:
            if reply.status_code != 200:
                detail = " ".join(reply.read().decode(errors="replace").split())[:300]
                raise _RequestFailed(f"HTTP {reply.status_code}: {detail}")
            for line in reply.iter_lines():
                if time.monotonic() > deadline:
                    raise _RequestFailed(f"ReadTimeout: the stream ran past {timeout:g} s", True)
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                try:
                    event = json.loads(line[6:])
                except ValueError as exc:
                    raise _RequestFailed(f"a stream event that is not JSON: {exc}") from None
                if "error" in event:
                    raise _RequestFailed(f"the stream failed: {str(event['error'])[:300]}")
                for choice in event.get("choices") or ():
                    tokens.extend(int(t) for t in choice.get("token_ids") or ())
                    logprobs.extend((choice.get("logprobs") or {}).get("content") or ())
                    last = choice
                sink(tokens)
    except httpx.TransportError as exc:  # refused, reset, timed out
        raise _RequestFailed(
            f"{type(exc).__name__}: {exc}", isinstance(exc, httpx.TimeoutException)
        ) from None
    if not last.get("finish_reason"):
        raise _RequestFailed("the stream ended before its reply finished")
    return {"choices": [{**last, "token_ids": tokens, "logprobs": {"content": logprobs}}]}


def _get_ok(url: str, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.status == 200
    except (OSError, urllib.error.URLError):
        return False


def _model_dtype(model_path: str, dtype: str) -> str:
    """``auto``: the checkpoint's own dtype (vLLM's ``auto`` may run float32 in bfloat16)."""
    if dtype != "auto":
        return dtype
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return dtype
    saved = cfg.get("dtype") or cfg.get("torch_dtype")
    return saved if saved in ("float32", "bfloat16", "float16") else dtype


class FleetBackend:
    """Generation on a fleet of vLLM servers (see the module docstring). It streams
    (``generate(..., on_tokens=...)``).

    Args:
        model_path: the run's model folder (what launched servers serve).
        model: the trainer's policy module, for the attach probe (``None``: no probe).
        servers / urls: launch ``servers`` servers here, or use those at ``urls``.
        max_failures: failed calls in a row after which a live server stops the run.
        transfer: weight-transfer engine (``auto``, ``agentrl_gloo``, ``nccl``).
        trainer_address: the address servers reach the trainer at for weight transfer.
        dtype, max_model_len, kv_cache_memory_bytes, max_num_seqs: each launched server's.
        request_timeout, startup_timeout, concurrency: seconds per request, seconds to start,
            requests in flight over the fleet.
        probe_tolerance: the largest log-prob difference the attach probe accepts.
        keep_in_flight: syncs keep the requests in flight (``rollout.partial_rollouts``): the
            servers pause with vLLM's ``keep`` mode and resume them on the new weights, so a
            reply may span two versions (``extra["token_versions"]``); otherwise a sync waits
            for them to finish.
        sender: this process pushes the weights (``False``: another torchrun rank does; a sync
            here waits for the servers to hold the next version).
        placement: ``(first, step, total)``: launched server ``j`` is server ``first + j * step``
            of the ``total`` launched on this machine (each torchrun rank launching its own
            share), which picks its GPU or its slice of the cores (``None``: ``j`` of ``servers``).
    """

    streams = True

    def __init__(
        self,
        model_path: str,
        *,
        model: torch.nn.Module | None = None,
        servers: int = 2,
        urls: Sequence[str] = (),
        max_failures: int = 3,
        transfer: str = "auto",
        trainer_address: str = "127.0.0.1",
        dtype: str = "auto",
        max_model_len: int | None = None,
        kv_cache_memory_bytes: int | None = None,
        max_num_seqs: int = 256,
        request_timeout: float = 300.0,
        startup_timeout: float = 900.0,
        concurrency: int = 64,
        extra_args: Sequence[str] = (),
        probe_tolerance: float | None = None,
        keep_in_flight: bool = False,
        sender: bool = True,
        placement: tuple[int, int, int] | None = None,
    ) -> None:
        self.model_path = str(model_path)
        self.max_failures = int(max_failures)
        self.transfer = member_transfer(transfer, cpu=None if transfer == "auto" else True)
        self.trainer_address = trainer_address
        self.request_timeout = float(request_timeout)
        self.keep_in_flight = bool(keep_in_flight)
        self.sender = bool(sender)
        self.version = 0
        self._syncing = False  # a sync is under way (keep mode: servers may be one ahead)
        self.last_sync_seconds: float | None = None
        self.last_sync_bytes: int | None = None
        self.tokens_generated = 0
        self.replayed = 0  # requests replayed on another server after a failure
        self._sessions: collections.OrderedDict[str, Server] = collections.OrderedDict()
        self._lock = threading.Condition()  # routing, liveness (a restarted server notifies)
        self._sync_lock = threading.Lock()  # one weight push at a time (syncs and restarts)
        self._closed = False
        self._fatal: FleetError | None = None  # a restart that failed max_failures times
        self.startup_timeout = float(startup_timeout)
        self._restarts: queue.Queue = queue.Queue()
        self._restarter: threading.Thread | None = None
        self.restarted = 0  # servers relaunched and back in the rotation
        self._source = state_source()
        self._logdir: Path | None = None
        self._keep_logs = False  # a server failed: its log stays for the user
        self.servers: list[Server] = []
        self._executor = _DaemonPool(int(concurrency))
        import httpx  # kept-alive connections to every server

        # idle connections closed before the server's own keep-alive (uvicorn's, 5 s in vLLM)
        # closes them, so a request rarely goes out on a connection the server is dropping
        limits = httpx.Limits(max_connections=int(concurrency) + 4,
                              keepalive_expiry=KEEPALIVE_S)  # fmt: skip
        self._http = httpx.Client(limits=limits, trust_env=False)
        quiet_http_logs()  # httpx logs a line per request otherwise
        atexit.register(self.close)
        try:
            if urls:
                self.servers = [Server(u) for u in urls]
            else:
                self._launch(int(servers), dtype, max_model_len, kv_cache_memory_bytes,
                             max_num_seqs, list(extra_args), placement)  # fmt: skip
            self._wait_up(float(startup_timeout))
            self.max_model_len = self._check_cards()
            if model is not None:
                self._probe(model, probe_tolerance)
            for s in self.servers:  # version 0: the weights the servers start with
                if self.sender:
                    s.client.set_weight_version("0")
        except BaseException:
            self._keep_logs = True
            self.close()
            raise

    @classmethod
    def from_config(cls, cfg: Any, *, model_path: str | None, model: Any = None) -> FleetBackend:
        """Build from the ``rollout`` config group (its engine keys and ``fleet``)."""
        if not model_path:
            raise ValueError("rollout=fleet needs a local model folder (model.name)")
        get = cfg.get if hasattr(cfg, "get") else lambda k, d=None: getattr(cfg, k, d)
        fleet = dict(get("fleet", None) or {})
        kw = dict(
            max_failures=int(fleet.get("max_failures", 3)),
            transfer=str(fleet.get("transfer", "auto")),
            trainer_address=str(fleet.get("trainer_address", "127.0.0.1")),
            request_timeout=float(fleet.get("request_timeout", 300.0)),
            startup_timeout=float(fleet.get("startup_timeout", 900.0)),
            concurrency=int(fleet.get("concurrency", 64)),
            extra_args=list(fleet.get("extra_args") or ()),
            dtype=str(get("dtype", "auto")),
            max_model_len=get("max_model_len", None),
            kv_cache_memory_bytes=get("kv_cache_memory_bytes", None),
            max_num_seqs=int(get("max_num_seqs", 256)),
            keep_in_flight=bool(get("partial_rollouts", False)),
        )
        servers, urls = int(fleet.get("servers", 2)), list(fleet.get("urls") or ())
        if not D.is_distributed():
            return cls(model_path, model=model, servers=servers, urls=urls, **kw)
        return cls._on_ranks(model_path, model, servers, urls, int(get("staleness", 0)), kw)

    @classmethod
    def _on_ranks(
        cls, model_path: str, model: Any, servers: int, urls: list[str], staleness: int, kw: dict
    ) -> FleetBackend:
        """Under torchrun with ``rollout.staleness=0``: rank 0 launches (or attaches to) the
        fleet and sends the weights; the other ranks sample on the same servers (their urls from
        rank 0) and, at each sync, wait for the servers to hold rank 0's new version (the
        learner's weights are the same on every rank). With ``staleness >= 1`` see
        :meth:`_own_share`."""
        if staleness:
            return cls._own_share(model_path, model, servers, urls, kw)
        built, err = None, None
        if D.rank() == 0:
            try:
                built = cls(model_path, model=model, servers=servers, urls=urls, **kw)
            except Exception as exc:  # noqa: BLE001 - every rank raises it below
                err = exc
        shared = D.broadcast_object(
            {"urls": [s.url for s in built.servers] if built else [], "error": str(err or "")}
        )
        if err is not None:
            raise err
        if shared["error"]:
            raise FleetError(f"rank 0: {shared['error']}")
        return built or cls(model_path, urls=shared["urls"], sender=False, **kw)

    @classmethod
    def _own_share(
        cls, model_path: str, model: Any, servers: int, urls: list[str], kw: dict
    ) -> FleetBackend:
        """Under torchrun with ``rollout.staleness >= 1``: each rank's producer thread loads the
        versions its batches need at its own pace, so shared servers would be moved to a new
        version while another rank still samples with the old one. Each rank therefore owns
        servers ``rank, rank + world, ...`` (launched by it, or taken from ``urls``), sends
        their weights itself and samples only on them; it is a fleet of its own (replays,
        restarts and the staleness bound within its share). Needs at least one server a rank;
        a rank that cannot build its share stops every rank with its line."""
        world, rank = D.world_size(), D.rank()
        total = len(urls) or int(servers)
        if total < world:  # the same on every rank: each raises it
            raise FleetError(
                f"rollout=fleet under torchrun with rollout.staleness>=1 gives each rank servers "
                f"of its own: {total} server(s) for {world} ranks (set rollout.fleet.servers, or "
                f"give rollout.fleet.urls, at least {world})"
            )
        built, err = None, ""
        try:
            if urls:
                built = cls(model_path, model=model, urls=urls[rank::world], **kw)
            else:  # placed among this machine's ranks' servers (local rank, local world size)
                mine = len(range(rank, total, world))
                local = int(os.environ.get("LOCAL_RANK", rank))
                local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
                here = total if local_world == world else mine * local_world
                built = cls(model_path, model=model, servers=mine,
                            placement=(local, local_world, here), **kw)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - every rank raises below
            err = " ".join(str(exc).split())
        ok, bad = D.all_ok(not err, err)
        if not ok:
            if built is not None:
                built.close()
            raise FleetError(bad[0] if len(bad) == 1 else "; ".join(bad))
        assert built is not None
        return built

    # ---- start-up ------------------------------------------------------------------------

    def _launch(
        self,
        n: int,
        dtype: str,
        max_model_len: int | None,
        kv: int | None,
        max_num_seqs: int,
        extra: list[str],
        placement: tuple[int, int, int] | None = None,
    ) -> None:
        first, step, total = placement or (0, 1, n)
        self._logdir = Path(tempfile.mkdtemp(prefix="agentrl-fleet-"))
        gpus = _visible_gpus()
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        for i in range(n):
            port = free_port()
            cmd = member_command(
                self.model_path,
                transfer=self.transfer,
                host="127.0.0.1",
                port=port,
                dtype=_model_dtype(self.model_path, dtype),
                max_model_len=-1 if max_model_len is None else max_model_len,  # -1: vLLM fits it
                kv_cache_memory_bytes=kv,
                extra=[
                    "--max-num-seqs",
                    str(max_num_seqs),
                    "--disable-log-stats",  # a line per engine step and per request
                    "--disable-uvicorn-access-log",  # otherwise: the log grows all run
                    *extra,
                ],
            )
            env = member_placement(first + i * step, total, gpus=gpus, cores=cores,
                                   trainer_gpus=int(os.environ.get("LOCAL_WORLD_SIZE", "1")))  # fmt: skip
            server = Server(f"http://127.0.0.1:{port}", log_path=self._logdir / f"server{i}.log",
                            cmd=cmd, env=env)  # fmt: skip
            self.servers.append(server)
            self._start(server)
        log.info("fleet: %d vLLM servers starting (logs in %s)", n, self._logdir)

    def _start(self, s: Server) -> None:
        """Launch ``s``'s command in its own process session (its log appended to). Called on
        the thread that built the fleet or on the restart thread, both alive until
        :meth:`close`: the parent-death signal follows the launching thread."""
        assert s.cmd is not None and s.log_path is not None
        with self._lock:
            if self._closed:
                raise FleetError(f"fleet server {s.url}: the fleet is closed")
            with open(s.log_path, "a") as out:
                s.proc = subprocess.Popen(s.cmd, stdout=out, stderr=subprocess.STDOUT,
                                          env={**os.environ, **MEMBER_ENV, **s.env},
                                          start_new_session=True,
                                          preexec_fn=_die_with_parent)  # fmt: skip
            s.starts += 1

    def _wait_up(self, timeout: float) -> None:
        """Launched servers get ``timeout`` to start; servers given by url, which should be up
        already, at most 60 s."""
        if all(s.proc is None for s in self.servers):
            timeout = min(timeout, 60.0)
        deadline = time.monotonic() + timeout
        waiting = list(self.servers)
        while waiting:
            for s in list(waiting):
                if s.exited():
                    raise FleetError(f"fleet server {s.url} exited at start ({s.proc.returncode}): "
                                     f"{s.log_tail()}")  # fmt: skip
                if _get_ok(s.url + "/health", timeout=2):
                    waiting.remove(s)
            if not waiting:
                break
            if time.monotonic() > deadline:
                s = waiting[0]
                raise FleetError(f"fleet server {s.url} not up after {timeout:.0f} s "
                                 f"({'rollout.fleet.startup_timeout; ' if s.proc else ''}"
                                 f"its /health does not answer) {s.log_tail(500)}")  # fmt: skip
            time.sleep(0.5)

    def _check_cards(self) -> int:
        """Every server serves one model with the RL routes and the token endpoint; the
        fleet's context is the smallest of theirs."""
        lens = []
        for s in self.servers:
            try:
                with urllib.request.urlopen(s.url + "/v1/models", timeout=10) as r:
                    cards = json.loads(r.read())["data"]
                s.client.weight_version(timeout=10)
            except (OSError, urllib.error.URLError, KeyError, ValueError, TransferError) as exc:
                raise FleetError(
                    f"fleet server {s.url} lacks vLLM's RL API or model list ({exc}): start it "
                    "with python -m agentrl.serve MODEL --fleet-member"
                ) from None
            if len(cards) != 1:
                raise FleetError(f"fleet server {s.url} serves {len(cards)} models, not one")
            lens.append(int(cards[0].get("max_model_len") or 0))
        return min(lens)

    @torch.no_grad()
    def _probe(self, model: torch.nn.Module, tolerance: float | None) -> None:
        """A seeded 8-token sample from every server, scored by the trainer's model: a server
        whose log-probs differ serves other weights (another model, another version)."""
        param = next(model.parameters())
        tol = (
            tolerance if tolerance is not None else (2e-3 if param.dtype == torch.float32 else 0.1)
        )
        sampling = SamplingParams(max_new_tokens=8, temperature=1.0, seed=12345)
        body = self._body(0, list(PROBE_PROMPT), sampling, None)
        for s in self.servers:
            try:
                choice = self._request(s, body)
            except _RequestFailed as exc:
                raise FleetError(f"fleet server {s.url} failed the attach probe: {exc}") from None
            tokens, lps = self._tokens(choice)
            ids = torch.tensor([list(PROBE_PROMPT) + tokens], device=param.device)
            logits = model(input_ids=ids).logits[0, len(PROBE_PROMPT) - 1 : -1].float()
            ref = torch.log_softmax(logits, -1).gather(-1, ids[0, len(PROBE_PROMPT) :, None])
            gap = max(abs(a - b) for a, b in zip(lps, ref[:, 0].tolist(), strict=True))
            if not gap <= tol:
                raise FleetError(
                    f"fleet server {s.url} serves other weights than the trainer's model "
                    f"(log-probs differ by {gap:.3g} > {tol:g}): serve {self.model_path} there"
                )

    # ---- requests ------------------------------------------------------------------------

    def _body(
        self,
        i: int,
        prompt: list[int],
        sampling: SamplingParams,
        allowed: Sequence[Sequence[int]] | None,
    ) -> dict[str, Any]:
        """Request ``i``'s body: vLLM's sampling parameters as the in-process engine sets them."""
        max_tokens = min(sampling.max_new_tokens, self.max_model_len - len(prompt)) \
            if getattr(self, "max_model_len", 0) else sampling.max_new_tokens  # fmt: skip
        stop = list(sampling.stop_token_ids)
        params: dict[str, Any] = {
            "temperature": float(sampling.temperature),
            "top_p": float(sampling.top_p),
            "top_k": int(sampling.top_k) if sampling.top_k > 0 else 0,
            "ignore_eos": True,
            "logprobs": 0,
            "detokenize": False,
            "skip_special_tokens": False,
        }
        if allowed is not None:
            max_tokens = min(max_tokens, max(len(s) for s in allowed))
            stop = leaf_only_tokens(allowed)
            params["extra_args"] = {ALLOWED_KEY: [[int(t) for t in s] for s in allowed]}
        if sampling.seed is not None:
            key = i if sampling.request_ids is None else int(sampling.request_ids[i])
            params["seed"] = (int(sampling.seed) * 1_000_003 + key) % (2**63 - 1)
        params.update(max_tokens=int(max_tokens), stop_token_ids=stop)
        return {"token_ids": prompt, "sampling_params": params}

    def _request(
        self, server: Server, body: dict[str, Any], sink: Callable[[list[int]], None] | None = None
    ) -> dict[str, Any]:
        url = server.url + "/inference/v1/generate"
        if sink is None:
            reply = _post(self._http, url, body, self.request_timeout)
        else:
            reply = _post_stream(self._http, url, body, self.request_timeout, sink)
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not choices or not isinstance(choices[0].get("token_ids"), list):
            raise _RequestFailed(f"a reply without token ids: {str(reply)[:200]}")
        return choices[0]

    @staticmethod
    def _tokens(choice: dict[str, Any]) -> tuple[list[int], list[float]]:
        tokens = [int(t) for t in choice["token_ids"]]
        content = (choice.get("logprobs") or {}).get("content") or []
        lps = [float(c["logprob"]) for c in content]
        if len(lps) != len(tokens) or any(math.isnan(x) or math.isinf(x) for x in lps):
            raise _RequestFailed("a reply without a finite log-prob per token")
        return tokens, lps

    def _pick(self, session: str | None, cost: int, tries: collections.Counter) -> Server:
        """The conversation's server while it lives, else the least loaded (outstanding
        tokens), leaving out the launches that already failed this request (``tries``: failures
        per ``(server, launch)``). With no server live, it waits for one that is restarting.
        Where every live server already failed this request but still answers (a dropped
        connection, an error it survived), the request goes back to them, each at most
        ``max_failures`` times."""
        with self._lock:
            while True:
                self._check_open()  # closed, or a restart that failed for good
                live = [s for s in self.servers if s.alive and (id(s), s.starts) not in tries]
                if not live:
                    live = [s for s in self.servers
                            if s.alive and tries[(id(s), s.starts)] < self.max_failures]  # fmt: skip
                if live or not any(s.restarting for s in self.servers):
                    break
                self._lock.wait(1.0)
            if not live:
                gone = "; ".join(f"{s.url}: {s.why_out or 'failed this request'}"
                                 for s in self.servers)  # fmt: skip
                raise FleetError(f"fleet: no server left to sample ({gone})")
            server = self._sessions.get(session) if session is not None else None
            if server is None or server not in live:
                server = min(live, key=lambda s: s.outstanding)
            if session is not None:
                self._sessions[session] = server
                self._sessions.move_to_end(session)
                while len(self._sessions) > MAX_SESSIONS:
                    self._sessions.popitem(last=False)
            server.outstanding += cost
        return server

    def _play(
        self,
        body: dict[str, Any],
        session: str | None,
        failed: set[int],
        sink: Callable[[list[int]], None] | None,
    ) -> tuple:
        """One request on the fleet, replayed on another server while one fails (a timed-out
        one aborted first on the server that did not answer); streamed into ``sink`` when
        given."""
        cost = len(body["token_ids"]) + int(body["sampling_params"]["max_tokens"])
        tries: collections.Counter = collections.Counter()  # failures per launch, this request
        while True:
            server = self._pick(session, cost, tries)
            starts = server.starts
            body = {**body, "request_id": f"agentrl-{uuid.uuid4().hex}"}
            try:
                choice = self._request(server, body, sink)
                tokens, lps = self._tokens(choice)
            except _RequestFailed as exc:
                with self._lock:
                    server.outstanding -= cost
                    failed.add(id(server))
                    self.replayed += 1
                tries[(id(server), starts)] += 1
                if exc.timed_out:
                    self._abort(server, body["request_id"])
                self._on_failure(server, str(exc))
                continue
            with self._lock:
                server.outstanding -= cost
                server.served += 1
            return server, choice, tokens, lps

    def _abort(self, server: Server, request_id: str) -> None:
        """Best effort: vLLM's ``/abort_requests`` for a request that timed out, so a server
        that comes back does not go on computing it (``ABORT_TIMEOUT`` seconds at most)."""
        # the token endpoint hands the engine "generate-tokens-<request_id>"
        ids = [f"generate-tokens-{request_id}", request_id]
        with contextlib.suppress(Exception):
            reply = self._http.post(server.url + "/abort_requests", json={"request_ids": ids},
                                    timeout=ABORT_TIMEOUT)  # fmt: skip
            if reply.status_code == 200:
                with self._lock:
                    server.aborted += 1

    def _on_failure(self, server: Server, why: str) -> None:
        """A server failed a request: a launched one whose process exited is restarted (out of
        the rotation meanwhile), one gone otherwise leaves the fleet, one that answers stays
        (and is counted)."""
        proc = server.proc  # this launch's (a restart replaces it)
        if not server.alive:
            return
        exited = proc is not None and proc.poll() is not None
        gone = exited or not _get_ok(server.url + "/health", timeout=2)
        if gone and not exited and proc is not None:
            # launched here and not answering: dying (its connections close before it exits),
            # or hung for good; either way it is stopped and relaunched
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=3)
            if proc.poll() is None:
                why = f"{why}; /health does not answer: stopped"
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            exited = True
        with self._lock:
            if server.alive and gone:
                server.alive = False
                if exited and server.cmd is not None and not self._closed:
                    server.restarting = True
                    server.why_out = f"restarting ({why})"
                    log.warning("fleet: server %s died (exit %s; %s); its requests replay "
                                "elsewhere while it restarts", server.url,
                                proc.poll() if proc else None, why)  # fmt: skip
                    self._restart_later(server)
                else:
                    server.why_out = f"gone ({why})"
                    log.warning("fleet: server %s is gone (%s); its requests replay elsewhere",
                                server.url, why)  # fmt: skip
                    if server.cmd is None:
                        log.warning("fleet: server %s was given by url: it is not restarted",
                                    server.url)  # fmt: skip
            elif server.alive and not server.why_out:
                log.warning("fleet: server %s failed a request (%s); replayed",
                            server.url, why)  # fmt: skip

    # ---- restarts ------------------------------------------------------------------------

    def _restart_later(self, server: Server) -> None:
        """Queue ``server`` for the restart thread (started at the first restart; it lives until
        :meth:`close`, so the servers it launches keep their parent-death signal)."""
        if self._restarter is None:
            self._restarter = threading.Thread(target=self._restart_loop, name="fleet-restart",
                                               daemon=True)  # fmt: skip
            self._restarter.start()
        self._restarts.put(server)

    def _restart_loop(self) -> None:
        while True:
            server = self._restarts.get()
            if server is None or self._closed:
                return
            self._restart(server)

    def _restart(self, s: Server) -> None:
        """Relaunch ``s`` until it is back with the fleet's weights and version; each failed
        try counts as a failure of ``s``, ``max_failures`` in a row stop the run."""
        while not self._closed:
            err = self._try_restart(s)
            if self._closed:
                return
            with self._lock:
                if err is None:
                    s.alive, s.restarting, s.failures, s.why_out = True, False, 0, ""
                    self.restarted += 1
                    self._lock.notify_all()
                    log.warning("fleet: server %s is back (pid %d, weight version %d)",
                                s.url, s.proc.pid, s.version)  # fmt: skip
                    return
                s.failures += 1
                self._keep_logs = True
                log.warning("fleet: restarting server %s failed (%d of %d): %s", s.url,
                            s.failures, self.max_failures, err)  # fmt: skip
                if s.failures >= self.max_failures:
                    s.restarting, s.why_out = False, f"restart failed ({err})"
                    self._fatal = FleetError(
                        f"fleet server {s.url} failed {s.failures} restarts in a row "
                        f"(rollout.fleet.max_failures={self.max_failures}): {err}"
                    )
                    self._lock.notify_all()
                    return

    def _try_restart(self, s: Server) -> str | None:
        """One relaunch of ``s``: the same command, up within ``startup_timeout``, a new
        weight-transfer engine, the weights of the fleet's last sync and its version."""
        old = s.proc
        if old is not None:  # whatever is left of the dead one (its engine processes)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(old.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                old.wait(timeout=10)
        if s.sender is not None:
            with contextlib.suppress(Exception):
                s.sender.shutdown()
            s.sender = None
        try:
            self._start(s)
        except (OSError, FleetError) as exc:
            return f"cannot launch it: {exc}"
        deadline = time.monotonic() + self.startup_timeout
        while not _get_ok(s.url + "/health", timeout=2):
            if self._closed:
                return "the fleet closed"
            if s.exited():
                return f"it exited at start ({s.proc.returncode}): {s.log_tail(500)}"
            if time.monotonic() > deadline:
                return f"not up after {self.startup_timeout:.0f} s: {s.log_tail(500)}"
            time.sleep(0.5)
        with self._sync_lock:  # no sync runs meanwhile: the fleet's version is the last pushed
            if self.version == 0:  # the weights it starts with are version 0
                try:
                    s.client.set_weight_version("0")
                    have = s.client.weight_version()
                except TransferError as exc:
                    return str(exc)
                if have != "0":
                    return f"it reports version {have!r} after the restart"
                s.version = 0
                return None
            return self._sync(s, self.version)

    def _check_versions(self, failed: set[int]) -> None:
        """Before a call: every live server holds the fleet's version of the weights (one that
        does not answer counts as failing this call)."""
        for s in self.servers:
            if not s.alive:
                continue
            try:
                have = s.client.weight_version(timeout=min(10.0, self.request_timeout))
            except TransferError as exc:
                failed.add(id(s))
                self._on_failure(s, str(exc))
                continue
            ahead = self.keep_in_flight and self._syncing and have == str(self.version + 1)
            if have != str(self.version) and not ahead:
                raise FleetError(
                    f"fleet server {s.url} holds weight version {have!r}, the trainer's is "
                    f"{self.version}: refused before it samples (another trainer or a missed sync)"
                )

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingParams,
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
        on_tokens: TokenSink | None = None,
    ) -> list[Generation]:
        """One response per prompt, spread over the fleet (see the module docstring); with
        ``on_tokens``, free requests are streamed from their servers (vLLM's ``stream``) and
        their tokens handed over as they come, a constrained one's when it ends."""
        self._check_open()
        handover = None if on_tokens is None else Handover(on_tokens, len(prompts))
        if allowed is not None and len(allowed) != len(prompts):
            raise ValueError(f"allowed has {len(allowed)} entries for {len(prompts)} prompts")
        failed: set[int] = set()
        first = self.version  # keep mode: a sync during the call may move replies past it
        self._check_versions(failed)
        results: list[Generation | None] = [None] * len(prompts)
        jobs: list[tuple[int, dict[str, Any], str | None, Trie | None, Callable | None]] = []
        for i, prompt in enumerate(prompts):
            ids = [int(t) for t in prompt]
            if not ids:
                raise ValueError(f"prompt {i} is empty")
            if len(ids) >= self.max_model_len:
                extra = {"truncated": "prompt_too_long", "prompt_len": len(ids),
                         "policy_version": self.version}  # fmt: skip
                results[i] = Generation([], [], "length", extra=extra)
                continue
            req_allowed = allowed[i] if allowed is not None else None
            session = sampling.sessions[i] if sampling.sessions is not None else None
            trie = Trie(req_allowed) if req_allowed is not None else None
            sink = None  # a replay offers the same tokens again: only new ones go on
            if handover is not None and trie is None:
                sink = lambda tokens, i=i: handover.offer(i, tokens)  # noqa: E731
            jobs.append((i, self._body(i, ids, sampling, req_allowed), session, trie, sink))
        replies = list(self._executor.map(lambda j: self._play(j[1], j[2], failed, j[4]), jobs))
        self._count_failures(failed)
        for (i, _, _, trie, _), (server, choice, tokens, lps) in zip(jobs, replies, strict=True):
            versions = self._token_versions(server, choice, len(tokens), first)
            finish = "length" if choice.get("finish_reason") == "length" else "stop"
            if trie is not None:
                keep, complete = trie_prefix(trie, tokens)
                if keep < len(tokens) and not complete:
                    raise FleetError(f"fleet server {server.url} left the allowed sequences at "
                                     f"token {keep} ({tokens}): is its trie processor loaded?")  # fmt: skip
                tokens, lps, versions = tokens[:keep], lps[:keep], versions[:keep]
                finish = "stop" if complete else "length"
            self.tokens_generated += len(tokens)
            extra: dict[str, Any] = {"policy_version": min(versions, default=first),
                                     "server": server.url}  # fmt: skip
            if self.keep_in_flight:
                extra["token_versions"] = versions
            results[i] = Generation(tokens, lps, finish, extra=extra)  # type: ignore[arg-type]
            if handover is not None and trie is not None:  # cut to its trie, at its end
                handover.offer(i, tokens)
        return results  # type: ignore[return-value]

    def _token_versions(
        self, server: Server, choice: dict[str, Any], n: int, first: int
    ) -> list[int]:
        """The version that sampled each of a reply's ``n`` tokens (its version spans): the
        fleet's; in keep mode any from ``first`` (the call's start) to the fleet's now. Other
        versions are refused (a server someone else updated, one a sync missed)."""
        versions = [first] * n
        last = self.version + int(self._syncing)  # labelled before the sync returns
        ok = range(first, last + 1) if self.keep_in_flight else (self.version,)
        for sp in choice.get("weight_versions") or []:
            label = str(sp.get("version"))
            v = int(label) if label.isdigit() else -1
            if v not in ok:
                have = sorted({str(x.get("version")) for x in choice["weight_versions"]})
                raise FleetError(
                    f"fleet server {server.url} sampled with weight version(s) {have}, "
                    f"the trainer's is {self.version}: refused"
                )
            start, end = int(sp.get("start", 0)), int(sp.get("end", n))
            versions[max(start, 0) : min(end, n)] = [v] * max(0, min(end, n) - max(start, 0))
        return versions

    def _count_failures(self, failed: set[int]) -> None:
        """Calls in a row in which a live server failed; ``max_failures`` stops the run."""
        for s in self.servers:
            if not s.alive:
                continue
            s.failures = s.failures + 1 if id(s) in failed else 0
            if s.failures >= self.max_failures:
                self._keep_logs = True
                raise FleetError(
                    f"fleet server {s.url} failed {s.failures} calls in a row "
                    f"(rollout.fleet.max_failures={self.max_failures}): check it, or leave it out"
                )

    # ---- weights -------------------------------------------------------------------------

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """The learner's weights into every live server through vLLM's weight-transfer API;
        the fleet's version goes up by one (the label every server reports)."""
        # every tensor travels, a tied LM head too: leaving it out (it shares the embedding's
        # storage) left the servers sampling with the old embedding (the parity test caught it)
        self._push(lambda: self._source.set(dict(checkpoint_items(state_dict))))

    def update_adapter(
        self,
        tensors: Mapping[str, torch.Tensor],
        config: Any,
        base: Callable[[], Mapping[str, torch.Tensor]],
    ) -> None:
        """A LoRA run's sync: only the adapter (PEFT's tensors and ``LoraConfig``) travels, and
        each server merges it into the base weights it keeps (:mod:`.fleet_lora`); ``base()``
        (the unmerged base weights) is sent once, to a server that lacks it (a relaunched one
        too). With vLLM's NCCL engine the merged weights are sent whole."""
        adapter = wire_adapter(tensors, config)
        if self.transfer != BACKEND:
            self.update_weights(merged_state(checkpoint_items(base()), adapter))
            return
        self._push(lambda: self._source.set_lora(adapter, lambda: dict(checkpoint_items(base()))))

    def _push(self, set_source: Callable[[], None]) -> None:
        """``set_source()`` fills the source, whose tensors go into every live server; the
        fleet's version goes up by one."""
        self._check_open()
        if not self.sender:
            self._await_version(self.version + 1)
            return
        with self._sync_lock:  # a restarting server pushes after (or before) this sync
            set_source()
            version = self.version + 1
            live = [s for s in self.servers if s.alive]
            t0 = time.perf_counter()
            self._syncing = True
            try:
                errors = list(self._executor.map(lambda s: self._sync(s, version), live))
            finally:
                self._syncing = False
            for s, err in zip(live, errors, strict=True):
                if err is None:
                    continue
                if s.exited() and s.cmd is not None:  # died since the last call: restarted,
                    self._on_failure(s, err)  # it gets this version once it is up
                    continue
                raise FleetError(f"fleet server {s.url}: the weight sync to version {version} "
                                 f"failed: {err}")  # fmt: skip
            self.version = version
        self.last_sync_seconds = time.perf_counter() - t0
        # the bytes one server got (a LoRA run's first sync to a server carries its base too)
        sent = [int(getattr(s.sender, "last_bytes", 0) or 0) for s in live]
        self.last_sync_bytes = max(sent, default=0) or sum(  # vLLM's engines do not count
            int(v.numel() * v.element_size()) for v in self._source.state.values()
        )

    def _await_version(self, version: int) -> None:
        """Not the sender: wait (``request_timeout`` at most) until every live server holds
        ``version``, which the sender's sync labels it with."""
        t0 = time.perf_counter()
        deadline = time.monotonic() + self.request_timeout
        for s in [s for s in self.servers if s.alive]:
            while True:
                try:
                    have = s.client.weight_version(timeout=10)
                except TransferError as exc:
                    self._on_failure(s, str(exc))
                    break
                if have == str(version):
                    break
                if not have.isdigit() or int(have) > version or time.monotonic() > deadline:
                    raise FleetError(
                        f"fleet server {s.url} holds weight version {have!r} while this rank "
                        f"waits for {version} from rank 0's sync"
                    )
                time.sleep(0.05)
        self.version = version
        self.last_sync_seconds, self.last_sync_bytes = time.perf_counter() - t0, None

    def _sync(self, s: Server, version: int) -> str | None:
        try:
            if s.sender is None:
                s.sender = open_sender(self.transfer, s.client, self._source,
                                       address=self.trainer_address,
                                       port=free_port(self.trainer_address))  # fmt: skip
            if self.keep_in_flight:  # in-flight requests frozen in the server's queue
                s.client.pause("keep")
            else:  # in-flight requests finish; the prefix cache is cleared
                s.client.pause("wait")
            try:
                send(s.sender, s.client, str(version))
                if self.keep_in_flight:
                    self._drop_old_cache(s)
            finally:
                s.client.resume()
            have = s.client.weight_version()
        except (TransferError, RuntimeError, ValueError, OSError) as exc:
            return " ".join(str(exc).split())[:300]
        if have != str(version):
            return f"it reports version {have!r} after the update"
        s.version = version
        return None

    def _drop_old_cache(self, s: Server) -> None:
        """Keep mode, still paused: the frozen requests are preempted and their cache, computed
        with the old weights, dropped (vLLM's ``/reset_prefix_cache`` with running requests),
        so every token after the sync is sampled by the new weights over the whole context."""
        reply = self._http.post(s.url + "/reset_prefix_cache",
                                params={"reset_running_requests": "true"},
                                timeout=self.request_timeout)  # fmt: skip
        if reply.status_code != 200:
            raise TransferError(f"server {s.url}/reset_prefix_cache answered HTTP "
                                f"{reply.status_code}: {' '.join(reply.text.split())[:200]}")  # fmt: skip

    # ---- lifecycle -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("FleetBackend is closed")
        self._check_fatal()

    def _check_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    def close(self) -> None:
        """Stop every server launched here (and their engine processes); idempotent. Their
        logs are deleted when every server ran to the end, kept (and named) otherwise."""
        if self._closed:
            return
        with self._lock:  # no launch after this (a restart checks it under the lock)
            self._closed = True
            self._lock.notify_all()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        self._restarts.put(None)
        self._executor.shutdown()
        with contextlib.suppress(Exception):
            self._http.close()
        for s in self.servers:
            if s.sender is not None:
                with contextlib.suppress(Exception):
                    s.sender.shutdown()
        procs = [s.proc for s in self.servers if s.proc is not None]
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)  # the engine processes too, whatever is left
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        if self._logdir is not None:
            if not self._keep_logs and all(s.alive and s.starts <= 1 for s in self.servers):
                shutil.rmtree(self._logdir, ignore_errors=True)
            else:
                log.warning("fleet: the servers' logs are kept in %s", self._logdir)

    def __enter__(self) -> FleetBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
