"""Trainer benchmarks: HF rollout throughput, and time / peak memory per training iteration.

    python scripts/bench_train.py rollout [--model tiny|smollm2-135m] [--tokens 32]
            [--batch 1,64] [--prompt grid|preset] [--vllm]
        tokens/s of the HF backend at each batch (free sampling, no stop token), the ratio of the
        last batch to the first, and with --vllm the same for a vLLM engine (max_model_len 2048,
        512 MiB KV cache) and vLLM / hf per batch, all in one process.
    python scripts/bench_train.py iteration [--iterations 3] [hydra overrides ...]
        runs the trainer (no evaluation) for a few iterations and prints the mean time per
        iteration (wall and CPU, split rollout / credit / update) and the process's peak RSS.

    python scripts/bench_train.py sync [--rank 16] [--repeats 3]
        vLLM weight sync of model=smollm2-135m with LoRA (all linear layers): seconds and bytes
        per sync with rollout.lora_sync=merged (full merged weights) and =adapter (the adapter
        alone), each on its own engine, median of --repeats; and the engine's tokens/s with
        each (the adapter costs the engine extra compute per token).

    python scripts/bench_train.py update [--full] [--no-checkpointing] [--seqs 16] [--threads 1]
        one PPO update (trainer defaults, epochs 1) of model=smollm2-135m, after an untimed
        first one on other sequences (a process's first update pays a one-time start-up,
        reported as first_update_s), on synthetic step sequences (prompts of 180-230 tokens,
        responses of 4-16), as model FLOP/s against a
        dense float32 torch.mm peak (2048^3) measured in the same process and thread count,
        before and after the update. FLOPs, counted on real (unpadded) tokens, recomputation
        not counted: forward 2 x N_layers x tokens + 2 x hidden x vocab per LM-head column
        (R + 1 per row: logits_to_keep) + causal attention 2 x 2 x layers x d_attn x L(L+1)/2
        per row; training multiplies the weight matmuls by 3 where the weights train (full
        fine-tuning: forward, input gradient, weight gradient) and by 2 where they are frozen
        (LoRA: no weight gradient), LoRA's own matmuls by 3, attention by 3. Also reports the
        padding fraction of the micro-batches.

Torch runs on one thread unless ``--threads`` says otherwise (the trainer's default).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rollout_prompts(tok, kind: str) -> list[list[int]]:
    """Prompt ids: ``grid`` (one Sokoban room, the tiny model's prompt) or ``preset`` (the first
    steps of 16 Sokoban rooms, the default's 16 tasks, as the rollout's PromptBuilder renders them
    with the SmolLM2 preset's settings: instruction and response hint as a system turn, the room,
    the action list)."""
    if kind == "grid":
        messages = [{"role": "user", "content": "#####\n#___#\n#OX_#\n#__P#\n#####"}]
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return [tok(prompt, add_special_tokens=False)["input_ids"]]
    from agentrl import envs
    from agentrl.rollout.prompt import PromptBuilder, PromptConfig

    env = envs.make("Sokoban-v0", dim_room=5, num_boxes=1, open_room=True, search_depth=1)
    builder = PromptBuilder(tok, PromptConfig(history=2, max_prompt_tokens=1024))
    out = []
    for seed in range(16):
        obs, info = env.reset(seed=seed)
        out.append(builder.build(info["instruction"], [], obs, info["admissible_actions"]))
    return out


def _grouped(prompts: list[list[int]], batch: int) -> list[list[int]]:
    """``batch`` prompts in groups, as a rollout batch holds them: each task's prompt repeated
    ``batch / len(prompts)`` times (at least once; a batch smaller than the tasks takes the
    first ones)."""
    per = max(1, batch // len(prompts))
    return [p for p in prompts for _ in range(per)][:batch]


def _batches(text: str) -> list[int]:
    """``--batch``: comma-separated positive integers."""
    try:
        out = [int(b) for b in text.split(",")]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,64, got {text!r}")
    return out


def _throughput(backend, prompts: list[list[int]], tokens: int, repeats: int) -> dict:
    from agentrl.backends.base import SamplingParams

    backend.generate(prompts[:4], SamplingParams(max_new_tokens=2, seed=0))  # warm-up
    times, n = [], 0
    for r in range(repeats):
        sp = SamplingParams(max_new_tokens=tokens, stop_token_ids=(), seed=r)
        t = time.perf_counter()
        gens = backend.generate(prompts, sp)
        times.append(time.perf_counter() - t)
        n = sum(len(g.token_ids) for g in gens)
    return {"seconds": statistics.median(times), "tokens_per_s": n / statistics.median(times)}


def bench_rollout(args) -> dict:
    """Generation throughput of the hf backend (and with ``--vllm`` of vLLM, same prompts and
    batches, one process: hf first, then the engine) in new tokens per second."""
    import torch

    from agentrl.backends.hf import HFBackend
    from agentrl.models import load_model

    model, tok, path = load_model(args.model)
    prompts = _rollout_prompts(tok, args.prompt)
    feed = {b: _grouped(prompts, b) for b in args.batch}
    batches = args.batch
    out: dict = {"model": args.model, "new_tokens": args.tokens, "distinct_prompts": len(prompts),
                 "prompt_tokens_mean": statistics.mean(map(len, prompts)),
                 "threads": torch.get_num_threads(), "batches": batches}  # fmt: skip
    hf = HFBackend(model, tok.pad_token_id, max_batch_size=max(256, *batches))
    out["hf"] = {b: _throughput(hf, feed[b], args.tokens, args.repeats) for b in batches}
    if len(batches) > 1:
        first, last = out["hf"][batches[0]], out["hf"][batches[-1]]
        out[f"hf_ratio_batch{batches[-1]}_over_batch{batches[0]}"] = (
            last["tokens_per_s"] / first["tokens_per_s"]
        )
    if args.vllm:
        from agentrl.backends.vllm_engine import VLLMBackend, VLLMConfig

        del hf
        cfg = VLLMConfig(model=path, max_model_len=2048, kv_cache_memory_bytes=512 << 20,
                         max_num_seqs=max(batches))  # fmt: skip
        engine = VLLMBackend(cfg)
        try:
            out["vllm"] = {
                b: _throughput(engine, feed[b], args.tokens, args.repeats) for b in batches
            }
        finally:
            engine.close()
        for b in batches:
            out[f"vllm_over_hf_batch{b}"] = (
                out["vllm"][b]["tokens_per_s"] / out["hf"][b]["tokens_per_s"]
            )
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def bench_sync(args) -> dict:
    import torch

    from agentrl.backends.base import SamplingParams
    from agentrl.backends.vllm_engine import VLLMBackend, VLLMConfig
    from agentrl.learner.weights import adapter_weights, policy_state_dict
    from agentrl.models import apply_lora, load_model

    model, tok, path = load_model(args.model)
    lora = apply_lora(model, r=args.rank, alpha=2 * args.rank)
    with torch.no_grad():  # a trained-looking adapter (B = 0 at init would merge to the base)
        gen = torch.Generator().manual_seed(0)
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 1e-3)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "#####\n#OP_#\n#X__#\n#___#\n#####"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    sp = SamplingParams(max_new_tokens=32, stop_token_ids=(), seed=0)
    out: dict = {"model": args.model, "lora_rank": args.rank, "threads": torch.get_num_threads()}
    for mode in ("merged", "adapter"):
        cfg = VLLMConfig(model=path, kv_cache_memory_bytes=128 << 20,
                         lora_rank=args.rank if mode == "adapter" else None)  # fmt: skip
        engine = VLLMBackend(cfg)
        prep, sync, nbytes = [], [], 0
        try:
            for _ in range(args.repeats):
                t = time.perf_counter()
                if mode == "adapter":
                    a = adapter_weights(lora)
                    prep.append(time.perf_counter() - t)
                    engine.update_adapter(a.tensors, a.config)
                else:
                    sd = policy_state_dict(lora)
                    prep.append(time.perf_counter() - t)
                    engine.update_weights(sd)
                sync.append(engine.last_sync_seconds)
                nbytes = engine.last_sync_bytes
            engine.generate([ids] * 4, SamplingParams(max_new_tokens=2, seed=0))  # warm-up
            t = time.perf_counter()
            gens = engine.generate([ids] * args.batch, sp)
            gen_s = time.perf_counter() - t
        finally:
            engine.close()
        out[mode] = {
            "bytes": nbytes,
            "prepare_s": statistics.median(prep),  # merge / copy the adapter out of the model
            "engine_s": statistics.median(sync),  # what the engine takes to load them
            "total_s": statistics.median(p + s for p, s in zip(prep, sync)),
            f"tokens_per_s_batch{args.batch}": sum(len(g.token_ids) for g in gens) / gen_s,
        }
    out["bytes_ratio_merged_over_adapter"] = out["merged"]["bytes"] / out["adapter"]["bytes"]
    out["time_ratio_merged_over_adapter"] = out["merged"]["total_s"] / out["adapter"]["total_s"]
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def matmul_peak(n: int = 2048, repeats: int = 3) -> float:
    """Dense float32 torch.mm FLOP/s (best of ``repeats``) at this process's thread count."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def update_flops(model, seqs, lora: bool) -> float:
    """Model FLOPs of one forward + backward over ``seqs`` (see ``update`` in the docstring)."""
    cfg = model.config
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = base.model.layers
    lora_n = sum(p.numel() for n, p in layers.named_parameters() if "lora_" in n)
    body_n = sum(p.numel() for n, p in layers.named_parameters() if "lora_" not in n)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    d_attn = cfg.num_attention_heads * head_dim
    w = 2 if lora else 3  # frozen weights: forward + input gradient; trained: + weight gradient
    total = 0.0
    for s in seqs:
        L, k = len(s.prompt_ids) + len(s.response_ids), len(s.response_ids) + 1
        total += w * 2 * body_n * L + 3 * 2 * lora_n * L
        total += w * 2 * cfg.hidden_size * cfg.vocab_size * k  # LM head, tied to the embedding
        total += 3 * 2 * 2 * cfg.num_hidden_layers * d_attn * L * (L + 1) / 2
    return total


