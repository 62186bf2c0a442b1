"""RNN, GRU and LSTM: every step's input projection is one MatMul up front; an LSTM or a linear-before-reset
GRU with the default activations then runs its steps as one op per direction (LSTMSequence, GRUSequence: each
step's recurrent product and gates in one pass), and any other layer unrolls over its sequence length, which a
compile fixes, into one recurrent MatMul per step whose gates fuse into a few elementwise kernels."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from ...graph.op_defs.recurrent import GRU_GATES, LSTM_GATES, unit_block
from .activations import exponential_linear, softplus_of, softsign_of, thresholded_relu_of
from .elementwise import hard_sigmoid_of
from .registry import ConvertContext, converter

# Unrolling emits about 15 IR nodes a step and direction: past this a compile gets slow, and a
# native loop over a step function is the design to build.
MAX_UNROLLED_STEPS = 512

Activation = Callable[[ConvertContext, str, Optional[float], Optional[float]], str]


def _affine(ctx: ConvertContext, x: str, alpha: float, beta: float) -> str:
    return ctx.emit1("Add", [ctx.emit1("Mul", [x, ctx.scalar_like(alpha, x)]), ctx.scalar_like(beta, x)])


def _scaled_tanh(ctx: ConvertContext, x: str, alpha: float, beta: float) -> str:
    inner = ctx.emit1("Tanh", [ctx.emit1("Mul", [x, ctx.scalar_like(beta, x)])])
    return ctx.emit1("Mul", [inner, ctx.scalar_like(alpha, x)])


def _plain(op: str) -> Activation:
    return lambda ctx, x, alpha, beta: ctx.emit1(op, [x])


@dataclass(frozen=True)
class ActivationDef:
    build: Activation
    alpha: Optional[float] = None  # default; None: takes no alpha from activation_alpha
    beta: Optional[float] = None


# The activation functions the RNN family names (ONNX spec, "Activation functions" of RNN/GRU/LSTM).
ACTIVATIONS: dict[str, ActivationDef] = {
    "Sigmoid": ActivationDef(_plain("Sigmoid")),
    "Tanh": ActivationDef(_plain("Tanh")),
    "Relu": ActivationDef(_plain("Relu")),
    "Affine": ActivationDef(_affine, 1.0, 0.0),
    "LeakyRelu": ActivationDef(lambda ctx, x, alpha, beta: ctx.emit1("LeakyRelu", [x], alpha=alpha), 0.01),
    "ThresholdedRelu": ActivationDef(lambda ctx, x, alpha, beta: thresholded_relu_of(ctx, x, alpha), 1.0),
    "ScaledTanh": ActivationDef(_scaled_tanh, 1.0, 1.0),
    "HardSigmoid": ActivationDef(hard_sigmoid_of, 0.2, 0.5),
    "Elu": ActivationDef(lambda ctx, x, alpha, beta: exponential_linear(ctx, x, alpha), 1.0),
    "Softsign": ActivationDef(lambda ctx, x, alpha, beta: softsign_of(ctx, x)),
    "Softplus": ActivationDef(lambda ctx, x, alpha, beta: softplus_of(ctx, x)),
}

BoundActivation = Callable[[str], str]


def _activations(ctx: ConvertContext, defaults: Sequence[str], directions: int) -> list[list[BoundActivation]]:
    """Per direction, the activation functions (f, g[, h]) with their alpha/beta bound. Alphas and
    betas are consumed in order by the functions that take them, as ONNX Runtime does."""
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in (ctx.attr("activations") or [])]
    names = names or list(defaults) * directions
    if len(names) != len(defaults) * directions:
        ctx.fail(f"activations lists {len(names)} functions, expected {len(defaults) * directions}")
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    bound: list[BoundActivation] = []
    for name in names:
        spec = ACTIVATIONS.get(name)
        if spec is None:
            ctx.unsupported(f"activation {name!r} (supported: {', '.join(ACTIVATIONS)})")
        alpha = (alphas.pop(0) if alphas else spec.alpha) if spec.alpha is not None else None
        beta = (betas.pop(0) if betas else spec.beta) if spec.beta is not None else None
        bound.append(lambda x, s=spec, a=alpha, b=beta: s.build(ctx, x, a, b))
    per = len(defaults)
    return [bound[d * per:(d + 1) * per] for d in range(directions)]


def _slice(ctx: ConvertContext, x: str, axis: int, start: int, size: int) -> str:
    shape = ctx.builder.type_of(x).shape
    starts = tuple(start if a == axis else 0 for a in range(len(shape)))
    sizes = tuple(size if a == axis else d for a, d in enumerate(shape))
    return ctx.emit1("Slice", [x], starts=starts, steps=(1,) * len(shape), sizes=sizes)


def _chunks(ctx: ConvertContext, x: str, count: int) -> list[str]:
    """x [..., count*H] split into count pieces along its last axis."""
    shape = ctx.builder.type_of(x).shape
    size = shape[-1] // count
    return [_slice(ctx, x, len(shape) - 1, k * size, size) for k in range(count)]


@dataclass
class RecurrentInputs:
    """One direction's weights, plus the layer's shared inputs, in the [seq, batch, ...] layout."""
    x: str            # [S, B, I]
    w: str            # [G*H, I]
    r: str            # [G*H, H]
    w_bias: Optional[str]  # [G*H]
    r_bias: Optional[str]  # [G*H]
    seq_lens: Optional[str]   # [B] int32, None when every sequence is full
    # x W^T and h R^T when they are not float MatMuls of w and r (DynamicQuantizeLSTM's integer products)
    products: Optional["Products"] = None


@dataclass(frozen=True)
class Products:
    """A direction's two products, each [rows, I or H] -> [rows, G*H] (an LSTM's)."""
    times_w: Callable[[str], str]
    times_r: Callable[[str], str]


def direction_slice(ctx: ConvertContext, value: str, d: int) -> str:
    """Direction d of a per-direction input (W, R, a scale...): its leading axis dropped."""
    piece = _slice(ctx, value, 0, d, 1)
    return ctx.reshape(piece, ctx.builder.type_of(piece).shape[1:])


def _direction_inputs(ctx: ConvertContext, x: str, gates: int, hidden: int, d: int,
                      seq_lens: Optional[str]) -> RecurrentInputs:
    def weights(index: int) -> str:  # direction d of W or R: [G*H, I or H]
        return direction_slice(ctx, ctx.input(index), d)

    w_bias = r_bias = None
    if ctx.has_input(3):
        bias = ctx.reshape(_slice(ctx, ctx.input(3), 0, d, 1), (2 * gates * hidden,))
        w_bias, r_bias = _slice(ctx, bias, 0, 0, gates * hidden), _slice(ctx, bias, 0, gates * hidden, gates * hidden)
    return RecurrentInputs(x, weights(1), weights(2), w_bias, r_bias, seq_lens)


def _input_projection(ctx: ConvertContext, inp: RecurrentInputs, bias: Optional[str]) -> str:
    """X W^T (+ bias) for every step at once: [S, B, G*H]."""
    seq, batch, size = ctx.builder.type_of(inp.x).shape
    flat = ctx.reshape(inp.x, (seq * batch, size))
    if inp.products is not None:
        projected = inp.products.times_w(flat)
    else:
        projected = ctx.emit1("MatMul", [flat, ctx.emit1("Transpose", [inp.w], perm=(1, 0))])
    if bias is not None:
        projected = ctx.emit1("Add", [projected, bias])
    return ctx.reshape(projected, (seq, batch, ctx.builder.type_of(projected).shape[-1]))


class _Steps:
    """Walks the steps of one direction and collects its outputs; masks steps past a sequence's
    length (state kept, output zero) when sequence_lens is given."""

    def __init__(self, ctx: ConvertContext, inp: RecurrentInputs, reverse: bool):
        self.ctx, self.inp = ctx, inp
        self.seq, self.batch = ctx.builder.type_of(inp.x).shape[:2]
        self.order = range(self.seq - 1, -1, -1) if reverse else range(self.seq)
        self.outputs: dict[int, str] = {}

    def step_input(self, projected: str, t: int) -> str:
        piece = _slice(self.ctx, projected, 0, t, 1)
        return self.ctx.reshape(piece, self.ctx.builder.type_of(piece).shape[1:])

    def mask(self, t: int) -> Optional[str]:
        if self.inp.seq_lens is None:
            return None
        live = self.ctx.emit1("Less", [self.ctx.const(np.array(t, np.int32)), self.inp.seq_lens])
        return self.ctx.reshape(live, (self.batch, 1))

    def keep(self, mask: Optional[str], new: str, old: str) -> str:
        return new if mask is None else self.ctx.emit1("Where", [mask, new, old])

    def record(self, t: int, mask: Optional[str], h: str) -> None:
        self.outputs[t] = h if mask is None else self.ctx.emit1("Where", [mask, h, self.ctx.scalar_like(0, h)])

    def stacked(self) -> str:
        """Y of this direction: [S, 1, B, H]."""
        pieces = [self.ctx.reshape(self.outputs[t], (1, 1, *self.ctx.builder.type_of(self.outputs[t]).shape))
                  for t in range(self.seq)]
        return pieces[0] if len(pieces) == 1 else self.ctx.emit1("Concat", pieces, axis=0)


def _clip(ctx: ConvertContext, x: str) -> str:
    limit = ctx.attr("clip")
    return x if limit is None else ctx.emit1("Clip", [x], min=-float(limit), max=float(limit))


def _zeros(ctx: ConvertContext, batch: int, hidden: int, dtype: str) -> str:
    return ctx.const(np.zeros((batch, hidden), dtype))


def _add_all(ctx: ConvertContext, *terms: Optional[str]) -> str:
    present = [t for t in terms if t is not None]
    total = present[0]
    for term in present[1:]:
        total = ctx.emit1("Add", [total, term])
    return total


def _sum_bias(ctx: ConvertContext, inp: RecurrentInputs) -> Optional[str]:
    if inp.w_bias is None:
        return None
    return ctx.emit1("Add", [inp.w_bias, inp.r_bias])


def _rnn_direction(ctx: ConvertContext, inp: RecurrentInputs, acts, hidden: int, reverse: bool, state):
    projected = _input_projection(ctx, inp, _sum_bias(ctx, inp))
    steps = _Steps(ctx, inp, reverse)
    r_t = ctx.emit1("Transpose", [inp.r], perm=(1, 0))
    (h,) = state
    for t in steps.order:
        mask = steps.mask(t)
        pre = _clip(ctx, ctx.emit1("Add", [steps.step_input(projected, t), ctx.emit1("MatMul", [h, r_t])]))
        h_new = acts[0](pre)
        steps.record(t, mask, h_new)
        h = steps.keep(mask, h_new, h)
    return steps, (h,)


def _gru_biases(ctx: ConvertContext, inp: RecurrentInputs) -> tuple[Optional[str], Optional[str]]:
    """(the input projection's bias, the candidate's recurrent bias): z and r take both biases up front;
    the candidate's recurrent bias sits where the reset applies."""
    if inp.w_bias is None:
        return None, None
    wz, wr, wh = _chunks(ctx, inp.w_bias, 3)
    rz, rr, rh = _chunks(ctx, inp.r_bias, 3)
    return ctx.emit1("Concat", [ctx.emit1("Add", [wz, rz]), ctx.emit1("Add", [wr, rr]), wh], axis=0), rh


