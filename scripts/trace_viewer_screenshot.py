"""The trace viewer's screenshot in the docs (docs/img/trace-viewer.png), from a real run.

    python scripts/trace_viewer_screenshot.py [RUN] [-o docs/img/trace-viewer.png]

Without RUN it trains the default config for 8 iterations (traces every 4, evaluations on 16
held-out tasks) into a temporary folder. It writes the page with ``python -m agentrl.view``, opens
it in Debian's Chromium (``apt-get install chromium``) through Playwright, selects the last traced
iteration, an episode of a group whose rollouts did not all end alike (the first group otherwise),
its first step and that step's first sampled token, and saves the window.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from hydra import compose, initialize_config_module
from playwright.sync_api import sync_playwright

from agentrl.config import load_config
from agentrl.evaluation.traces import read_trace, trace_files
from agentrl.recipe import train
from agentrl.view import main as view_main

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "trace-viewer.png"


def short_run(out: Path) -> None:
    overrides = ["trainer.iterations=8", "trainer.traces.every=4", "env.eval_episodes=16",
                 "trainer.eval_every=4", "trainer.progress=false", "trainer.loggers=[]",
                 "trainer.plot=false"]  # fmt: skip
    with initialize_config_module("agentrl.configs", version_base=None):
        train(load_config(compose("train", overrides)), out)


def pick(run: Path) -> tuple[str, int]:
    """The last training file and a traj of a group with mixed outcomes (else the first)."""
    name, episodes = None, []
    for path in trace_files(run):
        meta, eps = read_trace(path)
        if meta.get("kind") == "train":
            name, episodes = path.name.split(".")[0], eps
    if name is None:
        raise SystemExit(f"{run}: no training traces")
    groups: dict[int, list] = {}
    for e in episodes:
        groups.setdefault(e["group"], []).append(e)
    mixed = [g for g in groups.values() if len({e["outcome"] for e in g}) > 1]
    group = (mixed or list(groups.values()))[0]
    won = [e for e in group if e["outcome"] == "won"]
    return name, (won or group)[0]["traj"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", nargs="?", type=Path)
    ap.add_argument("-o", "--output", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run
        if run is None:
            run = Path(tmp) / "run"
            short_run(run)
        html = Path(tmp) / "traces.html"
        if view_main([str(run), "-o", str(html)]) != 0:
            return 1
        name, traj = pick(run)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1500})
            page.goto(html.as_uri())
            page.click(f"#files button[data-file='{name}']")
            page.click(f"tr.episode[data-traj='{traj}']")
            page.click("#episode .step[data-t='0']")
            sampled = page.locator("#episode .step[data-t='0'] .tok:not(.out)")
            (
                sampled if sampled.count() else page.locator("#episode .step[data-t='0'] .tok")
            ).first.click()
            page.evaluate("window.scrollTo(0, 0)")
            args.output.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.output))
            browser.close()
    print(json.dumps({"screenshot": str(args.output), "file": name, "traj": traj}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
