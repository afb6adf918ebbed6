"""Weights from the trainer into a vLLM server through vLLM's own weight-transfer API.

vLLM's RL API (``VLLM_SERVER_DEV_MODE=1``) updates a running server's weights in four calls,
``/init_weight_transfer_engine``, ``/start_weight_update``, ``/update_weights`` and
``/finish_weight_update``; the bytes themselves travel over a transport that a *transfer engine*
implements on both sides, chosen by the server's ``--weight-transfer-config '{"backend": ...}'``
and built by ``vllm.distributed.weight_transfer``'s factories. vLLM ships NCCL (GPU to GPU); a
CPU server has none, so this module adds one:

- ``agentrl_gloo``: the trainer and the server's worker form a two-rank torch.distributed gloo
  group of their own (a TCP store the trainer opens, a ``ProcessGroupGloo`` built on it, never
  the default process group, which vLLM's worker and a torchrun trainer each have). A sync packs
  every tensor's bytes into chunks of at most ``chunk_bytes`` (64 MiB) and broadcasts them from
  the trainer, two in flight (one is packed, or loaded, while the other travels); the worker
  cuts them back into tensors by the names, dtypes and shapes that
  ``/update_weights`` carried, and loads them with vLLM's layerwise reload (as vLLM's NCCL
  engine does), so vLLM's own post-load processing runs. Both sides are registered with vLLM's
  factories by :func:`register`, which the package declares as a ``vllm.general_plugins`` entry
  point: every vLLM process (the server's engine core included) loads it at start.
- ``nccl`` (GPU): vLLM's own engines, driven through the same client; see :func:`open_sender`.

:class:`HTTPClient` is the control plane: vLLM's ``VLLMWeightSyncClient`` protocol over the
server's HTTP routes, plus the pause, resume and weight-version routes the fleet uses.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from .fleet_lora import LORA_A, LORA_B, is_adapter_name, kept_names, merged_weight

__all__ = [
    "BACKEND",
    "GlooTrainerInitInfo",
    "HTTPClient",
    "TransferError",
    "open_sender",
    "register",
    "send",
    "state_source",
]

#: The name the gloo engine is registered under (``--weight-transfer-config``'s backend).
BACKEND = "agentrl_gloo"
DEFAULT_CHUNK_BYTES = 64 << 20
DEFAULT_DEPTH = 2  # chunks in flight
_registered = False
_lock = threading.Lock()
_log = logging.getLogger("vllm." + __name__)  # a server's log: under vLLM's own handler


class TransferError(RuntimeError):
    """A weight transfer failed: one line naming the server."""


# -- the control plane --------------------------------------------------------------------------
class HTTPClient:
    """vLLM's weight-sync routes of one server (``base`` is the server root, no ``/v1``)."""

    def __init__(self, base: str, timeout: float = 300.0):
        self.base, self.timeout = base.rstrip("/"), float(timeout)

    def _call(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as reply:
                text = reply.read()
        except urllib.error.HTTPError as exc:
            detail = " ".join(exc.read().decode(errors="replace").split())[:300]
            raise TransferError(
                f"server {self.base}{path} answered HTTP {exc.code}: {detail}"
            ) from None
        except (OSError, urllib.error.URLError) as exc:
            raise TransferError(f"server {self.base}{path} unreachable: {exc}") from None
        return json.loads(text) if text else None

    # vLLM's VLLMWeightSyncClient protocol
    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._call("POST", "/init_weight_transfer_engine", {"init_info": init_info})

    def start_weight_update(self) -> None:
        self._call("POST", "/start_weight_update")

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self._call("POST", "/update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        body = None if weight_version is None else {"weight_version": weight_version}
        self._call("POST", "/finish_weight_update", body)

    def shutdown_weight_transfer_engine(self) -> None:
        self._call("POST", "/shutdown_weight_transfer_engine", timeout=10)

    # the rest of the RL API the fleet uses
    def pause(self, mode: str = "wait") -> None:
        """Stop scheduling (``wait``: let running requests finish) and clear the prefix cache."""
        self._call("POST", "/pause?" + urllib.parse.urlencode({"mode": mode}))

    def resume(self) -> None:
        self._call("POST", "/resume")

    def weight_version(self, timeout: float | None = None) -> str:
        return str(self._call("GET", "/weight_info", timeout=timeout)["weight_version"])

    def set_weight_version(self, version: str) -> None:
        self._call("POST", "/update_weight_version", {"new_version": version})


# -- what the trainer sends ---------------------------------------------------------------------
_SOURCE: type | None = None


def state_source(state: Mapping[str, torch.Tensor] | None = None) -> Any:
    """A vLLM ``WeightSource`` over a named-tensor mapping (vLLM's trainer engines replay their
    source each round); its ``set(state)`` swaps in the next sync's tensors."""
    global _SOURCE
    if _SOURCE is None:
        from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

        class StateSource(WeightSource):
            def __init__(self) -> None:
                self.state: dict[str, torch.Tensor] = {}
                self.lora: Any = None  # a LoRA sync: the WireAdapter (self.state: its tensors)
                self._base_fn: Callable[[], Mapping[str, torch.Tensor]] | None = None
                self._base: dict[str, torch.Tensor] | None = None
                self._base_lock = threading.Lock()

            def set(self, state: Mapping[str, torch.Tensor]) -> None:
                self.state = {k: v.detach() for k, v in state.items()}
                self.lora, self._base_fn, self._base = None, None, None

            def set_lora(
                self, adapter: Any, base: Callable[[], Mapping[str, torch.Tensor]]
            ) -> None:
                """A LoRA sync: ``adapter`` (a ``fleet_lora.WireAdapter``); ``base()`` gives
                the base weights (checkpoint names), asked for only if a server lacks them."""
                self.state = dict(adapter.tensors)
                self.lora, self._base_fn, self._base = adapter, base, None

            def payload(self, with_base: bool) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
                """What one server gets: the tensors and the update's LoRA fields (none for a
                full sync); ``with_base``: the base weights first, then the adapter."""
                if self.lora is None:
                    return self.state, {}
                extra = {"lora_modules": list(self.lora.modules),
                         "lora_scales": [float(x) for x in self.lora.scales],
                         "lora_base": bool(with_base)}  # fmt: skip
                if not with_base:
                    return self.state, extra
                with self._base_lock:  # computed once for all the servers that need it
                    if self._base is None:
                        assert self._base_fn is not None
                        self._base = {k: v.detach() for k, v in self._base_fn().items()}
                return {**self._base, **self.state}, extra

            def metadata(self) -> list[ParamMeta]:
                return [ParamMeta(k, v.dtype, tuple(v.shape)) for k, v in self.state.items()]

            def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
                yield from self.state.items()

        _SOURCE = StateSource
    src = _SOURCE()
    if state is not None:
        src.set(state)
    return src


def _layout(
    names: list[str], dtypes: list[str], shapes: list[list[int]], chunk_bytes: int
) -> list[list[tuple[int, int, int]]]:
    """The chunks both sides cut the stream into: per chunk, ``(tensor index, byte offset,
    byte count)``. A chunk holds whole decoder layers where they fit (the tensors that share the
    outermost layer index, ``model.layers.3.``), so once a chunk is loaded every vLLM layer it
    fed is complete and its buffer is free for the next chunk; a tensor larger than a chunk
    travels alone."""
    sizes = [
        int(torch.Size(shape).numel()) * torch.empty((), dtype=getattr(torch, dtype)).element_size()
        for dtype, shape in zip(dtypes, shapes, strict=True)
    ]
    blocks: list[list[int]] = []  # runs of consecutive tensors of one decoder layer
    last = None
    for i, name in enumerate(names):
        key = _block_key(name)
        if not blocks or key is None or key != last:
            blocks.append([])
        blocks[-1].append(i)
        last = key
    chunks: list[list[tuple[int, int, int]]] = [[]]
    used = 0
    for block in blocks:
        whole = sum(sizes[i] for i in block)
        if chunks[-1] and used + whole > chunk_bytes and whole <= chunk_bytes:
            chunks.append([])
            used = 0
        for i in block:  # a block larger than a chunk: cut between its tensors
            if chunks[-1] and used + sizes[i] > chunk_bytes:
                chunks.append([])
                used = 0
            chunks[-1].append((i, used, sizes[i]))
            used += sizes[i]
    return [c for c in chunks if c]


def _block_key(name: str) -> str | None:
    """``model.layers.3`` for ``model.layers.3.mlp.up_proj.weight``; ``None`` outside layers."""
    parts = name.split(".")
    for k, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: k + 1])
    return None


