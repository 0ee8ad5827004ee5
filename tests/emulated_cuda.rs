//! Every CUDA target of ferrax, run unchanged on an emulated CUDA device
//! (`tests/emulated-cuda`: the driver, cuBLAS and cuSOLVER on the host, device memory guarded
//! by inaccessible pages, kernels run on the kernels crate's grid emulator) through a minimal
//! XLA FFI host for the CUDA platform (XLA's stream and a scratch allocator), for every dtype
//! and the shapes on both sides of each kernel/library crossover, against the CPU cores
//! (`ferrax::linalg`, which the CPU targets run) or identities. Each case also checks that the
//! emulation recorded no problem (a launch or library call the real device would reject, or a
//! copy outside its buffers) and that the path it means to cover ran.
//!
//! The process re-runs itself with the emulator first on its library path (as `libcuda.so`,
//! `libcublas.so` and `libcusolver.so`, where cudarc looks for them), so it needs the
//! emulator built (`cargo test --workspace` builds it). `EMULATED_CUDA_CASES=substring` runs
//! the matching cases only.

#[path = "common/api_table.rs"]
mod api_table;
#[path = "common/rng.rs"]
mod rng;

mod emulated {
    pub mod host;
    pub mod kernel_call;
    pub mod scalar;
    pub mod typed_kernel_call;
}

use emulated::host::{run, Attr, Device};
use emulated::scalar::{RandomInputs, Rng, TestScalar};
use ferrax::ffi::sys::XLA_FFI_Handler;
use ferrax::linalg::flags::{Side, Trans, Uplo};
use ferrax::linalg::matrix::{Batch, InOut, Layout};
use ferrax::linalg::parallel::Serial;
use ferrax::ops;
use num_complex::Complex;
use std::process::ExitCode;

fn main() -> ExitCode {
    match Device::start() {
        Ok(Some(device)) => run(&device, &cases()),
        Ok(None) => ExitCode::SUCCESS, // the parent, after the child ran
        Err(message) => {
            eprintln!("emulated_cuda: {message}");
            ExitCode::FAILURE
        }
    }
}

/// A case: its name and what it runs on the device (an error says what went wrong).
pub type Case = (String, Box<dyn Fn(&Device) -> Result<(), String>>);

/// Every case, for the four dtypes where the target takes them.
fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    macro_rules! each_dtype {
        ($name:literal, $f:ident $(, $arg:expr)*) => {
            cases.push((format!("{}/f32", $name), Box::new(move |d| $f::<f32>(d $(, $arg)*))));
            cases.push((format!("{}/f64", $name), Box::new(move |d| $f::<f64>(d $(, $arg)*))));
            cases.push((format!("{}/c64", $name), Box::new(move |d| $f::<Complex<f32>>(d $(, $arg)*))));
            cases.push((format!("{}/c128", $name), Box::new(move |d| $f::<Complex<f64>>(d $(, $arg)*))));
        };
    }
    each_dtype!("getrf column-major", getrf, Layout::ColumnMajor);
    each_dtype!("getrf row-major", getrf, Layout::RowMajor);
    each_dtype!("potrf lower", potrf, Uplo::Lower);
    each_dtype!("potrf upper", potrf, Uplo::Upper);
    each_dtype!("cholesky", cholesky);
    each_dtype!("geqrf and orgqr", geqrf_orgqr);
    each_dtype!("ormqr", ormqr);
    each_dtype!("qr reduced", qr, false);
    each_dtype!("qr complete", qr, true);
    each_dtype!("cholesky_update", cholesky_update);
    each_dtype!("tridiagonal_solve", tridiagonal_solve);
    each_dtype!("sparse products", sparse_products);
    each_dtype!("spsolve", spsolve);
    cases.push((
        "getrf past cuSOLVER's 32-bit sizes".into(),
        Box::new(getrf_past_32_bit_sizes),
    ));
    cases.push((
        "lu_pivots_to_permutation".into(),
        Box::new(pivots_to_permutation),
    ));
    cases.push(("threefry2x32".into(), Box::new(threefry2x32)));
    for mode in ferrax::linalg::rnn::Mode::ALL {
        let name = format!("rnn {mode:?}").to_lowercase();
        cases.push((
            format!("{name}/f32"),
            Box::new(move |d| rnn::<f32>(d, mode)),
        ));
        cases.push((
            format!("{name}/f64"),
            Box::new(move |d| rnn::<f64>(d, mode)),
        ));
    }
    cases.push(("threefry2x32_bits".into(), Box::new(threefry2x32_bits)));
    cases.push((
        "triton_kernel_call".into(),
        Box::new(emulated::kernel_call::triton_kernel_call),
    ));
    cases.push((
        "kernel_call".into(),
        Box::new(emulated::typed_kernel_call::kernel_call),
    ));
    cases
}

/// Checks that `calls` (what the emulator ran) include one whose name contains `path`.
fn expect_path(what: &str, calls: &[String], path: &str) -> Result<(), String> {
    if path.is_empty() || calls.iter().any(|c| c.contains(path)) {
        return Ok(());
    }
    Err(format!("{what}: expected a call of {path}, got {calls:?}"))
}

/// A batch of Hermitian positive definite `n × n` matrices (`A Aᴴ + n I`), the same in either
/// layout's reading up to conjugation.
fn positive_definite<T: TestScalar>(rng: &mut Rng, batch: usize, n: usize) -> Vec<T> {
    let x: Vec<T> = rng.matrix(batch * n * n);
    let mut a = vec![T::zero(); batch * n * n];
    for b in 0..batch {
        for i in 0..n {
            for j in 0..n {
                let mut sum = if i == j {
                    T::from_parts(n as f64, 0.0)
                } else {
                    T::zero()
                };
                for k in 0..n {
                    sum += x[b * n * n + k * n + i] * x[b * n * n + k * n + j].conj();
                }
                a[b * n * n + j * n + i] = sum;
            }
        }
    }
    a
}

// ---- Cholesky -------------------------------------------------------------------------------

/// `ferrax_potrf` (column-major, the `uplo` triangle) against the CPU core: the warp kernels,
/// the block kernel, and cuSOLVER past it (`potrfBatched` for a batch, which overwrites the
/// other triangle: only the factor's triangle is compared; `potrf` for one matrix), with an
/// indefinite matrix (info > 0).
fn potrf<T: TestScalar>(device: &Device, uplo: Uplo) -> Result<(), String> {
    let mut rng = Rng(12);
    let letter = if uplo == Uplo::Lower { b'L' } else { b'U' };
    for (batch, n, path) in [
        (9, 8, "ferrax_potrf_small_"),
        (3, 50, "_block"),
        (3, 130, "potrfBatched"),
        (1, 140, "potrf"),
        (0, 4, ""),
        (2, 0, ""),
    ] {
        let mut a: Vec<T> = positive_definite(&mut rng, batch, n);
        if batch > 1 && n > 0 {
            a[n * n + (n / 2) * (n + 1)] = T::from_parts(-1.0, 0.0); // indefinite: info > 0
        }
        let a_dev = device.upload(&a, dims3(batch, n, n));
        let factor = device.zeros::<T>(dims3(batch, n, n));
        let info = device.zeros::<i32>(vec![batch as i64]);
        let handler = ops::potrf::cuda::ferrax_cuda_potrf;
        let calls = device.call(
            handler,
            &[&a_dev],
            &[&factor, &info],
            &[("uplo", Attr::U8(letter))],
        )?;
        let what = format!("order {n}, batch {batch}");
        expect_path(&what, &calls, path)?;
        let (mut want, mut want_info) = (a.clone(), vec![0; batch]);
        // SAFETY: `want` holds the batch column-major.
        let view = unsafe { Batch::packed(want.as_mut_ptr(), [batch, n, n], Layout::ColumnMajor) };
        ferrax::linalg::potrf::potrf(&Serial, InOut::in_place(view), uplo, &mut want_info)
            .map_err(|e| e.message)?;
        expect_equal(&format!("{what} info"), &info.download::<i32>(), &want_info)?;
        let got = factor.download::<T>();
        let in_factor = |e: usize| {
            let (i, j) = (e % (n * n) % n, e % (n * n) / n);
            if uplo == Uplo::Lower {
                i >= j
            } else {
                i <= j
            }
        };
        for b in (0..batch).filter(|&b| want_info[b] == 0) {
            let pick = |m: &[T]| -> Vec<T> {
                (b * n * n..(b + 1) * n * n)
                    .filter(|&e| in_factor(e))
                    .map(|e| m[e])
                    .collect()
            };
            expect_close(
                &format!("{what}, matrix {b}"),
                &pick(&got),
                &pick(&want),
                tolerance::<T>(n, n as f64),
            )?;
        }
    }
    Ok(())
}

