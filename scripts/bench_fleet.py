"""``rollout=fleet`` on this machine: weight-sync cost against the raw transport, and rollout
throughput of 1 and 2 servers against the in-process vLLM engine.

    python scripts/bench_fleet.py [--model tiny|smollm2-135m|PATH] [--servers 1,2] [--syncs 3]
        [--prompts 32] [--tokens 64] [--lora-r R] [--json OUT]

Sync: the model's full weights pushed ``--syncs`` times through vLLM's weight-transfer API
(agentrl's ``agentrl_gloo`` engine; pause, transfer, finish with the version, resume) to every
server of the fleet, against the time the same gloo transport takes to move the same bytes, in
the same chunks, from this process to a receiving process with no vLLM around it (the ratio is
the API's overhead: HTTP control calls, the server's layerwise reload, pause and resume). Syncs
and raw rounds alternate, so a load that comes and goes weighs on both alike; medians.

LoRA (``--lora-r R``): the model with rank-R adapters on every linear layer; a first sync sends
the base weights and the adapter, then ``--syncs`` syncs send the adapter alone (the servers
merge it), against the raw transport of the adapter's bytes.

Training rows (``--train-parity N``): the no-argument default run for N iterations with
``rollout=vllm`` and with ``rollout=fleet rollout.fleet.servers=1``, same seed; every train row's
metrics (times, memory and sync figures aside) compared, the largest relative difference printed.

Throughput: ``--prompts`` prompts of 16 tokens, each sampled to exactly ``--tokens`` tokens
(``ignore_eos``, no stop token, seeded), tokens per second of wall time; the in-process engine
first (same KV budget), then the fleet with each server count. Every figure is a median of
three calls after one untimed call.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentrl.backends.base import SamplingParams  # noqa: E402
from agentrl.backends.fleet import FleetBackend, free_port  # noqa: E402
from agentrl.backends.fleet_transfer import DEFAULT_CHUNK_BYTES, _layout  # noqa: E402
from agentrl.backends.weight_names import checkpoint_items  # noqa: E402
from agentrl.models import resolve_model_path  # noqa: E402

RECEIVER = """
import json, sys
from agentrl.backends.fleet_transfer import BufferPool, _group, recv_chunks
port, chunks = int(sys.argv[1]), json.loads(sys.argv[2])
group, store = _group("127.0.0.1", port, 1, False, 600)
pool = BufferPool()  # kept from round to round, as the server's engine keeps it
while json.loads(sys.stdin.readline()):  # one line per round; false: done
    recv_chunks(group, chunks, lambda chunk, buf: None, pool=pool)
