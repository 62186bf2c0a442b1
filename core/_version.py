"""The compiler's version, in its own module so that anything may import it without importing the compiler."""
import functools
import hashlib
from pathlib import Path

__version__ = "0.1.0"


@functools.cache
def source_digest(*parts: str) -> str:
    """sha256 of the compiler's own source (every .py, .c and .h under core/, by relative path): a commit with
    "+dirty" does not say which uncommitted change a build saw; this does. `parts`: only these files and folders
    of core/ (e.g. "codegen", "target.py")."""
    package = Path(__file__).resolve().parent
    roots = [package / part for part in parts] or [package]
    files = {p for root in roots for p in ([root] if root.is_file() else root.rglob("*"))
             if p.suffix in (".py", ".c", ".h") and p.is_file()}
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{path.relative_to(package).as_posix()}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
