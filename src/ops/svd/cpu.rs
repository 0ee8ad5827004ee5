//! The CPU handlers of `svd`: [`crate::linalg::svd`] on XLA's arrays and thread pool.

use super::{expect_shapes, Results, GESDD_TARGET, GESVD_TARGET};
use crate::ffi::{Array, Matrices, Result, ThreadPool};
use crate::ffi_handlers;
use crate::linalg::flags::SvdJob;
use crate::linalg::matrix::Layout;
use crate::linalg::svd::{self, Driver, Factors, Svd};
use ferrax_cpu_fallback::Real;

ffi_handlers! {
    /// SVD on the host through LAPACK's `?gesdd`, batch split across XLA's thread pool.
    pub fn ferrax_cpu_gesdd(GESDD_TARGET, Cpu) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        ret x_out: Matrices<T>;
        ret s: Array<Real<T>>;
        ret u: Matrices<T>;
        ret vt: Matrices<T>;
        ret info: Array<i32>;
        attr mode: SvdJob;
        dtype T: Svd = x;
        body = |pool, x, x_out, s, u, vt, info, mode| {
            svd_cpu(Driver::Gesdd, pool, x, Results { x_out, s, u, vt, info }, mode)
        };
    }

    /// SVD on the host through LAPACK's `?gesvd`, batch split across XLA's thread pool.
    pub fn ferrax_cpu_gesvd(GESVD_TARGET, Cpu) {
        ctx pool: ThreadPool;
        arg x: Matrices<T>;
        ret x_out: Matrices<T>;
        ret s: Array<Real<T>>;
        ret u: Matrices<T>;
        ret vt: Matrices<T>;
        ret info: Array<i32>;
        attr mode: SvdJob;
        dtype T: Svd = x;
        body = |pool, x, x_out, s, u, vt, info, mode| {
            svd_cpu(Driver::Gesvd, pool, x, Results { x_out, s, u, vt, info }, mode)
        };
    }
}

fn svd_cpu<T: Svd>(
    driver: Driver,
    pool: ThreadPool<'_>,
    x: Matrices<'_, T>,
    out: Results<'_, T, Real<T>>,
    mode: SvdJob,
) -> Result<()> {
    expect_shapes(&x, &out, mode)?;
    let column_major = Layout::ColumnMajor;
    // SAFETY: the results are distinct buffers, written by the core alone.
    let factors = unsafe {
        Factors {
            s: out.s.as_mut_slice(),
            u: Some(out.u.view(column_major)),
            vt: Some(out.vt.view(column_major)),
            info: out.info.as_mut_slice(),
        }
    };
    let (a, a_out) = (x.view(column_major), Some(out.x_out.view(column_major)));
    svd::svd(&pool, driver, mode, a, a_out, factors)
}
