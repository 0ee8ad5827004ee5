//! The cuBLAS routines ferrax calls (`src/cuda/cublas.rs`): handles, streams, the math mode,
//! the batched getrf and geqrf, and the strided-batched real GEMMs, on host memory with LAPACK
//! and BLAS underneath.
//!
//! As in [`crate::solver`] (whose scalars, handles, operand checks and guard these share):
//! arguments checked as cuBLAS checks them, every device operand (the pointer arrays, then each
//! matrix, pivot, tau and info they reach) checked over exactly the elements the routine
//! touches, no written operand overlapping another, each violation a recorded problem and an
//! error status; the work done before the routine returns.
#![allow(non_snake_case)] // cuBLAS's names

use crate::solver::{
    check_extents, fail, geqrf_arguments, geqrf_lwork, guard, host_pointer, lapack, lapack_info,
    library, pointer_array, require, span, Extent, Fault, Handles, Outcome, Scalar,
};
use ferrax_cpu_fallback::single_threaded;
use num_complex::Complex;
use std::ffi::{c_int, c_void};

pub type Handle = *mut c_void;
/// `cublasStatus_t`.
pub type Status = u32;
pub const CUBLAS_STATUS_SUCCESS: Status = 0;
pub const CUBLAS_STATUS_NOT_INITIALIZED: Status = 1;
pub const CUBLAS_STATUS_INVALID_VALUE: Status = 7;
pub const CUBLAS_STATUS_EXECUTION_FAILED: Status = 13;
pub const CUBLAS_STATUS_INTERNAL_ERROR: Status = 14;

library!(
    "cuBLAS",
    [
        CUBLAS_STATUS_SUCCESS,
        CUBLAS_STATUS_NOT_INITIALIZED,
        CUBLAS_STATUS_INVALID_VALUE,
        CUBLAS_STATUS_EXECUTION_FAILED,
        CUBLAS_STATUS_INTERNAL_ERROR
    ],
    cublasCreate_v2,
    cublasDestroy_v2,
    cublasSetStream_v2
);

/// LU with partial pivoting of `batch` n×n matrices: `n` 1-based pivots per matrix in `ipiv`,
/// one `info` per matrix (both device arrays), as cuBLAS's `getrfBatched`.
///
/// # Safety
/// As cuBLAS's (the checks find what they can).
#[allow(clippy::too_many_arguments)]
unsafe fn getrf_batched<T: Scalar>(
    routine: &str,
    h: Handle,
    n: c_int,
    a: *const *mut T,
    lda: c_int,
    ipiv: *mut c_int,
    info: *mut c_int,
    batch: c_int,
) -> Outcome {
    crate::record_call(routine);
    HANDLES.bound(routine, h)?;
    require(n >= 0, routine, || format!("n = {n} < 0"))?;
    require(lda >= n.max(1), routine, || {
        format!("lda = {lda} < max(1, n = {n})")
    })?;
    require(batch >= 0, routine, || format!("batchSize = {batch} < 0"))?;
    if ipiv.is_null() && n > 0 && batch > 0 {
        // cuBLAS's LU without pivoting: ferrax never asks for it.
        return fail(
            Fault::Internal,
            format!("{routine}: P = NULL (no pivoting) is not emulated"),
        );
    }
    let (order, batch) = (n as usize, batch as usize);
    let matrices = pointer_array(routine, "Aarray", a, batch)?;
    let mut extents = vec![
        Extent::read("Aarray", a, batch),
        Extent::written("P (pivots)", ipiv, order * batch),
        Extent::written("info", info, batch),
    ];
    let elements = span(n, n, lda);
    extents.extend((0..batch).map(|i| Extent::new("matrix", Some(i), matrices[i], elements, true)));
    check_extents(routine, &extents)?;
    let getrf = lapack(routine, T::getrf)?;
    for (i, &matrix) in matrices.iter().enumerate() {
        single_threaded(|| getrf(&n, &n, matrix, &lda, ipiv.add(i * order), info.add(i)));
        lapack_info(routine, *info.add(i))?;
    }
    Ok(())
}

