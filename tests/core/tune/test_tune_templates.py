"""The tuning templates' spaces: random configs of the Conv2dNCHWc space (register tile, reduction
order, unrolled input-channel step, unrolled kw / ib) and of a Winograd conv's space (GEMM tile)
compile and compute numpy's conv; every knob changes the loop nest it claims to; the heuristic
default is read back as a point of the space."""
from __future__ import annotations

import random
import re

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from core.kernels.schedules.conv2d_nchwc import IC_INSIDE_WINDOW, schedule_conv2d_nchwc
from core.kernels.schedules.conv2d_winograd import schedule_conv2d_winograd
from tests.helpers.kernel_runs import OpKernel, build_kernels
from core.packing.blocked import block_for, from_blocked, pack_weights, to_blocked
from core.packing.winograd import winograd_weights
from core.target import get_target
from core.tir.stmt import For, ForKind
from core.tune.templates import MAX_UNROLLED_FMAS, anchor_stage
from tests.backend_calls import get_template

rng = np.random.default_rng(5)
TARGET = get_target("native")
TEMPLATE = get_template("Conv2dNCHWc", TARGET)

CONVS = [  # id, input NCHW shape, out channels, kernel, stride, pad, depthwise
    ("3x3", (1, 32, 8, 12), 32, 3, 1, 1, False),
    ("3x3_s2", (1, 24, 11, 9), 16, 3, 2, 1, False),
    ("1x1", (1, 32, 6, 7), 16, 1, 1, 0, False),
    ("7x7_3ch", (1, 3, 16, 16), 16, 7, 2, 3, False),
    ("depthwise", (1, 16, 10, 10), 16, 3, 1, 1, True),
]
CONFIGS_PER_CONV = 5


def numpy_conv(x, w, bias, stride, pad, depthwise):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[-1]
    win = sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]  # n c oh ow kh kw
    if depthwise:
        out = np.einsum("ncyxhw,chw->ncyx", win, w[:, 0])
    else:
        out = np.einsum("ncyxhw,ochw->noyx", win, w)
    return out + bias[None, :, None, None]


def conv_case(shape, m, k, s, p, dw, target=TARGET):
    x, w, bias = (rng.standard_normal(shape).astype(np.float32), rng.standard_normal((m, 1 if dw else shape[1], k, k))
                  .astype(np.float32), rng.standard_normal(m).astype(np.float32))
    ob = block_for(m, target.lanes("float32"))
    ib = ob if dw else block_for(shape[1], target.lanes("float32"))
    inputs = [to_blocked(x, ib), pack_weights(w, ib, ob, dw), bias.reshape(-1, ob)]
    attrs = {"strides": (s, s), "pads": (p,) * 4, "dilations": (1, 1), "depthwise": dw}
    return inputs, attrs, numpy_conv(x, w, bias, s, p, dw)


def space_of(inputs, attrs, op="Conv2dNCHWc", schedule=schedule_conv2d_nchwc, target=TARGET):
    """The template's space for this conv, with the default read back from the heuristic schedule."""
    template, captured = get_template(op, target), {}

    def probe(sch, outs, target):
        schedule(sch, outs, target)
        stage = anchor_stage(sch, outs, template)
        captured["op"], captured["default"] = stage.op, template.read_default(stage)

    OpKernel("probe", op, inputs, attrs, schedule_fn=probe).lower(target)
    space = template.define(captured["op"], target, captured["default"])
    space.default = space.from_values({k.name: captured["default"][k.name] for k in space.knobs})
    return space, captured["op"]


def sampled_configs(space, op, seed):
    """The default, the config with the most unrolled work within the limit, and random valid ones."""
    valid = [c for c in space if TEMPLATE.valid(c.values, op, TARGET)]
    r = random.Random(seed)

    def unrolled(c):
        v = c.values
        return (v["ow_tile"] * v.get("oc_tile", 1) * v.get("oh_tile", 1), v.get("unroll_inner", 0),
                v.get("unroll_kw", 0), v.get("ic_tile", 1), v.get("reduce_order", 0))

    picks = [space.default, max(valid, key=unrolled)] + r.sample(valid, min(CONFIGS_PER_CONV, len(valid)))
    return list({c.index: c for c in picks}.values())