def _group(address: str, port: int, rank: int, is_master: bool, timeout_s: float) -> Any:
    """A two-rank gloo group of its own over a TCP store (never the default group)."""
    from torch.distributed import ProcessGroupGloo, TCPStore

    timeout = datetime.timedelta(seconds=timeout_s)
    store = TCPStore(address, port, 2, is_master, timeout=timeout, wait_for_workers=False)
    return ProcessGroupGloo(store, rank, 2, timeout), store


@contextlib.contextmanager
def _every_core() -> Iterator[None]:
    """Let the threads started inside run on every core of the machine. vLLM binds its CPU
    worker to the cores it computes on (one, on a 2-core machine); gloo's threads, started with
    a group, inherit the binding of the thread that builds it, so a server's receiving would
    share one core with the loading it is meant to overlap. The caller's binding is restored."""
    try:
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    except (AttributeError, OSError):  # not Linux, or not allowed: as it is
        yield
        return
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


def _broadcast(group: Any, buf: torch.Tensor, wait: bool = True) -> Any:
    """Broadcast ``buf`` from rank 0 of ``group``; ``wait=False``: return the pending work."""
    from torch.distributed import BroadcastOptions

    opts = BroadcastOptions()
    opts.rootRank, opts.rootTensor = 0, 0
    work = group.broadcast([buf], opts)
    if wait:
        work.wait()
    return work