def bench_update(args) -> dict:
    import numpy as np
    import torch

    from agentrl.config import LearnerConfig
    from agentrl.learner import Learner, StepSequence
    from agentrl.learner.update import plan_micro_batches
    from agentrl.models import apply_lora, load_model

    model, tok, _ = load_model(args.model)
    if not args.no_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not args.full:
        model = apply_lora(model, r=16, alpha=32)
    V = model.config.vocab_size

    def synthetic(seed: int) -> tuple[list, np.ndarray]:
        rng = np.random.default_rng(seed)
        seqs = []
        for i in range(args.seqs):
            p, r = int(rng.integers(180, 231)), int(rng.integers(4, 17))
            ids = rng.integers(0, V, p + r).tolist()
            seqs.append(StepSequence(ids[:p], ids[p:], [-1.0] * r, i))
        return seqs, rng.normal(size=len(seqs)).astype(np.float32)

    seqs, adv = synthetic(0)
    cfg = LearnerConfig(lr=1e-5, epochs=1, micro_batch_tokens=args.micro_batch_tokens,
                        entropy_coef=0.0)  # fmt: skip
    learner = Learner(model, cfg, tok.pad_token_id)
    # A process's first update pays a one-time start-up (seconds, whatever the shapes):
    # it is timed on other sequences of the same distribution and reported apart, so the ratio
    # is the steady state every later training iteration sees.
    t = time.perf_counter()
    learner.update(*synthetic(1))
    first_s = time.perf_counter() - t
    mbs = plan_micro_batches(
        seqs, np.arange(len(seqs)), cfg.micro_batch_size, cfg.micro_batch_tokens
    )
    real = sum(len(s.prompt_ids) + len(s.response_ids) for s in seqs)
    padded = 0
    for mb in mbs:
        P = max(len(seqs[i].prompt_ids) for i in mb)
        R = max(len(seqs[i].response_ids) for i in mb)
        padded += len(mb) * (P + R)
    flops = update_flops(model, seqs, lora=not args.full)
    peak_before = matmul_peak()
    t = time.perf_counter()
    learner.update(seqs, adv)
    upd_s = time.perf_counter() - t
    peak_after = matmul_peak()
    peak = max(peak_before, peak_after)
    return {
        "model": args.model,
        "mode": "full" if args.full else "lora r16",
        "gradient_checkpointing": not args.no_checkpointing,
        "threads": torch.get_num_threads(),
        "sequences": len(seqs),
        "tokens": real,
        "micro_batches": len(mbs),
        "padding_fraction": 1 - real / padded,
        "first_update_s": first_s,  # the process's first update (other sequences), not in the ratio
        "update_s": upd_s,
        "model_gflop": flops / 1e9,
        "model_gflops_per_s": flops / upd_s / 1e9,
        "matmul_gflops_per_s_before_after": [peak_before / 1e9, peak_after / 1e9],
        "ratio_to_matmul_peak": flops / upd_s / peak,
        "peak_rss_mb": peak_rss_mb(),
    }


