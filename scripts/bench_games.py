"""Learning benchmark for games: self-play training, then win/draw/loss, exploitability, ratings.

Per (credit module, seed): ``python -m agentrl.train env=<game> credit=<c> seed=S ...`` in a
subprocess (one torch thread, niced; its CPU time from ``wait4``) keeping a checkpoint every
``--checkpoint-every`` iterations; then, in a second subprocess (``--evaluate-run``), every kept
checkpoint and the untrained model play held-out games against each ``--opponents`` bot
(OpenSpiel's uniform random and MCTS bots, the policy's seat alternating, greedy as the trainer's
held-out evaluation), the final model plays the earlier checkpoints, OpenSkill rates them all,
and for poker OpenSpiel computes the exact exploitability of the policy's action probabilities
(sampling temperature 1, constrained decoding's distribution); for tic-tac-toe each checkpoint's
one-move tactics are measured too (``--tactics`` positions of each kind: the probability on an
immediate win where one exists, and on a move that leaves the opponent no immediate win where
some moves do). Results: ``<out>/table.md`` and
``<out>/results.json``; a finished run whose command is unchanged is reused.

    python scripts/bench_games.py --game tictactoe --credits gigpo grpo mars --seeds 0-1
    python scripts/bench_games.py --game kuhn --credits gigpo grpo mars --seeds report --jobs 2

Bars checked (``--check``): tic-tac-toe: the final loss rate against ``random`` below 10 % and
the final non-loss rate against the first MCTS opponent above its initial Wilson interval, on
every seed; poker: the final exploitability below the initial one on every seed, and the
bootstrap intervals of the mean initial and final exploitability across seeds disjoint.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.evaluation.multiseed import parse_seeds

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["trainer.progress=false", "trainer.loggers=[]", "trainer.plot=false"]

#: Per game: the env config, the train overrides that suit the tiny model, the bots, poker or not.
GAMES: dict[str, dict[str, Any]] = {
    "tictactoe": {
        "env": "tictactoe",
        "overrides": ["model.max_new_tokens=10"],
        "opponents": ["random", "mcts:10", "mcts:100"],
        "poker": False,
        "tactics": True,
    },
    "kuhn": {
        "env": "kuhn",
        "overrides": [],
        "opponents": ["random"],
        "poker": True,
        "tactics": False,
    },
}


def _run(cmd: list[str], log: Path) -> tuple[float | None, int, float]:
    """Run ``cmd`` niced with its output in ``log``; (CPU seconds, return code, wall seconds)."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, preexec_fn=lambda: os.nice(10)
        )
        _, status, ru = os.wait4(proc.pid, 0)
    return ru.ru_utime + ru.ru_stime, os.waitstatus_to_exitcode(status), time.perf_counter() - t0


def train_and_evaluate(game: str, credit: str, seed: int, out: Path, args) -> dict[str, Any] | None:
    g = GAMES[game]
    folder = (out / credit / f"seed_{seed}").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "agentrl.train",
        f"env={g['env']}",
        f"credit={credit}",
        f"seed={seed}",
        f"output_dir={folder}",
        *QUIET,
        "trainer.num_threads=1",
        f"trainer.checkpoint_every={args.checkpoint_every}",
        "trainer.keep_checkpoints=1000",
        "trainer.eval_initial=false",
        "trainer.eval_every=0",
        *g["overrides"],
        *args.overrides,
    ]
    stamp = folder / "bench_run.json"
    prev = json.loads(stamp.read_text()) if stamp.is_file() else {}
    if prev.get("cmd") != cmd[1:] or prev.get("returncode") != 0 or args.fresh:
        cpu, rc, wall = _run(cmd, folder.parent / f"seed_{seed}.train.log")
        prev = {"cmd": cmd[1:], "returncode": rc, "cpu_s": cpu, "wall_s": wall}
        stamp.write_text(json.dumps(prev))
        if rc != 0:
            print(f"training failed (exit {rc}): {shlex.join(cmd)}", file=sys.stderr)
            return None
    result = folder / "games_eval.json"
    eval_cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--evaluate-run",
        str(folder),
        "--game",
        game,
        "--games",
        str(args.games),
        "--tactics",
        str(args.tactics),
        "--opponents",
        *(args.opponents or g["opponents"]),
    ]
    done = json.loads(result.read_text()) if result.is_file() else {}
    if done.get("cmd") != eval_cmd[1:] or args.fresh:
        cpu, rc, wall = _run(eval_cmd, folder.parent / f"seed_{seed}.eval.log")
        if rc != 0:
            print(f"evaluation failed (exit {rc}): {shlex.join(eval_cmd)}", file=sys.stderr)
            return None
        done = json.loads(result.read_text())
        done.update({"cmd": eval_cmd[1:], "eval_cpu_s": cpu})
        result.write_text(json.dumps(done))
    return {"seed": seed, "train_cpu_s": prev["cpu_s"], **done}


