"""The training loop: tasks -> rollout -> step batch -> credit -> token advantages -> PPO -> log.

``Trainer(cfg).run()`` is the whole of ``python -m agentrl.train``. One iteration:

1. draw ``tasks_per_iter`` training tasks; each is reset in ``group_size`` envs with the same
   seed (a group starts from one state);
2. roll the groups out (only live envs are prompted; exact token ids and log-probs are kept);
3. build the step batch; add critic values / hidden-state embeddings if the credit module reads
   them; compute per-step advantages with ``credit.compute(batch, name, **options)``;
4. PPO epochs; each step's advantage lands on exactly its response tokens
   (``credit.step_to_tokens``);
5. log (``metrics.jsonl``, TensorBoard, progress bar), evaluate, checkpoint.

Held-out evaluation is greedy on a fixed task list (``env.eval_split``, ``env.eval_episodes``),
before training and at the end (and every ``eval_every`` iterations); the summary compares the
final policy with the initial one on the same tasks, with 95 % Wilson intervals.

Reproducibility: every random choice of iteration ``i`` is seeded from ``(seed, i)`` (tasks,
sampling, mini-batch order), so a run resumed from a checkpoint continues exactly as the
uninterrupted run would (same machine, CPU).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from .train_config import check_config

__all__ = ["Trainer", "TrainingStopped"]


class TrainingStopped(RuntimeError):
    """Training stopped early (non-finite loss or advantages); the last good checkpoint is kept."""


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0] & 0x7FFFFFFF)


@dataclass
class _Timer:
    wall: float = 0.0
    cpu: float = 0.0

    def __enter__(self):
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self._w
        self.cpu = time.process_time() - self._c


class Trainer:
    """Builds everything from a config (checked first) and runs the loop."""

    def __init__(self, cfg: DictConfig, output_dir: str | Path | None = None):
        check_config(cfg)  # before any work: a bad value fails here, naming its key
        self.cfg = cfg
        out = output_dir or cfg.get("output_dir") or "outputs/run"
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self._setup()

    # -- construction --------------------------------------------------------------------------
    def _setup(self) -> None:
        import torch

        from .backends import make_backend
        from .learner import Learner, LearnerConfig
        from .models import apply_lora, load_model
        from .pool import EnvPool, EnvSpec
        from .rollout import ActionFormat, PromptBuilder, PromptConfig

        cfg = self.cfg
        t = cfg.trainer
        if t.num_threads is not None:
            torch.set_num_threads(int(t.num_threads))
        torch.manual_seed(int(cfg.seed))
        device = (
            ("cuda" if torch.cuda.is_available() else "cpu") if t.device == "auto" else t.device
        )
        tiny = (
            OmegaConf.to_container(cfg.model.tiny, resolve=True) if cfg.model.get("tiny") else None
        )
        model, tok, path = load_model(
            cfg.model.name, tiny=tiny, dtype=cfg.model.dtype, device=device
        )
        if cfg.model.get("gradient_checkpointing", False):
            # Recompute each layer's activations in the backward pass: memory per token drops
            # from every layer's activations to one layer's (used by model=smollm2-135m).
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        if cfg.model.lora.enabled:
            lo = cfg.model.lora
            model = apply_lora(
                model,
                r=int(lo.r),
                alpha=float(lo.alpha),
                dropout=float(lo.dropout),
                target_modules=OmegaConf.to_container(lo.target_modules)
                if OmegaConf.is_list(lo.target_modules)
                else lo.target_modules,
            )
        self.model, self.tokenizer, self.model_path = model, tok, path
        lc = LearnerConfig(
            lr=t.lr,
            weight_decay=t.weight_decay,
            epochs=t.epochs,
            minibatch_size=t.minibatch_size,
            micro_batch_size=t.micro_batch_size,
            micro_batch_tokens=t.get("micro_batch_tokens"),
            clip_low=t.clip_low,
            clip_high=t.clip_high,
            loss_agg=t.loss_agg,
            max_grad_norm=t.max_grad_norm,
            kl_coef=t.kl_coef,
            kl_estimator=t.kl_estimator,
            entropy_coef=t.entropy_coef,
            value_coef=t.value_coef,
            value_lr=t.value_lr,
            value_clip=t.value_clip,
            temperature=cfg.rollout.temperature,
            dtype=t.dtype,
        )
        self.learner = Learner(
            model, lc, tok.pad_token_id, value_head=bool(cfg.credit.get("value_head", False))
        )
        self.backend = make_backend(cfg.rollout, model, tok, model_path=path, seed=int(cfg.seed))
        self.shares_weights = cfg.rollout.backend == "hf"
        r = cfg.rollout
        p = r.prompt
        self.builder = PromptBuilder(
            tok,
            PromptConfig(
                instruction=p.instruction,
                history=p.history,
                admissible_actions=p.admissible_actions,
                observation_prefix=p.observation_prefix,
                history_prefix=p.history_prefix,
                actions_prefix=p.actions_prefix,
                response_hint=p.response_hint,
                system_role=p.system_role,
                max_prompt_tokens=p.max_prompt_tokens,
            ),
        )
        a = r.action
        self.fmt = ActionFormat(
            pattern=a.pattern, template=a.template, think=a.think, require_think=a.require_think
        )
        e = cfg.env
        n_envs = int(r.tasks_per_iter) * int(r.group_size)
        spec = EnvSpec(e.id, OmegaConf.to_container(e.kwargs, resolve=True) or {})
        self.pool = EnvPool(
            [spec] * n_envs, num_workers=int(e.num_workers), step_timeout=e.step_timeout
        )
        self.eval_resets = self._eval_resets()
        self.train_ids = (
            None
            if e.train_tasks == "seeds"
            else list(self.pool.call([0], "task_ids", e.train_tasks, None)[0])
        )
        self.embedding_layer = r.get("embedding_layer")
        self.credit_options = self._credit_options()

    def _credit_options(self) -> dict[str, Any]:
        from agentrl import credit

        opts = OmegaConf.to_container(self.cfg.credit.options, resolve=True) or {}
        if (
            "invalid_penalty" in credit.options(self.cfg.credit.name)
            and opts.get("invalid_penalty") is None
        ):
            # The env config gives the penalty as a reward (<= 0); credit modules subtract a magnitude.
            opts["invalid_penalty"] = -float(self.cfg.env.invalid_penalty)
        elif opts.get("invalid_penalty", 0) is None:
            opts.pop("invalid_penalty")
        return opts

    def _eval_resets(self) -> list:
        from .rollout import ResetSpec

        e = self.cfg.env
        n = int(e.eval_episodes)
        if e.eval_split is None:
            base = int(e.eval_seed_base)
            return [ResetSpec(i, seed=base + i) for i in range(n)]
        ids = list(self.pool.call([0], "task_ids", e.eval_split, n)[0])
        if len(ids) < n:
            print(
                f"warning: env.eval_split={e.eval_split!r} lists {len(ids)} tasks, fewer than env.eval_episodes={n}",
                file=sys.stderr,
            )
        return [ResetSpec(i, seed=None, options={"task_id": tid}) for i, tid in enumerate(ids)]

    # -- pieces of an iteration ----------------------------------------------------------------
    def _train_resets(self, it: int) -> list:
        from .rollout import ResetSpec

        r, e = self.cfg.rollout, self.cfg.env
        rng = np.random.default_rng([int(self.cfg.seed), it, 1])
        resets = []
        for g in range(int(r.tasks_per_iter)):
            if self.train_ids is None:
                s = int(rng.integers(0, int(e.train_seed_high)))
                spec = ResetSpec(it * int(r.tasks_per_iter) + g, seed=s)
            else:
                tid = self.train_ids[int(rng.integers(len(self.train_ids)))]
                spec = ResetSpec(
                    it * int(r.tasks_per_iter) + g, seed=None, options={"task_id": tid}
                )
            resets += [spec] * int(r.group_size)
        return resets

    def _sampling(self, temperature: float, seed: int):
        from .backends import SamplingParams

        r = self.cfg.rollout
        return SamplingParams(
            max_new_tokens=int(r.max_new_tokens),
            temperature=float(temperature),
            top_p=float(r.top_p),
            top_k=int(r.top_k),
            stop_token_ids=(int(self.tokenizer.eos_token_id),),
            seed=seed,
        )

    def _rollout(
        self, resets: list, temperature: float, seed: int, traj_offset: int, stats
    ) -> list:
        from .rollout import run_episodes

        eps = []
        size = len(self.pool)
        for start in range(0, len(resets), size):
            chunk = resets[start : start + size]
            eps += run_episodes(
                self.pool,
                self.backend,
                self.builder,
                self.fmt,
                chunk,
                self._sampling(temperature, _seed(seed, start)),
                max_steps=int(self.cfg.env.max_steps),
                constrained=bool(self.cfg.rollout.constrained),
                traj_offset=traj_offset + start,
                stats=stats,
            )
        return eps

    def evaluate(self, label: str) -> tuple[Any, dict[str, float]]:
        """Greedy (``rollout.eval_temperature``) episodes on the fixed held-out tasks -> report."""
        from .evaluation import EpisodeRecord, summarize
        from .rollout import RolloutStats

        stats = RolloutStats()
        eps = self._rollout(
            self.eval_resets,
            float(self.cfg.rollout.eval_temperature),
            _seed(int(self.cfg.seed), 999_999),
            0,
            stats,
        )
        env_name = str(self.cfg.env.id)
        records = [
            EpisodeRecord(
                env=env_name,
                task_id=ep.task_id,
                category=ep.category or "default",
                won=ep.won,
                score=ep.score,
                steps=len(ep.steps),
                invalid_actions=ep.invalid_actions,
                truncated=ep.truncated,
                total_reward=ep.total_reward,
                seed=ep.seed,
                error=ep.error,
            )
            for ep in eps
        ]
        report = summarize(
            records,
            meta={
                "label": label,
                "split": self.cfg.env.eval_split,
                "greedy": self.cfg.rollout.eval_temperature == 0,
            },
        )
        return report, report.metrics("eval")

    def _features(self, seqs) -> tuple[np.ndarray | None, np.ndarray | None]:
        layer = self.embedding_layer
        if layer is not None:
            n_hidden = self._num_hidden_states()
            layer = max(int(layer), -n_hidden + 1) if layer < 0 else min(int(layer), n_hidden - 1)
        return self.learner.prompt_features([s.prompt_ids for s in seqs], layer)

    def _num_hidden_states(self) -> int:
        model = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        return int(model.config.num_hidden_layers) + 1

    # -- checkpoints ---------------------------------------------------------------------------
    def _ckpt_dir(self) -> Path:
        return self.out / "checkpoints"

    def save_checkpoint(self, it: int, history: list[dict], initial: dict | None) -> Path:
        import torch

        d = self._ckpt_dir() / f"iter_{it:06d}"
        tmp = d.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        torch.save(
            {
                "iteration": it,
                "learner": self.learner.state_dict(),
                "history": history,
                "initial_eval": initial,
                "config": OmegaConf.to_container(self.cfg, resolve=False),
            },
            tmp / "state.pt",
        )
        shutil.rmtree(d, ignore_errors=True)
        tmp.rename(d)
        keep = int(self.cfg.trainer.keep_checkpoints)
        old = sorted(
            p for p in self._ckpt_dir().glob("iter_*") if p.is_dir() and not p.name.endswith(".tmp")
        )
        for p in old[:-keep]:
            shutil.rmtree(p, ignore_errors=True)
        return d

    def save_model(self, name: str = "final") -> Path:
        """The policy as a Hugging Face folder (LoRA merged), loadable by transformers and vLLM."""
        d = self._ckpt_dir() / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        model = self.model
        if hasattr(model, "merge_and_unload"):
            import copy

            model = copy.deepcopy(model).merge_and_unload()
        model.save_pretrained(d, safe_serialization=True)
        self.tokenizer.save_pretrained(d)
        return d

    @staticmethod
    def find_checkpoint(path: str | Path) -> Path:
        p = Path(path).expanduser()
        if p.is_file():
            return p
        for root in (p / "checkpoints", p):
            found = sorted(root.glob("iter_*/state.pt"))
            if found:
                return found[-1]
        raise FileNotFoundError(
            f"trainer.resume={path}: no checkpoint (checkpoints/iter_*/state.pt) found there"
        )

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        import torch

        from agentrl import credit

        from .learner import NonFiniteError
        from .rollout import RolloutStats, to_step_batch

        cfg, t = self.cfg, self.cfg.trainer
        metrics_path = self.out / "metrics.jsonl"
        history: list[dict] = []
        initial: dict | None = None
        start = 0
        if t.resume:
            ck = self.find_checkpoint(t.resume)
            state = torch.load(ck, map_location="cpu", weights_only=False)
            self.learner.load_state_dict(state["learner"])
            start, history, initial = (
                int(state["iteration"]),
                list(state["history"]),
                state.get("initial_eval"),
            )
            print(f"resumed from {ck} at iteration {start}")
        OmegaConf.save(cfg, self.out / "config.yaml")
        mf = open(metrics_path, "w")  # noqa: SIM115 (open for the whole run, closed in finally)
        for row in history:
            mf.write(json.dumps(row) + "\n")
        writer = self._tensorboard()
        progress = _Progress(enabled=bool(t.progress), total=int(t.iterations), start=start)

        def log(row: dict) -> None:
            history.append(row)
            mf.write(json.dumps(row) + "\n")
            mf.flush()
            if writer is not None:
                for k, v in row.items():
                    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                        writer.add_scalar(k, v, row["iteration"])

        try:
            if initial is None and t.eval_initial:
                with _Timer() as tm:
                    report, em = self.evaluate("initial")
                initial = {
                    "success_rate": report.overall.success_rate,
                    "ci": [report.overall.success_ci_low, report.overall.success_ci_high],
                    "episodes": report.overall.episodes,
                    "report": report.to_dict(),
                }
                log(
                    {
                        "iteration": 0,
                        "step": 0,
                        "phase": "eval_initial",
                        "time/eval_s": tm.wall,
                        **em,
                    }
                )
                progress.note(f"initial greedy success {report.overall.success_rate:.1%}")
            last_good = None
            for it in range(start, int(t.iterations)):
                row = self._iteration(it, credit, to_step_batch, RolloutStats, NonFiniteError)
                log(row)
                progress.update(it + 1, row)
                if (
                    t.eval_every
                    and (it + 1) % int(t.eval_every) == 0
                    and it + 1 < int(t.iterations)
                ):
                    with _Timer() as tm:
                        _, em = self.evaluate(f"iter{it + 1}")
                    log(
                        {
                            "iteration": it + 1,
                            "step": it + 1,
                            "phase": "eval",
                            "time/eval_s": tm.wall,
                            **em,
                        }
                    )
                    progress.note(f"eval success {em['eval/success_rate']:.1%}")
                if t.checkpoint_every and (it + 1) % int(t.checkpoint_every) == 0:
                    last_good = self.save_checkpoint(it + 1, history, initial)
            progress.close()
            n = int(t.iterations)
            if not t.checkpoint_every or n % int(t.checkpoint_every) != 0:
                last_good = self.save_checkpoint(n, history, initial)
            final_dir = self.save_model("final")
            with _Timer() as tm:
                report, em = self.evaluate("final")
            log({"iteration": n, "step": n, "phase": "eval_final", "time/eval_s": tm.wall, **em})
            summary = self._summary(initial, report, history, final_dir, last_good)
            log(
                {
                    "iteration": n,
                    "step": n,
                    "phase": "summary",
                    **{k: v for k, v in summary.items() if isinstance(v, int | float | bool | str)},
                }
            )
        except TrainingStopped as exc:
            progress.close()
            msg = (
                f"training stopped: {exc}. The last good checkpoint is kept in {self._ckpt_dir()}."
            )
            mf.write(json.dumps({"phase": "stopped", "reason": str(exc)}) + "\n")
            print(msg, file=sys.stderr)
            raise
        finally:
            mf.close()
            if writer is not None:
                writer.close()
        self._write_outputs(summary, initial, report, history)
        return summary

    def _iteration(self, it, credit, to_step_batch, RolloutStats, NonFiniteError) -> dict[str, Any]:
        cfg = self.cfg
        seed = int(cfg.seed)
        stats = RolloutStats()
        with _Timer() as t_roll:
            resets = self._train_resets(it)
            eps = self._rollout(
                resets, float(cfg.rollout.temperature), _seed(seed, it, 2), 0, stats
            )
        with _Timer() as t_credit:
            batch, seqs = to_step_batch(eps)
            values, embs = self._features(seqs)
            if values is not None or embs is not None:
                batch, seqs = to_step_batch(eps, values=values, embeddings=embs)
            try:
                res = credit.compute(batch, cfg.credit.name, **self.credit_options)
            except FloatingPointError as exc:
                raise TrainingStopped(f"iteration {it}: {exc}") from exc
            returns = res.components.get("returns") if values is not None else None
            if values is not None and returns is None:
                returns = res.advantages.astype(np.float64) + values
        with _Timer() as t_upd:
            try:
                upd = self.learner.update(
                    seqs,
                    res.advantages,
                    returns=returns,
                    old_values=values,
                    seed=_seed(seed, it, 3),
                )
            except NonFiniteError as exc:
                raise TrainingStopped(f"iteration {it}: {exc}") from exc
            if not self.shares_weights:
                from .learner.weights import policy_state_dict

                self.backend.update_weights(policy_state_dict(self.model))
        won = np.array([ep.won for ep in eps], dtype=float)
        steps = np.array([len(ep.steps) for ep in eps], dtype=float)
        row: dict[str, Any] = {
            "iteration": it + 1,
            "step": it + 1,
            "phase": "train",
            "train/success_rate": float(won.mean()),
            "train/mean_return": float(np.mean([ep.total_reward for ep in eps])),
            "train/mean_score": float(np.mean([ep.score for ep in eps])),
            "train/mean_steps": float(steps.mean()),
            "train/invalid_action_rate": float(
                np.mean([not s.valid for ep in eps for s in ep.steps])
            ),
            "train/truncated_response_rate": float(
                np.mean([s.finish_reason == "length" for ep in eps for s in ep.steps])
            ),
            "train/agent_steps": len(seqs),
            "train/prompt_tokens": stats.prompt_tokens,
            "train/response_tokens": stats.response_tokens,
            "train/prompt_overflows": stats.prompt_overflows,
            "train/advantage_abs_mean": float(np.abs(res.advantages).mean()),
            "time/rollout_s": t_roll.wall,
            "time/credit_s": t_credit.wall,
            "time/update_s": t_upd.wall,
            "time/iteration_s": t_roll.wall + t_credit.wall + t_upd.wall,
            "cpu/rollout_s": t_roll.cpu,
            "cpu/credit_s": t_credit.cpu,
            "cpu/update_s": t_upd.cpu,
            "time/generate_s": stats.generate_s,
            "time/env_s": stats.env_s,
            "mem/peak_rss_mb": _peak_rss_mb(),
        }
        cuda_mb = _peak_cuda_mb()
        if cuda_mb is not None:
            row["mem/peak_cuda_mb"] = cuda_mb
        row.update({f"loss/{k}": v for k, v in upd.items()})
        for k, v in res.diagnostics.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                row[f"credit/{k}"] = float(v)
        return row

    # -- outputs -------------------------------------------------------------------------------
    def _tensorboard(self):
        if not self.cfg.trainer.tensorboard:
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            print(
                "warning: tensorboard is not installed; no TensorBoard events are written",
                file=sys.stderr,
            )
            return None
        return SummaryWriter(str(self.out / "tb"))

    def _summary(
        self,
        initial: dict | None,
        report,
        history: list[dict],
        final_dir: Path,
        last_good: Path | None,
    ) -> dict[str, Any]:
        o = report.overall
        s: dict[str, Any] = {
            "final_success_rate": o.success_rate,
            "final_ci_low": o.success_ci_low,
            "final_ci_high": o.success_ci_high,
            "eval_episodes": o.episodes,
            "iterations": int(self.cfg.trainer.iterations),
            "credit": str(self.cfg.credit.name),
            "env": str(self.cfg.env.id),
            "model": str(self.cfg.model.name),
            "final_model": str(final_dir),
        }
        if initial is not None:
            lo, hi = initial["ci"]
            s.update(
                {
                    "initial_success_rate": initial["success_rate"],
                    "initial_ci_low": lo,
                    "initial_ci_high": hi,
                    "improvement_points": 100.0 * (o.success_rate - initial["success_rate"]),
                    "intervals_overlap": not (o.success_ci_low > hi or o.success_ci_high < lo),
                }
            )
            s["learned"] = bool(s["improvement_points"] >= 20.0 and not s["intervals_overlap"])
        train = [r for r in history if r.get("phase") == "train"]
        if train:
            s["mean_iteration_s"] = float(np.mean([r["time/iteration_s"] for r in train]))
            s["mean_iteration_cpu_s"] = float(
                np.mean([r["cpu/rollout_s"] + r["cpu/credit_s"] + r["cpu/update_s"] for r in train])
            )
            for k in ("rollout", "credit", "update"):
                s[f"mean_{k}_s"] = float(np.mean([r[f"time/{k}_s"] for r in train]))
        s["peak_rss_mb"] = _peak_rss_mb()
        if _peak_cuda_mb() is not None:
            s["peak_cuda_mb"] = _peak_cuda_mb()
        return s

    def _write_outputs(
        self, summary: dict, initial: dict | None, report, history: list[dict]
    ) -> None:
        (self.out / "summary.json").write_text(
            json.dumps(
                {"summary": summary, "final_eval": report.to_dict(), "initial_eval": initial},
                indent=1,
                default=str,
            )
        )
        table = _summary_table(summary)
        (self.out / "summary.md").write_text(table + "\n\n" + report.table("markdown") + "\n")
        _print_summary(summary, report)
        if self.cfg.trainer.plot:
            try:
                _plot_curves(history, self.out / "training_curve.png", summary)
            except Exception as exc:  # a plotting problem must not lose a finished run
                print(f"warning: could not draw the training curve: {exc}", file=sys.stderr)
        print(f"outputs: {self.out}")

    def close(self) -> None:
        self.pool.close()
        self.backend.close()


def _peak_rss_mb() -> float:
    """Peak resident memory of this process (MiB; Linux reports KiB, macOS bytes)."""
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(rss) / (2**20 if sys.platform == "darwin" else 1024.0)


def _peak_cuda_mb() -> float | None:
    import torch

    return float(torch.cuda.max_memory_allocated()) / 2**20 if torch.cuda.is_available() else None


# -- progress, summary, plot -------------------------------------------------------------------
class _Progress:
    """A rich progress bar with the live training success rate (plain lines when disabled)."""

    def __init__(self, enabled: bool, total: int, start: int):
        self.enabled, self.total = enabled, total
        self._p = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._p = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=False,
            )
            self._p.start()
            self._task = self._p.add_task("train", total=total, completed=start, info="")

    def update(self, done: int, row: dict) -> None:
        info = (
            f"success {row['train/success_rate']:.0%}  return {row['train/mean_return']:+.2f}  "
            f"{row['time/iteration_s']:.1f}s/it (rollout {row['time/rollout_s']:.1f} credit {row['time/credit_s']:.2f} update {row['time/update_s']:.1f})"
        )
        if self._p is not None:
            self._p.update(self._task, completed=done, info=info)

    def note(self, text: str) -> None:
        if self._p is not None:
            self._p.console.print(text)
        else:
            print(text)

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
            self._p = None


def _fmt_ci(rate: float, lo: float, hi: float) -> str:
    return f"{100 * rate:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"


def _summary_table(s: dict) -> str:
    lines = ["| | greedy success on the held-out set (95 % Wilson CI) |", "|---|---|"]
    if "initial_success_rate" in s:
        lines.append(
            f"| initial policy | {_fmt_ci(s['initial_success_rate'], s['initial_ci_low'], s['initial_ci_high'])} |"
        )
    lines.append(
        f"| final policy | {_fmt_ci(s['final_success_rate'], s['final_ci_low'], s['final_ci_high'])} |"
    )
    if "improvement_points" in s:
        lines.append(
            f"| improvement | {s['improvement_points']:+.1f} points; intervals {'overlap' if s['intervals_overlap'] else 'do not overlap'} |"
        )
    lines.append(
        f"| episodes | {s['eval_episodes']} ({s['env']}, credit={s['credit']}, model={s['model']}, {s['iterations']} iterations) |"
    )
    if "mean_iteration_s" in s:
        lines.append(
            f"| time per iteration | {s['mean_iteration_s']:.2f} s wall ({s['mean_iteration_cpu_s']:.2f} s CPU): rollout {s['mean_rollout_s']:.2f}, credit {s['mean_credit_s']:.3f}, update {s['mean_update_s']:.2f} |"
        )
    lines.append(
        f"| peak memory | {s['peak_rss_mb']:.0f} MiB resident"
        + (f", {s['peak_cuda_mb']:.0f} MiB CUDA |" if "peak_cuda_mb" in s else " |")
    )
    return "\n".join(lines)


def _print_summary(s: dict, report) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(_summary_table(s))
        return
    table = Table(title="agentrl training summary")
    table.add_column("")
    table.add_column("greedy success, held-out (95 % Wilson CI)")
    if "initial_success_rate" in s:
        table.add_row(
            "initial policy",
            _fmt_ci(s["initial_success_rate"], s["initial_ci_low"], s["initial_ci_high"]),
        )
    table.add_row(
        "final policy", _fmt_ci(s["final_success_rate"], s["final_ci_low"], s["final_ci_high"])
    )
    if "improvement_points" in s:
        verdict = "learned" if s.get("learned") else "not significant"
        table.add_row(
            "improvement",
            f"{s['improvement_points']:+.1f} points ({verdict}; intervals {'overlap' if s['intervals_overlap'] else 'do not overlap'})",
        )
    table.add_row(
        "episodes", f"{s['eval_episodes']} ({s['env']}, credit={s['credit']}, model={s['model']})"
    )
    if "mean_iteration_s" in s:
        table.add_row(
            "per iteration",
            f"{s['mean_iteration_s']:.2f} s wall, {s['mean_iteration_cpu_s']:.2f} s CPU (rollout {s['mean_rollout_s']:.2f} / credit {s['mean_credit_s']:.3f} / update {s['mean_update_s']:.2f})",
        )
    table.add_row(
        "peak memory",
        f"{s['peak_rss_mb']:.0f} MiB resident"
        + (f", {s['peak_cuda_mb']:.0f} MiB CUDA" if "peak_cuda_mb" in s else ""),
    )
    console = Console()
    console.print(table)
    report.print(console)


def _plot_curves(history: list[dict], path: Path, summary: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in history if r.get("phase") == "train"]
    evals = [
        r
        for r in history
        if str(r.get("phase", "")).startswith("eval") and "eval/success_rate" in r
    ]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        x = [r["iteration"] for r in train]
        y = [r["train/success_rate"] for r in train]
        ax.plot(x, y, lw=0.8, alpha=0.5, label="training rollouts (sampled)")
        k = max(1, len(y) // 20)
        smooth = np.convolve(y, np.ones(k) / k, mode="valid")
        ax.plot(x[k - 1 :], smooth, lw=1.5, label=f"training, moving mean of {k}")
    if evals:
        x = [r["iteration"] for r in evals]
        y = [r["eval/success_rate"] for r in evals]
        lo = [r["eval/success_ci_low"] for r in evals]
        hi = [r["eval/success_ci_high"] for r in evals]
        ax.errorbar(
            x,
            y,
            yerr=[np.subtract(y, lo), np.subtract(hi, y)],
            fmt="o-",
            capsize=3,
            label="held-out greedy (95 % CI)",
        )
    ax.set_xlabel("iteration")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.set_title(f"{summary['env']} · credit={summary['credit']} · model={summary['model']}")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
