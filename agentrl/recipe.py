"""The training recipe: ``python -m agentrl.train`` is :func:`train`, read top to bottom.

:func:`build` sets up (model, learner, engine, env pool, episode runner, task lists); then
:func:`train` runs the loop, each iteration:

1. **rollout**: ``tasks_per_iter`` training tasks, each reset in ``group_size`` envs with the same
   seed (a group starts from one state); only live envs are prompted; exact token ids and
   sampling log-probs are kept. ``rollout.staleness = k >= 1``: a producer thread started here
   plays the groups ahead while the learner updates, and the iteration takes groups at most
   ``k`` policy versions old (:mod:`agentrl.training.producer`);
2. **step batch**: one row per agent step, plus what the credit module declares it needs
   (critic values, hidden-state embeddings; :func:`agentrl.credit.needs`) and what its trainer
   hooks prepare (:mod:`agentrl.methods`: a method's own critic heads, its response spans);
3. **credit**: per-step advantages, ``credit.compute(batch, name, **options)``;
4. **token advantages + PPO epochs**: each step's advantage lands on exactly its response tokens
   (``credit.step_to_tokens``; or where the method's hooks or a token shaper put it) inside the
   learner's PPO epochs; the engine (or the producer) gets the new weights;
5. **log / evaluate / checkpoint**.

What a credit module asks of the trainer (its action format and prompt hint, its critic's outputs,
its step hooks) comes from the hook registry, :func:`agentrl.methods.trainer_hooks`; the runner
(rollouts and held-out evaluation alike) from :func:`agentrl.methods.build_runner`. This page
names no method.

Under ``torchrun`` (docs/distributed.md) each rank plays its share of the task groups with its own
pool and engine (an unsharded copy of the policy), the step batches are gathered into the global
one before credit, the learner is sharded with FSDP2, and rank 0 logs and writes; in one process
every ``DP.``/``D.`` call below is a no-op.

Reproducibility: every random choice of iteration ``i`` is seeded from ``(seed, i)`` (tasks,
sampling, mini-batch order), and with ``rollout.staleness >= 1`` a checkpoint keeps the policy
versions its next batches sample with, so a resumed run continues exactly as the uninterrupted
run would (same machine; another CPU's floating-point order changes the trajectory). Not with
``rollout.partial_rollouts=true``, whose versions depend on the threads' timing in any run.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from . import credit
from . import distributed as D
from .backends import make_backend
from .config import ConfigError, TrainConfig
from .evaluation import record_from_rollout, summarize
from .learner import Learner
from .learner.fsdp import FSDPLearner
from .learner.schedule import LRSchedule
from .methods import TrainerHooks, build_runner, trainer_hooks
from .models import LoraTargetError, apply_lora, load_model
from .pool import EnvSpec, backend_options, make_pool
from .pool.accounting import error_metrics, error_rate_stop
from .rollout.activity import Activity
from .rollout.runner import EpisodeRunner, chunk_seed, eval_seed
from .training import data_parallel as DP
from .training.checkpoint import (
    checkpoint_dir,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
    save_model,
)
from .training.engine_sync import adapter_rank, sync_engine
from .training.interrupt import Interrupted, interrupts, quit_on_signal, restore_point
from .training.iteration import credit_options, features, held_out_resets, train_row
from .training.producer import make_rollouts
from .training.runlog import Progress, RunLog, Timer, write_interrupted, write_outputs
from .training.sharded_checkpoint import load_run_checkpoint, save_run_checkpoint
from .training.summary import RunSummary, summarize_run
from .training.token_credit import update_inputs
from .training.traces import Tracer
from .training.trackers import make_trackers

__all__ = ["Parts", "TrainingStopped", "build", "train"]


class TrainingStopped(RuntimeError):
    """Training stopped early (non-finite loss or advantages); the last good checkpoint is kept."""


@dataclass
class Parts:
    """What a run is made of (built by :func:`build`; :func:`train` builds them when not given)."""

    model: Any
    tokenizer: Any
    learner: Learner
    backend: Any
    runner: EpisodeRunner
    options: dict[str, Any]  # the credit module's options
    hooks: TrainerHooks  # what it asks of the trainer (the step-batch inputs it declares included)
    held_out: list  # the fixed held-out tasks (reset specs)
    train_ids: list[str] | None  # the training split's task ids (None: tasks drawn by seed)
    engine_model: Any = None  # the engine's copy (torchrun, rollout.staleness >= 1; else None)


def build(cfg: TrainConfig) -> Parts:
    """Set up: model, learner, generation engine, env pool, episode runner, task lists."""
    t, r, e, m = cfg.trainer, cfg.rollout, cfg.env, cfg.model
    if t.num_threads is not None:
        torch.set_num_threads(t.num_threads)
    torch.manual_seed(cfg.seed)
    dist = D.init_distributed(t.device)  # torchrun: join the process group; else nothing
    device = dist.device
    if dist.world_size > r.tasks_per_iter:
        raise ValueError(f"rollout.tasks_per_iter={r.tasks_per_iter} is below the {dist.world_size} "
                         "ranks of torchrun: every rank needs at least one task group")  # fmt: skip
    tiny = asdict(m.tiny) if m.tiny is not None and m.name == "tiny" else None
    model, tok, model_path = load_model(m.name, tiny=tiny, dtype=m.dtype, device=device)
    if m.gradient_checkpointing:  # activations recomputed in the backward pass: less memory
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if m.lora.enabled:
        lo = m.lora
        try:  # the targets are checked against the model's module names, before any rollout
            model = apply_lora(model, r=lo.r, alpha=lo.alpha, dropout=lo.dropout,
                               target_modules=lo.target_modules)  # fmt: skip
        except LoraTargetError as exc:
            raise ConfigError(f"invalid config: {exc}") from None
    options = credit_options(cfg)
    hooks = trainer_hooks(cfg.credit.name, credit.needs(cfg.credit.name, **options),
                          cfg.credit.token, r.action_format)  # fmt: skip
    engine_model = None
    kw = dict(temperature=r.temperature, **hooks.learner_options(),  # critic heads, reference
              lr_schedule=LRSchedule(t.lr_schedule, t.lr_warmup, t.iterations, t.lr_min_ratio),
              entropy_schedule=LRSchedule(t.entropy_schedule, 0, t.iterations,
                                          t.entropy_min_ratio))  # fmt: skip
    if dist.distributed or r.staleness:  # the engine samples from its own (unsharded) copy
        engine_model = DP.rollout_replica(model)
    if dist.distributed:  # the learner's copy is sharded
        learner = FSDPLearner(model, t, tok.pad_token_id, **kw)
    else:
        learner = Learner(model, t, tok.pad_token_id, **kw)
    backend = make_backend(asdict(r), engine_model or model, tok, model_path=model_path,
                           seed=cfg.seed, lora_rank=adapter_rank(cfg))  # fmt: skip
    n_groups = len(D.shard_groups(r.tasks_per_iter))  # this rank's groups (all in one process)
    pool = make_pool([EnvSpec(e.id, dict(e.kwargs))] * (n_groups * r.group_size),
                     num_workers=e.num_workers, step_timeout=e.step_timeout,
                     **backend_options(e))  # fmt: skip
    runner = build_runner(cfg, pool, backend, tok)  # the prompt and the method's action format
    held_out = held_out_resets(cfg, pool)
    train_ids = (
        None if e.train_tasks == "seeds" else pool.call([0], "task_ids", e.train_tasks, None)[0]
    )
    return Parts(model, tok, learner, backend, runner, options, hooks, held_out, train_ids,
                 engine_model)  # fmt: skip


def train(cfg: TrainConfig, out: Path, parts: Parts | None = None) -> RunSummary:
    """Train the policy ``cfg`` describes; write everything under ``out``; return the summary."""
    t, r, e = cfg.trainer, cfg.rollout, cfg.env
    dist = D.init_distributed(t.device)
    out = Path(D.broadcast_object(str(out)))  # rank 0's run folder (Hydra's differs per rank)
    main = dist.is_main
    out.mkdir(parents=True, exist_ok=True)
    owned, p = parts is None, parts or build(cfg)
    model, tok, learner, runner = p.model, p.tokenizer, p.learner, p.runner
    options, hooks, held_out = p.options, p.hooks, p.held_out

    def evaluate(label: str, iteration: int):
        """Greedy (``rollout.eval_temperature``) episodes on the fixed held-out tasks."""
        # torchrun: each rank a share of every chunk, in lockstep, then gathered (one process's)
        eps = DP.play_as_one_process(runner, held_out, temperature=r.eval_temperature,
                                     seed=eval_seed(cfg.seed))  # fmt: skip
        if tracer is not None:  # the first held-out tasks, step by step
            tracer.evaluation(label, iteration, eps)
        records = [record_from_rollout(ep, e.id) for ep in eps]
        meta = {"label": label, "split": e.eval_split, "greedy": r.eval_temperature == 0}
        report = summarize(records, meta=meta)
        return report, report.metrics("eval")

    # -- resume -----------------------------------------------------------------------------------
    history, initial, start, played_with = [], None, 0, None
    if t.resume:
        ck = find_checkpoint(t.resume)
        state = load_checkpoint(ck, iterations=t.iterations)  # within the run, or refused
        load_run_checkpoint(learner, ck, state["learner"])  # one-process or sharded
        start, history, initial = (
            int(state["iteration"]),
            list(state["history"]),
            state.get("initial_eval"),
        )
        played_with = state.get("rollout_weights")  # staleness >= 1: the versions in flight
        if r.staleness == 0:  # the engine started from the base (a producer loads them itself)
            if p.engine_model is not None:  # torchrun: the engine's unsharded copy
                learner.sync_to(p.engine_model)
            sync_engine(cfg, p.backend, p.engine_model or model)
        if main:
            print(f"resumed from {t.resume} at iteration {start}")
    if main:  # rank 0 writes; the other ranks keep the history only
        OmegaConf.save(OmegaConf.structured(cfg), out / "config.yaml")
    resolved = OmegaConf.to_container(OmegaConf.structured(cfg))
    settings = {"wandb": asdict(t.wandb), "mlflow": asdict(t.mlflow)}
    trackers = make_trackers(t.loggers, out, resolved, settings) if main else []
    log = RunLog(out, history, trackers) if main else DP.RankLog(history)
    tracer = Tracer(cfg, out, tok, trackers) if main else None  # trainer.traces
    live = Activity()  # what an iteration is doing, for the progress line of a long one
    progress = (
        Progress(t.progress, t.iterations, start, activity=live, every=t.progress_every_s)
        if main
        else DP.QuietProgress()
    )
    runner.activity = live  # (before the producer copies the runner)

    saved: dict[int, Path] = {}  # the checkpoints this run wrote, by iteration
    last_save = [time.monotonic()]

    def checkpoint(n: int) -> Path:
        state = {"history": history, "initial_eval": initial,
                 "config": OmegaConf.to_container(OmegaConf.structured(cfg)),
                 "rollout_weights": rollouts.rollout_state()}  # fmt: skip
        if dist.distributed:  # DCP: every rank writes its shards
            saved[n] = save_run_checkpoint(out, n, state, learner, keep=t.keep_checkpoints)
        else:
            state["learner"] = learner.state_dict()
            saved[n] = save_checkpoint(out, n, state, keep=t.keep_checkpoints)
        last_save[0] = time.monotonic()
        return saved[n]

    def checkpoint_due(n: int) -> bool:
        """Every ``checkpoint_every`` iterations, and ``checkpoint_minutes`` after the last one
        (rank 0's clock decides for every rank)."""
        timed = bool(t.checkpoint_minutes) and (
            time.monotonic() - last_save[0] >= 60 * t.checkpoint_minutes
        )
        return bool(t.checkpoint_every and n % t.checkpoint_every == 0) or D.broadcast_object(timed)

    done = start  # iterations whose update reached the weights and the metrics
    rollouts = make_rollouts(cfg, p)  # k = 0: played in turn; k >= 1: a producer thread
    try:
        # SIGINT/SIGTERM: abandon an iteration before its update, finish one during it (or
        # abandon it too, when it would outlast trainer.signal_grace_s)
        with interrupts(enabled=not dist.distributed, grace_s=t.signal_grace_s) as signals:
            learner.on_micro_batch = lambda n, done: (live.micro_batch(n, done), signals.poll(done))
            if initial is None and t.eval_initial:
                live.enter("eval")
                with Timer() as tm:
                    report, em = evaluate("initial", 0)
                o = report.overall
                initial = {"success_rate": o.success_rate, "ci": [o.success_ci_low, o.success_ci_high],
                           "episodes": o.episodes, "report": report.to_dict()}  # fmt: skip
                log(
                    {
                        "iteration": 0,
                        "step": 0,
                        "phase": "eval_initial",
                        "time/eval_s": tm.wall,
                        **em,
                    }
                )
                progress.note(f"initial greedy success {o.success_rate:.1%}")
            # -- the loop ------------------------------------------------------------------------
            rollouts.start(start, played_with)
            for it in range(start, t.iterations):
                live.start(it + 1)
                with Timer() as t_roll:  # 1. rollout (+ dynamic sampling's extra groups)
                    eps, roll_metrics, stats = rollouts.take(it)  # k >= 1: the producer's
                stats = DP.reduce_stats(stats)  # global counts: every rank decides to stop alike
                example = next((ep.error for ep in eps if ep.fault is not None), None)
                why = error_rate_stop(
                    stats.env_errors, stats.episodes, e.max_error_rate, e.id, example
                )
                if why is not None:
                    raise TrainingStopped(f"iteration {it + 1}: {why}")
                eps = [ep for ep in eps if ep.fault is None]  # env faults are left out of credit
                live.enter("credit")
                with Timer() as t_credit:  # 2. step batch (+ declared inputs)  3. credit
                    values, embeddings = features(
                        learner, model, eps, hooks.prompt_features, cfg.credit.embedding_layer
                    )
                    # torchrun: every rank's rows gathered into the single-process batch; this
                    # rank's sequences point at their global rows
                    batch, seqs, _ = DP.global_step_batch(eps, values=values, embeddings=embeddings)
                    # the method's own step-batch preparation (its critic heads, its spans), if any
                    batch, prepared = hooks.prepare(learner, tok, runner.fmt, batch, seqs)
                    try:
                        res = credit.compute(batch, cfg.credit.name, **options)
                    except FloatingPointError as exc:
                        raise TrainingStopped(f"iteration {it}: {exc}") from exc
                    if tracer is not None:  # a traced iteration: the learner keeps its rows' tokens
                        tracer.before_update(it, eps, batch, seqs, res, learner, options)
                live.enter("update")
                with signals.finishing():  # from here the iteration reaches the weights: finish it
                    with Timer() as t_upd:  # 4. token advantages + PPO epochs, then the engine
                        before = restore_point(learner) if signals.bounded else None
                        with signals.abandonable(it + 1, before):  # past the grace: back to before
                            try:  # value targets; the method's update inputs or token shaper
                                kw, tok_metrics = update_inputs(cfg, learner, tok, eps, batch, seqs,
                                                                res, hooks, prepared)  # fmt: skip
                                upd = learner.update(seqs, res.advantages,
                                                     seed=chunk_seed(cfg.seed, it, 3), **kw)  # fmt: skip
                            except FloatingPointError as exc:  # NonFiniteError included
                                raise TrainingStopped(f"iteration {it}: {exc}") from exc
                        if tracer is not None:
                            tracer.after_update(kw)
                        synced = rollouts.publish(it + 1)  # version it + 1 (k >= 1: a copy)
                    errs = error_metrics(stats.env_errors, stats.env_restarts, stats.env_replayed)
                    row = train_row(it, DP.gather_episodes(eps), batch.group, stats, res,
                                    upd, t_roll, t_credit, t_upd,
                                    {**roll_metrics, **tok_metrics, **errs, **synced})  # 5. log  # fmt: skip
                    row = DP.reduce_times(row)
                    log(row)
                    progress.update(it + 1, row)
                    done = it + 1
                if t.eval_every and (it + 1) % t.eval_every == 0 and it + 1 < t.iterations:
                    live.enter("eval")
                    with Timer() as tm, rollouts.paused():  # on the learner's current weights
                        _, em = evaluate(f"iter{it + 1}", it + 1)
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
                if checkpoint_due(it + 1):
                    checkpoint(it + 1)
            # -- the end: last checkpoint, final model, final evaluation, summary ----------------
            rollouts.close()  # k >= 1: the producer stops; the engine holds the learner's weights
            n = t.iterations
            if n not in saved:
                checkpoint(n)
            final_dir = checkpoint_dir(out) / "final"
            if main:  # once, from the full weights (the engine's copy under torchrun)
                final_dir = save_model(out, p.engine_model or model, tok)
            D.barrier()
            live.enter("eval")
            with Timer() as tm:
                report, em = evaluate("final", t.iterations)
            progress.close()
            log({"iteration": n, "step": n, "phase": "eval_final", "time/eval_s": tm.wall, **em})
            summary = summarize_run(cfg, report, initial, history, final_dir)
            scalars = {
                k: v for k, v in summary.flat().items() if isinstance(v, int | float | bool | str)
            }
            log({"iteration": n, "step": n, "phase": "summary", **scalars})
            if main:  # the trackers get the figures and the final model before they close
                write_outputs(out, summary, report, initial, history, t.plot, log.trackers)
    except TrainingStopped as exc:
        progress.close()
        log({"phase": "stopped", "reason": str(exc)})
        if main:
            print(f"training stopped: {exc}. The last good checkpoint is kept in "
                  f"{out / 'checkpoints'}.", file=sys.stderr)  # fmt: skip
        raise
    except Interrupted as exc:  # keep what was done: a checkpoint and its summary
        progress.close()
        with quit_on_signal():  # a second signal while saving: quit without a traceback
            ck = saved.get(done) or checkpoint(done)
            exc.line = write_interrupted(out, exc.name, done, t.iterations, ck, initial, history,
                                         log, lost=exc.lost)  # fmt: skip
        raise
    finally:
        progress.close()  # a second signal (Quit) passes the handlers above
        rollouts.close()  # no producer thread outlives the run (errors, Ctrl-C)
        log.close()
        if owned:
            runner.close()
    return summary
