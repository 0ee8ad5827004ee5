"""``ferrax.kernel_call`` on this machine (no GPU): what it lowers to for CUDA (one
``ferrax_kernel_call`` with typed attributes), vmap (the batch the target launches over, unmapped
arguments broadcast), export, sharding attributes, and the errors it gives before lowering. The
target itself runs on the emulated CUDA device (``tests/emulated/typed_kernel_call.rs``) and on
a GPU (``test_gpu_kernel_call.py``); the example kernel crate's PTX is the kernel here."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from jax._src.lib.mlir import ir

import ferrax
from helpers import rust_kernel_example

AXPY_PTX = rust_kernel_example().PTX


def axpy(x, y, a, *, ptx=AXPY_PTX):
    """The example's ``axpy`` (``examples/rust-kernel/axpy.py``), ``a·x + y``."""
    return rust_kernel_example().axpy(a, x, y, ptx=ptx)


def _as(kind, attr):
    """``attr`` as an attribute of ``kind``, or None (a cast that checks, in every jaxlib)."""
    try:
        return kind(attr)
    except (ValueError, TypeError):
        return None


def _value(attr):
    """An MLIR attribute as Python: arrays as lists, dictionaries as dicts of (value, type)."""
    if (d := _as(ir.DictAttr, attr)) is not None:
        return {d[i].name: (_value(d[i].attr), str(d[i].attr.type)) for i in range(len(d))}
    if (dense := _as(ir.DenseIntElementsAttr, attr)) is not None:
        return np.array(dense).tolist()
    for kind in (ir.StringAttr, ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr):
        if (typed := _as(kind, attr)) is not None:
            return typed.value
    raise TypeError(attr)


def custom_calls(module: ir.Module) -> list[tuple[str, dict, dict]]:
    """Each custom call's target, backend config and other attributes."""
    found = []

    def visit(op):
        op = op.operation
        if op.name == "stablehlo.custom_call":
            attrs = {name: op.attributes[name] for name in op.attributes}
            config = {k: v for k, (v, _) in _value(attrs["mhlo.backend_config"]).items()}
            config["scalar_types"] = {k: t for k, (_, t)
                                      in _value(attrs["mhlo.backend_config"])["scalars"][0].items()}
            found.append((ir.StringAttr(attrs["call_target_name"]).value, config, attrs))
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    visit(inner)

    for op in module.body.operations:
        visit(op)
    return found


def lowered(f, *args):
    return custom_calls(jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).compiler_ir())


def test_a_call_lowers_to_one_target_with_typed_attributes(rng):
    n = int(rng.integers(1, 5000))
    a = np.float32(rng.standard_normal())
    x = jax.ShapeDtypeStruct((n,), jnp.float32)
    shift = int(rng.integers(-2**31, 2**31))
    flag = bool(rng.integers(2))

    def f(x, y):
        # Every scalar type the target passes: numpy scalars keep theirs; Python ones take
        # jax's (64-bit here: the tests run with x64).
        return ferrax.kernel_call(
            x, np.int64(shift), y, a, flag, 7, 0.5, np.uint64(2**64 - 1), np.float64(-0.0),
            np.uint32(n), ptx=AXPY_PTX.read_text(), name="anything", block=(32, 4),
            grid=(3, 2, 5), out_shape=[x, jax.ShapeDtypeStruct((2, 3), jnp.int32)],
            shared_mem_bytes=65536)

    [(target, config, attrs)] = lowered(f, x, x)
    assert target == "ferrax_kernel_call"
    assert config["ptx"] == AXPY_PTX.read_text() and config["entry"] == "anything"
    assert config["grid"] == [3, 2, 5] and config["block"] == [32, 4, 1]
    assert config["shared_mem_bytes"] == 65536 and config["num_batch_dims"] == 0
    # x, scalar, y, 7 scalars, then the two results (buffers 2 and 3).
    assert config["params"] == [0, -1, 1, -1, -1, -1, -1, -1, -1, -1, 2, 3]
    values = {k: v for k, (v, _) in
              _value(attrs["mhlo.backend_config"])["scalars"][0].items()}
    assert values == {"1": shift, "3": float(a), "4": flag, "5": 7, "6": 0.5, "7": 2**64 - 1,
                      "8": -0.0, "9": n}
    assert config["scalar_types"] == {"1": "i64", "3": "f32", "4": "i1", "5": "i64",
                                      "6": "f64", "7": "ui64", "8": "f64", "9": "ui32"}
    assert "mhlo.frontend_attributes" not in attrs


def test_python_scalars_take_32_bits_without_x64():
    x = jax.ShapeDtypeStruct((8,), jnp.float32)
    with jax.enable_x64(False):
        f = lambda x: ferrax.kernel_call(x, 3, 1.5, True, ptx=AXPY_PTX, name="k", out_shape=x,
                                         grid=1, block=8)
        [(_, config, _)] = lowered(f, x)
    assert config["scalar_types"] == {"1": "i32", "2": "f32", "3": "i1"}


