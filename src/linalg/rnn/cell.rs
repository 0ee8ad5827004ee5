//! The cells' pointwise step over one batch row's hidden units: the kernels crate's per-unit
//! arithmetic ([`ferrax_kernels::rnn::Cell`], which the GPU's step kernels share) in loops over
//! the row that vectorize (gate blocks as exact-length slices, no bounds checks).

use crate::linalg::vector_unit::simd_dispatch;
use ferrax_kernels::rnn::{Activation, Cell};

/// The first `count` blocks of `n` values of `values`, each exactly `n` long; the others
/// empty and never read. (Destructured into locals by the callers: an array of slices indexed
/// in the loop kept the loop from vectorizing.)
#[inline(always)]
fn blocks<T, const K: usize>(values: &[T], n: usize, count: usize) -> [&[T]; K] {
    std::array::from_fn(|k| {
        if k < count {
            &values[k * n..][..n]
        } else {
            &[]
        }
    })
}

/// [`blocks`] for writing.
#[inline(always)]
fn blocks_mut<T, const K: usize>(values: &mut [T], n: usize, count: usize) -> [&mut [T]; K] {
    let mut rest = values;
    std::array::from_fn(|k| {
        if k >= count {
            return &mut [][..];
        }
        let (block, tail) = std::mem::take(&mut rest).split_at_mut(n);
        rest = tail;
        block
    })
}

/// `block[j]` where the block is live (a constant per cell), else zero.
#[inline(always)]
fn at<T: Activation>(block: &[T], j: usize, live: bool) -> T {
    if live {
        block[j]
    } else {
        T::ZERO
    }
}

simd_dispatch! {
/// One step of a row: `x` (`W x`) and `r` (`R h`) the gates' products, `b_ih`, `b_hh` the
/// biases, all `gates × n`; `h` and `c` (empty without a cell state) the state, updated;
/// `saved` gets [`Mode::saved`](ferrax_kernels::rnn::Mode::saved)` × n` values.
///
/// A function boundary of its own, with the widest vector unit: the row's slices keep their
/// no-alias guarantee (inlined into the step loop, where the reserve's rows come from a shared
/// pointer, the loop stayed scalar).
pub(crate) fn forward_row<T: Activation, C: Cell>(
    products: [&[T]; 4],
    h: &mut [T],
    c: &mut [T],
    saved: &mut [T],
) {
    let n = h.len();
    let [x, r, b_ih, b_hh] = products;
    let (gates, kept, cell) = (C::MODE.gates(), C::MODE.saved(), C::MODE.has_cell_state());
    let [x0, x1, x2, x3] = blocks(x, n, gates);
    let [r0, r1, r2, r3] = blocks(r, n, gates);
    let [bi0, bi1, bi2, bi3] = blocks(b_ih, n, gates);
    let [bh0, bh1, bh2, bh3] = blocks(b_hh, n, gates);
    let [s0, s1, s2, s3, s4] = blocks_mut(saved, n, kept);
    let c = if cell { &mut c[..n] } else { c };
    let live = [0 < gates, 1 < gates, 2 < gates, 3 < gates];
    // Arrays written out, not `std::array::from_fn`: that one stays a call compiled for the
    // baseline x86-64 (outside this function's vector unit), and the loop scalar.
    let quad = |[b0, b1, b2, b3]: [&[T]; 4], j: usize| {
        [
            at(b0, j, live[0]),
            at(b1, j, live[1]),
            at(b2, j, live[2]),
            at(b3, j, live[3]),
        ]
    };
    for j in 0..n {
        let state = if cell { c[j] } else { T::ZERO };
        let step = C::forward(
            quad([x0, x1, x2, x3], j),
            quad([r0, r1, r2, r3], j),
            quad([bi0, bi1, bi2, bi3], j),
            quad([bh0, bh1, bh2, bh3], j),
            h[j],
            state,
        );
        h[j] = step.h;
        if cell {
            c[j] = step.c;
        }
        for (k, block) in [&mut *s0, &mut *s1, &mut *s2, &mut *s3, &mut *s4]
            .into_iter()
            .enumerate()
        {
            if k < kept {
                block[j] = step.saved[k];
            }
        }
    }
}
}

simd_dispatch! {
/// The backward of one step of a row. In: `dh`, the gradient of the step's output (from the
/// layer's output and the next step), the forward step's `saved` values, its output `h`, the
/// state it started from (`h_prev`, `c_prev`; empty without a cell state), and in `dc` the
/// gradient of its cell state. Out: `d_in` and (GRU) `d_rec`, `gates × n`, `dh_prev` the
/// previous state's gradient apart from the recurrent product's, and in `dc` the previous
/// cell state's.
#[allow(clippy::too_many_arguments)] // one step's operands, as the equations name them
pub(crate) fn backward_row<T: Activation, C: Cell>(
    dh: &[T],
    saved: &[T],
    states: [&[T]; 3],
    dc: &mut [T],
    d_in: &mut [T],
    d_rec: &mut [T],
    dh_prev: &mut [T],
) {
    let n = dh.len();
    let [h, h_prev, c_prev] = states;
    let (gates, kept, cell) = (C::MODE.gates(), C::MODE.saved(), C::MODE.has_cell_state());
    let split = C::MODE.split_gradient();
    let [s0, s1, s2, s3, s4] = blocks(saved, n, kept);
    let [di0, di1, di2, di3] = blocks_mut(d_in, n, gates);
    let [dr0, dr1, dr2, dr3] = blocks_mut(d_rec, n, if split { gates } else { 0 });
    let (dh, h, h_prev, dh_prev) = (&dh[..n], &h[..n], &h_prev[..n], &mut dh_prev[..n]);
    let (c_prev, dc) = if cell {
        (&c_prev[..n], &mut dc[..n])
    } else {
        (c_prev, dc)
    };
    for j in 0..n {
        let (dc_j, c_prev_j) = if cell {
            (dc[j], c_prev[j])
        } else {
            (T::ZERO, T::ZERO)
        };
        // Written out, not `std::array::from_fn` (see `forward_row`).
        let saved = [
            at(s0, j, 0 < kept),
            at(s1, j, 1 < kept),
            at(s2, j, 2 < kept),
            at(s3, j, 3 < kept),
            at(s4, j, 4 < kept),
        ];
        let g = C::backward(dh[j], dc_j, saved, h[j], h_prev[j], c_prev_j);
        for (k, block) in [&mut *di0, &mut *di1, &mut *di2, &mut *di3]
            .into_iter()
            .enumerate()
        {
            if k < gates {
                block[j] = g.d_in[k];
            }
        }
        if split {
            for (k, block) in [&mut *dr0, &mut *dr1, &mut *dr2, &mut *dr3]
                .into_iter()
                .enumerate()
            {
                if k < gates {
                    block[j] = g.d_rec[k];
                }
            }
        }
        dh_prev[j] = g.dh_prev;
        if cell {
            dc[j] = g.dc_prev;
        }
    }
}
}
