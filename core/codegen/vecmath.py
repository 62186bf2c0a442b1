"""Vector exp/log/sin/cos through glibc's libmvec on x86-64, instead of one libm call per lane."""
# libmvec's `_ZGV<isa>N<lanes>v_<fn>` follow the x86-64 vector function ABI (b: SSE, d: AVX2,
# e: AVX-512), take and return whole registers, and are accurate to a few ulp. Only functions
# present since GLIBC_2.22 are used, so artifacts still load on any glibc of the last decade
# (erf/tanh arrived in 2.35 and stay per-lane libm calls).
from __future__ import annotations

import weakref

from llvmlite import ir

from ..backends import get_backend
from ..target import Target
from .llvm_types import F32, F64, I32

FUNCS = ("exp", "log", "sin", "cos")
SYMBOL_PREFIX = "_ZGV"

# module -> {scalar type name: [(lanes, isa letter), ...] widest first}
_WIDTHS: "weakref.WeakKeyDictionary[ir.Module, dict[str, list[tuple[int, str]]]]" = weakref.WeakKeyDictionary()


def enable(module: ir.Module, target: Target) -> None:
    """Let `module` call libmvec when `target` is x86-64 (the variants its features allow)."""
    if target.arch != "x86_64" or not get_backend(target).host_code:
        return
    have = {f[1:] for f in target.features.split(",") if f.startswith("+")}
    f32, f64 = [(4, "b")], [(2, "b")]
    if "avx2" in have:
        f32, f64 = [(8, "d")] + f32, [(4, "d")] + f64
    if "avx512f" in have:
        f32, f64 = [(16, "e")] + f32, [(8, "e")] + f64
    _WIDTHS[module] = {"float": f32, "double": f64}


def uses_libmvec(module: ir.Module) -> bool:
    return any(name.startswith(SYMBOL_PREFIX) for name in module.globals)


def vector_call(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value | None:
    """`name` applied to every lane of vector `x` via libmvec, or None when that is not possible."""
    widths = _WIDTHS.get(b.module)
    if widths is None or name not in FUNCS or not isinstance(x.type, ir.VectorType):
        return None
    elem = x.type.element
    if not isinstance(elem, (ir.FloatType, ir.DoubleType)):
        return None
    suffix, key = ("f", "float") if isinstance(elem, ir.FloatType) else ("", "double")
    lanes, out, start = x.type.count, [], 0
    for width, isa in widths[key]:
        while lanes - start >= width:
            vt = ir.VectorType(elem, width)
            piece = b.shuffle_vector(x, ir.Constant(x.type, ir.Undefined),
                                     ir.Constant(ir.VectorType(I32, width), list(range(start, start + width))))
            fn = _declare(b.module, f"{SYMBOL_PREFIX}{isa}N{width}v_{name}{suffix}", vt)
            out.append((start, width, b.call(fn, [piece])))
            start += width
    if not out:
        return None
    result: ir.Value = ir.Constant(x.type, ir.Undefined)
    for first, width, values in out:
        for k in range(width):
            result = b.insert_element(result, b.extract_element(values, ir.Constant(I32, k)),
                                      ir.Constant(I32, first + k))
    scalar_t = F32 if key == "float" else F64
    intrinsic = _declare(b.module, f"llvm.{name}.{'f32' if key == 'float' else 'f64'}", scalar_t)
    for lane in range(start, lanes):  # a tail narrower than every variant: one call per lane
        idx = ir.Constant(I32, lane)
        result = b.insert_element(result, b.call(intrinsic, [b.extract_element(x, idx)]), idx)
    return result


def _declare(module: ir.Module, name: str, t: ir.Type) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(t, [t]), name)
        fn.attributes.add("nounwind")
        fn.attributes.add("readnone")
    return fn
