//! A compiled-kernel call's payload read and checked on the host: what the CUDA target will
//! launch, as JSON, or the error it would give, so that callers (ferrax's Python lowering,
//! tests, tools) find a bad kernel call before anything runs.

use super::linalg::guard;
use crate::ops::kernel_call::{Calls, KernelCall, Param, Payload, Scalar};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::fmt::Write;

thread_local! {
    static DESCRIPTION: RefCell<CString> = RefCell::new(CString::default());
}

/// Decodes and checks a kernel-call payload (jaxlib's Triton `opaque`: zlib-compressed unless
/// `compressed` is 0) and points `json` at its description, valid until the next call on this
/// thread. Returns 0, or -1 with the error (naming the kernel) in `ferrax_last_error()`.
///
/// # Safety
/// `opaque` points to `len` readable bytes (or is null with `len` 0); `json` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrax_kernel_call_describe(
    opaque: *const u8,
    len: usize,
    compressed: c_int,
    json: *mut *const c_char,
) -> c_int {
    guard(|| {
        if json.is_null() || (opaque.is_null() && len > 0) {
            return Err("ferrax_kernel_call_describe: null pointer".into());
        }
        let bytes = if len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(opaque, len)
        };
        let payload = Payload::decode(bytes, compressed != 0)?;
        let text = CString::new(describe(&payload)).map_err(|e| e.to_string())?;
        DESCRIPTION.with(|d| {
            *d.borrow_mut() = text;
            *json = d.borrow().as_ptr();
        });
        Ok(())
    })
}

fn describe(payload: &Payload) -> String {
    let mut out = String::new();
    let autotune = match &payload.calls {
        Calls::One(_) => "null".to_string(),
        Calls::Autotuned { name, aliases, .. } => {
            let aliases: Vec<String> = aliases
                .iter()
                .map(|a| format!("[{}, {}, {}]", a.input, a.output, a.bytes))
                .collect();
            format!(
                "{{\"name\": {}, \"aliases\": [{}]}}",
                string(name),
                aliases.join(", ")
            )
        }
    };
    let descriptions: Vec<Option<&str>> = match &payload.calls {
        Calls::One(_) => vec![None],
        Calls::Autotuned { configs, .. } => {
            configs.iter().map(|c| Some(&c.description[..])).collect()
        }
    };
    let calls: Vec<String> = payload
        .candidates()
        .into_iter()
        .zip(descriptions)
        .map(|(call, description)| kernel_call(call, description))
        .collect();
    let _ = write!(
        out,
        "{{\"name\": {}, \"metadata_bytes\": {}, \"buffers\": {}, \"autotune\": {autotune}, \
         \"calls\": [{}]}}",
        string(&payload.name),
        payload.metadata.len(),
        payload.buffers(),
        calls.join(", ")
    );
    out
}

fn kernel_call(call: &KernelCall, description: Option<&str>) -> String {
    let k = &call.kernel;
    let params: Vec<String> = call.params.iter().map(param).collect();
    let entry = match &k.entry_params {
        Some(entry) => list(entry.iter().map(|e| format!("[{}, {}]", e.size, e.align))),
        None => "null".into(),
    };
    let scratch = match k.global_scratch {
        Some((size, align)) => format!("[{size}, {align}]"),
        None => "null".into(),
    };
    format!(
        "{{\"description\": {}, \"kernel\": {}, \"code\": \"{}\", \"threads_per_block\": {}, \
         \"ctas_per_cluster\": {}, \"shared_mem_bytes\": {}, \"compute_capability\": {}, \
         \"global_scratch\": {scratch}, \"grid\": {}, \"params\": [{}], \"entry_params\": {entry}}}",
        description.map_or("null".into(), string),
        string(&k.name),
        match k.code {
            crate::ops::kernel_call::Code::Ptx(_) => "ptx",
            crate::ops::kernel_call::Code::Cubin(_) => "cubin",
        },
        k.threads_per_block,
        k.ctas_per_cluster,
        k.shared_mem_bytes,
        k.compute_capability,
        list(call.grid.iter()),
        params.join(", ")
    )
}

fn param(p: &Param) -> String {
    match p {
        Param::Array {
            bytes_to_zero,
            divisibility,
        } => format!(
            "{{\"kind\": \"array\", \"bytes_to_zero\": {bytes_to_zero}, \"divisibility\": {divisibility}}}"
        ),
        Param::Tma(t) => format!(
            "{{\"kind\": \"tma\", \"elem_type\": {}, \"swizzle\": {}, \"shape\": {}, \
             \"strides\": {}, \"block_shape\": {}, \"oob_fill\": {}}}",
            t.elem_type,
            t.swizzle,
            list(t.shape.iter()),
            list(t.strides.iter()),
            list(t.block_shape.iter()),
            t.oob_fill
        ),
        Param::Scalar(s) => {
            let value = match *s {
                Scalar::Bool(v) => v.to_string(),
                Scalar::I32(v) => v.to_string(),
                Scalar::U32(v) => v.to_string(),
                Scalar::I64(v) => v.to_string(),
                Scalar::U64(v) => v.to_string(),
                Scalar::F32(v) => number(f64::from(v)),
                Scalar::F64(v) => number(v),
            };
            format!("{{\"kind\": \"{}\", \"value\": {value}}}", s.type_name())
        }
    }
}

fn list<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    let items: Vec<String> = items.map(|i| i.to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// A float as JSON: a number, or where it is not finite (which JSON numbers cannot be) the
/// string "NaN", "Infinity" or "-Infinity".
fn number(v: f64) -> String {
    if v.is_nan() {
        "\"NaN\"".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "\"Infinity\""
        } else {
            "\"-Infinity\""
        }
        .into()
    } else {
        format!("{v:?}")
    }
}

fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
