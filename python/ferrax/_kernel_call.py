"""Compiled-kernel calls: jaxlib's Triton kernel-call payloads (what jax-triton's
``triton_call`` lowers to) read and checked on the host by the library's own decoder, the one
its CUDA target uses; and the lowering install() puts in place so that jax-triton's calls
reach that target."""

import json

from ferrax import _export, _library, _targets


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
    """Whether ferrax's target launches this payload: one kernel call (no autotuned set) without
    TMA descriptors; what it refuses, or cannot read, stays on jaxlib's target."""
    try:
        described = describe_triton_call(opaque)
    except (ValueError, TypeError):
        return False
    return described["autotune"] is None and all(
        p["kind"] != "tma" for call in described["calls"] for p in call["params"])


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
