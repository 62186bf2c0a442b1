"""`kiln serve`, `kiln worker` and `kiln token`: run the web service and manage API tokens."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
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
    database.upgrade_schema()
    return database


def cmd_token(args: argparse.Namespace) -> int:
    from service.core.security import create_token, list_tokens, revoke_token, revoke_tokens

    settings = _use_data_dir(args.data_dir)
    with _database(settings).session() as db:
        if args.action == "list":
            for row in list_tokens(db):
                state = f"revoked {row['revoked_at']:%Y-%m-%d %H:%M}" if row["revoked_at"] else "active"
                print(f"{row['id']:>5}  {row['user']:<20} {row['prefix']}...  "
                      f"{'admin ' if row['admin'] else ''}created {row['created_at']:%Y-%m-%d %H:%M}  {state}")
            return 0
        if args.action == "revoke":
            if (args.id is None) == (args.name is None):
                raise ValueError("kiln token revoke: give a user NAME (all of their tokens) "
                                 "or --id N (that one token; see `kiln token list`), not both")
            if args.id is not None:
                owner = revoke_token(db, args.id)
                if owner is None:
                    raise ValueError(f"no active token with id {args.id} (see `kiln token list`)")
                print(f"revoked token {args.id} of {owner!r}; their other tokens still work")
                return 0
            print(f"revoked {revoke_tokens(db, args.name)} token(s) of {args.name!r}: all of that user's tokens")
            return 0
        if args.name is None:
            raise ValueError("kiln token create: give the user NAME the token is for")
        token = create_token(db, args.name, admin=args.admin)
    print(f"new API token for {args.name!r} (shown once; send it as `Authorization: Bearer <token>`):")
    print(token)
    return 0


def first_token_box(token: str, url: str, data_dir: Path) -> str:
    """The admin token in a box with what to do with it; the token on a line of its own, to copy whole."""
    lines = ["First start: an admin API token was created. It is shown only this once:", "", None, "",
             f"Paste it into the web page ({url}/), or send it as `Authorization: Bearer <token>`.",
             f"Another token: kiln token create NAME [--admin] --data-dir {data_dir}",
             "Revoke one: kiln token revoke --id N (or all of a user's: kiln token revoke NAME)"]
    width = max(len(line) for line in lines if line is not None)
    rule = "+" + "-" * (width + 2) + "+"
    body = [token if line is None else f"| {line.ljust(width)} |" for line in lines]
    return "\n".join([rule, *body, rule])


def _print_first_token(token: str, url: str, settings, worker) -> None:
    """Last, after the worker's start-up banner (its first beat), so that it is not scrolled away."""
    from service.core.worker_beats import workers_seen

    deadline = time.monotonic() + 60
    while worker is not None and worker.poll() is None and not workers_seen(settings.data_dir) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)  # the worker's "ready" log line comes right after its beat
    print("\n" + first_token_box(token, url, settings.data_dir) + "\n", flush=True)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.api.app import create_app
    from service.core.security import create_token, has_users

    settings = _use_data_dir(args.data_dir)
    with _database(settings).session() as db:
        first_token = None if has_users(db) else create_token(db, "admin", admin=True)
    worker = None
    if not args.no_worker:
        from service.core.queues import default_queues

        # One machine serves every job, GPU ones included (built and, without a GPU, not run).
        command = [sys.executable, "-m", "cli.main", "worker", "--concurrency", str(args.concurrency),
                   "--queues", ",".join(default_queues(with_gpu=True))]
        # The embedded worker must not outlive `kiln serve`, even if serve is killed with SIGKILL. Its own session:
        # a terminal's Ctrl+C reaches serve alone, which stops the worker in order (_stop_embedded_worker).
        worker = subprocess.Popen(command, env=os.environ.copy(), preexec_fn=partial(die_with_parent, signal.SIGTERM),
                                  start_new_session=True)
    url = f"http://{args.host}:{args.port}"
    print(f"Kiln {url}  (API {url}/api/v1, docs {url}/docs, data in {settings.data_dir})", flush=True)
    if first_token:
        threading.Thread(target=_print_first_token, args=(first_token, url, settings, worker), daemon=True).start()
    try:
        uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level)
    finally:
        if worker is not None:
            _stop_embedded_worker(worker, settings)
    return 0


def _stop_embedded_worker(worker: subprocess.Popen, settings) -> None:
    """SIGTERM (Celery's warm shutdown: the running jobs may finish) for `settings.shutdown_grace_s`, then the
    worker's whole process group is killed and the jobs it still ran are queued again at once, as a SIGTERM'd
    pool process's are (Ctrl+C left them `running` until the next start's sweeper)."""
    from service.api.enqueue import celery_enqueue
    from service.api.sweeper import requeue_jobs_of_worker

    worker.terminate()
    try:
        worker.wait(timeout=settings.shutdown_grace_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(worker.pid, signal.SIGKILL)  # the pool processes and their compiles too
    except ProcessLookupError:
        pass
    worker.wait()
    database = _database(settings)
    try:
        requeue_jobs_of_worker(database, f"kiln-{worker.pid}@", celery_enqueue(settings, database))
    finally:
        database.dispose()


def cmd_worker(args: argparse.Namespace) -> int:
    settings = _use_data_dir(args.data_dir)
    from workers.celery_app import app
    from service.core.queues import default_queues

    queues = args.queues.split(",") if args.queues else default_queues()
    if args.measure:
        queues = measuring_queues(args.measure) + (args.queues.split(",") if args.queues else [])
    print(f"Kiln worker: queues {', '.join(queues)}; broker {settings.broker.split('://')[0]}", flush=True)
    app.worker_main(["worker", "--queues", ",".join(queues), "--concurrency", str(args.concurrency),
                     "--prefetch-multiplier", "1", "--loglevel", args.log_level.upper(), "--without-gossip",
                     "--without-mingle", "--hostname", f"kiln-{os.getpid()}@%h"])
    return 0


def measuring_queues(kinds: list[str]) -> list[str]:
    """`kiln worker --measure KIND`: the measure.<kind> queue of each kind, once this machine is known to measure it
    (natively, or under qemu-user: then its timings are not meaningful, and the reports say so)."""
    from core.backends import resolve
    from service.core.queues import measure_queue

    queues = []
    for kind in dict.fromkeys(k.strip() for spec in kinds for k in spec.split(",") if k.strip()):
        target, backend = resolve(kind)  # an unknown kind, or one this machine cannot run: one clear line
        device = backend.measuring_device(target)
        print(f"Kiln worker: measures {device.describe()}", flush=True)
        queues.append(measure_queue(target, backend))
    return queues


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
    p.add_argument("--measure", action="append", metavar="KIND",
                   help="serve tuning measurements for device kind KIND (a target name: rpi5, graviton3, ...) "
                        "only, on the queue measure.KIND; repeatable. Compile workers send candidates there")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("token", help="create, list or revoke API tokens")
    p.add_argument("action", choices=["create", "list", "revoke"],
                   help="create NAME: a new token; list: every token's id and user; "
                        "revoke NAME: all of a user's tokens; revoke --id N: that one token")
    p.add_argument("name", nargs="?", help="the user the token belongs to (created on first use)")
    p.add_argument("--id", type=int, help="with revoke: the one token to revoke (ids from `kiln token list`)")
    p.add_argument("--admin", action="store_true", help="with create: the user is an administrator")
    p.add_argument("--data-dir", default=None)
    p.set_defaults(func=cmd_token)