def bench_iteration(args) -> dict:
    from hydra import compose, initialize_config_module

    from agentrl.config import load_config
    from agentrl.recipe import build, train

    overrides = [
        "trainer.eval_initial=false",
        "trainer.progress=false",
        "trainer.loggers=[]",
        "trainer.plot=false",
        "env.eval_episodes=1",
        "trainer.checkpoint_every=0",
        f"trainer.iterations={args.iterations}",
        f"trainer.num_threads={args.threads}",
        *args.overrides,
    ]
    with initialize_config_module("agentrl.configs", version_base=None):
        cfg = load_config(compose("train", overrides=overrides))
    with tempfile.TemporaryDirectory() as tmp:
        parts = build(cfg)
        rss_after_setup = peak_rss_mb()
        try:
            train(cfg, Path(tmp), parts)
        finally:
            parts.runner.close()
        with open(f"{tmp}/metrics.jsonl") as fh:
            rows = [json.loads(line) for line in fh]
    train = [r for r in rows if r.get("phase") == "train"]
    mean = lambda k: statistics.mean(r[k] for r in train)  # noqa: E731
    out = {
        "overrides": args.overrides,
        "iterations": len(train),
        "agent_steps_per_iteration": mean("train/agent_steps"),
        "prompt_tokens_per_iteration": mean("train/prompt_tokens"),
        "wall_s": {k: mean(f"time/{k}_s") for k in ("iteration", "rollout", "credit", "update")},
        "cpu_s": {k: mean(f"cpu/{k}_s") for k in ("rollout", "credit", "update")},
        "peak_rss_mb_after_setup": rss_after_setup,
        "peak_rss_mb": peak_rss_mb(),
    }
    out["cpu_s"]["iteration"] = sum(out["cpu_s"].values())
    try:
        import torch

        if torch.cuda.is_available():
            out["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
    except ImportError:
        pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("rollout")
    r.add_argument("--model", default="tiny")
    r.add_argument("--tokens", type=int, default=32)
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument(
        "--batch", type=_batches, default="1,64", help="comma-separated batch sizes (default 1,64)"
    )
    r.add_argument("--prompt", choices=("grid", "preset"), default="grid",
                   help="grid: one room (the tiny model's prompt); preset: the SmolLM2 preset's "
                   "instruction + room + action list")  # fmt: skip
    r.add_argument("--vllm", action="store_true", help="also vLLM on the same prompts and batches")
    sy = sub.add_parser("sync")
    sy.add_argument("--model", default="smollm2-135m")
    sy.add_argument("--rank", type=int, default=16)
    sy.add_argument("--repeats", type=int, default=3)
    sy.add_argument("--batch", type=int, default=16)
    sy.add_argument("--threads", type=int, default=1)
    up = sub.add_parser("update")
    up.add_argument("--model", default="smollm2-135m")
    up.add_argument("--full", action="store_true", help="full fine-tuning (default: LoRA r 16)")
    up.add_argument("--no-checkpointing", action="store_true")
    up.add_argument("--seqs", type=int, default=16)
    up.add_argument("--micro-batch-tokens", type=int, default=2048)
    up.add_argument("--threads", type=int, default=1)
    it = sub.add_parser("iteration")
    it.add_argument("--iterations", type=int, default=3)
    it.add_argument("--threads", type=int, default=1)
    it.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    bench = {"rollout": bench_rollout, "sync": bench_sync, "update": bench_update,
             "iteration": bench_iteration}  # fmt: skip
    result = bench[args.what](args)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