def _gru_direction(ctx: ConvertContext, inp: RecurrentInputs, acts, hidden: int, reverse: bool, state):
    f, g = acts
    linear_before_reset = bool(ctx.attr("linear_before_reset", 0))
    w_bias, r_bias = _gru_biases(ctx, inp)
    projected = _input_projection(ctx, inp, w_bias)
    r_zr, r_h = _slice(ctx, inp.r, 0, 0, 2 * hidden), _slice(ctx, inp.r, 0, 2 * hidden, hidden)
    r_zr_t, r_h_t = (ctx.emit1("Transpose", [m], perm=(1, 0)) for m in (r_zr, r_h))
    steps = _Steps(ctx, inp, reverse)
    (h,) = state
    for t in steps.order:
        mask = steps.mask(t)
        x_z, x_r, x_h = _chunks(ctx, steps.step_input(projected, t), 3)
        h_z, h_r = _chunks(ctx, ctx.emit1("MatMul", [h, r_zr_t]), 2)
        z = f(_clip(ctx, ctx.emit1("Add", [x_z, h_z])))
        r = f(_clip(ctx, ctx.emit1("Add", [x_r, h_r])))
        if linear_before_reset:
            recurrent = ctx.emit1("Mul", [r, _add_all(ctx, ctx.emit1("MatMul", [h, r_h_t]), r_bias)])
        else:
            recurrent = _add_all(ctx, ctx.emit1("MatMul", [ctx.emit1("Mul", [r, h]), r_h_t]), r_bias)
        candidate = g(_clip(ctx, ctx.emit1("Add", [x_h, recurrent])))
        # H = (1 - z) * candidate + z * H_prev = candidate + z * (H_prev - candidate)
        h_new = ctx.emit1("Add", [candidate, ctx.emit1("Mul", [z, ctx.emit1("Sub", [h, candidate])])])
        steps.record(t, mask, h_new)
        h = steps.keep(mask, h_new, h)
    return steps, (h,)


