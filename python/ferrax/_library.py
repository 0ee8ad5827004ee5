"""Loading libferrax.so and filling its LAPACK table.

The library has no Python dependency; it is loaded with ctypes. LAPACK comes from SciPy's
``cython_lapack`` capsules, the same OpenBLAS jaxlib uses, so no second BLAS enters the process.
"""

from __future__ import annotations

import ctypes
import functools
import os
import pathlib

_LIBRARY_NAME = "libferrax.so"
ABI_VERSION = 1


class FerraxTarget(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("platform", ctypes.c_char_p),
        ("handler", ctypes.c_void_p),
    ]


class FerraxLimit(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("value", ctypes.c_uint64),
    ]


def _candidate_paths() -> list[pathlib.Path]:
    here = pathlib.Path(__file__).resolve().parent
    paths = []
    if os.environ.get("FERRAX_LIBRARY"):
        paths.append(pathlib.Path(os.environ["FERRAX_LIBRARY"]))
    # An installed wheel (setuptools-rust names the file with the build's extension suffix;
    # the library itself does not depend on the Python version).
    paths.extend(sorted(here.glob("libferrax*.so")))
    paths.append(here.parent.parent / "target" / "release" / _LIBRARY_NAME)  # source checkout
    return paths


@functools.cache
def library() -> ctypes.CDLL:
    """The loaded libferrax.so (FERRAX_LIBRARY, the package directory, or target/release)."""
    tried = _candidate_paths()
    path = next((p for p in tried if p.is_file()), None)
    if path is None:
        raise ImportError(
            "ferrax: libferrax.so not found; tried " + ", ".join(map(str, tried))
            + ". Build it with `cargo build --release` or install the package with pip.")
    lib = ctypes.CDLL(str(path))
    lib.ferrax_abi_version.restype = ctypes.c_uint32
    if lib.ferrax_abi_version() != ABI_VERSION:
        raise ImportError(
            f"ferrax: {path} has ABI version {lib.ferrax_abi_version()}, "
            f"this package expects {ABI_VERSION}; rebuild the library")
    lib.ferrax_targets.restype = ctypes.POINTER(FerraxTarget)
    lib.ferrax_targets.argtypes = [ctypes.POINTER(ctypes.c_size_t)]
    if not hasattr(lib, "ferrax_limits"):
        raise ImportError(f"ferrax: {path} predates the ferrax_limits table; rebuild the library")
    lib.ferrax_limits.restype = ctypes.POINTER(FerraxLimit)
    lib.ferrax_limits.argtypes = [ctypes.POINTER(ctypes.c_size_t)]
    lib.ferrax_lapack_register.restype = ctypes.c_int
    lib.ferrax_lapack_register.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    lib.ferrax_lapack_missing_count.restype = ctypes.c_size_t
    lib.ferrax_last_error.restype = ctypes.c_char_p
    lib.ferrax_rnn_sizes.restype = ctypes.c_int
    lib.ferrax_rnn_sizes.argtypes = [ctypes.c_int, *[ctypes.c_int64] * 3, ctypes.c_int,
                                     *[ctypes.c_int64] * 2, *[ctypes.POINTER(ctypes.c_uint64)] * 2]
    lib.ferrax_kernel_call_describe.restype = ctypes.c_int
    lib.ferrax_kernel_call_describe.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                                ctypes.POINTER(ctypes.c_char_p)]
    return lib


def targets() -> list[tuple[str, str, int]]:
    """(target name, JAX platform, handler address) for every handler in the library."""
    count = ctypes.c_size_t()
    table = library().ferrax_targets(ctypes.byref(count))
    return [(table[i].name.decode(), table[i].platform.decode(), table[i].handler)
            for i in range(count.value)]


def limits() -> dict[str, int]:
    """The library's kernel limits: Rust constant name -> value (``src/capi/limits.rs``)."""
    count = ctypes.c_size_t()
    table = library().ferrax_limits(ctypes.byref(count))
    return {table[i].name.decode(): table[i].value for i in range(count.value)}


def rnn_sizes(mode: int, input_size: int, hidden_size: int, num_layers: int,
              bidirectional: bool, batch: int, steps: int) -> tuple[int, int]:
    """The RNN targets' packed weight count and full reserve length, in scalars of the
    computation (``ferrax_rnn_sizes``); ValueError for an invalid network."""
    weights, reserve = ctypes.c_uint64(), ctypes.c_uint64()
    lib = library()
    if lib.ferrax_rnn_sizes(mode, input_size, hidden_size, num_layers, int(bool(bidirectional)),
                            batch, steps, ctypes.byref(weights), ctypes.byref(reserve)):
        raise ValueError(lib.ferrax_last_error().decode())
    return weights.value, reserve.value


def describe_kernel_call(opaque: bytes, compressed: bool = True) -> str:
    """The JSON description of a kernel-call payload (``ferrax_kernel_call_describe``);
    ValueError naming the kernel where the CUDA target would refuse it."""
    json = ctypes.c_char_p()
    lib = library()
    if lib.ferrax_kernel_call_describe(opaque, len(opaque), int(compressed), ctypes.byref(json)):
        raise ValueError(lib.ferrax_last_error().decode())
    return json.value.decode()


def _capsule_pointer(capsule) -> tuple[str, int]:
    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype = ctypes.c_char_p
    api.PyCapsule_GetName.argtypes = [ctypes.py_object]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    name = api.PyCapsule_GetName(capsule)
    return name.decode(), api.PyCapsule_GetPointer(capsule, name)


def fill_lapack_from_scipy() -> int:
    """Registers SciPy's LAPACK and BLAS routines in the library's table; returns how many it
    took."""
    from scipy.linalg import cython_blas, cython_lapack

    lib = library()
    taken = 0
    capsules = {**cython_blas.__pyx_capi__, **cython_lapack.__pyx_capi__}
    for routine, capsule in capsules.items():
        signature, pointer = _capsule_pointer(capsule)
        # The table expects LP64 (32-bit int) routines; an ILP64 SciPy build uses int64.
        if "int64" in signature or "long" in signature:
            raise RuntimeError(
                f"ferrax: scipy's LAPACK is ILP64 ({routine}: {signature}); ferrax needs LP64")
        taken += lib.ferrax_lapack_register(routine.encode(), pointer)
    _register_openblas_thread_control(lib)
    return taken


def _register_openblas_thread_control(lib) -> None:
    """Lets ferrax keep OpenBLAS single-threaded inside its parallel batch loops, through the
    `openblas_set_num_threads_local` of the OpenBLAS that SciPy's wheel bundles (absent from
    other builds, which then keep their own threading)."""
    import scipy

    libs = pathlib.Path(scipy.__file__).resolve().parent.parent / "scipy.libs"
    for path in sorted(libs.glob("libscipy_openblas*.so")):
        openblas = ctypes.CDLL(str(path))  # already loaded by SciPy: the same library
        setter = getattr(openblas, "openblas_set_num_threads_local", None)
        if setter is not None:
            address = ctypes.cast(setter, ctypes.c_void_p).value
            lib.ferrax_lapack_register(b"openblas_set_num_threads_local", address)
            return


def lapack_missing_count() -> int:
    return library().ferrax_lapack_missing_count()
