//! Host builds of the compiled kernels that the tests pass through ferrax's kernel-call target
//! (code ferrax did not build: a Triton kernel's PTX). Each reads the driver's parameter array
//! (one pointer per `.param`, as `cuLaunchKernel` gets it) and does what its PTX entry does.

use std::ffi::c_void;

/// A launch's shape, as the kernel sees it.
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Blocks per cluster along x (1 without clusters).
    pub cluster: u32,
}

pub struct UserKernel {
    pub name: &'static str,
    /// How many `.param`s the entry declares (the driver reads that many pointers).
    pub params: usize,
    /// # Safety
    /// `params` holds `self.params` pointers to values of the entry's parameter types.
    pub run: unsafe fn(Launch, *mut *mut c_void),
}

/// Every user kernel the emulated driver can run, by entry name.
pub fn user_kernel(name: &str) -> Option<&'static UserKernel> {
    KERNELS.iter().find(|k| k.name == name)
}

static KERNELS: &[UserKernel] = &[UserKernel {
    name: "scaled_add",
    params: 9,
    run: scaled_add,
}];

/// The elements one program (block) of `scaled_add` covers: its `BLOCK`.
pub const SCALED_ADD_BLOCK: usize = 128;

/// Triton's `scaled_add` (`tests/data/make_triton_payloads.py`): for `i < n`,
/// `out[i] = x[i] + y[i]·scale + shift`, negated where `negate` ≠ 0, each program covering
/// `SCALED_ADD_BLOCK` elements; parameters `x, y, n: i32, scale: f32, shift: f32, negate: i32,
/// out`, then the global scratch and profiling pointers.
unsafe fn scaled_add(launch: Launch, params: *mut *mut c_void) {
    let param = |i: usize| *params.add(i);
    let x = *param(0).cast::<*const f32>();
    let y = *param(1).cast::<*const f32>();
    let n = *param(2).cast::<i32>();
    let scale = *param(3).cast::<f32>();
    let shift = *param(4).cast::<f32>();
    let negate = *param(5).cast::<i32>();
    let out = *param(6).cast::<*mut f32>();
    let programs = launch.grid.iter().map(|&g| g as usize).product::<usize>();
    for i in 0..(n.max(0) as usize).min(programs * SCALED_ADD_BLOCK) {
        let r = *x.add(i) + *y.add(i) * scale + shift;
        *out.add(i) = if negate != 0 { -r } else { r };
    }
}
