"""Kernel-call payloads (#26): ferrax's decoder and checks (``ferrax.describe_triton_call``,
the code its CUDA target runs at instantiation) against payloads built by jaxlib's own
serializer, the ``_triton`` module of jax's CUDA plugin that jax-triton's ``triton_call``
lowering calls (``TritonKernel``, ``create_*_parameter``, ``TritonKernelCall.to_proto``, then
``zlib.compress``). ``scripts/setup-env`` unpacks that plugin beside the venv (not installed:
jax would start its CUDA backend).

Every payload is built from fresh random values: names, grids, warps, shared memory, scalars
of each type, zeroed bytes and divisibility; the description must give them all back, and the
PTX entry's ``.param`` list must be read as written.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import sys
import zlib

import numpy as np
import pytest

import ferrax
from helpers import triton_like_call, triton_payloads


def _serializer():
    root = pathlib.Path(sys.prefix) / "cuda-plugin"
    for package in ("jax_cuda13_plugin", "jax_cuda12_plugin"):
        if (root / package).is_dir():
            sys.path.insert(0, str(root))
            try:
                return importlib.import_module(f"{package}._triton")
            finally:
                sys.path.remove(str(root))
    if os.environ.get("CI"):
        pytest.fail(f"jaxlib's Triton serializer is not unpacked at {root} (scripts/setup-env)")
    pytest.skip(f"jaxlib's Triton serializer is not unpacked at {root} (scripts/setup-env)")


@pytest.fixture(scope="module")
def triton():
    return _serializer()


# PTX `.param` declarations per parameter kind, as Triton and rustc write them.
_DECL = {"array": ".u64 .ptr .global .align 1", "bool": ".u8", "i32": ".u32", "u32": ".u32",
         "i64": ".u64", "u64": ".u64", "f32": ".f32", "f64": ".f64",
         "tma": ".align 64 .b8"}
# The serializer's type names (jax-triton's), by the description's.
_SERIALIZER_TYPE = {"bool": "i1", "f32": "fp32", "f64": "fp64"}
_SIZE = {"array": 8, "bool": 1, "i32": 4, "u32": 4, "i64": 8, "u64": 8, "f32": 4, "f64": 8,
         "tma": 128}


def _ptx(name: str, kinds: list[str], trailing: int = 2) -> str:
    decls = []
    for i, kind in enumerate(kinds + ["array"] * trailing):
        suffix = "[128]" if kind == "tma" else ""
        decls.append(f"\t.param {_DECL[kind]} {name}_param_{i}{suffix}")
    body = ",\n".join(decls)
    return (f"//\n// Generated for a test\n.version 8.4\n.target sm_90\n.address_size 64\n\n"
            f"\t// .globl\t{name}\n.visible .entry {name}(\n{body}\n)\n{{\n\tret;\n}}\n")


def _random_params(triton, rng, count: int):
    """(serializer parameters, expected description) of `count` random parameters."""
    made, expected = [], []
    for kind in rng.choice(["array", "bool", "i32", "u32", "i64", "u64", "f32", "f64"],
                           size=count):
        kind = str(kind)
        if kind == "array":
            zero, divisibility = int(rng.integers(0, 1 << 40)), int(rng.choice([0, 16]))
            made.append(triton.create_array_parameter(zero, divisibility))
            expected.append({"kind": "array", "bytes_to_zero": zero,
                             "divisibility": divisibility})
            continue
        if kind == "bool":
            value = bool(rng.integers(2))
        elif kind in ("f32", "f64"):
            value = float(rng.standard_normal() * 10.0 ** rng.integers(-30, 30))
            if rng.integers(8) == 0:
                value = float(rng.choice([np.inf, -np.inf]))
            if kind == "f32":
                value = float(np.float32(value))
        else:
            info = np.iinfo({"i32": np.int32, "u32": np.uint32, "i64": np.int64,
                             "u64": np.uint64}[kind])
            value = int(rng.integers(info.min, info.max, dtype=info.dtype, endpoint=True))
        made.append(triton.create_scalar_parameter(value, _SERIALIZER_TYPE.get(kind, kind)))
        expected.append({"kind": kind, "value": value})
    return made, expected


def _kernel(triton, name, warps, ctas, shared, ptx, capability=90, scratch=None):
    if scratch is None:
        return triton.TritonKernel(name, warps, ctas, shared, ptx, "", capability)
    return triton.TritonKernel(name, warps, ctas, shared, ptx, "", capability, *scratch)


def _random_call(triton, rng, name=None):
    name = name or f"kernel_{rng.integers(1 << 30)}"
    made, expected = _random_params(triton, rng, int(rng.integers(0, 12)))
    kinds = [p["kind"] for p in expected]
    warps, ctas = int(rng.choice([1, 2, 4, 8, 16, 32])), 1
    shared = int(rng.integers(0, 200_000))
    grid = [int(rng.integers(1, 1 << 20)), int(rng.integers(1, 65536)),
            int(rng.integers(1, 65536))]
    ptx = _ptx(name, kinds, trailing=int(rng.integers(0, 3)))
    call = triton.TritonKernelCall(_kernel(triton, name, warps, ctas, shared, ptx), *grid, made)
    described = {
        "kernel": name, "code": "ptx", "threads_per_block": 32 * warps,
        "ctas_per_cluster": ctas, "shared_mem_bytes": shared, "compute_capability": 90,
        "global_scratch": None, "grid": grid, "params": expected,
    }
    return call, described, kinds


def _entry(kinds, trailing):
    return [[_SIZE[k], 64 if k == "tma" else _SIZE[k]] for k in kinds] + [[8, 8]] * trailing


def test_a_plain_call_is_read_back_whole(triton, rng):
    for _ in range(20):
        call, described, kinds = _random_call(triton, rng)
        metadata = rng.bytes(int(rng.integers(0, 64)))
        opaque = zlib.compress(call.to_proto("user name", metadata))
        got = ferrax.describe_triton_call(opaque)
        entry = got["calls"][0].pop("entry_params")
        assert entry[:len(kinds)] == _entry(kinds, 0)
        assert entry[len(kinds):] in ([], [[8, 8]], [[8, 8], [8, 8]])
        assert got == {"name": "user name", "metadata_bytes": len(metadata),
                       "buffers": kinds.count("array"), "autotune": None,
                       "calls": [{"description": None, **described}]}
        # The bare proto reads the same.
        bare = ferrax.describe_triton_call(call.to_proto("user name", metadata),
                                           compressed=False)
        bare["calls"][0].pop("entry_params")
        assert bare == got


def test_an_autotuned_call_keeps_every_configuration(triton, rng):
    name = "tuned_kernel"
    first, described, kinds = _random_call(triton, rng, name)
    configs, expected = [(first, "config 0")], [{"description": "config 0", **described}]
    made_params = [p for p in described["params"]]
    for i in range(1, 4):
        # Same parameters, other launch shapes (as an autotuner's configurations are).
        warps, grid = 2 ** i, [i, 1, 1]
        ptx = _ptx(name, kinds)
        params, _ = _params_like(triton, made_params)
        call = triton.TritonKernelCall(_kernel(triton, name, warps, 1, 0, ptx), *grid, params)
        configs.append((call, f'config "{i}"'))
        expected.append({**described, "description": f'config "{i}"',
                         "threads_per_block": 32 * warps, "shared_mem_bytes": 0,
                         "grid": grid})
    buffers = kinds.count("array")
    aliases = [(int(rng.integers(buffers)), int(rng.integers(buffers)), int(rng.integers(1 << 40)))
               for _ in range(2 if buffers else 0)]
    tuned = triton.TritonAutotunedKernelCall("autotune name", configs, aliases)
    got = ferrax.describe_triton_call(zlib.compress(tuned.to_proto("n", b"")))
    for call in got["calls"]:
        call.pop("entry_params")
    assert got == {"name": "n", "metadata_bytes": 0, "buffers": buffers,
                   "autotune": {"name": "autotune name", "aliases": [list(a) for a in aliases]},
                   "calls": expected}


def _params_like(triton, described):
    made = []
    for p in described:
        if p["kind"] == "array":
            made.append(triton.create_array_parameter(p["bytes_to_zero"], p["divisibility"]))
        else:
            made.append(triton.create_scalar_parameter(
                p["value"], _SERIALIZER_TYPE.get(p["kind"], p["kind"])))
    return made, described


def test_tma_descriptors_clusters_and_global_scratch(triton, rng, installed):
    if not hasattr(triton, "create_tma_descriptor_parameter"):
        pytest.skip("this jaxlib's serializer predates TMA descriptors and global scratch")
    shape = [int(v) for v in rng.integers(1, 1 << 16, size=2)]
    strides = [int(shape[1]) * 4]
    block = [int(v) for v in rng.choice([8, 16, 32, 64], size=2)]
    tma = triton.create_tma_descriptor_parameter(7, 3, shape, strides, block, 1)
    # jax-triton's layout: the descriptor, then its shape (i32) and strides (i64).
    dims = [triton.create_scalar_parameter(d, "i32") for d in shape]
    steps = [triton.create_scalar_parameter(s, "i64") for s in [strides[0], 1]]
    kinds = ["tma", "i32", "i32", "i64", "i64", "array"]
    name = "tma_kernel"
    scratch = (int(rng.integers(1, 4096)), 128)
    kernel = _kernel(triton, name, 4, 2, 1024, _ptx(name, kinds), scratch=scratch)
    out = triton.create_array_parameter(0, 16)
    call = triton.TritonKernelCall(kernel, 3, 2, 1, [tma, *dims, *steps, out])
    payload = zlib.compress(call.to_proto("", b""))
    got = ferrax.describe_triton_call(payload)
    (c,) = got["calls"]
    assert got["buffers"] == 2
    assert c["ctas_per_cluster"] == 2 and c["global_scratch"] == list(scratch)
    assert c["params"][0] == {"kind": "tma", "elem_type": 7, "swizzle": 3, "shape": shape,
                              "strides": strides, "block_shape": block, "oob_fill": 1}
    assert c["entry_params"] == _entry(kinds, 2)
    # ferrax's target builds no TMA descriptor yet: such a call, alone or as a configuration of
    # an autotuned set, stays on jaxlib's target.
    tuned = triton.TritonAutotunedKernelCall("with tma", [(call, "tma")], [])
    for opaque in (payload, zlib.compress(tuned.to_proto("", b""))):
        assert _lowered_targets(opaque) == ["triton_kernel_call"]


def test_calls_the_target_would_refuse_are_errors_naming_the_kernel(triton, rng):
    made, expected = _random_params(triton, rng, 6)
    kinds = [p["kind"] for p in expected]

    def describe(name="k", ptx=None, grid=(1, 1, 1), warps=4, params=made):
        ptx = _ptx("k", kinds) if ptx is None else ptx
        call = triton.TritonKernelCall(_kernel(triton, name, warps, 1, 0, ptx), *grid, params)
        return ferrax.describe_triton_call(zlib.compress(call.to_proto("", b"")))

    assert describe()["calls"][0]["kernel"] == "k"
    wrong = kinds[:]
    wrong[0] = "f64" if _SIZE[wrong[0]] != 8 else "f32"
    cases = [
        ({"name": "other"}, "kernel other: the PTX defines no entry of that name"),
        ({"ptx": _ptx("k", wrong)}, "kernel k: the call's parameters"),
        ({"ptx": _ptx("k", kinds[:-1], trailing=0)}, "do not match the entry's .param list"),
        ({"grid": (0, 1, 1)}, "kernel k: grid [0, 1, 1]"),
        ({"grid": (1, 65536, 1)}, "kernel k: grid [1, 65536, 1]"),
        ({"warps": 64}, "kernel k: num_warps = 64"),
        ({"warps": 0}, "kernel k: num_warps = 0"),
        ({"ptx": ""}, "kernel k: neither PTX nor a compiled module"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(".", r"\.")):
            describe(**change)


def test_bytes_that_are_no_payload_are_errors(triton, rng):
    call, _, _ = _random_call(triton, rng)
    opaque = zlib.compress(call.to_proto("", b""))
    for bad in [b"", rng.bytes(100), opaque[: len(opaque) // 2]]:
        with pytest.raises(ValueError, match="opaque: expected a zlib-compressed"):
            ferrax.describe_triton_call(bad)
    with pytest.raises(ValueError, match="opaque: (not a TritonAnyKernelCall|the proto holds)"):
        ferrax.describe_triton_call(zlib.compress(b"\xff\xff\xff\xff"))


def test_real_triton_payloads():
    """jax-triton's lowering for CUDA of two Triton kernels (real Triton PTX, made on a host
    without a GPU by tests/data/make_triton_payloads.py): what the generator asked for comes
    back, and Triton's entries declare the call's parameters and then the two pointers."""
    plain, tuned = triton_payloads()["plain"], triton_payloads()["tuned"]
    got = ferrax.describe_triton_call(plain)
    (call,) = got["calls"]
    n = 1000
    assert (got["buffers"], got["autotune"]) == (3, None)
    assert (call["kernel"], call["grid"], call["threads_per_block"]) == ("scaled_add",
                                                                          [8, 1, 1], 128)
    array = {"kind": "array", "bytes_to_zero": 0, "divisibility": 16}
    # The constant 2 stays a parameter; jax-triton passes a float64 scalar as f32; the zeroed
    # output's bytes are its size.
    assert call["params"] == [array, array, {"kind": "i32", "value": n},
                              {"kind": "f32", "value": 2.5}, {"kind": "f32", "value": -0.75},
                              {"kind": "i32", "value": 2}, {**array, "bytes_to_zero": 4 * n}]
    assert call["entry_params"] == _entry(["array", "array", "i32", "f32", "f32", "i32",
                                           "array"], 2)

    got = ferrax.describe_triton_call(tuned)
    assert got["buffers"] == 2 and got["autotune"]["aliases"] == []
    assert [(c["threads_per_block"], c["grid"]) for c in got["calls"]] == [
        (64, [-(-n // 64), 1, 1]), (256, [-(-n // 256), 1, 1])]
    for c in got["calls"]:
        assert c["params"] == [array, {"kind": "i32", "value": n}, array]
        assert c["entry_params"] == _entry(["array", "i32", "array"], 2)


# --- install(): jax-triton's calls lowered to ferrax's target -------------------------------

def _lowered_targets(opaque: bytes, *, extra=None, export=None) -> list[str]:
    """The custom-call targets of a call lowered for CUDA as jax-triton's ``triton_call`` is, on
    this machine without a GPU."""
    import re

    import jax.numpy as jnp

    f = triton_like_call(opaque, **(extra or {}))
    x = jnp.ones(1000, jnp.float32)
    if export is None:
        text = f.trace(x, x).lower(lowering_platforms=("cuda",)).as_text()
    else:
        text = export(f, platforms=["cuda"])(x, x).mlir_module()
    return re.findall(r"custom_call @(\w+)", text)


def test_install_lowers_jax_triton_calls_to_ferrax(installed):
    import jax

    payloads = triton_payloads()
    plain, tuned = payloads["plain"], payloads["tuned"]
    assert _lowered_targets(plain) == ["ferrax_triton_kernel_call"]
    assert _lowered_targets(plain, export=ferrax.export) == ["ferrax_triton_kernel_call"]
    assert _lowered_targets(tuned) == ["ferrax_triton_kernel_call"]
    # What ferrax's target does not launch (extra attributes, payloads it refuses) and plain
    # exports stay on jaxlib's target.
    assert _lowered_targets(plain, extra={"cost_estimate_json": "{}"}) == ["triton_kernel_call"]
    assert _lowered_targets(plain[:-4]) == ["triton_kernel_call"]
    # A plain export keeps jaxlib's target, which jax refuses to export (no compatibility
    # guarantee), as it does without ferrax.
    with pytest.raises(ValueError, match="triton_kernel_call"):
        _lowered_targets(plain, export=jax.export.export)
    ferrax.uninstall()
    try:
        assert _lowered_targets(plain) == ["triton_kernel_call"]
    finally:
        ferrax.install()