@pytest.fixture(scope="module")
def conv_spaces():
    out = {}
    for cid, shape, m, k, s, p, dw in CONVS:
        inputs, attrs, want = conv_case(shape, m, k, s, p, dw)
        space, op = space_of(inputs, attrs)
        out[cid] = (inputs, attrs, want, space, op)
    return out


def test_spaces_hold_the_tuning_knobs_and_their_default(conv_spaces):
    names = {cid: [k.name for k in space.knobs] for cid, (_, _, _, space, _) in conv_spaces.items()}
    assert names["3x3"] == ["ow_tile", "oc_tile", "oh_tile", "reduce_order", "ic_tile", "unroll_kw", "unroll_inner"]
    assert names["1x1"] == ["ow_tile", "oc_tile", "oh_tile", "ic_tile", "unroll_inner"]  # no window to reorder
    assert names["7x7_3ch"] == ["ow_tile", "oc_tile", "oh_tile", "unroll_kw", "unroll_inner"]  # one input block
    assert names["depthwise"] == ["ow_tile", "oh_tile", "unroll_kw"]
    for cid, (_, _, _, space, op) in conv_spaces.items():
        assert space.default is not None and TEMPLATE.valid(space.default.values, op, TARGET), cid
        assert space.default["ow_tile"] * space.default.values.get("oc_tile", 1) > 1, cid
    assert len(conv_spaces["3x3"][3]) >= 200


def test_random_configs_compute_numpys_conv(conv_spaces):
    kernels, wants = [], []
    for cid, (inputs, attrs, want, space, op) in conv_spaces.items():
        for config in sampled_configs(space, op, seed=len(cid)):
            schedule = (lambda sch, outs, target, v=dict(config.values): TEMPLATE.apply(sch, outs, target, v))
            kernels.append(OpKernel(f"conv_{cid.replace('x', '_')}_{config.index}", "Conv2dNCHWc", inputs, attrs,
                                    schedule_fn=schedule))
            wants.append((want, dict(config.values)))
    runs = build_kernels(kernels)
    for run, (want, values) in zip(runs, wants):
        (got,) = run.run()
        np.testing.assert_allclose(from_blocked(got)[..., : want.shape[-1]], want, rtol=1e-4, atol=1e-3,
                                   err_msg=f"{run.kernel.name} {values}")


def loops(func):
    """(name, extent, kind, pragmas) of every loop, outermost first."""
    out = []

    def walk(s):
        if isinstance(s, For):
            out.append((re.sub(r"\.\d+", "", s.var.name), s.extent.value, s.kind, dict(s.annotations)))
        for child in ("body", "then_case", "else_case"):
            if getattr(s, child, None) is not None:
                walk(getattr(s, child))
        for x in getattr(s, "stmts", ()):
            walk(x)

    walk(func.body)
    return out


