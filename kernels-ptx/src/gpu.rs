//! The PTX entry points: `#[no_mangle] extern "ptx-kernel"` functions, each a thin call into a
//! body that is unit-tested on the host. Their names and parameters are the contract with the
//! launches in `src/cuda/` of the host crate.

use crate::threefry;

/// `cu_threefry2x32_ffi`: `(out0, out1)[i] = threefry2x32((key0, key1)[i], (x0, x1)[i])`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_threefry2x32(
    key0: *const u32,
    key1: *const u32,
    x0: *const u32,
    x1: *const u32,
    out0: *mut u32,
    out1: *mut u32,
    n: u64,
) {
    threefry::threefry2x32_kernel(key0, key1, x0, x1, out0, out1, n)
}

/// `jax.random.bits` (partitionable threefry) for `total / per_key` keys, 8-bit words.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_threefry2x32_bits8(
    keys: *const u32,
    per_key: u64,
    total: u64,
    out: *mut u8,
) {
    threefry::threefry2x32_bits_kernel::<u8, 16>(keys, per_key, total, out)
}

/// As `ferrax_threefry2x32_bits8`, 16-bit words.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_threefry2x32_bits16(
    keys: *const u32,
    per_key: u64,
    total: u64,
    out: *mut u16,
) {
    threefry::threefry2x32_bits_kernel::<u16, 8>(keys, per_key, total, out)
}

/// As `ferrax_threefry2x32_bits8`, 32-bit words.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_threefry2x32_bits32(
    keys: *const u32,
    per_key: u64,
    total: u64,
    out: *mut u32,
) {
    threefry::threefry2x32_bits_kernel::<u32, 4>(keys, per_key, total, out)
}

/// As `ferrax_threefry2x32_bits8`, 64-bit words.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_threefry2x32_bits64(
    keys: *const u32,
    per_key: u64,
    total: u64,
    out: *mut u64,
) {
    threefry::threefry2x32_bits_kernel::<u64, 2>(keys, per_key, total, out)
}

use crate::pivots;

/// `cu_lu_pivots_to_permutation` for many small matrices; see `pivots::launch_config`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_lu_pivots_to_permutation(
    pivots: *const i32,
    permutation: *mut i32,
    batch: u64,
    k: u32,
    size: u32,
) {
    pivots::batched_kernel(pivots, permutation, batch, k, size)
}

/// `cu_lu_pivots_to_permutation`, one block per matrix.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_lu_pivots_to_permutation_large(
    pivots: *const i32,
    permutation: *mut i32,
    batch: u64,
    k: u32,
    size: u32,
) {
    pivots::large_kernel(pivots, permutation, batch, k, size)
}

/// `cu_lu_pivots_to_permutation`, one thread per matrix in global memory.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_lu_pivots_to_permutation_global(
    pivots: *const i32,
    permutation: *mut i32,
    batch: u64,
    k: u32,
    size: u32,
) {
    pivots::global_kernel(pivots, permutation, batch, k, size)
}

/// Batched small LU (`crate::small`): one entry per element type and kernel shape, all with
/// the parameters `(src, a, ipiv, info, m, n, batch, row_major)`; `small::getrf_launch` picks
/// one.
macro_rules! small_getrf {
    ($t:ty: $($name:ident = $body:path),*) => {$(
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            src: *const $t, a: *mut $t, ipiv: *mut i32, info: *mut i32, m: u32, n: u32,
            batch: u64, row_major: u32,
        ) {
            $body(src, a, ipiv, info, m, n, batch, row_major)
        }
    )*};
}

/// Batched small Cholesky: `(a, info, n, batch, lower)`; `small::potrf_launch` picks one.
macro_rules! small_potrf {
    ($t:ty: $($name:ident = $body:path),*) => {$(
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            a: *mut $t, info: *mut i32, n: u32, batch: u64, lower: u32,
        ) {
            $body(a, info, n, batch, lower)
        }
    )*};
}

/// jax's whole batched small `cholesky` on row-major matrices: `(a, l, n, batch, symmetrize)`;
/// `small::cholesky_launch` picks one.
macro_rules! small_cholesky {
    ($t:ty: $($name:ident = $body:path),*) => {$(
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            a: *const $t, l: *mut $t, n: u32, batch: u64, symmetrize: u32,
        ) {
            $body(a, l, n, batch, symmetrize)
        }
    )*};
}

