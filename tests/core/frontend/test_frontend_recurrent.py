"""RNN/GRU/LSTM unrolled at import: compiled natively and compared with ONNX Runtime, including the
cases the ONNX node tests leave out (ragged sequence_lens, linear_before_reset, clip, other activations)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from core.onnx_backend.backend import KilnBackend
from core.errors import UnsupportedOpError
from core.frontend import import_onnx

from .conftest import make_model, run_ort

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent_model(op: str, seq: int, batch: int, size: int, hidden: int, *, directions: int = 1,
                    seq_lens: bool = False, initial: bool = False, peepholes: bool = False, **attrs):
    gates = GATES[op]
    inputs = {"X": ("float32", [seq, batch, size]), "W": ("float32", [directions, gates * hidden, size]),
              "R": ("float32", [directions, gates * hidden, hidden]),
              "B": ("float32", [directions, 2 * gates * hidden])}
    names = ["X", "W", "R", "B", "", "", "", ""]
    if seq_lens:
        inputs["lens"] = ("int32", [batch])
        names[4] = "lens"
    if initial:
        inputs["h0"] = ("float32", [directions, batch, hidden])
        names[5] = "h0"
        if op == "LSTM":
            inputs["c0"] = ("float32", [directions, batch, hidden])
            names[6] = "c0"
    if peepholes:
        inputs["P"] = ("float32", [directions, 3 * hidden])
        names[7] = "P"
    while not names[-1]:
        names.pop()
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    if directions == 2:
        attrs["direction"] = "bidirectional"
    node = helper.make_node(op, names, outputs, hidden_size=hidden, **attrs)
    return make_model([node], inputs, {o: "float32" for o in outputs}, opset=14)


def feeds_for(model, seed=0, lens=None):
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        shape = tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
        feeds[value.name] = (np.asarray(lens, np.int32) if value.name == "lens"
                             else (rng.standard_normal(shape) * 0.5).astype(np.float32))
    return feeds


def assert_compiled_matches_ort(model, feeds):
    got = KilnBackend.prepare(model).run(feeds)
    for name, mine, theirs in zip([o.name for o in model.graph.output], got, run_ort(model, feeds)):
        assert mine.shape == theirs.shape, name
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_bidirectional_with_initial_state(op):
    model = recurrent_model(op, seq=4, batch=2, size=3, hidden=5, directions=2, initial=True)
    assert_compiled_matches_ort(model, feeds_for(model))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_ragged_sequence_lengths_keep_state_and_zero_the_output(op):
    model = recurrent_model(op, seq=5, batch=3, size=2, hidden=4, seq_lens=True, initial=True)
    assert_compiled_matches_ort(model, feeds_for(model, lens=[5, 2, 0]))


def test_lstm_peepholes_batch_first_clip_and_coupled_gates():
    model = recurrent_model("LSTM", seq=3, batch=2, size=3, hidden=4, peepholes=True, clip=0.7, input_forget=1)
    assert_compiled_matches_ort(model, feeds_for(model, seed=2))


def test_gru_linear_before_reset_and_custom_activations():
    model = recurrent_model("GRU", seq=3, batch=2, size=3, hidden=4, linear_before_reset=1,
                            activations=["HardSigmoid", "LeakyRelu"], activation_alpha=[0.3, 0.05],
                            activation_beta=[0.4])
    assert_compiled_matches_ort(model, feeds_for(model, seed=3))


def test_rnn_reverse_with_scaled_tanh():
    model = recurrent_model("RNN", seq=4, batch=1, size=2, hidden=3, direction="reverse",
                            activations=["ScaledTanh"], activation_alpha=[1.5], activation_beta=[0.5])
    assert_compiled_matches_ort(model, feeds_for(model, seed=4))


def test_unknown_activation_is_named():
    model = recurrent_model("RNN", seq=2, batch=1, size=2, hidden=3, activations=["Swoosh"])
    with pytest.raises(UnsupportedOpError, match="Swoosh"):
        import_onnx(model)


@pytest.mark.parametrize("activation,alpha,beta", [("Elu", [0.7], []), ("Softsign", [], []), ("Softplus", [], []),
                                                   ("ThresholdedRelu", [0.2], []), ("Affine", [0.5], [0.1])])
def test_rnn_activation_functions(activation, alpha, beta):
    attrs = {"activation_alpha": alpha} if alpha else {}
    if beta:
        attrs["activation_beta"] = beta
    model = recurrent_model("RNN", seq=3, batch=2, size=2, hidden=3, activations=[activation], **attrs)
    assert_compiled_matches_ort(model, feeds_for(model, seed=5))


def _ops(model) -> list[str]:
    return [node.op for node in import_onnx(model).nodes]


@pytest.mark.parametrize("op,attrs", [("LSTM", {}), ("GRU", {"linear_before_reset": 1})])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_fused_sequence_per_direction_matches_ort(op, attrs, direction):
    """An LSTM, or a GRU resetting after its recurrent product (PyTorch's), runs one LSTMSequence/GRUSequence
    per direction: no per-step MatMul, and 20 units make 10-unit blocks."""
    directions = 2 if direction == "bidirectional" else 1
    extra = {} if directions == 2 else {"direction": direction}
    model = recurrent_model(op, seq=7, batch=2, size=6, hidden=20, directions=directions, initial=True,
                            **attrs, **extra)
    ops = _ops(model)
    assert ops.count(f"{op}Sequence") == directions and ops.count("MatMul") == directions
    assert_compiled_matches_ort(model, feeds_for(model, seed=6))


@pytest.mark.parametrize("op,attrs", [("LSTM", {}), ("GRU", {"linear_before_reset": 1})])
def test_fused_sequence_with_ragged_lengths_and_no_initial_state(op, attrs):
    model = recurrent_model(op, seq=5, batch=3, size=4, hidden=16, seq_lens=True, **attrs)
    assert f"{op}Sequence" in _ops(model)
    assert_compiled_matches_ort(model, feeds_for(model, seed=7, lens=[3, 5, 0]))


def test_layers_the_fused_ops_do_not_compute_unroll():
    """Peepholes, clip, other activations, and a GRU resetting before its product keep the unrolled form."""
    for model in (recurrent_model("LSTM", seq=2, batch=1, size=2, hidden=3, peepholes=True),
                  recurrent_model("LSTM", seq=2, batch=1, size=2, hidden=3, clip=0.5),
                  recurrent_model("GRU", seq=2, batch=1, size=2, hidden=3),
                  recurrent_model("GRU", seq=2, batch=1, size=2, hidden=3, linear_before_reset=1,
                                  activations=["HardSigmoid", "Tanh"])):
        ops = _ops(model)
        assert not any(o.endswith("Sequence") for o in ops) and ops.count("MatMul") > 1, model.graph.node[0]


def test_long_fused_sequences_compile_without_unrolling():
    model = recurrent_model("LSTM", seq=600, batch=1, size=4, hidden=8)
    assert_compiled_matches_ort(model, feeds_for(model, seed=8))
