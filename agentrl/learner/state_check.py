"""Whether a saved learner state fits this learner exactly: checked before anything is copied.

A resume must load the weights that were saved or refuse. ``Tensor.copy_`` broadcasts (a
1-element tensor would set every embedding weight) and a partial state leaves the rest as
initialised, so :func:`check_learner_state` compares a :meth:`Learner.state_dict` with the
learner first: the same trainable parameter names, shapes and dtypes (no key missing, none
extra), a value head exactly when the learner has one, an optimiser state of the same structure
(parameter groups, their hyper-parameter keys and value types, where only keys the learner adds
while training, such as the schedule's ``initial_lr``, may be extra; per-parameter AdamW
tensors of the parameter's shape and dtype), a non-negative integer update count, and only finite numbers
(NaN or infinite weights would otherwise surface as an error far from their cause). Any
difference is a :class:`StateMismatch` whose message names the entry and what differs.

The checks read shapes and dtypes only, so they hold for plain and FSDP-sharded (DTensor)
parameters alike (a DTensor reports its global shape).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["StateMismatch", "check_learner_state", "check_tensor", "plain_value", "same_kind"]

_LEARNER_KEYS = ("model", "value_head", "optimizer", "updates")
_ADAM_STATE = {"step", "exp_avg", "exp_avg_sq"}  # per parameter (plus max_exp_avg_sq: amsgrad)


class StateMismatch(ValueError):
    """A saved learner state that does not fit this learner (the message says where and how)."""


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape)


def _names(keys, limit: int = 3) -> str:
    keys = sorted(map(str, keys))
    return ", ".join(keys[:limit]) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def check_tensor(name: str, got: Any, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """``got`` is a tensor of exactly ``shape`` and ``dtype`` holding only finite numbers."""
    if not isinstance(got, torch.Tensor):
        raise StateMismatch(f"{name} is of type {type(got).__name__}, not a tensor")
    if _shape(got) != tuple(shape):
        raise StateMismatch(
            f"{name} has shape {_shape(got)}, this learner {tuple(shape)} "
            "(a checkpoint of another model or LoRA config?)"
        )
    if got.dtype != dtype:
        raise StateMismatch(f"{name} has dtype {got.dtype}, this learner {dtype}")
    if (got.is_floating_point() or got.is_complex()) and got.numel():
        bad = int((~torch.isfinite(got)).sum())
        if bad:
            raise StateMismatch(
                f"non-finite weights: {name} has {bad} NaN or infinite values of {got.numel()}; "
                "a checkpoint with non-finite numbers cannot be resumed (resume an earlier one)"
            )


def _check_tensors(what: str, got: Any, expected: Mapping[str, Any]) -> None:
    """``got`` maps exactly the names of ``expected`` to tensors of their shapes and dtypes."""
    if not isinstance(got, Mapping):
        raise StateMismatch(f"{what} is of type {type(got).__name__}, not a mapping of tensors")
    missing = [k for k in expected if k not in got]
    extra = [k for k in got if k not in expected]
    if missing:
        raise StateMismatch(
            f"{what} lacks {len(missing)} of this learner's {len(expected)} trainable tensors "
            f"({_names(missing)})"
        )
    if extra:
        raise StateMismatch(
            f"{what} has {len(extra)} tensors this learner does not train ({_names(extra)})"
        )
    for k, ref in expected.items():
        check_tensor(f"{what}[{k!r}]", got[k], _shape(ref), ref.dtype)


def same_kind(current: Any, saved: Any) -> bool:
    """Whether a saved optimiser hyper-parameter has the kind of value the current one has."""
    if isinstance(current, bool) or current is None:  # flags (foreach, fused...: None or bool)
        return saved is None or isinstance(saved, bool)
    if isinstance(current, int | float):
        return _finite_number(saved)
    if isinstance(current, tuple | list):
        return (
            isinstance(saved, tuple | list)
            and len(saved) == len(current)
            and all(same_kind(c, s) for c, s in zip(current, saved))
        )
    if isinstance(current, torch.Tensor):
        return isinstance(saved, torch.Tensor) and _shape(saved) == _shape(current)
    return type(saved) is type(current)


def plain_value(value: Any) -> bool:
    """A hyper-parameter value: a finite number, a flag, ``None``, a string, or a tuple/list of
    them (an optimiser group key the learner adds while training, such as ``initial_lr``)."""
    if value is None or isinstance(value, bool | str):
        return True
    if isinstance(value, int | float):
        return _finite_number(value)
    if isinstance(value, tuple | list):
        return all(plain_value(v) for v in value)
    return False


def _finite_number(x: Any) -> bool:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:  # an integer beyond float64
        return False


def _check_groups(got: Any, current: list[dict[str, Any]]) -> None:
    if not isinstance(got, list | tuple):
        raise StateMismatch(f"optimizer.param_groups is of type {type(got).__name__}, not a list")
    if len(got) != len(current):
        raise StateMismatch(
            f"optimizer has {len(got)} parameter groups, this learner {len(current)} "
            "(saved with another value-head setting?)"
        )
    for i, (g, cur) in enumerate(zip(got, current)):
        where = f"optimizer.param_groups[{i}]"
        if not isinstance(g, Mapping):
            raise StateMismatch(f"{where} is of type {type(g).__name__}, not a mapping")
        missing = [k for k in cur if k not in g]
        if missing:
            raise StateMismatch(f"{where} lacks {_names(missing)} (saved by another torch?)")
        for k in g:  # keys the learner adds as it trains (the schedule's initial_lr)
            if k not in cur and not plain_value(g[k]):
                raise StateMismatch(f"{where}[{k!r}] is {g[k]!r}, not a hyper-parameter")
        saved_params = g["params"]
        if not isinstance(saved_params, list | tuple) or [(type(i), i) for i in saved_params] != [
            (int, i) for i in cur["params"]
        ]:
            raise StateMismatch(
                f"{where}['params'] is {g['params']!r}, this learner's {list(cur['params'])!r}"
            )
        for k, v in cur.items():
            if k != "params" and not same_kind(v, g[k]):
                raise StateMismatch(f"{where}[{k!r}] is {g[k]!r}, not a value like {v!r}")


def _check_optimizer(got: Any, optimizer: torch.optim.Optimizer) -> None:
    if not isinstance(got, Mapping) or set(got) != {"state", "param_groups"}:
        have = sorted(map(str, got)) if isinstance(got, Mapping) else type(got).__name__
        raise StateMismatch(
            f"optimizer is not an optimiser state (keys state, param_groups; {have})"
        )
    current = optimizer.state_dict()["param_groups"]
    _check_groups(got["param_groups"], current)
    params = {
        i: p
        for g, cur in zip(optimizer.param_groups, current)
        for i, p in zip(cur["params"], g["params"])
    }
    groups = {i: g for g in got["param_groups"] for i in g["params"]}
    state = got["state"]
    if not isinstance(state, Mapping):
        raise StateMismatch(f"optimizer.state is of type {type(state).__name__}, not a mapping")
    for i, entry in state.items():
        where = f"optimizer.state[{i!r}]"
        if isinstance(i, bool) or i not in params:
            raise StateMismatch(f"{where}: no such parameter index in this learner")
        if not isinstance(entry, Mapping):
            raise StateMismatch(f"{where} is of type {type(entry).__name__}, not a mapping")
        p = params[i]
        need = _ADAM_STATE | ({"max_exp_avg_sq"} if groups[i].get("amsgrad") else set())
        if isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) and set(entry) != need:
            raise StateMismatch(
                f"{where} has entries {_names(entry)}, an AdamW state has {_names(need)}"
            )
        for k, v in entry.items():
            name = f"{where}[{k!r}]"
            if k == "step":  # AdamW's step count: a scalar tensor (or a number)
                x = v if not isinstance(v, torch.Tensor) or v.numel() != 1 else v.item()
                if not _finite_number(x) or not x >= 0:
                    raise StateMismatch(f"{name} is {v!r}, not a step count")
            else:
                check_tensor(name, v, _shape(p), p.dtype)


def check_learner_state(
    state: Any,
    model: torch.nn.Module,
    value_head: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer,
) -> None:
    """Raise :class:`StateMismatch` unless ``state`` (a :meth:`Learner.state_dict`) fits the
    learner made of ``model``, ``value_head`` and ``optimizer`` exactly (see the module doc)."""
    if not isinstance(state, Mapping):
        raise StateMismatch(f"the learner state is of type {type(state).__name__}, not a mapping")
    missing = [k for k in _LEARNER_KEYS if k not in state]
    extra = [k for k in state if k not in _LEARNER_KEYS]
    if missing or extra:
        raise StateMismatch(
            "the learner state "
            + (f"lacks {_names(missing)}" if missing else f"has unknown keys {_names(extra)}")
            + f" (expected {', '.join(_LEARNER_KEYS)})"
        )
    updates = state["updates"]
    if isinstance(updates, bool) or not isinstance(updates, int) or updates < 0:
        raise StateMismatch(f"updates is {updates!r}, not a count of updates")
    trainable = {k: p for k, p in model.named_parameters() if p.requires_grad}
    _check_tensors("model", state["model"], trainable)
    saved_head = state["value_head"]
    if (value_head is None) != (saved_head is None):
        raise StateMismatch(
            "the checkpoint has "
            + (
                "a value head, this learner none"
                if value_head is None
                else "no value head, this learner one"
            )
            + " (saved with another credit module or value-head setting?)"
        )
    if value_head is not None:
        _check_tensors("value_head", saved_head, dict(value_head.state_dict()))
    _check_optimizer(state["optimizer"], optimizer)
