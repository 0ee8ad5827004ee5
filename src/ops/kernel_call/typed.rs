//! ferrax's own kernel call (`ferrax_kernel_call`, what `ferrax.kernel_call` lowers to): a
//! kernel of the caller's PTX, described by typed attributes instead of an opaque payload.
//!
//! Attributes: `ptx` (the module's text), `entry` (its `.entry` name), `grid` and `block`
//! (three s64 each), `shared_mem_bytes` (s64), `params` (s64, one per kernel parameter: a
//! buffer's index, operands then results, or -1 for a scalar) and `scalars` (a dictionary whose
//! key is the scalar parameter's index in decimal and whose value is typed: pred, s32, u32,
//! s64, u64, f32 or f64), `num_batch_dims` (s64: every buffer's leading dimensions that form a
//! batch, the kernel launched once per batch element with each buffer's element of it).
//!
//! Checked here, before any launch, naming the kernel: the entry exists in the PTX and its
//! `.param` list has exactly these parameters' sizes, every result is passed to the kernel,
//! the grid and block are within every CUDA device's limits.

use super::ptx::EntryParam;
use super::{Scalar, MAX_GRID};
use crate::ffi::{Attr, Attrs, DataType};
use std::ffi::CStr;

/// ferrax's target for kernels of the caller's PTX (registered for CUDA).
pub const KERNEL_CALL: &CStr = c"ferrax_kernel_call";

/// CUDA's block limits (all devices since sm_30): x, y, z, and threads in all.
const MAX_BLOCK: [u64; 3] = [1024, 1024, 64];
const MAX_THREADS_PER_BLOCK: u64 = 1024;

/// One kernel parameter, as the call passes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// The address of buffer `i` (operands, then results).
    Buffer(usize),
    Scalar(Scalar),
}

impl Arg {
    fn size(&self) -> usize {
        match self {
            Arg::Buffer(_) => 8,
            Arg::Scalar(s) => s.bytes().len(),
        }
    }
    fn describe(&self) -> String {
        match self {
            Arg::Buffer(i) => format!("buffer {i} (8 bytes)"),
            Arg::Scalar(s) => format!("{} ({} bytes)", s.type_name(), s.bytes().len()),
        }
    }
}

/// The grid and block of a launch, checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
}

/// The grid, block and dynamic shared memory of kernel `name`, within every CUDA device's
/// limits (the device's own shared-memory limit is checked at launch).
pub fn shape(name: &str, grid: &[i64], block: &[i64], shared_mem_bytes: i64) -> Result<Shape, String> {
    let at = |message: String| format!("kernel {name}: {message}");
    let three = |what: &str, dims: &[i64], max: [u64; 3]| -> Result<[u32; 3], String> {
        let within = dims.len() == 3
            && dims
                .iter()
                .zip(max)
                .all(|(&d, max)| d >= 1 && d as u64 <= max);
        if !within {
            return Err(at(format!(
                "{what} {dims:?}: expected three dimensions, each at least 1 and at most {max:?}"
            )));
        }
        Ok([dims[0] as u32, dims[1] as u32, dims[2] as u32])
    };
    let grid = three("grid", grid, MAX_GRID)?;
    let block = three("block", block, MAX_BLOCK)?;
    let threads: u64 = block.iter().map(|&b| u64::from(b)).product();
    if threads > MAX_THREADS_PER_BLOCK {
        return Err(at(format!(
            "block {block:?}: {threads} threads, CUDA allows {MAX_THREADS_PER_BLOCK} per block"
        )));
    }
    let shared_mem_bytes = u32::try_from(shared_mem_bytes).map_err(|_| {
        at(format!(
            "shared_mem_bytes = {shared_mem_bytes}: expected 0 to {}",
            u32::MAX
        ))
    })?;
    Ok(Shape {
        grid,
        block,
        shared_mem_bytes,
    })
}

