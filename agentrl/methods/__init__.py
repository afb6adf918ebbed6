"""What each credit method asks of the trainer, and the one runner builder that applies it.

A credit module declares by name what it asks of the trainer (:class:`agentrl.credit.TrainerAsks`:
its action format, its critic's outputs, its step hooks). :mod:`.registry` maps those names to
code and resolves a run's hooks (:func:`trainer_hooks`); :func:`build_runner` assembles the episode
runner for training, its held-out evaluation and ``agentrl.evaluate agent=model``. Every other
module of this package is one method's trainer side and registers its hooks when imported; the
package imports them all (found by listing the package), so a new method adds its file here and
touches nothing else of the trainer.
"""

import importlib
import pkgutil

from .registry import (
    BASE_INPUTS,
    DEFAULT_FORMAT,
    FormatHook,
    StepHooks,
    TrainerHooks,
    format_hook,
    formats,
    register_format,
    register_steps,
    trainer_hooks,
)
from .runner import action_format, build_runner

__all__ = [
    "BASE_INPUTS",
    "DEFAULT_FORMAT",
    "FormatHook",
    "StepHooks",
    "TrainerHooks",
    "action_format",
    "build_runner",
    "format_hook",
    "formats",
    "register_format",
    "register_steps",
    "trainer_hooks",
]

for _method in pkgutil.iter_modules(__path__):  # each method's trainer side registers itself
    importlib.import_module(f"{__name__}.{_method.name}")
del _method
