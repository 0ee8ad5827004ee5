"""What Python takes from libferrax by name: the FFI targets it lowers to and the limits of
the kernels it routes by.

Every target name the package uses is declared here, once, with the platforms it is lowered
on; ``import ferrax`` checks each against the library's own table (``ferrax_targets``) and
fails if the library lacks one, rather than a later compilation. Limits that are facts of the
Rust kernels come from the library's ``ferrax_limits`` table (``src/capi/limits.rs``), not
copies; limits that are Python's own measured routing choices are in ``_install``'s routing
table.
"""

from __future__ import annotations

from ferrax import _library

_TABLE = {(name, platform.lower()) for name, platform, _ in _library.targets()}
_LIMITS = _library.limits()


def _target(name: str, *platforms: str) -> str:
    missing = [platform for platform in platforms if (name, platform) not in _TABLE]
    if missing:
        raise ImportError(f"ferrax: {_library.library()._name} has no {name} target for "
                          f"{', '.join(missing)}; rebuild the library")
    return name


def _limit(name: str) -> int:
    if name not in _LIMITS:
        raise ImportError(f"ferrax: {_library.library()._name} has no limit {name}; "
                          "rebuild the library")
    return _LIMITS[name]


# ferrax's own primitives (``_primitives``), one target each.
GETRF = _target("ferrax_getrf", "cpu", "cuda")
GETRF_ROW_MAJOR = _target("ferrax_getrf_row_major", "cpu", "cuda")
LU_PIVOTS_TO_PERMUTATION = _target("ferrax_lu_pivots_to_permutation", "cpu", "cuda")
THREEFRY2X32 = _target("ferrax_threefry2x32", "cpu", "cuda")
THREEFRY2X32_BITS = _target("ferrax_threefry2x32_bits", "cuda")
CHOLESKY_UPDATE = _target("ferrax_cholesky_update", "cuda")
CHOLESKY = _target("ferrax_cholesky", "cpu", "cuda")
QR = _target("ferrax_qr", "cpu", "cuda")
LU_SOLVE = _target("ferrax_lu_solve", "cpu")
#: The platforms the RNN targets have handlers on.
RNN_PLATFORMS = ("cpu", "cuda")
RNN = _target("ferrax_rnn", *RNN_PLATFORMS)
RNN_BWD = _target("ferrax_rnn_bwd", *RNN_PLATFORMS)

# Targets with jaxlib's LAPACK contract, which jax's own rules lower to (``_install``).
POTRF = _target("ferrax_potrf", "cpu", "cuda")
TRSM = _target("ferrax_trsm", "cpu")
GEQRF = _target("ferrax_geqrf", "cpu", "cuda")
ORGQR = _target("ferrax_orgqr", "cpu", "cuda")
ORMQR = _target("ferrax_ormqr", "cpu", "cuda")
GEQP3 = _target("ferrax_geqp3", "cpu")
SYEVD = _target("ferrax_syevd", "cpu")
GESDD = _target("ferrax_gesdd", "cpu")
GESVD = _target("ferrax_gesvd", "cpu")
GEHRD = _target("ferrax_gehrd", "cpu")
SYTRD = _target("ferrax_sytrd", "cpu")
GEEV = _target("ferrax_geev", "cpu")
GEES = _target("ferrax_gees", "cpu")
GTSV = _target("ferrax_gtsv", "cpu")
# Targets jax's rules name outright, which ferrax's rules name instead.
TRIDIAGONAL_SOLVE_PERTURBED = _target("ferrax_tridiagonal_solve_perturbed", "cpu", "cuda")
# jaxlib's cuSPARSE gtsv2 contract (x aliases b), on ferrax's kernel.
TRIDIAGONAL_SOLVE = _target("ferrax_tridiagonal_solve", "cuda")
CSR_SPARSE_DENSE = _target("ferrax_csr_sparse_dense", "cpu", "cuda")
# Targets for jax rules that call no kernel (XLA ops), which ferrax's rules call instead.
COO_SPARSE_DENSE = _target("ferrax_coo_sparse_dense", "cpu", "cuda")
SPSOLVE = _target("ferrax_spsolve", "cpu", "cuda")
# jaxlib's Triton kernel-call contract, which jax-triton's calls lower to (``_kernel_call``).
TRITON_KERNEL_CALL = _target("ferrax_triton_kernel_call", "cuda")
# Kernels of the caller's PTX with typed attributes (``ferrax.kernel_call``).
KERNEL_CALL = _target("ferrax_kernel_call", "cuda")

#: The largest order ``ferrax_cholesky`` takes on CUDA (its fused kernels); past it the
#: handler fails.
FUSED_CHOLESKY_BLOCK_MAX = _limit("FUSED_CHOLESKY_BLOCK_MAX")
