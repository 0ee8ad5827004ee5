//! One step of one batch row of each cell, forward and backward, over the row's hidden units:
//! the pointwise part of the recurrence (the matrix products are BLAS calls in `forward` and
//! `backward`). cuDNN's equations (`cudnnRNNMode_t`), which are PyTorch's:
//!
//! - `Relu`/`Tanh`: `h' = act(a)` with `a = W x + R h + b_W + b_R`.
//! - `Lstm`, gates i, f, g, o: `c' = f⊙c + i⊙g`, `h' = o⊙tanh(c')`.
//! - `Gru`, gates r, z, n: `n = tanh(W_n x + b_Wn + r⊙(R_n h + b_Rn))`,
//!   `h' = (1 - z)⊙n + z⊙h`.
//!
//! The activations are branch-free polynomial approximations for f32 (Cephes' `expf` and
//! `tanhf`, within a few ulp), so that the loops over a row vectorize, with fused multiply-adds
//! (the handlers run these loops on CPUs with FMA; elsewhere `mul_add` is exact but slow);
//! f64 uses the standard library's.

use super::RnnScalar;

/// What the forward pass keeps of one step of one row for the backward pass, and how the
/// cell combines the projected input (`pre`, `W x`) with the recurrent product (`hw`, `R h`)
/// and the biases.
pub(crate) trait Cell<T: RnnScalar> {
    /// Whether the gradient of the recurrent product differs from the projected input's
    /// (GRU's n gate sees `R_n h + b_Rn` through `r`).
    const SPLIT_GRADIENT: bool;

    /// The biases added to the gates' pre-activations: `b_W + b_R` where they add (GRU's
    /// `b_Rn` stays apart, see [`Cell::forward`]).
    fn fold_bias(b_ih: &[T], b_hh: &[T], out: &mut [T]);

    /// One step: the gates' pre-activations are `pre + hw + bias` (`bias` from
    /// [`Cell::fold_bias`]); `h` and `c` (LSTM only; empty otherwise) are the state, read and
    /// updated;
    /// `saved` gets [`Mode::saved`](super::Mode::saved)` · hidden` values (LSTM: i, f, g, o
    /// and the new cell state; GRU: r, z, n and the n gate's recurrent product with its bias).
    #[allow(clippy::too_many_arguments)] // one step's operands, as the equations name them
    fn forward(
        pre: &[T],
        hw: &[T],
        bias: &[T],
        b_hh: &[T],
        h: &mut [T],
        c: &mut [T],
        saved: &mut [T],
    );

    /// The backward of one step. In: `dh`, the gradient of the step's output `h` (from the
    /// layer's output and the next step), `saved`, `h` (the step's output), `h_prev`,
    /// `c_prev` (LSTM; empty otherwise), and in `dc` the gradient of the step's cell state
    /// (LSTM). Out: `d_in`, the gradient of the gate pre-activations as the input projection
    /// sees them, `d_rec` (GRU only, [`Cell::SPLIT_GRADIENT`]) as the recurrent product sees
    /// them, `dh_prev` the gradient of `h_prev` apart from the recurrent product's, and in
    /// `dc` the gradient of `c_prev`.
    #[allow(clippy::too_many_arguments)] // one step's operands, as the equations name them
    fn backward(
        dh: &[T],
        saved: &[T],
        h: &[T],
        h_prev: &[T],
        c_prev: &[T],
        dc: &mut [T],
        d_in: &mut [T],
        d_rec: &mut [T],
        dh_prev: &mut [T],
    );
}

/// The single-gate cells with activation ReLU (`RELU`) or tanh.
pub(crate) struct Plain<const RELU: bool>;
pub(crate) struct Lstm;
pub(crate) struct Gru;

fn add<T: RnnScalar>(a: &[T], b: &[T], out: &mut [T]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
}

impl<T: RnnScalar, const RELU: bool> Cell<T> for Plain<RELU> {
    const SPLIT_GRADIENT: bool = false;

    fn fold_bias(b_ih: &[T], b_hh: &[T], out: &mut [T]) {
        add(b_ih, b_hh, out);
    }