/// `ferrax_cholesky` (jax's whole `cholesky` on row-major arrays) against the CPU core: the
/// warp kernels up to 32, the block kernel up to 48, a failing matrix (NaN), and past 48 the
/// error that says to take jax's steps.
fn cholesky<T: TestScalar>(device: &Device) -> Result<(), String> {
    let mut rng = Rng(13);
    for (batch, n, symmetrize, path) in [
        (7, 4, true, "ferrax_cholesky_small_"),
        (3, 24, false, "ferrax_cholesky_small_"),
        (3, 48, true, "_block"),
    ] {
        let mut a: Vec<T> = positive_definite(&mut rng, batch, n);
        a[n * n] = T::from_parts(-5.0, 0.0); // matrix 1 fails at once
        let a_dev = device.upload(&a, dims3(batch, n, n));
        let l = device.zeros::<T>(dims3(batch, n, n));
        let handler = ops::potrf::cuda::ferrax_cuda_cholesky;
        let calls = device.call(
            handler,
            &[&a_dev],
            &[&l],
            &[("symmetrize_input", Attr::Bool(symmetrize))],
        )?;
        let what = format!("order {n}, batch {batch}");
        expect_path(&what, &calls, path)?;
        let mut want = vec![T::zero(); a.len()];
        ferrax::linalg::potrf::cholesky(&Serial, &a, &mut want, [batch, n], symmetrize)
            .map_err(|e| e.message)?;
        expect_close(
            &what,
            &l.download::<T>(),
            &want,
            tolerance::<T>(n, n as f64),
        )?;
    }
    let (a, l) = (
        device.zeros::<T>(dims3(1, 49, 49)),
        device.zeros::<T>(dims3(1, 49, 49)),
    );
    let handler = ops::potrf::cuda::ferrax_cuda_cholesky;
    match device.call(
        handler,
        &[&a],
        &[&l],
        &[("symmetrize_input", Attr::Bool(true))],
    ) {
        Err(message) if message.contains("up to 48") => Ok(()),
        other => Err(format!(
            "order 49: expected the error past the kernels, got {other:?}"
        )),
    }
}

// ---- QR -------------------------------------------------------------------------------------

/// `ferrax_geqrf` then `ferrax_orgqr` on its reflectors, against the CPU cores: the warp
/// kernels, the block kernels, and past them cuBLAS's batched geqrf (many matrices of up to
/// 256 rows) or cuSOLVER's looped one, and cuSOLVER's orgqr.
fn geqrf_orgqr<T: TestScalar>(device: &Device) -> Result<(), String> {
    let mut rng = Rng(14);
    let shapes = [
        (5, 8, 6, "ferrax_geqrf_small_", "ferrax_orgqr_small_"),
        (3, 60, 40, "_block", "_block"),
        // cuSOLVER's orgqr is ungqr for complex matrices.
        (9, 130, 30, "geqrfBatched", "gqr"),
        (2, 140, 129, "geqrf", "gqr"),
        (0, 7, 5, "", ""),
    ];
    for (batch, m, n, geqrf_path, orgqr_path) in shapes {
        let k = m.min(n);
        let a: Vec<T> = rng.matrix(batch * m * n);
        let a_dev = device.upload(&a, dims3(batch, m, n));
        let (x, tau) = (
            device.zeros::<T>(dims3(batch, m, n)),
            device.zeros::<T>(vec![batch as i64, k as i64]),
        );
        let what = format!("{m}×{n}, batch {batch}");
        let calls = device.call(
            ops::qr::cuda::ferrax_cuda_geqrf,
            &[&a_dev],
            &[&x, &tau],
            &[],
        )?;
        expect_path(&format!("{what} geqrf"), &calls, geqrf_path)?;
        let (mut want, mut want_tau) = (a.clone(), vec![T::zero(); batch * k]);
        // SAFETY: `want` holds the batch column-major.
        let view = unsafe { Batch::packed(want.as_mut_ptr(), [batch, m, n], Layout::ColumnMajor) };
        ferrax::linalg::qr::geqrf(&Serial, InOut::in_place(view), &mut want_tau)
            .map_err(|e| e.message)?;
        let tol = tolerance::<T>(m, 1.0);
        expect_close(&format!("{what} geqrf"), &x.download::<T>(), &want, tol)?;
        expect_close(
            &format!("{what} taus"),
            &tau.download::<T>(),
            &want_tau,
            tol,
        )?;
        // Q from the device's own reflectors.
        let q = device.zeros::<T>(dims3(batch, m, n));
        let calls = device.call(ops::qr::cuda::ferrax_cuda_orgqr, &[&x, &tau], &[&q], &[])?;
        expect_path(&format!("{what} orgqr"), &calls, orgqr_path)?;
        let (mut want_q, reflectors) = (x.download::<T>(), tau.download::<T>());
        // SAFETY: as above.
        let view =
            unsafe { Batch::packed(want_q.as_mut_ptr(), [batch, m, n], Layout::ColumnMajor) };
        ferrax::linalg::qr::orgqr(&Serial, InOut::in_place(view), k, &reflectors)
            .map_err(|e| e.message)?;
        expect_close(&format!("{what} orgqr"), &q.download::<T>(), &want_q, tol)?;
    }
    Ok(())
}

/// `ferrax_ormqr` (Q·C, Qᴴ·C, C·Q, C·Qᴴ) against the CPU core: the kernel for Q up to 128
/// acting on up to 128 vectors, cuSOLVER past it.
fn ormqr<T: TestScalar>(device: &Device) -> Result<(), String> {
    let mut rng = Rng(15);
    // cuSOLVER's ormqr is unmqr for complex matrices.
    for (batch, q_order, k, vectors, path) in [
        (4, 12, 7, 5, "ferrax_ormqr_small_"),
        (2, 130, 20, 9, "mqr"),
        (0, 5, 3, 2, ""),
    ] {
        for (left, transpose) in [(true, false), (true, true), (false, false), (false, true)] {
            let a: Vec<T> = rng.matrix(batch * q_order * k);
            let tau: Vec<T> = rng.matrix(batch * k);
            let (m, n) = if left {
                (q_order, vectors)
            } else {
                (vectors, q_order)
            };
            let c: Vec<T> = rng.matrix(batch * m * n);
            let (a_dev, tau_dev) = (
                device.upload(&a, dims3(batch, q_order, k)),
                device.upload(&tau, vec![batch as i64, k as i64]),
            );
            let (c_dev, out) = (
                device.upload(&c, dims3(batch, m, n)),
                device.zeros::<T>(dims3(batch, m, n)),
            );
            let attrs = [
                ("left", Attr::Bool(left)),
                ("transpose", Attr::Bool(transpose)),
            ];
            let calls = device.call(
                ops::qr::cuda::ferrax_cuda_ormqr,
                &[&a_dev, &tau_dev, &c_dev],
                &[&out],
                &attrs,
            )?;
            let what = format!(
                "Q of order {q_order} from {k} reflectors, left {left}, transpose {transpose}"
            );
            expect_path(&what, &calls, path)?;
            let (mut want, mut reflectors) = (c.clone(), a.clone());
            let side = if left { Side::Left } else { Side::Right };
            let trans = if transpose {
                Trans::Transpose
            } else {
                Trans::No
            };
            // SAFETY: the vectors hold the batches column-major.
            let (a_view, c_view) = unsafe {
                (
                    Batch::packed(
                        reflectors.as_mut_ptr(),
                        [batch, q_order, k],
                        Layout::ColumnMajor,
                    ),
                    Batch::packed(want.as_mut_ptr(), [batch, m, n], Layout::ColumnMajor),
                )
            };
            ferrax::linalg::qr::ormqr(
                &Serial,
                side,
                trans,
                a_view,
                k,
                &tau,
                InOut::in_place(c_view),
            )
            .map_err(|e| e.message)?;
            let scale = want.iter().map(|x| x.modulus()).fold(1.0, f64::max);
            expect_close(
                &what,
                &out.download::<T>(),
                &want,
                tolerance::<T>(q_order, scale),
            )?;
        }
    }
    Ok(())
}

