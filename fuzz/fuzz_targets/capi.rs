//! The C ABI's argument checks: every family's function with layouts, batches, dimensions,
//! leading dimensions and LAPACK letters drawn from the input, on buffers filled from it (NaN
//! and Inf included). Each call must return 0 or -1 with a message, never crash, and never
//! panic inside ferrax's guard.
#![no_main]

#[path = "common.rs"]
mod common;

use common::capi::*;
use common::Choices;
use libfuzzer_sys::fuzz_target;
use num_complex::Complex;
use std::ffi::{c_char, c_int};

type C64 = Complex<f64>;

/// Elements of every buffer (16 bytes each, the widest scalar).
const CAPACITY: usize = 1 << 11;

/// The C ABI's arguments drawn from the input.
trait Arguments {
    fn layout(&mut self) -> c_int;
    fn letter(&mut self) -> c_char;
    fn int(&mut self) -> i32;
}

impl Arguments for Choices<'_> {
    fn layout(&mut self) -> c_int {
        [101, 102, 101, 102, 0, -1][usize::from(self.byte()) % 6]
    }
    fn letter(&mut self) -> c_char {
        let letters = b"NVLUTCASOINVLU";
        let pick = self.byte();
        (if pick >= 240 { pick } else { letters[usize::from(pick) % letters.len()] }) as c_char
    }
    fn int(&mut self) -> i32 {
        common::dim(self.byte()).clamp(i32::MIN.into(), i32::MAX.into()) as i32
    }
}

/// A buffer of `CAPACITY` elements of every scalar type, filled from the input.
fn buffer(choices: &mut Choices) -> Vec<C64> {
    let special = [0.0, 1.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e-300, 1e300];
    let seed = choices.byte();
    (0..CAPACITY)
        .map(|i| {
            let k = (i * 31 + usize::from(seed)) % 97;
            let re = if seed >= 200 && k < special.len() { special[k] } else { k as f64 / 7.0 - 5.0 };
            C64::new(re, (k % 13) as f64 - 6.0)
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    common::capi::load_lapack();
    let mut choices = Choices(data);
    let function = choices.byte() % 17;
    let layout = choices.layout();
    let batch = common::dim(choices.byte());
    let ints: Vec<i32> = (0..6).map(|_| choices.int()).collect();
    let letters: Vec<c_char> = (0..4).map(|_| choices.letter()).collect();
    let mut dims: Vec<i64> = ints.iter().map(|&i| i.into()).collect();
    // csrmm's `batch` is its nonzero count: a size like the others, and one matrix.
    let matrices = if function == 16 {
        dims.push(batch);
        1
    } else {
        batch
    };
    if !common::callable(matrices, &dims, CAPACITY) {
        return;
    }
    let mut buffers: Vec<Vec<C64>> = (0..8).map(|_| buffer(&mut choices)).collect();
    let indices: Vec<i32> = (0..CAPACITY).map(|i| common::dim(choices.byte()) as i32 ^ (i as i32 & 1)).collect();
    let z = |k: usize, buffers: &mut Vec<Vec<C64>>| buffers[k].as_mut_ptr();
    let d = |k: usize, buffers: &mut Vec<Vec<C64>>| buffers[k].as_mut_ptr().cast::<f64>();
    let i = |k: usize, buffers: &mut Vec<Vec<C64>>| buffers[k].as_mut_ptr().cast::<i32>();
    let [m, n, k, ld1, ld2, ld3] = ints[..] else { unreachable!() };
    let [l1, l2, l3, l4] = letters[..] else { unreachable!() };
    let b = &mut buffers;
    // SAFETY (every call): each pointer has CAPACITY elements, and `callable` admits only
    // calls whose arrays fit in them or that a check must refuse.
    let rc = unsafe {
        match function {
            0 => ferrax_dgetrf(layout, batch, m, n, d(0, b), ld1, i(1, b), i(2, b)),
            1 => ferrax_zgetrf(layout, batch, m, n, z(0, b), ld1, i(1, b), i(2, b)),
            2 => ferrax_dpotrf(layout, batch, l1, n, d(0, b), ld1, i(1, b)),
            3 => ferrax_dgeqrf(layout, batch, m, n, d(0, b), ld1, d(1, b)),
            4 => ferrax_dorgqr(layout, batch, m, n, k, d(0, b), ld1, d(1, b)),
            5 => ferrax_dtrsm(layout, batch, l1, l2, l3, l4, m, n, d(0, b), ld1, d(1, b), ld2),
            6 => ferrax_dgesdd(layout, batch, l1, m, n, d(0, b), ld1, d(1, b), d(2, b), ld2,
                d(3, b), ld3, i(4, b)),
            7 => ferrax_zgesvd(layout, batch, l1, m, n, z(0, b), ld1, d(1, b), z(2, b), ld2,
                z(3, b), ld3, i(4, b)),
            8 => ferrax_zheevd(layout, batch, l1, l2, n, z(0, b), ld1, d(1, b), i(2, b)),
            9 => ferrax_dgehrd(layout, batch, n, m, k, d(0, b), ld1, d(1, b), i(2, b)),
            10 => ferrax_dsytrd(layout, batch, l1, n, d(0, b), ld1, d(1, b), d(2, b), d(3, b),
                i(4, b)),
            11 => ferrax_dgeev(layout, batch, l1, l2, n, d(0, b), ld1, z(1, b), z(2, b), ld2,
                z(3, b), ld3, i(4, b)),
            12 => ferrax_zgees(layout, batch, l1, n, z(0, b), ld1, z(1, b), z(2, b), ld2, i(3, b)),
            13 => ferrax_dormqr(layout, batch, l1, l2, m, n, k, d(0, b), ld1, d(1, b), d(2, b),
                ld2),
            14 => ferrax_dgtsv(layout, batch, n, k, d(0, b), d(1, b), d(2, b), d(3, b), ld1,
                i(4, b)),
            15 => ferrax_dgtsv_perturbed(layout, batch, n, k, d(0, b), d(1, b), d(2, b), d(3, b),
                ld1),
            _ => {
                // CSR: one matrix (`batch` is the nonzero count), indices from the input.
                let (indptr, cols) = (indices.as_ptr(), indices[CAPACITY / 2..].as_ptr());
                ferrax_dcsrmm(m.into(), n.into(), batch, d(0, b), indptr, cols, k.into(),
                    d(1, b), d(2, b))
            }
        }
    };
    match rc {
        0 => {}
        -1 => common::no_panic(&common::capi::last_error()),
        other => panic!("return code {other}"),
    }
});
