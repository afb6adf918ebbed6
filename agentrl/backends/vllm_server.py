"""The command lines of vLLM's OpenAI-compatible server for agentrl: a trained run's final model
(``python -m agentrl.serve``) and a member of a ``rollout=fleet`` fleet (launched by
:class:`agentrl.backends.fleet.FleetBackend` or printed by ``python -m agentrl.serve
--fleet-member``). :mod:`agentrl.serve` says why each setting."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..rollout.tools import detect_syntax

__all__ = [
    "MEMBER_ENV",
    "TRIE_PROCESSOR",
    "ServeError",
    "member_command",
    "member_placement",
    "member_transfer",
    "model_folder",
    "server_command",
]

TRIE_PROCESSOR = "agentrl.backends.vllm_trie:TrieLogitsProcessor"
#: The environment a fleet member runs with: vLLM's RL routes are its "dev mode" routes.
MEMBER_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
CPU_KV_BYTES = 1 << 30


def member_placement(
    i: int,
    n: int,
    *,
    gpus: Sequence[str],
    cores: Sequence[int],
    trainer_gpus: int = 1,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment that places launched server ``i`` of ``n`` on its own device.

    With GPUs visible (``gpus``: their ids as ``CUDA_VISIBLE_DEVICES`` names them) each server
    sees one GPU: those after the trainer's first ``trainer_gpus`` (one per local rank) in turn,
    or all of them in turn where the trainer holds every one (servers then share a GPU with it).
    On CPU, two or more servers get disjoint slices of ``cores`` through vLLM's
    ``VLLM_CPU_OMP_THREADS_BIND`` (otherwise vLLM's automatic binding puts every server's
    threads on the same cores, and they compute one after the other); a single server, or a
    binding the user set, is left to vLLM.
    """
    environ = os.environ if environ is None else environ
    if gpus:
        free = list(gpus[trainer_gpus:]) or list(gpus)
        return {"CUDA_VISIBLE_DEVICES": str(free[i % len(free)])}
    if n < 2 or not cores or "VLLM_CPU_OMP_THREADS_BIND" in environ:
        return {}
    cores = sorted(cores)
    if n >= len(cores):
        mine = [cores[i % len(cores)]]
    else:
        base, extra = divmod(len(cores), n)
        start = i * base + min(i, extra)
        mine = cores[start : start + base + (i < extra)]
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in mine)}


class ServeError(ValueError):
    """A run or setting the server cannot start from: one line, exit 2."""


def model_folder(run: Path) -> tuple[Path, dict[str, Any]]:
    """The model folder to serve for ``run`` and the run's config (``{}`` for a bare folder):
    a run folder serves ``checkpoints/final``; a folder with ``config.json`` (a run's
    ``checkpoints/final``, any Hugging Face model) is served as it is."""
    from omegaconf import OmegaConf

    if not run.is_dir():
        raise ServeError(f"{run}: no such folder (give a training run folder)")
    cands = [(run / "checkpoints" / "final", run), (run, run.parent.parent)]
    for model, owner in cands:
        if (model / "config.json").is_file():
            cfg_file = owner / "config.yaml"
            cfg: dict[str, Any] = {}
            if cfg_file.is_file():
                try:
                    cfg = OmegaConf.to_container(OmegaConf.load(cfg_file), resolve=True) or {}
                except Exception as exc:  # noqa: BLE001 - any unreadable config is the user's
                    raise ServeError(f"{cfg_file}: cannot read it ({exc})") from None
            return model, cfg
    raise ServeError(
        f"{run}: no model to serve (expected {run / 'checkpoints' / 'final'} with config.json; "
        "a run writes it when training ends)"
    )


def _context(model: Path) -> int | None:
    try:
        n = json.loads((model / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, json.JSONDecodeError) as exc:
        raise ServeError(f"{model / 'config.json'}: unreadable ({exc})") from None
    return int(n) if n else None


def _chat_template(model: Path) -> Any:
    """The checkpoint's chat template (``chat_template.jinja``, else ``tokenizer_config.json``'s)."""
    jinja = model / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    try:
        return json.loads((model / "tokenizer_config.json").read_text()).get("chat_template")
    except (OSError, json.JSONDecodeError):
        return None


def tool_parser(model: Path, rollout: dict[str, Any]) -> str | None:
    """vLLM's tool-call parser for a run in the tool-call format (``None`` for other runs)."""
    if rollout.get("action_format") != "tool_call":
        return None
    syntax = str(rollout.get("tool_syntax") or "auto")
    if syntax != "auto":
        return syntax
    try:
        return detect_syntax(_chat_template(model))
    except ValueError as exc:
        raise ServeError(f"{model}: {exc}") from None


def server_command(
    run: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str | None = None,
    max_model_len: int | None = None,
    dtype: str | None = None,
    kv_cache_memory_bytes: int | None = None,
    cpu: bool | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The vLLM server command serving ``run`` (see the module docstring); ``None`` settings
    come from the run's config (``cpu=None``: vLLM's platform decides)."""
    run = Path(run).expanduser()
    model, cfg = model_folder(run)
    rollout, model_cfg = cfg.get("rollout") or {}, cfg.get("model") or {}
    if cpu is None:
        from .vllm_process import on_cpu

        cpu = on_cpu()
    owner = run if model != run or not (run.parent.parent / "config.yaml").is_file() else None
    name = served_model_name or (owner or run.parent.parent).name
    dtype = dtype or str(model_cfg.get("dtype") or "auto")
    ctx = max_model_len or rollout.get("max_model_len") or _context(model)
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        name,
        "--host",
        host,
        "--port",
        str(int(port)),
        "--dtype",
        dtype,
        "--generation-config",
        "vllm",
        "--logits-processors",
        TRIE_PROCESSOR,
        "--logprobs-mode",
        "processed_logprobs",
    ]
    if ctx:
        cmd += ["--max-model-len", str(int(ctx))]
    parser = tool_parser(model, rollout)
    if parser:
        cmd += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    kv = kv_cache_memory_bytes or rollout.get("kv_cache_memory_bytes")
    if cpu:
        cmd += [
            "--enforce-eager",
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens",
            str(max(4096, int(ctx or 0))),
            "--kv-cache-memory-bytes",
            str(int(kv or CPU_KV_BYTES)),
        ]
    elif kv:
        cmd += ["--kv-cache-memory-bytes", str(int(kv))]
    return cmd + list(extra)


def member_transfer(transfer: str = "auto", cpu: bool | None = None) -> str:
    """The weight-transfer engine of a fleet member: ``auto`` is vLLM's ``nccl`` where CUDA
    runs, else ``agentrl_gloo``."""
    if transfer != "auto":
        return transfer
    if cpu is None:
        from .vllm_process import on_cpu

        cpu = on_cpu()
    return "agentrl_gloo" if cpu else "nccl"


def member_command(
    model: str | Path,
    *,
    transfer: str = "auto",
    cpu: bool | None = None,
    extra: Sequence[str] = (),
    **settings: Any,
) -> list[str]:
    """The command of a fleet member serving ``model`` (a run or any model folder): the server
    of :func:`server_command` plus the token endpoint and the weight-transfer engine; run it with
    :data:`MEMBER_ENV` added to the environment."""
    cmd = server_command(model, cpu=cpu, **settings)
    engine = json.dumps({"backend": member_transfer(transfer, cpu)})
    return cmd + ["--enable-scale-out", "--weight-transfer-config", engine, *extra]
