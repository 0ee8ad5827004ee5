"""What ferrax.install() lowers jax's GPU primitives to, checked by lowering for CUDA on any
machine (no GPU needed): ferrax's kernels where gpu_thresholds.json says they win, jaxlib's
cuSOLVER targets above."""

import re

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax._src.lax import linalg as lax_linalg  # geqrf: not exported by jax.lax.linalg

import ferrax
from helpers import (assert_valid_cholesky, assert_valid_lu, assert_valid_qr_r, extended,
                     gamma)


def cuda_targets(fn, *avals):
    text = jax.jit(fn).trace(*avals).lower(lowering_platforms=("cuda",)).as_text()
    return set(re.findall(r"custom_call @(\w+)", text)) | set(
        re.findall(r'call_target_name = "(\w+)"', text))


def spec(shape, dtype):
    return jax.ShapeDtypeStruct(shape, np.dtype(dtype))


@pytest.mark.parametrize("dtype, n, ours", [(np.float32, 16, True), (np.float64, 8, True),
                                            (np.float32, 32, False), (np.complex64, 16, True),
                                            (np.complex64, 32, False), (np.complex128, 128, False)])
def test_lu(installed, dtype, n, ours):
    got = cuda_targets(jax.lax.linalg.lu, spec((100, n, n), dtype))
    assert got == ({"ferrax_getrf_row_major", "ferrax_lu_pivots_to_permutation"} if ours
                   else {"cusolver_getrf_ffi", "ferrax_lu_pivots_to_permutation"})


@pytest.mark.parametrize("dtype, n, ours", [(np.float32, 8, True), (np.float64, 32, True),
                                            (np.float64, 33, False), (np.complex128, 16, True),
                                            (np.complex128, 32, False)])
def test_cholesky(installed, dtype, n, ours):
    # ferrax's whole cholesky in one call (n <= 32, where ferrax takes potrf at all).
    got = cuda_targets(jnp.linalg.cholesky, spec((10, n, n), dtype))
    assert got == ({"ferrax_cholesky"} if ours else {"cusolver_potrf_ffi"})
    unsymmetrized = cuda_targets(lambda a: jax.lax.linalg.cholesky(a, symmetrize_input=False),
                                 spec((10, n, n), dtype))
    assert unsymmetrized == got


def test_cholesky_past_the_fused_kernels_takes_jax_steps(installed):
    with ferrax._install.ferrax_on_gpu_everywhere():
        assert cuda_targets(jnp.linalg.cholesky, spec((3, 49, 49), np.float32)) == {"ferrax_potrf"}
        for n in (32, 33, 48):  # the lanes kernels, then the block kernel
            assert cuda_targets(jnp.linalg.cholesky, spec((3, n, n), np.complex128)) == {
                "ferrax_cholesky"}


def test_solve_and_det_use_the_small_kernels(installed):
    assert "ferrax_getrf_row_major" in cuda_targets(
        jnp.linalg.solve, spec((50, 8, 8), np.float32), spec((50, 8, 1), np.float32))
    assert "ferrax_getrf_row_major" in cuda_targets(jnp.linalg.det, spec((50, 8, 8), np.float64))


def test_uninstalled_is_stock():
    assert cuda_targets(jax.lax.linalg.lu, spec((4, 8, 8), np.float32)) == {
        "cusolver_getrf_ffi", "cu_lu_pivots_to_permutation"}
    assert cuda_targets(jnp.linalg.cholesky, spec((4, 8, 8), np.float32)) == {"cusolver_potrf_ffi"}
    assert cuda_targets(jnp.linalg.qr, spec((4, 8, 8), np.float32)) == {
        "cusolver_geqrf_ffi", "cusolver_orgqr_ffi"}


def test_explicit_getrf_lowers_to_ferrax_on_cuda():
    assert cuda_targets(ferrax.linalg.getrf, spec((4, 8, 8), np.float32)) == {"ferrax_getrf"}


@pytest.mark.parametrize("dtype, m, n, targets", [
    # Where ferrax takes both of jax's steps: one call for the whole qr.
    (np.float32, 32, 32, {"ferrax_qr"}),
    (np.float32, 32, 5, {"ferrax_qr"}),
    (np.complex128, 16, 16, {"ferrax_qr"}),
    # cuSOLVER's reflectors are LAPACK's format: ferrax's orgqr takes them.
    (np.complex128, 32, 32, {"cusolver_geqrf_ffi", "ferrax_orgqr"}),
    (np.float64, 64, 64, {"cusolver_geqrf_ffi", "cusolver_orgqr_ffi"})])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr(installed, dtype, m, n, targets, mode):
    assert cuda_targets(lambda a: jnp.linalg.qr(a, mode=mode), spec((100, m, n), dtype)) == targets


