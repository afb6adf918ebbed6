"""FSDP2 learner on one GPU: rollout tokens/s, PPO update time and peak GPU memory.

A randomly initialised model of Qwen2.5-0.5B-Instruct's shape (``--shape qwen2.5-1.5b``:
Qwen2.5-1.5B's) is built locally from its architecture numbers (nothing is downloaded; torch and
transformers only). One process, a process group of one rank
(``agentrl.distributed.init_single_rank``), the policy sharded with ``fully_shard`` exactly as
under ``torchrun`` (bf16 compute, fp32 reduction and master weights; gradient checkpointing unless
``--no-gradient-checkpointing``), an unsharded bf16 replica for generation (the rollout engine of
each rank), and:

1. rollout: ``--prompts`` random prompts of ``--prompt-len`` tokens, ``--new-tokens`` sampled
   tokens each (no stop token: every request generates the same count) with the HF backend;
   tokens/s of the best of ``--repeats`` calls after a warm-up;
2. update: one PPO update (1 epoch, one mini-batch, micro-batches of ``--micro-batch``) of the
   learner on those sequences, with random advantages; the best of ``--repeats``; its tokens/s
   and model FLOPs utilisation (MFU: the model FLOPs of a forward and backward pass, 6 x the
   matmul parameters per token plus 12 x layers x hidden x sequence length per token for
   attention (PaLM's count; the recomputation of gradient checkpointing is not counted), over
   ``--peak-tflops``, 790 by default: an H200's dense bf16 figure);
3. sync: the full-weight gather into the replica (what follows every update);
4. peak GPU memory (``torch.cuda.max_memory_allocated``).

GPU (about 2-4 minutes on one H100-class GPU; at most 8 minutes by construction: each phase
is capped by ``--budget-s``; ``scripts/gpu_check.sh`` runs both shapes)::

    python scripts/bench_fsdp_gpu.py
    python scripts/bench_fsdp_gpu.py --shape qwen2.5-1.5b

CPU check of the same code path at a tiny size (what the test suite runs)::

    python scripts/bench_fsdp_gpu.py --device cpu --shape tiny --prompts 4 --prompt-len 16 \\
        --new-tokens 4 --repeats 1

Prints one JSON object (also written to ``--out`` when given).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from agentrl import distributed as D
from agentrl.backends.base import SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.learner import StepSequence
from agentrl.learner.fsdp import FSDPLearner

#: Qwen2.5-0.5B-Instruct's and Qwen2.5-1.5B's architectures (their config.json); ``tiny`` is for
#: the CPU check. ``scripts/gpu_check.sh`` builds its end-to-end model from this table too.
SHAPES = {
    "qwen2.5-0.5b": dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "qwen2.5-1.5b": dict(
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "tiny": dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
}


def build(shape: str, device: str, dtype: torch.dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(**SHAPES[shape], attn_implementation="sdpa")
    with torch.device(device):  # initialised where it runs (a 1.5B init on the CPU takes a while)
        model = Qwen2ForCausalLM(cfg).to(dtype=dtype)
    return model


def model_flops(model, lengths: list[int]) -> float:
    """Forward + backward model FLOPs of sequences of ``lengths`` tokens (PaLM's count): 6 x the
    parameters that multiply (the input embedding is a lookup; a tied one is the LM head) plus
    12 x layers x hidden x sequence length per token (attention scores and values)."""
    c = model.config
    n = sum(p.numel() for p in model.parameters())
    if not c.tie_word_embeddings:
        n -= c.vocab_size * c.hidden_size
    attn = 12 * c.num_hidden_layers * c.hidden_size
    return float(sum(length * (6 * n + attn * length) for length in lengths))


def learner_config(micro: int, n: int):
    from agentrl.learner import LearnerConfig as C

    fields = dict(
        lr=1e-6,
        epochs=1,
        minibatch_size=n,
        micro_batch_size=micro,
        kl_coef=0.0,
        entropy_coef=0.0,
        dtype="auto",
    )
    import dataclasses

    names = {f.name for f in dataclasses.fields(C)}
    return C(**{k: v for k, v in fields.items() if k in names})


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="recompute activations in the backward pass (as model.gradient_checkpointing=true)",
    )
    ap.add_argument(
        "--peak-tflops",
        type=float,
        default=790.0,
        help="the device's peak bf16 TFLOP/s, the denominator of the MFU (790: an H200)",
    )
    ap.add_argument(
        "--budget-s", type=float, default=150.0, help="stop repeating a phase after this"
    )
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --device cpu (with --shape tiny) for the CPU check")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    info = D.init_single_rank(a.device)
    dev = info.device
    gen_dtype = torch.bfloat16 if dev.startswith("cuda") else torch.float32
    if dev.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    policy = build(a.shape, dev, torch.float32)  # fp32 master weights (sharded)
    replica = build(a.shape, dev, gen_dtype)  # the rollout engine's copy
    n_params = sum(p.numel() for p in policy.parameters())
    if a.gradient_checkpointing:  # as agentrl.recipe.build does for model.gradient_checkpointing
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    learner = FSDPLearner(
        policy, learner_config(a.micro_batch, a.prompts), pad_token_id=0, value_head=False
    )
    learner.sync_to(replica)
    backend = HFBackend(replica, pad_token_id=0, max_batch_size=a.prompts)
    rng = np.random.default_rng(0)
    vocab = SHAPES[a.shape]["vocab_size"]
    prompts = [rng.integers(1, vocab, a.prompt_len).tolist() for _ in range(a.prompts)]
    sampling = SamplingParams(
        max_new_tokens=a.new_tokens, temperature=1.0, stop_token_ids=(), seed=0
    )

    def timed(fn, budget: float) -> tuple[float, object]:
        fn()  # warm-up
        best, out, t_start = float("inf"), None, time.perf_counter()
        for _ in range(a.repeats):
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn()
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
            if time.perf_counter() - t_start > budget:
                break
        return best, out

    t_gen, gens = timed(lambda: backend.generate(prompts, sampling), a.budget_s)
    tokens = sum(len(g.token_ids) for g in gens)
    seqs = [
        StepSequence(p, list(g.token_ids), list(g.logprobs), i)
        for i, (p, g) in enumerate(zip(prompts, gens))
    ]
    adv = rng.normal(0, 1, len(seqs)).astype(np.float32)
    peak_rollout = torch.cuda.max_memory_allocated() if dev.startswith("cuda") else None
    t_upd, upd = timed(lambda: learner.update(seqs, adv, seed=0), a.budget_s)
    t_sync, _ = timed(lambda: learner.sync_to(replica), a.budget_s)
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in seqs]
    flops = model_flops(policy, lengths)
    result = {
        "device": torch.cuda.get_device_name() if dev.startswith("cuda") else "cpu",
        "shape": a.shape,
        "parameters": n_params,
        "world_size": info.world_size,
        "prompts": a.prompts,
        "prompt_len": a.prompt_len,
        "new_tokens": a.new_tokens,
        "rollout_tokens": tokens,
        "rollout_s": t_gen,
        "rollout_tokens_per_s": tokens / t_gen,
        "update_s": t_upd,
        "update_sequences": len(seqs),
        "update_tokens": sum(lengths),
        "update_tokens_per_s": sum(lengths) / t_upd,
        "update_model_tflop": flops / 1e12,
        "update_tflops": flops / t_upd / 1e12,
        "peak_tflops": a.peak_tflops,
        # a GPU's peak says nothing about a CPU run
        "mfu": flops / t_upd / (a.peak_tflops * 1e12) if dev.startswith("cuda") else None,
        "gradient_checkpointing": a.gradient_checkpointing,
        "micro_batch": a.micro_batch,
        "sync_s": t_sync,
        "loss": float(upd["loss"]) if isinstance(upd, dict) and "loss" in upd else None,
        "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20
        if dev.startswith("cuda")
        else None,
        "peak_gpu_mib_rollout": peak_rollout / 2**20 if peak_rollout is not None else None,
        "mixed_precision": learner.mixed_precision,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if a.out is not None:
        a.out.write_text(text + "\n")
    D.close_distributed()
    return result


if __name__ == "__main__":
    main()
