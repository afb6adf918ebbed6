"""The trace viewer in a real browser: Debian's Chromium (``apt-get install chromium``), driven by
Playwright, opens the page ``python -m agentrl.view`` writes for real runs (a Sokoban smoke run,
a two-agent Kuhn poker run in the tool-call format, an ``agentrl.evaluate`` run) and the tests
check what it shows against the trace files: no console error, as many episodes and steps, the
same advantages, the groups, the filters, the side-by-side view and the curves."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from playwright.sync_api import sync_playwright

from agentrl.config import load_config
from agentrl.evaluate import evaluate
from agentrl.evaluation.traces import read_trace, trace_files
from agentrl.recipe import train
from agentrl.view import main as view_main

from .helpers import SMOKE, make_cfg

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def chromium() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail("Chromium is missing: apt-get install -y chromium (README, the test command)")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("view")
    sokoban = base / "sokoban"
    train(load_config(make_cfg(*SMOKE)), sokoban)
    kuhn = base / "kuhn"  # two agents, tool calls
    cfg = make_cfg(*SMOKE, "env=kuhn", "trainer.iterations=1", "trainer.eval_initial=false",
                   "rollout.action_format=tool_call", "model.max_new_tokens=64")  # fmt: skip
    train(load_config(cfg), kuhn)
    ev = base / "expert"
    with initialize_config_module("agentrl.configs", version_base=None):
        overrides = [f"output_dir={ev}", "progress=false", "agent=expert", "episodes=4"]
        evaluate(compose("evaluate", overrides))
    return {"sokoban": sokoban, "kuhn": kuhn, "expert": ev}


@pytest.fixture(scope="module")
def html(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "traces.html"
    assert view_main([str(runs["sokoban"]), str(runs["kuhn"]), str(runs["expert"]),
                      "-o", str(out)]) == 0  # fmt: skip
    return out


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, html):
    """The page, fresh; the test fails on any console error or uncaught exception."""
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on(
        "request",
        lambda r: (
            errors.append(f"network: {r.url}") if not r.url.startswith(("file:", "data:")) else None
        ),
    )
    pg.goto(html.as_uri())
    yield pg
    pg.close()
    assert errors == []


def traces(run: Path) -> dict[str, tuple[dict, list[dict]]]:
    return {p.name.split(".")[0]: read_trace(p) for p in trace_files(run)}


def open_file(page, run_index: int, name: str) -> None:
    page.click(f"#runs button[data-run='{run_index}']")
    page.click(f"#files button[data-file='{name}']")


def test_the_page_shows_every_episode_and_step_of_the_trace_files(page, runs):
    for k, key in enumerate(("sokoban", "kuhn", "expert")):
        files = traces(runs[key])
        assert files
        for name, (_, episodes) in files.items():
            open_file(page, k, name)
            steps = sum(len(e["steps"]) for e in episodes)
            assert page.inner_text(f"#files button[data-file='{name}'] .count") == (
                f"{len(episodes)} episodes · {steps} steps"
            )
            rows = page.locator("tr.episode")
            assert rows.count() == len(episodes)
            shown = 0
            for i in range(rows.count()):
                rows.nth(i).click()
                shown += page.locator("#episode .step").count()
            assert shown == steps


def test_a_tokens_advantage_and_log_probs_are_the_traces(page, runs):
    _, episodes = traces(runs["sokoban"])["train_000002"]
    ep = episodes[3]
    t = 1
    step = ep["steps"][t]
    open_file(page, 0, "train_000002")
    page.click(f"tr.episode[data-traj='{ep['traj']}']")
    page.click(f"#episode .step[data-t='{t}']")
    assert float(page.inner_text(f"#episode .step[data-t='{t}'] .adv")) == step["advantage"]
    for j in range(len(step["response_ids"])):
        page.click(f"#episode .step[data-t='{t}'] .tok[data-j='{j}']")
        got = {
            r.split("\t")[0]: r.split("\t")[1]
            for r in page.inner_text("#token-detail table").splitlines()
        }
        tok = step["tokens"]
        assert float(got["advantage"]) == tok["advantage"][j]
        assert float(got["engine log-prob"]) == tok["engine_logprob"][j]
        assert float(got["learner log-prob"]) == tok["learner_logprob"][j]
        assert float(got["ratio"]) == tok["ratio"][j]
        assert got["clipped"] == str(tok["clipped"][j]).lower()
        assert json.loads(got["text"]) == tok["text"][j]


def test_a_steps_groups_list_the_other_members_and_their_returns(page, runs):
    _, episodes = traces(runs["sokoban"])["train_000001"]
    ep = episodes[0]
    step = ep["steps"][0]
    open_file(page, 0, "train_000001")
    page.click(f"tr.episode[data-traj='{ep['traj']}']")
    page.click("#episode .step[data-t='0']")
    group = [e for e in episodes if e["group"] == ep["group"]]
    members = page.locator("#group-panel table.members tr")
    assert members.count() == len(group) + 1  # + the header
    anchor = page.locator("#group-panel table.anchor tr")
    assert anchor.count() == step["credit"]["anchor_size"] + 1


def test_multi_agent_tool_call_episodes_open_with_their_agents(page, runs):
    _, episodes = traces(runs["kuhn"])["train_000001"]
    open_file(page, 1, "train_000001")
    agents = page.locator("#f-agent option").all_inner_texts()
    assert {"player_0", "player_1"} <= set(agents)
    page.select_option("#f-agent", "player_1")
    assert page.locator("tr.episode").count() == sum(e["agent"] == "player_1" for e in episodes)
    page.locator("tr.episode").first.click()
    assert page.locator("#episode .badge.agent").first.inner_text() == "player_1"
    assert "<tool_call>" in page.inner_text("#episode .step")
    # the other agent's view of the same game, one click away
    mine = next(e for e in episodes if e["agent"] == "player_1")
    page.click(f"tr.episode[data-traj='{mine['traj']}']")
    other = next(e for e in episodes if e["game"] == mine["game"] and e is not mine)
    page.select_option("#f-agent", "")
    page.click(f".game a[data-traj='{other['traj']}']")
    assert page.locator("#episode .badge.agent").first.inner_text() == other["agent"] == "player_0"


def test_filters_by_outcome_and_invalid_actions(page, runs):
    for name, (_, episodes) in traces(runs["sokoban"]).items():
        open_file(page, 0, name)
        page.select_option("#f-outcome", "lost")
        assert page.locator("tr.episode").count() == sum(e["outcome"] == "lost" for e in episodes)
        page.select_option("#f-outcome", "")
        page.check("#f-invalid")
        assert page.locator("tr.episode").count() == sum(e["invalid_actions"] > 0 for e in episodes)
        page.uncheck("#f-invalid")


def test_two_runs_side_by_side_on_one_held_out_task(page, runs):
    _, left = traces(runs["sokoban"])["eval_final"]
    _, right = traces(runs["expert"])["eval_expert"]
    page.click("#views button[data-view='compare']")
    task = page.input_value("#cmp-task")
    assert task == left[0]["task_id"] == right[0]["task_id"]
    for side, eps in (("left", left), ("right", right)):
        ep = next(e for e in eps if e["task_id"] == task)
        assert page.locator(f"[data-side='{side}'] .step").count() == len(ep["steps"])
    # one run's two evaluations: its initial and its final policy
    page.select_option("#cmp-right", label="sokoban · eval initial (iteration 0)")
    assert page.locator("[data-side='right'] .step").count() >= 1


def test_training_curves(page, runs):
    page.click("#views button[data-view='curves']")
    lines = page.locator("svg[data-key='train/success_rate'] polyline")
    assert lines.count() == 2  # the two training runs (the evaluation run has no metrics)


def test_the_cli_refuses_a_folder_without_traces_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "agentrl.view", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no trace files" in proc.stderr


def test_a_cut_last_line_is_left_out_and_a_broken_file_refused(runs, tmp_path):
    """A run killed mid-write leaves a cut last line: read without it. A line broken elsewhere is
    the file's problem, named in one line."""
    folder = tmp_path / "run" / "traces"
    folder.mkdir(parents=True)
    src = (runs["expert"] / "traces" / "eval_expert.jsonl").read_text().splitlines()
    (folder / "eval_expert.jsonl").write_text("\n".join(src) + "\n" + src[-1][:40])
    _, episodes = read_trace(folder / "eval_expert.jsonl")
    assert len(episodes) == len(src) - 1
    (folder / "eval_expert.jsonl").write_text("\n".join([src[0], src[1][:40], *src[2:]]))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "agentrl.view", str(tmp_path / "run")], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "line 2 is not JSON" in proc.stderr


