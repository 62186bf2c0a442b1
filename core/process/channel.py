"""Framed pickles between a parent and its child: each message is its 8-byte length, then its pickle."""
from __future__ import annotations

import os
import pickle
import select
import struct
import sys
import time
from collections import deque
from typing import Any, BinaryIO, Iterator, Optional

_HEADER = struct.Struct("!Q")


def send(stream: BinaryIO, message: Any) -> None:
    """Writes one message (pickled whole first: an unpicklable one writes nothing)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def messages(stream: BinaryIO) -> Iterator[Any]:
    """Each message read from a blocking stream, until the other side closes it."""
    while len(head := stream.read(_HEADER.size)) == _HEADER.size:
        (size,) = _HEADER.unpack(head)
        data = stream.read(size)
        if len(data) < size:
            return
        yield pickle.loads(data)


class FrameReader:
    """Messages from a pipe's file descriptor as they arrive, each waited for until a deadline."""

    def __init__(self, fd: int):
        self.fd = fd
        self._buffer = bytearray()
        self._ready: deque = deque()
        self._closed = False

    def next(self, deadline: Optional[float] = None) -> Any:
        """The next message. Raises EOFError once the other end has closed the pipe and every whole
        message was read, TimeoutError when `deadline` (a time.monotonic() value) passes first."""
        while not self._ready:
            if self._closed:
                raise EOFError("the other end closed the channel")
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise TimeoutError("no message before the deadline")
            ready, _, _ = select.select([self.fd], [], [], wait)
            if ready:
                self._feed()
        return self._ready.popleft()

    def _feed(self) -> None:
        chunk = os.read(self.fd, 1 << 20)
        self._closed = not chunk
        self._buffer += chunk
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            end = _HEADER.size + size
            if len(self._buffer) < end:
                return
            self._ready.append(pickle.loads(self._buffer[_HEADER.size:end]))
            del self._buffer[:end]


def stdio_channel() -> tuple[BinaryIO, BinaryIO]:
    """A `python -m` child's end: requests on stdin, answers on its own copy of stdout. File
    descriptor 1 then goes where stderr goes, so nothing the child's code prints (DEBUG=N, a
    kernel's printf) can corrupt the answers."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return sys.stdin.buffer, answers
