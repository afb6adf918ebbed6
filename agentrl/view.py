"""``python -m agentrl.view RUN [RUN2 ...]``: one self-contained HTML page of runs' trajectory traces.

It reads each run folder's ``traces/`` (written by ``agentrl.train`` and ``agentrl.evaluate``;
:mod:`agentrl.evaluation.traces`) and ``metrics.jsonl``, and writes one HTML file, scripts, styles
and data inline, that any browser opens from disk with no network and no server: the runs, their
traced iterations and evaluations, groups, episodes and steps; each response's tokens coloured by
their advantage or by the gap between the engine's and the learner's log-probs; a step's credit
groups with the other members and their returns; filters by category, outcome and invalid
actions; two runs (or two evaluations of one run) side by side on the same held-out task; and the
training curves. ``--serve`` also serves the page on localhost until Ctrl-C.

Exit codes: 0 written; 2 a run folder without traces or an unreadable trace file (one line).
"""

from __future__ import annotations

import argparse
import http.server
import json
import socketserver
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from .evaluation.traces import read_trace, trace_files

__all__ = ["build_page", "load_run", "main"]

#: metrics.jsonl keys the page draws (those a run has), in this order
CURVES = (
    "train/success_rate",
    "eval/success_rate",
    "train/mean_return",
    "train/invalid_action_rate",
    "loss/loss",
    "loss/clip_frac",
    "loss/approx_kl_old",
    "credit/zero_advantage_fraction",
    "credit/step_mean_group_size",
)


class ViewError(ValueError):
    """A run the page cannot show: the message is the one line printed."""


def _slim(episode: dict[str, Any]) -> dict[str, Any]:
    """An episode without its steps' prompt ids (the page shows the prompt text and its length)."""
    steps = []
    for s in episode.get("steps", []):
        s = dict(s)
        s["prompt_tokens"] = len(s.pop("prompt_ids", None) or [])
        s.pop("response_ids", None)
        steps.append(s)
    return {**episode, "steps": steps}


def _curves(path: Path) -> dict[str, list[list[float]]]:
    """``{key: [[iteration, value], ...]}`` of the metrics the page draws."""
    out: dict[str, list[list[float]]] = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        it = row.get("iteration")
        if not isinstance(it, int | float):
            continue
        for key, value in row.items():
            if key in CURVES and isinstance(value, int | float):
                out.setdefault(key, []).append([it, value])
    return {k: out[k] for k in CURVES if k in out}


def load_run(run: Path, label: str | None = None) -> dict[str, Any]:
    """One run's page data: its trace files (meta and episodes) and training curves."""
    files = trace_files(run)
    if not files:
        raise ViewError(
            f"{run}: no trace files (a run folder with traces/, written by agentrl.train or "
            "agentrl.evaluate; trainer.traces.every=0 or traces=0 turn them off)"
        )
    out = []
    for path in files:
        try:
            meta, episodes = read_trace(path)
        except (OSError, ValueError, EOFError) as exc:
            raise ViewError(f"cannot read {path}: {exc}") from None
        name = path.name.split(".")[0]
        out.append({"name": name, "meta": meta, "episodes": [_slim(e) for e in episodes]})

    # training files in iteration order first, then the evaluations in the order they ran
    def order(f: dict[str, Any]) -> tuple:
        m = f["meta"]
        it = m.get("iteration")
        return (m.get("kind") != "train", it if isinstance(it, int) else 10**9, f["name"])

    out.sort(key=order)
    folder = run if (run / "traces").is_dir() or not run.is_file() else run.parent
    return {
        "label": label or folder.resolve().name,
        "path": str(folder.resolve()),
        "files": out,
        "curves": _curves(folder / "metrics.jsonl"),
    }


def build_page(runs: list[dict[str, Any]]) -> str:
    """The HTML page: the template with its script, styles and the runs' data inline."""
    assets = resources.files("agentrl") / "assets"
    page = (assets / "trace_viewer.html").read_text(encoding="utf-8")
    data = json.dumps({"runs": runs}, ensure_ascii=False, separators=(",", ":"))
    # "<" only occurs inside JSON strings: as \u003c no "</script>" or "<!--" reaches the parser
    data = data.replace("<", "\\u003c")
    parts = {
        "/*STYLE*/": (assets / "trace_viewer.css").read_text(encoding="utf-8"),
        "/*SCRIPT*/": (assets / "trace_viewer.js").read_text(encoding="utf-8"),
        "/*DATA*/": data,
    }
    for marker, text in parts.items():
        page = page.replace(marker, text, 1)
    return page


def _labels(runs: list[Path]) -> list[str]:
    """Short distinct names: the folder's name, with its parent's when two names clash."""
    names = [r.resolve().name for r in runs]
    return [
        f"{r.resolve().parent.name}/{n}" if names.count(n) > 1 else n
        for r, n in zip(runs, names, strict=True)
    ]


def serve(path: Path, port: int) -> None:
    """Serve ``path``'s folder on 127.0.0.1 until Ctrl-C (the server closes on the way out)."""
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(path.parent))  # noqa: E731
    with socketserver.TCPServer(("127.0.0.1", port), handler) as httpd:
        print(f"serving http://127.0.0.1:{httpd.server_address[1]}/{path.name} (Ctrl-C stops)",
              flush=True)  # fmt: skip
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            print("stopped")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m agentrl.view",
        description="Write one self-contained HTML page of runs' trajectory traces.",
    )
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (or their traces/ folders)")
    ap.add_argument("-o", "--output", type=Path, default=None,
                    help="the HTML file (default: <first run>/traces.html)")  # fmt: skip
    ap.add_argument("--serve", action="store_true", help="also serve it on 127.0.0.1 until Ctrl-C")
    ap.add_argument("--port", type=int, default=8765, help="the port of --serve (0: any free one)")
    args = ap.parse_args(argv)
    try:
        runs = [load_run(r, label) for r, label in zip(args.runs, _labels(args.runs), strict=True)]
    except ViewError as exc:
        print(f"agentrl.view: {exc}", file=sys.stderr)
        return 2
    out = args.output or Path(runs[0]["path"]) / "traces.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_page(runs), encoding="utf-8")
    n_ep = sum(len(f["episodes"]) for r in runs for f in r["files"])
    print(f"wrote {out} ({len(runs)} run(s), {n_ep} episodes, {out.stat().st_size // 1024} KiB)",
          flush=True)  # fmt: skip
    if args.serve:
        try:
            serve(out, args.port)
        except OSError as exc:
            print(f"agentrl.view: cannot serve on port {args.port}: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