def test_serve_serves_the_page_until_ctrl_c(runs, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "page.html"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl.view", str(runs["expert"]), "-o", str(out), "--serve",
         "--port", "0"],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().startswith("wrote ")
        url = proc.stdout.readline().split()[1]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.read() == out.read_bytes()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0


def test_texts_cannot_break_out_of_the_page(browser, tmp_path):
    """Observations and responses are data: markup in them is shown as text, never parsed."""
    evil = '</script><!--<script>x</script><img src=x onerror="document.title=1">'
    folder = tmp_path / "run" / "traces"
    folder.mkdir(parents=True)
    step = {"t": 0, "agent": None, "observation": evil, "prompt_text": evil, "response_text": evil,
            "action": evil, "valid": False, "why_invalid": evil, "reward": 0.0, "state_key": evil}  # fmt: skip
    episode = {"type": "episode", "env": "E", "task_id": evil, "category": evil, "group": 0,
               "traj": 0, "agent": None, "agents": [], "won": False, "score": 0.0, "return": 0.0,
               "outcome": "lost", "invalid_actions": 1, "steps": [step]}  # fmt: skip
    lines = [{"type": "meta", "kind": "eval", "phase": "x"}, episode]
    (folder / "eval_x.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "page.html"
    assert view_main([str(tmp_path / "run"), "-o", str(out)]) == 0
    pg = browser.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(out.as_uri())
    pg.click("tr.episode")
    assert evil in pg.inner_text("#episode .obs")
    assert pg.locator("#episode img").count() == 0 and pg.title() == "agentrl traces"
    pg.close()
    assert errors == []