def _lstm_direction(ctx: ConvertContext, inp: RecurrentInputs, acts, hidden: int, reverse: bool, state,
                    peepholes: Optional[str] = None):
    f, g, h_act = acts
    couple_input_forget = bool(ctx.attr("input_forget", 0))
    projected = _input_projection(ctx, inp, _sum_bias(ctx, inp))
    if inp.products is not None:
        times_r = inp.products.times_r
    else:
        r_t = ctx.emit1("Transpose", [inp.r], perm=(1, 0))
        times_r = lambda h: ctx.emit1("MatMul", [h, r_t])  # noqa: E731
    p_i = p_o = p_f = None
    if peepholes is not None:
        p_i, p_o, p_f = _chunks(ctx, peepholes, 3)
    steps = _Steps(ctx, inp, reverse)
    h, c = state
    for t in steps.order:
        mask = steps.mask(t)
        x_i, x_o, x_f, x_c = _chunks(ctx, ctx.emit1("Add", [steps.step_input(projected, t), times_r(h)]), 4)
        peep = (lambda p, cell: None if p is None else ctx.emit1("Mul", [p, cell]))
        i = f(_clip(ctx, _add_all(ctx, x_i, peep(p_i, c))))
        forget = (ctx.emit1("Sub", [ctx.scalar_like(1, i), i]) if couple_input_forget
                  else f(_clip(ctx, _add_all(ctx, x_f, peep(p_f, c)))))
        c_new = ctx.emit1("Add", [ctx.emit1("Mul", [forget, c]), ctx.emit1("Mul", [i, g(_clip(ctx, x_c))])])
        o = f(_clip(ctx, _add_all(ctx, x_o, peep(p_o, c_new))))
        h_new = ctx.emit1("Mul", [o, h_act(c_new)])
        steps.record(t, mask, h_new)
        h, c = steps.keep(mask, h_new, h), steps.keep(mask, c_new, c)
    return steps, (h, c)


