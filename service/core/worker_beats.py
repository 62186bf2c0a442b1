"""Workers say they are alive with a small file in the shared data directory (every worker already shares it:
models and artifacts live there), refreshed while they run; /health counts the fresh ones."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from core.files.atomic import write_atomic

BEAT_INTERVAL_S = 10.0
FRESH_FOR_S = 3 * BEAT_INTERVAL_S  # a worker missing three beats in a row is not counted


def beats_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "workers"


def beat_path(data_dir: Path, name: str) -> Path:
    return beats_dir(data_dir) / f"{name.replace('/', '_')}.json"


def write_beat(data_dir: Path, name: str, queues: Sequence[str]) -> Path:
    path = beat_path(data_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"name": name, "pid": os.getpid(), "queues": list(queues),
                                        "seen_at": time.time()}))
    return path


def start_beating(data_dir: Path, name: str, queues: Sequence[str]) -> Callable[[], None]:
    """Writes the beat now and every BEAT_INTERVAL_S in a daemon thread; returns what stops it and removes it."""
    stopped = threading.Event()
    path = write_beat(data_dir, name, queues)

    def run() -> None:
        while not stopped.wait(BEAT_INTERVAL_S):
            write_beat(data_dir, name, queues)

    def stop() -> None:
        stopped.set()
        path.unlink(missing_ok=True)

    threading.Thread(target=run, name="kiln-worker-beat", daemon=True).start()
    return stop


def workers_seen(data_dir: Path, now: float | None = None) -> list[dict[str, Any]]:
    """The workers whose last beat is fresh, by name."""
    now = time.time() if now is None else now
    seen = []
    for path in sorted(beats_dir(data_dir).glob("*.json")):
        try:
            beat = json.loads(path.read_text())
        except (OSError, ValueError):  # removed or being replaced right now
            continue
        if now - float(beat.get("seen_at", 0)) <= FRESH_FOR_S:
            seen.append({"name": beat["name"], "queues": beat.get("queues", []),
                         "last_seen_s": round(now - beat["seen_at"], 1)})
    return seen
