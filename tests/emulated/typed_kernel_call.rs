//! `ferrax_kernel_call` on the emulated device: the example Rust kernel crate's committed PTX
//! (`examples/rust-kernel/axpy.ptx`, its entries' `.param` lists read by ferrax), whose entries
//! the emulator runs by the crate's own host build, against `a·x + y` on the host; batches (one
//! launch per element), 2-D grids and blocks, scalars from the `scalars` dictionary, and the
//! calls the target refuses.

use super::host::{Attr, Device, Operand};
use crate::rng::Rng;
use ferrax::ffi::NativeType;
use ferrax::ops::kernel_call::cuda::ferrax_cuda_kernel_call as handler;

const PTX: &str = include_str!("../../examples/rust-kernel/axpy.ptx");

/// The attributes `ferrax.kernel_call(x, y, a, n, ...)` lowers to (parameters: x, y, a, n,
/// out), with `overrides` put in place of the named ones.
fn attrs(
    entry: &'static str,
    a: Attr,
    n: u32,
    grid: [i64; 3],
    block: [i64; 3],
    num_batch_dims: i64,
    overrides: &[(&'static str, Attr)],
) -> Vec<(&'static str, Attr)> {
    let leak = |v: Vec<i64>| -> &'static [i64] { Box::leak(v.into_boxed_slice()) };
    let scalars: &'static [(&'static str, Attr)] =
        Box::leak(vec![("2", a), ("3", Attr::U32(n))].into_boxed_slice());
    let mut attrs = vec![
        ("ptx", Attr::Bytes(PTX.as_bytes())),
        ("entry", Attr::Bytes(entry.as_bytes())),
        ("grid", Attr::I64s(leak(grid.to_vec()))),
        ("block", Attr::I64s(leak(block.to_vec()))),
        ("shared_mem_bytes", Attr::I64(0)),
        ("params", Attr::I64s(&[0, 1, -1, -1, 2])),
        ("scalars", Attr::Dict(scalars)),
        ("num_batch_dims", Attr::I64(num_batch_dims)),
    ];
    for &(name, value) in overrides {
        attrs.retain(|(n, _)| *n != name);
        attrs.push((name, value));
    }
    attrs
}

trait Real: NativeType + Default + Copy + PartialEq + std::fmt::Debug {
    const ENTRY: &'static str;
    fn from_f64(v: f64) -> Self;
    fn attr(self) -> Attr;
    fn axpy(a: Self, x: Self, y: Self) -> Self;
}

impl Real for f32 {
    const ENTRY: &'static str = "axpy_f32";
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn attr(self) -> Attr {
        Attr::F32(self)
    }
    fn axpy(a: Self, x: Self, y: Self) -> Self {
        a * x + y
    }
}

impl Real for f64 {
    const ENTRY: &'static str = "axpy_f64";
    fn from_f64(v: f64) -> Self {
        v
    }
    fn attr(self) -> Attr {
        Attr::F64(self)
    }
    fn axpy(a: Self, x: Self, y: Self) -> Self {
        a * x + y
    }
}