/// `ferrax_qr` (jax's whole `qr` on row-major arrays) against the CPU core: the fused warp and
/// block kernels, and past them geqrf and orgqr from the libraries on a column-major copy.
fn qr<T: TestScalar>(device: &Device, full_matrices: bool) -> Result<(), String> {
    let mut rng = Rng(16);
    for (batch, m, n, path) in [
        (5, 9, 6, "ferrax_qr_small_"),
        (3, 6, 11, "ferrax_qr_small_"),
        (2, 50, 40, "_block"),
        (2, 140, 20, "gqr"),
        (2, 0, 3, ""),
    ] {
        let q_cols = if full_matrices { m } else { m.min(n) };
        let a: Vec<T> = rng.matrix(batch * m * n);
        let a_dev = device.upload(&a, dims3(batch, m, n));
        let (q, r) = (
            device.zeros::<T>(dims3(batch, m, q_cols)),
            device.zeros::<T>(dims3(batch, q_cols, n)),
        );
        let attrs = [("full_matrices", Attr::Bool(full_matrices))];
        let calls = device.call(ops::qr::cuda::ferrax_cuda_qr, &[&a_dev], &[&q, &r], &attrs)?;
        let what = format!("{m}×{n}, batch {batch}");
        expect_path(&what, &calls, path)?;
        let (mut a_in, mut want_q, mut want_r) = (
            a.clone(),
            vec![T::zero(); batch * m * q_cols],
            vec![T::zero(); batch * q_cols * n],
        );
        // SAFETY: the vectors hold the batches row-major.
        let views = unsafe {
            (
                Batch::packed(a_in.as_mut_ptr(), [batch, m, n], Layout::RowMajor),
                Batch::packed(want_q.as_mut_ptr(), [batch, m, q_cols], Layout::RowMajor),
                Batch::packed(want_r.as_mut_ptr(), [batch, q_cols, n], Layout::RowMajor),
            )
        };
        ferrax::linalg::qr::qr(&Serial, views.0, views.1, views.2, full_matrices)
            .map_err(|e| e.message)?;
        let tol = tolerance::<T>(m, 1.0);
        expect_close(&format!("{what} Q"), &q.download::<T>(), &want_q, tol)?;
        expect_close(&format!("{what} R"), &r.download::<T>(), &want_r, tol)?;
    }
    Ok(())
}

// ---- cholesky_update ------------------------------------------------------------------------

/// `ferrax_cholesky_update` (R row-major upper, `R'ᴴR' = RᴴR + wwᴴ`) checked by that identity,
/// for the grouped, one-warp and multi-warp kernels.
fn cholesky_update<T: TestScalar>(device: &Device) -> Result<(), String> {
    let mut rng = Rng(17);
    // The one-warp kernel takes orders past 32 for batches of 8 per multiprocessor (the child
    // runs with 4).
    for (batch, n, path) in [
        (9, 4, "_g4_"),
        (5, 16, "_g16_"),
        (40, 40, "_small_"),
        (2, 100, "_large_"),
    ] {
        // R: the upper factor of a positive definite matrix, row-major.
        let a: Vec<T> = positive_definite(&mut rng, batch, n);
        let mut factor = a.clone();
        // The lower factor L, column-major, read row-major is Lᵀ: an upper R with a positive
        // diagonal (the identity checked below holds for any such R).
        // SAFETY: `factor` holds the batch column-major.
        let view =
            unsafe { Batch::packed(factor.as_mut_ptr(), [batch, n, n], Layout::ColumnMajor) };
        let mut info = vec![0; batch];
        ferrax::linalg::potrf::potrf(&Serial, InOut::in_place(view), Uplo::Lower, &mut info)
            .map_err(|e| e.message)?;
        // Zero the other triangle: column-major strictly upper = row-major strictly lower.
        for (e, x) in factor.iter_mut().enumerate() {
            let (i, j) = (e % (n * n) % n, e % (n * n) / n);
            if j > i {
                *x = T::zero();
            }
        }
        let w: Vec<T> = rng.matrix(batch * n);
        let (r_dev, w_dev) = (
            device.upload(&factor, dims3(batch, n, n)),
            device.upload(&w, vec![batch as i64, n as i64]),
        );
        let (r_out, w_out) = (
            device.zeros::<T>(dims3(batch, n, n)),
            device.zeros::<T>(vec![batch as i64, n as i64]),
        );
        let calls = device.call(
            ops::cholesky_update::cuda::ferrax_cuda_cholesky_update,
            &[&r_dev, &w_dev],
            &[&r_out, &w_out],
            &[],
        )?;
        let what = format!("order {n}, batch {batch}");
        expect_path(&what, &calls, path)?;
        let (r0, r1) = (&factor, r_out.download::<T>());
        for b in 0..batch {
            // (RᴴR)[i][j] = Σ_k conj(R[k][i]) R[k][j], R row-major.
            let gram = |r: &[T], i: usize, j: usize| {
                (0..n).fold(T::zero(), |s, k| {
                    s + r[b * n * n + k * n + i].conj() * r[b * n * n + k * n + j]
                })
            };
            let (mut got, mut want) = (Vec::new(), Vec::new());
            for i in 0..n {
                for j in 0..n {
                    got.push(gram(&r1, i, j));
                    want.push(gram(r0, i, j) + w[b * n + i] * w[b * n + j].conj());
                }
            }
            expect_close(
                &format!("{what}, matrix {b}: R'ᴴR'"),
                &got,
                &want,
                tolerance::<T>(n, 4.0 * n as f64),
            )?;
        }
    }
    Ok(())
}

// ---- tridiagonal solves ---------------------------------------------------------------------

