"""The env-service protocol's values: JSON with tuples and non-finite floats kept.

Env results carry Python values JSON has no word for: ``state_key`` is often a tuple (and must
stay hashable), ``milestones`` is a tuple, a broken env may return a NaN reward. They travel
tagged: ``{"$tuple": [...]}`` and ``{"$float": "nan" | "inf" | "-inf"}``; numpy scalars become
Python numbers. Anything else (a set, an array, an object, a dict with a non-string or
``$``-prefixed key) cannot be sent, and :func:`to_wire` names where it sits.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_ACTION_CHARS", "PROTOCOL", "WireError", "from_wire", "to_wire"]

#: Protocol version: ``GET /v1/health`` reports it; a client refuses another.
PROTOCOL = 1
#: The longest action a request may carry (the env action space's limit).
MAX_ACTION_CHARS = 100_000
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class WireError(TypeError):
    """A value that the protocol cannot carry (the message names where it sits)."""


def to_wire(value: Any, where: str = "value") -> Any:
    """``value`` as plain JSON data (tuples and non-finite floats tagged)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if hasattr(value, "dtype") and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return to_wire(value.item(), where)  # a numpy scalar
    if isinstance(value, tuple):
        return {"$tuple": [to_wire(v, f"{where}[{k}]") for k, v in enumerate(value)]}
    if isinstance(value, list):
        return [to_wire(v, f"{where}[{k}]") for k, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or k.startswith("$"):
                raise WireError(f"{where} has key {k!r}: keys must be strings not starting with $")
            out[k] = to_wire(v, f"{where}[{k!r}]")
        return out
    raise WireError(f"{where} ({type(value).__name__}) cannot be sent as JSON")


def from_wire(value: Any) -> Any:
    """The inverse of :func:`to_wire`; raises ``ValueError`` on a malformed tag."""
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1 and "$tuple" in value:
            items = value["$tuple"]
            if not isinstance(items, list):
                raise ValueError("a $tuple tag must hold a list")
            return tuple(from_wire(v) for v in items)
        if len(value) == 1 and "$float" in value:
            if value["$float"] not in _NONFINITE:
                raise ValueError(f"unknown $float value {value['$float']!r}")
            return _NONFINITE[value["$float"]]
        return {k: from_wire(v) for k, v in value.items()}
    return value