def test_vmap_launches_over_a_batch_and_broadcasts_unmapped_arguments(rng):
    batch, inner = (int(v) for v in rng.integers(1, 6, size=2))
    n = int(rng.integers(1, 999))
    xs = jax.ShapeDtypeStruct((batch, inner, n), jnp.float64)
    y = jax.ShapeDtypeStruct((n,), jnp.float64)
    f = jax.vmap(jax.vmap(lambda x, y: axpy(x, y, np.float64(2.0)), in_axes=(0, None)),
                 in_axes=(0, None))
    assert jax.eval_shape(f, xs, y).shape == (batch, inner, n)
    calls = lowered(f, xs, y)
    [(target, config, attrs)] = [c for c in calls if c[0] != "Sharding"]
    assert target == "ferrax_kernel_call" and config["num_batch_dims"] == 2
    # Every buffer leads with the batch: y is broadcast to it.
    operand_types = [str(t) for t in ir.FunctionType(
        jax.jit(f).trace(xs, y).lower(lowering_platforms=("cuda",)).compiler_ir()
        .body.operations[0].attributes["function_type"].value).inputs]
    assert operand_types[0] == f"tensor<{batch}x{inner}x{n}xf64>"
    assert ir.DictAttr(attrs["mhlo.frontend_attributes"])["num_batch_dims"].value == "2"
    # A mapped axis elsewhere than the front moves there.
    g = jax.vmap(lambda x, y: axpy(x, y, np.float64(1.0)), in_axes=(1, 1), out_axes=1)
    z = jax.ShapeDtypeStruct((n, batch), jnp.float64)
    assert jax.eval_shape(g, z, z).shape == (n, batch)
    [(_, config, _)] = lowered(g, z, z)
    assert config["num_batch_dims"] == 1


def test_export_keeps_the_call_and_marks_it(rng):
    n = int(rng.integers(1, 3000))
    x = jax.ShapeDtypeStruct((n,), jnp.float32)
    f = jax.jit(lambda x, y: axpy(x, y, np.float32(0.25)))
    exp = ferrax.export(f, platforms=["cuda"])(x, x)
    assert "custom_call @ferrax_kernel_call" in exp.mlir_module()
    assert ferrax.NeedsFerrax() in exp.unordered_effects
    again = export.deserialize(exp.serialize())
    assert "custom_call @ferrax_kernel_call" in again.mlir_module()
    # A plain export refuses it as any custom call jax does not know is stable.
    with pytest.raises(ValueError, match="ferrax_kernel_call"):
        export.export(f, platforms=["cuda"])(x, x)
    # Shape polymorphism: the batch is symbolic, the call's own shapes static.
    (b,) = export.symbolic_shape("b")
    g = jax.jit(jax.vmap(lambda x, y: axpy(x, y, np.float32(1.0))))
    spec = jax.ShapeDtypeStruct((b, n), jnp.float32)
    assert "ferrax_kernel_call" in ferrax.export(g, platforms=["cuda"])(spec, spec).mlir_module()


def test_ptx_as_text_path_or_bytes_lowers_the_same():
    x = jax.ShapeDtypeStruct((64,), jnp.float32)
    texts = {lowered(lambda x: axpy(x, x, np.float32(1.0), ptx=ptx), x)[0][1]["ptx"]
             for ptx in (AXPY_PTX, str(AXPY_PTX), AXPY_PTX.read_text(), AXPY_PTX.read_bytes())}
    assert texts == {AXPY_PTX.read_text()}


def test_bad_calls_are_errors_naming_the_kernel():
    x = jnp.ones(8, jnp.float32)
    call = lambda *args, **kw: ferrax.kernel_call(
        *args, **{"ptx": AXPY_PTX, "name": "axpy_f32", "out_shape": x, "grid": 1, "block": 8,
                  **kw})
    with pytest.raises(TypeError, match=r"kernel axpy_f32: parameter 1 is a float16 scalar"):
        jax.jit(lambda x: call(x, np.float16(1.0))).trace(x)
    with pytest.raises(TypeError, match=r"kernel axpy_f32: grid must be an int or 1 to 3 ints"):
        call(x, grid=(1, 1, 1, 1))
    with pytest.raises(TypeError, match=r"kernel axpy_f32: block must be"):
        call(x, block=2.0)
    with pytest.raises(ValueError, match=r"kernel axpy_f32: no results"):
        call(x, out_shape=[])
    with pytest.raises(TypeError, match=r"name must be the entry's name"):
        call(x, name="")
    with pytest.raises(FileNotFoundError):
        call(x, ptx="no/such/file.ptx")
    # It runs on CUDA only: lowered for the CPU, it says so.
    with pytest.raises(NotImplementedError,
                       match=r"kernel axpy_f32 is PTX, which runs on CUDA GPUs; .* for cpu"):
        jax.jit(lambda x: call(x)).lower(x)
    # No derivative.
    with pytest.raises(NotImplementedError, match="ferrax_kernel_call"):
        jax.jvp(lambda x: call(x), (x,), (x,))
