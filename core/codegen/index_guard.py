"""Code for TIR's index_guard (core/tir/index_guard.py): wrap a negative index, clamp a bad one and record it."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ..tir.expr import Call, Load
from . import arith
from .llvm_types import I1, I64, lanes_of, mangle

if TYPE_CHECKING:
    from .codegen_llvm import FunctionEmitter
    from .vectorize import VectorBody


def _wrap_and_test(b: ir.IRBuilder, idx: ir.Value, extent: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(idx counted from the end when negative, whether that is outside [0, extent)): one unsigned compare."""
    zero = ir.Constant(idx.type, None)
    wrapped = b.select(b.icmp_signed("<", idx, zero), b.add(idx, extent), idx)
    return wrapped, b.icmp_unsigned(">=", wrapped, extent)


def _record(fe: FunctionEmitter, fault: Load, idx: ir.Value, extent: ir.Value) -> None:
    """[1, idx, extent] into the kernel's fault record (any one bad index will do when threads race)."""
    for slot, value in enumerate((ir.Constant(I64, 1), idx, extent)):
        fe.store_elem(fault.buffer, fe.element_ptr(fault.buffer, ir.Constant(I64, slot)), value)


def emit_scalar(fe: FunctionEmitter, e: Call) -> ir.Value:
    b = fe.b
    idx, extent = fe.emit_expr(e.args[0]), fe.emit_expr(e.args[1])
    wrapped, bad = _wrap_and_test(b, idx, extent)
    if len(e.args) > 2:  # a kernel lowered without its fault record (a bare compute) only clamps
        with b.if_then(bad, likely=False):
            _record(fe, e.args[2], idx, extent)
    return b.select(bad, ir.Constant(I64, 0), wrapped)


def emit_vector(vb: VectorBody, e: Call) -> ir.Value:
    """Lane-varying indices: one vector compare; the rare bad group records its first bad lane."""
    b, fe = vb.b, vb.fe
    idx = vb.full(vb.expr(e.args[0]))
    extent = vb.full(vb.expr(e.args[1]))
    wrapped, bad = _wrap_and_test(b, idx, extent)
    if vb.mask is not None:
        bad = b.and_(bad, vb.mask)  # idle lanes hold whatever: they are not indices
    if len(e.args) > 2 and lanes_of(idx) == 1:  # a one-lane body: its lane is the index itself
        with b.if_then(bad, likely=False):
            _record(fe, e.args[2], idx, extent)
    elif len(e.args) > 2:
        bits = b.bitcast(bad, ir.IntType(lanes_of(idx)))
        with b.if_then(b.icmp_unsigned("!=", bits, ir.Constant(bits.type, 0)), likely=False):
            cttz = arith.declare(b.module, f"llvm.cttz.{mangle(bits.type)}", bits.type, [bits.type, I1])
            lane = b.call(cttz, [bits, ir.Constant(I1, 1)])
            _record(fe, e.args[2], b.extract_element(idx, lane), b.extract_element(extent, lane))
    return b.select(bad, ir.Constant(idx.type, None), wrapped)
