"""A kernel compiling process (run as `python -m core.codegen.object_worker`): compiles the kernels it is sent, one
at a time, so that core/codegen/kernel_objects.py builds a library's missing kernels on several cores.

Each request is a framed pickle (canonical PrimFunc, Target); each answer, its CachedObject or the error raised.
"""
from __future__ import annotations

from ..process.channel import messages, send, stdio_channel
from .kernel_objects import compile_object


def main() -> None:
    requests, answers = stdio_channel()
    for func, target in messages(requests):
        try:
            answer = compile_object(func, target)
        except Exception as err:  # the parent raises it: a codegen bug is the build's failure, not the worker's
            answer = err
        send(answers, answer)


if __name__ == "__main__":
    main()
