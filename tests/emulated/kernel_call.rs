//! `ferrax_triton_kernel_call` on the emulated device: a jax-triton payload (built here with
//! ferrax's proto messages, as jaxlib's serializer lays it out) whose PTX entry is Triton's
//! `scaled_add` (the emulator runs its host build), against the same arithmetic on the host;
//! zeroing, scalars by value, buffer order, clusters, autotuned sets, and the calls the target
//! refuses.

use super::host::{Attr, Device};
use crate::rng::Rng;
use ferrax::ops::kernel_call::cuda::ferrax_cuda_triton_kernel_call as handler;
use ferrax::ops::kernel_call::proto::{self, ParameterValue as V};
use prost::Message;

/// `scaled_add`'s entry as Triton writes it: x, y, n, scale, shift, negate, out, then the
/// global scratch and profiling pointers.
const PTX: &str = "\
.version 8.4
.target sm_90
.address_size 64
.visible .entry scaled_add(
\t.param .u64 .ptr .global .align 1 scaled_add_param_0,
\t.param .u64 .ptr .global .align 1 scaled_add_param_1,
\t.param .u32 scaled_add_param_2,
\t.param .f32 scaled_add_param_3,
\t.param .f32 scaled_add_param_4,
\t.param .u32 scaled_add_param_5,
\t.param .u64 .ptr .global .align 1 scaled_add_param_6,
\t.param .u64 .ptr .global .align 1 scaled_add_param_7,
\t.param .u64 .ptr .global .align 1 scaled_add_param_8
)
.reqntid 128, 1, 1
{
\tret;
}
";

/// The elements one program covers (the emulator's `SCALED_ADD_BLOCK`, Triton's `BLOCK`).
const BLOCK: usize = 128;

#[derive(Clone, Copy)]
struct Call {
    n: i32,
    scale: f32,
    shift: f32,
    negate: i32,
    zero_bytes: u64,
    grid: u32,
    ctas: u32,
    shared: u32,
}

impl Call {
    /// One element of `scaled_add`'s result, on the host.
    fn scaled_add(&self, x: f32, y: f32) -> f32 {
        let r = x + y * self.scale + self.shift;
        if self.negate != 0 {
            -r
        } else {
            r
        }
    }
}

fn kernel_call(c: &Call) -> proto::TritonKernelCall {
    let array = |bytes_to_zero| proto::Parameter {
        value: Some(V::Array(proto::ArrayParameter {
            bytes_to_zero,
            ptr_divisibility: 16,
        })),
    };
    let scalar = |value| proto::Parameter { value: Some(value) };
    proto::TritonKernelCall {
        kernel: Some(proto::TritonKernel {
            kernel_name: "scaled_add".into(),
            num_warps: 4,
            num_ctas: Some(c.ctas),
            shared_mem_bytes: c.shared,
            ptx: PTX.into(),
            compute_capability: 90,
            ..Default::default()
        }),
        grid_0: c.grid,
        grid_1: 1,
        grid_2: 1,
        parameters: vec![
            array(0),
            array(0),
            scalar(V::I32(c.n)),
            scalar(V::F32(c.scale)),
            scalar(V::F32(c.shift)),
            scalar(V::I32(c.negate)),
            array(c.zero_bytes),
        ],
    }
}

/// The `opaque` attribute of `call`, as jaxlib's serializer writes it.
fn encode(call: proto::AnyCall) -> &'static [u8] {
    let any = proto::TritonAnyKernelCall {
        value: Some(call),
        metadata: Vec::new(),
        name: String::new(),
    };
    let bytes = miniz_oxide::deflate::compress_to_vec_zlib(&any.encode_to_vec(), 6);
    Box::leak(bytes.into_boxed_slice())
}

fn payload(c: &Call) -> &'static [u8] {
    encode(proto::AnyCall::KernelCall(kernel_call(c)))
}

/// An autotuned set of `configs` whose result aliases operand `y` (jax-triton's numbering:
/// operand 1 to result 0) over `alias_bytes`.
fn autotuned(configs: &[Call], alias_bytes: u64) -> &'static [u8] {
    autotuned_with(configs, (1, 0, alias_bytes))
}