/// `ferrax_tridiagonal_solve` (in place, as XLA aliases it) against LAPACK's `?gtsv` within
/// the error bound, with a singular system NaN where LAPACK reports `info > 0`, and
/// `ferrax_tridiagonal_solve_perturbed` (out of place) against the CPU's perturbed solve;
/// orders below cuSPARSE's 3, batches past one block and grids that stride.
fn tridiagonal_solve<T: TestScalar>(device: &Device) -> Result<(), String> {
    use ferrax::linalg::tridiagonal_solve as cpu;
    use ferrax::ops::tridiagonal_solve::cuda;
    let mut rng = Rng(29);
    for (batch, m, nrhs) in [
        (3, 1, 2),
        (5, 2, 1),
        (130, 6, 3),
        (4, 40, 2),
        (2, 0, 3),
        (0, 4, 1),
    ] {
        let mut diagonals: Vec<Vec<T>> = (0..3).map(|_| rng.matrix(batch * m)).collect();
        // Diagonally dominant but for zero pivots (interchanges) and, past two systems, one
        // exactly singular system (all zero).
        for (i, x) in diagonals[1].iter_mut().enumerate() {
            *x += T::from_parts(if i % 7 == 3 { 0.0 } else { 3.0 }, 0.0);
        }
        if batch > 2 {
            for diagonal in &mut diagonals {
                diagonal[m..2 * m].iter_mut().for_each(|x| *x = T::zero());
            }
        }
        let [dl, d, du] = [&diagonals[0], &diagonals[1], &diagonals[2]];
        let b: Vec<T> = rng.matrix(batch * m * nrhs);
        let vector = vec![batch as i64, m as i64];
        let what = format!("batch {batch}, m {m}, nrhs {nrhs}");
        let upload = |v: &[T]| device.upload(v, vector.clone());
        let (dl_dev, d_dev, du_dev) = (upload(dl), upload(d), upload(du));
        let matrices = dims3(batch, m, nrhs);

        // In place, against LAPACK.
        let b_dev = device.upload(&b, matrices.clone());
        let args = [&dl_dev, &d_dev, &du_dev, &b_dev];
        device.call(cuda::ferrax_cuda_tridiagonal_solve, &args, &[&b_dev], &[])?;
        let (mut lapack, mut info) = (b.clone(), vec![0; batch]);
        let (mut fdl, mut fd, mut fdu) = (dl.clone(), d.clone(), du.clone());
        // SAFETY: `lapack` holds the batch column-major.
        let view =
            unsafe { Batch::packed(lapack.as_mut_ptr(), [batch, m, nrhs], Layout::ColumnMajor) };
        cpu::gtsv(
            &Serial,
            [&mut fdl, &mut fd, &mut fdu],
            InOut::in_place(view),
            &mut info,
        )
        .map_err(|e| e.message)?;
        for (s, &info) in info.iter().enumerate() {
            let system = s * m * nrhs..(s + 1) * m * nrhs;
            if info > 0 {
                lapack[system]
                    .iter_mut()
                    .for_each(|x| *x = T::from_parts(f64::NAN, 0.0));
            } else if batch > 2 && s == 1 && m > 0 {
                return Err(format!("{what}: LAPACK solved the singular system"));
            }
        }
        let got = b_dev.download::<T>();
        expect_close(
            &format!("{what}: solve"),
            &got,
            &lapack,
            tolerance::<T>(m, 40.0),
        )?;

        // Out of place, perturbed, against the CPU's.
        let b_dev = device.upload(&b, matrices.clone());
        let x_dev = device.zeros::<T>(matrices.clone());
        let args = [&dl_dev, &d_dev, &du_dev, &b_dev];
        device.call(
            cuda::ferrax_cuda_tridiagonal_solve_perturbed,
            &args,
            &[&x_dev],
            &[],
        )?;
        let (mut b_in, mut want) = (b.clone(), vec![T::zero(); b.len()]);
        // SAFETY: both hold the batch column-major.
        let io = unsafe {
            InOut {
                input: Batch::packed(b_in.as_mut_ptr(), [batch, m, nrhs], Layout::ColumnMajor),
                output: Batch::packed(want.as_mut_ptr(), [batch, m, nrhs], Layout::ColumnMajor),
            }
        };
        cpu::solve_perturbed(&Serial, [dl, d, du], io).map_err(|e| e.message)?;
        let got = x_dev.download::<T>();
        expect_close(
            &format!("{what}: perturbed"),
            &got,
            &want,
            tolerance::<T>(m, 40.0),
        )?;
        if got.iter().any(|x| x.is_nan_value()) {
            return Err(format!("{what}: the perturbed solve gave NaN"));
        }
        expect_equal(&format!("{what}: b"), &b_dev.download::<T>(), &b)?;
    }
    // Diagonals one shorter than b's order: refused before any launch, naming the target.
    let short = device.zeros::<T>(vec![2, 4]);
    let (b, x) = (
        device.zeros::<T>(dims3(2, 5, 1)),
        device.zeros::<T>(dims3(2, 5, 1)),
    );
    for (handler, target) in [
        (
            cuda::ferrax_cuda_tridiagonal_solve as XLA_FFI_Handler,
            "ferrax_tridiagonal_solve",
        ),
        (
            cuda::ferrax_cuda_tridiagonal_solve_perturbed,
            "ferrax_tridiagonal_solve_perturbed",
        ),
    ] {
        match device.call(handler, &[&short, &short, &short, &b], &[&x], &[]) {
            Err(e) if e.contains(target) && e.contains("[2, 5]") => {}
            other => return Err(format!("{target}: expected a shape error, got {other:?}")),
        }
    }
    Ok(())
}

// ---- sparse products -------------------------------------------------------------------------

/// `y += a·x` for the dense products of the references below.
fn add_product<T: TestScalar>(y: &mut T, a: T, x: T) {
    *y += a * x;
}

