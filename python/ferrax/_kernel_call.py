"""Compiled-kernel calls: jaxlib's Triton kernel-call payloads (what jax-triton's
``triton_call`` lowers to) read and checked on the host by the library's own decoder, the one
its CUDA target uses; the lowering install() puts in place so that jax-triton's calls reach
that target; and ``kernel_call``, ferrax's own call of a kernel of the caller's PTX."""

import json
import os
import pathlib
from functools import partial

import jax
import numpy as np
from jax._src import core, dispatch, dtypes
from jax._src.interpreters import batching, mlir
from jax._src.lib.mlir import ir

from ferrax import _library, _targets
from ferrax._lowering import batch_partitioning


def describe_triton_call(opaque: bytes, *, compressed: bool = True) -> dict:
    """What a ``triton_kernel_call`` payload launches, checked as ferrax's CUDA target checks it.

    ``opaque`` is the custom call's ``opaque`` attribute: a zlib-compressed
    ``TritonAnyKernelCall`` proto (``compressed=False`` for the bare proto). Returns a dict:
    ``name``, ``metadata_bytes``, ``buffers`` (operands and results the call takes),
    ``autotune`` (``None``, or its ``name`` and ``aliases`` as ``[input, output, bytes]``) and
    ``calls``, one per configuration, each with the ``kernel`` name, ``code`` (``"ptx"`` or
    ``"cubin"``), ``threads_per_block``, ``ctas_per_cluster``, ``shared_mem_bytes``,
    ``compute_capability``, ``global_scratch`` (``[bytes, alignment]`` per block, or ``None``),
    ``grid``, ``params`` (each a dict with its ``kind``: ``"array"``, ``"tma"`` or a scalar
    type with its ``value``) and ``entry_params`` (``[size, alignment]`` of each ``.param`` of
    the PTX entry, ``None`` for a cubin).

    Raises ValueError, naming the kernel, for what the target would refuse: a payload that is
    not such a proto, PTX without the entry, parameters that do not match the entry's
    ``.param`` list, a block or grid past CUDA's limits.
    """
    described = json.loads(_library.describe_kernel_call(bytes(opaque), compressed))
    for call in described["calls"]:
        for param in call["params"]:
            # JSON has no non-finite numbers: the library writes them as strings.
            if param["kind"] in ("f32", "f64"):
                param["value"] = float(param["value"])
    return described


#: jaxlib's target for jax-triton's calls (``jax_triton.triton_lib.CUSTOM_CALL_TARGET_NAME``).
JAXLIB_TRITON_TARGET = "triton_kernel_call"


def _takes(opaque) -> bool:
    """Whether ferrax's target launches this payload: one kernel call or an autotuned set, without
    TMA descriptors; what it refuses, or cannot read, stays on jaxlib's target."""
    try:
        described = describe_triton_call(opaque)
    except (ValueError, TypeError):
        return False
    return all(p["kind"] != "tma" for call in described["calls"] for p in call["params"])


def ffi_lowering_taking_triton_calls(jax_ffi_lowering):
    """``jax.ffi.ffi_lowering`` as install() puts it in place: unchanged, but for a call of
    jaxlib's Triton target (jax-triton's ``triton_call`` lowers through it) whose payload
    ferrax's target launches, which is lowered to ``ferrax_triton_kernel_call`` instead (not
    for a plain ``jax.export``, which then refuses jaxlib's target as it does without
    ferrax)."""
    from ferrax import _export, _targets

    def ffi_lowering(call_target_name, *args, **kwargs):
        stock_rule = jax_ffi_lowering(call_target_name, *args, **kwargs)
        if call_target_name != JAXLIB_TRITON_TARGET:
            return stock_rule
        ferrax_rule = jax_ffi_lowering(_targets.TRITON_KERNEL_CALL, *args, **kwargs)

        def rule(ctx, *operands, **attributes):
            with _export.lowering(ctx) as stock:
                # The target takes the payload alone (no cost estimate or other attribute).
                ferrax = (not stock and set(attributes) == {"opaque"}
                          and _takes(attributes["opaque"]))
                return (ferrax_rule if ferrax else stock_rule)(ctx, *operands, **attributes)

        return rule

    return ffi_lowering


