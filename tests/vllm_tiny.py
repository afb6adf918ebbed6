"""A tiny random-initialised Qwen2 model and tokenizer for the vLLM tests, and the reference
log-probs of a plain transformers forward pass.

The head size is 32: vLLM's CPU attention supports head sizes 32, 64, 80, ... (not 16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from agentrl.backends.trie import allowed_per_position

SPECIALS = ["<pad>", "<s>", "</s>", "<action>", "</action>"]
CORPUS = [
    "step 0 : the box is left of the goal",
    "push left push right move up move down",
    "the player stands next to the wall and the box",
    "<action> move up </action> <action> push left </action>",
] * 20


@dataclass
class Tiny:
    path: Path | None
    model: Qwen2ForCausalLM
    tokenizer: Tokenizer
    vocab_size: int


def build_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def build_tiny_model(
    path: Path | None, seed: int = 0, num_attention_heads: int = 2, init_scale: float = 0.3
) -> Tiny:
    """Random Qwen2 (fp32, hidden 64, 2 layers, head size 64/heads), saved to ``path`` if given."""
    tok = build_tokenizer()
    vocab = tok.get_vocab_size()
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        initializer_range=init_scale,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        pad_token_id=tok.token_to_id("<pad>"),
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).float().eval()
    if path is not None:
        path = Path(path)
        model.save_pretrained(path)
        PreTrainedTokenizerFast(
            tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
        ).save_pretrained(path)
    return Tiny(path, model, tok, vocab)


@torch.no_grad()
def hf_logprobs(
    model: torch.nn.Module,
    prompt: Sequence[int],
    response: Sequence[int],
    temperature: float = 1.0,
    allowed: Sequence[Sequence[int]] | None = None,
) -> list[float]:
    """Log-prob of each response token under ``model`` (fp32), at ``temperature``, renormalised
    over the next tokens the trie of ``allowed`` permits, when given."""
    ids = torch.tensor([list(prompt) + list(response)])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    if allowed is not None:
        mask = torch.full_like(logits, float("-inf"))
        for i, ids in enumerate(allowed_per_position(allowed, response)):
            mask[i, ids] = 0.0
        logits = logits + mask
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, torch.tensor(response)[:, None])[:, 0].tolist()
