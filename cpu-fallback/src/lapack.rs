//! Typed, scalar-generic access to the table: `T::getrf()?` gives the right routine for `T`.
//!
//! Signatures are SciPy's `cython_lapack` / `cython_blas` ones: LP64 integers, every argument
//! by pointer, no hidden Fortran string lengths. `T` is the matrix scalar and `Self::Real`
//! its real counterpart [`Real<T>`] (singular values, eigenvalues, complex routines' real workspace).

use crate::table::{get, Missing};
use num_complex::Complex;

/// LAPACK's integer in the LP64 interface that SciPy and scipy-openblas32 use.
pub type LapackInt = i32;

type I = LapackInt;
/// The real counterpart of a LAPACK scalar.
pub type Real<T> = <T as Lapack>::Real;

macro_rules! families {
    (
        all { $($(#[$all_doc:meta])* $all_method:ident: $all_family:ident<$all_t:ident>($($all_arg:ident: $all_ty:ty),* $(,)?)
            = [$all_s:literal, $all_d:literal, $all_c:literal, $all_z:literal];)* }
        real { $($(#[$re_doc:meta])* $re_method:ident: $re_family:ident<$re_t:ident>($($re_arg:ident: $re_ty:ty),* $(,)?)
            = [$re_s:literal, $re_d:literal];)* }
        complex { $($(#[$cx_doc:meta])* $cx_method:ident: $cx_family:ident<$cx_t:ident>($($cx_arg:ident: $cx_ty:ty),* $(,)?)
            = [$cx_c:literal, $cx_z:literal];)* }
    ) => {
        /// Every routine the handlers call, by LAPACK/BLAS name (lower case, no underscore).
        pub const ROUTINES: &[&str] = &[
            $($all_s, $all_d, $all_c, $all_z,)* $($re_s, $re_d,)* $($cx_c, $cx_z,)*
        ];

        $($(#[$all_doc])* pub type $all_family<$all_t> = unsafe extern "C" fn($($all_arg: $all_ty),*);)*
        $($(#[$re_doc])* pub type $re_family<$re_t> = unsafe extern "C" fn($($re_arg: $re_ty),*);)*
        $($(#[$cx_doc])* pub type $cx_family<$cx_t> = unsafe extern "C" fn($($cx_arg: $cx_ty),*);)*

        /// Scalars LAPACK works on (s, d, c, z), with their routines looked up in the table.
        pub trait Lapack: Copy + Send + Sync + 'static {
            type Real: Copy + Send + Sync + 'static;
            $(fn $all_method() -> Result<$all_family<Self>, Missing>;)*
        }
        /// Routines that exist for real scalars only (their complex twins take other arguments).
        pub trait RealLapack: Lapack {
            $(fn $re_method() -> Result<$re_family<Self>, Missing>;)*
        }
        /// Routines that exist for complex scalars only.
        pub trait ComplexLapack: Lapack {
            $(fn $cx_method() -> Result<$cx_family<Self>, Missing>;)*
        }

        impl Lapack for f32 { type Real = f32; families!(@fns $($all_method $all_family $all_s)*); }
        impl Lapack for f64 { type Real = f64; families!(@fns $($all_method $all_family $all_d)*); }
        impl Lapack for Complex<f32> { type Real = f32; families!(@fns $($all_method $all_family $all_c)*); }
        impl Lapack for Complex<f64> { type Real = f64; families!(@fns $($all_method $all_family $all_z)*); }
        impl RealLapack for f32 { families!(@fns $($re_method $re_family $re_s)*); }
        impl RealLapack for f64 { families!(@fns $($re_method $re_family $re_d)*); }
        impl ComplexLapack for Complex<f32> { families!(@fns $($cx_method $cx_family $cx_c)*); }
        impl ComplexLapack for Complex<f64> { families!(@fns $($cx_method $cx_family $cx_z)*); }
    };
    (@fns $($method:ident $family:ident $name:literal)*) => {$(
        fn $method() -> Result<$family<Self>, Missing> {
            // SAFETY: the slot holds this routine for this scalar (see `register`).
            get($name).map(|p| unsafe { std::mem::transmute::<*mut std::ffi::c_void, $family<Self>>(p) })
        }
    )*};
}

type C = std::ffi::c_char;

families! {
    all {
        /// `?getrf`: LU with partial pivoting.
        getrf: Getrf<T>(m: *const I, n: *const I, a: *mut T, lda: *const I, ipiv: *mut I, info: *mut I)
            = ["sgetrf", "dgetrf", "cgetrf", "zgetrf"];
        /// `?potrf`: Cholesky factorization.
        potrf: Potrf<T>(uplo: *const C, n: *const I, a: *mut T, lda: *const I, info: *mut I)
            = ["spotrf", "dpotrf", "cpotrf", "zpotrf"];
        /// `?geqrf`: Householder QR.
        geqrf: Geqrf<T>(m: *const I, n: *const I, a: *mut T, lda: *const I, tau: *mut T,
                        work: *mut T, lwork: *const I, info: *mut I)
            = ["sgeqrf", "dgeqrf", "cgeqrf", "zgeqrf"];
        /// `?orgqr` / `?ungqr`: forms Q from Householder reflectors.
        orgqr: Orgqr<T>(m: *const I, n: *const I, k: *const I, a: *mut T, lda: *const I,
                        tau: *const T, work: *mut T, lwork: *const I, info: *mut I)
            = ["sorgqr", "dorgqr", "cungqr", "zungqr"];
        /// BLAS `?trsm`: triangular solve with multiple right-hand sides.
        trsm: Trsm<T>(side: *const C, uplo: *const C, transa: *const C, diag: *const C,
                      m: *const I, n: *const I, alpha: *const T, a: *const T, lda: *const I,
                      b: *mut T, ldb: *const I)
            = ["strsm", "dtrsm", "ctrsm", "ztrsm"];
        /// BLAS `?gemm`: general matrix product `C = alpha·op(A)·op(B) + beta·C`.
        gemm: Gemm<T>(transa: *const C, transb: *const C, m: *const I, n: *const I,
                      k: *const I, alpha: *const T, a: *const T, lda: *const I, b: *const T,
                      ldb: *const I, beta: *const T, c: *mut T, ldc: *const I)
            = ["sgemm", "dgemm", "cgemm", "zgemm"];
        /// `?ormqr` / `?unmqr`: multiplies by Q from Householder reflectors.
        ormqr: Ormqr<T>(side: *const C, trans: *const C, m: *const I, n: *const I, k: *const I,
                        a: *const T, lda: *const I, tau: *const T, c: *mut T, ldc: *const I,
                        work: *mut T, lwork: *const I, info: *mut I)
            = ["sormqr", "dormqr", "cunmqr", "zunmqr"];
        /// `?gehrd`: reduction to upper Hessenberg form.
        gehrd: Gehrd<T>(n: *const I, ilo: *const I, ihi: *const I, a: *mut T, lda: *const I,
                        tau: *mut T, work: *mut T, lwork: *const I, info: *mut I)
            = ["sgehrd", "dgehrd", "cgehrd", "zgehrd"];
        /// `?sytrd` / `?hetrd`: reduction to real symmetric tridiagonal form.
        sytrd: Sytrd<T>(uplo: *const C, n: *const I, a: *mut T, lda: *const I, d: *mut Real<T>,
                        e: *mut Real<T>, tau: *mut T, work: *mut T, lwork: *const I,
                        info: *mut I)
            = ["ssytrd", "dsytrd", "chetrd", "zhetrd"];
        /// `?gtsv`: tridiagonal solve with partial pivoting.
        gtsv: Gtsv<T>(n: *const I, nrhs: *const I, dl: *mut T, d: *mut T, du: *mut T, b: *mut T,
                      ldb: *const I, info: *mut I)
            = ["sgtsv", "dgtsv", "cgtsv", "zgtsv"];
    }
    real {
        /// `?syevd`: symmetric eigendecomposition, divide and conquer.
        syevd: Syevd<T>(jobz: *const C, uplo: *const C, n: *const I, a: *mut T, lda: *const I,
                        w: *mut T, work: *mut T, lwork: *const I, iwork: *mut I,
                        liwork: *const I, info: *mut I)
            = ["ssyevd", "dsyevd"];
        /// `?stedc`: symmetric tridiagonal eigendecomposition, divide and conquer.
        stedc: Stedc<T>(compz: *const C, n: *const I, d: *mut T, e: *mut T, z: *mut T,
                        ldz: *const I, work: *mut T, lwork: *const I, iwork: *mut I,
                        liwork: *const I, info: *mut I)
            = ["sstedc", "dstedc"];
        /// `?bdsdc`: SVD of a real bidiagonal matrix, divide and conquer.
        bdsdc: Bdsdc<T>(uplo: *const C, compq: *const C, n: *const I, d: *mut T, e: *mut T,
                        u: *mut T, ldu: *const I, vt: *mut T, ldvt: *const I, q: *mut T,
                        iq: *mut I, work: *mut T, iwork: *mut I, info: *mut I)
            = ["sbdsdc", "dbdsdc"];
        /// `?gesdd` (real): SVD, divide and conquer.
        gesdd: GesddReal<T>(jobz: *const C, m: *const I, n: *const I, a: *mut T, lda: *const I,
                            s: *mut T, u: *mut T, ldu: *const I, vt: *mut T, ldvt: *const I,
                            work: *mut T, lwork: *const I, iwork: *mut I, info: *mut I)
            = ["sgesdd", "dgesdd"];
        /// `?geqp3` (real): QR with column pivoting.
        geqp3: Geqp3Real<T>(m: *const I, n: *const I, a: *mut T, lda: *const I, jpvt: *mut I,
                            tau: *mut T, work: *mut T, lwork: *const I, info: *mut I)
            = ["sgeqp3", "dgeqp3"];
        /// `?gesvd` (real): SVD, QR iteration.
        gesvd: GesvdReal<T>(jobu: *const C, jobvt: *const C, m: *const I, n: *const I, a: *mut T,
                            lda: *const I, s: *mut T, u: *mut T, ldu: *const I, vt: *mut T,
                            ldvt: *const I, work: *mut T, lwork: *const I, info: *mut I)
            = ["sgesvd", "dgesvd"];
        /// `?geev` (real): eigenvalues as (wr, wi), packed real eigenvectors.
        geev: GeevReal<T>(jobvl: *const C, jobvr: *const C, n: *const I, a: *mut T, lda: *const I,
                          wr: *mut T, wi: *mut T, vl: *mut T, ldvl: *const I, vr: *mut T,
                          ldvr: *const I, work: *mut T, lwork: *const I, info: *mut I)
            = ["sgeev", "dgeev"];
        /// `?gees` (real): Schur form; `select` may be null when `sort` is 'N'.
        gees: GeesReal<T>(jobvs: *const C, sort: *const C, select: *mut std::ffi::c_void,
                          n: *const I, a: *mut T, lda: *const I, sdim: *mut I, wr: *mut T,
                          wi: *mut T, vs: *mut T, ldvs: *const I, work: *mut T, lwork: *const I,
                          bwork: *mut I, info: *mut I)
            = ["sgees", "dgees"];
    }
    complex {
        /// `?heevd`: Hermitian eigendecomposition, divide and conquer.
        heevd: Heevd<T>(jobz: *const C, uplo: *const C, n: *const I, a: *mut T, lda: *const I,
                        w: *mut Real<T>, work: *mut T, lwork: *const I, rwork: *mut Real<T>,
                        lrwork: *const I, iwork: *mut I, liwork: *const I, info: *mut I)
            = ["cheevd", "zheevd"];
        /// `?gesdd` (complex): SVD, divide and conquer.
        gesdd: GesddComplex<T>(jobz: *const C, m: *const I, n: *const I, a: *mut T,
                               lda: *const I, s: *mut Real<T>, u: *mut T, ldu: *const I,
                               vt: *mut T, ldvt: *const I, work: *mut T, lwork: *const I,
                               rwork: *mut Real<T>, iwork: *mut I, info: *mut I)
            = ["cgesdd", "zgesdd"];
        /// `?geqp3` (complex): QR with column pivoting.
        geqp3: Geqp3Complex<T>(m: *const I, n: *const I, a: *mut T, lda: *const I, jpvt: *mut I,
                               tau: *mut T, work: *mut T, lwork: *const I, rwork: *mut Real<T>,
                               info: *mut I)
            = ["cgeqp3", "zgeqp3"];
        /// `?gesvd` (complex): SVD, QR iteration.
        gesvd: GesvdComplex<T>(jobu: *const C, jobvt: *const C, m: *const I, n: *const I,
                               a: *mut T, lda: *const I, s: *mut Real<T>, u: *mut T,
                               ldu: *const I, vt: *mut T, ldvt: *const I, work: *mut T,
                               lwork: *const I, rwork: *mut Real<T>, info: *mut I)
            = ["cgesvd", "zgesvd"];
        /// `?geev` (complex): eigenvalues and eigenvectors.
        geev: GeevComplex<T>(jobvl: *const C, jobvr: *const C, n: *const I, a: *mut T,
                             lda: *const I, w: *mut T, vl: *mut T, ldvl: *const I, vr: *mut T,
                             ldvr: *const I, work: *mut T, lwork: *const I, rwork: *mut Real<T>,
                             info: *mut I)
            = ["cgeev", "zgeev"];
        /// `?gees` (complex): Schur form; `select` may be null when `sort` is 'N'.
        gees: GeesComplex<T>(jobvs: *const C, sort: *const C, select: *mut std::ffi::c_void,
                             n: *const I, a: *mut T, lda: *const I, sdim: *mut I, w: *mut T,
                             vs: *mut T, ldvs: *const I, work: *mut T, lwork: *const I,
                             rwork: *mut Real<T>, bwork: *mut I, info: *mut I)
            = ["cgees", "zgees"];
    }
}
