//! The PTX entry points: `#[no_mangle] extern "ptx-kernel"` functions, each a thin call into a
//! body that is unit-tested on the host. Their names and parameters are the contract with the
//! launches in `src/cuda/` of the host crate.

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
