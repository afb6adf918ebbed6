"""``python -m agentrl.envs.openenv serve ENV``: serve a registered agentrl env in OpenEnv's
protocol, so OpenEnv clients (TRL, torchforge, ART, ... or ``GenericEnvClient``) can train on it.

Binds to 127.0.0.1 unless ``--host`` says otherwise, and prints one line,
``serving <env id> in OpenEnv's protocol on http://HOST:PORT (N sessions)``, once the socket
listens (``--port 0`` picks a free port). The env id and kwargs are fixed at start: a client
chooses tasks (seed, task id, reset options) and actions, never what the server builds.
Start-up problems (unknown env, bad kwargs) exit 2 with one line.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence

import uvicorn

from ..registry import parse_kwargs
from ..webguard import allowed_hosts, serve
from .server import SESSION_TIMEOUT, create_openenv_app

#: The largest WebSocket message (bytes): an action is at most 100,000 characters.
MAX_MESSAGE = 1 * 2**20
#: Seconds a stopping server (SIGTERM, Ctrl-C) waits for requests in flight.
SHUTDOWN_GRACE = 1.0

__all__ = ["main", "parse_kwargs"]  # parse_kwargs: envs.registry's, kept importable here

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m agentrl.envs.openenv", description=__doc__.split("\n\n")[0]
    )
    sub = ap.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve an agentrl env in OpenEnv's protocol")
    serve.add_argument("env", help="registered env id, e.g. Sokoban-v0")
    serve.add_argument("--kwargs", nargs="*", default=[], metavar="KEY=VALUE", help="env kwargs")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    serve.add_argument("--port", type=int, default=8700, help="port (0: a free one, printed)")
    serve.add_argument("--max-sessions", type=int, default=16, help="concurrent sessions (envs)")
    serve.add_argument("--allow-reset-options", nargs="*", default=[], metavar="KEY",
                       help="reset arguments besides seed and task_id clients may send")  # fmt: skip
    serve.add_argument("--allow-host", nargs="*", default=[], metavar="NAME",
                       help="Host names besides loopback and --host it answers to (*: any)")  # fmt: skip
    serve.add_argument("--session-timeout", type=float, default=SESSION_TIMEOUT,
                       help="s a session without a connection (POST /mcp) may idle")  # fmt: skip
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if not args.session_timeout > 0:
            raise ValueError("--session-timeout must be > 0 seconds")
        app = create_openenv_app(
            args.env,
            parse_kwargs(args.kwargs),
            max_sessions=args.max_sessions,
            reset_options=args.allow_reset_options,
            hosts=allowed_hosts(args.host, args.allow_host),
            session_timeout=args.session_timeout,
        )
        sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
        sock.listen(1024)  # clients may connect as soon as the line below is printed
    except Exception as exc:  # noqa: BLE001 - every start-up problem is one line and exit 2
        msg = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"agentrl.envs.openenv: {type(exc).__name__}: {msg}", file=sys.stderr)
        return 2
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    if args.host not in LOOPBACK:
        print(f"warning: serving beyond loopback ({args.host}) without authentication",
              file=sys.stderr)  # fmt: skip
    print(f"serving {app.state.env_id} in OpenEnv's protocol on http://{shown}:{port} "
          f"({args.max_sessions} sessions)", flush=True)  # fmt: skip
    config = uvicorn.Config(
        app, log_level="warning", ws_max_size=MAX_MESSAGE, timeout_graceful_shutdown=SHUTDOWN_GRACE
    )
    stopped = serve(config, [sock])
    # OpenEnv runs env calls in worker threads that the interpreter would wait for at exit: a
    # stopping server does not wait for an env call in flight
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + stopped if stopped else 0)