def _fused_op(ctx: ConvertContext, kind: "RecurrentKind", dtype: str) -> Optional[str]:
    """LSTMSequence or GRUSequence when this layer is what they compute: float32, the default activations,
    no clip; an LSTM without peepholes or coupled gates, a GRU that resets after its recurrent product."""
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in (ctx.attr("activations") or [])]
    plain = (dtype == "float32" and ctx.attr("clip") is None and not ctx.attr("activation_alpha")
             and not ctx.attr("activation_beta") and all(n == d for n, d in zip(names, kind.activations * 2)))
    if ctx.op_type == "LSTM" and plain and not ctx.attr("input_forget", 0) and not ctx.has_input(7):
        return "LSTMSequence"
    if ctx.op_type == "GRU" and plain and ctx.attr("linear_before_reset", 0):
        return "GRUSequence"
    return None


def _fused_direction(ctx: ConvertContext, fused: str, inp: RecurrentInputs, hidden: int, reverse: bool, state):
    """One direction as a LSTMSequence/GRUSequence node: (Y [S, 1, B, H], final states)."""
    gates = LSTM_GATES if fused == "LSTMSequence" else GRU_GATES
    if fused == "LSTMSequence":
        projected, extra = _input_projection(ctx, inp, _sum_bias(ctx, inp)), []
    else:
        w_bias, r_bias = _gru_biases(ctx, inp)
        projected = _input_projection(ctx, inp, w_bias)
        extra = [r_bias if r_bias is not None else ctx.const(np.zeros(hidden, ctx.builder.type_of(inp.x).dtype))]
    block = unit_block(hidden)  # R [G*H, H] -> [H/L, H, G, L]: a block's gate columns contiguous per k
    packed = ctx.emit1("Transpose", [ctx.reshape(inp.r, (gates, hidden // block, block, hidden))], perm=(1, 3, 0, 2))
    lengths = [inp.seq_lens] if inp.seq_lens is not None else []
    states = ctx.emit1(fused, [projected, packed, *extra, *state, *lengths], reverse=int(reverse))
    shape = ctx.builder.type_of(states).shape
    seq, batch = shape[0] - 1, shape[-2]

    def slot(start: int, size: int, which: int) -> str:  # slots [start, start + size) of h (0) or c (1)
        starts = (start,) + ((which,) if len(shape) == 4 else ()) + (0, 0)
        sizes = (size,) + ((1,) if len(shape) == 4 else ()) + (batch, hidden)
        return ctx.emit1("Slice", [states], starts=starts, steps=(1,) * len(shape), sizes=sizes)

    y = ctx.reshape(slot(0 if reverse else 1, seq, 0), (seq, 1, batch, hidden))
    if inp.seq_lens is not None:  # the output is zero past a row's length (its state is kept)
        live = ctx.emit1("Less", [ctx.const(np.arange(seq, dtype=np.int32).reshape(seq, 1, 1, 1)),
                                  ctx.reshape(inp.seq_lens, (1, 1, batch, 1))])
        y = ctx.emit1("Where", [live, y, ctx.scalar_like(0, y)])
    last = 0 if reverse else seq
    return y, tuple(ctx.reshape(slot(last, 1, which), (batch, hidden)) for which in range(len(state)))


@dataclass(frozen=True)
class RecurrentKind:
    gates: int
    activations: tuple[str, ...]
    direction_fn: Callable
    states: int  # hidden state only (RNN, GRU) or hidden and cell (LSTM)


KINDS = {
    "RNN": RecurrentKind(1, ("Tanh",), _rnn_direction, 1),
    "GRU": RecurrentKind(3, ("Sigmoid", "Tanh"), _gru_direction, 1),
    "LSTM": RecurrentKind(4, ("Sigmoid", "Tanh", "Tanh"), _lstm_direction, 2),
}


def _sequence_lengths(ctx: ConvertContext, seq: int) -> Optional[str]:
    """sequence_lens as an int32 [B] value, or None when it is absent or every sequence is full."""
    if not ctx.has_input(4):
        return None
    known = ctx.builder.constant_value(ctx.input(4))
    if known is not None and np.all(np.asarray(known) == seq):
        return None
    lens = ctx.input(4)
    return lens if ctx.type_of(4).dtype == "int32" else ctx.emit1("Cast", [lens], to="int32")


def _convert_recurrent(ctx: ConvertContext, kind: RecurrentKind,
                       products: Optional[Callable[[int], Products]] = None) -> list[Optional[str]]:
    """`products`: direction -> its x W^T and h R^T, for weights that are not float (the layer then unrolls)."""
    hidden = int(ctx.attr("hidden_size", 0)) or ctx.shape(2)[-1]
    direction = ctx.attr("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("forward", "reverse", "bidirectional"):
        ctx.fail(f"direction {direction!r} is not forward, reverse or bidirectional")
    directions = 2 if direction == "bidirectional" else 1
    batch_first = bool(ctx.attr("layout", 0))
    x = ctx.input(0)
    if ctx.type_of(0).rank != 3:
        ctx.fail(f"X must be [seq, batch, input] (rank 3), got {ctx.type_of(0)}")
    if batch_first:
        x = ctx.emit1("Transpose", [x], perm=(1, 0, 2))
    seq, batch, _ = ctx.builder.type_of(x).shape
    dtype = ctx.type_of(0).dtype
    fused = _fused_op(ctx, kind, dtype) if products is None else None
    if not fused and seq * directions > MAX_UNROLLED_STEPS:
        ctx.unsupported(f"a sequence of {seq} steps x {directions} directions (unrolled up to {MAX_UNROLLED_STEPS})")
    seq_lens = _sequence_lengths(ctx, seq)
    if seq_lens is not None and direction != "forward":
        ctx.unsupported("sequence_lens shorter than the sequence with a reverse direction")
    initial = []
    for index in range(5, 5 + kind.states):
        value = ctx.input(index) if ctx.has_input(index) else None
        if value is not None and batch_first:
            value = ctx.emit1("Transpose", [value], perm=(1, 0, 2))
        initial.append(value)
    acts = _activations(ctx, kind.activations, directions)
    ys, finals = [], []
    for d in range(directions):
        inp = _direction_inputs(ctx, x, kind.gates, hidden, d, seq_lens)
        if products is not None:
            inp.products = products(d)
        state = tuple(_zeros(ctx, batch, hidden, dtype) if v is None else
                      ctx.reshape(_slice(ctx, v, 0, d, 1), (batch, hidden)) for v in initial)
        extra = {}
        if kind.states == 2 and ctx.has_input(7):
            extra["peepholes"] = ctx.reshape(_slice(ctx, ctx.input(7), 0, d, 1), (3 * hidden,))
        reverse = direction == "reverse" or d == 1
        if fused:
            y_d, final = _fused_direction(ctx, fused, inp, hidden, reverse, state)
        else:
            steps, final = kind.direction_fn(ctx, inp, acts[d], hidden, reverse, state, **extra)
            y_d = steps.stacked() if ctx.output_used(0) else None
        if seq_lens is not None:  # an empty sequence ends in a zero state, as in ONNX Runtime
            started = ctx.reshape(ctx.emit1("Less", [ctx.const(np.array(0, np.int32)), seq_lens]), (batch, 1))
            final = tuple(ctx.emit1("Where", [started, v, ctx.scalar_like(0, v)]) for v in final)
        ys.append(y_d)
        finals.append(final)
    outputs: list[Optional[str]] = []
    y = None
    if ctx.output_used(0):
        y = ys[0] if directions == 1 else ctx.emit1("Concat", ys, axis=1)  # [S, D, B, H]
        if batch_first:
            y = ctx.emit1("Transpose", [y], perm=(2, 0, 1, 3))
    outputs.append(y)
    for s in range(kind.states):
        pieces = [ctx.reshape(final[s], (1, batch, hidden)) for final in finals]
        state = pieces[0] if directions == 1 else ctx.emit1("Concat", pieces, axis=0)
        if batch_first:
            state = ctx.emit1("Transpose", [state], perm=(1, 0, 2))
        outputs.append(state)
    return outputs[:max(1, len(ctx.outputs_used))]


def convert_lstm(ctx: ConvertContext, products: Callable[[int], Products]) -> list[Optional[str]]:
    """An LSTM node's outputs whose two products per direction `products` makes (com.microsoft
    DynamicQuantizeLSTM: contrib_quantized.py)."""
    return _convert_recurrent(ctx, KINDS["LSTM"], products)


def _register(op: str, since: int) -> None:
    @converter(op, since_version=since)
    def convert(ctx: ConvertContext) -> list[Optional[str]]:
        return _convert_recurrent(ctx, KINDS[op])


for _op in KINDS:
    _register(_op, 7)
