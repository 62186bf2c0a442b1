"""Remote measurement (TVM's RPC device pool, over any message transport): a compile that cannot run its
candidates here sends them, in batches, to the measuring devices of their kind and waits for the timings.

A batch unanswered within its timeout is sent once more under the same id (a device that was only slow and the
one that takes the copy store one answer under that id); still unanswered, its candidates count as failed
measurements and tuning goes on. When every batch of a round goes unanswered twice, no device of the kind is
left, and the compile fails (MeasuringDevicesLost) instead of waiting forever. Each candidate's result is taken
once, by its id.

Each result keeps where it ran (an answer's `emulated`: records.EMULATED, else NATIVE), and so does its record. The
runner's `measured`, the records kind its job uses, is NATIVE until answers come and as soon as any real device
answered: only a job all of whose answers came from emulators is EMULATED. So a job served by a real Pi and a qemu
worker at once is a native job: its emulated answers are recorded as such, and its budget, warm start and build
use native records only (the session also hides them from the search once a real device answered)."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Optional, Protocol, Sequence

from ..errors import KilnError
from .measure import BuildResult, MeasureErrorNo, MeasureResult
from .measuring_device import candidate_entry, measure_result
from .records import EMULATED, NATIVE


class MeasuringDevicesLost(KilnError):
    """No measuring device of the tuning target's kind answered: they are gone (or none was ever started)."""

    code = "measuring_devices_lost"


class BatchTransport(Protocol):
    """Carries batches to the measuring devices of one kind and their answers back (the service: a Celery queue)."""

    def send(self, batch_id: str, batch: dict) -> None: ...

    def receive(self, batch_id: str, timeout_s: float) -> Optional[dict]:
        """The answer to `batch_id`, waiting at most `timeout_s`; None when none came."""

    def describe(self) -> str: ...


@dataclass(frozen=True)
class RemoteMeasurement:
    """Where a tuning run's candidates are measured: devices of `kind`, reached through `transport`. `key` makes
    the run's batch ids unique and stable (the service: the job and its attempt)."""

    transport: BatchTransport
    kind: str
    key: str
    batch_timeout_s: float = 300.0
    candidates_per_batch: int = 4  # a tuner batch of 8 becomes two, measured by two devices at once


def _signature(build: BuildResult) -> dict:
    from ..codegen.build import kernel_signatures

    return kernel_signatures([build.func])[0]


