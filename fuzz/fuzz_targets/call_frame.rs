//! The XLA FFI call-frame and attribute decoders, through every CPU handler ferrax registers:
//! frames with any number of operands and results of any dtype, rank and dimensions (the
//! buffers always as large as the frame says, as XLA guarantees), any stage, and attributes
//! of every kind (scalars and arrays of any dtype, strings, not UTF-8 ones, dictionaries,
//! unknown kinds) under the names the handlers read and others. Each call must return
//! success or an error (never a caught panic), and never crash.
#![no_main]

#[path = "common.rs"]
mod common;

use common::Choices;
use ferrax::ffi::sys::*;
use libfuzzer_sys::fuzz_target;
use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;

#[path = "../../tests/common/api_table.rs"]
mod api_table;

/// Elements of the largest buffer (16 bytes each, the widest dtype).
const CAPACITY: usize = 1 << 12;

const NAMES: &[&str] = &[
    "compute_left", "compute_right", "diag", "full_matrices", "high", "left", "low", "mode",
    "side", "sort", "symmetrize_input", "trans_x", "transpose", "uplo", "jobz", "n", "",
];

/// The object behind this fake runtime's `XLA_FFI_Error*`.
struct FakeError(String);

unsafe extern "C" fn error_create(args: *mut XLA_FFI_Error_Create_Args) -> *mut XLA_FFI_Error {
    let message = CStr::from_ptr((*args).message).to_string_lossy().into_owned();
    Box::into_raw(Box::new(FakeError(message))).cast()
}

unsafe extern "C" fn error_destroy(args: *mut XLA_FFI_Error_Destroy_Args) {
    drop(Box::from_raw((*args).error.cast::<FakeError>()));
}

unsafe extern "C" fn num_threads(args: *mut XLA_FFI_ThreadPool_NumThreads_Args) -> *mut XLA_FFI_Error {
    *(*args).num_threads = 2;
    null_mut()
}

/// Runs the task at once on the calling thread: the pool contract allows it.
unsafe extern "C" fn schedule(args: *mut XLA_FFI_ThreadPool_Schedule_Args) -> *mut XLA_FFI_Error {
    if let Some(task) = (*args).task {
        task((*args).data);
    }
    null_mut()
}

/// Storage that outlives the call: everything the frame points to.
#[derive(Default)]
struct Arena {
    words: Vec<Vec<u64>>,
    dims: Vec<Vec<i64>>,
    buffers: Vec<Box<XLA_FFI_Buffer>>,
    spans: Vec<Box<XLA_FFI_ByteSpan>>,
    bytes: Vec<Vec<u8>>,
    scalars: Vec<Box<XLA_FFI_Scalar>>,
    arrays: Vec<Box<XLA_FFI_Array>>,
    dicts: Vec<Box<XLA_FFI_Attrs>>,
    lists: Vec<Vec<*mut c_void>>,
    kinds: Vec<Vec<i32>>,
    names: Vec<Vec<*mut XLA_FFI_ByteSpan>>,
}

impl Arena {
    fn words(&mut self, len: usize, choices: &mut Choices) -> *mut c_void {
        let fill = choices.u64();
        let special = [0, 1, f64::NAN.to_bits(), f64::INFINITY.to_bits(), u64::MAX];
        let words = (0..len as u64).map(|i| if fill % 3 == 0 { special[(i % 5) as usize] } else { fill ^ i }).collect();
        self.words.push(words);
        self.words.last_mut().unwrap().as_mut_ptr().cast()
    }

    fn buffer(&mut self, choices: &mut Choices) -> (i32, *mut c_void) {
        let kind = if choices.byte() == 0xFF { 0 } else { XLA_FFI_ArgType_BUFFER };
        let dtype = i32::from(choices.byte() % 24);
        let rank = usize::from(choices.byte() % 5);
        let mut dims: Vec<i64> = (0..rank).map(|_| i64::from(choices.byte() % 12)).collect();
        if choices.byte() == 0xEE {
            dims.push(-1);
        }
        let elements = dims.iter().map(|&d| d.max(0) as usize).product::<usize>();
        if elements > CAPACITY {
            dims.iter_mut().for_each(|d| *d = (*d).min(2));
        }
        let elements = dims.iter().map(|&d| d.max(0) as usize).product::<usize>();
        let data = if choices.byte() == 0xDD { null_mut() } else { self.words(2 * elements.max(1), choices) };
        let rank = dims.len() as i64;
        self.dims.push(dims);
        let buffer = Box::new(XLA_FFI_Buffer {
            struct_size: XLA_FFI_Buffer_STRUCT_SIZE,
            extension_start: null_mut(),
            dtype,
            data,
            rank,
            dims: self.dims.last_mut().unwrap().as_mut_ptr(),
        });
        self.buffers.push(buffer);
        (kind, (&mut **self.buffers.last_mut().unwrap() as *mut XLA_FFI_Buffer).cast())
    }

    fn span(&mut self, text: Vec<u8>) -> *mut XLA_FFI_ByteSpan {
        let span = Box::new(XLA_FFI_ByteSpan { ptr: text.as_ptr().cast::<c_char>(), len: text.len() });
        self.bytes.push(text);
        self.spans.push(span);
        &mut **self.spans.last_mut().unwrap()
    }