mod small_entries {
    use crate::small::{
        cholesky_block, cholesky_rows, getrf_block, getrf_rows, potrf_block, potrf_rows,
    };
    use num_complex::Complex;
    type C64 = Complex<f32>;
    type C128 = Complex<f64>;

    small_getrf!(f32: ferrax_getrf_small_f32_w4 = getrf_rows::<f32, 4>,
        ferrax_getrf_small_f32_w8 = getrf_rows::<f32, 8>,
        ferrax_getrf_small_f32_w16 = getrf_rows::<f32, 16>,
        ferrax_getrf_small_f32_w32 = getrf_rows::<f32, 32>,
        ferrax_getrf_small_f32_block = getrf_block::<f32>);
    small_getrf!(f64: ferrax_getrf_small_f64_w4 = getrf_rows::<f64, 4>,
        ferrax_getrf_small_f64_w8 = getrf_rows::<f64, 8>,
        ferrax_getrf_small_f64_w16 = getrf_rows::<f64, 16>,
        ferrax_getrf_small_f64_w32 = getrf_rows::<f64, 32>,
        ferrax_getrf_small_f64_block = getrf_block::<f64>);
    small_getrf!(C64: ferrax_getrf_small_c64_w4 = getrf_rows::<C64, 4>,
        ferrax_getrf_small_c64_w8 = getrf_rows::<C64, 8>,
        ferrax_getrf_small_c64_w16 = getrf_rows::<C64, 16>,
        ferrax_getrf_small_c64_w32 = getrf_rows::<C64, 32>,
        ferrax_getrf_small_c64_block = getrf_block::<C64>);
    small_getrf!(C128: ferrax_getrf_small_c128_w4 = getrf_rows::<C128, 4>,
        ferrax_getrf_small_c128_w8 = getrf_rows::<C128, 8>,
        ferrax_getrf_small_c128_w16 = getrf_rows::<C128, 16>,
        ferrax_getrf_small_c128_w32 = getrf_rows::<C128, 32>,
        ferrax_getrf_small_c128_block = getrf_block::<C128>);

    small_potrf!(f32: ferrax_potrf_small_f32_w4 = potrf_rows::<f32, 4>,
        ferrax_potrf_small_f32_w8 = potrf_rows::<f32, 8>,
        ferrax_potrf_small_f32_w16 = potrf_rows::<f32, 16>,
        ferrax_potrf_small_f32_w32 = potrf_rows::<f32, 32>,
        ferrax_potrf_small_f32_block = potrf_block::<f32>);
    small_potrf!(f64: ferrax_potrf_small_f64_w4 = potrf_rows::<f64, 4>,
        ferrax_potrf_small_f64_w8 = potrf_rows::<f64, 8>,
        ferrax_potrf_small_f64_w16 = potrf_rows::<f64, 16>,
        ferrax_potrf_small_f64_w32 = potrf_rows::<f64, 32>,
        ferrax_potrf_small_f64_block = potrf_block::<f64>);
    small_potrf!(C64: ferrax_potrf_small_c64_w4 = potrf_rows::<C64, 4>,
        ferrax_potrf_small_c64_w8 = potrf_rows::<C64, 8>,
        ferrax_potrf_small_c64_w16 = potrf_rows::<C64, 16>,
        ferrax_potrf_small_c64_w32 = potrf_rows::<C64, 32>,
        ferrax_potrf_small_c64_block = potrf_block::<C64>);
    small_potrf!(C128: ferrax_potrf_small_c128_w4 = potrf_rows::<C128, 4>,
        ferrax_potrf_small_c128_w8 = potrf_rows::<C128, 8>,
        ferrax_potrf_small_c128_w16 = potrf_rows::<C128, 16>,
        ferrax_potrf_small_c128_w32 = potrf_rows::<C128, 32>,
        ferrax_potrf_small_c128_block = potrf_block::<C128>);

