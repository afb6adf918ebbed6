"""The trainer's hook registry: the code behind the names a credit module declares.

A credit module declares what it asks of the trainer by name (:class:`agentrl.credit.TrainerAsks`:
an action format, the critic's outputs, step hooks), so the credit library stays free of the
trainer. This registry maps those names to code:

- **action formats** (:func:`register_format`, :class:`FormatHook`): how responses are written
  and parsed (an :class:`~agentrl.rollout.ActionFormat` built from the run's ``rollout.action``
  settings), the closing hint the prompt needs, and the step-batch extras the format records.
  ``default`` is the configured :class:`~agentrl.rollout.ActionFormat` (``rollout.action_format=
  tag``) and ``tool_call`` the tool-call format (``rollout.action_format=tool_call``,
  :class:`~agentrl.rollout.tools.ToolCallFormat`); a credit module that asks for its own format
  (HiPER) cannot be combined with ``tool_call``.
- **step hooks** (:func:`register_steps`, :class:`StepHooks`): a step-batch preparation after
  the rollout and before credit (e.g. critic values the module reads), and extra inputs of the
  update after credit (e.g. per-token advantages routed to spans).

:func:`trainer_hooks` resolves one credit config into a :class:`TrainerHooks` (the format, what the
learner must hold, the step hooks, the inputs the trainer supplies), which the recipe, the
runner builder (:func:`agentrl.methods.build_runner`) and the checks before a run read; none of
them names a method.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import credit
from ..credit import CreditResult, StepBatch, token_shapers
from ..rollout.parse import ActionFormat
from ..rollout.tools import HINT as TOOL_HINT
from ..rollout.tools import detect_syntax, tool_format

__all__ = [
    "BASE_INPUTS",
    "DEFAULT_FORMAT",
    "TOOL_FORMAT",
    "FormatHook",
    "StepHooks",
    "TrainerHooks",
    "format_hook",
    "formats",
    "register_format",
    "register_steps",
    "trainer_hooks",
]

#: Optional step-batch inputs the trainer supplies to any credit module that declares them (the
#: critic's value at the last prompt token, hidden-state embeddings, the observation text, the
#: next state's key, the acting agent and the episode's category); formats and step hooks add their own (:attr:`TrainerHooks.supplies`).
BASE_INPUTS = frozenset(
    {"value", "embedding", "observation", "next_state_key", "agent", "category"}
)
DEFAULT_FORMAT = "default"
TOOL_FORMAT = "tool_call"
#: ``rollout.action_format`` -> the registered format it selects (when no credit module asks).
ROLLOUT_FORMATS = {"tag": DEFAULT_FORMAT, "tool_call": TOOL_FORMAT}

#: ``prepare(learner, tokenizer, fmt, batch, seqs) -> (batch, prepared)``: the step batch with the
#: columns the hooks supply, and what the update step needs of this preparation (``prepared``).
Prepare = Callable[[Any, Any, ActionFormat, StepBatch, list], tuple[StepBatch, Any]]
#: ``update_inputs(res, prepared, batch, seqs) -> (learner keyword arguments, metrics)``.
UpdateInputs = Callable[
    [CreditResult, Any, StepBatch, list], tuple[dict[str, Any], dict[str, float]]
]
#: ``example(batch) -> batch`` with plausible values of the columns a hook supplies (the checks
#: before a run dry-run the credit module on a synthetic batch).
Example = Callable[[StepBatch], StepBatch]


@dataclass(frozen=True)
class FormatHook:
    """A named action format.

    - ``build``: the :class:`~agentrl.rollout.ActionFormat` from the run's ``rollout.action``
      settings (a dict of :class:`agentrl.config.ActionSettings`' keys; a format may ignore some);
    - ``prompt_hint``: the prompt's closing instruction for this format (replaces
      ``rollout.prompt.response_hint``; ``None``: keep the configured one);
    - ``records``: the step-batch extras its ``step_extras`` fills per step;
    - ``example``: those extras filled with plausible values on a synthetic batch.

    ``build`` also receives ``tool_syntax``: ``rollout.tool_syntax`` resolved against the
    tokenizer's chat template (``None`` where it cannot be told; a format that needs it raises).
    """

    build: Callable[[Mapping[str, Any]], ActionFormat]
    prompt_hint: str | None = None
    records: frozenset[str] = frozenset()
    example: Example | None = None


@dataclass(frozen=True)
class StepHooks:
    """A method's trainer-side steps around credit.

    - ``prepare``: after the rollout, before credit (see :data:`Prepare`); it fills ``supplies``;
    - ``update_inputs``: after credit, the learner's extra keyword arguments and metrics (see
      :data:`UpdateInputs`); a ``token_advantages`` argument among them replaces a token shaper's;
    - ``example``: the ``supplies`` columns filled with plausible values on a synthetic batch.
    """

    prepare: Prepare
    update_inputs: UpdateInputs
    supplies: frozenset[str] = frozenset()
    example: Example | None = None
    sets_token_advantages: bool = False


_FORMATS: dict[str, FormatHook] = {}
_STEPS: dict[str, StepHooks] = {}


def _register(table: dict, kind: str, name: str, hook: Any, cls: type) -> None:
    if not isinstance(hook, cls):
        raise TypeError(f"{kind} {name!r} must be a {cls.__name__}, got {hook!r}")
    if name in table and table[name] is not hook:
        raise ValueError(f"{kind} {name!r} is already registered")
    table[name] = hook


def register_format(name: str, hook: FormatHook) -> None:
    """Register action format ``name`` (a credit module asks for it with ``action_format=name``)."""
    _register(_FORMATS, "action format", name, hook, FormatHook)


def register_steps(name: str, hook: StepHooks) -> None:
    """Register step hooks ``name`` (a credit module asks for them with ``steps=name``)."""
    _register(_STEPS, "step hooks", name, hook, StepHooks)


def formats() -> list[str]:
    """Names of the registered action formats."""
    return sorted(_FORMATS)


def _lookup(table: dict, kind: str, name: str, module: str | None) -> Any:
    try:
        return table[name]
    except KeyError:
        who = f"credit module {module!r} asks for " if module else ""
        raise KeyError(
            f"{who}{kind} {name!r}, which no trainer module registers "
            f"(registered: {', '.join(sorted(table)) or 'none'}; see agentrl/methods)"
        ) from None


def format_hook(credit_name: str, action_format: str = "tag") -> tuple[str, FormatHook]:
    """The action format credit module ``credit_name`` asks for, else the one
    ``rollout.action_format`` (``action_format``) selects: name, hook. A module's own format
    and ``tool_call`` exclude each other (``ValueError``)."""
    if action_format not in ROLLOUT_FORMATS:
        raise ValueError(
            f"rollout.action_format must be one of {', '.join(ROLLOUT_FORMATS)}, got {action_format!r}"
        )
    asked = credit.asks(credit_name).action_format
    if asked and action_format != "tag":
        raise ValueError(
            f"credit module {credit_name!r} writes its own action format ({asked!r}); "
            f"it cannot be combined with rollout.action_format={action_format}"
        )
    name = asked or ROLLOUT_FORMATS[action_format]
    return name, _lookup(_FORMATS, "action format", name, credit_name)


def resolve_tool_syntax(setting: str, chat_template: Any) -> str | None:
    """``rollout.tool_syntax`` for a tokenizer's chat template: as set, or told from the template
    (``auto``; ``None`` where it cannot be told)."""
    if setting != "auto":
        return setting
    try:
        return detect_syntax(chat_template)
    except ValueError:
        return None


def _build_tool_format(action: Mapping[str, Any]) -> ActionFormat:
    syntax = action.get("tool_syntax")
    if syntax is None:
        detect_syntax(None)  # raises the one-line explanation
    return tool_format(action, syntax)


def _build_default(action: Mapping[str, Any]) -> ActionFormat:
    return ActionFormat(**{k: v for k, v in action.items() if k != "tool_syntax"})


@dataclass(frozen=True)
class TrainerHooks:
    """What the trainer does for one credit config (built by :func:`trainer_hooks`)."""

    needs: frozenset[str]  # the step-batch inputs the credit module reads
    format_name: str
    format: FormatHook
    value_outputs: int  # outputs of the critic's value head (when ``value`` is needed)
    keep_reference: bool  # the token shaper reads the reference policy's log-probs
    steps: StepHooks | None = None

    @property
    def supplies(self) -> frozenset[str]:
        """The optional step-batch inputs the trainer can supply with these hooks."""
        own = self.steps.supplies if self.steps is not None else frozenset()
        return BASE_INPUTS | self.format.records | own

    @property
    def prompt_features(self) -> frozenset[str]:
        """The inputs the generic no-grad pass computes at each step's last prompt token
        (``value``, ``embedding``), unless the step hooks supply them."""
        own = self.steps.supplies if self.steps is not None else frozenset()
        return (self.needs & {"value", "embedding"}) - own

    def learner_options(self) -> dict[str, Any]:
        """The learner's keyword arguments these hooks decide: its critic and reference."""
        return {
            "value_head": "value" in self.needs,
            "value_outputs": self.value_outputs,
            "keep_reference": self.keep_reference,
        }

    def prepare(
        self, learner: Any, tokenizer: Any, fmt: ActionFormat, batch: StepBatch, seqs: list
    ) -> tuple[StepBatch, Any]:
        """The step hooks' preparation of the step batch (none: the batch unchanged, ``None``)."""
        if self.steps is None:
            return batch, None
        return self.steps.prepare(learner, tokenizer, fmt, batch, seqs)

    def example(self, batch: StepBatch) -> StepBatch:
        """``batch`` with plausible values of what the format and step hooks supply."""
        for fill in (self.format.example, self.steps.example if self.steps else None):
            if fill is not None:
                batch = fill(batch)
        return batch


def trainer_hooks(
    name: str, needs: Iterable[str], token: str | None = None, action_format: str = "tag"
) -> TrainerHooks:
    """The hooks of credit module ``name`` (reading ``needs``) with token shaper ``token``, its
    responses in ``rollout.action_format`` ``action_format`` unless the module asks for its own."""
    asks = credit.asks(name)
    fmt_name, fmt = format_hook(name, action_format)
    steps = None if asks.steps is None else _lookup(_STEPS, "step hooks", asks.steps, name)
    keep_ref = token is not None and "ref_logprob" in token_shapers.needs(token)
    return TrainerHooks(frozenset(needs), fmt_name, fmt, asks.value_outputs, keep_ref, steps)


register_format(DEFAULT_FORMAT, FormatHook(build=_build_default))
register_format(TOOL_FORMAT, FormatHook(build=_build_tool_format, prompt_hint=TOOL_HINT))
