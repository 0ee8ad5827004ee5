//! `linalg::bidiag_over_pool`: one `m × n` matrix (`m ≥ n`) reduced to upper bidiagonal form
//! with each step's pass split over the pool. `Q·B·Pᴴ` is the matrix and `Q`, `P` unitary, to
//! `10·m·ε` of the largest element, with `B` the result's bidiagonal and `Q`, `P` its left and
//! right reflectors applied to the identity by faer's blocked application (as the SVD's
//! back-transformations apply them): dense, rank-one and graded matrices, square and tall, of
//! sizes below and past the 65 columns from which steps go over the pool, the four dtypes,
//! with two and three slabs per step (helpers on threads of their own), on one thread, and on
//! a pool whose helpers never come (more threads than a step has slabs).

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
use faer::{Conj, Mat, MatRef, Par};
use ferrax::linalg::bidiag_over_pool::bidiag_over_pool;
use ferrax::linalg::parallel::{Pool, Serial};
use ferrax::linalg::LapackScalar;
use largest::largest;
use num_complex::Complex;
use pools::{Absent, Spawn};
use rng::Rng;

/// `essentials`' reflectors (below its diagonal, `τ` blocks in `factors`) applied to the
/// identity of order `order`, from its row `first`.
fn reflectors<T: LapackScalar>(
    essentials: MatRef<'_, T>,
    factors: MatRef<'_, T>,
    conj: Conj,
    order: usize,
    first: usize,
) -> Mat<T> {
    let mut q = Mat::<T>::identity(order, order);
    let rows = order - first;
    if factors.ncols() > 0 {
        let request = apply_scratch::<T>(rows, factors.nrows(), order);
        let mut scratch = MemBuffer::new(request);
        let q = q.as_mut().subrows_mut(first, rows);
        apply(
            essentials,
            factors,
            conj,
            q,
            Par::Seq,
            MemStack::new(&mut scratch),
        );
    }
    q
}

fn reduces<T: LapackScalar>(what: &str, element: impl Fn(&mut Rng) -> T, eps: f64) {
    let mut rng = Rng::fresh(what);
    let shapes = [
        (1, 1),
        (2, 2),
        (5, 3),
        (40, 40),
        (66, 66),
        (70, 66),
        (150, 150),
        (260, 130),
    ];
    for ((m, n), structure) in shapes
        .into_iter()
        .flat_map(|shape| [(shape, "dense"), (shape, "rank-one"), (shape, "graded")])
    {
        let dense = Mat::<T>::from_fn(m, n, |_, _| element(&mut rng));
        let (u, v) = (element(&mut rng), element(&mut rng));
        let (left, right): (Vec<T>, Vec<T>) = (0..m.max(n))
            .map(|_| (element(&mut rng), element(&mut rng)))
            .unzip();
        // Rows and columns scaled from 1 down to √ε: reflectors of every scale.
        let scale = |i: usize, of: usize| T::from_f64_impl(eps.powf(0.5 * i as f64 / of as f64));
        // After a rank-one matrix's first step the slabs reduce a matrix of rounding errors.
        let a = Mat::<T>::from_fn(m, n, |i, j| match structure {
            "rank-one" => u * left[i] * (v * right[j]).conj(),
            "graded" => scale(i, m) * dense[(i, j)] * scale(j, n),
            _ => dense[(i, j)],
        });
        let tolerance = 10.0 * m as f64 * eps * largest(a.as_ref());
        let block = 32.min(n);
        let pools: [&dyn Pool; 4] = [&Spawn(2), &Spawn(3), &Serial, &Absent(12)];
        for pool in pools {
            let mut reduced = a.clone();
            let mut left_factors = Mat::<T>::zeros(block, n);
            let mut right_factors = Mat::<T>::zeros(block, n - 1);
            bidiag_over_pool(
                pool,
                reduced.as_mut(),
                left_factors.as_mut(),
                right_factors.as_mut(),
            )
            .unwrap();
            let b = Mat::<T>::from_fn(m, n, |i, j| {
                if i == j || i + 1 == j {
                    reduced[(i, j)]
                } else {
                    T::zero_impl()
                }
            });
            let q = reflectors(reduced.as_ref(), left_factors.as_ref(), Conj::No, m, 0);
            // The right reflectors are rows: as columns, conjugated (faer's SVD's convention).
            let rows = Mat::<T>::from_fn(n - 1, n - 1, |i, j| reduced[(j, i + 1)]);
            let p = reflectors(rows.as_ref(), right_factors.as_ref(), Conj::Yes, n, 1);
            let residual = &a - &(&q * &b * p.adjoint());
            let error = largest(residual.as_ref());
            assert!(
                error <= tolerance,
                "{m}×{n}, {structure}: |A - Q·B·Pᴴ| {error:e} > {tolerance:e}"
            );
            for (name, f, order) in [("Q", &q, m), ("P", &p, n)] {
                let unitary = &(f.adjoint() * f) - &Mat::<T>::identity(order, order);
                let error = largest(unitary.as_ref());
                let bound = 10.0 * order as f64 * eps;
                assert!(
                    error <= bound,
                    "{m}×{n}, {structure}: |{name}ᴴ{name} - I| {error:e}"
                );
            }
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