    small_cholesky!(f32: ferrax_cholesky_small_f32_w4 = cholesky_rows::<f32, 4>,
        ferrax_cholesky_small_f32_w8 = cholesky_rows::<f32, 8>,
        ferrax_cholesky_small_f32_w16 = cholesky_rows::<f32, 16>,
        ferrax_cholesky_small_f32_w32 = cholesky_rows::<f32, 32>,
        ferrax_cholesky_small_f32_block = cholesky_block::<f32>);
    small_cholesky!(f64: ferrax_cholesky_small_f64_w4 = cholesky_rows::<f64, 4>,
        ferrax_cholesky_small_f64_w8 = cholesky_rows::<f64, 8>,
        ferrax_cholesky_small_f64_w16 = cholesky_rows::<f64, 16>,
        ferrax_cholesky_small_f64_w32 = cholesky_rows::<f64, 32>,
        ferrax_cholesky_small_f64_block = cholesky_block::<f64>);
    small_cholesky!(C64: ferrax_cholesky_small_c64_w4 = cholesky_rows::<C64, 4>,
        ferrax_cholesky_small_c64_w8 = cholesky_rows::<C64, 8>,
        ferrax_cholesky_small_c64_w16 = cholesky_rows::<C64, 16>,
        ferrax_cholesky_small_c64_w32 = cholesky_rows::<C64, 32>,
        ferrax_cholesky_small_c64_block = cholesky_block::<C64>);
    small_cholesky!(C128: ferrax_cholesky_small_c128_w4 = cholesky_rows::<C128, 4>,
        ferrax_cholesky_small_c128_w8 = cholesky_rows::<C128, 8>,
        ferrax_cholesky_small_c128_w16 = cholesky_rows::<C128, 16>,
        ferrax_cholesky_small_c128_w32 = cholesky_rows::<C128, 32>,
        ferrax_cholesky_small_c128_block = cholesky_block::<C128>);
}

/// Batched small Householder QR (`crate::small::qr`): `geqrf` entries `(a, tau, m, n, batch)`,
/// `orgqr`/`ungqr` entries `(a, tau, m, n, k, batch)` and jax's whole `qr` on row-major
/// matrices `(a, q, r, m, n, batch, full_matrices)`, one per element type and `W` (the lanes
/// kernels) or `block`; `qr::geqrf_launch` / `orgqr_launch` / `qr_launch` pick one.
macro_rules! small_qr {
    ($t:ty: $($w:tt: $geqrf:ident, $qr:ident;)*) => {$(
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $geqrf(a: *mut $t, tau: *mut $t, m: u32, n: u32, batch: u64) {
            small_qr!(@geqrf $t, $w)(a, tau, m, n, batch)
        }

        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $qr(
            a: *const $t, q: *mut $t, r: *mut $t, m: u32, n: u32, batch: u64, full_matrices: u32,
        ) {
            small_qr!(@qr $t, $w)(a, q, r, m, n, batch, full_matrices)
        }
    )*};
    (@geqrf $t:ty, block) => { crate::small::qr::geqrf_block::<$t> };
    (@geqrf $t:ty, $w:literal) => { crate::small::qr::geqrf_rows::<$t, $w> };
    (@qr $t:ty, block) => { crate::small::qr::qr_block::<$t> };
    (@qr $t:ty, $w:literal) => { crate::small::qr::qr_rows::<$t, $w> };
}

/// `orgqr`/`ungqr` entries `(a, tau, m, n, k, batch)`, one per element type and `W` or `block`
/// (every size: unlike geqrf, complex128 fits at `W = 32`).
macro_rules! small_orgqr {
    ($t:ty: $($w:tt: $orgqr:ident;)*) => {$(
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $orgqr(
            a: *mut $t, tau: *const $t, m: u32, n: u32, k: u32, batch: u64,
        ) {
            small_orgqr!(@orgqr $t, $w)(a, tau, m, n, k, batch)
        }
    )*};
    (@orgqr $t:ty, block) => { crate::small::qr::orgqr_block::<$t> };
    (@orgqr $t:ty, $w:literal) => { crate::small::qr::orgqr_rows::<$t, $w> };
}

mod small_qr_entries {
    use num_complex::Complex;
    type C64 = Complex<f32>;
    type C128 = Complex<f64>;