/// Householder QR of `batch` m×n matrices, their taus through a second pointer array, as
/// cuBLAS's `geqrfBatched`: `info` is one HOST integer, 0 or minus the position of the first
/// invalid argument.
///
/// # Safety
/// As cuBLAS's (the checks find what they can).
#[allow(clippy::too_many_arguments)]
unsafe fn geqrf_batched<T: Scalar>(
    routine: &str,
    h: Handle,
    m: c_int,
    n: c_int,
    a: *const *mut T,
    lda: c_int,
    tau: *const *mut T,
    info: *mut c_int,
    batch: c_int,
) -> Outcome {
    crate::record_call(routine);
    HANDLES.bound(routine, h)?;
    host_pointer(routine, "info", info)?;
    // cuBLAS's positions: handle 1, m 2, n 3, Aarray 4, lda 5, TauArray 6, info 7, batchSize 8.
    let invalid = [(m < 0, 2), (n < 0, 3), (lda < m.max(1), 5), (batch < 0, 8)];
    if let Some(&(_, position)) = invalid.iter().find(|(bad, _)| *bad) {
        *info = -position;
        return geqrf_arguments(routine, m, n, lda)
            .and_then(|()| require(batch >= 0, routine, || format!("batchSize = {batch} < 0")));
    }
    *info = 0;
    let (k, batch) = (m.min(n) as usize, batch as usize);
    let matrices = pointer_array(routine, "Aarray", a, batch)?;
    let taus = pointer_array(routine, "TauArray", tau, batch)?;
    let mut extents = vec![
        Extent::read("Aarray", a, batch),
        Extent::read("TauArray", tau, batch),
    ];
    let elements = span(m, n, lda);
    extents.extend((0..batch).map(|i| Extent::new("matrix", Some(i), matrices[i], elements, true)));
    extents.extend((0..batch).map(|i| Extent::new("tau", Some(i), taus[i], k, true)));
    check_extents(routine, &extents)?;
    if batch == 0 || k == 0 {
        return Ok(());
    }
    let lwork = geqrf_lwork::<T>(routine, m, n, lda)?;
    let geqrf = lapack(routine, T::geqrf)?;
    let mut work = vec![T::default(); lwork as usize];
    for (&matrix, &taus) in matrices.iter().zip(&taus) {
        let mut matrix_info = 0;
        single_threaded(|| {
            geqrf(
                &m,
                &n,
                matrix,
                &lda,
                taus,
                work.as_mut_ptr(),
                &lwork,
                &mut matrix_info,
            )
        });
        lapack_info(routine, matrix_info)?;
    }
    Ok(())
}

/// `cublasOperation_t`: `CUBLAS_OP_N` and `CUBLAS_OP_T` (ferrax passes no other).
const OP_N: c_int = 0;
const OP_T: c_int = 1;
/// `cublasMath_t`: default, tensor-op, pedantic and TF32 tensor-op math.
const MATH_MODES: std::ops::RangeInclusive<c_int> = 0..=3;

/// Sets the handle's math mode (cuBLAS keeps it per handle; the emulation computes in full
/// precision whatever it is).
///
/// # Safety
/// As cuBLAS's.
#[no_mangle]
pub unsafe extern "C" fn cublasSetMathMode(h: Handle, mode: c_int) -> Status {
    let r = "cublasSetMathMode";
    run(r, || {
        crate::record_call(r);
        HANDLES.known(r, h)?;
        require(MATH_MODES.contains(&mode), r, || {
            format!("mode = {mode} is not a cublasMath_t")
        })
    })
}