/// `ferrax_csr_sparse_dense` and `ferrax_coo_sparse_dense` against the dense product of the
/// matrix their entries make (duplicates adding up), both index types, vectors and matrices,
/// short and long rows (the CSR kernel's lane counts), jax's BCSR padding past the last
/// offset, COO's negative and out-of-range indices (counted from the end, dropped) and
/// transpose; then shape refusals naming the target.
fn sparse_products<T: TestScalar>(device: &Device) -> Result<(), String> {
    use ferrax::ops::sparse::cuda;
    let mut rng = Rng(31);
    // (rows, cols, entries per row at most, n: 0 for a vector)
    for (rows, cols, per_row, n) in [
        (7, 5, 3, 0),
        (40, 300, 200, 0),
        (33, 9, 5, 4),
        (6, 4, 4, 37),
        (0, 3, 0, 2),
        (3, 0, 0, 0),
    ] {
        let what = format!("{rows}x{cols}, n {n}");
        let width = n.max(1);
        // CSR with two padding entries past the last offset (whose garbage columns must not
        // be read as entries).
        let (mut outer, mut inner) = (vec![0i64], Vec::new());
        for _ in 0..rows {
            for _ in 0..rng.range(0, per_row + 1) {
                inner.push(rng.range(0, cols) as i64);
            }
            outer.push(inner.len() as i64);
        }
        inner.extend([-7, 1 << 40]);
        let data: Vec<T> = rng.matrix(inner.len());
        let rhs: Vec<T> = rng.matrix(cols * width);
        let mut dense = vec![T::zero(); rows * cols];
        for r in 0..rows {
            for e in outer[r] as usize..outer[r + 1] as usize {
                let at = &mut dense[r * cols + inner[e] as usize];
                *at += data[e];
            }
        }
        let mut want = vec![T::zero(); rows * width];
        for r in 0..rows {
            for c in 0..cols {
                for j in 0..width {
                    add_product(
                        &mut want[r * width + j],
                        dense[r * cols + c],
                        rhs[c * width + j],
                    );
                }
            }
        }
        let rhs_dims = if n == 0 {
            vec![cols as i64]
        } else {
            vec![cols as i64, n as i64]
        };
        let out_dims = if n == 0 {
            vec![rows as i64]
        } else {
            vec![rows as i64, n as i64]
        };
        let tol = tolerance::<T>(per_row + 1, 4.0);
        for wide in [false, true] {
            let (outer_dev, inner_dev) = if wide {
                (
                    device.upload(&outer, vec![rows as i64 + 1]),
                    device.upload(&inner, vec![inner.len() as i64]),
                )
            } else {
                let narrow = |v: &[i64]| v.iter().map(|&i| i as i32).collect::<Vec<_>>();
                (
                    device.upload(&narrow(&outer), vec![rows as i64 + 1]),
                    device.upload(&narrow(&inner), vec![inner.len() as i64]),
                )
            };
            let (data_dev, rhs_dev) = (
                device.upload(&data, vec![data.len() as i64]),
                device.upload(&rhs, rhs_dims.clone()),
            );
            let out = device.upload(
                &vec![T::from_parts(f64::NAN, 0.0); rows * width],
                out_dims.clone(),
            );
            let calls = device.call(
                cuda::ferrax_cuda_csr_sparse_dense,
                &[&data_dev, &outer_dev, &inner_dev, &rhs_dev],
                &[&out],
                &[],
            )?;
            if rows > 0 {
                expect_path(&what, &calls, "ferrax_csr_sparse_dense")?;
            }
            expect_close(
                &format!("{what}: csr, s64 {wide}"),
                &out.download::<T>(),
                &want,
                tol,
            )?;
        }

        // The same entries as COO ([nnz, 2], row-major), shuffled, some written from the end,
        // plus entries outside the matrix that jax's padding drops.
        let mut entries: Vec<(i64, i64, T)> = Vec::new();
        for r in 0..rows {
            for e in outer[r] as usize..outer[r + 1] as usize {
                entries.push((r as i64, inner[e], data[e]));
            }
        }
        for i in (1..entries.len()).rev() {
            entries.swap(i, rng.range(0, i + 1));
        }
        for (i, (r, c, _)) in entries.iter_mut().enumerate() {
            match i % 5 {
                1 => *r -= rows as i64,
                2 => *c -= cols as i64,
                _ => {}
            }
        }
        entries.push((rows as i64, 0, T::from_parts(1.0, 0.0)));
        entries.push((0, -(cols as i64) - 1, T::from_parts(1.0, 0.0)));
        let indices: Vec<i64> = entries.iter().flat_map(|&(r, c, _)| [r, c]).collect();
        let coo_data: Vec<T> = entries.iter().map(|&(_, _, v)| v).collect();
        for transpose in [false, true] {
            let (m, k) = if transpose {
                (cols, rows)
            } else {
                (rows, cols)
            };
            let rhs: Vec<T> = rng.matrix(k * width);
            let mut want = vec![T::zero(); m * width];
            for r in 0..rows {
                for c in 0..cols {
                    let (to, from) = if transpose { (c, r) } else { (r, c) };
                    for j in 0..width {
                        add_product(
                            &mut want[to * width + j],
                            dense[r * cols + c],
                            rhs[from * width + j],
                        );
                    }
                }
            }
            let dims = |a: usize| {
                if n == 0 {
                    vec![a as i64]
                } else {
                    vec![a as i64, n as i64]
                }
            };
            for wide in [false, true] {
                let nnz = entries.len() as i64;
                let indices_dev = if wide {
                    device.upload(&indices, vec![nnz, 2])
                } else {
                    device.upload(
                        &indices.iter().map(|&i| i as i32).collect::<Vec<_>>(),
                        vec![nnz, 2],
                    )
                };
                let (data_dev, rhs_dev) = (
                    device.upload(&coo_data, vec![nnz]),
                    device.upload(&rhs, dims(k)),
                );
                let out = device.upload(&vec![T::from_parts(f64::NAN, 0.0); m * width], dims(m));
                let attrs = [
                    ("rows", Attr::I64(rows as i64)),
                    ("cols", Attr::I64(cols as i64)),
                    ("transpose", Attr::Bool(transpose)),
                ];
                device.call(
                    cuda::ferrax_cuda_coo_sparse_dense,
                    &[&data_dev, &indices_dev, &rhs_dev],
                    &[&out],
                    &attrs,
                )?;
                expect_close(
                    &format!("{what}: coo, transpose {transpose}, s64 {wide}"),
                    &out.download::<T>(),
                    &want,
                    tol,
                )?;
            }
        }
    }
    // Refusals before any launch, naming the target and the operand.
    let (data, rhs, out) = (
        device.zeros::<T>(vec![4]),
        device.zeros::<T>(vec![3]),
        device.zeros::<T>(vec![2]),
    );
    let (outer, inner) = (device.zeros::<i32>(vec![3]), device.zeros::<i32>(vec![5]));
    match device.call(
        cuda::ferrax_cuda_csr_sparse_dense,
        &[&data, &outer, &inner, &rhs],
        &[&out],
        &[],
    ) {
        Err(e) if e.contains("ferrax_csr_sparse_dense") && e.contains("[4]") => {}
        other => return Err(format!("csr: expected a shape error, got {other:?}")),
    }
    let indices = device.zeros::<i32>(vec![4, 2]);
    let attrs = [
        ("rows", Attr::I64(2)),
        ("cols", Attr::I64(3)),
        ("transpose", Attr::Bool(true)),
    ];
    match device.call(
        cuda::ferrax_cuda_coo_sparse_dense,
        &[&data, &indices, &rhs],
        &[&out],
        &attrs,
    ) {
        Err(e) if e.contains("ferrax_coo_sparse_dense") && e.contains("rhs") => {}
        other => return Err(format!("coo: expected a shape error, got {other:?}")),
    }
    let ints = device.zeros::<i32>(vec![4]);
    let (int_rhs, int_out) = (device.zeros::<i32>(vec![3]), device.zeros::<i32>(vec![2]));
    let attrs = [
        ("rows", Attr::I64(2)),
        ("cols", Attr::I64(3)),
        ("transpose", Attr::Bool(false)),
    ];
    match device.call(
        cuda::ferrax_cuda_coo_sparse_dense,
        &[&ints, &indices, &int_rhs],
        &[&int_out],
        &attrs,
    ) {
        Err(e) if e.contains("ferrax_coo_sparse_dense") && e.contains("f32, f64, c64 or c128") => {}
        other => return Err(format!("coo: expected a dtype error, got {other:?}")),
    }
    Ok(())
}

/// `ferrax_spsolve` (solved on the host from device buffers) by the residual of each system:
/// a batch of matrices with one pattern, one matrix for a batch of right-hand sides, both
/// index types, a singular matrix (a zero row: NaN, its neighbours solved), n = 0, and a shape
/// refusal naming the target.
fn spsolve<T: TestScalar>(device: &Device) -> Result<(), String> {
    use ferrax::ops::sparse::cuda;
    let mut rng = Rng(37);
    let n = 40;
    // A pattern with the diagonal and a few entries a row; values diagonally dominant.
    let (mut indptr, mut indices) = (vec![0i64], Vec::new());
    for r in 0..n {
        let mut cols = vec![r as i64];
        for _ in 0..3 {
            let c = rng.range(0, n) as i64;
            if !cols.contains(&c) {
                cols.push(c);
            }
        }
        cols.sort();
        indices.extend(&cols);
        indptr.push(indices.len() as i64);
    }
    let nnz = indices.len();
    let matrix = |rng: &mut Rng| -> Vec<T> {
        let mut data: Vec<T> = rng.matrix(nnz);
        for r in 0..n {
            for e in indptr[r] as usize..indptr[r + 1] as usize {
                if indices[e] == r as i64 {
                    data[e] += T::from_parts(5.0, 0.0);
                }
            }
        }
        data
    };
    let residual = |data: &[T], x: &[T], b: &[T]| -> f64 {
        let mut worst = 0.0f64;
        for r in 0..n {
            let mut ax = T::zero();
            for e in indptr[r] as usize..indptr[r + 1] as usize {
                ax += data[e] * x[indices[e] as usize];
            }
            worst = worst.max((ax - b[r]).modulus());
        }
        worst
    };
    let tol = tolerance::<T>(n, 10.0);
    for wide in [false, true] {
        let upload_indices = |v: &[i64]| {
            if wide {
                device.upload(v, vec![v.len() as i64])
            } else {
                let narrow: Vec<i32> = v.iter().map(|&i| i as i32).collect();
                device.upload(&narrow, vec![v.len() as i64])
            }
        };
        let (indices_dev, indptr_dev) = (upload_indices(&indices), upload_indices(&indptr));
        // Three matrices, the second singular (its row 7 zero), a right-hand side each.
        let mut data: Vec<T> = (0..3).flat_map(|_| matrix(&mut rng)).collect();
        for e in indptr[7] as usize..indptr[8] as usize {
            data[nnz + e] = T::zero();
        }
        let b: Vec<T> = rng.matrix(3 * n);
        let data_dev = device.upload(&data, vec![3, nnz as i64]);
        let (b_dev, x_dev) = (
            device.upload(&b, vec![3, n as i64]),
            device.zeros::<T>(vec![3, n as i64]),
        );
        device.call(
            cuda::ferrax_cuda_spsolve,
            &[&data_dev, &indices_dev, &indptr_dev, &b_dev],
            &[&x_dev],
            &[],
        )?;
        let x = x_dev.download::<T>();
        for s in [0, 2] {
            let r = residual(
                &data[s * nnz..(s + 1) * nnz],
                &x[s * n..(s + 1) * n],
                &b[s * n..(s + 1) * n],
            );
            if r.is_nan() || r > tol {
                return Err(format!(
                    "system {s} (s64 {wide}): residual {r:e} past {tol:e}"
                ));
            }
        }
        if !x[n..2 * n].iter().all(|v| v.is_nan_value()) {
            return Err(format!("singular system (s64 {wide}): not NaN"));
        }
        // One matrix for a [2, 4] batch of right-hand sides.
        let one = matrix(&mut rng);
        let b: Vec<T> = rng.matrix(8 * n);
        let data_dev = device.upload(&one, vec![nnz as i64]);
        let (b_dev, x_dev) = (
            device.upload(&b, vec![2, 4, n as i64]),
            device.zeros::<T>(vec![2, 4, n as i64]),
        );
        device.call(
            cuda::ferrax_cuda_spsolve,
            &[&data_dev, &indices_dev, &indptr_dev, &b_dev],
            &[&x_dev],
            &[],
        )?;
        let x = x_dev.download::<T>();
        for s in 0..8 {
            let r = residual(&one, &x[s * n..(s + 1) * n], &b[s * n..(s + 1) * n]);
            if r.is_nan() || r > tol {
                return Err(format!(
                    "shared matrix, system {s} (s64 {wide}): residual {r:e}"
                ));
            }
        }
    }
    // n = 0 and an empty batch: nothing to solve.
    let (empty, pointer) = (device.zeros::<T>(vec![0]), device.zeros::<i32>(vec![1]));
    let (none, none_x) = (device.zeros::<T>(vec![3, 0]), device.zeros::<T>(vec![3, 0]));
    device.call(
        cuda::ferrax_cuda_spsolve,
        &[&empty, &device.zeros::<i32>(vec![0]), &pointer, &none],
        &[&none_x],
        &[],
    )?;
    // b of the wrong order: refused, naming the target.
    let (data, indices, indptr) = (
        device.zeros::<T>(vec![4]),
        device.zeros::<i32>(vec![4]),
        device.zeros::<i32>(vec![4]),
    );
    let (b, x) = (device.zeros::<T>(vec![5]), device.zeros::<T>(vec![5]));
    match device.call(
        cuda::ferrax_cuda_spsolve,
        &[&data, &indices, &indptr, &b],
        &[&x],
        &[],
    ) {
        Err(e) if e.contains("ferrax_spsolve") && e.contains("[..., 3]") => Ok(()),
        other => Err(format!("expected a shape error, got {other:?}")),
    }
}

