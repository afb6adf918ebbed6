"""``python -m agentrl.gateway``: the OpenAI-compatible gateway on its own, in front of a model.

Serves the embedded tiny model, a run's final model folder or any local Hugging Face folder on
the in-process Hugging Face engine, records every call per session (the API key, or the
``X-Session-Id`` header), and on exit (Ctrl-C) writes the sessions' records as JSON lines
(``--record``): the exact prompt ids, response ids and log-probs of every call.

    python -m agentrl.gateway --model tiny --port 8000 --record sessions.jsonl
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

import torch

from ..backends.hf import HFBackend
from ..models import load_model
from .server import SESSION_HEADER, Gateway


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m agentrl.gateway", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--model", default="tiny", help="tiny, or a Hugging Face model folder")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument(
        "--max-tokens", type=int, default=256, help="response cap of calls that set none"
    )
    ap.add_argument("--max-tokens-limit", type=int, default=8192,
                    help="the largest max_tokens a call may ask for (more is a 400)")  # fmt: skip
    ap.add_argument("--allow-host", nargs="*", default=[], metavar="NAME",
                    help="host names to answer to besides the --host address's ('*': any)")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0, help="sampling seed of calls that set none")
    ap.add_argument(
        "--record", type=Path, default=None, help="write the sessions here on exit (jsonl)"
    )
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        model, tok, path = load_model(args.model)
    except (OSError, ValueError) as exc:
        print(f"agentrl.gateway: cannot load model {args.model!r}: {exc}", file=sys.stderr)
        return 2
    model.eval()
    gw = Gateway(HFBackend(model, tok.pad_token_id, seed=args.seed), tok,
                 model_name=str(args.model), max_tokens=args.max_tokens, seed=args.seed,
                 max_tokens_limit=args.max_tokens_limit, hosts=args.allow_host)  # fmt: skip
    try:
        url = gw.start(args.host, args.port)
    except (OSError, RuntimeError) as exc:
        print(f"agentrl.gateway: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        gw.close()
        return 2
    print(f"agentrl gateway: {url} (model {path}); a session per API key or {SESSION_HEADER}",
          flush=True)  # fmt: skip
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    finally:
        gw.close()
        if args.record is not None:
            with args.record.open("w") as f:
                for s in gw.sessions.all():
                    f.write(json.dumps(s.to_json()) + "\n")
            print(f"agentrl gateway: {len(gw.sessions.all())} sessions written to {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
