"""Compiled-kernel calls: jaxlib's Triton kernel-call payloads (what jax-triton's
``triton_call`` lowers to) read and checked on the host by the library's own decoder, the one
its CUDA target uses."""

import json

from ferrax import _library


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