    fn attrs(&mut self, choices: &mut Choices, depth: u32) -> XLA_FFI_Attrs {
        let count = usize::from(choices.byte() % 6);
        let mut entries: Vec<(Vec<u8>, i32, *mut c_void)> = Vec::new();
        for _ in 0..count {
            let pick = choices.byte();
            let name = match NAMES.get(usize::from(pick) % (NAMES.len() + 2)) {
                Some(name) => name.as_bytes().to_vec(),
                None if pick % 2 == 0 => vec![0xFF, b'u', 0xC0],
                None => vec![b'x'; usize::from(pick % 7)],
            };
            let (kind, value): (i32, *mut c_void) = match choices.byte() % 6 {
                0 | 1 => {
                    let dtype = i32::from(choices.byte() % 24);
                    let value = self.words(2, choices);
                    self.scalars.push(Box::new(XLA_FFI_Scalar { dtype, value }));
                    (XLA_FFI_AttrType_SCALAR, (&mut **self.scalars.last_mut().unwrap() as *mut XLA_FFI_Scalar).cast())
                }
                2 => {
                    let (dtype, size) = (i32::from(choices.byte() % 24), usize::from(choices.byte() % 9));
                    let data = if size == 0 && choices.byte() % 2 == 0 { null_mut() } else { self.words(2 * size.max(1), choices) };
                    self.arrays.push(Box::new(XLA_FFI_Array { dtype, size, data }));
                    (XLA_FFI_AttrType_ARRAY, (&mut **self.arrays.last_mut().unwrap() as *mut XLA_FFI_Array).cast())
                }
                3 => {
                    let len = usize::from(choices.byte() % 5);
                    let text: Vec<u8> = (0..len).map(|_| choices.byte()).collect();
                    (XLA_FFI_AttrType_STRING, self.span(text).cast())
                }
                4 if depth < 2 => {
                    let nested = Box::new(self.attrs(choices, depth + 1));
                    self.dicts.push(nested);
                    (XLA_FFI_AttrType_DICTIONARY, (&mut **self.dicts.last_mut().unwrap() as *mut XLA_FFI_Attrs).cast())
                }
                _ => (i32::from(choices.byte()) + 5, self.words(2, choices)),
            };
            entries.push((name, kind, value));
        }
        // XLA sends attributes sorted by name; now and then they come unsorted.
        if choices.byte() % 8 != 0 {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
        }
        let mut kinds = Vec::new();
        let mut names = Vec::new();
        let mut values = Vec::new();
        for (name, kind, value) in entries {
            names.push(self.span(name));
            kinds.push(kind);
            values.push(value);
        }
        let size = kinds.len() as i64;
        self.kinds.push(kinds);
        self.names.push(names);
        self.lists.push(values);
        XLA_FFI_Attrs {
            struct_size: XLA_FFI_Attrs_STRUCT_SIZE,
            extension_start: null_mut(),
            size,
            types: self.kinds.last_mut().unwrap().as_mut_ptr(),
            names: self.names.last_mut().unwrap().as_mut_ptr(),
            attrs: self.lists.last_mut().unwrap().as_mut_ptr(),
        }
    }

    /// `count` buffers as (count, kinds, pointers).
    fn buffers(&mut self, choices: &mut Choices) -> (i64, *mut i32, *mut *mut c_void) {
        let count = usize::from(choices.byte() % 8);
        let (kinds, pointers): (Vec<i32>, Vec<*mut c_void>) = (0..count).map(|_| self.buffer(choices)).unzip();
        self.kinds.push(kinds);
        self.lists.push(pointers);
        (count as i64, self.kinds.last_mut().unwrap().as_mut_ptr(), self.lists.last_mut().unwrap().as_mut_ptr())
    }
}

fuzz_target!(|data: &[u8]| {
    common::capi::load_lapack();
    let handlers: Vec<_> = ferrax::ops::handlers()
        .filter(|h| h.platform == ferrax::ffi::Platform::Cpu)
        .collect();
    let mut choices = Choices(data);
    let handler = handlers[usize::from(choices.byte()) % handlers.len()].handler;
    let stage = match choices.byte() % 8 {
        0 => XLA_FFI_ExecutionStage_INSTANTIATE,
        1 => XLA_FFI_ExecutionStage_PREPARE,
        2 => XLA_FFI_ExecutionStage_INITIALIZE,
        3 => 99,
        _ => XLA_FFI_ExecutionStage_EXECUTE,
    };
    let api = XLA_FFI_Api {
        XLA_FFI_Error_Create: Some(error_create),
        XLA_FFI_Error_Destroy: Some(error_destroy),
        XLA_FFI_ThreadPool_NumThreads: Some(num_threads),
        XLA_FFI_ThreadPool_Schedule: Some(schedule),
        ..api_table::newest_api_table()
    };
    let mut arena = Arena::default();
    let (arg_count, arg_types, args) = arena.buffers(&mut choices);
    let (ret_count, ret_types, rets) = arena.buffers(&mut choices);
    let attrs = arena.attrs(&mut choices, 0);
    let mut frame = XLA_FFI_CallFrame {
        struct_size: std::mem::size_of::<XLA_FFI_CallFrame>(),
        extension_start: null_mut(),
        api: &api,
        ctx: null_mut(),
        stage,
        args: XLA_FFI_Args {
            struct_size: XLA_FFI_Args_STRUCT_SIZE,
            extension_start: null_mut(),
            size: arg_count,
            types: arg_types,
            args,
        },
        rets: XLA_FFI_Rets {
            struct_size: XLA_FFI_Rets_STRUCT_SIZE,
            extension_start: null_mut(),
            size: ret_count,
            types: ret_types,
            rets,
        },
        attrs,
        future: null_mut(),
    };
    // SAFETY: every pointer in the frame lives in `arena` (or on this stack) for the call.
    let error = unsafe { handler(&mut frame) };
    if !error.is_null() {
        // SAFETY: made by `error_create`, owned by us now.
        let error = unsafe { Box::from_raw(error.cast::<FakeError>()) };
        common::no_panic(&error.0);
    }
});