/// `C_i = alpha·op(A_i)·op(B_i) + beta·C_i` for `i < batch`, `X_i = X + i·strideX`,
/// column-major, as cuBLAS's `gemmStridedBatched` (host `alpha` and `beta`): every operand of
/// every product checked over the elements it spans, no `C_i` overlapping another operand.
///
/// # Safety
/// As cuBLAS's (the checks find what they can).
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_strided_batched<T: Scalar>(
    routine: &str,
    h: Handle,
    [transa, transb]: [c_int; 2],
    [m, n, k]: [c_int; 3],
    alpha: *const T,
    (a, lda, stride_a): (*const T, c_int, i64),
    (b, ldb, stride_b): (*const T, c_int, i64),
    beta: *const T,
    (c, ldc, stride_c): (*mut T, c_int, i64),
    batch: c_int,
) -> Outcome {
    crate::record_call(routine);
    HANDLES.bound(routine, h)?;
    for (name, op) in [("transa", transa), ("transb", transb)] {
        require(op == OP_N || op == OP_T, routine, || {
            format!("{name} = {op}: only CUBLAS_OP_N and CUBLAS_OP_T are emulated")
        })?;
    }
    for (name, value) in [("m", m), ("n", n), ("k", k), ("batchCount", batch)] {
        require(value >= 0, routine, || format!("{name} = {value} < 0"))?;
    }
    let (a_rows, a_cols) = if transa == OP_T { (k, m) } else { (m, k) };
    let (b_rows, b_cols) = if transb == OP_T { (n, k) } else { (k, n) };
    for (name, ld, rows) in [("lda", lda, a_rows), ("ldb", ldb, b_rows), ("ldc", ldc, m)] {
        require(ld >= rows.max(1), routine, || {
            format!("{name} = {ld} < max(1, {rows})")
        })?;
    }
    for (name, stride) in [
        ("strideA", stride_a),
        ("strideB", stride_b),
        ("strideC", stride_c),
    ] {
        require(stride >= 0, routine, || format!("{name} = {stride} < 0"))?;
    }
    host_pointer(routine, "alpha", alpha.cast_mut())?;
    host_pointer(routine, "beta", beta.cast_mut())?;
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    let batch = batch as usize;
    let at =
        |base: usize, stride: i64, i: usize| base + i * stride as usize * std::mem::size_of::<T>();
    let mut extents = Vec::new();
    for i in 0..batch {
        if k > 0 {
            extents.push(Extent::new(
                "A",
                Some(i),
                at(a as usize, stride_a, i) as *const T,
                span(a_rows, a_cols, lda),
                false,
            ));
            extents.push(Extent::new(
                "B",
                Some(i),
                at(b as usize, stride_b, i) as *const T,
                span(b_rows, b_cols, ldb),
                false,
            ));
        }
        extents.push(Extent::new(
            "C",
            Some(i),
            at(c as usize, stride_c, i) as *const T,
            span(m, n, ldc),
            true,
        ));
    }
    check_extents(routine, &extents)?;
    let gemm = lapack(routine, T::gemm)?;
    let flag = |op: c_int| {
        if op == OP_T {
            b'T' as std::ffi::c_char
        } else {
            b'N' as std::ffi::c_char
        }
    };
    for i in 0..batch {
        let (a_i, b_i) = (
            at(a as usize, stride_a, i) as *const T,
            at(b as usize, stride_b, i) as *const T,
        );
        let c_i = at(c as usize, stride_c, i) as *mut T;
        // BLAS takes leading dimensions of at least 1 even where k is 0 (cuBLAS's check above).
        single_threaded(|| {
            gemm(
                &flag(transa),
                &flag(transb),
                &m,
                &n,
                &k,
                alpha,
                a_i,
                &lda,
                b_i,
                &ldb,
                beta,
                c_i,
                &ldc,
            )
        });
    }
    Ok(())
}

/// The exported GEMM of one real scalar, by its cuBLAS name.
macro_rules! gemm {
    ($t:ty, $gemm:ident) => {
        /// # Safety
        /// As cuBLAS's.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $gemm(
            h: Handle,
            transa: c_int,
            transb: c_int,
            m: c_int,
            n: c_int,
            k: c_int,
            alpha: *const $t,
            a: *const $t,
            lda: c_int,
            stride_a: i64,
            b: *const $t,
            ldb: c_int,
            stride_b: i64,
            beta: *const $t,
            c: *mut $t,
            ldc: c_int,
            stride_c: i64,
            batch: c_int,
        ) -> Status {
            let r = stringify!($gemm);
            run(r, || {
                gemm_strided_batched::<$t>(
                    r,
                    h,
                    [transa, transb],
                    [m, n, k],
                    alpha,
                    (a, lda, stride_a),
                    (b, ldb, stride_b),
                    beta,
                    (c, ldc, stride_c),
                    batch,
                )
            })
        }
    };
}

