"""The learner and the HF backend on a CUDA device (marker ``gpu``; skipped without one).

CI has no GPU and skips these; ``scripts/gpu_check.sh`` runs them on a device (``pytest -m gpu``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.backends.base import SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.learner import Learner, LearnerConfig, StepSequence, collate, response_forward

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

PROMPTS = [
    "#####\n#OP_#\n#X__#\n#___#\n#####",
    "go to the cabinet and take the apple",
    "ab",
    "Current observation:\nPFFF\nFHFH\nFFFH\nHFFG",
]


def _generate(model, tok, seed: int = 3) -> list[StepSequence]:
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    backend = HFBackend(model, tok.pad_token_id, max_batch_size=3)  # chunked: 3 + 1
    sp = SamplingParams(
        max_new_tokens=10, temperature=1.0, stop_token_ids=(tok.eos_token_id,), seed=seed
    )
    gens = backend.generate(prompts, sp)
    assert all(len(g.token_ids) == len(g.logprobs) > 0 for g in gens)
    return [
        StepSequence(p, g.token_ids, g.logprobs, i) for i, (p, g) in enumerate(zip(prompts, gens))
    ]


def test_sampling_logprobs_match_the_learner_on_cuda(tiny):
    """fp32 on the GPU: the sampler's log-probs are the learner's recomputation (the PPO ratio
    starts at 1), through left padding, chunked batches and the KV cache."""
    model, tok = tiny
    model = model.to("cuda")
    seqs = _generate(model, tok)
    batch = collate(seqs, tok.pad_token_id).to("cuda")
    with torch.no_grad():
        out = response_forward(model, batch, 1.0)
    diff = (out.logprobs - batch.old_logprobs).abs()[batch.response_mask]
    assert float(diff.max()) < 1e-3


def test_learner_updates_fp32_weights_under_bf16_autocast_on_cuda(tiny):
    """dtype=auto on a GPU: bf16 autocast over fp32 master weights; the update is finite and
    moves the weights, which stay fp32 on the device. One mini-batch: its KL to the sampling
    policy is measured before the optimiser step, so it is the bf16 recomputation's error alone."""
    model, tok = tiny
    model = model.to("cuda")
    learner = Learner(
        model, LearnerConfig(lr=1e-3, epochs=1, minibatch_size=4, micro_batch_size=2),
        tok.pad_token_id,
    )  # fmt: skip
    if torch.cuda.is_bf16_supported():
        assert isinstance(learner.autocast(), torch.autocast)
    seqs = _generate(model, tok)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    adv = np.array([1.0, -1.0, 0.5, -0.5], dtype=np.float32)
    res = learner.update(seqs, adv)
    assert all(np.isfinite(v) for v in res.values()), res
    assert res["approx_kl_old"] < 0.01  # the fp32 sampler's and the bf16 learner's log-probs
    moved = [k for k, v in model.named_parameters() if not torch.equal(v, before[k])]
    assert moved and all(p.dtype == torch.float32 and p.is_cuda for p in model.parameters())
