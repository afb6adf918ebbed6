"""Composition without code: an episode-level base plus weighted step-level terms.

    compute(batch, "compose",
            base={"name": "grpo", "mode": "mean"},
            terms=[{"name": "gigpo", "weight": 1.0, "mode": "mean"},
                   {"name": "milestone", "weight": 0.5, "component": "step"}])

A = base.advantages + sum_k weight_k * term_k.components[component_k]

Every module returns its parts in ``CreditResult.components`` (``"episode"``, ``"step"``, ...), so a
term contributes only its step part by default (``component="step"``), never a second copy of an
episode term. Specs are plain nested dicts/lists (or a bare module name), so a Hydra config group
can hold them; keys other than ``name``, ``weight`` and ``component`` are the module's options and
are checked against its signature like any :func:`agentrl.credit.compute` call. ``base=None`` means no
base (the terms alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .batch import StepBatch
from .checks import Number, check_value
from .registry import CreditResult, available, compute, group_based, needs, register

__all__ = ["compose", "parse_spec", "run_spec"]

_META = ("name", "weight", "component")


def parse_spec(spec: Any, where: str) -> tuple[str, dict[str, Any], float, str | None]:
    """``(name, options, weight, component)`` from a module name or a mapping with ``name``."""
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, Mapping):
        raise TypeError(
            f"{where} must be a module name or a mapping with 'name', got {type(spec).__name__}"
        )
    if "name" not in spec:
        raise ValueError(
            f"{where} needs a 'name' key (the credit module); got keys {sorted(map(str, spec))}"
        )
    name = spec["name"]
    if not isinstance(name, str) or name not in available():  # say which spec, not only the name
        raise KeyError(f"{where}: unknown credit module {name!r}; valid: {', '.join(available())}")
    opts = {str(k): _plain(v) for k, v in spec.items() if k not in _META}
    weight = spec.get("weight", 1.0)
    check_value(f"{where}.weight", weight, Number())
    component = spec.get("component")
    return str(name), opts, weight, (None if component is None else str(component))


def _plain(value: Any) -> Any:
    """Hydra/OmegaConf containers to plain dicts and lists (they behave as Mapping/Sequence)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]
    return value


def run_spec(batch: StepBatch, spec: Any, where: str = "base") -> CreditResult:
    """Run the module a spec names with the spec's options."""
    name, opts, _, _ = parse_spec(spec, where)
    return compute(batch, name, **opts)


def _component(result: CreditResult, name: str, component: str, where: str) -> np.ndarray:
    if component == "advantages":
        return np.asarray(result.advantages, dtype=np.float64)
    comps = result.components
    if component not in comps:
        have = ", ".join(["advantages", *sorted(comps)])
        raise ValueError(
            f"{where}: credit module {name!r} has no component {component!r}; it has: {have}"
        )
    return np.asarray(comps[component], dtype=np.float64)


def _compose_needs(o: dict[str, Any]) -> set[str]:
    """The union of what the base and every term need."""
    specs = ([] if o["base"] is None else [("base", o["base"])]) + [
        (f"terms[{i}]", s) for i, s in enumerate(o["terms"] or ())
    ]
    out: set[str] = set()
    for where, spec in specs:
        name, opts, _, _ = parse_spec(spec, where)
        out |= needs(name, **opts)
    return out


def spec_group_based(spec: Any, where: str) -> bool:
    """Whether the module a spec names needs task groups of two or more (see ``group_based``)."""
    name, opts, _, _ = parse_spec(spec, where)
    return group_based(name, **opts)


def _compose_groups(o: dict[str, Any]) -> bool:
    """Group-based when every part is: one part with signal of its own (a critic) suffices."""
    specs = ([] if o["base"] is None else [("base", o["base"])]) + [
        (f"terms[{i}]", s) for i, s in enumerate(o["terms"] or ())
    ]
    return bool(specs) and all(spec_group_based(s, where) for where, s in specs)


@register("compose", needs=_compose_needs, groups=_compose_groups)
def compose(batch: StepBatch, *, base: Any = "grpo", terms: Any = ()) -> CreditResult:
    """Sum of a base module's advantages and weighted components of other modules."""
    if isinstance(terms, str | Mapping) or not isinstance(terms, Sequence):
        raise TypeError(
            "option 'terms' must be a list of module specs (names or mappings with 'name')"
        )
    adv = np.zeros(len(batch))
    diag: dict[str, Any] = {}
    components: dict[str, np.ndarray] = {}
    if base is not None:
        name, opts, weight, component = parse_spec(base, "base")
        res = compute(batch, name, **opts)
        part = weight * _component(res, name, component or "advantages", "base")
        adv += part
        components["base"] = part
        diag.update({f"base/{k}": v for k, v in res.diagnostics.items()})
        if "episode" in res.components:
            components["episode"] = weight * np.asarray(res.components["episode"], dtype=np.float64)
    step = np.zeros(len(batch))
    for i, spec in enumerate(terms):
        where = f"terms[{i}]"
        name, opts, weight, component = parse_spec(spec, where)
        res = compute(batch, name, **opts)
        part = weight * _component(res, name, component or "step", where)
        adv += part
        step += part
        components[f"term{i}:{name}"] = part
        diag.update({f"term{i}:{name}/{k}": v for k, v in res.diagnostics.items()})
    components["step"] = step
    return CreditResult(adv, diag, components)