class BufferPool:
    """Chunk buffers kept for the next chunk and the next sync, by size: a fresh 64 MiB buffer
    costs 16k page faults (the kernel zeroes every page) before a byte lands in it, about as
    much CPU as the copy itself. A buffer goes back only when nothing else holds its memory
    (vLLM's layerwise reload keeps views of a chunk until the layer it feeds is complete)."""

    def __init__(self, keep: int = 4):
        self.keep = keep
        self.free: dict[int, list[torch.Tensor]] = {}

    def take(self, nbytes: int) -> torch.Tensor:
        got = self.free.get(nbytes)
        return got.pop() if got else torch.empty(nbytes, dtype=torch.uint8)

    def give(self, buf: torch.Tensor) -> None:
        if buf._base is not None or not _sole_owner(buf):
            return
        got = self.free.setdefault(buf.numel(), [])
        if sum(len(v) for v in self.free.values()) < self.keep:
            got.append(buf)


def _sole_owner(buf: torch.Tensor) -> bool:
    """Whether ``buf`` alone holds its memory (no view of it is alive anywhere)."""
    try:  # the storage's reference count: this tensor and the temporary storage object
        return torch._C._storage_Use_Count(buf.untyped_storage()._cdata) <= 2
    except (AttributeError, RuntimeError):  # not in this torch: never reuse
        return False