/// The kernel's parameters from the `params` and `scalars` attributes, for a call with
/// `operands` operands and `results` results: every buffer index in range, every result passed
/// (the kernel is what writes it), every scalar given once and used.
pub fn args(
    name: &str,
    params: &[i64],
    scalars: Attrs<'_>,
    operands: usize,
    results: usize,
) -> Result<Vec<Arg>, String> {
    let at = |message: String| format!("kernel {name}: {message}");
    let buffers = operands + results;
    let args = params
        .iter()
        .enumerate()
        .map(|(index, &p)| match p {
            -1 => {
                let attr = scalars.get(&index.to_string()).ok_or_else(|| {
                    at(format!(
                        "parameter {index} is a scalar, attribute 'scalars' has no entry \"{index}\""
                    ))
                })?;
                scalar(attr)
                    .map(Arg::Scalar)
                    .map_err(|e| at(format!("scalar parameter {index}: {e}")))
            }
            _ if p >= 0 && (p as u64) < buffers as u64 => Ok(Arg::Buffer(p as usize)),
            _ => Err(at(format!(
                "parameter {index} = {p}: expected a buffer index (0 to {}) or -1 for a scalar",
                buffers as i64 - 1
            ))),
        })
        .collect::<Result<Vec<_>, String>>()?;
    if let Some(result) =
        (operands..buffers).find(|&b| !args.contains(&Arg::Buffer(b)))
    {
        return Err(at(format!(
            "result {} is passed to no parameter (the kernel is what writes it)",
            result - operands
        )));
    }
    let scalar_count = params.iter().filter(|&&p| p == -1).count();
    if scalars.len() != scalar_count {
        let unused = (0..scalars.len())
            .map(|i| scalars.name(i))
            .find(|key| key.parse::<usize>().map_or(true, |i| params.get(i) != Some(&-1)));
        return Err(at(format!(
            "attribute 'scalars' has {} entries for {scalar_count} scalar parameters{}",
            scalars.len(),
            unused.map_or(String::new(), |key| format!(" (\"{key}\" is no scalar parameter)"))
        )));
    }
    Ok(args)
}

/// A scalar attribute as the kernel's by-value parameter.
fn scalar(attr: Attr<'_>) -> Result<Scalar, String> {
    let expected = "expected a pred, s32, u32, s64, u64, f32 or f64 scalar";
    let Attr::Scalar { dtype, value } = attr else {
        return Err(format!("{expected}, got {attr}"));
    };
    // SAFETY: each arm reads the type its dtype names, which XLA holds for the call.
    unsafe {
        Ok(match dtype {
            DataType::Pred => Scalar::Bool(value.read() != 0),
            DataType::S32 => Scalar::I32(value.cast::<i32>().read_unaligned()),
            DataType::U32 => Scalar::U32(value.cast::<u32>().read_unaligned()),
            DataType::S64 => Scalar::I64(value.cast::<i64>().read_unaligned()),
            DataType::U64 => Scalar::U64(value.cast::<u64>().read_unaligned()),
            DataType::F32 => Scalar::F32(value.cast::<f32>().read_unaligned()),
            DataType::F64 => Scalar::F64(value.cast::<f64>().read_unaligned()),
            _ => return Err(format!("{expected}, got {attr}")),
        })
    }
}

/// The call's parameters against the entry's `.param` list: the same count and sizes.
pub fn check_args(name: &str, entry: &[EntryParam], args: &[Arg]) -> Result<(), String> {
    if entry.len() == args.len() && entry.iter().zip(args).all(|(e, a)| e.size == a.size()) {
        return Ok(());
    }
    let declared: Vec<String> = entry.iter().map(|e| format!("{} bytes", e.size)).collect();
    let passed: Vec<String> = args.iter().map(Arg::describe).collect();
    Err(format!(
        "kernel {name}: the call's parameters [{}] do not match the entry's .param list [{}]",
        passed.join(", "),
        declared.join(", ")
    ))
}

