//! Functions compiled for the widest vector unit the CPU has, chosen per call: the baseline
//! x86-64 build assumes SSE2 only, and the fixed-length lane loops of the SIMD kernels
//! (the RNN cells, the batched Jacobi SVD) vectorize to whatever the function is compiled for.

/// Declares the function it is given, compiled for the widest vector unit the CPU has:
/// AVX-512, else AVX2 with FMA (the baseline x86-64 build assumes SSE2 only), chosen per call.
/// The RNN cells' pointwise loops vectorize to it: AVX-512 halves the LSTM step of AVX2 on this
/// project's Zen 4 machine (32 rows of 128 units: 6.7 against 13.3 µs).
macro_rules! simd_dispatch {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident<$($g:ident: $bound:path),*>($($arg:ident: $ty:ty),* $(,)?)
            $body:block
    ) => {
        $(#[$meta])*
        $vis fn $name<$($g: $bound),*>($($arg: $ty),*) {
            #[inline(always)]
            fn portable<$($g: $bound),*>($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                unsafe fn avx512<$($g: $bound),*>($($arg: $ty),*) {
                    portable::<$($g),*>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2<$($g: $bound),*>($($arg: $ty),*) {
                    portable::<$($g),*>($($arg),*)
                }
                if $crate::linalg::vector_unit::has_avx512() {
                    // SAFETY: the CPU has these features.
                    return unsafe { avx512::<$($g),*>($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: as above.
                    return unsafe { avx2::<$($g),*>($($arg),*) };
                }
            }
            portable::<$($g),*>($($arg),*)
        }
    };
}
pub(crate) use simd_dispatch;

/// Whether [`simd_dispatch`] takes its AVX-512 version on this CPU (AVX-512 F and VL, FMA).
pub fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
