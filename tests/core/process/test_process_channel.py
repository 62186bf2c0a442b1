"""The framed pickle channel: whole messages however the pipe splits them, EOF and deadlines told apart."""
from __future__ import annotations

import io
import os
import threading
import time

import pytest

from core.process.channel import FrameReader, messages, send


def test_messages_round_trip_through_a_stream_until_it_ends():
    stream = io.BytesIO()
    sent = [{"id": "1", "costs": [1e-3, 2e-3]}, ("result", None), None]
    for message in sent:
        send(stream, message)
    stream.seek(0)
    assert list(messages(stream)) == sent


def test_a_truncated_message_ends_the_stream():
    stream = io.BytesIO()
    send(stream, "whole")
    send(stream, "cut short")
    data = stream.getvalue()
    assert list(messages(io.BytesIO(data[:-3]))) == ["whole"]


def test_an_unpicklable_message_writes_nothing():
    stream = io.BytesIO()
    with pytest.raises(Exception):
        send(stream, lambda: None)
    assert stream.getvalue() == b""


def _write_and_close(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as writer:
        writer.write(data)


def test_frame_reader_joins_split_frames_then_reports_the_end():
    read_fd, write_fd = os.pipe()
    try:
        stream = io.BytesIO()
        for message in ("a", {"b": 2}, "c" * 100_000):
            send(stream, message)
        data = stream.getvalue()
        reader = FrameReader(read_fd)
        os.write(write_fd, data[:5])  # not even a whole header
        with pytest.raises(TimeoutError):
            reader.next(time.monotonic() + 0.05)
        os.write(write_fd, data[5:40])
        assert reader.next(time.monotonic() + 1) == "a"
        rest, write_fd = threading.Thread(target=_write_and_close, args=(write_fd, data[40:])), -1
        rest.start()  # more than a pipe holds: written while the reader reads
        assert reader.next() == {"b": 2}  # no deadline: waits as long as it takes
        assert reader.next(time.monotonic() + 10) == "c" * 100_000
        rest.join()
        with pytest.raises(EOFError):
            reader.next(time.monotonic() + 1)
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


def test_a_deadline_already_past_times_out_without_waiting():
    read_fd, write_fd = os.pipe()
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            FrameReader(read_fd).next(start - 1)
        assert time.monotonic() - start < 0.5
    finally:
        os.close(read_fd)
        os.close(write_fd)
