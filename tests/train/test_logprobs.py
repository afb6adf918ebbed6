"""Generation log-probs equal the learner's recomputation (fp32), with and without constraints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.backends.base import SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.backends.trie import allowed_per_position
from agentrl.learner import StepSequence, collate, response_forward

PROMPTS = [
    "#####\n#OP_#\n#X__#\n#___#\n#####",
    "go to the cabinet and take the apple",
    "ab",
    "Current observation:\nPFFF\nFHFH\nFFFH\nHFFG",
]
ACTIONS = ["up", "down", "left", "right"]


def _setup(tiny):
    model, tok = tiny
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    acts = [
        tok(f"<action>{a}</action>", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        for a in ACTIONS
    ]
    return model, tok, prompts, acts


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("mode", ["free", "constrained", "mixed"])
def test_sampling_logprobs_match_learner(tiny, temperature, mode):
    model, tok, prompts, acts = _setup(tiny)
    allowed = {"free": None, "constrained": [acts] * 4, "mixed": [None, acts, acts, None]}[mode]
    backend = HFBackend(model, tok.pad_token_id, max_batch_size=3)  # chunked: 3 + 1
    sp = SamplingParams(
        max_new_tokens=10, temperature=temperature, stop_token_ids=(tok.eos_token_id,), seed=3
    )
    gens = backend.generate(prompts, sp, allowed)
    seqs = []
    for i, (p, g) in enumerate(zip(prompts, gens)):
        assert len(g.token_ids) == len(g.logprobs) > 0
        per_pos = None
        if allowed is not None and allowed[i] is not None:
            assert tuple(g.token_ids) in {
                tuple(a) for a in acts
            }  # constrained output is an allowed sequence
            per_pos = allowed_per_position(allowed[i], g.token_ids)
        seqs.append(StepSequence(p, g.token_ids, g.logprobs, i, per_pos))
    batch = collate(seqs, tok.pad_token_id)
    with torch.no_grad():
        out = response_forward(model, batch, temperature)
    diff = (out.logprobs - batch.old_logprobs).abs()[batch.response_mask]
    assert float(diff.max()) < 1e-4
    if mode != "free":
        # Forced tokens (a single allowed token) have log-prob exactly 0 under the constraint.
        forced = [
            (b, j)
            for b, s in enumerate(seqs)
            if s.allowed
            for j, a in enumerate(s.allowed)
            if len(a) == 1
        ]
        assert forced and all(abs(float(out.logprobs[b, j])) < 1e-6 for b, j in forced)


def test_seeded_sampling_is_reproducible_and_greedy_is_argmax(tiny):
    model, tok, prompts, acts = _setup(tiny)
    backend = HFBackend(model, tok.pad_token_id)
    sp = SamplingParams(max_new_tokens=6, seed=11)
    a = backend.generate(prompts, sp)
    b = HFBackend(model, tok.pad_token_id, max_batch_size=1).generate(prompts, sp)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    greedy = backend.generate(prompts[:1], SamplingParams(max_new_tokens=1, temperature=0.0))[0]
    with torch.no_grad():
        logits = model(torch.tensor([prompts[0]])).logits[0, -1]
    assert greedy.token_ids[0] == int(logits.argmax())
    assert abs(greedy.logprobs[0] - float(torch.log_softmax(logits, -1).max())) < 1e-5


def test_top_p_truncates_sampling_only(tiny):
    model, tok, prompts, _ = _setup(tiny)
    backend = HFBackend(model, tok.pad_token_id)
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([prompts[2]])).logits[0, -1], -1).numpy()
    top = int(np.argmax(probs))
    # top_p smaller than the top token's probability keeps only the top token.
    sp = SamplingParams(max_new_tokens=1, top_p=float(probs[top]) * 0.5, seed=0)
    gens = backend.generate([prompts[2]] * 16, sp)
    assert all(g.token_ids[0] == top for g in gens)
    assert all(
        abs(g.logprobs[0] - float(np.log(probs[top]))) < 1e-4 for g in gens
    )  # untruncated log-prob


def test_endless_output_stops_at_the_cap(tiny):
    model, tok, prompts, _ = _setup(tiny)
    gens = HFBackend(model, tok.pad_token_id).generate(
        prompts, SamplingParams(max_new_tokens=5, stop_token_ids=(-1,), seed=0)
    )
    assert all(len(g.token_ids) == 5 and g.finish_reason == "length" for g in gens)
