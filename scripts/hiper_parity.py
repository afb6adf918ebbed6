"""Parity of ``credit=hiper`` with the authors' HAE code on random batches.

    python scripts/hiper_parity.py --reference PATH/TO/HiPER-agent/hiper_hae/core_hae.py

Loads the reference ``compute_hae_advantage`` from a checkout of github.com/JonP07/HiPER-agent
(nothing of it is copied here; ``verl`` is stubbed, only its ``DataProto`` name is imported there),
feeds it token-level tensors laid out as ``switch | subgoal | action`` spans with the values at
the positions its value masks pick, and compares every advantage and critic target with
:func:`agentrl.credit.hiper.hiper` on the same turns. Prints the largest absolute difference per
quantity and exits 1 if any exceeds ``--tol``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import sys
import types

import numpy as np
import torch
from agentrl.credit import StepBatch
from agentrl.credit.hiper import hiper

# token layout of every response: [0, 2) switch span, [2, 6) subgoal span, [6, 10) action span
L, SW, SG, AC = 10, slice(0, 2), slice(2, 6), slice(6, 10)


def load_reference(path: str):
    sys.modules.setdefault("verl", types.SimpleNamespace(DataProto=object))
    spec = importlib.util.spec_from_file_location("hiper_reference_core_hae", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def random_case(rng: np.random.Generator):
    """Per-turn columns of a few groups of trajectories (some truncated, some invalid turns)."""
    cols: dict[str, list] = {
        k: [] for k in ("group", "traj", "t", "r", "done", "valid", "sw", "sg", "swspan")
    }
    traj = 0
    for g in range(rng.integers(1, 4)):
        for _ in range(rng.integers(1, 5)):
            T = int(rng.integers(1, 9))
            truncated = rng.random() < 0.3
            for t in range(T):
                cols["group"].append(g)
                cols["traj"].append(traj)
                cols["t"].append(t)
                cols["r"].append(float(rng.choice([0.0, 0.0, 1.0, -0.5, 10.0])))
                cols["done"].append(t == T - 1 and not truncated)
                cols["valid"].append(bool(rng.random() > 0.2))
                cols["sw"].append(bool(rng.random() < 0.35))
                cols["sg"].append(None if rng.random() < 0.15 else int(rng.integers(0, 3)))
                cols["swspan"].append(bool(rng.random() > 0.1))
            traj += 1
    n = len(cols["t"])
    cols["v_low"] = rng.normal(size=n)
    cols["v_high"] = rng.normal(size=n)
    cols["v_term"] = rng.normal(size=n)
    return {k: np.asarray(v) if k != "sg" else v for k, v in cols.items()}


def reference_outputs(ref, c, opts: dict) -> dict[str, np.ndarray]:
    n = len(c["t"])
    boundary = (c["t"] == 0) | c["sw"]
    responses = torch.zeros((n, L), dtype=torch.long)
    resp_mask = torch.ones((n, L), dtype=torch.long)
    sub_mask = torch.zeros((n, L), dtype=torch.bool)
    sw_mask = torch.zeros((n, L), dtype=torch.bool)
    act_mask = torch.zeros((n, L), dtype=torch.bool)
    act_mask[:, AC] = True
    vm_low = torch.zeros((n, L), dtype=torch.bool)
    vm_high = torch.zeros((n, L), dtype=torch.bool)
    vm_term = torch.zeros((n, L), dtype=torch.bool)
    vm_low[:, AC.start] = True
    vm_term[:, 0] = True
    v_low = torch.randn((n, L))
    v_high = torch.randn((n, L))
    v_term = torch.randn((n, L))
    for i in range(n):
        if c["sg"][i] is not None:
            sub_mask[i, SG] = True
            responses[i, SG] = 100 + c["sg"][i]
        if c["swspan"][i]:
            sw_mask[i, SW] = True
        if boundary[i]:
            vm_high[i, 0] = True
        v_low[i, AC.start] = float(c["v_low"][i])
        v_high[i, 0] = float(c["v_high"][i])
        v_term[i, 0] = float(c["v_term"][i])
    data = types.SimpleNamespace(
        batch={
            "response_mask": resp_mask,
            "responses": responses,
            "value_low": v_low,
            "value_high": v_high,
            "value_term": v_term,
            "value_mask_low": vm_low,
            "value_mask_high": vm_high,
            "value_mask_term": vm_term,
        },
        non_tensor_batch={
            "traj_uid": np.array([f"u{k}" for k in c["traj"]], dtype=object),
            "turn_idx": c["t"],
            "dones": c["done"],
            "switch": c["sw"],
            "rewards": c["r"].astype(np.float32),
            "is_action_valid": c["valid"].astype(np.float32),
        },
    )
    cfg = ref.HAEConfig(
        gamma=opts["gamma"],
        lam_turn=opts["lam_turn"],
        lam_seg=opts["lam_seg"],
        norm_adv=opts["normalize"],
        keep_penalty=opts["keep_penalty"],
        keep_penalty_mode=opts["keep_penalty_mode"],
        keep_consistency_penalty=opts["keep_consistency_penalty"],
        keep_consistency_requires_both=opts["consistency_requires_both"],
        bootstrap_truncated=opts["bootstrap_truncated"],
        invalid_action_penalty_coef=opts["invalid_penalty"],
        assign_high_to_switch=False,
        assign_term_to_switch=True,
        assign_high_to_subgoal=True,
    )
    with contextlib.redirect_stdout(io.StringIO()):  # the reference prints a line per call
        out = ref.compute_hae_advantage(
            data, cfg, action_mask=act_mask, subgoal_mask=sub_mask, switch_mask=sw_mask
        ).batch
    hi_rows = torch.as_tensor(boundary) & sub_mask.any(1)
    return {
        "action": out["advantages_low"][:, AC.start].double().numpy(),
        "subgoal": out["advantages_high"][:, SG.start].double().numpy(),
        "subgoal_rows": hi_rows.numpy(),
        "switch": out["advantages_term"][:, 0].double().numpy(),
        "switch_rows": sw_mask.any(1).numpy(),
        "returns_low": out["returns_low"][:, AC.start].double().numpy(),
        "returns_high": out["returns_high"][:, 0].double().numpy(),
        "boundary": boundary,
        "returns_term": out["returns_term"][:, 0].double().numpy(),
    }


def ours(c, opts: dict) -> dict[str, np.ndarray]:
    b = StepBatch(
        group=c["group"],
        traj=c["traj"],
        t=c["t"],
        reward=c["r"].astype(np.float32).astype(np.float64),
        done=c["done"],
        state_key=np.zeros(len(c["t"]), dtype=np.int64),
        action_key=np.zeros(len(c["t"]), dtype=np.int64),
        valid=c["valid"],
        value=c["v_low"].astype(np.float32).astype(np.float64),
        extras={
            "switch": c["sw"],
            "value_high": c["v_high"].astype(np.float32).astype(np.float64),
            "value_term": c["v_term"].astype(np.float32).astype(np.float64),
            "subgoal": np.array([None if s is None else f"goal {s}" for s in c["sg"]], object),
            "switch_span": c["swspan"],
        },
    )
    return hiper(b, **opts).components


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--reference", required=True, help="path to HiPER-agent's hiper_hae/core_hae.py"
    )
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    ref = load_reference(args.reference)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    worst: dict[str, float] = {}
    for case in range(args.cases):
        opts = {
            "gamma": float(rng.choice([1.0, 0.95, 0.5])),
            "lam_turn": float(rng.choice([1.0, 0.9])),
            "lam_seg": float(rng.choice([0.95, 0.7])),
            "normalize": bool(rng.random() < 0.5),
            "keep_penalty": float(rng.choice([0.0, -0.3, -3.5])),
            "keep_penalty_mode": str(rng.choice(["normalized", "fixed"])),
            "keep_consistency_penalty": float(rng.choice([0.0, -0.3])),
            "consistency_requires_both": bool(rng.random() < 0.5),
            "bootstrap_truncated": bool(rng.random() < 0.5),
            "invalid_penalty": float(rng.choice([0.0, 0.1])),
        }
        c = random_case(rng)
        want = reference_outputs(ref, c, opts)
        got = ours(c, opts)
        pairs = {
            "action": (got["action"], want["action"], np.ones(len(c["t"]), bool)),
            "subgoal": (got["subgoal"], want["subgoal"], want["subgoal_rows"]),
            "switch": (got["switch"], want["switch"], want["switch_rows"]),
            "returns_low": (got["returns_low"], want["returns_low"], np.ones(len(c["t"]), bool)),
            "returns_high": (got["returns_high"], want["returns_high"], want["boundary"]),
            "returns_term": (got["returns_term"], want["returns_term"], np.ones(len(c["t"]), bool)),
        }
        for name, (a, b, rows) in pairs.items():
            err = float(np.max(np.abs(a[rows] - b[rows]), initial=0.0))
            scale = float(np.max(np.abs(b[rows]), initial=1.0))
            worst[name] = max(worst.get(name, 0.0), err / max(scale, 1.0))
            if err / max(scale, 1.0) > args.tol:
                print(f"case {case}: {name} differs by {err:.3g}; options {opts}")
    print(f"{args.cases} random batches; largest relative difference per quantity:")
    for name, err in worst.items():
        print(f"  {name:13s} {err:.2e}")
    return 0 if max(worst.values()) <= args.tol else 1


if __name__ == "__main__":
    raise SystemExit(main())
