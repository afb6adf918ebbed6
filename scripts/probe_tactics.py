"""Can a model learn tic-tac-toe's one-move tactics from labels? A supervised probe.

Self-play may fail to teach a small policy to take an immediate win or to block one; this probe
asks whether the model could hold those tactics at all, and from how many examples. It collects
the distinct positions met along uniformly random games where the player to move can win at
once or must block (the kinds of ``agentrl.evaluation.games.one_move_tactics``), splits them
80/20, fits the untrained model (the run config's model, the prompt the policy sees) by
cross-entropy to a good move's tokens, and prints the held-out greedy accuracy under constrained
decoding every ``--eval-every`` steps.

    python scripts/probe_tactics.py                      # the embedded tiny model, 600 steps
    python scripts/probe_tactics.py --cell _ --steps 400  # board cells drawn as "_" instead of "."
    python scripts/probe_tactics.py model.tiny.hidden_size=256 model.tiny.num_layers=3

Results of 2026-12-07 are in docs/lab-log.md ("What the policy learns: openings, not tactics").
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any


def _positions(env: Any, games: int, rng: random.Random) -> list[tuple[Any, str, list[int]]]:
    from agentrl.evaluation.games import _tactic

    seen, out = set(), []
    for _ in range(games):
        state = env.game.new_initial_state()
        while not state.is_terminal():
            key = str(state)
            if key not in seen:
                seen.add(key)
                t = _tactic(state)
                if t is not None:
                    out.append((state.clone(), t[0], t[1]))
            state.apply_action(rng.choice(state.legal_actions()))
    rng.shuffle(out)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=600, help="optimiser steps (default 600)")
    ap.add_argument("--batch", type=int, default=32, help="positions a step (default 32)")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW rate (default 1e-3)")
    ap.add_argument("--eval-every", type=int, default=200, help="steps between evaluations")
    ap.add_argument("--eval-positions", type=int, default=300, help="held-out positions scored")
    ap.add_argument("--games", type=int, default=20000, help="random games to collect from")
    ap.add_argument(
        "--cell", default=".", help="how an empty cell is drawn (default OpenSpiel's .)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("overrides", nargs="*", help="train config overrides (model.*)")
    args = ap.parse_args()
    if len(args.cell) != 1 or args.cell in "xo\n":
        ap.error(f"--cell must be one character other than x, o and a newline, not {args.cell!r}")
    if min(args.steps, args.batch, args.eval_every, args.eval_positions, args.games) < 1:
        ap.error("--steps, --batch, --eval-every, --eval-positions and --games must be >= 1")

    import torch
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from agentrl import envs
    from agentrl.backends import make_backend
    from agentrl.config import load_config
    from agentrl.episodes import Episode, EpisodeResult
    from agentrl.evaluation.games import action_probabilities
    from agentrl.methods import build_runner
    from agentrl.models import load_model
    from agentrl.pool import EnvSpec, make_pool
    from agentrl.rollout.loop import ModelPolicy

    try:
        with initialize_config_module("agentrl.configs", version_base=None):
            raw = compose("train", ["env=tictactoe", "model.max_new_tokens=10", *args.overrides])
        cfg = load_config(raw)
    except Exception as exc:  # noqa: BLE001 - a bad override is one line
        print(f"probe_tactics: bad config: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)  # the positions, their order, then the batches
    tiny = (
        None
        if cfg.model.tiny is None
        else {k: getattr(cfg.model.tiny, k) for k in cfg.model.tiny.__dataclass_fields__}
    )
    model, tok, _ = load_model(cfg.model.name, tiny=tiny, dtype=cfg.model.dtype, device="cpu")
    pool = make_pool([EnvSpec(cfg.env.id, dict(cfg.env.kwargs))], num_workers=0)
    try:
        rollout = OmegaConf.to_container(OmegaConf.structured(cfg.rollout))
        runner = build_runner(cfg, pool, make_backend(rollout, model, tok, seed=0), tok)
        policy = ModelPolicy(runner.backend, runner.builder, runner.fmt, runner.sampling(1.0, 0),
                             constrained=True)  # fmt: skip
        env = envs.make(cfg.env.id, **dict(cfg.env.kwargs)).unwrapped

        def encode(state: Any, good: list[int]) -> tuple[list[int], list, set[str]]:
            player = state.current_player()
            obs, role, acts = env.view(state, player)
            head, *board = obs.rsplit("\n", 3)
            obs = "\n".join([head, *(row.replace(".", args.cell) for row in board)])
            info = {"instruction": role, "admissible_actions": acts, "agent": f"player_{player}"}
            ep = Episode(None, 0, obs, info, first_info=info,
                         result=EpisodeResult(0, 0, "", "", None))  # fmt: skip
            fmt = policy.format_of(ep)
            choices = [
                (a, tuple(policy._action_tokens(x))) for a in acts for x in fmt.renders(a, None)
            ]
            return policy._prompt(ep), choices, {state.action_to_string(player, a) for a in good}

        data = [(kind, *encode(s, good)) for s, kind, good in _positions(env, args.games, rng)]
    finally:
        pool.close()
    cut = int(0.8 * len(data))
    train, test = data[:cut], data[cut:][: args.eval_positions]
    kinds = {k: sum(d[0] == k for d in data) for k in ("win", "defend")}
    print(f"{len(data)} positions {kinds}; {len(train)} to train on, {len(test)} held out scored")

    def evaluate() -> str:
        model.eval()
        hit = {"win": [0, 0], "defend": [0, 0]}
        with torch.no_grad():
            for kind, prompt, choices, good in test:
                probs = action_probabilities(model, tok, [prompt], [choices])[0]
                hit[kind][0] += max(probs, key=probs.get) in good
                hit[kind][1] += 1
        model.train()
        return ", ".join(f"{k} {a / max(n, 1):.2f}" for k, (a, n) in hit.items())

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    print(f"step 0 (0 examples): held-out greedy accuracy {evaluate()}", flush=True)
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = torch.zeros(())
        for _kind, prompt, choices, good in rng.sample(train, min(args.batch, len(train))):
            ids = next(i for a, i in choices if a in good)
            x = torch.tensor([list(prompt) + list(ids)])
            logits = model(input_ids=x).logits[0]
            loss = loss + torch.nn.functional.cross_entropy(
                logits[len(prompt) - 1 : -1], x[0, len(prompt) :]
            )
        opt.zero_grad()
        (loss / args.batch).backward()
        opt.step()
        if step % args.eval_every == 0 or step == args.steps:
            print(f"step {step} ({step * args.batch} examples, {time.perf_counter() - t0:.0f} s): "
                  f"held-out greedy accuracy {evaluate()}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