    #[inline(always)]
    fn forward(pre: &[T], hw: &[T], bias: &[T], _: &[T], h: &mut [T], _: &mut [T], _: &mut [T]) {
        let n = h.len();
        let (pre, hw, bias, h) = (&pre[..n], &hw[..n], &bias[..n], &mut h[..n]);
        for j in 0..n {
            let a = pre[j] + hw[j] + bias[j];
            h[j] = if RELU { a.relu() } else { a.tanh() };
        }
    }

    #[inline(always)]
    fn backward(
        dh: &[T],
        _: &[T],
        h: &[T],
        _: &[T],
        _: &[T],
        _: &mut [T],
        d_in: &mut [T],
        _: &mut [T],
        dh_prev: &mut [T],
    ) {
        let n = dh.len();
        let (dh, h, d_in, dh_prev) = (&dh[..n], &h[..n], &mut d_in[..n], &mut dh_prev[..n]);
        for j in 0..n {
            // The derivative from the output: relu' = [h > 0], tanh' = 1 - h².
            let slope = if RELU {
                if h[j] > T::ZERO {
                    T::ONE
                } else {
                    T::ZERO
                }
            } else {
                T::ONE - h[j] * h[j]
            };
            d_in[j] = dh[j] * slope;
            dh_prev[j] = T::ZERO;
        }
    }
}

impl<T: RnnScalar> Cell<T> for Lstm {
    const SPLIT_GRADIENT: bool = false;

    fn fold_bias(b_ih: &[T], b_hh: &[T], out: &mut [T]) {
        add(b_ih, b_hh, out);
    }

    #[inline(always)]
    fn forward(
        pre: &[T],
        hw: &[T],
        bias: &[T],
        _: &[T],
        h: &mut [T],
        c: &mut [T],
        saved: &mut [T],
    ) {
        let n = h.len();
        let [p_i, p_f, p_g, p_o] = gates(pre, n);
        let [r_i, r_f, r_g, r_o] = gates(hw, n);
        let [b_i, b_f, b_g, b_o] = gates(bias, n);
        let [s_i, s_f, s_g, s_o, s_c] = gates_mut(saved, n);
        let (h, c) = (&mut h[..n], &mut c[..n]);
        for j in 0..n {
            let i = (p_i[j] + r_i[j] + b_i[j]).sigmoid();
            let f = (p_f[j] + r_f[j] + b_f[j]).sigmoid();
            let g = (p_g[j] + r_g[j] + b_g[j]).tanh();
            let o = (p_o[j] + r_o[j] + b_o[j]).sigmoid();
            let c_new = f * c[j] + i * g;
            c[j] = c_new;
            h[j] = o * c_new.tanh();
            (s_i[j], s_f[j], s_g[j], s_o[j], s_c[j]) = (i, f, g, o, c_new);
        }
    }

    #[inline(always)]
    fn backward(
        dh: &[T],
        saved: &[T],
        _: &[T],
        _: &[T],
        c_prev: &[T],
        dc: &mut [T],
        d_in: &mut [T],
        _: &mut [T],
        dh_prev: &mut [T],
    ) {
        let n = dh.len();
        let [s_i, s_f, s_g, s_o, s_c] = gates(saved, n);
        let [d_i, d_f, d_g, d_o] = gates_mut(d_in, n);
        let (dh, c_prev, dc, dh_prev) = (&dh[..n], &c_prev[..n], &mut dc[..n], &mut dh_prev[..n]);
        for j in 0..n {
            let (i, f, g, o) = (s_i[j], s_f[j], s_g[j], s_o[j]);
            let tanh_c = s_c[j].tanh();
            let dc_total = dc[j] + dh[j] * o * (T::ONE - tanh_c * tanh_c);
            d_i[j] = dc_total * g * i * (T::ONE - i);
            d_f[j] = dc_total * c_prev[j] * f * (T::ONE - f);
            d_g[j] = dc_total * i * (T::ONE - g * g);
            d_o[j] = dh[j] * tanh_c * o * (T::ONE - o);
            dc[j] = dc_total * f;
            dh_prev[j] = T::ZERO;
        }
    }
}