def test_qr_steps_keep_their_own_targets(installed):
    """jax's geqrf and householder_product primitives on their own stay ferrax's column-major
    targets; pivoted QR stays with jaxlib."""
    a = spec((100, 16, 12), np.float32)
    assert cuda_targets(lax_linalg.geqrf, a) == {"ferrax_geqrf"}
    assert cuda_targets(jax.lax.linalg.householder_product, a, spec((100, 12), np.float32)) == {
        "ferrax_orgqr"}
    assert "ferrax_qr" not in cuda_targets(
        lambda a: jax.lax.linalg.qr(a, pivoting=True), a)


def test_ormqr_stays_with_jaxlib_until_measured(installed):
    """ferrax_ormqr (a PTX kernel up to 128, cuSOLVER past it) has a threshold of 0 until the
    H200 sweep measures it."""
    specs = (spec((5, 40, 30), np.float32), spec((5, 30), np.float32), spec((5, 40, 8), np.float32))
    assert cuda_targets(jax.lax.linalg.ormqr, *specs) == {"cusolver_ormqr_ffi"}
    with ferrax._install.ferrax_on_gpu_everywhere():
        assert cuda_targets(jax.lax.linalg.ormqr, *specs) == {"ferrax_ormqr"}


@pytest.mark.parametrize("n", [128, 512])
def test_every_order_can_go_to_ferrax(installed, n):
    """Past the kernels ferrax's targets use cuSOLVER/cuBLAS; routed there on request."""
    with ferrax._install.ferrax_on_gpu_everywhere():
        assert cuda_targets(jax.lax.linalg.lu, spec((4, n, n), np.float64)) == {
            "ferrax_getrf_row_major", "ferrax_lu_pivots_to_permutation"}
        assert cuda_targets(jnp.linalg.cholesky, spec((4, n, n), np.complex64)) == {
            "ferrax_potrf"}
        assert cuda_targets(jnp.linalg.qr, spec((4, n, n), np.float32)) == {"ferrax_qr"}
    # The context restores the measured table.
    assert cuda_targets(jax.lax.linalg.lu, spec((4, n, n), np.float64)) == {
        "cusolver_getrf_ffi", "ferrax_lu_pivots_to_permutation"}


def test_cpu_and_cuda_export_round_trip(installed, random_matrix):
    """One exported module for both platforms: ferrax's CUDA targets in its CUDA branch, and
    (deserialized here, without a GPU) its CPU branch runs and gives valid factorizations, by
    their backward-error bounds (stock jax's agree only to the inputs' condition numbers)."""
    from jax import export

    a = random_matrix((6, 8, 8), np.float32)
    fn = lambda a: (jax.lax.linalg.lu(a)[::2], jnp.linalg.qr(a)[1], jnp.linalg.cholesky(a @ a.mT))
    exp = ferrax.export(jax.jit(fn), platforms=["cpu", "cuda"])(spec(a.shape, a.dtype))
    text = exp.mlir_module()
    targets = set(re.findall(r"custom_call @(\w+)", text)) | set(
        re.findall(r'call_target_name = "(\w+)"', text))
    # The one-call targets (both platforms); nothing of jaxlib's GPU targets.
    assert {"ferrax_getrf_row_major", "ferrax_qr", "ferrax_cholesky"} <= targets
    assert not any(t.startswith(("cu", "cusolver")) for t in targets), targets
    (lu, perm), r, lower = jax.tree.map(np.asarray, export.deserialize(exp.serialize()).call(a))
    assert_valid_lu(a, lu, perm)
    assert_valid_qr_r(a, r)
    # The factored a a^T is XLA's product, within gamma_n |a| |a^T| of the exact one.
    spd = extended(a) @ extended(a.mT)
    assert_valid_cholesky(spd, lower, slack=gamma(8, np.float32) * np.abs(extended(a)) @ np.abs(extended(a.mT)))


def _tridiagonal(batch, m, nrhs, dtype=np.float32):
    return [spec(batch + (m,), dtype)] * 3 + [spec(batch + (m, nrhs), dtype)]


@pytest.mark.parametrize("batch, m, nrhs, ours", [
    # Enough systems for one thread each to fill the GPU: ferrax's kernel, every order (jax
    # decomposes m <= 2 in XLA ops).
    ((2048,), 8, 1, True), ((4, 512), 2, 1, True), ((1024,), 100, 1, True),
    # Several right-hand sides: jaxlib would launch gtsv2 per system.
    ((2,), 64, 3, True),
    # Few systems with one right-hand side, or one system: cuSPARSE's parallel gtsv2.
    ((4,), 8, 1, False), ((), 4096, 3, False)])