@pytest.mark.parametrize("target_name", ["x86-64-v3", "x86-64-v4"])
def test_each_knob_shapes_the_loop_nest(target_name):
    # Structure only (nothing runs), so any host checks both widths. The input-channel block is one
    # vector, so a fixed channel count is 4 blocks at 256 bits but 2 at 512, where ic_tile=2 leaves an
    # outer step of extent 1 that lowering drops: the conv takes four blocks at either width.
    target = get_target(target_name)
    template = get_template("Conv2dNCHWc", target)
    inputs, attrs, _ = conv_case((1, 4 * target.lanes("float32"), 8, 12), 32, 3, 1, 1, False, target)
    space, op = space_of(inputs, attrs, target=target)
    assert [ax.var.name.split(".")[0] for ax in op.reduce_axis] == ["ric", "rkh", "rkw", "rib"]
    assert op.reduce_axis[0].extent == 4
    base = dict(space.default.values, ow_tile=4, oc_tile=2, oh_tile=1, ic_tile=1, unroll_kw=0, unroll_inner=0,
                reduce_order=0)

    def nest(**change):
        values = dict(base, **change)
        assert template.valid(values, op, target)
        kernel = OpKernel("k", "Conv2dNCHWc", inputs, attrs,
                          schedule_fn=lambda sch, outs, target: template.apply(sch, outs, target, values))
        return [lp for lp in loops(kernel.lower(target)) if lp[0].startswith(("ric", "rkh", "rkw", "rib"))]

    plain = nest()
    assert [name for name, *_ in plain] == ["ric", "rkh", "rkw", "rib"]
    assert [name for name, *_ in nest(reduce_order=IC_INSIDE_WINDOW, ic_tile=2)] == ["ric.o", "rkh", "rkw", "ric.i", "rib"]
    split = nest(ic_tile=2)
    assert [name for name, *_ in split] == ["ric.o", "ric.i", "rkh", "rkw", "rib"]
    assert split[1][3] == {"pragma_unroll": 2}  # the inner input-channel step carries the unroll pragma
    kinds = lambda lps: {name: kind for name, _, kind, _ in lps}  # noqa: E731
    assert set(kinds(plain).values()) == {ForKind.SERIAL}
    assert kinds(nest(unroll_kw=1)) == dict(kinds(plain), rkw=ForKind.UNROLLED)
    assert kinds(nest(unroll_inner=1)) == dict(kinds(plain), rib=ForKind.UNROLLED)


def test_validity_bounds_the_tile_and_the_unrolled_body(conv_spaces):
    _, _, _, space, op = conv_spaces["3x3"]
    ib = op.reduce_axis[-1].extent
    for config in space:
        v = config.values
        tile = v["ow_tile"] * v["oc_tile"] * v["oh_tile"]
        body = tile * v["ic_tile"] * (3 if v["unroll_kw"] else 1) * (ib if v["unroll_inner"] else 1)
        assert TEMPLATE.valid(v, op, TARGET) == (tile <= 32 and body <= MAX_UNROLLED_FMAS)


@pytest.mark.parametrize("tile", [2, 4])
def test_winograd_space_holds_its_default_and_its_configs_compute_numpys_conv(tile):
    template = get_template("Conv2dWinogradNCHWc", TARGET)
    x, w, bias = (rng.standard_normal((1, 16, 10, 10)).astype(np.float32),
                  rng.standard_normal((16, 16, 3, 3)).astype(np.float32), rng.standard_normal(16).astype(np.float32))
    inputs, attrs = [to_blocked(x, 8), winograd_weights(w, 8, 8, tile), bias.reshape(-1, 8)], {"pads": (1, 1, 1, 1)}
    space, op = space_of(inputs, attrs, "Conv2dWinogradNCHWc", schedule_conv2d_winograd)
    assert [k.name for k in space.knobs] == ["tile_t", "oc_t", "unroll_inner"]
    default = space.default
    valid = [c for c in space if template.valid(c.values, op, TARGET)]
    assert default.index in {c.index for c in valid} and len(valid) >= 8
    valid = [default] + random.Random(tile).sample([c for c in valid if c.index != default.index], 7)
    kernels = [OpKernel(f"winograd_{c.index}", "Conv2dWinogradNCHWc", inputs, attrs,
                        schedule_fn=lambda sch, outs, target, v=dict(c.values): template.apply(sch, outs, target, v))
               for c in valid]
    want = numpy_conv(x, w, bias, 1, 1, False)
    for run, config in zip(build_kernels(kernels), valid):
        np.testing.assert_allclose(from_blocked(run.run()[0]), want, rtol=1e-4, atol=1e-3, err_msg=str(config.values))
