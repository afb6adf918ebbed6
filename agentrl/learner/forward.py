"""The learner's forward pass: log-probs and entropies of response tokens, prompt-end features.

Log-probs are those the sampler used: logits divided by the sampling temperature, restricted and
renormalised to the trie's tokens where the step was decoded under a constraint. Only the
``R + 1`` columns that predict response tokens go through the LM head.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .sequences import Collated

__all__ = ["ForwardOut", "response_forward"]


@dataclass
class ForwardOut:
    logprobs: torch.Tensor  # (B, R) float32; 0 on padding
    entropy: torch.Tensor  # (B, R) float32; 0 on padding
    last_hidden: torch.Tensor | None  # (B, H) hidden state at the last prompt token (post-norm)
    #: with ``want_certainty``, from the raw full-vocabulary logits (temperature 1, no constraint):
    self_certainty: torch.Tensor | None = None  # (B, R) logsumexp(logits) - mean(logits)
    token_logit: torch.Tensor | None = None  # (B, R) the chosen token's raw logit
    hidden_at: torch.Tensor | None = None  # (B, H) final hidden state at ``hidden_cols``

    def rows_of(self, inverse: torch.Tensor | None) -> ForwardOut:
        """Row ``b`` of the result is row ``inverse[b]`` here (``None``: unchanged). Indexing
        is differentiable: a row's gradient is the sum of its repeats' gradients."""
        if inverse is None:
            return self
        inv = inverse.to(self.logprobs.device)
        take = lambda t: None if t is None else t.index_select(0, inv)  # noqa: E731
        return ForwardOut(*(take(getattr(self, f.name)) for f in dataclasses.fields(self)))


def response_forward(
    model: torch.nn.Module,
    batch: Collated,
    temperature: float = 1.0,
    *,
    want_entropy: bool = True,
    want_hidden: bool = False,
    want_certainty: bool = False,
    hidden_cols: torch.Tensor | None = None,
) -> ForwardOut:
    """Log-probs of ``batch.response_ids`` under ``model`` (differentiable).

    ``want_certainty`` adds the token shapers' signals of the raw logits; ``hidden_cols`` (one
    column of ``input_ids`` per row) adds the final hidden state there (HiPER's V_low position).
    """
    R = batch.response_width
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        use_cache=False,
        logits_to_keep=R + 1,
        output_hidden_states=want_hidden or hidden_cols is not None,
    )
    logits = out.logits[:, :R, :].float()
    certainty = chosen = None
    if want_certainty:
        certainty = torch.logsumexp(logits, dim=-1) - logits.mean(dim=-1)
        chosen = logits.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    if temperature != 1.0:
        logits = logits / temperature
    tokens = batch.response_ids
    full_logp = torch.log_softmax(logits, dim=-1)
    logp = full_logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    entropy = -(full_logp.exp() * full_logp).sum(-1) if want_entropy else torch.zeros_like(logp)
    if batch.allowed_ids is not None:
        allowed = batch.allowed_ids
        row_constrained = allowed[:, :, 0] != -2  # (B, R)
        valid = allowed >= 0
        sel = logits.gather(-1, allowed.clamp(min=0)).masked_fill(~valid, float("-inf"))
        # Padding positions have no allowed ids: give them a harmless finite row.
        sel = torch.where(valid.any(-1, keepdim=True), sel, torch.zeros_like(sel))
        lse = torch.logsumexp(sel, dim=-1)
        c_logp = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - lse
        logp = torch.where(row_constrained, c_logp, logp)
        if want_entropy:
            # Zero the disallowed slots *before* exp/mul: 0 * -inf would put NaN into the gradient.
            sel_logp = torch.where(valid, sel - lse.unsqueeze(-1), torch.zeros_like(sel))
            c_ent = -(
                torch.where(valid, sel_logp.exp() * sel_logp, torch.zeros_like(sel_logp))
            ).sum(-1)
            entropy = torch.where(row_constrained, c_ent, entropy)
    mask = batch.response_mask
    logp = torch.where(mask, logp, torch.zeros_like(logp))
    entropy = torch.where(mask, entropy, torch.zeros_like(entropy))
    hidden = hidden_at = None
    if want_hidden:
        hidden = out.hidden_states[-1][:, batch.prompt_width - 1, :]
    if hidden_cols is not None:
        rows = torch.arange(len(hidden_cols), device=hidden_cols.device)
        hidden_at = out.hidden_states[-1][rows, hidden_cols, :]
    if certainty is not None:
        zero = torch.zeros_like(logp)
        certainty, chosen = torch.where(mask, certainty, zero), torch.where(mask, chosen, zero)
    return ForwardOut(logp, entropy, hidden, certainty, chosen, hidden_at)