def test_tridiagonal_solve(installed, batch, m, nrhs, ours):
    solve = lambda *a: jax.lax.linalg.tridiagonal_solve(*a)
    got = cuda_targets(solve, *_tridiagonal(batch, m, nrhs))
    assert got == ({"ferrax_tridiagonal_solve"} if ours else {"cusparse_gtsv2_ffi"})
    if ours:  # jaxlib's contract: the solution takes b's buffer
        text = jax.jit(solve).trace(*_tridiagonal(batch, m, nrhs)).lower(
            lowering_platforms=("cuda",)).as_text()
        assert re.search(r"output_operand_aliases = \[#stablehlo.output_operand_alias<"
                         r"output_tuple_indices = \[\], operand_index = 3", text)
    with ferrax._install.ferrax_on_gpu_everywhere():
        assert cuda_targets(solve, *_tridiagonal(batch, m, nrhs)) == {"ferrax_tridiagonal_solve"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_tridiagonal_solve_perturbed_and_vmap(installed, dtype):
    perturbed = lambda *a: jax.lax.linalg.tridiagonal_solve(*a, perturb_singular=True)
    assert cuda_targets(perturbed, *_tridiagonal((3,), 5, 1, dtype)) == {
        "ferrax_tridiagonal_solve_perturbed"}
    # A batch of systems under vmap (a batch of b alone, jax folds into one system's columns).
    vmapped = jax.vmap(lambda *a: jax.lax.linalg.tridiagonal_solve(*a))
    assert cuda_targets(vmapped, *_tridiagonal((5,), 6, 2, dtype)) == {"ferrax_tridiagonal_solve"}


def test_tridiagonal_solve_uninstalled_is_stock():
    assert cuda_targets(jax.lax.linalg.tridiagonal_solve, *_tridiagonal((2048,), 8, 1)) == {
        "cusparse_gtsv2_ffi"}
    perturbed = lambda *a: jax.lax.linalg.tridiagonal_solve(*a, perturb_singular=True)
    assert cuda_targets(perturbed, *_tridiagonal((3,), 5, 1)) == {"cu_tridiagonal_solve_perturbed"}


# ---- sparse products ---------------------------------------------------------------------------

SPARSE_DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _sparse_operands(dtype, rhs_shape):
    from jax.experimental import sparse
    a = np.eye(6, dtype=dtype)
    a[0, 5] = 2  # off the diagonal: a product that would notice a transpose
    return sparse.BCSR.fromdense(a), sparse.BCOO.fromdense(a), spec(rhs_shape, dtype)


@pytest.mark.parametrize("dtype", SPARSE_DTYPES)
@pytest.mark.parametrize("rhs_shape", [(6,), (6, 3)])
def test_sparse_products_lower_without_a_gpu(installed, dtype, rhs_shape):
    # jaxlib's cuSPARSE rules ask the GPU for descriptors while lowering (they fail here);
    # ferrax's targets need none.
    from jax._src import config
    from jax.experimental import sparse
    bcsr, bcoo, rhs = _sparse_operands(dtype, rhs_shape)
    with config.bcoo_cusparse_lowering(True):
        assert cuda_targets(lambda v: bcsr @ v, rhs) == {"ferrax_csr_sparse_dense"}
        assert cuda_targets(lambda v: bcoo @ v, rhs) == {"ferrax_coo_sparse_dense"}
        # The rhs contracted on its second dimension (jax transposes it for the call), and
        # the matrix on the right (COO's transpose attribute).
        if len(rhs_shape) == 2:
            rhs_t = spec(rhs_shape[::-1], dtype)
            assert cuda_targets(lambda v: bcoo @ v.T, rhs_t) == {"ferrax_coo_sparse_dense"}
            assert cuda_targets(lambda v: v @ bcoo, rhs_t) == {"ferrax_coo_sparse_dense"}
        # Index dtypes the target does not take stay jax's (which needs a GPU to lower).
        narrow = sparse.BCSR((bcsr.data, bcsr.indices.astype(np.int16),
                              bcsr.indptr.astype(np.int16)), shape=bcsr.shape)
        with pytest.raises(Exception, match="descriptor"):
            cuda_targets(lambda v: narrow @ v, rhs)
    # jax's default on GPUs, XLA's gather and scatter-add, stays until gpu-check measures it.
    assert cuda_targets(lambda v: bcoo @ v, rhs) == set()
    with ferrax._install.ferrax_on_gpu_everywhere():
        assert cuda_targets(lambda v: bcoo @ v, rhs) == {"ferrax_coo_sparse_dense"}


def test_sparse_primitives_and_legacy_classes_on_cuda(installed):
    from jax.experimental import sparse
    from jax.experimental.sparse import _lowerings
    a = np.eye(5, dtype=np.float32)
    data, indices, indptr = a.diagonal().copy(), np.arange(5, dtype=np.int32), np.arange(
        6, dtype=np.int32)
    v = spec((5,), np.float32)
    csr = lambda t: lambda x: _lowerings.csr_spmv_p.bind(data, indices, indptr, x, transpose=t,
                                                         shape=(5, 5))
    coo = lambda t: lambda x: _lowerings.coo_spmv_p.bind(data, indices, indices, x, transpose=t,
                                                         shape=(5, 5))
    assert cuda_targets(csr(False), v) == {"ferrax_csr_sparse_dense"}
    assert cuda_targets(coo(False), v) == cuda_targets(coo(True), v) == {"ferrax_coo_sparse_dense"}
    # CSR's transpose stays jaxlib's (it needs a GPU to lower).
    with pytest.raises(Exception, match="descriptor"):
        cuda_targets(csr(True), v)
    # The legacy CSR and COO classes call jax's cuSPARSE rules through their module (their
    # dense conversions stay jaxlib's).
    legacy_csr = sparse.CSR((data, indices, indptr), shape=(5, 5))
    legacy_coo = sparse.COO((data, indices, indices), shape=(5, 5), rows_sorted=True)
    assert cuda_targets(lambda x: legacy_csr @ x, v) == {"ferrax_csr_sparse_dense"}
    assert cuda_targets(lambda x: legacy_coo @ x, v) == {"ferrax_coo_sparse_dense"}


def test_legacy_conversions_and_transposed_csr_lower_without_a_gpu(installed):
    # jax's XLA rules (no custom call) where jaxlib's cuSPARSE rules need a GPU to lower.
    from jax.experimental import sparse
    m, v = spec((5, 4), np.float32), spec((5,), np.float32)
    for cls in (sparse.CSR, sparse.COO):
        round_trip = lambda a, cls=cls: cls.fromdense(a, nse=8).todense()
        assert cuda_targets(round_trip, m) == set()
    csr = sparse.CSR((np.ones(4, np.float32), np.arange(4, dtype=np.int32),
                      np.array([0, 1, 2, 3, 4, 4], np.int32)), shape=(5, 4))
    assert cuda_targets(lambda x: csr.T @ x, v) == set()
    assert cuda_targets(lambda x: csr.T @ x, spec((5, 3), np.float32)) == set()
    ferrax.uninstall()
    with pytest.raises(Exception, match="descriptor"):
        cuda_targets(lambda x: csr.T @ x, v)


def test_sparse_products_uninstalled_need_a_gpu():
    from jax._src import config
    bcsr, bcoo, rhs = _sparse_operands(np.float32, (6,))
    with config.bcoo_cusparse_lowering(True):
        for product in (lambda v: bcsr @ v, lambda v: bcoo @ v):
            with pytest.raises(Exception, match="descriptor"):
                cuda_targets(product, rhs)


# ---- sparse solves -------------------------------------------------------------------------------

def test_spsolve_lowers_to_ferrax_without_a_gpu(installed):
    from jax.experimental.sparse import linalg as jax_sparse_linalg
    operands = (spec((12,), np.float64), spec((12,), np.int32), spec((5,), np.int32))
    assert cuda_targets(jax_sparse_linalg.spsolve, *operands, spec((4,), np.float64)) == {
        "ferrax_spsolve"}
    # vmap of jax's (which has no batching rule) and ferrax's batched primitive: one call.
    batched = (spec((3, 12), np.float64), *operands[1:], spec((3, 4), np.float64))
    assert cuda_targets(jax.vmap(jax_sparse_linalg.spsolve, (0, None, None, 0)), *batched) == {
        "ferrax_spsolve"}
    assert cuda_targets(ferrax.sparse.spsolve, *batched) == {"ferrax_spsolve"}
    # Index dtypes the target does not take stay jax's.
    int16 = (operands[0], spec((12,), np.int16), spec((5,), np.int16), spec((4,), np.float64))
    assert cuda_targets(jax_sparse_linalg.spsolve, *int16) == {"cusolver_csrlsvqr_ffi"}


def test_spsolve_uninstalled_is_stock():
    from jax.experimental.sparse import linalg as jax_sparse_linalg
    operands = (spec((12,), np.float32), spec((12,), np.int32), spec((5,), np.int32),
                spec((4,), np.float32))
    assert cuda_targets(jax_sparse_linalg.spsolve, *operands) == {"cusolver_csrlsvqr_ffi"}
    # ferrax's own primitive takes ferrax's target on import.
    assert cuda_targets(ferrax.sparse.spsolve, *operands) == {"ferrax_spsolve"}