gemm!(f32, cublasSgemmStridedBatched);
gemm!(f64, cublasDgemmStridedBatched);

/// The exported routines of one scalar, by their cuBLAS names.
macro_rules! batched {
    ($t:ty, $getrf:ident, $geqrf:ident) => {
        /// # Safety
        /// As cuBLAS's.
        #[no_mangle]
        pub unsafe extern "C" fn $getrf(
            h: Handle,
            n: c_int,
            a: *const *mut $t,
            lda: c_int,
            ipiv: *mut c_int,
            info: *mut c_int,
            batch: c_int,
        ) -> Status {
            let r = stringify!($getrf);
            run(r, || {
                getrf_batched::<$t>(r, h, n, a, lda, ipiv, info, batch)
            })
        }

        /// # Safety
        /// As cuBLAS's.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $geqrf(
            h: Handle,
            m: c_int,
            n: c_int,
            a: *const *mut $t,
            lda: c_int,
            tau: *const *mut $t,
            info: *mut c_int,
            batch: c_int,
        ) -> Status {
            let r = stringify!($geqrf);
            run(r, || {
                geqrf_batched::<$t>(r, h, m, n, a, lda, tau, info, batch)
            })
        }

        #[cfg(test)]
        impl tests::Exports for $t {
            const BATCHED: tests::Batched<$t> = tests::Batched {
                getrf: $getrf,
                geqrf: $geqrf,
            };
        }
    };
}

