"""``python -m agentrl.train``: train an agent (Hydra app; see ``configs/train.yaml``).

With no arguments it trains the embedded tiny model on 5x5 Sokoban with GiGPO on the CPU and
prints the held-out success before and after. Examples::

    python -m agentrl.train credit=grpo
    python -m agentrl.train env=frozenlake trainer.iterations=20
    python -m agentrl.train model=smollm2-135m rollout.tasks_per_iter=4
    python -m agentrl.train trainer.resume=outputs/2026-01-01/12-00-00
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig


@hydra.main(config_path="pkg://agentrl.configs", config_name="train", version_base=None)
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from .train_config import ConfigError
    from .trainer import Trainer, TrainingStopped

    out = cfg.get("output_dir") or HydraConfig.get().runtime.output_dir
    try:
        trainer = Trainer(cfg, out)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)
    try:
        trainer.run()
    except TrainingStopped:
        sys.exit(3)
    finally:
        trainer.close()


if __name__ == "__main__":
    main()