def send_chunks(
    group: Any, tensors: list[torch.Tensor], chunks: list, depth: int = 2,
    pool: BufferPool | None = None,
) -> int:  # fmt: skip
    """Pack and broadcast ``chunks`` of ``tensors`` (:func:`_layout`), ``depth`` chunks in flight
    (the next is packed while the last travels; packed into ``pool``'s buffers); the bytes
    sent."""
    pool = pool or BufferPool(depth)
    pending: collections.deque = collections.deque()
    sent = 0

    def drain() -> None:
        buf, work, packed = pending.popleft()
        work.wait()
        del work  # it holds the buffer too
        if packed:
            pool.give(buf)

    for chunk in chunks:
        parts = [_bytes_of(tensors[i]) for i, _, _ in chunk]
        if len(parts) == 1:  # a tensor alone: sent from its own memory
            buf = parts[0]
        else:
            buf = torch.cat(parts, out=pool.take(chunk[-1][1] + chunk[-1][2]))
        del parts
        pending.append((buf, _broadcast(group, buf, wait=False), len(chunk) > 1))
        sent += buf.numel()
        del buf
        if len(pending) >= depth:
            drain()
    while pending:
        drain()
    return sent


def recv_chunks(
    group: Any, chunks: list, consume: Callable[[list, torch.Tensor], None], depth: int = 2,
    pool: BufferPool | None = None,
) -> None:  # fmt: skip
    """Receive ``chunks`` (:func:`_layout`) into ``pool``'s buffers, ``depth`` in flight:
    ``consume(chunk, buffer)`` loads one while the next arrives."""
    pool = pool or BufferPool(depth)
    pending: collections.deque = collections.deque()

    def drain() -> None:
        chunk, buf, work = pending.popleft()
        work.wait()
        del work  # it holds the buffer too
        consume(chunk, buf)
        pool.give(buf)

    for chunk in chunks:
        buf = pool.take(chunk[-1][1] + chunk[-1][2])
        pending.append((chunk, buf, _broadcast(group, buf, wait=False)))
        del buf
        if len(pending) >= depth:
            drain()
    while pending:
        drain()