/// Runs `axpy` on random batches of random lengths (`n` at most the length: the elements past
/// it stay as they were) and checks every element exactly (the PTX does one rounded multiply
/// and one rounded add, as the host).
fn axpy<T: Real>(device: &Device, rng: &mut Rng) -> Result<(), String> {
    for num_batch_dims in [0usize, 1, 2] {
        let batch_dims: Vec<i64> = (0..num_batch_dims)
            .map(|_| rng.range(1, 4) as i64)
            .collect();
        let batch: usize = batch_dims.iter().product::<i64>() as usize;
        let len = rng.range(1, 700);
        let n = rng.range(0, len + 1);
        let a = T::from_f64(rng.uniform() * 4.0 - 2.0);
        let random = |rng: &mut Rng| -> Vec<T> {
            (0..batch * len)
                .map(|_| T::from_f64(rng.uniform() - 0.5))
                .collect()
        };
        let (x, y, before) = (random(rng), random(rng), random(rng));
        let dims = [batch_dims.clone(), vec![len as i64]].concat();
        // Blocks of 32·4 threads along x and y (the kernel uses x; y repeats it), or 128 x 1.
        let (block, per_block) = if rng.next_u32().is_multiple_of(2) {
            ([32, 4, 1], 32)
        } else {
            ([128, 1, 1], 128)
        };
        let grid = [n.div_ceil(per_block).max(1) as i64, 1, 2];
        let (xd, yd) = (
            device.upload(&x, dims.clone()),
            device.upload(&y, dims.clone()),
        );
        let out = device.upload(&before, dims);
        let attrs = attrs(
            T::ENTRY,
            a.attr(),
            n as u32,
            grid,
            block,
            num_batch_dims as i64,
            &[],
        );
        let calls = device.call(handler, &[&xd, &yd], &[&out], &attrs)?;
        crate::expect_path("kernel_call", &calls, T::ENTRY)?;
        let got = out.download::<T>();
        for b in 0..batch {
            for i in 0..len {
                let at = b * len + i;
                let want = if i < n {
                    T::axpy(a, x[at], y[at])
                } else {
                    before[at]
                };
                if got[at] != want {
                    return Err(format!(
                        "{}: batch {batch_dims:?}, n {n} of {len}: element {i} of batch \
                         element {b} is {:?}, expected {want:?}",
                        T::ENTRY,
                        got[at]
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The kernel call's cases: both entries, then the refusals.
pub fn kernel_call(device: &Device) -> Result<(), String> {
    let mut rng = Rng::fresh("kernel_call");
    axpy::<f32>(device, &mut rng)?;
    axpy::<f64>(device, &mut rng)?;
    // An empty batch launches nothing and succeeds.
    let empty = device.zeros::<f32>(vec![0, 16]);
    let attrs = attrs(
        "axpy_f32",
        Attr::F32(1.0),
        16,
        [1, 1, 1],
        [16, 1, 1],
        1,
        &[],
    );
    device.call(handler, &[&empty, &empty], &[&empty], &attrs)?;
    refusals(device)
}

/// A call the target refuses: the kernel, its attributes, its operands, the error expected.
type Refusal<'a> = (
    &'static str,
    Vec<(&'static str, Attr)>,
    [&'a Operand<'a>; 2],
    &'static str,
);

/// Calls the target refuses, each with an error naming the kernel, none launched.
fn refusals(device: &Device) -> Result<(), String> {
    let buffer = || device.zeros::<f32>(vec![4, 64]);
    let (x, y, out) = (buffer(), buffer(), buffer());
    let other = device.zeros::<f32>(vec![3, 64]);
    let f32_scalar: &'static [(&str, Attr)] = &[("2", Attr::F32(1.0)), ("3", Attr::U32(64))];
    let cases: Vec<Refusal> = vec![
        (
            "axpy_f16",
            vec![],
            [&x, &y],
            "kernel axpy_f16: the PTX defines no entry",
        ),
        // f64's entry takes an 8-byte scalar where the call passes an f32.
        (
            "axpy_f64",
            vec![],
            [&x, &y],
            "do not match the entry's .param list",
        ),
        (
            "axpy_f32",
            vec![("params", Attr::I64s(&[0, 1, -1, -1]))],
            [&x, &y],
            "result 0 is passed to no parameter",
        ),
        (
            "axpy_f32",
            vec![("params", Attr::I64s(&[0, 1, -1, -1, 3]))],
            [&x, &y],
            "parameter 4 = 3: expected a buffer index (0 to 2)",
        ),
        (
            "axpy_f32",
            vec![("scalars", Attr::Dict(&f32_scalar[..1]))],
            [&x, &y],
            "'scalars' has no entry \"3\"",
        ),
        (
            "axpy_f32",
            vec![(
                "scalars",
                Attr::Dict(&[("2", Attr::F32(1.0)), ("3", Attr::U8(1))]),
            )],
            [&x, &y],
            "scalar parameter 3: expected a pred, s32, u32, s64, u64, f32 or f64 scalar",
        ),
        (
            "axpy_f32",
            vec![(
                "scalars",
                Attr::Dict(&[
                    ("2", Attr::F32(1.0)),
                    ("3", Attr::U32(1)),
                    ("7", Attr::I32(0)),
                ]),
            )],
            [&x, &y],
            "\"7\" is no scalar parameter",
        ),
        (
            "axpy_f32",
            vec![("grid", Attr::I64s(&[0, 1, 1]))],
            [&x, &y],
            "grid [0, 1, 1]",
        ),
        (
            "axpy_f32",
            vec![("block", Attr::I64s(&[2048, 1, 1]))],
            [&x, &y],
            "block [2048, 1, 1]",
        ),
        (
            "axpy_f32",
            vec![("shared_mem_bytes", Attr::I64(1 << 30))],
            [&x, &y],
            "bytes of shared memory per block",
        ),
        (
            "axpy_f32",
            vec![],
            [&x, &other],
            "buffer 1 has dimensions [3, 64], expected 1 leading batch dimensions",
        ),
        (
            "axpy_f32",
            vec![(
                "ptx",
                Attr::Bytes(b".visible .entry axpy_f32(.param .u64 x, .param .q32 y)"),
            )],
            [&x, &y],
            "kernel axpy_f32: the entry's parameter 1: cannot read",
        ),
    ];
    for (entry, overrides, [a, b], message) in cases {
        let attrs = attrs(
            entry,
            Attr::F32(1.0),
            64,
            [1, 1, 1],
            [64, 1, 1],
            1,
            &overrides,
        );
        match device.call(handler, &[a, b], &[&out], &attrs) {
            Err(e) if e.contains(&format!("kernel {entry}")) && e.contains(message) => {}
            other => return Err(format!("expected an error with {message:?}, got {other:?}")),
        }
    }
    Ok(())
}