import os
os._exit(0)  # gloo threads are left to the OS
"""


def _cpu_model() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


class RawTransport:
    """The same gloo transport with no vLLM and no HTTP: the state's bytes, chunked as a sync
    chunks them, broadcast to ``receivers`` processes at once, each over its own two-rank gloo
    group (as the fleet sends to each server). Rounds are run one at a time, between the
    fleet's syncs, so both see the same load."""

    def __init__(self, state: dict[str, torch.Tensor], receivers: int = 1):
        import os
        from concurrent.futures import ThreadPoolExecutor

        from agentrl.backends.fleet_transfer import BufferPool, _group

        dtypes = [str(v.dtype).removeprefix("torch.") for v in state.values()]
        shapes = [list(v.shape) for v in state.values()]
        self.chunks = _layout(list(state), dtypes, shapes, DEFAULT_CHUNK_BYTES)
        self.tensors = list(state.values())
        ports = [free_port() for _ in range(receivers)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.procs = [
            subprocess.Popen([sys.executable, "-c", RECEIVER, str(p), json.dumps(self.chunks)],
                             env=env, stdin=subprocess.PIPE, text=True)
            for p in ports
        ]  # fmt: skip
        self.pool = ThreadPoolExecutor(receivers)
        self.groups = list(self.pool.map(lambda p: _group("127.0.0.1", p, 0, True, 600)[0], ports))
        self.buffers = [BufferPool() for _ in ports]  # as each trainer engine keeps its own

    def round(self) -> float:
        from agentrl.backends.fleet_transfer import send_chunks

        for proc in self.procs:
            proc.stdin.write("true\n")
            proc.stdin.flush()
        t0 = time.perf_counter()
        list(self.pool.map(lambda gb: send_chunks(gb[0], self.tensors, self.chunks, pool=gb[1]),
                           zip(self.groups, self.buffers)))  # fmt: skip
        return time.perf_counter() - t0

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.stdin.write("false\n")
                    proc.stdin.flush()
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.pool.shutdown()


def timed_syncs(sync, raw: RawTransport, rounds: int) -> tuple[float, float]:
    """Medians of ``rounds`` syncs and raw rounds, taken in turn, after one untimed each."""
    sync()
    raw.round()
    fleet_s, raw_s = [], []
    for _ in range(rounds):
        fleet_s.append(sync())
        raw_s.append(raw.round())
    return statistics.median(fleet_s), statistics.median(raw_s)


def lora_policy(model, r: int, seed: int = 0):
    """The benchmark's model with LoRA on every linear layer, adapters set to random values
    (peft starts lora_B at zero: a sync must move real numbers)."""
    import copy

    from agentrl.models import apply_lora

    policy = apply_lora(copy.deepcopy(model), r=r, alpha=2.0 * r)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    return policy


def throughput(backend, prompts: int, tokens: int) -> float:
    batch = [
        [5 + (i % 50), 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
        for i in range(prompts)
    ]
    sp = SamplingParams(max_new_tokens=tokens, temperature=1.0, seed=1)
    backend.generate(batch, sp)  # untimed
    rates = []
    for _ in range(3):
        t0 = time.perf_counter()
        out = backend.generate(batch, sp)
        n = sum(len(g.token_ids) for g in out)
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates)


SKIP = ("time/", "cpu/", "mem/", "sync/", "rollout/generate", "phase")


def train_parity(iters: int, out: Path) -> None:
    """The default run with the in-process engine and with a fleet of one: the train rows."""
    import os

    rows = {}
    for name, extra in (("vllm", []), ("fleet", ["rollout.fleet.servers=1"])):
        run = out / name
        cmd = [sys.executable, "-m", "agentrl.train", f"rollout={name}", *extra,
               f"trainer.iterations={iters}", "trainer.eval_initial=false", f"output_dir={run}"]  # fmt: skip
        t0 = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode:
            sys.exit(f"{name}: exit {proc.returncode}: {proc.stderr[-2000:]}")
        lines = (run / "metrics.jsonl").read_text().splitlines()
        rows[name] = [json.loads(x) for x in lines if '"phase": "train"' in x]
        print(f"{name}: {iters} iterations in {time.perf_counter() - t0:.0f} s", flush=True)
    worst, where, exact = 0.0, "", 0
    for a, b in zip(rows["vllm"], rows["fleet"], strict=True):
        for k, v in a.items():
            if k.startswith(SKIP) or not isinstance(v, int | float):
                continue
            w = b.get(k)
            rel = abs(v - w) / max(abs(v), abs(w), 1e-12) if w != v else 0.0
            exact += rel == 0.0
            if rel > worst:
                worst, where = rel, f"{k} at iteration {a['iteration']}: {v!r} vs {w!r}"
    print(f"train rows: {exact} values equal; largest relative difference {worst:.2g} ({where})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--servers", default="1,2")
    ap.add_argument("--syncs", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--kv-bytes", type=int, default=128 << 20)
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--no-inprocess", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--train-parity", type=int, default=0, metavar="N")
    ap.add_argument("--out", default="runs/bench_fleet")
    ap.add_argument("--lora-r", type=int, default=0, metavar="R",
                    help="also LoRA syncs: rank R on every linear layer (adapter only)")  # fmt: skip
    args = ap.parse_args()
    if args.train_parity:
        train_parity(args.train_parity, Path(args.out))
        return
    torch.set_num_threads(1)
    path = resolve_model_path(args.model)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    state = dict(checkpoint_items(model.state_dict()))
    nbytes = sum(v.numel() * v.element_size() for v in state.values())
    result = {
        "model": args.model,
        "bytes": nbytes,
        "machine": f"{_cpu_model()}, {__import__('os').cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d"),
    }
    print(f"{args.model}: {nbytes / 2**20:.1f} MiB of weights", flush=True)
    if not args.no_inprocess:
        from agentrl.backends.vllm_engine import VLLMBackend

        eng = VLLMBackend(
            model=path,
            dtype="float32",
            max_model_len=args.max_model_len,
            kv_cache_memory_bytes=args.kv_bytes,
        )
        try:
            result["inprocess_tok_s"] = throughput(eng, args.prompts, args.tokens)
            eng.update_weights(state)  # untimed first
            times = []
            for _ in range(args.syncs):
                eng.update_weights(state)
                times.append(eng.last_sync_seconds)
            result["inprocess_sync_s"] = statistics.median(times)
        finally:
            eng.close()
        print(f"in-process: {result['inprocess_tok_s']:.0f} tok/s, "
              f"sync {result['inprocess_sync_s']:.3f} s")  # fmt: skip
    policy = adapter = None
    if args.lora_r:
        from agentrl.learner.weights import adapter_weights, base_state_dict

        policy = lora_policy(model, args.lora_r)
        adapter = adapter_weights(policy)
        result["lora_bytes"] = adapter.nbytes
        print(f"LoRA r={args.lora_r} on every linear layer: {adapter.nbytes / 2**20:.1f} MiB "
              "of adapter per sync", flush=True)  # fmt: skip
    for n in [int(x) for x in args.servers.split(",")]:
        fleet = FleetBackend(path, model=model, servers=n, dtype="float32",
                             max_model_len=args.max_model_len,
                             kv_cache_memory_bytes=args.kv_bytes)  # fmt: skip
        try:

            def full(fleet: FleetBackend = fleet) -> float:
                fleet.update_weights(state)
                return fleet.last_sync_seconds

            fleet.update_weights(state)  # untimed first: opens the transfer groups
            raw_tr = RawTransport(state, n)
            try:
                sync, raw = timed_syncs(full, raw_tr, args.syncs)
            finally:
                raw_tr.close()
            result[f"fleet{n}_sync_s"], result[f"raw{n}_s"] = sync, raw
            rate = throughput(fleet, args.prompts, args.tokens) if args.prompts else 0.0
            result[f"fleet{n}_tok_s"] = rate
            line = (f"fleet of {n}: sync {sync:.3f} s, raw gloo to {n} receivers {raw:.3f} s "
                    f"({sync / raw:.2f}x raw)")  # fmt: skip
            if rate:
                line += f", {rate:.0f} tok/s"
            if rate and "inprocess_tok_s" in result:
                line += f" ({rate / result['inprocess_tok_s']:.2f}x in-process)"
            print(line, flush=True)
            if policy is not None:

                def lora(fleet: FleetBackend = fleet) -> float:
                    fleet.update_adapter(adapter.tensors, adapter.config,
                                         base=lambda: base_state_dict(policy))  # fmt: skip
                    assert fleet.last_sync_bytes == adapter.nbytes, fleet.last_sync_bytes
                    return fleet.last_sync_seconds

                fleet.update_adapter(adapter.tensors, adapter.config,
                                     base=lambda: base_state_dict(policy))  # fmt: skip
                first = fleet.last_sync_seconds  # the base weights and the adapter
                wire = {k.removeprefix("base_model.model."): v for k, v in adapter.tensors.items()}
                raw_tr = RawTransport(wire, n)
                try:
                    sync, raw = timed_syncs(lora, raw_tr, args.syncs)
                finally:
                    raw_tr.close()
                result[f"lora{n}_first_s"] = first
                result[f"lora{n}_sync_s"], result[f"lora_raw{n}_s"] = sync, raw
                print(f"fleet of {n}, LoRA: first sync (base + adapter) {first:.3f} s; "
                      f"adapter sync {sync:.3f} s, raw gloo of the adapter's bytes to {n} "
                      f"receivers {raw:.3f} s ({sync / raw:.2f}x raw)", flush=True)  # fmt: skip
        finally:
            fleet.close()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