# -- evaluation of one run (a subprocess) ---------------------------------------------------------
def evaluate_run(
    folder: Path, game: str, games: int, opponents: list[str], tactics: int = 0
) -> dict[str, Any]:
    import torch
    from omegaconf import OmegaConf

    from agentrl import envs
    from agentrl.backends import make_backend
    from agentrl.config import load_config
    from agentrl.episodes import play_episodes
    from agentrl.evaluation.games import (
        SeatPolicy,
        exploitability,
        one_move_tactics,
        outcome,
        ratings,
        wdl_table,
    )
    from agentrl.methods import build_runner
    from agentrl.models import load_model
    from agentrl.pool import EnvSpec, ResetSpec, make_pool
    from agentrl.rollout.loop import ModelPolicy
    from agentrl.rollout.runner import eval_seed
    from agentrl.training.checkpoint import complete_checkpoints

    torch.set_num_threads(1)
    cfg = load_config(OmegaConf.load(folder / "config.yaml"))
    e = cfg.env
    tiny = (
        None
        if cfg.model.tiny is None
        else {k: getattr(cfg.model.tiny, k) for k in cfg.model.tiny.__dataclass_fields__}
    )
    model, tok, _ = load_model(cfg.model.name, tiny=tiny, dtype=cfg.model.dtype, device="cpu")
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    width = min(games * len(opponents), 256)
    kwargs = {**dict(e.kwargs), "opponent": None, "eval_opponents": list(opponents)}
    pool = make_pool([EnvSpec(e.id, kwargs)] * width, num_workers=0)
    backend = make_backend(OmegaConf.to_container(OmegaConf.structured(cfg.rollout)), model, tok,
                           seed=cfg.seed)  # fmt: skip
    runner = build_runner(cfg, pool, backend, tok)
    points = [("initial", None)] + [
        (f"iter{int(p.name[5:])}", p / "state.pt")
        for p in complete_checkpoints(folder / "checkpoints")
    ]

    def load(state_path: Path | None) -> None:
        model.load_state_dict(base)
        if state_path is not None:
            state = torch.load(state_path, weights_only=True, map_location="cpu")
            model.load_state_dict(state["learner"]["model"], strict=False)
        model.eval()

    tids = []
    for k, spec in enumerate(opponents):
        for i in range(games):
            tids.append(f"{spec}@{i % 2}#{2_000_000_000 + 1000 * k + i}")
    resets = [ResetSpec(i, None, {"task_id": t}) for i, t in enumerate(tids)]
    report: dict[str, Any] = {"points": {}, "opponents": opponents, "games": games}
    env = envs.make(e.id, **dict(e.kwargs))
    for name, path in points:
        load(path)
        eps = runner.play(
            resets, temperature=cfg.rollout.eval_temperature, seed=eval_seed(cfg.seed)
        )
        table = wdl_table(eps)
        entry: dict[str, Any] = {"wdl": {opp: o.to_dict() for (_cat, opp), o in table.items()}}
        if GAMES[game]["poker"]:
            entry["exploitability"] = exploitability(
                env.game, _probabilities(env, runner, model, tok)
            )
        if GAMES[game]["tactics"] and tactics > 0:
            entry["tactics"] = one_move_tactics(
                env.game, _probabilities(env, runner, model, tok), positions=tactics
            )
        report["points"][name] = entry
        print(name, json.dumps(entry)[:400], flush=True)
    # the final model against the earlier checkpoints (both seats), then ratings over everything
    matches: list[tuple[str, str, str]] = []
    final_name, final_path = points[-1]
    sampling = runner.sampling(cfg.rollout.eval_temperature, eval_seed(cfg.seed))
    for name, path in points[:-1]:
        other = _model_copy(model, base, path)
        load(final_path)
        mine = ModelPolicy(
            backend, runner.builder, runner.fmt, sampling, constrained=runner.settings.constrained
        )
        theirs_backend = make_backend(OmegaConf.to_container(OmegaConf.structured(cfg.rollout)), other, tok,
                                      seed=cfg.seed)  # fmt: skip
        theirs = ModelPolicy(theirs_backend, runner.builder, runner.fmt, sampling,
                             constrained=runner.settings.constrained)  # fmt: skip
        n = max(2, games // 2)
        for seat in range(2):
            policy = SeatPolicy({f"player_{seat}": mine}, default=theirs)
            specs = [ResetSpec(i, None, {"task_id": f"self#{3_000_000_000 + i}"}) for i in range(n)]
            for ep in play_episodes(
                pool, policy, specs, max_steps=e.max_steps, width=min(n, len(pool))
            ):
                matches.append((final_name, name, outcome(ep, f"player_{seat}")))
    for name, entry in report["points"].items():
        for opp, o in entry["wdl"].items():
            for kind, k in (("win", o["wins"]), ("draw", o["draws"]), ("loss", o["losses"])):
                matches += [(name, opp, kind)] * k
    order = np.random.default_rng(0).permutation(len(matches))
    report["ratings"] = ratings([matches[i] for i in order])
    report["checkpoint_matches"] = {
        name: {
            k: sum(1 for a, b, r in matches if a == final_name and b == name and r == k)
            for k in ("win", "draw", "loss")
        }  # fmt: skip
        for name, _ in points[:-1]
    }
    pool.close()
    return report


def _model_copy(model: Any, base: dict, path: Path | None) -> Any:
    import copy

    import torch

    other = copy.deepcopy(model)
    other.load_state_dict(base)
    if path is not None:
        other.load_state_dict(torch.load(path, weights_only=True)["learner"]["model"], strict=False)
    return other.eval()


def _probabilities(env: Any, runner: Any, model: Any, tok: Any) -> Any:
    """``(state, player, legal) -> {action: p}``: the model's constrained-sampling probabilities
    of the legal actions at an OpenSpiel state (temperature 1), for exploitability and tactics."""
    from agentrl.episodes import Episode, EpisodeResult
    from agentrl.evaluation.games import action_probabilities
    from agentrl.rollout.loop import ModelPolicy

    policy = ModelPolicy(runner.backend, runner.builder, runner.fmt, runner.sampling(1.0, 0),
                         constrained=True)  # fmt: skip

    def probabilities(state: Any, player: int, legal: list[int]) -> dict[int, float]:
        obs, role, acts = env.view(state, player)
        agent = f"player_{player}"
        info = {"instruction": role, "admissible_actions": acts, "agent": agent}
        ep = Episode(None, 0, obs, info, first_info=info, result=EpisodeResult(0, 0, "", "", None))
        prompt = policy._prompt(ep)
        fmt = policy.format_of(ep)
        choices = [(a, policy._action_tokens(x)) for a in acts for x in fmt.renders(a, None)]
        probs = action_probabilities(model, tok, [prompt], [choices], temperature=1.0)[0]
        by_name = {state.action_to_string(player, a): a for a in legal}
        return {by_name[a]: p for a, p in probs.items()}

    return probabilities


# -- the tables --------------------------------------------------------------------------------
def _fmt(r: list[float]) -> str:
    return f"{100 * r[0]:.1f} % [{100 * r[1]:.1f}, {100 * r[2]:.1f}]"


def _boot(values: list[float], n: int = 10000) -> tuple[float, float, float]:
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(0)
    means = x[rng.integers(0, len(x), size=(n, len(x)))].mean(axis=1)
    return float(x.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def tables(game: str, results: dict[str, list[dict[str, Any]]]) -> tuple[str, dict[str, bool]]:
    lines, verdict = [], {}
    poker = GAMES[game]["poker"]
    for credit, runs in results.items():
        lines.append(f"\n### credit={credit} ({len(runs)} seeds)\n")
        if not runs:
            continue
        opps = runs[0]["opponents"]
        head = ["seed"]
        for opp in opps:
            head += [f"loss vs {opp}: initial", "final", f"non-loss vs {opp}: initial", "final"]
        if poker:
            head += ["exploitability per checkpoint (initial, iter 20, 40, ...)", "final"]
        head += ["CPU min (train + eval)"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        ok_all, ini_x, fin_x = True, [], []
        for r in runs:
            pts = r["points"]
            ini, fin = pts["initial"], pts[list(pts)[-1]]
            cells = [str(r["seed"])]
            for opp in opps:
                a, b = ini["wdl"][opp], fin["wdl"][opp]
                cells += [
                    _fmt(a["loss"]),
                    f"**{_fmt(b['loss'])}**",
                    _fmt(a["non_loss"]),
                    f"**{_fmt(b['non_loss'])}**",
                ]
            if poker:
                ini_x.append(ini["exploitability"])
                fin_x.append(fin["exploitability"])
                curve = " → ".join(f"{p['exploitability']:.3f}" for p in pts.values())
                cells += [curve, f"**{fin['exploitability']:.4f}** ({list(pts)[-1]})"]
                ok_all &= fin["exploitability"] < ini["exploitability"]
            else:
                loss_ok = fin["wdl"]["random"]["loss"][0] < 0.10
                mcts = next(o for o in opps if o.startswith("mcts"))
                nl_ok = fin["wdl"][mcts]["non_loss"][1] > ini["wdl"][mcts]["non_loss"][2]
                ok_all &= loss_ok and nl_ok
            cells.append(
                f"{(r.get('train_cpu_s') or 0) / 60:.1f} + {(r.get('eval_cpu_s') or 0) / 60:.1f}"
            )
            lines.append("| " + " | ".join(cells) + " |")
        if poker and len(runs) > 1:
            a, b = _boot(ini_x), _boot(fin_x)
            disjoint = b[2] < a[1]
            ok_all &= disjoint
            lines.append(
                f"\nmean exploitability: initial {a[0]:.4f} [{a[1]:.4f}, {a[2]:.4f}], final "
                f"{b[0]:.4f} [{b[1]:.4f}, {b[2]:.4f}] (bootstrap 95 %): "
                f"{'disjoint' if disjoint else 'overlap'}"
            )
        tact = [r for r in runs if "tactics" in r["points"]["initial"]]
        if tact:
            lines.append(
                "\none-move tactics, probability on a good move per checkpoint (initial, then "
                "each kept one; a uniform policy's in parentheses):"
            )
            for r in tact:
                for kind, label in (("win", "win now"), ("defend", "defend")):
                    vals = [p["tactics"][kind] for p in r["points"].values() if "tactics" in p]
                    curve = " → ".join(f"{v['mass']:.2f}" for v in vals)
                    lines.append(
                        f"- seed {r['seed']}, {label} ({vals[0]['uniform']:.2f}): {curve}; "
                        f"greedy picks a good move {vals[0]['greedy']:.2f} → {vals[-1]['greedy']:.2f}"
                    )
        rat = runs[0].get("ratings", {})
        if rat:
            top = sorted(rat.items(), key=lambda kv: -kv[1]["ordinal"])
            lines.append(
                f"\nOpenSkill ordinal ratings, seed {runs[0]['seed']}: "
                + ", ".join(f"{k} {v['ordinal']:.1f}" for k, v in top)
            )
        verdict[credit] = bool(ok_all)
        lines.append(f"\nbar met on every seed: **{'yes' if ok_all else 'no'}**")
    return "\n".join(lines), verdict


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--game", choices=sorted(GAMES), default="tictactoe")
    ap.add_argument("--credits", nargs="+", default=["gigpo", "grpo", "mars"])
    ap.add_argument("--seeds", default="tuning:2")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--games", type=int, default=100, help="held-out games per opponent")
    ap.add_argument("--opponents", nargs="+", default=None)
    ap.add_argument(
        "--tactics",
        type=int,
        default=200,
        help="tic-tac-toe: positions of each kind (win now, defend) for the one-move tactics of "
        "every checkpoint (0: skip; default 200)",
    )
    ap.add_argument("--checkpoint-every", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--check", action="store_true", help="exit 1 unless every bar is met")
    ap.add_argument(
        "--collect",
        action="store_true",
        help="only tabulate the evaluations already in --out (runs still training are left out)",
    )
    ap.add_argument("--evaluate-run", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help="train overrides for every run")
    args = ap.parse_args()
    if args.evaluate_run is not None:
        report = evaluate_run(
            args.evaluate_run, args.game, args.games, args.opponents, args.tactics
        )
        (args.evaluate_run / "games_eval.json").write_text(json.dumps(report, indent=1))
        return 0
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        ap.error(str(exc))
    out = args.out or ROOT / "runs" / f"games_{args.game}"
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"plan: game {args.game}, credits {args.credits}, seeds {seeds}, overrides {args.overrides}"
    )
    results: dict[str, list[dict[str, Any]]] = {c: [] for c in args.credits}
    if args.collect:  # no training: the evaluations already written
        for c in args.credits:
            for seed in seeds:
                folder = out / c / f"seed_{seed}"
                f, stamp = folder / "games_eval.json", folder / "bench_run.json"
                if f.is_file():
                    cpu = json.loads(stamp.read_text()).get("cpu_s") if stamp.is_file() else None
                    results[c].append(
                        {"seed": seed, "train_cpu_s": cpu, **json.loads(f.read_text())}
                    )
    else:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = {(c, s): ex.submit(train_and_evaluate, args.game, c, s, out, args)
                    for s in seeds for c in args.credits}  # fmt: skip
            for (c, _s), f in futs.items():
                r = f.result()
                if r is not None:
                    results[c].append(r)
    text, verdict = tables(args.game, results)
    header = f"## {args.game}: seeds {seeds}, overrides {args.overrides or 'none'}\n"
    (out / "table.md").write_text(header + text + "\n")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(header + text)
    return 0 if (not args.check or all(verdict.values())) else 1


if __name__ == "__main__":
    sys.exit(main())
