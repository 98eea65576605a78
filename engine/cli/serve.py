"""`python -m engine serve`: the policy, model, device and dtype flags of `run`, plus where to listen.

The instructor token (needed to change the policy) comes from BATCHING_LAB_INSTRUCTOR_TOKEN,
or is made up at start and printed. The waiting line is capped by default (SERVE_MAX_WAITING:
more get 429 with Retry-After); the per-client limits are engine/server/limits.py's, on by
default only where the server listens on a network (a classroom): on a loopback address it has
one user, as `vllm serve` does, and a benchmark's 32 streams from that user all run. The
start-up line says which limits are in force.
"""
from __future__ import annotations

import argparse
import gc
import secrets
import sys

from ..runs.build import build_engine
from .flags import add_knob_flags, add_model_flags, policy_from
from ..core.config import EngineConfig, SchedulerPolicy
from ..model.threads import in_passing_thread
from ..server import limits
from .. import settings

TOKEN_ENV = settings.INSTRUCTOR_TOKEN
KEEP_STEPS = 20_000        # a server runs for days: keep a window of recent steps, not all of them
SERVE_MAX_WAITING = 256    # a server's waiting line is capped unless --max-waiting says otherwise (0: no cap)


def add_serve_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("serve", help="serve the engine over HTTP: OpenAI API, /metrics, /lab")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", default="", help="the model name clients send (default: --model)")
    p.add_argument("--kv-pool-tokens", type=int, default=EngineConfig().kv_pool_tokens)
    p.add_argument("--max-inflight-per-tenant", type=int, default=64,
                   help="requests one tenant (the `user` field) may have in flight; more get 429")
    p.add_argument("--client-limits", choices=("on", "off"), default=None,
                   help="per-client limits (requests in flight, connections, body bytes per client address): "
                        "by default on where --host is a network address, off on loopback (one user)")
    p.add_argument("--max-inflight-per-client", type=int, default=None,
                   help="requests one client address may have in flight, whatever `user` says; more get 429 "
                        f"(default {limits.MAX_INFLIGHT_PER_CLIENT}; giving it turns the per-client limits on)")
    p.add_argument("--max-connections-per-client", type=int, default=None,
                   help="open connections one client address may hold; more are closed at once "
                        f"(default {limits.MAX_CONNECTIONS_PER_CLIENT}; giving it turns the per-client limits on)")
    p.add_argument("--trusted-client", action="append", default=[], metavar="ADDRESS",
                   help="an address no per-client limit holds (the classroom app's, which speaks for every "
                        "student); repeat for more")
    p.add_argument("--docs", action="store_true", help="serve /docs and /openapi.json (off by default)")
    add_knob_flags(p, SchedulerPolicy)
    p.set_defaults(max_waiting=SERVE_MAX_WAITING)
    add_model_flags(p)
    return p


def client_limits_on(args) -> bool:
    """--client-limits if given; else on when a per-client limit is given, or the server listens
    on a network address."""
    if args.client_limits is not None:
        return args.client_limits == "on"
    if args.max_inflight_per_client is not None or args.max_connections_per_client is not None:
        return True
    return not limits.is_loopback(args.host)


def server_limits(args) -> limits.ServerLimits:
    def given(value, default):
        return default if value is None else value
    return limits.ServerLimits(
        per_client=client_limits_on(args),
        max_inflight_per_client=given(args.max_inflight_per_client, limits.MAX_INFLIGHT_PER_CLIENT),
        max_connections_per_client=given(args.max_connections_per_client, limits.MAX_CONNECTIONS_PER_CLIENT),
        trusted_clients=frozenset(args.trusted_client))


def build_app(args, policy: SchedulerPolicy, token: str):
    """The FastAPI app for these flags, its engine built and its model loaded."""
    from ..model.model import load_model
    from ..server.app import create_app
    from ..server.service import EngineService

    # Loading and the KV pool's allocation run torch on a thread that ends at once: the engine
    # thread is then the process's only OpenMP team, and steps at full speed (see engine/model/threads.py).
    model = in_passing_thread(load_model, args.model, args.device, args.dtype)
    config = EngineConfig(model=args.model, device=args.device, dtype=args.dtype, kv_pool_tokens=args.kv_pool_tokens)
    engine = in_passing_thread(build_engine, config, policy, model)
    engine.keep_steps = KEEP_STEPS
    name = args.served_model_name or args.model
    server = server_limits(args)
    service = EngineService(engine, name, args.max_inflight_per_tenant,
                            rebuild=lambda p: build_engine(config, p, model),
                            max_inflight_per_client=server.max_inflight_per_client)
    return create_app(service, name, token, server, docs=args.docs)


def serve_command(args) -> int:
    from ..server.connections import Server, server_config

    policy = policy_from(args)
    token = settings.instructor_token() or secrets.token_urlsafe(16)
    print(f"loading {args.model} ...", file=sys.stderr)
    app = build_app(args, policy, token)
    if not settings.instructor_token():
        print(f"instructor token: {token}  (or set {TOKEN_ENV})", file=sys.stderr)
    # The start-up heap (the model, the tokenizer, the libraries: hundreds of thousands of objects)
    # lives as long as the server. Frozen, the garbage collector stops walking it, so a full
    # collection, which stops the engine and every stream at once, has little left to walk.
    gc.collect()
    gc.freeze()
    print(f"serving on http://{args.host}:{args.port}/v1", file=sys.stderr)
    print(limits.describe(server_limits(args)), file=sys.stderr)
    waiting = f"at most {args.max_waiting:,} waiting" if args.max_waiting else "no cap"
    print(f"waiting line: {waiting} (--max-waiting); per tenant (`user`): {args.max_inflight_per_tenant:,} "
          "in flight (--max-inflight-per-tenant)", file=sys.stderr)
    # A stop (Ctrl-C) first ends every open stream with a finish reason and [DONE], then waits
    # at most 5 s for the connections: an endless client must not hold it up
    config = server_config(app, server_limits(args), host=args.host, port=args.port, log_level="warning",
                           timeout_graceful_shutdown=5)
    Server(config, on_stop=app.state.stop_streams).run()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m engine.cli.serve")
    add_serve_parser(parser.add_subparsers(dest="cmd", required=True))
    sys.exit(serve_command(parser.parse_args(["serve", *sys.argv[1:]])))
