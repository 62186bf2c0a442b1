"""A build process (run as `python -m core.tune.build_worker`): builds the candidates it is sent, one
at a time, so a LocalBuilder can build a batch on several cores (core.process.child.ChildProcess).

Each request is a framed pickle (task, config, directory); each answer, the candidate's BuildResult.
"""
from __future__ import annotations

from ..process.channel import messages, send, stdio_channel
from .measure import build_candidate


def main() -> None:
    requests, answers = stdio_channel()
    for task, config, directory in messages(requests):
        send(answers, build_candidate(task, config, directory))


if __name__ == "__main__":
    main()