class RemoteRunner:
    """The LocalRunner's interface (`run(builds, reference, constant_inputs)`), measuring through `remote`."""

    def __init__(self, remote: RemoteMeasurement, timeout_s: float = 10.0, min_repeat_ms: float = 10.0,
                 repeat: int = 3, threads: int = 0, seed: int = 0):
        self.remote = remote
        self.timeout_s, self.min_repeat_ms, self.repeat, self.threads, self.seed = (
            timeout_s, min_repeat_ms, repeat, threads, seed)
        self._sent = 0
        self.stats = {"batches": 0, "resent": 0, "lost": 0, "candidates": 0, "devices": set(), "workers": set(),
                      "emulated": False, "answers": {NATIVE: 0, EMULATED: 0}}

    @property
    def measured(self) -> str:
        """The kind of records this runner's job uses: EMULATED once answers came and all were emulated."""
        answers = self.stats["answers"]
        return EMULATED if answers[EMULATED] and not answers[NATIVE] else NATIVE

    def _batch(self, entries: list[dict], reference: Optional[dict], constant_inputs: Sequence[int]) -> tuple[str, dict]:
        self._sent += 1
        batch_id = f"{self.remote.key}-{self._sent}"
        return batch_id, {"batch_id": batch_id, "kind": self.remote.kind, "reference": reference, "candidates": entries,
                          "seed": self.seed, "threads": self.threads, "repeat": self.repeat,
                          "min_repeat_ms": self.min_repeat_ms, "timeout_s": self.timeout_s,
                          "constant_inputs": list(constant_inputs)}

    def _collect(self, batch_ids: Sequence[str]) -> dict[str, dict]:
        """Answers of the batches (sent together) that come within the batch timeout."""
        deadline = time.monotonic() + self.remote.batch_timeout_s
        answers = {}
        for batch_id in batch_ids:
            answer = self.remote.transport.receive(batch_id, max(0.0, deadline - time.monotonic()))
            if answer is not None:
                answers[batch_id] = answer
        return answers

    def _exchange(self, batches: dict[str, dict]) -> dict[str, dict]:
        """Sends the batches and collects their answers, each unanswered one sent once more; MeasuringDevicesLost
        when none is answered at all."""
        for batch_id, batch in batches.items():
            self.remote.transport.send(batch_id, batch)
        answers = self._collect(list(batches))
        unanswered = [b for b in batches if b not in answers]
        for batch_id in unanswered:  # once more; a slow device's late answer lands under the same id
            self.remote.transport.send(batch_id, batches[batch_id])
        answers.update(self._collect(unanswered))
        lost = len(batches) - len(answers)
        self.stats["batches"] += len(batches)
        self.stats["resent"] += len(unanswered)
        self.stats["lost"] += lost
        if batches and lost == len(batches):
            raise MeasuringDevicesLost(
                f"no device measuring {self.remote.kind} code answered ({self.remote.transport.describe()}): "
                f"{lost} batch(es) of tuning candidates went unanswered twice, "
                f"{self.remote.batch_timeout_s:g} s each; the {self.remote.kind} measuring workers are gone")
        return answers

    def _results_by_id(self, batches: dict[str, dict],
                       answers: dict[str, dict]) -> dict[str, tuple[dict, Optional[str]]]:
        """Each candidate's answer and where it ran (None: no device ran it), taken once by its id (a batch
        delivered twice answers it twice)."""
        by_id: dict[str, tuple[dict, Optional[str]]] = {}
        for batch_id, answer in answers.items():
            for name in ("device", "worker"):
                if name in answer:
                    self.stats[f"{name}s"].add(answer[name])
            self.stats["emulated"] = self.stats["emulated"] or bool(answer.get("emulated"))
            if "results" in answer:
                kind = EMULATED if answer.get("emulated") else NATIVE
                self.stats["answers"][kind] += 1
                for candidate_id, result in answer["results"].items():
                    by_id.setdefault(candidate_id, (result, kind))
            if "error" in answer:  # the device could not take the batch at all
                for entry in batches[batch_id]["candidates"]:
                    by_id.setdefault(entry["id"], ({"error": int(MeasureErrorNo.UNKNOWN_ERROR), "msg": answer["error"]},
                                                   None))
        return by_id

    def run(self, builds: Sequence[BuildResult], reference: Optional[BuildResult] = None,
            constant_inputs: Sequence[int] = (), real_inputs: Optional[dict] = None) -> list[MeasureResult]:
        """`real_inputs` are not sent (batches are JSON): a remote device measures on seeded inputs."""
        start = time.perf_counter()
        ids = {k: f"{self.remote.key}:{b.name}" for k, b in enumerate(builds) if b.error_no == MeasureErrorNo.NO_ERROR}
        ref_entry = (candidate_entry(f"{self.remote.key}:reference", reference, _signature(reference))
                     if reference is not None and reference.lib else None)
        entries = [candidate_entry(ids[k], builds[k], _signature(builds[k])) for k in ids]
        size = max(1, self.remote.candidates_per_batch)
        batches = dict(self._batch(entries[i:i + size], ref_entry, constant_inputs) for i in range(0, len(entries), size))
        by_id = self._results_by_id(batches, self._exchange(batches))
        self.stats["candidates"] += len(entries)
        spent = (time.perf_counter() - start) / max(1, len(entries))
        lost = ({"error": int(MeasureErrorNo.RUN_TIMEOUT),
                 "msg": f"its batch went unanswered twice ({self.remote.batch_timeout_s:g} s each)"}, None)
        job_kind = self.measured  # of what no device ran: a failure of this job's own trials
        out = []
        for k, build in enumerate(builds):
            if k in ids:
                answer, kind = by_id.get(ids[k], lost)
                result = measure_result(answer, build.build_s + spent, time.time())
            else:
                kind, result = None, MeasureResult((), build.error_no, build.error_msg, build.build_s, time.time())
            out.append(replace(result, measured=kind or job_kind))
        return out

    def summary(self) -> dict:
        """The report's `tuning.measurement`: where the timings came from."""
        from ..runtime.emulated import EMULATED

        out = {"kind": self.remote.kind, "remote": self.remote.transport.describe(), **self.stats,
               "devices": sorted(self.stats["devices"]), "workers": sorted(self.stats["workers"]),
               "answers": dict(self.stats["answers"]), "records_measured": self.measured}
        if self.stats["emulated"]:
            out["note"] = f"candidates ran {EMULATED}"
        return out

    def close(self) -> None:
        """Nothing is kept between batches here (the LocalRunner's interface)."""


__all__ = ["BatchTransport", "MeasuringDevicesLost", "RemoteMeasurement", "RemoteRunner"]