batched!(f32, cublasSgetrfBatched, cublasSgeqrfBatched);
batched!(f64, cublasDgetrfBatched, cublasDgeqrfBatched);
batched!(Complex<f32>, cublasCgetrfBatched, cublasCgeqrfBatched);
batched!(Complex<f64>, cublasZgetrfBatched, cublasZgeqrfBatched);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::ferrax_emulated_stream;
    use crate::solver::testing::*;
    use std::ptr::null_mut;

    /// The exported routines of one scalar (their signatures checked against these types).
    #[allow(clippy::type_complexity)]
    pub struct Batched<T> {
        pub getrf: unsafe extern "C" fn(
            Handle,
            c_int,
            *const *mut T,
            c_int,
            *mut c_int,
            *mut c_int,
            c_int,
        ) -> Status,
        pub geqrf: unsafe extern "C" fn(
            Handle,
            c_int,
            c_int,
            *const *mut T,
            c_int,
            *const *mut T,
            *mut c_int,
            c_int,
        ) -> Status,
    }

    pub trait Exports: Scalar {
        const BATCHED: Batched<Self>;
    }

    fn blas() -> Handle {
        let mut h = null_mut();
        assert_eq!(unsafe { cublasCreate_v2(&mut h) }, CUBLAS_STATUS_SUCCESS);
        assert_eq!(
            cublasSetStream_v2(h, ferrax_emulated_stream()),
            CUBLAS_STATUS_SUCCESS
        );
        h
    }

    fn getrf_batched_case<T: Exports>() {
        let h = blas();
        let (n, lda, batch) = (5, 6, 3usize);
        let stride = (lda * n) as usize;
        let mut all = random::<T>(stride * batch, 3);
        for i in 0..n as usize {
            all[stride + i + 2 * lda as usize] = T::default(); // matrix 1 singular (column 2 zero)
        }
        unsafe {
            let a = Device::from(&all);
            let pointers: Vec<*mut T> = (0..batch).map(|b| a.ptr.add(b * stride)).collect();
            let array = Device::from(&pointers);
            let (ipiv, info) = (
                Device::<c_int>::new(n as usize * batch),
                Device::<c_int>::new(batch),
            );
            let status =
                (T::BATCHED.getrf)(h, n, array.ptr, lda, ipiv.ptr, info.ptr, batch as c_int);
            assert_eq!(status, CUBLAS_STATUS_SUCCESS);
            no_problems();
            let getrf = lapack("test", T::getrf).unwrap();
            let (got, pivots, infos) = (a.to_vec(), ipiv.to_vec(), info.to_vec());
            for b in 0..batch {
                let mut want = all[b * stride..(b + 1) * stride].to_vec();
                let (mut want_ipiv, mut want_info) = (vec![0; n as usize], 0);
                getrf(
                    &n,
                    &n,
                    want.as_mut_ptr(),
                    &lda,
                    want_ipiv.as_mut_ptr(),
                    &mut want_info,
                );
                assert_close("LU", &got[b * stride..(b + 1) * stride], &want);
                assert_eq!(
                    pivots[b * n as usize..(b + 1) * n as usize],
                    want_ipiv[..],
                    "pivots of {b}"
                );
                assert_eq!(infos[b], want_info, "info of {b}");
                assert_eq!(want_info > 0, b == 1);
            }
        }
    }

    fn geqrf_batched_case<T: Exports>(m: c_int, n: c_int) {
        let h = blas();
        let (lda, batch) = (m + 1, 4usize);
        let (stride, k) = (span(m, n, lda), m.min(n) as usize);
        let all = random::<T>(stride * batch, 5);
        unsafe {
            let (a, tau) = (Device::from(&all), Device::<T>::new(k * batch));
            let matrices: Vec<*mut T> = (0..batch).map(|b| a.ptr.add(b * stride)).collect();
            let taus: Vec<*mut T> = (0..batch).map(|b| tau.ptr.add(b * k)).collect();
            let (matrices, taus) = (Device::from(&matrices), Device::from(&taus));
            let mut info = 99;
            let status = (T::BATCHED.geqrf)(
                h,
                m,
                n,
                matrices.ptr,
                lda,
                taus.ptr,
                &mut info,
                batch as c_int,
            );
            assert_eq!((status, info), (CUBLAS_STATUS_SUCCESS, 0));
            no_problems();
            let geqrf = lapack("test", T::geqrf).unwrap();
            let (got, got_tau) = (a.to_vec(), tau.to_vec());
            for b in 0..batch {
                let mut want = all[b * stride..(b + 1) * stride].to_vec();
                let mut want_tau = vec![T::default(); k];
                let mut work = vec![T::default(); 4096];
                let mut want_info = 0;
                geqrf(
                    &m,
                    &n,
                    want.as_mut_ptr(),
                    &lda,
                    want_tau.as_mut_ptr(),
                    work.as_mut_ptr(),
                    &4096,
                    &mut want_info,
                );
                assert_eq!(want_info, 0);
                assert_close("QR reflectors", &got[b * stride..(b + 1) * stride], &want);
                assert_close("tau", &got_tau[b * k..(b + 1) * k], &want_tau);
            }
        }
    }

    macro_rules! per_scalar {
        ($($name:ident: $t:ty;)*) => {$(
            mod $name {
                use super::*;
                type T = $t;

                #[test]
                fn getrf_batched_matches_lapack() {
                    let _serial = serial();
                    getrf_batched_case::<T>();
                    let name = format!("cublas{}getrfBatched", stringify!($name).to_uppercase());
                    assert_eq!(calls(), [name]);
                }

                #[test]
                fn geqrf_batched_matches_lapack() {
                    let _serial = serial();
                    geqrf_batched_case::<T>(7, 4);
                    geqrf_batched_case::<T>(3, 5);
                }
            }
        )*};
    }

    per_scalar! {
        s: f32;
        d: f64;
        c: Complex<f32>;
        z: Complex<f64>;
    }

    #[test]
    fn geqrf_batched_reports_a_bad_argument_in_its_host_info() {
        let _serial = serial();
        let h = blas();
        let a = Device::from(&random::<f64>(16, 1));
        let tau = Device::<f64>::new(4);
        let (matrices, taus) = (Device::from(&[a.ptr]), Device::from(&[tau.ptr]));
        unsafe {
            let mut info = 0;
            let status = cublasDgeqrfBatched(h, 4, 4, matrices.ptr, 3, taus.ptr, &mut info, 1);
            rejected(
                status,
                CUBLAS_STATUS_INVALID_VALUE,
                "lda = 3 < max(1, m = 4)",
            );
            assert_eq!(info, -5);
            let status = cublasDgeqrfBatched(h, 4, 4, matrices.ptr, 4, taus.ptr, &mut info, -1);
            rejected(status, CUBLAS_STATUS_INVALID_VALUE, "batchSize");
            assert_eq!(info, -8);
            // info is a host pointer, not device memory.
            let device_info = Device::<c_int>::new(1);
            let status =
                cublasDgeqrfBatched(h, 4, 4, matrices.ptr, 4, taus.ptr, device_info.ptr, 1);
            rejected(status, CUBLAS_STATUS_INVALID_VALUE, "host pointer");
            // A tau array too short for min(m, n) taus.
            let short = Device::<f64>::new(3);
            let taus = Device::from(&[short.ptr]);
            let status = cublasDgeqrfBatched(h, 4, 4, matrices.ptr, 4, taus.ptr, &mut info, 1);
            rejected(status, CUBLAS_STATUS_EXECUTION_FAILED, "tau 0: 32 bytes");
        }
    }

    #[test]
    fn getrf_batched_checks_its_arrays_and_handle() {
        let _serial = serial();
        let h = blas();
        let a = Device::from(&random::<f32>(32, 1));
        let (ipiv, info) = (Device::<c_int>::new(8), Device::<c_int>::new(2));
        unsafe {
            // The pointer array holds one pointer, not two.
            let one = Device::from(&[a.ptr]);
            let status = cublasSgetrfBatched(h, 4, one.ptr, 4, ipiv.ptr, info.ptr, 2);
            rejected(status, CUBLAS_STATUS_EXECUTION_FAILED, "Aarray");
            // Two matrices that overlap.
            let overlapping = Device::from(&[a.ptr, a.ptr.add(8)]);
            let status = cublasSgetrfBatched(h, 4, overlapping.ptr, 4, ipiv.ptr, info.ptr, 2);
            rejected(status, CUBLAS_STATUS_EXECUTION_FAILED, "overlaps");
            // Pivots for one matrix only.
            let two = Device::from(&[a.ptr, a.ptr.add(16)]);
            let short = Device::<c_int>::new(4);
            let status = cublasSgetrfBatched(h, 4, two.ptr, 4, short.ptr, info.ptr, 2);
            rejected(status, CUBLAS_STATUS_EXECUTION_FAILED, "P (pivots)");
            let status = cublasSgetrfBatched(h, 4, two.ptr, 3, ipiv.ptr, info.ptr, 2);
            rejected(status, CUBLAS_STATUS_INVALID_VALUE, "lda");

            let mut unbound = null_mut();
            assert_eq!(cublasCreate_v2(&mut unbound), 0);
            let status = cublasSgetrfBatched(unbound, 4, two.ptr, 4, ipiv.ptr, info.ptr, 2);
            rejected(status, CUBLAS_STATUS_NOT_INITIALIZED, "bound to no stream");
            let mut solver = null_mut();
            assert_eq!(crate::solver::cusolverDnCreate(&mut solver), 0);
            let status = cublasSetStream_v2(solver, ferrax_emulated_stream());
            rejected(
                status,
                CUBLAS_STATUS_NOT_INITIALIZED,
                "is no live cuBLAS handle",
            );
            let status = cublasSetStream_v2(unbound, null_mut());
            rejected(
                status,
                CUBLAS_STATUS_INVALID_VALUE,
                "is not one of the device's",
            );

            assert_eq!(
                cublasSgetrfBatched(h, 4, two.ptr, 4, ipiv.ptr, info.ptr, 2),
                0
            );
            no_problems();
            assert_eq!(cublasDestroy_v2(h), 0);
            let status = cublasSgetrfBatched(h, 4, two.ptr, 4, ipiv.ptr, info.ptr, 2);
            rejected(
                status,
                CUBLAS_STATUS_NOT_INITIALIZED,
                "is no live cuBLAS handle",
            );
        }
    }
}