impl<T: RnnScalar> Cell<T> for Gru {
    const SPLIT_GRADIENT: bool = true;

    /// Both biases of r and z; only the input's of n (`b_Rn` is scaled by r).
    fn fold_bias(b_ih: &[T], b_hh: &[T], out: &mut [T]) {
        let n = out.len() / 3;
        add(&b_ih[..2 * n], &b_hh[..2 * n], &mut out[..2 * n]);
        out[2 * n..].copy_from_slice(&b_ih[2 * n..]);
    }

    #[inline(always)]
    fn forward(
        pre: &[T],
        hw: &[T],
        bias: &[T],
        b_hh: &[T],
        h: &mut [T],
        _: &mut [T],
        saved: &mut [T],
    ) {
        let n = h.len();
        let [p_r, p_z, p_n] = gates(pre, n);
        let [r_r, r_z, r_n] = gates(hw, n);
        let [b_r, b_z, b_in] = gates(bias, n);
        let [_, _, b_n] = gates(b_hh, n);
        let [s_r, s_z, s_n, s_hn] = gates_mut(saved, n);
        let h = &mut h[..n];
        for j in 0..n {
            let r = (p_r[j] + r_r[j] + b_r[j]).sigmoid();
            let z = (p_z[j] + r_z[j] + b_z[j]).sigmoid();
            let hn = r_n[j] + b_n[j];
            let candidate = (p_n[j] + b_in[j] + r * hn).tanh();
            h[j] = candidate + z * (h[j] - candidate);
            (s_r[j], s_z[j], s_n[j], s_hn[j]) = (r, z, candidate, hn);
        }
    }

    #[inline(always)]
    fn backward(
        dh: &[T],
        saved: &[T],
        _: &[T],
        h_prev: &[T],
        _: &[T],
        _: &mut [T],
        d_in: &mut [T],
        d_rec: &mut [T],
        dh_prev: &mut [T],
    ) {
        let n = dh.len();
        let [s_r, s_z, s_n, s_hn] = gates(saved, n);
        let [di_r, di_z, di_n] = gates_mut(d_in, n);
        let [dr_r, dr_z, dr_n] = gates_mut(d_rec, n);
        let (dh, h_prev, dh_prev) = (&dh[..n], &h_prev[..n], &mut dh_prev[..n]);
        for j in 0..n {
            let (r, z, candidate, hn) = (s_r[j], s_z[j], s_n[j], s_hn[j]);
            let d_candidate = dh[j] * (T::ONE - z) * (T::ONE - candidate * candidate);
            let d_r = d_candidate * hn * r * (T::ONE - r);
            let d_z = dh[j] * (h_prev[j] - candidate) * z * (T::ONE - z);
            (di_r[j], di_z[j], di_n[j]) = (d_r, d_z, d_candidate);
            (dr_r[j], dr_z[j], dr_n[j]) = (d_r, d_z, d_candidate * r);
            dh_prev[j] = dh[j] * z;
        }
    }
}

/// The first `K` blocks of `n` values of `values`, each exactly `n` long (so that the loops
/// over a block need no bounds checks and vectorize).
#[inline(always)]
fn gates<T, const K: usize>(values: &[T], n: usize) -> [&[T]; K] {
    let mut rest = values;
    std::array::from_fn(|_| {
        let (block, tail) = rest.split_at(n);
        rest = tail;
        &block[..n]
    })
}

/// [`gates`] for writing.
#[inline(always)]
fn gates_mut<T, const K: usize>(values: &mut [T], n: usize) -> [&mut [T]; K] {
    let mut rest = values;
    std::array::from_fn(|_| {
        let (block, tail) = std::mem::take(&mut rest).split_at_mut(n);
        rest = tail;
        block
    })
}

