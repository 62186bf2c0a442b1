"""Streams a multipart model upload to disk: size limit enforced while reading, sha256 computed on the way."""
from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fastapi import HTTPException, Request, status
from python_multipart.multipart import MultipartParser, parse_options_header

from service.core.storage import MODEL_FILE

FIELD = "file"
UPLOAD_PREFIX = "upload-"  # an upload's private folder under the data dir's tmp/
_MULTIPART_SLACK = 64 * 1024  # boundaries and part headers around the file itself


@dataclass
class Upload:
    folder: Path
    filename: str
    sha256: str
    size: int

    @property
    def path(self) -> Path:
        return self.folder / MODEL_FILE

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _too_large(limit: int) -> HTTPException:
    return HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                         f"the upload is larger than the limit of {limit:,} bytes")


def _safe_filename(raw: str) -> str:
    name = re.split(r"[\\/]", raw)[-1]
    name = re.sub(r"[^\w.\- ]", "_", name).strip()[:200]
    return name or "model.onnx"


class _FilePart:
    """Parser callbacks that keep the part named `file` and drop every other field."""

    def __init__(self, out, limit: int):
        self.out, self.limit = out, limit
        self.digest = hashlib.sha256()
        self.size = 0
        self.found = False
        self.filename = ""
        self._in_file = False
        self._field, self._value = b"", b""
        self._headers: dict[bytes, bytes] = {}

    def callbacks(self) -> dict:
        return {"on_part_begin": self._part_begin, "on_header_field": self._header_field,
                "on_header_value": self._header_value, "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished, "on_part_data": self._part_data}

    def _part_begin(self):
        self._headers, self._in_file = {}, False

    def _header_field(self, data, start, end):
        self._field += data[start:end]

    def _header_value(self, data, start, end):
        self._value += data[start:end]

    def _header_end(self):
        self._headers[self._field.lower()] = self._value
        self._field, self._value = b"", b""

    def _headers_finished(self):
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        if options.get(b"name") == FIELD.encode() and not self.found:
            self._in_file = self.found = True
            self.filename = _safe_filename(options.get(b"filename", b"").decode("utf-8", "replace"))

    def _part_data(self, data, start, end):
        if not self._in_file:
            return
        chunk = data[start:end]
        self.size += len(chunk)
        if self.size > self.limit:
            raise _too_large(self.limit)
        self.digest.update(chunk)
        self.out.write(chunk)


async def receive_upload(request: Request, tmp_dir: Path, limit: int) -> Upload:
    """The uploaded model in a fresh private folder under `tmp_dir`; 4xx for anything but one good file."""
    content_type, options = parse_options_header(request.headers.get("content-type"))
    if content_type != b"multipart/form-data" or not options.get(b"boundary"):
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                            f"send the model as multipart/form-data with a field named {FIELD!r} "
                            f"(curl -F {FIELD}=@model.onnx ...)")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + _MULTIPART_SLACK:
        raise _too_large(limit)  # before reading a single byte of the body
    # A private folder per upload: nothing in a model (external-data paths) can reach another upload.
    folder = Path(tempfile.mkdtemp(prefix=UPLOAD_PREFIX, dir=tmp_dir))
    try:
        with open(folder / MODEL_FILE, "wb") as out:
            part = _FilePart(out, limit)
            parser = MultipartParser(options[b"boundary"], part.callbacks())
            received = 0
            async for chunk in request.stream():
                received += len(chunk)
                if received > limit + _MULTIPART_SLACK:
                    raise _too_large(limit)
                parser.write(chunk)
            parser.finalize()
        if not part.found:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"no {FIELD!r} field in the upload")
        if part.size == 0:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "the uploaded file is empty")
        return Upload(folder, part.filename, part.digest.hexdigest(), part.size)
    except HTTPException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    except Exception as err:  # a malformed multipart body, or the client went away
        shutil.rmtree(folder, ignore_errors=True)
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"malformed multipart upload ({type(err).__name__})") from err


def clear_abandoned_uploads(tmp_dir: Path) -> None:
    """Removes the folders of uploads that a killed API left half-received (one API process serves a data dir:
    at its start, no upload is in flight)."""
    for folder in tmp_dir.glob(UPLOAD_PREFIX + "*"):
        shutil.rmtree(folder, ignore_errors=True)