// ---- pivots and threefry --------------------------------------------------------------------

/// `ferrax_lu_pivots_to_permutation` for the batched, one-block-per-matrix and global kernels,
/// against the swaps applied in order.
fn pivots_to_permutation(device: &Device) -> Result<(), String> {
    let mut rng = Rng(18);
    for (batch, k, size, path) in [
        (300, 8, 8, "permutation"),
        (3, 300, 400, "_large"),
        (2, 4000, 40000, "_global"),
    ] {
        let pivots: Vec<i32> = (0..batch * k)
            .map(|e| {
                let j = e % k;
                (j + ((rng.uniform() + 1.0) * 0.5 * (size - j) as f64) as usize).min(size - 1)
                    as i32
            })
            .collect();
        let p_dev = device.upload(&pivots, vec![batch as i64, k as i64]);
        let perm = device.zeros::<i32>(vec![batch as i64, size as i64]);
        let handler = ops::pivots::cuda::ferrax_cuda_lu_pivots_to_permutation;
        let calls = device.call(handler, &[&p_dev], &[&perm], &[])?;
        let what = format!("{k} pivots, permutations of {size}, batch {batch}");
        expect_path(&what, &calls, path)?;
        let mut want: Vec<i32> = Vec::with_capacity(batch * size);
        for b in 0..batch {
            let mut p: Vec<i32> = (0..size as i32).collect();
            for j in 0..k {
                p.swap(j, pivots[b * k + j] as usize);
            }
            want.extend(p);
        }
        expect_equal(&what, &perm.download::<i32>(), &want)?;
    }
    Ok(())
}

/// `ferrax_threefry2x32` against the kernels crate's scalar hash (bit-exact with jax's).
fn threefry2x32(device: &Device) -> Result<(), String> {
    let mut rng = Rng(19);
    let n = 5000;
    let inputs: Vec<Vec<u32>> = (0..4).map(|_| rng.words(n)).collect();
    let dims = vec![n as i64, 1];
    let ins: Vec<_> = inputs
        .iter()
        .map(|v| device.upload(v, dims.clone()))
        .collect();
    let (out0, out1) = (device.zeros::<u32>(dims.clone()), device.zeros::<u32>(dims));
    let handler = ops::threefry::cuda::ferrax_cuda_threefry2x32;
    let calls = device.call(
        handler,
        &[&ins[0], &ins[1], &ins[2], &ins[3]],
        &[&out0, &out1],
        &[],
    )?;
    expect_path("threefry2x32", &calls, "ferrax_threefry2x32")?;
    let (got0, got1) = (out0.download::<u32>(), out1.download::<u32>());
    for e in 0..n {
        let want = ferrax_kernels::threefry::threefry2x32(
            [inputs[0][e], inputs[1][e]],
            [inputs[2][e], inputs[3][e]],
        );
        if [got0[e], got1[e]] != want {
            return Err(format!(
                "element {e}: {:?}, expected {want:?}",
                [got0[e], got1[e]]
            ));
        }
    }
    Ok(())
}

/// `ferrax_threefry2x32_bits` (counters made in the kernel) for every word width, against the
/// hash of each counter: element `e` of key `k` hashes counter `e` (high word first), its two
/// words joined for u64 and xor-ed (then truncated) otherwise.
fn threefry2x32_bits(device: &Device) -> Result<(), String> {
    let mut rng = Rng(20);
    let (keys, per_key) = (3usize, 1001usize);
    let key_words = rng.words(2 * keys);
    let k_dev = device.upload(&key_words, vec![keys as i64, 2]);
    let hash = |k: usize, e: usize| {
        ferrax_kernels::threefry::threefry2x32(
            [key_words[2 * k], key_words[2 * k + 1]],
            [(e as u64 >> 32) as u32, e as u32],
        )
    };
    macro_rules! width {
        ($t:ty, $join:expr) => {{
            let bits = device.zeros::<$t>(vec![keys as i64, per_key as i64]);
            let handler = ops::threefry::cuda::ferrax_cuda_threefry2x32_bits;
            let calls = device.call(handler, &[&k_dev], &[&bits], &[])?;
            expect_path(stringify!($t), &calls, "ferrax_threefry2x32_bits")?;
            let got = bits.download::<$t>();
            for (i, &g) in got.iter().enumerate() {
                let [y0, y1] = hash(i / per_key, i % per_key);
                let want: $t = $join(y0, y1);
                if g != want {
                    return Err(format!(
                        "{}: word {i}: {g:#x}, expected {want:#x}",
                        stringify!($t)
                    ));
                }
            }
        }};
    }
    width!(u8, |a: u32, b: u32| (a ^ b) as u8);
    width!(u16, |a: u32, b: u32| (a ^ b) as u16);
    width!(u32, |a: u32, b: u32| a ^ b);
    width!(u64, |a: u32, b: u32| (u64::from(a) << 32) | u64::from(b));
    Ok(())
}

/// Tolerance for comparing two computations of the same factorization of matrices of order
/// `n` and size `scale`.
fn tolerance<T: TestScalar>(n: usize, scale: f64) -> f64 {
    64.0 * n.max(1) as f64 * T::EPS * scale.max(1.0)
}

// ---- RNN -------------------------------------------------------------------------------------

