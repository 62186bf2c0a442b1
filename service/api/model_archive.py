"""A model uploaded with its external data: a .zip or .tar(.gz) of its folder, unpacked into the upload's folder.

The archive holds one .onnx file; its folder's files (the data files its tensors name) are unpacked beside it and
the model becomes the upload's model.onnx. Refused with a 422 before anything is written: absolute paths, `..`,
links and special files (zip-slip), more than MAX_MEMBERS entries, and more unpacked bytes than the upload limit.
The model's own checks (core/frontend/model_loading.py) then keep its external-data locations inside the folder.
"""
from __future__ import annotations

import shutil
import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Iterator

from fastapi import HTTPException, status

from service.core.storage import MODEL_FILE

MAX_MEMBERS = 1000


@dataclass(frozen=True)
class _Member:
    path: PurePosixPath
    size: int
    is_dir: bool
    open: Callable[[], BinaryIO]


def _refuse(message: str) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, {"code": "bad_archive", "message": message})


def archive_kind(path: Path) -> str:
    """"zip", "tar" (plain, gzip, bz2 or xz) or "" for anything else (an .onnx file)."""
    with open(path, "rb") as handle:
        head = handle.read(512)
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    if head[:2] == b"\x1f\x8b" or head[:3] == b"BZh" or head[:6] == b"\xfd7zXZ\x00" or head[257:262] == b"ustar":
        return "tar"
    return ""


def _clean(name: str) -> PurePosixPath:
    """The member's relative path, or a 422 for an absolute one, one with `..` or a drive."""
    raw = name.replace("\\", "/")
    path = PurePosixPath(raw)
    if not raw or raw.startswith("/") or "\x00" in raw or ".." in path.parts or any(":" in p for p in path.parts[:1]):
        raise _refuse(f"archive member {name!r} is not a plain relative path inside the archive")
    return path


def _zip_members(archive: zipfile.ZipFile) -> Iterator[_Member]:
    for info in archive.infolist():
        kind = stat.S_IFMT(info.external_attr >> 16)  # 0: no Unix type recorded (Windows zips, writestr): a file
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise _refuse(f"archive member {info.filename!r} is a link or a special file; only files are taken")
        yield _Member(_clean(info.filename), info.file_size, info.is_dir(), lambda i=info: archive.open(i))


def _tar_members(archive: tarfile.TarFile) -> Iterator[_Member]:
    for info in archive:
        if not (info.isfile() or info.isdir()):
            raise _refuse(f"archive member {info.name!r} is a link or a special file; only files are taken")
        yield _Member(_clean(info.name), info.size, info.isdir(), lambda i=info: archive.extractfile(i))


def unpack_model_archive(archive_path: Path, folder: Path, limit: int) -> None:
    """Replace `archive_path` (in the upload's private `folder`) by the model and its data files from it."""
    kind = archive_kind(archive_path)
    try:
        opened = zipfile.ZipFile(archive_path) if kind == "zip" else tarfile.open(archive_path, "r:*")
    except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError) as err:
        raise _refuse(f"the upload looks like a {kind} archive but cannot be read ({err})") from None
    try:
        with opened as archive:
            members = list(_zip_members(archive) if kind == "zip" else _tar_members(archive))
            _unpack(members, archive_path, folder, limit)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as err:
        raise _refuse(f"the archive cannot be read ({type(err).__name__}: {err})") from None


def _unpack(members: list[_Member], archive_path: Path, folder: Path, limit: int) -> None:
    if len(members) > MAX_MEMBERS:
        raise _refuse(f"the archive holds {len(members)} entries, more than the {MAX_MEMBERS} allowed")
    files = [m for m in members if not m.is_dir]
    models = [m for m in files if m.path.suffix.lower() == ".onnx"]
    if len(models) != 1:
        found = ", ".join(str(m.path) for m in models[:5]) or "none"
        raise _refuse(f"the archive must hold exactly one .onnx model (found {found})")
    home = models[0].path.parent  # the model's folder: where its external-data locations resolve
    taken = [(m, m.path.relative_to(home)) for m in files if m.path.is_relative_to(home)]
    if any(rel == PurePosixPath(MODEL_FILE) and m is not models[0] for m, rel in taken):
        raise _refuse(f"a data file in the archive is named {MODEL_FILE!r}, the name the model is kept under")
    total = sum(m.size for m, _ in taken)
    if total > limit:
        raise _refuse(f"the archive unpacks to {total:,} bytes, over the upload limit of {limit:,} bytes")
    archive_path.replace(folder / ".archive")  # the upload's model.onnx name is the model's from here on
    written = 0
    for member, rel in taken:
        target = folder / (MODEL_FILE if member is models[0] else Path(*rel.parts))
        target.parent.mkdir(parents=True, exist_ok=True)
        with member.open() as source, open(target, "xb") as out:
            while chunk := source.read(1 << 20):
                written += len(chunk)
                if written > limit:  # the sizes the archive declared were lies
                    raise _refuse(f"the archive unpacks to more than the upload limit of {limit:,} bytes")
                out.write(chunk)
    (folder / ".archive").unlink()


__all__ = ["archive_kind", "unpack_model_archive", "MAX_MEMBERS"]