    small_qr!(f32: 4: ferrax_geqrf_small_f32_w4, ferrax_qr_small_f32_w4;
        8: ferrax_geqrf_small_f32_w8, ferrax_qr_small_f32_w8;
        16: ferrax_geqrf_small_f32_w16, ferrax_qr_small_f32_w16;
        32: ferrax_geqrf_small_f32_w32, ferrax_qr_small_f32_w32;
        block: ferrax_geqrf_small_f32_block, ferrax_qr_small_f32_block;);
    small_qr!(f64: 4: ferrax_geqrf_small_f64_w4, ferrax_qr_small_f64_w4;
        8: ferrax_geqrf_small_f64_w8, ferrax_qr_small_f64_w8;
        16: ferrax_geqrf_small_f64_w16, ferrax_qr_small_f64_w16;
        32: ferrax_geqrf_small_f64_w32, ferrax_qr_small_f64_w32;
        block: ferrax_geqrf_small_f64_block, ferrax_qr_small_f64_block;);
    small_qr!(C64: 4: ferrax_geqrf_small_c64_w4, ferrax_qr_small_c64_w4;
        8: ferrax_geqrf_small_c64_w8, ferrax_qr_small_c64_w8;
        16: ferrax_geqrf_small_c64_w16, ferrax_qr_small_c64_w16;
        32: ferrax_geqrf_small_c64_w32, ferrax_qr_small_c64_w32;
        block: ferrax_geqrf_small_c64_block, ferrax_qr_small_c64_block;);
    // No c128 geqrf or qr at W = 32: its 32 columns of 16 bytes plus xLARFG's temporaries
    // exceed 255 registers (ptxas spills); `qr::geqrf_launch` and `qr_launch` refuse those
    // sizes.
    small_qr!(C128: 4: ferrax_geqrf_small_c128_w4, ferrax_qr_small_c128_w4;
        8: ferrax_geqrf_small_c128_w8, ferrax_qr_small_c128_w8;
        16: ferrax_geqrf_small_c128_w16, ferrax_qr_small_c128_w16;
        block: ferrax_geqrf_small_c128_block, ferrax_qr_small_c128_block;);

    small_orgqr!(f32: 4: ferrax_orgqr_small_f32_w4; 8: ferrax_orgqr_small_f32_w8;
        16: ferrax_orgqr_small_f32_w16; 32: ferrax_orgqr_small_f32_w32;
        block: ferrax_orgqr_small_f32_block;);
    small_orgqr!(f64: 4: ferrax_orgqr_small_f64_w4; 8: ferrax_orgqr_small_f64_w8;
        16: ferrax_orgqr_small_f64_w16; 32: ferrax_orgqr_small_f64_w32;
        block: ferrax_orgqr_small_f64_block;);
    small_orgqr!(C64: 4: ferrax_orgqr_small_c64_w4; 8: ferrax_orgqr_small_c64_w8;
        16: ferrax_orgqr_small_c64_w16; 32: ferrax_orgqr_small_c64_w32;
        block: ferrax_orgqr_small_c64_block;);
    small_orgqr!(C128: 4: ferrax_orgqr_small_c128_w4; 8: ferrax_orgqr_small_c128_w8;
        16: ferrax_orgqr_small_c128_w16; 32: ferrax_orgqr_small_c128_w32;
        block: ferrax_orgqr_small_c128_block;);

    /// `ormqr`/`unmqr` entries, one per element type (`qr::ormqr_launch`).
    macro_rules! small_ormqr {
        ($($t:ty: $ormqr:ident;)*) => {$(
            #[no_mangle]
            pub unsafe extern "ptx-kernel" fn $ormqr(
                a: *const $t, tau: *const $t, c: *mut $t, q: u32, a_cols: u32, k: u32,
                vectors: u32, batch: u64, left: u32, transpose: u32,
            ) {
                crate::small::qr::ormqr_block::<$t>(
                    a, tau, c, q, a_cols, k, vectors, batch, left, transpose,
                )
            }
        )*};
    }
    small_ormqr!(f32: ferrax_ormqr_small_f32_block; f64: ferrax_ormqr_small_f64_block;
        C64: ferrax_ormqr_small_c64_block; C128: ferrax_ormqr_small_c128_block;);
}