/// As [`autotuned`], with the alias `(operand, result, bytes)`.
fn autotuned_with(configs: &[Call], (input, output, bytes): (u32, u32, u64)) -> &'static [u8] {
    encode(proto::AnyCall::Autotuned(
        proto::TritonAutotunedKernelCall {
            name: "scaled_add tuned".into(),
            configs: configs
                .iter()
                .enumerate()
                .map(|(i, c)| proto::AutotuneConfig {
                    kernel_call: Some(kernel_call(c)),
                    description: format!("config {i}"),
                })
                .collect(),
            input_output_aliases: vec![proto::InputOutputAlias {
                input_buffer_idx: input,
                output_buffer_idx: output,
                buffer_size_bytes: bytes,
            }],
        },
    ))
}

/// Runs `scaled_add` on `len` elements through the target and checks every element: the
/// first `n` computed, the rest of `out`'s zeroed bytes zero, the others untouched.
pub fn triton_kernel_call(device: &Device) -> Result<(), String> {
    let mut rng = Rng::fresh("triton_kernel_call");
    for ctas in [1, 2] {
        let len = rng.range(1, 3000);
        let n = rng.range(0, len + 1);
        let zeroed = rng.range(0, len + 1);
        let x: Vec<f32> = (0..len).map(|_| rng.uniform() as f32).collect();
        let y: Vec<f32> = (0..len).map(|_| rng.uniform() as f32).collect();
        let before: Vec<f32> = (0..len).map(|_| 7.0 + rng.uniform() as f32).collect();
        let call = Call {
            n: n as i32,
            scale: rng.uniform() as f32,
            shift: rng.uniform() as f32,
            negate: (rng.next_u32() % 2) as i32,
            zero_bytes: 4 * zeroed as u64,
            grid: n.div_ceil(BLOCK).max(1) as u32,
            ctas,
            shared: 0,
        };
        let dims = vec![len as i64];
        let (xd, yd) = (
            device.upload(&x, dims.clone()),
            device.upload(&y, dims.clone()),
        );
        let out = device.upload(&before, dims);
        let calls = device.call(
            handler,
            &[&xd, &yd],
            &[&out],
            &[("opaque", Attr::Bytes(payload(&call)))],
        )?;
        crate::expect_path("triton_kernel_call", &calls, "scaled_add")?;
        let got = out.download::<f32>();
        for i in 0..len {
            let want = if i < n {
                call.scaled_add(x[i], y[i])
            } else if i < zeroed {
                0.0
            } else {
                before[i]
            };
            if got[i].to_bits() != want.to_bits() {
                return Err(format!(
                    "clusters of {ctas}, n {n} of {len}, {zeroed} zeroed: element {i} is {}, \
                     expected {want}",
                    got[i]
                ));
            }
        }
    }
    refusals(device)?;
    autotuning(device)
}

/// Calls the target refuses, each with an error naming the kernel, none launched.
fn refusals(device: &Device) -> Result<(), String> {
    let len = 256;
    let good = Call {
        n: len,
        scale: 1.0,
        shift: 0.0,
        negate: 0,
        zero_bytes: 0,
        grid: 2,
        ctas: 1,
        shared: 0,
    };
    let buffer = || device.zeros::<f32>(vec![len as i64]);
    let (x, y, out) = (buffer(), buffer(), buffer());
    let cases: [(Call, &[_], &str); 3] = [
        (
            Call {
                zero_bytes: 4 * len as u64 + 4,
                ..good
            },
            &[&x, &y],
            "asks for 1028 bytes zeroed",
        ),
        (
            Call {
                shared: 1 << 30,
                ..good
            },
            &[&x, &y],
            "bytes of shared memory per block",
        ),
        (
            Call { ..good },
            &[&x],
            "take 3 buffers, the call has 1 operands and 1 results",
        ),
    ];
    for (call, args, message) in cases {
        match device.call(
            handler,
            args,
            &[&out],
            &[("opaque", Attr::Bytes(payload(&call)))],
        ) {
            Err(e) if e.contains("kernel scaled_add") && e.contains(message) => {}
            other => return Err(format!("expected an error with {message:?}, got {other:?}")),
        }
    }
    Ok(())
}