# -- the server's side (loaded into vLLM's worker by the plugin) --------------------------------
def _worker_classes() -> tuple[type, type]:
    from vllm.distributed.weight_transfer.base import (
        WeightTransferEngine,
        WeightTransferInitInfo,
        WeightTransferUpdateInfo,
    )

    @dataclass
    class GlooInitInfo(WeightTransferInitInfo):
        master_address: str
        master_port: int
        chunk_bytes: int = DEFAULT_CHUNK_BYTES
        timeout_s: float = 600.0
        depth: int = DEFAULT_DEPTH

    @dataclass
    class GlooUpdateInfo(WeightTransferUpdateInfo):
        names: list[str]
        dtype_names: list[str]
        shapes: list[list[int]]
        # a LoRA sync (agentrl.backends.fleet_lora): the targets, their scales, and whether
        # the base weights come first (else only the adapter tensors travel)
        lora_modules: list[str] = field(default_factory=list)
        lora_scales: list[float] = field(default_factory=list)
        lora_base: bool = False

    class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
        """The worker's end: receive the broadcast chunks, load them layer by layer."""

        init_info_cls = GlooInitInfo
        update_info_cls = GlooUpdateInfo
        supports_draft_weight_update = False

        def __init__(self, config, vllm_config, device, model) -> None:  # noqa: ANN001
            super().__init__(config, vllm_config, device, model)
            self.group: Any = None
            self.store: Any = None
            self.chunk_bytes = DEFAULT_CHUNK_BYTES
            self.depth = DEFAULT_DEPTH
            self.pool = BufferPool()  # receive buffers, kept from one sync to the next
            self.lora_base: dict[str, torch.Tensor] = {}  # LoRA: the base weights kept
            self.adapter_only = False  # this update loads only the LoRA-merged layers

        def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
            self.shutdown()
            self.chunk_bytes = int(init_info.chunk_bytes)
            self.depth = max(1, int(init_info.depth))
            with _every_core():  # gloo's threads move the bytes beside vLLM's, not on its core
                self.group, self.store = _group(init_info.master_address,
                                                int(init_info.master_port), 1, False,
                                                init_info.timeout_s)  # fmt: skip

        def start_weight_update(self) -> None:
            from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

            initialize_layerwise_reload(self.model)

        def finish_weight_update(self) -> None:
            import logging

            from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

            # an adapter-only update leaves most layers as they were: vLLM puts their
            # tensors back with a warning per layer ("Failed to load weights"), expected here
            quiet = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
            level = quiet.level
            if self.adapter_only:
                quiet.setLevel(logging.ERROR)
            try:
                finalize_layerwise_reload(self.model, self.model_config)
            finally:
                quiet.setLevel(level)
                self.adapter_only = False

        def update_weights(self, update_info: dict[str, Any]) -> None:
            # the base class ends with torch.accelerator.synchronize(): nothing to wait for here
            self.receive_weights(self.parse_update_info(update_info))

        def receive_weights(self, update_info: GlooUpdateInfo) -> None:
            if self.group is None:
                raise RuntimeError(f"{BACKEND}: init_weight_transfer_engine was not called")
            info = update_info
            dtypes = [getattr(torch, d) for d in info.dtype_names]
            t0, cpu0 = time.perf_counter(), time.process_time()
            loading = [0.0, 0.0]  # vLLM's load_weights: wall and CPU seconds

            def load(chunk: list, buf: torch.Tensor) -> None:
                t, c = time.perf_counter(), time.thread_time()
                self.model.load_weights(
                    [
                        (info.names[i], buf[o : o + n].view(dtypes[i]).view(info.shapes[i]))
                        for i, o, n in chunk
                    ]  # fmt: skip
                )
                loading[0] += time.perf_counter() - t
                loading[1] += time.thread_time() - c

            chunks = _layout(info.names, info.dtype_names, info.shapes, self.chunk_bytes)
            if info.lora_modules:
                self._receive_lora(info, dtypes, chunks)
            else:
                self.lora_base = {}  # full weights: a LoRA base kept earlier is stale
                recv_chunks(self.group, chunks, load, self.depth, self.pool)
            nbytes = sum(c[-1][1] + c[-1][2] for c in chunks)
            _log.info("%s: %.1f MB in %d chunks, %.3f s, %.3f s CPU (vLLM's load_weights: "
                      "%.3f s, %.3f s CPU)", BACKEND, nbytes / 1e6, len(chunks),
                      time.perf_counter() - t0, time.process_time() - cpu0, *loading)  # fmt: skip

        def _receive_lora(self, info: GlooUpdateInfo, dtypes: list, chunks: list) -> None:
            """A LoRA sync: keep (base sync) or reuse the base of the layers the targets
            touch, merge the adapter into it and load those layers whole."""
            if info.lora_base:
                packed = getattr(self.model, "packed_modules_mapping", None) or {}
                base_names = [n for n in info.names if not is_adapter_name(n)]
                keep = set(kept_names(base_names, info.lora_modules, packed))
                self.lora_base = {}
            elif not self.lora_base:
                raise RuntimeError(f"{BACKEND}: a LoRA adapter update before its base weights")
            else:
                keep = set()
            adapter: dict[str, torch.Tensor] = {}

            def load(chunk: list, buf: torch.Tensor) -> None:
                direct = []
                for i, o, n in chunk:
                    name = info.names[i]
                    t = buf[o : o + n].view(dtypes[i]).view(info.shapes[i])
                    if is_adapter_name(name):
                        adapter[name] = t.clone()
                    elif name in keep:  # loaded merged, once the adapter is here
                        self.lora_base[name] = t.clone()
                    else:
                        direct.append((name, t))
                if direct:
                    self.model.load_weights(direct)

            recv_chunks(self.group, chunks, load, self.depth, self.pool)
            self._load_merged(info, adapter)
            if not info.lora_base:
                self.adapter_only = True
                self._check_whole_layers()

        def _load_merged(self, info: GlooUpdateInfo, adapter: dict[str, torch.Tensor]) -> None:
            scales = dict(zip(info.lora_modules, info.lora_scales, strict=True))
            missing = [m for m in scales if m + ".weight" not in self.lora_base]
            if missing:
                raise RuntimeError(f"{BACKEND}: LoRA targets without a base weight: {missing[:3]}")
            batch, used = [], 0
            for name, w0 in self.lora_base.items():  # in the order received: layer by layer
                module = name.removesuffix(".weight")
                if name.endswith(".weight") and module in scales:
                    a, b = adapter.get(module + LORA_A), adapter.get(module + LORA_B)
                    if a is None or b is None:
                        raise RuntimeError(f"{BACKEND}: LoRA target {module} has no adapter")
                    w0 = merged_weight(w0, a, b, scales[module])
                batch.append((name, w0))
                used += w0.numel() * w0.element_size()
                if used >= self.chunk_bytes:
                    self.model.load_weights(batch)
                    batch, used = [], 0
            if batch:
                self.model.load_weights(batch)

        def _check_whole_layers(self) -> None:
            """An adapter-only update must load every layer it touches whole (vLLM's reload
            would fill the rest of a half-loaded layer with garbage)."""
            from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO

            half = []
            for name, module in self.model.named_modules():
                li = LAYERWISE_INFO.get(module)
                if li is not None and li.can_load() and 0 < li.load_numel < li.load_numel_total:
                    half.append(name)
            if half:
                raise RuntimeError(f"{BACKEND}: the LoRA update loaded layers {half[:3]} in "
                                   "part: their fused modules are not all kept")  # fmt: skip

        def shutdown(self) -> None:
            self.group, self.store, self.pool = None, None, BufferPool()

    return GlooWeightTransferEngine, GlooUpdateInfo