// Rank-1 Cholesky update (`cholesky_update`): `small` (one warp per matrix) and `large`
// (panels of a matrix spread over warps); the host picks one with
// `cholesky_update::launch_config`.
macro_rules! cholesky_update_entries {
    ($($small:ident, $large:ident: $t:ty;)*) => {$(
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $small(
            r: *mut $t,
            w: *mut $t,
            n: u32,
            batch: u64,
            _scratch: *mut u8,
        ) {
            crate::cholesky_update::small::<$t>(r, w, n, batch)
        }

        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $large(
            r: *mut $t,
            w: *mut $t,
            n: u32,
            batch: u64,
            scratch: *mut u8,
        ) {
            crate::cholesky_update::large::<$t>(r, w, n, batch, scratch)
        }
    )*};
}

cholesky_update_entries! {
    ferrax_cholesky_update_small_f32, ferrax_cholesky_update_large_f32: f32;
    ferrax_cholesky_update_small_f64, ferrax_cholesky_update_large_f64: f64;
    ferrax_cholesky_update_small_c64, ferrax_cholesky_update_large_c64: num_complex::Complex<f32>;
    ferrax_cholesky_update_small_c128, ferrax_cholesky_update_large_c128: num_complex::Complex<f64>;
}

// `cholesky_update` for n <= G: G lanes per matrix (`cholesky_update::grouped`).
macro_rules! cholesky_update_grouped {
    ($($name:ident: $t:ty, $g:literal;)*) => {$(
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            r: *mut $t,
            w: *mut $t,
            n: u32,
            batch: u64,
            _scratch: *mut u8,
        ) {
            crate::cholesky_update::grouped::<$t, $g>(r, w, n, batch)
        }
    )*};
}

cholesky_update_grouped! {
    ferrax_cholesky_update_g4_f32: f32, 4;
    ferrax_cholesky_update_g8_f32: f32, 8;
    ferrax_cholesky_update_g16_f32: f32, 16;
    ferrax_cholesky_update_g32_f32: f32, 32;
    ferrax_cholesky_update_g4_f64: f64, 4;
    ferrax_cholesky_update_g8_f64: f64, 8;
    ferrax_cholesky_update_g16_f64: f64, 16;
    ferrax_cholesky_update_g32_f64: f64, 32;
    ferrax_cholesky_update_g4_c64: num_complex::Complex<f32>, 4;
    ferrax_cholesky_update_g8_c64: num_complex::Complex<f32>, 8;
    ferrax_cholesky_update_g16_c64: num_complex::Complex<f32>, 16;
    ferrax_cholesky_update_g32_c64: num_complex::Complex<f32>, 32;
    ferrax_cholesky_update_g4_c128: num_complex::Complex<f64>, 4;
    ferrax_cholesky_update_g8_c128: num_complex::Complex<f64>, 8;
    ferrax_cholesky_update_g16_c128: num_complex::Complex<f64>, 16;
    ferrax_cholesky_update_g32_c128: num_complex::Complex<f64>, 32;
}

/// One device pointer per matrix of a batch, for the library routines that take such arrays.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ferrax_batch_pointers(
    pointers: *mut u64,
    base: u64,
    stride: u64,
    count: u64,
) {
    crate::pointers::batch_pointers_kernel(pointers, base, stride, count)
}

/// Batched matrix copies between layouts (`relayout`), one entry per element size; the
/// 16-byte element is two words.
macro_rules! copy_matrices_entries {
    ($($name:ident: $t:ty;)*) => {$(
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            src: *const $t,
            dst: *mut $t,
            rows: u64,
            cols: u64,
            batch: u64,
            from_matrix: u64,
            from_row: u64,
            from_col: u64,
            to_matrix: u64,
            to_row: u64,
            to_col: u64,
            upper: u32,
        ) {
            use crate::relayout::{copy_matrices_kernel, Strides};
            let from = Strides { matrix: from_matrix, row: from_row, col: from_col };
            let to = Strides { matrix: to_matrix, row: to_row, col: to_col };
            copy_matrices_kernel(src, dst, rows, cols, batch, from, to, upper)
        }
    )*};
}

copy_matrices_entries! {
    ferrax_copy_matrices_b4: u32;
    ferrax_copy_matrices_b8: u64;
    ferrax_copy_matrices_b16: [u64; 2];
}
