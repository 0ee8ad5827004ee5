//! Catalyst's memref decoder: the `lapack_<t><op>_ffi` entry points with argument and result
//! lists whose entries (rank, data, dtype) and scalars come from the input: null lists and
//! entries, wrong ranks, negative sizes, bad letters, NaN and Inf data. Each call must leave
//! either its results or a message (and no panic), never crash.
#![no_main]

#[path = "common.rs"]
mod common;

use ferrax::capi::catalyst::EncodedMemref;
use libfuzzer_sys::fuzz_target;
use std::ffi::c_void;
use std::ptr::null_mut;

/// Entries in each list: more than any entry point reads.
const ENTRIES: usize = 16;
/// Elements (16 bytes each) behind every entry; the sizes drawn stay at 4, so no call with
/// sizes that pass the checks needs more.
const CAPACITY: usize = 1 << 10;

type Entry = unsafe extern "C" fn(*mut *mut c_void, *mut *mut c_void);

macro_rules! entry_points {
    ($($name:ident),* $(,)?) => {
        extern "C" { $(fn $name(data: *mut *mut c_void, results: *mut *mut c_void);)* }
        const ENTRY_POINTS: &[Entry] = &[$($name),*];
    };
}

entry_points!(
    lapack_dgetrf_ffi, lapack_zgetrf_ffi, lapack_dgeqrf_ffi, lapack_dorgqr_ffi, lapack_zungqr_ffi,
    lapack_dpotrf_ffi, lapack_zpotrf_ffi, lapack_dtrsm_ffi, lapack_dgesdd_ffi, lapack_zgesdd_ffi,
    lapack_dsyevd_ffi, lapack_zheevd_ffi, lapack_dgeev_ffi, lapack_zgeev_ffi, lapack_dgees_ffi,
    lapack_zgees_ffi, lapack_dgehrd_ffi, lapack_dsytrd_ffi, lapack_sgetrf_ffi, lapack_cgesdd_ffi,
);

/// A rank-0 entry's value: a small size, a negative one, or a LAPACK letter in the low byte of
/// a negative number (so that a size read from it is refused, and a letter read is a letter).
fn scalar(selector: u8) -> i32 {
    let letters = b"NVLUTCASONVLU";
    match selector {
        0..=99 => i32::from(selector % 5),
        100..=109 => -1,
        110 => i32::MIN,
        _ => i32::MIN | i32::from(letters[usize::from(selector) % letters.len()]),
    }
}

fuzz_target!(|data: &[u8]| {
    common::capi::load_lapack();
    let mut choices = common::Choices(data);
    let mut next = || choices.byte();
    let entry = ENTRY_POINTS[usize::from(next()) % ENTRY_POINTS.len()];
    let seed = next();
    let mut storage: Vec<Vec<u64>> = Vec::new();
    let mut memrefs: Vec<EncodedMemref> = Vec::new();
    for _ in 0..2 * ENTRIES {
        let (shape, value) = (next(), next());
        let mut buffer = vec![0u64; 2 * CAPACITY];
        if shape % 8 == 0 {
            buffer[0] = scalar(value) as u32 as u64;
        } else {
            let special = [0.0, 1.0, f64::NAN, f64::INFINITY, -2.5, 1e300];
            for (i, x) in buffer.iter_mut().enumerate() {
                let k = (i * 7 + usize::from(seed) + usize::from(value)) % 23;
                *x = if k < special.len() && seed > 128 { special[k] } else { k as f64 - 11.0 }
                    .to_bits();
            }
        }
        let rank = match shape % 8 {
            0 => 0,
            1 => 1,
            2..=5 => 2,
            6 => 3,
            _ => i64::from(value as i8) * 1000,
        };
        let data = if shape == 255 { null_mut() } else { buffer.as_mut_ptr().cast() };
        memrefs.push(EncodedMemref { rank, data_aligned: data, dtype: (value % 16) as i8 });
        storage.push(buffer);
    }
    let mut pointers: Vec<*mut c_void> = memrefs
        .iter_mut()
        .enumerate()
        .map(|(i, m)| if data.get(i) == Some(&0xFE) { null_mut() } else { (m as *mut EncodedMemref).cast() })
        .collect();
    let (data_list, results) = pointers.split_at_mut(ENTRIES);
    let lists = next();
    let data_list = if lists == 1 { null_mut() } else { data_list.as_mut_ptr() };
    let results = if lists == 2 { null_mut() } else { results.as_mut_ptr() };
    // SAFETY: both lists (where not null) have more entries than any entry point reads, each
    // entry (where not null) points to CAPACITY elements, and no size that passes the checks
    // exceeds 4 (see `scalar`).
    unsafe { entry(data_list, results) };
    common::no_panic(&common::capi::last_error());
});
