//! Host builds of the compiled kernels that the tests pass through ferrax's kernel-call targets
//! (code ferrax did not build: a Triton kernel's PTX, the example Rust kernel crate's). Each
//! reads the driver's parameter array (one pointer per `.param`, as `cuLaunchKernel` gets it)
//! and does what its PTX entry does.

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

static KERNELS: &[UserKernel] = &[
    UserKernel {
        name: "scaled_add",
        params: 9,
        run: scaled_add,
    },
    UserKernel {
        name: "axpy_f32",
        params: 5,
        run: axpy::<f32>,
    },
    UserKernel {
        name: "axpy_f64",
        params: 5,
        run: axpy::<f64>,
    },
];

/// `examples/rust-kernel`'s `axpy_f32` / `axpy_f64` (`x, y, a, n, out`): every thread of the
/// launch runs the crate's own body for its element along x, as its PTX entry does.
unsafe fn axpy<T>(launch: Launch, params: *mut *mut c_void)
where
    T: Copy + std::ops::Mul<Output = T> + std::ops::Add<Output = T>,
{
    let param = |i: usize| *params.add(i);
    let x = *param(0).cast::<*const T>();
    let y = *param(1).cast::<*const T>();
    let a = *param(2).cast::<T>();
    let n = *param(3).cast::<u32>();
    let out = *param(4).cast::<*mut T>();
    let [gx, gy, gz] = launch.grid.map(|g| g as usize);
    let [bx, by, bz] = launch.block.map(|b| b as usize);
    for _block_yz in 0..gy * gz {
        for block in 0..gx {
            for _thread_yz in 0..by * bz {
                for thread in 0..bx {
                    ferrax_example_axpy::axpy(block * bx + thread, x, y, a, n, out);
                }
            }
        }
    }
}

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
    let n = n.max(0) as usize;
    // Program by program, each masked to `n` as Triton's: a grid past `n` costs time, as on
    // a GPU, and autotuning can tell such configurations apart.
    for program in 0..programs {
        let start = std::hint::black_box(program) * SCALED_ADD_BLOCK;
        for i in start..(start + SCALED_ADD_BLOCK).min(n) {
            let r = *x.add(i) + *y.add(i) * scale + shift;
            *out.add(i) = if negate != 0 { -r } else { r };
        }
    }
}
