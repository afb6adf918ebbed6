"""What one-move tactics does tic-tac-toe's bar need? Loss rates of policies with set tactics.

The multi-agent bar asks for a loss rate below 10 % against OpenSpiel's uniform random bot. This
script plays policies defined by their one-move tactics against that bot (the seat alternating)
and prints their loss rates. Where the policy can win at once (``win`` positions of
``agentrl.evaluation.games.one_move_tactics``) it plays a winning move with probability ``w``
and another move otherwise; where it must block (``defend``), a safe move with probability ``d``
and an unsafe one otherwise; in any other position with the centre free it takes the centre with
probability ``c``; otherwise it plays a legal move uniformly. ``w`` and ``d`` are the mass on
good moves that ``bench_games.py --tactics`` measures (a greedy policy's accuracy, as
``probe_tactics.py`` reports it), so those figures read as the loss rate they allow.

    python scripts/tactics_bar.py                             # the table of docs/lab-log.md
    python scripts/tactics_bar.py --policy 0.77,0.66,1 --games 40000

Results of 2026-12-07 are in docs/lab-log.md ("How good must the tactics be?").
"""

from __future__ import annotations

import argparse
import random
import sys

#: (win, defend, centre) probabilities of the default table's rows.
ROWS = [
    (0.43, 0.24, 0.0),  # a uniform policy's mass on good moves (lab log)
    (0.45, 0.36, 1.0),  # the trained policies' best measured mass, with the centre opening
    (0.77, 0.66, 0.0),  # the supervised probe after 96,000 labelled examples
    (0.77, 0.66, 1.0),
    (0.8, 0.8, 1.0),
    (0.9, 0.9, 1.0),
    (1.0, 1.0, 0.0),
    (1.0, 1.0, 1.0),
]


def losses(game, win: float, defend: float, centre: float, games: int, seed: int) -> int:
    """How many of ``games`` such a policy loses to the uniform random bot (seat alternating:
    even games as x, odd games as o)."""
    from agentrl.evaluation.games import _tactic

    rng = random.Random(seed)
    lost = 0
    for g in range(games):
        state, seat = game.new_initial_state(), g % 2
        while not state.is_terminal():
            legal = state.legal_actions()
            move = rng.choice(legal)
            if state.current_player() == seat:
                t = _tactic(state)
                if t is not None:  # a good move with probability w (d), else a bad one
                    bad = [a for a in legal if a not in t[1]]
                    good = rng.random() < (win if t[0] == "win" else defend)
                    move = rng.choice(t[1] if good or not bad else bad)
                elif 4 in legal and rng.random() < centre:
                    move = 4  # the centre cell (row 1, column 1)
            state.apply_action(move)
        lost += state.returns()[seat] < 0
    return lost


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=20000, help="games a policy (default 20000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policy", action="append", default=[], metavar="W,D,C",
                    help="win, defend and centre probabilities (repeatable; default: a table)")  # fmt: skip
    args = ap.parse_args()
    rows = []
    for spec in args.policy:
        try:
            w, d, c = (float(x) for x in spec.split(","))
        except ValueError:
            ap.error(f"--policy takes three numbers W,D,C, not {spec!r}")
        if not all(0.0 <= x <= 1.0 for x in (w, d, c)):
            ap.error(f"--policy probabilities lie in [0, 1], not {spec!r}")
        rows.append((w, d, c))
    if args.games < 1:
        ap.error("--games must be at least 1")
    try:
        import pyspiel

        from agentrl.evaluation.stats import wilson_interval
    except ImportError:
        print("tactics_bar.py needs OpenSpiel: pip install 'agentrl[games]'", file=sys.stderr)
        return 2
    game = pyspiel.load_game("tic_tac_toe")
    print(f"| win | defend | centre | loss vs random ({args.games} games, Wilson 95 %) |")
    print("|---|---|---|---|")
    for w, d, c in rows or ROWS:
        k = losses(game, w, d, c, args.games, args.seed)
        lo, hi = wilson_interval(k, args.games)
        print(f"| {w:.2f} | {d:.2f} | {c:.0%} | {k / args.games:.1%} [{lo:.1%}, {hi:.1%}] |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
