//! `linalg::coo::coo_times_dense` on every way it splits the entries (one pass; ordered rows,
//! each task owning a range; a task meeting a row outside its range, then per-task copies of
//! `out`; copies too large, then one pass), on pools of 1 to 4 threads, against a sequential
//! sum per entry. Integer entries and right-hand sides keep every sum exact, so the results
//! must be equal whatever the order of the sums.

#[path = "common/pools.rs"]
mod pools;
#[path = "common/rng.rs"]
mod rng;

use ferrax::linalg::coo::{coo_times_dense, Coo};
use pools::Spawn;
use rng::Rng;

/// `out` row `r` gets `data[e] * rhs[c]` for each entry `e` kept by jax's index rules.
fn reference(
    indices: &[i64],
    data: &[f64],
    rows: usize,
    cols: usize,
    transpose: bool,
    rhs: &[f64],
    n: usize,
) -> Vec<f64> {
    let wrap = |i: i64, len: usize| {
        let i = if i < 0 { i + len as i64 } else { i };
        (0..len as i64).contains(&i).then_some(i as usize)
    };
    let m = if transpose { cols } else { rows };
    let mut out = vec![0.0; m * n];
    for (e, pair) in indices.chunks_exact(2).enumerate() {
        let (Some(r), Some(c)) = (wrap(pair[0], rows), wrap(pair[1], cols)) else {
            continue;
        };
        let (r, c) = if transpose { (c, r) } else { (r, c) };
        for j in 0..n {
            out[r * n + j] += data[e] * rhs[c * n + j];
        }
    }
    out
}

/// Entries whose output rows come in `order`: sorted, unsorted, sorted but one (a stray),
/// or sorted with padding (past the end) and negative indices.
fn entries(
    rng: &mut Rng,
    order: &str,
    out_rows: usize,
    inner: usize,
    nse: usize,
) -> Vec<(i64, i64)> {
    let mut pairs: Vec<(i64, i64)> = (0..nse)
        .map(|_| (rng.range(0, out_rows) as i64, rng.range(0, inner) as i64))
        .collect();
    if order != "unsorted" {
        pairs.sort();
    }
    match order {
        "stray" => pairs[nse / 5].0 = out_rows as i64 - 1,
        "padded" => {
            for p in &mut pairs[nse - nse / 4..] {
                *p = (out_rows as i64, inner as i64);
            }
            for p in &mut pairs[..nse / 10] {
                p.1 -= inner as i64; // the same column, counted from the end
            }
        }
        _ => {}
    }
    pairs
}

#[test]
fn every_split_matches_the_sequential_sum() {
    let mut rng = Rng::fresh("coo");
    // 200,000 entries make 2 tasks of a matrix-vector product, 4 of n = 3 (MIN_FLOPS_PER_TASK);
    // 300,000 output rows make per-task copies too large.
    for (out_rows, inner, nse) in [
        (300, 200, 200_000),
        (300_000, 30, 200_000),
        (5, 7, 0),
        (1, 3, 200_000),
    ] {
        for order in ["sorted", "unsorted", "stray", "padded"] {
            if nse == 0 && order != "sorted" {
                continue;
            }
            for transpose in [false, true] {
                for n in [1, 3] {
                    let pairs = entries(&mut rng, order, out_rows, inner, nse);
                    let indices: Vec<i64> = pairs
                        .iter()
                        .flat_map(|&(o, i)| if transpose { [i, o] } else { [o, i] })
                        .collect();
                    let (rows, cols) = if transpose {
                        (inner, out_rows)
                    } else {
                        (out_rows, inner)
                    };
                    let data: Vec<f64> = (0..nse).map(|_| rng.range(0, 19) as f64 - 9.0).collect();
                    let rhs: Vec<f64> = (0..inner * n)
                        .map(|_| rng.range(0, 19) as f64 - 9.0)
                        .collect();
                    let expected = reference(&indices, &data, rows, cols, transpose, &rhs, n);
                    for threads in 1..=4 {
                        let mut out = vec![f64::NAN; out_rows * n];
                        let a = Coo {
                            data: &data,
                            indices: &indices,
                            rows,
                            cols,
                        };
                        coo_times_dense(&Spawn(threads), a, transpose, &rhs, n, &mut out).unwrap();
                        assert_eq!(
                            out, expected,
                            "{out_rows}×{inner}, {nse} entries {order}, transpose {transpose}, \
                             n {n}, {threads} threads"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn mismatched_lengths_are_an_error() {
    let (data, indices, rhs) = ([1.0f64; 2], [0i32; 3], [1.0f64; 2]);
    let a = Coo {
        data: &data,
        indices: &indices,
        rows: 2,
        cols: 2,
    };
    assert!(coo_times_dense(&Spawn(2), a, false, &rhs, 1, &mut [0.0; 2]).is_err());
}