/// An autotuned set run in place (the result is operand `y`'s buffer), its configurations
/// in this order: one whose grid runs four million programs past `n` (slow, the same result),
/// the exact grid, one that asks for more shared memory than the device has (skipped), the slow
/// one again. The first call times the three that fit and launches the exact one; later calls
/// launch it alone. `y` comes back as one application of the kernel, so the trials' writes to
/// it were undone.
fn autotuning(device: &Device) -> Result<(), String> {
    let mut rng = Rng::fresh("triton_kernel_call autotuning");
    let len = rng.range(1, 3000);
    let n = rng.range(0, len + 1);
    let exact = Call {
        n: n as i32,
        scale: rng.uniform() as f32,
        shift: rng.uniform() as f32,
        negate: (rng.next_u32() % 2) as i32,
        zero_bytes: 0,
        grid: n.div_ceil(BLOCK).max(1) as u32,
        ctas: 1,
        shared: 0,
    };
    let wasteful = Call {
        grid: 1 << 22,
        ..exact
    };
    let too_big = Call {
        shared: 1 << 30,
        ..exact
    };
    let bytes = 4 * len as u64;
    let opaque = autotuned(&[wasteful, exact, too_big, wasteful], bytes);
    let exact_launch = format!("scaled_add grid [{}, 1, 1]", exact.grid);
    let x: Vec<f32> = (0..len).map(|_| rng.uniform() as f32).collect();
    let xd = device.upload(&x, vec![len as i64]);
    let mut run = |attempt: usize| -> Result<Vec<String>, String> {
        let y: Vec<f32> = (0..len).map(|_| rng.uniform() as f32).collect();
        let yd = device.upload(&y, vec![len as i64]);
        let calls = device.call(
            handler,
            &[&xd, &yd],
            &[&yd],
            &[("opaque", Attr::Bytes(opaque))],
        )?;
        let got = yd.download::<f32>();
        for i in 0..len {
            let want = if i < n {
                exact.scaled_add(x[i], y[i])
            } else {
                y[i]
            };
            if got[i].to_bits() != want.to_bits() {
                return Err(format!(
                    "autotuned in place, call {attempt}, n {n} of {len}: element {i} is {}, \
                     expected {want}",
                    got[i]
                ));
            }
        }
        Ok(calls)
    };
    // While the stream captures a graph nothing can be timed: refused, and not remembered.
    device.set_capturing(true);
    let captured = device.call(
        handler,
        &[&xd, &xd],
        &[&xd],
        &[("opaque", Attr::Bytes(opaque))],
    );
    device.set_capturing(false);
    match captured {
        Err(e) if e.contains("scaled_add tuned") && e.contains("captures a CUDA graph") => {}
        other => return Err(format!("autotuning while capturing: got {other:?}")),
    }
    let tuned = run(1)?;
    let wasteful_launch = format!("scaled_add grid [{}, 1, 1]", wasteful.grid);
    let launches = |grid: &str| tuned.iter().filter(|c| *c == grid).count();
    // Each configuration that fits: a warm-up and a launch to size the run, then a warm-up and
    // at least one timed launch; then the chosen one's launch.
    if launches(&wasteful_launch) < 2 * 4
        || launches(&exact_launch) < 4 + 1
        || tuned.len() != launches(&wasteful_launch) + launches(&exact_launch)
        || tuned.last() != Some(&exact_launch)
    {
        return Err(format!(
            "autotuning launched {} kernels: {} of {wasteful_launch:?}, {} of {exact_launch:?}, \
             the last {:?}",
            tuned.len(),
            launches(&wasteful_launch),
            launches(&exact_launch),
            tuned.last()
        ));
    }
    let again = run(2)?;
    if again != [exact_launch.clone()] {
        return Err(format!(
            "after autotuning, expected {exact_launch:?} alone, got {again:?}"
        ));
    }
    // Refusals, each naming the set.
    let y = device.zeros::<f32>(vec![len as i64]);
    let cases = [
        (
            autotuned(&[too_big], bytes),
            "no configuration fits the device's",
        ),
        (
            autotuned(&[exact, wasteful], bytes + 4),
            "alias of operand 1 to result 0 over",
        ),
        (
            autotuned_with(&[exact, wasteful], (1, 1, bytes)),
            "alias of operand 1 to result 1, the call has 2 operands and 1 results",
        ),
    ];
    for (opaque, message) in cases {
        match device.call(
            handler,
            &[&xd, &y],
            &[&y],
            &[("opaque", Attr::Bytes(opaque))],
        ) {
            Err(e) if e.contains("scaled_add tuned") && e.contains(message) => {}
            other => return Err(format!("expected an error with {message:?}, got {other:?}")),
        }
    }
    Ok(())
}
