"""Artifact packaging: one `.tar.gz` with fixed member names, written atomically (never half-written)."""
from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ArtifactError
from ..files.atomic import atomic_path
from ..target import Target
from .c_sample import render_main_c, render_makefile
from .naming import artifact_names

if TYPE_CHECKING:
    from ..backends.base import Backend

LIBRARY = "libkiln_model.so"  # an unnamed artifact's; a named one's: libNAME.so and NAME.h (naming.py)
HEADER = "kiln_model.h"
WEIGHTS = "weights.bin"
METADATA = "metadata.json"
LOADER = "kiln_loader.py"
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
README = "README.txt"
SAMPLE_MAIN = "main.c"
SAMPLE_MAKEFILE = "Makefile"
MEMBERS = (LIBRARY, HEADER, WEIGHTS, METADATA, LOADER, REPORT_JSON, REPORT_HTML, README, SAMPLE_MAIN, SAMPLE_MAKEFILE)

_LOADER_SOURCE = Path(__file__).with_name("loader.py")

_README = """\
Kiln model artifact: a native library with a C ABI, its header, weights, and a numpy-only loader.
Python (needs only numpy):  import kiln_loader;  m = kiln_loader.load("{archive}")   # or this folder
  out = m.run({{{example_feed}}});  print(m.inputs, m.outputs, m.benchmark())
C:  #include "{header}"   {p}_model* m = {p}_load("weights.bin");
  const void* in[{m}_NUM_INPUTS] = {{...}};  void* out[{m}_NUM_OUTPUTS] = {{...}};
  if ({p}_run(m, in, out) != 0) puts({p}_last_error());  {p}_free(m);
Build: make   (the sample main.c; or cc main.c -L. -l{link} -Wl,-rpath,'$ORIGIN' -o main; needs only libc and libm)
Tensors are dense row-major; shapes and dtypes: metadata.json and the {m}_INPUT_*/{m}_OUTPUT_* defines.
Threads: KILN_NUM_THREADS (or OMP_NUM_THREADS), or kiln_set_num_threads(n) / m.set_num_threads(n).
Reports: report.json (machine-readable) and report.html (open in a browser).
"""


def target_metadata(target: Target, backend: "Backend") -> dict:
    """The metadata keys the loader uses to refuse an artifact built for another machine (`backend`: the target's)."""
    meta = {"target": target.name, "triple": target.triple, "cpu": target.cpu, "cpu_features": target.features}
    return {**meta, **backend.runtime_metadata(target)}


def _readme(metadata: dict, archive_name: str) -> str:
    feed = ", ".join(f'"{t["name"]}": x{i}' for i, t in enumerate(metadata.get("inputs", [])))
    names = artifact_names(metadata.get("symbol_prefix"))
    text = _README.format(archive=archive_name, example_feed=feed, header=names.header, p=names.prefix,
                          m=names.macro, link=names.link_name)
    if metadata.get("needs_cuda_driver"):
        text += (f"GPU: runs on an NVIDIA GPU of architecture {metadata.get('cuda_arch')} or newer (KILN_CUDA_DEVICE "
                 f"picks one); needs the NVIDIA driver (libcuda.so.1) at run time, no CUDA toolkit. The library "
                 f"runs on the host ({metadata.get('host_triple', 'the CPU')}) and launches the kernels.\n")
    return text


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0  # reproducible archives: identical inputs give identical bytes
    info.uname = info.gname = "kiln"
    tar.addfile(info, io.BytesIO(data))


def write_artifact(out_path: "str | Path", *, library: "str | Path", weights: "bytes | str | Path",
                   metadata: dict, header: str, report: dict | None = None, report_html: str | None = None,
                   compresslevel: int = 6) -> Path:
    """Write the artifact `.tar.gz` at `out_path` (a temp file in the same folder, then os.replace). `compresslevel`
    0 stores the members uncompressed (still a valid .tar.gz): float weights deflate by only ~7% and take ~2 s per
    80 MB, which a quick compile does not wait for."""
    out_path = Path(out_path)
    library = Path(library)
    if not library.is_file():
        raise ArtifactError(f"cannot package: the library {library} does not exist")
    weights_bytes = weights if isinstance(weights, (bytes, bytearray, memoryview)) else Path(weights).read_bytes()
    for key in ("inputs", "outputs"):
        if not isinstance(metadata.get(key), list):
            raise ArtifactError(f"cannot package: metadata needs an {key!r} list of {{name, shape, dtype}}")
    names = artifact_names(metadata.get("symbol_prefix"))
    meta = dict(metadata, library=names.library, header=names.header, weights=WEIGHTS)
    members = [
        (names.library, library.read_bytes(), 0o755),
        (names.header, header.encode(), 0o644),
        (WEIGHTS, bytes(weights_bytes), 0o644),
        (METADATA, json.dumps(meta, indent=2, sort_keys=True).encode(), 0o644),
        (LOADER, _LOADER_SOURCE.read_bytes(), 0o644),
        (REPORT_JSON, json.dumps(report or {}, indent=2, sort_keys=True).encode(), 0o644),
        (REPORT_HTML, (report_html or "<!doctype html><title>Kiln report</title><p>No report.</p>").encode(), 0o644),
        (README, _readme(meta, out_path.name).encode(), 0o644),
        (SAMPLE_MAIN, render_main_c(meta).encode(), 0o644),
        (SAMPLE_MAKEFILE, render_makefile(meta).encode(), 0o644),
    ]
    # filename="" and mtime=0: gzip would otherwise record the temporary file's (random) name and the time in its
    # header, and two builds of the same inputs would differ there.
    with atomic_path(out_path, durable=True, shared=True) as partial, open(partial, "wb") as raw, \
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=compresslevel, mtime=0) as compressed, \
            tarfile.open(fileobj=compressed, mode="w") as tar:
        for name, data, mode in members:
            _add(tar, name, data, mode)
    return out_path


def read_artifact_member(path: "str | Path", name: str) -> bytes:
    """The bytes of one member (e.g. "metadata.json") of an artifact, without extracting the rest."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            try:
                member = tar.getmember(name)
            except KeyError:
                raise ArtifactError(f"artifact {path} has no member {name!r}") from None
            f = tar.extractfile(member) if member.isfile() else None
            if f is None:
                raise ArtifactError(f"artifact {path}: member {name!r} is not a regular file")
            return f.read()
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ArtifactError(f"cannot read artifact {path}: {e}") from None
