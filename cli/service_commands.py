"""`kiln serve`, `kiln worker` and `kiln token`: run the web service and manage API tokens."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

from core.process.child import die_with_parent


def _use_data_dir(data_dir: str | None):
    """Point every KILN_ setting at `data_dir` (also for child processes), then read the settings."""
    from service.core.settings import get_settings

    if data_dir:
        os.environ["KILN_DATA_DIR"] = str(Path(data_dir).absolute())
    get_settings.cache_clear()
    settings = get_settings()
    os.environ["KILN_DATA_DIR"] = str(settings.data_dir.absolute())
    settings.ensure_dirs()
    return settings


def _database(settings):
    from service.core.db import Database

    database = Database(settings.database)
    database.create_tables()
    return database


def cmd_token(args: argparse.Namespace) -> int:
    from service.api.auth import create_token, revoke_tokens

    settings = _use_data_dir(args.data_dir)
    with _database(settings).session() as db:
        if args.action == "revoke":
            print(f"revoked {revoke_tokens(db, args.name)} token(s) of {args.name!r}")
            return 0
        token = create_token(db, args.name, admin=args.admin)
    print(f"new API token for {args.name!r} (shown once; send it as `Authorization: Bearer <token>`):")
    print(token)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.api.app import create_app
    from service.api.auth import create_token, has_users

    settings = _use_data_dir(args.data_dir)
    with _database(settings).session() as db:
        first_token = None if has_users(db) else create_token(db, "admin", admin=True)
    worker = None
    if not args.no_worker:
        from service.core.queues import default_queues

        # One machine serves every job, GPU ones included (built and, without a GPU, not run).
        command = [sys.executable, "-m", "cli.main", "worker", "--concurrency", str(args.concurrency),
                   "--queues", ",".join(default_queues(with_gpu=True))]
        # The embedded worker must not outlive `kiln serve`, even if serve is killed with SIGKILL.
        worker = subprocess.Popen(command, env=os.environ.copy(), preexec_fn=partial(die_with_parent, signal.SIGTERM))
    url = f"http://{args.host}:{args.port}"
    print(f"Kiln {url}  (API {url}/api/v1, docs {url}/docs, data in {settings.data_dir})", flush=True)
    if first_token:
        print("first start: an admin API token was created (shown once):", flush=True)
        print(first_token, flush=True)
    try:
        uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level)
    finally:
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    settings = _use_data_dir(args.data_dir)
    from workers.celery_app import app
    from service.core.queues import default_queues

    queues = args.queues.split(",") if args.queues else default_queues()
    print(f"Kiln worker: queues {', '.join(queues)}; broker {settings.broker.split('://')[0]}", flush=True)
    app.worker_main(["worker", "--queues", ",".join(queues), "--concurrency", str(args.concurrency),
                     "--prefetch-multiplier", "1", "--loglevel", args.log_level.upper(), "--without-gossip",
                     "--without-mingle", "--hostname", f"kiln-{os.getpid()}@%h"])
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("serve", help="run the web service, UI and an embedded worker on this machine")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--data-dir", default=None, help="where state is kept (default ./kiln-data or $KILN_DATA_DIR)")
    p.add_argument("--no-worker", action="store_true", help="do not start the embedded worker")
    p.add_argument("--concurrency", type=int, default=1, help="compiles the embedded worker runs at once")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("worker", help="run a Celery worker (compile and measurement queues)")
    p.add_argument("--queues", help="comma-separated queues (default: compile + measure queues of this machine, "
                                    "and gpu where an NVIDIA GPU is)")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("token", help="create or revoke API tokens")
    p.add_argument("action", choices=["create", "revoke"])
    p.add_argument("name", help="the user the token belongs to (created on first use)")
    p.add_argument("--admin", action="store_true")
    p.add_argument("--data-dir", default=None)
    p.set_defaults(func=cmd_token)
