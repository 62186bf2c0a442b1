"""ai.onnx.ml feature transforms on numbers: Scaler, Normalizer, Imputer, ArrayFeatureExtractor, FeatureVectorizer,
OneHotEncoder and LabelEncoder (numeric keys and values), each as graph ops (Binarizer is in activations.py)."""
from __future__ import annotations

import numpy as np

from .ml_trees import ML, as_float32
from .registry import ConvertContext, converter

_STRINGS = "string categories (Kiln's inputs and outputs are numeric tensors)"


def _per_feature(ctx: ConvertContext, values, like: str, what: str) -> str:
    """A constant broadcasting over the last axis: one value for all features or one per feature."""
    array = np.asarray(values, ctx.builder.type_of(like).dtype).reshape(-1)
    features = ctx.builder.type_of(like).shape[-1]
    if array.size not in (1, features):
        ctx.fail(f"{what} has {array.size} values for {features} features")
    return ctx.const(array if array.size == features else array.reshape(()))


@converter("Scaler", since_version=1, domain=ML)
def scaler(ctx: ConvertContext) -> str:
    x = as_float32(ctx, ctx.input(0))
    shifted = ctx.emit1("Sub", [x, _per_feature(ctx, ctx.attr("offset", [0.0]), x, "offset")])
    return ctx.emit1("Mul", [shifted, _per_feature(ctx, ctx.attr("scale", [1.0]), x, "scale")])


@converter("Normalizer", since_version=1, domain=ML)
def normalizer(ctx: ConvertContext) -> str:
    x = as_float32(ctx, ctx.input(0))
    if ctx.builder.type_of(x).rank != 2:
        ctx.fail(f"expects (rows, features), got {ctx.builder.type_of(x)}")
    norm = str(ctx.attr("norm", "MAX"))
    if norm == "MAX":
        scale = ctx.emit1("ReduceMax", [x], axes=(1,), keepdims=1)
    elif norm == "L1":
        scale = ctx.emit1("ReduceSum", [ctx.emit1("Abs", [x])], axes=(1,), keepdims=1)
    elif norm == "L2":
        scale = ctx.emit1("Sqrt", [ctx.emit1("ReduceSum", [ctx.emit1("Mul", [x, x])], axes=(1,), keepdims=1)])
    else:
        ctx.fail(f"norm {norm!r} must be MAX, L1 or L2")
    return ctx.emit1("Div", [x, scale])


@converter("Imputer", since_version=1, domain=ML)
def imputer(ctx: ConvertContext) -> str:
    x = ctx.input(0)
    if ctx.type_of(0).dtype.startswith("float"):
        replaced, imputed = float(ctx.attr("replaced_value_float", 0.0)), ctx.attr("imputed_value_floats", [])
    else:
        replaced, imputed = int(ctx.attr("replaced_value_int64", 0)), ctx.attr("imputed_value_int64s", [])
    if not imputed:
        ctx.fail("imputed values are missing")
    missing = ctx.emit1("IsNaN", [x]) if isinstance(replaced, float) and np.isnan(replaced) \
        else ctx.emit1("Equal", [x, ctx.scalar_like(replaced, x)])
    return ctx.emit1("Where", [missing, _per_feature(ctx, imputed, x, "imputed values"), x])


@converter("ArrayFeatureExtractor", since_version=1, domain=ML)
def array_feature_extractor(ctx: ConvertContext) -> str:
    indices = ctx.constant(1, "indices").astype(np.int64).reshape(-1)
    x, shape = ctx.input(0), ctx.shape(0)
    if np.any((indices < 0) | (indices >= shape[-1])):
        ctx.fail(f"indices {indices.tolist()} out of range for the last axis of {list(shape)}")
    picked = ctx.emit1("Gather", [x, ctx.const(indices)], axis=len(shape) - 1)
    return ctx.reshape(picked, (1, indices.size)) if len(shape) == 1 else picked  # ORT: a 1-D X gives one row


@converter("FeatureVectorizer", since_version=1, domain=ML)
def feature_vectorizer(ctx: ConvertContext) -> str:
    widths = [int(d) for d in ctx.attr("inputdimensions", [])]
    parts = []
    for index in range(len(ctx.node.input)):
        value, shape = as_float32(ctx, ctx.input(index)), ctx.shape(index)
        rows = shape[0] if len(shape) > 1 else 1
        value = ctx.reshape(value, (rows, int(np.prod(shape[1:] if len(shape) > 1 else shape))))
        width = widths[index] if index < len(widths) else ctx.builder.type_of(value).shape[1]
        if ctx.builder.type_of(value).shape[1] != width:
            ctx.unsupported(f"input {index} has {ctx.builder.type_of(value).shape[1]} columns but inputdimensions "
                            f"says {width}")
        parts.append(value)
    return parts[0] if len(parts) == 1 else ctx.emit1("Concat", parts, axis=1)


@converter("OneHotEncoder", since_version=1, domain=ML)
def one_hot_encoder(ctx: ConvertContext) -> str:
    if ctx.attr("cats_strings"):
        ctx.unsupported(_STRINGS)
    categories = np.asarray(ctx.attr("cats_int64s", []), np.int64)
    if categories.size == 0:
        ctx.fail("cats_int64s is empty")
    x = ctx.input(0)
    if ctx.type_of(0).dtype != "int64":  # ORT compares a float input after rounding it to int64
        x = ctx.emit1("Cast", [x], to="int64")
    expanded = ctx.reshape(x, ctx.shape(0) + (1,))
    hits = ctx.emit1("Equal", [expanded, ctx.const(categories)])
    return ctx.emit1("Cast", [hits], to="float32")


@converter("LabelEncoder", since_version=2, domain=ML)
def label_encoder(ctx: ConvertContext) -> str:
    keys, values, default = None, None, None
    for kind, dtype in (("int64s", np.int64), ("floats", np.float32)):
        if ctx.attr(f"keys_{kind}") is not None:
            keys = np.asarray(ctx.attr(f"keys_{kind}"), dtype)
        if ctx.attr(f"values_{kind}") is not None:
            values = np.asarray(ctx.attr(f"values_{kind}"), dtype)
            default = np.asarray(ctx.attr("default_int64" if kind == "int64s" else "default_float",
                                          -1 if kind == "int64s" else -0.0), dtype)
    if keys is None or values is None:
        ctx.unsupported("string keys or values, or keys/values given as tensors (Kiln encodes numbers)")
    if keys.size != values.size or keys.size == 0:
        ctx.fail(f"{keys.size} keys for {values.size} values")
    x = ctx.input(0)
    hits = ctx.emit1("Equal", [ctx.reshape(x, ctx.shape(0) + (1,)), ctx.const(keys.astype(ctx.type_of(0).dtype))])
    which = ctx.emit1("ArgMax", [ctx.emit1("Cast", [hits], to="int32")], axis=len(ctx.shape(0)), keepdims=0,
                      select_last_index=0)
    found = ctx.emit1("ReduceMax", [ctx.emit1("Cast", [hits], to="int32")], axes=(len(ctx.shape(0)),), keepdims=0)
    mapped = ctx.emit1("Gather", [ctx.const(values), which], axis=0)
    return ctx.emit1("Where", [ctx.emit1("Cast", [found], to="bool"), mapped, ctx.const(default)])


@converter("CategoryMapper", since_version=1, domain=ML)
def category_mapper(ctx: ConvertContext) -> str:
    ctx.unsupported("CategoryMapper maps strings to integers or integers to strings, and Kiln's tensors are "
                    "numeric: map the categories to integers before export (or use LabelEncoder with int64 keys)")
