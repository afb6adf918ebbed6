"""``python -m agentrl.train``: train an agent (Hydra app; see ``configs/train.yaml``).

With no arguments it trains the embedded tiny model on 5x5 Sokoban with GiGPO on the CPU and
prints the held-out success before and after. Examples::

    python -m agentrl.train credit=grpo
    python -m agentrl.train env=frozenlake trainer.iterations=20
    python -m agentrl.train model=smollm2-135m rollout.tasks_per_iter=4
    python -m agentrl.train trainer.resume=outputs/2026-01-01/12-00-00

Exit codes: 0 done; 2 a bad config (one line per problem, naming the key; nothing was started);
3 training stopped early (non-finite numbers; the last good checkpoint is kept); 130 / 143
interrupted by SIGINT / SIGTERM (128 + the signal's number; one line says at once what the run
waits for; an update that would outlast ``trainer.signal_grace_s`` is abandoned; a second signal
quits without saving; a checkpoint of the iterations done
and their summary are written: ``trainer.resume=<the printed checkpoint>`` continues exactly,
asynchronous rollouts included, except with ``rollout.partial_rollouts=true``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from .backends.base import BackendError
from .config import ConfigError, TrainConfig, load_config
from .distributed import close_distributed, record
from .overrides import unknown_group_option
from .recipe import TrainingStopped, train
from .training.checkpoint import CheckpointError
from .training.interrupt import Interrupted, Quit
from .training.preflight import budget_is_preset, preflight
from .training.producer import ProducerError

_started: list[bool] = []  # set once Hydra has composed the config and called main()


@hydra.main(config_path="pkg://agentrl.configs", config_name="train", version_base=None)
def main(raw: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    _started.append(True)
    out = raw.get("output_dir") or HydraConfig.get().runtime.output_dir
    try:
        cfg = prepare(raw, out)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)
    try:
        train(cfg, Path(out))
    except TrainingStopped:
        sys.exit(3)
    except Interrupted as exc:  # a checkpoint and the summary of what was done are written
        print(getattr(exc, "line", str(exc)), file=sys.stderr)
        sys.exit(exc.exit_code)
    except Quit as exc:  # a second signal: at once, nothing more saved (the pool is closed)
        print(f"training quit by a second {exc.name} without saving: the checkpoints written "
              f"before it are kept in {Path(out) / 'checkpoints'}", file=sys.stderr)  # fmt: skip
        sys.exit(exc.exit_code)
    except (CheckpointError, ConfigError) as exc:  # a checkpoint, LoRA targets, the vLLM engine
        print(exc, file=sys.stderr)
        sys.exit(2)
    except BackendError as exc:  # an engine that cannot go on (a fleet's server)
        print(exc, file=sys.stderr)
        sys.exit(1)
    except ProducerError as exc:  # the same, met by the rollout producer (rollout.staleness >= 1)
        if not isinstance(exc.__cause__, BackendError):
            raise  # anything else is a bug: its traceback
        print(exc.__cause__, file=sys.stderr)
        sys.exit(1)


def prepare(raw: DictConfig, out: str | None) -> TrainConfig:
    """The typed config of a composed one, checked before any work (:func:`load_config`,
    :func:`preflight`); a response budget left to the model preset is fitted to the run's
    action format (a method's own, the tool-call format), and the line saying so printed.
    Raises :class:`ConfigError`."""
    cfg = load_config(raw)
    for note in preflight(cfg, out, fit_budget=budget_is_preset(raw)):
        print(note)
    return cfg


def cli() -> None:
    """Run :func:`main`; a config Hydra cannot compose (unknown key, wrong type) exits 2 too.

    Under ``torchrun`` a rank's exception is recorded for torchrun's failure report
    (:func:`agentrl.distributed.record`) and the process group is left at the end."""
    problem = unknown_group_option(sys.argv[1:])
    if problem:
        print(f"invalid config: {problem}", file=sys.stderr)
        sys.exit(2)
    clean = False
    try:
        record(main)()
        clean = True
    except SystemExit as exc:
        clean = not exc.code
        if exc.code == 1 and not _started:
            sys.exit(2)
        raise
    finally:
        close_distributed(wait=clean)


if __name__ == "__main__":
    cli()
