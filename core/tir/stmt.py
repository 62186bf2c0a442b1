"""Statements of the loop program (TIR) and the PrimFunc that holds one kernel.

Loops always start at 0 and step by 1; `For.kind` says how codegen runs them (serial, parallel
across threads, vectorized into SIMD lanes, fully unrolled, or bound to a GPU thread index);
`For.annotations` carries hints for codegen that do not change the meaning (a pragma:
("pragma_unroll", n) asks LLVM to unroll by n) and a bound loop's ("thread_tag", "threadIdx.x").
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional

from .expr import Buffer, Expr, Load, Var


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    # GPU: the loop is the launch grid's axis named by its ("thread_tag", ...) annotation, one
    # iteration per block or thread; a CPU runs it as a serial loop (how GPU schedules are tested).
    THREAD_BINDING = "thread_binding"


class Stmt:
    pass


@dataclass(frozen=True)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(frozen=True)
class For(Stmt):
    var: Var
    extent: Expr
    kind: ForKind
    body: Stmt
    annotations: tuple[tuple[str, object], ...] = ()  # (key, value) pairs, e.g. ("pragma_unroll", 4)

    @property
    def thread_tag(self) -> Optional[str]:
        """The launch axis ("blockIdx.x", "threadIdx.y", ...) a THREAD_BINDING loop is bound to."""
        return dict(self.annotations).get("thread_tag")


@dataclass(frozen=True)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True)
class IfThenElse(Stmt):
    cond: Expr
    then_case: Stmt
    else_case: Optional[Stmt] = None


@dataclass(frozen=True)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True)
class Barrier(Stmt):
    """Every thread of a GPU block waits here (`__syncthreads`): what the block wrote to shared
    memory before is visible to all after. Nothing on a CPU, where a block's threads run in turn."""


@dataclass(frozen=True)
class IntrinsicCall(Stmt):
    """A tensor intrinsic (core/te/tensorize.py) in place of the loop nest tensorize matched to its
    declaration: `name` finds its lowering, `operands` are Loads of the first element of each
    operand's region (the output first), so analyses see its buffers and variables; `strides`: each
    operand's element strides, for an intrinsic whose regions may be strided (else empty)."""

    name: str
    operands: tuple[Load, ...]
    strides: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Allocate(Stmt):
    """A scratch buffer for the duration of `body`: scope "local" lives on the stack (a GPU
    thread's registers), "shared" in a GPU block's shared memory (the stack on a CPU)."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True)
class PrimFunc:
    """One kernel: `void name(T0* p0, T1* p1, ...)` over flat global buffers that never alias.

    Parameter order is inputs, then outputs, then workspaces (scratch the caller provides)."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    num_inputs: int = 0
    num_outputs: int = 0
    attrs: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return self.params[: self.num_inputs]

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return self.params[self.num_inputs : self.num_inputs + self.num_outputs]

    @property
    def workspaces(self) -> tuple[Buffer, ...]:
        return self.params[self.num_inputs + self.num_outputs :]


def seq(*stmts: Stmt) -> Stmt:
    """Flattens nested Seqs; a single statement stays itself."""
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        elif s is not None:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))
