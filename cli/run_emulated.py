"""`kiln run` on an artifact for another CPU: where qemu-user can emulate it, the artifact runs under it (outputs
only: correctness, never timings), with a note on stderr, instead of being refused."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from core.runtime import load
from core.runtime.loader import KilnRuntimeError, Module


def _emulated(path: str, refusal: KilnRuntimeError) -> Module:
    """The artifact at `path` under its target's emulator; `refusal` again when it has none here."""
    from core.backends import resolve
    from core.errors import KilnError
    from core.runtime.emulated import EMULATED
    from core.runtime.loader import _extract
    from core.target import host_target

    folder = Path(path) if Path(path).is_dir() else Path(_extract(path))
    owned = folder != Path(path)
    try:
        metadata = json.loads((folder / "metadata.json").read_text())
        target, backend = resolve(str(metadata.get("target")))
        # Only another ISA is emulated: not missing CPU features of this one, not a GPU.
        emulator = backend.emulator(target) if target.arch != host_target().arch else None
    except (OSError, ValueError, KilnError):
        emulator = None
    if emulator is None:
        if owned:
            shutil.rmtree(folder, ignore_errors=True)
        raise refusal
    module = emulator.load(folder, owned_dir=owned)
    print(f"kiln: note: {refusal}; running it under {emulator.describe()}, {EMULATED}", file=sys.stderr)
    return module


def load_for_run(path: str) -> Module:
    """The artifact as `kiln run` runs it: natively, or emulated when it was built for another CPU."""
    try:
        return load(path)
    except KilnRuntimeError as refusal:
        return _emulated(path, refusal)
