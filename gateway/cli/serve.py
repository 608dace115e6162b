"""`switchyard serve`: load the model once, then serve the OpenAI-compatible API with uvicorn."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from gateway.config import GatewayConfig

EXIT_MODEL_ERROR = 2     # model dir missing or malformed


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="serve the OpenAI-compatible API (default: the embedded demo model)")
    p.add_argument("--model", metavar="DIR", default=None, help="model directory (default: the embedded default model)")
    p.add_argument("--host", default=GatewayConfig().host, help="bind address (default: %(default)s)")
    p.add_argument("--port", type=int, default=GatewayConfig().port, help="port (default: %(default)s)")
    p.add_argument("--mtp", action=argparse.BooleanOptionalAction, default=None,
                   help="enable the MTP engine (default: when the checkpoint has MTP weights)")
    p.add_argument("--mtp-weights", metavar="PATH", default=None,
                   help="checkpoint dir or .safetensors holding the mtp.* tensors (for conversions that strip them)")
    p.add_argument("--draft", metavar="DIR", default=None, help="DFlash drafter directory for the ddtree engine")
    p.add_argument("--dtype", choices=["auto", "stored", "float32", "bfloat16", "float16"], default="auto",
                   help="weights dtype: auto = float32 on the CPU for half-precision checkpoints (BLAS path), "
                        "else as stored (default: %(default)s)")
    p.add_argument("--tree-budget", type=int, default=4, metavar="N", help="DDTree budget (default: %(default)s; a --policy file's engines.ddtree.budget overrides it, live)")
    p.add_argument("--policy", metavar="FILE", default=None, help="router policy YAML (reloads on change)")
    p.add_argument("--model-alias", action="append", default=[], metavar="NAME",
                   help="another name clients may send as `model` (repeatable; e.g. the model names a coding "
                        "agent asks for)")
    p.add_argument("--max-queue", type=int, default=GatewayConfig().max_queue, metavar="N",
                   help="requests allowed to wait behind the running one; more get 429 (default: %(default)s)")
    p.add_argument("--max-batch", type=int, default=8, metavar="N",
                   help="requests run at once, interleaved step by step; those decoding raw share one batched "
                        "forward (continuous batching); 1 = one at a time (default: %(default)s)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    _register_limits_and_auth(p)
    p.set_defaults(func=serve)


def _register_limits_and_auth(p: argparse.ArgumentParser) -> None:
    """Limits and API keys (docs/limits.md, docs/operations.md)."""
    d = GatewayConfig()
    g = p.add_argument_group("limits")
    g.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, metavar="N",
                   help="largest request body; more gets 413 (default: %(default)s)")
    g.add_argument("--max-tokens-limit", type=int, default=d.max_tokens_limit, metavar="N",
                   help="largest max_tokens a request may ask for; more gets 400 (default: the model's context "
                        "length)")
    g.add_argument("--default-max-tokens", type=int, default=d.default_max_tokens, metavar="N",
                   help="max_tokens when a request does not say, shortened to the room the prompt leaves in "
                        "the context (default: %(default)s)")
    g.add_argument("--prefix-cache-bytes", type=int, default=None, metavar="N",
                   help="bytes the prefix cache may hold (prompt snapshots reused across requests); 0 turns it "
                        "off (default: a quarter of the memory free after the model loads)")
    g.add_argument("--request-memory-bytes", type=int, default=None, metavar="N",
                   help="bytes the running requests' caches may hold together, each counting its context so far "
                        "and 256 tokens of growth; a request that does not fit waits for running ones to finish, "
                        "and the newest gives its caches back when they outgrow it (one always runs); 0 turns the "
                        "budget off (default: half the memory free after the model loads)")
    g.add_argument("--share-prefix-cache", action="store_true",
                   help="with API keys, let requests of different keys reuse each other's cached prompts")
    g.add_argument("--max-choices", type=int, default=d.max_choices, metavar="N",
                   help="largest `n` a request may ask for (default: %(default)s)")
    g.add_argument("--max-prompts", type=int, default=d.max_prompts, metavar="N",
                   help="prompts one /v1/completions request may batch (default: %(default)s)")
    g.add_argument("--max-embedding-inputs", type=int, default=d.max_embedding_inputs, metavar="N",
                   help="texts in one embeddings request (default: %(default)s, OpenAI's limit)")
    g.add_argument("--allowed-origins", default="", metavar="LIST",
                   help="comma-separated origins browsers may call the API from (CORS), e.g. "
                        "http://localhost:3000; '*' allows any (default: none)")
    g.add_argument("--max-stop-sequences", type=int, default=d.max_stop_sequences, metavar="N",
                   help="stop sequences per request (default: %(default)s)")
    g.add_argument("--max-messages", type=int, default=d.max_messages, metavar="N",
                   help="chat messages per request (default: %(default)s)")
    g.add_argument("--request-timeout", type=float, default=d.request_timeout_seconds, metavar="S",
                   help="seconds a request may take from admission, 0 = unlimited; past it the generation "
                        "stops with a 504 (default: %(default)s)")
    g.add_argument("--stream-keepalive", type=float, default=d.stream_keepalive_seconds, metavar="S",
                   help="seconds a stream may wait for its first token before it starts with SSE keep-alive "
                        "comments every S seconds, 0 = never (default: %(default)s)")
    a = p.add_argument_group("authentication")
    a.add_argument("--api-key-file", metavar="FILE", default=None,
                   help="API keys, one per line (also read from $SWITCHYARD_API_KEYS); required unless "
                        "--host is a loopback address")
    a.add_argument("--open-metrics", action="store_true",
                   help="serve /metrics without an API key (e.g. for a local Prometheus)")
    a.add_argument("--open-admin", action="store_true",
                   help="serve /admin/reload and /v1/router/stats to loopback clients without an API key")


def _config_from_args(args: argparse.Namespace) -> GatewayConfig:
    """GatewayConfig from the flags; raises ValueError (bad value) or AuthConfigError (keys, bind)."""
    from gateway.http.auth import check_bind, load_keys

    keys = load_keys(args.api_key_file)
    check_bind(args.host, keys)
    return GatewayConfig(
        host=args.host, port=args.port, max_queue=args.max_queue, max_running=args.max_batch,
        max_body_bytes=args.max_body_bytes,
        max_tokens_limit=args.max_tokens_limit, default_max_tokens=args.default_max_tokens,
        max_stop_sequences=args.max_stop_sequences, max_messages=args.max_messages, max_choices=args.max_choices,
        max_prompts=args.max_prompts, max_embedding_inputs=args.max_embedding_inputs,
        allowed_origins=tuple(o.strip() for o in args.allowed_origins.split(",") if o.strip()),
        request_timeout_seconds=args.request_timeout or None, stream_keepalive_seconds=args.stream_keepalive or None,
        api_keys=keys,
        share_prefix_cache=args.share_prefix_cache,
        protect_metrics=not args.open_metrics, protect_admin=not args.open_admin,
    )


def free_after_load(model_bytes: int) -> int:
    """The memory free after the model loaded, where the device reports no working-set limit (Metal's is
    used there: Runtime.device_free_bytes): Linux's available pages, elsewhere the physical memory less the
    weights. By default a quarter goes to the prefix cache and half to running requests' caches
    (--request-memory-bytes), so neither pushes the machine into swap."""
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * page
    except (ValueError, OSError):   # macOS has no SC_AVPHYS_PAGES
        free = os.sysconf("SC_PHYS_PAGES") * page - model_bytes
    return max(0, free)


def _fail(message: str) -> int:
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {message}", highlight=False)
    return EXIT_MODEL_ERROR


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    from rich.console import Console

    from contracts.errors import ModelLoadError

    if args.model is not None and not Path(args.model).is_dir():
        return _fail(f"model directory not found: {args.model}")
    from gateway.http.auth import AuthConfigError

    try:
        config = _config_from_args(args)
    except AuthConfigError as exc:
        return _fail(str(exc))
    except ValueError as exc:
        return _fail(f"invalid option: {exc}")

    from .blas import blas_in_use, reexec_with_openblas

    reexec_with_openblas("serve")  # Linux: an installed OpenBLAS instead of the wheel's reference BLAS
    console = Console(stderr=True)
    with console.status(f"Loading model {args.model or '(embedded default)'} ...", spinner="dots"):
        from engines.runtime import load_runtime  # imports MLX: only here, never at gateway import time

        try:
            runtime = load_runtime(args.model, mtp=args.mtp, mtp_weights=args.mtp_weights, draft_dir=args.draft,
                                   tree_budget=args.tree_budget,
                                   dtype=None if args.dtype == "stored" else args.dtype)
        except ModelLoadError as exc:
            return _fail(str(exc))
    console.print(f"Loaded [bold]{runtime.model_id}[/]; engines: {', '.join(runtime.engine_names)}", highlight=False)
    wired = runtime.wire_memory()
    free = runtime.device_free_bytes()   # Metal: the recommended working set less the weights
    if free is None:
        free = free_after_load(runtime.memory_bytes().get("parameters", 0))
    cache_bytes = args.prefix_cache_bytes if args.prefix_cache_bytes is not None else free // 4
    runtime.set_prefix_cache(max(0, cache_bytes))
    runtime.set_batching(config.max_running)
    budget = args.request_memory_bytes if args.request_memory_bytes is not None else free // 2
    config = config.model_copy(update={"request_memory_bytes": budget if budget > 0 else None})
    logging.getLogger("switchyard.runtime").info(
        "prefix cache: %s; running requests' caches: %s",
        f"up to {cache_bytes / 2**20:.0f} MiB" if cache_bytes > 0 else "off",
        f"up to {budget / 2**20:.0f} MiB (a {runtime.context_length}-token context holds "
        f"{runtime.request_bytes(runtime.context_length) / 2**20:.0f} MiB)" if budget > 0 else "no budget")
    if wired is not None:
        logging.getLogger("switchyard.runtime").info("wired memory limit: %.0f MiB (Metal's recommended working set)",
                                                     wired / 2**20)
    _log_inspection(args)
    if config.api_keys:  # never the keys themselves
        console.print(f"API keys: {len(config.api_keys)}; /metrics {'needs a key' if config.protect_metrics else 'open'}; "
                      f"admin {'needs a key' if config.protect_admin else 'loopback or key'}", highlight=False)
    logging.getLogger("switchyard.blas").info("BLAS in use: %s", blas_in_use())

    router = _build_router(args, runtime.engine_names)
    if router is None:
        return EXIT_MODEL_ERROR
    if args.policy:  # the policy's engine options win over --tree-budget, and follow live reloads
        bind_engine_options(router.store, runtime)
    # `model` may also name the directory as given on the command line (path, resolved path, dir name)
    given = Path(args.model) if args.model else None
    names = {args.model, str(given.resolve()), given.name} if given else set()
    aliases = tuple(sorted(names | set(args.model_alias)))
    config = config.model_copy(update={"model_aliases": aliases})

    from gateway.http.app import create_app
    from gateway.http.server import run_server

    app = create_app(runtime, router=router, config=config)
    try:
        router.start()
        code = run_server(app, config, log_level=args.log_level)
    finally:
        router.close()
    runtime.end_thread()  # the main thread loaded the model: its MLX streams must go too
    leave_process(code)


def leave_process(code: int) -> None:
    """End `switchyard serve` once the drain is over and the router state is saved.

    Without interpreter finalization: MLX 0.32 keeps compile caches (which own Python objects) and
    streams per thread, and their C++ destructors can run after the interpreter is gone
    (ml-explore/mlx#4347, #4327): a clean stop then died with "terminate called without an active
    exception", exit 134, which launchd and systemd record as a crash. Every thread that did MLX
    work has already cleared its streams (Runtime.end_thread); nothing is left for atexit to do.
    """
    logging.shutdown()   # flush and close every log handler
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _log_inspection(args: argparse.Namespace) -> None:
    """What `switchyard inspect` reports for this checkpoint, in the serve log."""
    from engines.checkpoint import default_model_dir
    from engines.checkpoint_info import inspect_checkpoint

    log = logging.getLogger("switchyard.inspect")
    try:
        info = inspect_checkpoint(args.model or default_model_dir(), args.mtp_weights, args.draft)
    except Exception as exc:  # noqa: BLE001 - a report, never a reason to stop serving
        log.warning("could not inspect the checkpoint: %s", exc)
        return
    for line in info.lines():
        log.info(line)


def bind_engine_options(store, runtime) -> None:
    """Apply the policy's engine options (DDTree budget, rows per batched step) to the loaded runtime now and after every
    successful reload. The runtime reads the budget once per draft cycle, so a change takes effect
    at the next cycle of any request."""

    def apply(snapshot) -> None:
        runtime.set_tree_budget(snapshot.policy.engines.ddtree.budget)
        runtime.set_batch_limit(snapshot.policy.batching.max_rows)

    apply(store.current())
    store.subscribe(apply)


def _build_router(args: argparse.Namespace, engine_names: tuple[str, ...]):
    from gateway.routing.policy import PolicyError
    from gateway.routing.router import AdaptiveRouter

    try:
        return AdaptiveRouter.from_policy_file(args.policy, engine_names)
    except (PolicyError, OSError) as exc:
        _fail(f"policy {args.policy}: {exc}")
        return None
