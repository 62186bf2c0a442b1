"""Reads an uploaded .npz's array headers before numpy loads it: every member an .npy whose declared size fits."""
from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
from fastapi import HTTPException, status


def _refuse(message: str, code: str) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, {"message": message, "code": code})


def check_npz_headers(path: Path, max_bytes: int, code: str) -> None:
    """422 (with `code`) for an archive member that is not an .npy array, or whose header declares more than
    `max_bytes` in all: numpy would allocate what a 1 KB header claims (10**11 floats: MemoryError) or hand back
    a non-array member as bytes."""
    declared = 0
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():
                with archive.open(member) as handle:
                    try:
                        version = np.lib.format.read_magic(handle)
                        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                       else np.lib.format.read_array_header_2_0)
                        shape, _, dtype = read_header(handle)
                    except (ValueError, EOFError, SyntaxError, TypeError) as err:
                        raise _refuse(f"the upload's member {member.filename!r} is not an .npy array "
                                      f"({str(err).splitlines()[0] if str(err) else type(err).__name__})", code) from None
                if dtype.hasobject:
                    raise _refuse(f"the upload's member {member.filename!r} holds Python objects, not numbers", code)
                declared += math.prod(shape) * dtype.itemsize
                if declared > max_bytes:
                    raise _refuse(f"the upload's arrays declare more than the {max_bytes >> 20} MiB allowed "
                                  f"(member {member.filename!r} is {'x'.join(map(str, shape))} {dtype})", code)
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile) as err:
        raise _refuse(f"the upload is not a readable .npz file ({type(err).__name__})", code) from None
