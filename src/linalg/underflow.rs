//! Gradual underflow for faer's factorizations. XLA's CPU threads flush subnormal results to
//! zero and read subnormal operands as zero (x86's FTZ and DAZ, AArch64's FZ). LAPACK copes;
//! faer's complex reciprocal does not: for `|z| ≤ 1` it scales `z` by `sqrt(MAX)` and inverts
//! `|z|²·MAX`, a subnormal that flushes to zero, so its LU multiplied whole columns by zero
//! (spsolve's complex LU, residuals of order 1).

/// While alive, the calling thread keeps subnormals (its FTZ/DAZ bits cleared); dropping it
/// restores the thread's previous mode.
pub struct GradualUnderflow {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    saved: u64,
}

#[cfg(target_arch = "x86_64")]
mod control {
    /// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6).
    pub const FLUSH: u64 = 1 << 15 | 1 << 6;

    pub fn read() -> u64 {
        let mut csr = 0u32;
        // SAFETY: stores MXCSR to a local.
        unsafe { core::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack)) };
        csr.into()
    }

    pub fn write(value: u64) {
        let csr = value as u32;
        // SAFETY: loads a value read from MXCSR with only its flush bits changed.
        unsafe { core::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack, readonly)) };
    }
}

#[cfg(target_arch = "aarch64")]
mod control {
    /// FPCR's flush-to-zero (FZ, bit 24).
    pub const FLUSH: u64 = 1 << 24;

    pub fn read() -> u64 {
        let fpcr: u64;
        // SAFETY: reads FPCR.
        unsafe { core::arch::asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack)) };
        fpcr
    }

    pub fn write(value: u64) {
        // SAFETY: writes back a value read from FPCR with only FZ changed.
        unsafe { core::arch::asm!("msr fpcr, {}", in(reg) value, options(nostack)) };
    }
}

impl GradualUnderflow {
    pub fn new() -> Self {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        {
            let saved = control::read();
            if saved & control::FLUSH != 0 {
                control::write(saved & !control::FLUSH);
            }
            GradualUnderflow { saved }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        GradualUnderflow {}
    }
}

impl Drop for GradualUnderflow {
    fn drop(&mut self) {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        if self.saved & control::FLUSH != 0 {
            control::write(self.saved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest normal f64 halved: subnormal, zero where the thread flushes.
    fn halved_min() -> f64 {
        std::hint::black_box(f64::MIN_POSITIVE) / std::hint::black_box(2.0)
    }

    #[test]
    fn keeps_subnormals_inside_and_restores_the_mode() {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        {
            let before = control::read();
            control::write(before | control::FLUSH);
            assert_eq!(halved_min(), 0.0, "the thread flushes");
            {
                let _gradual = GradualUnderflow::new();
                assert!(halved_min() > 0.0);
            }
            assert_eq!(halved_min(), 0.0, "the flush mode is back");
            control::write(before);
        }
        assert!(halved_min() > 0.0);
    }
}
