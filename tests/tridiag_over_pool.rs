//! `linalg::tridiag_over_pool`: one self-adjoint matrix reduced to tridiagonal form with each
//! step's pass split over the pool. `Q·T·Qᴴ` is the matrix and `Q` unitary, to `10·n·ε` of the
//! largest element, with `T` the result's tridiagonal and `Q` its reflectors applied to the
//! identity by faer's blocked application (as the eigenvectors' back-transformation applies
//! them): dense, rank-one and graded matrices of orders below and past the 66 from which
//! steps go over the pool, the four dtypes, with two and three slabs per step (helpers on
//! threads of their own), on one thread, and on a pool whose helpers never come (more threads
//! than a step has slabs).

#[path = "common/largest.rs"]
mod largest;
#[path = "common/pools.rs"]
mod pools;
#[path = "common/rng.rs"]
mod rng;

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::householder::{
    apply_block_householder_sequence_on_the_left_in_place_scratch as apply_scratch,
    apply_block_householder_sequence_on_the_left_in_place_with_conj as apply,
};
use faer::linalg::matmul::matmul;
use faer::{Accum, Conj, Mat, Par};
use ferrax::linalg::parallel::{Pool, Serial};
use ferrax::linalg::tridiag_over_pool::tridiag_over_pool;
use ferrax::linalg::LapackScalar;
use largest::largest;
use num_complex::Complex;
use pools::{Absent, Spawn};
use rng::Rng;

fn reduces<T: LapackScalar>(what: &str, element: impl Fn(&mut Rng) -> T, eps: f64) {
    let mut rng = Rng::fresh(what);
    for (n, structure) in [1, 2, 5, 40, 67, 150, 301]
        .into_iter()
        .flat_map(|n| [(n, "dense"), (n, "rank-one"), (n, "graded")])
    {
        let lower = Mat::<T>::from_fn(n, n, |_, _| element(&mut rng));
        let v = Mat::<T>::from_fn(n, 1, |_, _| element(&mut rng));
        // Rows and columns scaled from 1 down to √ε: reflectors of every scale.
        let scale = |i: usize| T::from_f64_impl(eps.powf(0.5 * i as f64 / n as f64));
        // Self-adjoint, from `lower`'s lower triangle (a real diagonal), or `v·vᴴ`, after
        // whose first step the slabs reduce a trailing matrix of rounding errors.
        let a = Mat::<T>::from_fn(n, n, |i, j| {
            let element = if structure == "rank-one" {
                v[(i, 0)] * v[(j, 0)].conj()
            } else if i == j {
                T::from_real(lower[(i, i)].re())
            } else if i > j {
                lower[(i, j)]
            } else {
                lower[(j, i)].conj()
            };
            match structure {
                "graded" => scale(i) * element * scale(j),
                _ => element,
            }
        });
        let tolerance = 10.0 * n as f64 * eps * largest(a.as_ref());
        let block = 32.min(n.max(1));
        let pools: [&dyn Pool; 4] = [&Spawn(2), &Spawn(3), &Serial, &Absent(12)];
        for pool in pools {
            // The strict upper triangle is garbage: the reduction must not read it.
            let mut reduced =
                Mat::<T>::from_fn(n, n, |i, j| if i >= j { a[(i, j)] } else { T::nan_impl() });
            let mut factors = Mat::<T>::zeros(block, n.saturating_sub(1));
            tridiag_over_pool(pool, reduced.as_mut(), factors.as_mut()).unwrap();
            let t = Mat::<T>::from_fn(n, n, |i, j| match i.abs_diff(j) {
                0 => reduced[(i, i)],
                1 if i > j => reduced[(i, j)],
                1 => reduced[(j, i)].conj(),
                _ => T::zero_impl(),
            });
            let mut q = Mat::<T>::identity(n, n);
            if n > 1 {
                let mut scratch = MemBuffer::new(apply_scratch::<T>(n - 1, block, n));
                apply(
                    reduced.as_ref().submatrix(1, 0, n - 1, n - 1),
                    factors.as_ref(),
                    Conj::No,
                    q.as_mut().subrows_mut(1, n - 1),
                    Par::Seq,
                    MemStack::new(&mut scratch),
                );
            }
            let mut residual = a.clone();
            let qt = &q * &t;
            matmul(
                residual.as_mut(),
                Accum::Add,
                qt.as_ref(),
                q.adjoint(),
                -T::one_impl(),
                Par::Seq,
            );
            let error = largest(residual.as_ref());
            assert!(
                error <= tolerance,
                "n {n}, {structure}: |A - Q·T·Qᴴ| {error:e} > {tolerance:e}"
            );
            let unitary = &(q.adjoint() * &q) - &Mat::<T>::identity(n, n);
            let error = largest(unitary.as_ref());
            let bound = 10.0 * n as f64 * eps;
            assert!(error <= bound, "n {n}, {structure}: |QᴴQ - I| {error:e}");
        }
    }
}

#[test]
fn reduces_f64() {
    reduces("f64", |rng| rng.uniform(), f64::EPSILON);
}

#[test]
fn reduces_f32() {
    reduces("f32", |rng| rng.uniform() as f32, f32::EPSILON.into());
}

#[test]
fn reduces_complex128() {
    reduces(
        "c128",
        |rng| Complex::new(rng.uniform(), rng.uniform()),
        f64::EPSILON,
    );
}

#[test]
fn reduces_complex64() {
    let element = |rng: &mut Rng| Complex::new(rng.uniform() as f32, rng.uniform() as f32);
    reduces("c64", element, f32::EPSILON.into());
}