def register() -> None:
    """Register the ``agentrl_gloo`` engines with vLLM's weight-transfer factories (the
    ``vllm.general_plugins`` entry point; safe to call many times)."""
    global _registered
    with _lock:
        if _registered:
            return
        from vllm.distributed.weight_transfer.factory import (
            WeightTransferEngineFactory,
            WeightTransferTrainerFactory,
        )

        if BACKEND not in WeightTransferEngineFactory._registry:
            WeightTransferEngineFactory.register_engine(BACKEND, _worker_classes()[0])
        if BACKEND not in WeightTransferTrainerFactory._registry:
            WeightTransferTrainerFactory.register_engine(BACKEND, _trainer_class())
        _registered = True


# -- the trainer's side -------------------------------------------------------------------------
@dataclass
class GlooTrainerInitInfo:
    """How the trainer opens the gloo pair with one server (``rank``: vLLM's trainer rank;
    0 sends)."""

    backend: ClassVar[str] = BACKEND
    master_address: str
    master_port: int
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    timeout_s: float = 600.0
    rank: int = 0
    depth: int = DEFAULT_DEPTH

    @property
    def is_sender(self) -> bool:
        return self.rank == 0


def _trainer_class() -> type:
    from vllm.distributed.weight_transfer.base import TrainerWeightTransferEngine

    class GlooTrainerWeightTransferEngine(TrainerWeightTransferEngine):
        """The trainer's end: pack the source's tensors into chunks and broadcast them while
        the server's ``/update_weights`` receives."""

        init_info_cls = GlooTrainerInitInfo

        def __init__(  # noqa: ANN001 - vLLM's client and source
            self, *, client, source, chunk_bytes: int, depth: int = DEFAULT_DEPTH
        ) -> None:
            super().__init__(client=client, source=source, is_sender=True)
            self.chunk_bytes = chunk_bytes
            self.depth = max(1, int(depth))
            self.group: Any = None
            self.store: Any = None
            self.last_bytes = 0
            self.lora_base = False  # the server holds this LoRA run's base weights
            self.pool = BufferPool()  # packing buffers, kept from one sync to the next

        @classmethod
        def trainer_init(cls, init_info, *, client, source=None):  # noqa: ANN001, ANN206
            if source is None:
                raise ValueError(f"{BACKEND}: the trainer engine needs a WeightSource")
            engine = cls(client=client, source=source, chunk_bytes=int(init_info.chunk_bytes),
                         depth=int(init_info.depth))  # fmt: skip
            worker = {
                "master_address": init_info.master_address,
                "master_port": int(init_info.master_port),
                "chunk_bytes": int(init_info.chunk_bytes),
                "timeout_s": float(init_info.timeout_s),
                "depth": int(init_info.depth),
            }
            # The server joins inside /init_weight_transfer_engine; both ends must rendezvous
            # together, so the call runs on a side thread while this end opens the group.
            with ThreadPoolExecutor(max_workers=1) as exe:
                future = exe.submit(client.init_weight_transfer_engine, worker)
                engine.group, engine.store = _group(
                    init_info.master_address, int(init_info.master_port), 0, True,
                    init_info.timeout_s,
                )  # fmt: skip
                future.result()
            return engine

        def send_weights(self, weight_version: str | None = None) -> None:
            state, extra = self.source.payload(not self.lora_base)
            self.lora_base = False  # until this sync is through
            info = {
                "names": list(state),
                "dtype_names": [str(t.dtype).removeprefix("torch.") for t in state.values()],
                "shapes": [list(t.shape) for t in state.values()],
                **extra,
            }
            tensors = list(state.values())
            chunks = _layout(info["names"], info["dtype_names"], info["shapes"], self.chunk_bytes)
            self.client.start_weight_update()
            exe = ThreadPoolExecutor(max_workers=1)
            try:
                future = exe.submit(self.client.update_weights, info)
                time.sleep(0)  # let the request go out before the first chunk
                if future.done():  # refused before any byte moved
                    future.result()
                sent = send_chunks(self.group, tensors, chunks, self.depth, self.pool)
                future.result()
            finally:
                exe.shutdown(wait=False)  # a broken transfer must not hang here
            self.client.finish_weight_update(weight_version)
            self.last_bytes = sent
            self.lora_base = bool(extra)  # a full sync replaced what the server kept

        def shutdown(self) -> None:
            self.group, self.store, self.pool = None, None, BufferPool()

    return GlooTrainerWeightTransferEngine


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)


