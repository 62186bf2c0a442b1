"""Typed errors of the compiler. Each user-facing failure is one KilnError with a stable code.

The CLI prints `str(err)` as one line and exits non-zero; the service maps codes to HTTP statuses.
"""
from __future__ import annotations


class KilnError(Exception):
    """Base of every error Kiln reports to a user (never a bare assert)."""

    code = "kiln_error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidModelError(KilnError):
    """The input is not a valid ONNX model (not protobuf, fails the checker, bad external data)."""

    code = "invalid_model"


class ModelTooLargeError(KilnError):
    """A declared or inferred tensor (or all of them together) is over the size budget: refused before anything allocates it."""

    code = "too_large"


class UnsupportedOpError(KilnError):
    """The model uses ops (at their opset) that Kiln cannot compile. Lists every one of them."""

    code = "unsupported_op"

    def __init__(self, ops: list[tuple[str, str, int]]):
        # ops: (domain, op_type, opset) triples, deduplicated and sorted for a stable message.
        self.ops = sorted(set(ops))
        listed = ", ".join(f"{op} (opset {ver}{'' if dom in ('', 'ai.onnx') else ', domain ' + dom})" for dom, op, ver in self.ops)
        super().__init__(f"unsupported ONNX ops: {listed}")


class UnsupportedOpsetError(KilnError):
    """The model imports an opset newer than Kiln's converters follow: its ops may mean something else there."""

    code = "unsupported_opset"


class UnsupportedOnTargetError(KilnError):
    """Ops Kiln compiles for other targets but not for this one (a GPU's sequential scans). Lists every one."""

    code = "unsupported_on_target"

    def __init__(self, target: str, ops: list[str]):
        self.target, self.ops = target, sorted(set(ops))
        super().__init__(f"target {target} cannot compile these ops: {', '.join(self.ops)} "
                         f"(compile the model for a CPU target, or replace these ops)")


class ShapeError(KilnError):
    """Shapes or dtypes do not fit together, or a dimension is symbolic and was not fixed."""

    code = "shape_error"


class UnknownTargetError(KilnError):
    code = "unknown_target"


class ScheduleError(KilnError):
    """A schedule primitive was used in a way that cannot be lowered."""

    code = "schedule_error"


class CodegenError(KilnError):
    code = "codegen_error"


class BuildError(KilnError):
    """The system linker or compiler failed."""

    code = "build_error"


class ValidationError(KilnError):
    """The compiled model's outputs differ from ONNX Runtime's beyond tolerance."""

    code = "validation_failed"


class ValidationInputError(KilnError):
    """Validation inputs (an .npz) or validation options that cannot be used: unreadable, too large, or not
    the model's input names, shapes and dtypes."""

    code = "bad_validation_inputs"


class ArtifactError(KilnError):
    """An artifact file is missing, corrupt, or was built for another machine."""

    code = "bad_artifact"


class ArtifactNameError(KilnError):
    """An artifact name (the prefix of its library, header and C symbols) that is not a usable C identifier."""

    code = "bad_artifact_name"


# Errors that mean Kiln itself failed on a valid model (a schedule or code generator bug), not the user.
INTERNAL_CODES = frozenset({ScheduleError.code, CodegenError.code})


def message_for_users(err: KilnError) -> str:
    """`str(err)`, said as what it is when it is Kiln's own failure: its scheduling jargon is kept only as detail."""
    if err.code in INTERNAL_CODES:
        return (f"Kiln failed to generate code for this model (an internal compiler error, {err.code}); "
                f"please report it with the model. Detail: {err}")
    return str(err)