/// `ferrax_rnn` and `ferrax_rnn_bwd` (cuBLAS products and the step kernels) against the CPU
/// core: one and two directions, one and three layers, ragged lengths with 0 and T, the
/// backward pass from the device's reserve and from none (it runs the forward pass again),
/// weight gradients per group, and a row of invalid length (NaN results, the others intact).
fn rnn<T: TestScalar + ferrax::linalg::rnn::RnnScalar>(
    device: &Device,
    mode: ferrax::linalg::rnn::Mode,
) -> Result<(), String> {
    use ferrax::linalg::rnn::{
        self as core, Config, Dims, Gradients, InputGradients, Inputs, Outputs,
    };
    let mut rng = Rng(23 + mode as u64);
    let kernel = format!(
        "ferrax_rnn_forward_step_{mode:?}_{}",
        if T::EPS > 1e-10 { "f32" } else { "f64" }
    )
    .to_lowercase();
    let tol = if T::EPS > 1e-10 { 5e-5 } else { 1e-12 };
    for (batch, steps, input_size, hidden, layers, bidirectional, groups, invalid) in [
        (4, 5, 3, 4, 1, false, 1, false),
        (6, 4, 2, 5, 3, true, 2, false),
        (3, 3, 2, 3, 2, true, 3, true),
    ] {
        let config = Config {
            mode,
            input_size,
            hidden_size: hidden,
            layers,
            bidirectional,
        };
        let dims = Dims {
            config,
            batch,
            steps,
        };
        let what = format!(
            "{mode:?} B{batch} T{steps} I{input_size} H{hidden} L{layers} D{}",
            config.directions()
        );
        let states = config.pseudo_layers() * batch;
        let (cell, width) = (config.cell_size(), config.directions() * hidden);
        let weights = config.weights().map_err(|e| e.message)?.len;
        let x: Vec<T> = rng.matrix(batch * steps * input_size);
        let (h0, c0): (Vec<T>, Vec<T>) = (rng.matrix(states * hidden), rng.matrix(states * cell));
        let w: Vec<T> = rng
            .matrix(weights)
            .into_iter()
            .map(|v: T| v * T::from_parts(0.5, 0.0))
            .collect();
        let mut lengths: Vec<i32> = (0..batch).map(|b| (b * 7 % (steps + 1)) as i32).collect();
        lengths[batch - 1] = steps as i32;
        if invalid {
            lengths[1] = steps as i32 + 3;
        }
        let valid: Vec<i32> = lengths
            .iter()
            .map(|&l| if l as usize > steps { 0 } else { l })
            .collect();
        let shape = |dims: &[usize]| dims.iter().map(|&d| d as i64).collect::<Vec<_>>();
        let state_dims = shape(&[config.pseudo_layers(), batch, hidden]);
        let cell_dims = shape(&[config.pseudo_layers(), batch, cell]);
        let y_dims = shape(&[batch, steps, width]);
        let reserve_len = dims.reserve_len().map_err(|e| e.message)? * std::mem::size_of::<T>() / 4;
        let attrs = [
            ("mode", Attr::I32(mode as i32)),
            ("input_size", Attr::I64(input_size as i64)),
            ("hidden_size", Attr::I64(hidden as i64)),
            ("num_layers", Attr::I64(layers as i64)),
            ("bidirectional", Attr::Bool(bidirectional)),
            ("dropout", Attr::F32(0.0)),
            ("allow_tf32", Attr::Bool(false)),
        ];
        let x_dev = device.upload(&x, shape(&[batch, steps, input_size]));
        let (h0_dev, c0_dev) = (
            device.upload(&h0, state_dims.clone()),
            device.upload(&c0, cell_dims.clone()),
        );
        let (w_dev, lengths_dev) = (
            device.upload(&w, vec![weights as i64]),
            device.upload(&lengths, vec![batch as i64]),
        );
        let (y, h_n, c_n) = (
            device.zeros::<T>(y_dims.clone()),
            device.zeros::<T>(state_dims.clone()),
            device.zeros::<T>(cell_dims.clone()),
        );
        let reserve = device.zeros::<f32>(vec![reserve_len as i64]);
        let calls = device.call(
            ops::rnn::cuda::ferrax_cuda_rnn,
            &[&x_dev, &h0_dev, &c0_dev, &w_dev, &lengths_dev],
            &[&y, &h_n, &c_n, &reserve],
            &attrs,
        )?;
        expect_path(&what, &calls, &kernel)?;
        expect_path(&what, &calls, "gemmStridedBatched")?;
        // The CPU core on the valid rows' lengths; the invalid row is NaN on the device.
        let inputs = Inputs {
            x: &x,
            h0: &h0,
            c0: &c0,
            w: &w,
            lengths: &valid,
        };
        let (mut y_cpu, mut h_cpu, mut c_cpu) = (
            vec![T::zero(); y.dims.iter().product::<i64>() as usize],
            vec![T::zero(); h0.len()],
            vec![T::zero(); c0.len()],
        );
        let outputs = Outputs {
            y: &mut y_cpu,
            h_n: &mut h_cpu,
            c_n: &mut c_cpu,
            reserve: None,
        };
        core::forward(&Serial, dims, inputs, outputs).map_err(|e| e.message)?;
        let poison = |values: &mut [T], row_of: &dyn Fn(usize) -> usize| {
            if invalid {
                for (i, v) in values.iter_mut().enumerate() {
                    if row_of(i) == 1 {
                        *v = T::nan();
                    }
                }
            }
        };
        let row_major = |i: usize| i / (steps * width);
        let state_row = |i: usize| i / hidden % batch;
        poison(&mut y_cpu, &row_major);
        poison(&mut h_cpu, &state_row);
        expect_close(&format!("{what}: y"), &y.download::<T>(), &y_cpu, tol)?;
        expect_close(&format!("{what}: h_n"), &h_n.download::<T>(), &h_cpu, tol)?;
        if cell > 0 {
            poison(&mut c_cpu, &state_row);
            expect_close(&format!("{what}: c_n"), &c_n.download::<T>(), &c_cpu, tol)?;
        }

        let dy: Vec<T> = rng.matrix(y_cpu.len());
        let (dh_n, dc_n): (Vec<T>, Vec<T>) = (rng.matrix(h0.len()), rng.matrix(c0.len()));
        let gradients = Gradients {
            dy: &dy,
            dh_n: &dh_n,
            dc_n: &dc_n,
        };
        let (mut dx, mut dh0, mut dc0) = (
            vec![T::zero(); x.len()],
            vec![T::zero(); h0.len()],
            vec![T::zero(); c0.len()],
        );
        let mut dw = vec![T::zero(); weights * groups];
        let out = InputGradients {
            dx: &mut dx,
            dh0: &mut dh0,
            dc0: &mut dc0,
            dw: &mut dw,
            groups,
        };
        core::backward(
            &Serial,
            dims,
            inputs,
            &y_cpu
                .iter()
                .map(|&v| if v.is_nan_value() { T::zero() } else { v })
                .collect::<Vec<_>>(),
            None,
            gradients,
            out,
        )
        .map_err(|e| e.message)?;
        poison(&mut dh0, &state_row);
        poison(&mut dx, &|i| i / (steps * input_size));
        let (dy_dev, dh_dev, dc_dev) = (
            device.upload(&dy, y_dims.clone()),
            device.upload(&dh_n, state_dims.clone()),
            device.upload(&dc_n, cell_dims.clone()),
        );
        let mut bwd_attrs = attrs.to_vec();
        bwd_attrs.push(("groups", Attr::I64(groups as i64)));
        let no_reserve = device.zeros::<f32>(vec![0]);
        for (source, reserve) in [
            ("the device's reserve", &reserve),
            ("no reserve", &no_reserve),
        ] {
            let (dx_dev, dh0_dev, dc0_dev) = (
                device.zeros::<T>(x_dev.dims.clone()),
                device.zeros::<T>(state_dims.clone()),
                device.zeros::<T>(cell_dims.clone()),
            );
            let dw_dev = device.zeros::<T>(vec![groups as i64, weights as i64]);
            device.call(
                ops::rnn::cuda::ferrax_cuda_rnn_bwd,
                &[
                    &dy_dev,
                    &dh_dev,
                    &dc_dev,
                    &x_dev,
                    &h0_dev,
                    &c0_dev,
                    &w_dev,
                    &y,
                    reserve,
                    &lengths_dev,
                ],
                &[&dx_dev, &dh0_dev, &dc0_dev, &dw_dev],
                &bwd_attrs,
            )?;
            let what = format!("{what}, backward from {source}");
            expect_close(&format!("{what}: dx"), &dx_dev.download::<T>(), &dx, tol)?;
            expect_close(&format!("{what}: dh0"), &dh0_dev.download::<T>(), &dh0, tol)?;
            if cell > 0 {
                poison(&mut dc0, &state_row);
                expect_close(&format!("{what}: dc0"), &dc0_dev.download::<T>(), &dc0, tol)?;
            }
            let dw_got = dw_dev.download::<T>();
            if invalid {
                // The invalid row's NaN reaches its group's weight gradient, and only it.
                let group = 1 / (batch / groups);
                if !dw_got[group * weights..(group + 1) * weights]
                    .iter()
                    .any(|v| v.is_nan_value())
                {
                    return Err(format!(
                        "{what}: no NaN in the invalid row's weight gradient"
                    ));
                }
                for g in (0..groups).filter(|&g| g != group) {
                    expect_close(
                        &format!("{what}: dw group {g}"),
                        &dw_got[g * weights..(g + 1) * weights],
                        &dw[g * weights..(g + 1) * weights],
                        tol,
                    )?;
                }
            } else {
                expect_close(&format!("{what}: dw"), &dw_got, &dw, tol)?;
            }
        }
    }
    Ok(())
}