/// The batch of a call: how many elements the leading `num_batch_dims` dimensions of every
/// buffer (`dims` of each) hold, which must be the same dimensions in all.
pub fn batch(name: &str, num_batch_dims: i64, dims: &[&[i64]]) -> Result<usize, String> {
    let at = |message: String| format!("kernel {name}: {message}");
    let rank = usize::try_from(num_batch_dims)
        .map_err(|_| at(format!("num_batch_dims = {num_batch_dims}: expected 0 or more")))?;
    let Some(first) = dims.first() else {
        return Ok(1);
    };
    if let Some((index, d)) = dims.iter().enumerate().find(|(_, d)| {
        d.len() < rank || first.len() < rank || d[..rank] != first[..rank]
    }) {
        return Err(at(format!(
            "buffer {index} has dimensions {d:?}, expected {rank} leading batch dimensions \
             as buffer 0's {first:?}"
        )));
    }
    first[..rank]
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
        .ok_or_else(|| at(format!("batch dimensions {:?} too large", &first[..rank])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(size: usize) -> EntryParam {
        EntryParam { size, align: size }
    }

    #[test]
    fn shapes_within_cuda_limits_pass_and_others_are_said() {
        let s = shape("k", &[3, 2, 1], &[32, 4, 2], 4096).unwrap();
        assert_eq!((s.grid, s.block, s.shared_mem_bytes), ([3, 2, 1], [32, 4, 2], 4096));
        let max = shape("k", &[(1 << 31) - 1, 65535, 65535], &[1024, 1, 1], 0).unwrap();
        assert_eq!(max.grid, [(1 << 31) - 1, 65535, 65535]);
        for (grid, block, shared, says) in [
            (&[0, 1, 1][..], &[1, 1, 1][..], 0, "grid [0, 1, 1]"),
            (&[1, 1], &[1, 1, 1], 0, "grid [1, 1]"),
            (&[1, 65536, 1], &[1, 1, 1], 0, "grid [1, 65536, 1]"),
            (&[1 << 31, 1, 1], &[1, 1, 1], 0, "grid [2147483648"),
            (&[1, 1, 1], &[1, 1, 65], 0, "block [1, 1, 65]"),
            (&[1, 1, 1], &[-1, 1, 1], 0, "block [-1, 1, 1]"),
            (&[1, 1, 1], &[64, 32, 1], 0, "2048 threads"),
            (&[1, 1, 1], &[1, 1, 1], -1, "shared_mem_bytes = -1"),
            (&[1, 1, 1], &[1, 1, 1], 1 << 32, "shared_mem_bytes = 4294967296"),
        ] {
            let error = shape("saxpy", grid, block, shared).unwrap_err();
            assert!(error.starts_with("kernel saxpy: ") && error.contains(says), "{error}");
        }
    }

    #[test]
    fn parameters_must_match_the_entry_exactly() {
        let args = [Arg::Buffer(0), Arg::Scalar(Scalar::F32(2.0)), Arg::Buffer(1)];
        check_args("k", &[p(8), p(4), p(8)], &args).unwrap();
        for entry in [
            &[p(8), p(8), p(8)][..],
            &[p(8), p(4)],
            &[p(8), p(4), p(8), p(8)],
        ] {
            let error = check_args("k", entry, &args).unwrap_err();
            assert!(
                error.contains("[buffer 0 (8 bytes), f32 (4 bytes), buffer 1 (8 bytes)]"),
                "{error}"
            );
        }
    }

    #[test]
    fn the_batch_is_the_common_leading_dimensions() {
        assert_eq!(batch("k", 0, &[&[5, 3], &[7]]).unwrap(), 1);
        assert_eq!(batch("k", 2, &[&[2, 3, 5], &[2, 3], &[2, 3, 1, 1]]).unwrap(), 6);
        assert_eq!(batch("k", 1, &[&[0, 4], &[0]]).unwrap(), 0);
        assert_eq!(batch("k", 1, &[]).unwrap(), 1);
        let error = batch("k", 1, &[&[2, 3], &[3, 3]]).unwrap_err();
        assert!(error.contains("buffer 1 has dimensions [3, 3]"), "{error}");
        let error = batch("k", 2, &[&[2, 3], &[2]]).unwrap_err();
        assert!(error.contains("buffer 1 has dimensions [2]"), "{error}");
        assert!(batch("k", -1, &[&[2]]).unwrap_err().contains("num_batch_dims = -1"));
        let huge = i64::MAX;
        assert!(batch("k", 2, &[&[huge, huge]]).unwrap_err().contains("too large"));
    }
}