/// Cephes' `expf`: `2^n · p(r)` with `x = n·ln 2 + r`, `|r| ≤ ln 2 / 2`. NaN stays NaN; the
/// argument is clamped to where `2^n` is a normal number.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    // Comparisons rather than min/max, which would turn NaN into the bound.
    let x = if x > 88.0 { 88.0 } else { x };
    let x = if x < -87.3 { -87.3 } else { x };
    // Round to nearest by the float-add trick, which also leaves n in the low bits of `t`:
    // integer arithmetic from there, where a float-to-int conversion (saturating in Rust)
    // would not vectorize.
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = n.mul_add(2.121_944_4e-4, n.mul_add(-0.693_359_4, x));
    let p = 1.987_569_1e-4f32;
    let p = p.mul_add(r, 1.398_2e-3);
    let p = p.mul_add(r, 8.333_452e-3);
    let p = p.mul_add(r, 4.166_579_6e-2);
    let p = p.mul_add(r, 0.166_666_65);
    let p = p.mul_add(r, 0.5);
    let p = (p * r).mul_add(r, r + 1.0);
    // 2^n for n in [-126, 127] (NaN gives any scale here and NaN above).
    let biased = t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127);
    p * f32::from_bits(biased << 23)
}

/// Cephes' `tanhf`: an odd polynomial below 0.625, `1 - 2/(e^{2|x|} + 1)` above; both
/// computed and one selected, so that the loop vectorizes.
#[inline(always)]
pub(crate) fn tanh_f32(x: f32) -> f32 {
    let z = x * x;
    let p = -5.704_988_7e-3f32;
    let p = p.mul_add(z, 2.063_909e-2);
    let p = p.mul_add(z, -5.373_971_6e-2);
    let p = p.mul_add(z, 0.133_314_42);
    let p = p.mul_add(z, -0.333_332_8);
    let small = (p * z).mul_add(x, x);
    let large = (1.0 - 2.0 / (exp_f32(2.0 * x.abs()) + 1.0)).copysign(x);
    if x.abs() < 0.625 {
        small
    } else {
        large
    }
}

#[inline(always)]
pub(crate) fn sigmoid_f32(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-x))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every 97th f32 in [-100, 100], with the extremes, against f64's functions.
    fn arguments() -> impl Iterator<Item = f32> {
        let (lo, hi) = ((-100.0f32).to_bits(), 100.0f32.to_bits());
        (0..=hi)
            .step_by(97)
            .map(f32::from_bits)
            .chain((lo & 0x7fff_ffff..=lo).step_by(97).map(f32::from_bits))
            .chain([0.0, -0.0, 0.625, -0.625, 88.0, -88.0, 1e-30])
    }

    fn ulps(got: f32, want: f64) -> f64 {
        let want32 = want as f32;
        ((got as f64) - want).abs()
            / (want32.abs().max(f32::MIN_POSITIVE) as f64 * f32::EPSILON as f64)
    }

    #[test]
    fn activations_are_within_a_few_ulp_of_f64() {
        let mut worst = [0.0f64; 3];
        for x in arguments() {
            let wide = x as f64;
            let sigmoid = 1.0 / (1.0 + (-wide).exp());
            for (k, (got, want)) in [
                (
                    exp_f32(x.clamp(-87.0, 88.0)),
                    (wide.clamp(-87.0, 88.0)).exp(),
                ),
                (tanh_f32(x), wide.tanh()),
                (sigmoid_f32(x), sigmoid),
            ]
            .into_iter()
            .enumerate()
            {
                // Sigmoid's tail below f32's normal range is flushed: an absolute error there.
                if want.abs() < f32::MIN_POSITIVE as f64 {
                    assert!(got.abs() < 1e-37, "{k}: f({x}) = {got}, want {want}");
                    continue;
                }
                worst[k] = worst[k].max(ulps(got, want));
            }
        }
        assert!(
            worst.iter().all(|&u| u <= 4.0),
            "worst ulps (exp, tanh, sigmoid): {worst:?}"
        );
    }

    #[test]
    fn activations_keep_nan_and_saturate_at_infinity() {
        for f in [exp_f32, tanh_f32, sigmoid_f32] {
            assert!(f(f32::NAN).is_nan());
        }
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert_eq!(sigmoid_f32(f32::INFINITY), 1.0);
        assert!(sigmoid_f32(f32::NEG_INFINITY) < 1e-37);
    }
}