fn expect_close<T: TestScalar>(what: &str, got: &[T], want: &[T], tol: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (gn, wn) = (g.is_nan_value(), w.is_nan_value());
        if gn || wn {
            if gn != wn {
                return Err(format!("{what}[{i}]: {g:?}, expected {w:?}"));
            }
            continue;
        }
        if (*g - *w).modulus() > tol {
            return Err(format!(
                "{what}[{i}]: {g:?}, expected {w:?} (tolerance {tol:e})"
            ));
        }
    }
    Ok(())
}

fn expect_equal<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: &[T],
    want: &[T],
) -> Result<(), String> {
    match got.iter().zip(want).position(|(g, w)| g != w) {
        _ if got.len() != want.len() => Err(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        )),
        Some(i) => Err(format!("{what}[{i}]: {:?}, expected {:?}", got[i], want[i])),
        None => Ok(()),
    }
}

/// LU of a 2^31 × 1 matrix (8 GiB of f32 that is never touched): past the kernels, and past
/// the 32-bit rows of cuSOLVER's and cuBLAS's API, a clear error before any memory is read.
fn getrf_past_32_bit_sizes(device: &Device) -> Result<(), String> {
    let rows = 1usize << 31;
    let (a, lu) = (
        device.untouched::<f32>(dims3(1, rows, 1)),
        device.untouched::<f32>(dims3(1, rows, 1)),
    );
    let (ipiv, info) = (
        device.zeros::<i32>(vec![1, 1]),
        device.zeros::<i32>(vec![1]),
    );
    for handler in [
        ops::getrf::cuda::ferrax_cuda_getrf as XLA_FFI_Handler,
        ops::getrf::cuda::ferrax_cuda_getrf_row_major,
    ] {
        match device.call(handler, &[&a], &[&lu, &ipiv, &info], &[]) {
            Err(message) if message.contains("rows = 2147483648") && message.contains("32-bit") => {
            }
            other => {
                return Err(format!(
                    "2^31 rows: expected the 32-bit error, got {other:?}"
                ))
            }
        }
    }
    Ok(())
}

/// `[batch, m, n]` as an operand's dims.
fn dims3(batch: usize, m: usize, n: usize) -> Vec<i64> {
    vec![batch as i64, m as i64, n as i64]
}

// ---- getrf ----------------------------------------------------------------------------------

/// LU on the device (`ferrax_getrf`, or `ferrax_getrf_row_major`) against the CPU core: the
/// warp kernels, the block kernel, and past it cuBLAS's batched getrf (square, batch ≥ 2) and
/// cuSOLVER's looped one, with a singular and a NaN matrix in each batch.
fn getrf<T: TestScalar>(device: &Device, layout: Layout) -> Result<(), String> {
    let handler: XLA_FFI_Handler = match layout {
        Layout::ColumnMajor => ops::getrf::cuda::ferrax_cuda_getrf,
        Layout::RowMajor => ops::getrf::cuda::ferrax_cuda_getrf_row_major,
    };
    let mut rng = Rng(11);
    let shapes: [(usize, usize, usize, &str); 7] = [
        (5, 8, 8, "ferrax_getrf_small_"),
        (4, 3, 7, "ferrax_getrf_small_"),
        (3, 40, 33, "_block"),
        (0, 5, 5, ""),
        (2, 0, 4, ""),
        // cuBLAS's batched getrf, but for complex128 (PyTorch's rule): cuSOLVER's.
        (3, 130, 130, "getrf"),
        (2, 140, 129, "getrf"),
    ];
    for (batch, m, n, path) in shapes {
        let k = m.min(n);
        let mut a: Vec<T> = rng.matrix(batch * m * n);
        if batch > 2 {
            // A zero column (singular, info > 0) and a NaN.
            for i in 0..m {
                a[m * n + index(layout, m, n, i, 0)] = T::zero();
            }
            a[2 * m * n + index(layout, m, n, 0, 1)] = T::nan();
        }
        let a_dev = device.upload(&a, dims3(batch, m, n));
        let lu = device.zeros::<T>(dims3(batch, m, n));
        let ipiv = device.zeros::<i32>(vec![batch as i64, k as i64]);
        let info = device.zeros::<i32>(vec![batch as i64]);
        let calls = device.call(handler, &[&a_dev], &[&lu, &ipiv, &info], &[])?;
        let what = format!("{m}×{n}, batch {batch}");
        expect_path(&what, &calls, path)?;
        // The CPU core on the same input.
        let (mut want, mut want_ipiv, mut want_info) =
            (a.clone(), vec![0; batch * k], vec![0; batch]);
        // SAFETY: `want` holds the batch in `layout`.
        let view = unsafe { Batch::packed(want.as_mut_ptr(), [batch, m, n], layout) };
        ferrax::linalg::getrf::getrf(
            &Serial,
            InOut::in_place(view),
            &mut want_ipiv,
            &mut want_info,
        )
        .map_err(|e| e.message)?;
        expect_equal(&format!("{what} info"), &info.download::<i32>(), &want_info)?;
        let (got, got_ipiv) = (lu.download::<T>(), ipiv.download::<i32>());
        for b in 0..batch {
            let (ms, ks) = (b * m * n..(b + 1) * m * n, b * k..(b + 1) * k);
            let what = format!("{what}, matrix {b}");
            if want[ms.clone()].iter().any(|x| x.is_nan_value()) {
                // Where NaN spreads depends on the order of operations.
                if !got[ms].iter().any(|x| x.is_nan_value()) {
                    return Err(format!("{what}: no NaN where the input has one"));
                }
                continue;
            }
            expect_equal(
                &format!("{what} pivots"),
                &got_ipiv[ks.clone()],
                &want_ipiv[ks],
            )?;
            expect_close(&what, &got[ms.clone()], &want[ms], tolerance::<T>(k, 1.0))?;
        }
    }
    Ok(())
}

/// Element `(i, j)`'s position in an `m × n` matrix in `layout`.
fn index(layout: Layout, m: usize, n: usize, i: usize, j: usize) -> usize {
    match layout {
        Layout::ColumnMajor => j * m + i,
        Layout::RowMajor => i * n + j,
    }
}