def open_sender(
    backend: str,
    client: HTTPClient,
    source: Any,
    *,
    address: str,
    port: int,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    depth: int = DEFAULT_DEPTH,
) -> Any:
    """The trainer's engine for one server, built through vLLM's trainer factory: ``agentrl_gloo``
    (CPU) or vLLM's ``nccl`` (GPUs: the server's worker and this process's current device form a
    two-rank NCCL group; vLLM's engine packs and broadcasts)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    register()
    if backend == BACKEND:
        info: Any = GlooTrainerInitInfo(address, int(port), chunk_bytes=int(chunk_bytes),
                                        depth=int(depth))  # fmt: skip
    elif backend == "nccl":
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        info = NCCLTrainerInitInfo(master_address=address, master_port=int(port), world_size=2,
                                   rank=0)  # fmt: skip
    else:
        raise ValueError(f"weight transfer backend must be {BACKEND} or nccl, got {backend!r}")
    return WeightTransferTrainerFactory.trainer_init(info, client=client, source=source)


def send(engine: Any, client: HTTPClient, version: str) -> None:
    """One sync through ``engine`` (from :func:`open_sender`), labelled ``version``."""
    if hasattr(engine, "chunk_bytes"):  # ours: the version rides finish_weight_update
        engine.send_weights(version)
    else:  # vLLM's engines finish without a version: set it after
        engine.send_weights()
        client.set_weight_version(version)