# ---- ferrax.kernel_call: a kernel of the caller's PTX, typed attributes. ----

#: The scalar types a kernel parameter takes by value (the target's ``scalars`` dtypes).
SCALAR_DTYPES = tuple(map(np.dtype, (np.bool_, np.int32, np.uint32, np.int64, np.uint64,
                                     np.float32, np.float64)))


def _dims(what: str, name: str, value) -> tuple[int, int, int]:
    dims = (value,) if not isinstance(value, (tuple, list)) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) for d in dims):
        raise TypeError(f"ferrax.kernel_call: kernel {name}: {what} must be an int or 1 to 3 "
                        f"ints, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


def _ptx_text(ptx) -> str:
    if isinstance(ptx, os.PathLike):
        return pathlib.Path(ptx).read_text()
    if isinstance(ptx, bytes):
        return ptx.decode()
    if isinstance(ptx, str):
        # PTX text declares entries; anything else is a path to it.
        return ptx if ".entry" in ptx else pathlib.Path(ptx).read_text()
    raise TypeError(f"ferrax.kernel_call: ptx must be PTX text or a path to it, got "
                    f"{type(ptx).__name__}")


def _scalar(name: str, index: int, value) -> tuple[int, str, bytes]:
    """A by-value parameter as the primitive keeps it: index, dtype, bytes (hashable, and
    equal for equal bits, NaN included)."""
    if isinstance(value, np.generic):
        dtype = value.dtype  # numpy scalars keep their exact type
    else:
        # Python scalars take jax's default types (32-bit unless x64 is enabled).
        dtype = dtypes.canonicalize_dtype(np.asarray(value).dtype)
    if dtype not in SCALAR_DTYPES:
        raise TypeError(f"ferrax.kernel_call: kernel {name}: parameter {index} is a {dtype} "
                        f"scalar; by value the target passes "
                        f"{', '.join(d.name for d in SCALAR_DTYPES)}")
    return index, dtype.name, np.asarray(value, dtype).tobytes()


def kernel_call(*args, ptx, name: str, out_shape, grid, block, shared_mem_bytes: int = 0):
    """Calls the kernel ``name`` of the PTX module ``ptx`` on the GPU, from ``jit`` or not.

    The kernel's parameters are ``args`` in order, then one pointer per result: an array
    argument passes its device address (row-major, as jax lays it out), a scalar (a Python or
    NumPy ``bool``, integer or float) passes by value (NumPy scalars with their own type, one
    of bool, int32, uint32, int64, uint64, float32, float64; Python scalars as jax types them:
    32-bit unless ``jax_enable_x64``). ``ptx`` is PTX text, or a path to it (a ``str`` without
    ``.entry`` in it, or an ``os.PathLike``). ``out_shape`` is a ``jax.ShapeDtypeStruct`` (one
    result) or a sequence of them. ``grid`` and ``block`` are an int or up to three; the
    launch has ``shared_mem_bytes`` of dynamic shared memory (over 48 KiB opts in).

    Under ``vmap`` the kernel runs once per batch element, on that element of each array (an
    argument that is not mapped is broadcast), so a kernel written for one problem needs no
    change; XLA may split such a batch across devices. ``ferrax.export`` keeps the call (the
    artifact needs ferrax and a CUDA GPU where it runs). It has no derivative.

    Before launch, the target reads the entry's ``.param`` list from the PTX and refuses, with
    an error naming the kernel, a call whose parameters differ in number or size, an entry the
    PTX does not define, and a grid or block past CUDA's limits. Lowered for CUDA only.
    """
    ptx_text = _ptx_text(ptx)
    if not isinstance(name, str) or not name:
        raise TypeError(f"ferrax.kernel_call: name must be the entry's name, got {name!r}")
    multiple = isinstance(out_shape, (list, tuple))
    outs = tuple(out_shape) if multiple else (out_shape,)
    if not outs:
        raise ValueError(f"ferrax.kernel_call: kernel {name}: no results (out_shape is empty)")
    out_avals = tuple(core.ShapedArray(tuple(o.shape), dtypes.dtype(o.dtype)) for o in outs)
    arrays, params, scalars = [], [], []
    for index, arg in enumerate(args):
        if isinstance(arg, (bool, int, float, np.generic)):
            params.append(-1)
            scalars.append(_scalar(name, index, arg))
        else:
            params.append(len(arrays))
            arrays.append(arg)
    params += [len(arrays) + i for i in range(len(outs))]
    results = kernel_call_p.bind(
        *arrays, ptx=ptx_text, name=name, grid=_dims("grid", name, grid),
        block=_dims("block", name, block), shared_mem_bytes=int(shared_mem_bytes),
        params=tuple(params), scalars=tuple(scalars), out_avals=out_avals, batch_shape=())
    return list(results) if multiple else results[0]


def _abstract_eval(*operands, out_avals, batch_shape, name, **_):
    rank = len(batch_shape)
    if any(tuple(a.shape[:rank]) != tuple(batch_shape) for a in operands):
        raise TypeError(f"{_targets.KERNEL_CALL}: kernel {name}: every operand must lead with "
                        f"the batch {batch_shape}, got {[a.shape for a in operands]}")
    return tuple(core.ShapedArray((*batch_shape, *o.shape), o.dtype) for o in out_avals)


def _batch(args, dims, *, batch_shape, **params):
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    args = [batching.bdim_at_front(x, d, size) for x, d in zip(args, dims)]
    out = kernel_call_p.bind(*args, batch_shape=(size, *batch_shape), **params)
    return out, (0,) * len(out)


def _cuda_lowering(ctx, *operands, ptx, name, grid, block, shared_mem_bytes, params, scalars,
                   out_avals, batch_shape):
    del out_avals  # the results' types are ctx.avals_out
    lowering = jax.ffi.ffi_lowering(
        _targets.KERNEL_CALL, extra_attributes=batch_partitioning(ctx, len(batch_shape)))
    return lowering(
        ctx, *operands, ptx=ptx, entry=name, grid=np.array(grid, np.int64),
        block=np.array(block, np.int64), shared_mem_bytes=np.int64(shared_mem_bytes),
        params=np.array(params, np.int64),
        scalars={str(i): _scalar_attribute(np.frombuffer(value, dtype)[0])
                 for i, dtype, value in scalars},
        num_batch_dims=np.int64(len(batch_shape)))


def _scalar_attribute(value: np.generic):
    """A typed scalar attribute; u64 values past 2**63 as their bits (jax's converter takes
    them through a signed 64-bit integer and fails)."""
    if value.dtype == np.uint64:
        return ir.IntegerAttr.get(ir.IntegerType.get_unsigned(64), int(value.view(np.int64)))
    return value


def _no_cuda_lowering(ctx, *operands, name, **_):
    platforms = ", ".join(ctx.module_context.platforms)
    raise NotImplementedError(
        f"ferrax.kernel_call: kernel {name} is PTX, which runs on CUDA GPUs; this computation "
        f"is lowered for {platforms}")


#: One launch per batch element of a kernel of the caller's PTX (``kernel_call``).
kernel_call_p = core.Primitive(_targets.KERNEL_CALL)
kernel_call_p.multiple_results = True
kernel_call_p.def_impl(partial(dispatch.apply_primitive, kernel_call_p))
kernel_call_p.def_abstract_eval(_abstract_eval)
batching.primitive_batchers[kernel_call_p] = _batch
mlir.register_lowering(kernel_call_p, _cuda_lowering, platform="cuda")
for _platform in ("cpu", "rocm", "tpu"):
    mlir.register_lowering(kernel_call_p, _no_cuda_lowering, platform=_platform)
