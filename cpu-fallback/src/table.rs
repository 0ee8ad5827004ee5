//! The function-pointer table: one atomic slot per LAPACK routine, by its LAPACK name.

use crate::lapack::ROUTINES;
use std::ffi::c_void;
use std::fmt;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A routine the table has no pointer for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Missing(pub &'static str);

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LAPACK routine '{}' is not available: call ferrax.register() from Python (fills the \
             table from scipy.linalg.cython_lapack) or ferrax_lapack_load_library() with the path \
             of the scipy-openblas32 library",
            self.0
        )
    }
}

impl std::error::Error for Missing {}

/// One pointer per entry of [`ROUTINES`], null until registered.
static POINTERS: [AtomicPtr<c_void>; ROUTINES.len()] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; ROUTINES.len()];

fn slot(name: &str) -> Option<&'static AtomicPtr<c_void>> {
    ROUTINES
        .iter()
        .position(|&r| r == name)
        .map(|i| &POINTERS[i])
}

pub(crate) fn get(name: &'static str) -> Result<*mut c_void, Missing> {
    let ptr = slot(name)
        .expect("routine listed in ROUTINES")
        .load(Ordering::Acquire);
    if ptr.is_null() {
        Err(Missing(name))
    } else {
        Ok(ptr)
    }
}

/// Stores the pointer for routine `name`, which must have the LP64 reference-LAPACK signature
/// (32-bit integers, all arguments by pointer, no hidden string lengths), as SciPy's
/// `cython_lapack` capsules do. Returns false for a name the table does not hold.
pub fn register(name: &str, function: *mut c_void) -> bool {
    if name == crate::threads::SET_NUM_THREADS_LOCAL && !function.is_null() {
        crate::threads::register(function);
        return true;
    }
    match slot(name) {
        Some(slot) if !function.is_null() => {
            slot.store(function, Ordering::Release);
            true
        }
        _ => false,
    }
}

/// Names of the routines that have a pointer.
pub fn registered_names() -> Vec<&'static str> {
    names_where(|registered| registered)
}

/// Names of the routines that have none.
pub fn missing() -> Vec<&'static str> {
    names_where(|registered| !registered)
}

fn names_where(keep: impl Fn(bool) -> bool) -> Vec<&'static str> {
    ROUTINES
        .iter()
        .zip(&POINTERS)
        .filter(|(_, p)| keep(!p.load(Ordering::Acquire).is_null()))
        .map(|(&name, _)| name)
        .collect()
}

/// Fills the table from a LAPACK shared library, such as `libscipy_openblas.so` from the
/// `scipy-openblas32` wheel (symbols `scipy_dgetrf_`) or a plain LP64 LAPACK (`dgetrf_`).
/// Returns how many routines were found. The library stays loaded for the process lifetime.
pub fn load_library(path: &std::path::Path) -> Result<usize, String> {
    // SAFETY: loading a LAPACK library runs no code of ours; its initializers are its own.
    let library = unsafe { libloading::Library::new(path) }
        .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
    // scipy-openblas32 prefixes every symbol with `scipy_`; a plain LAPACK does not.
    let find = |symbol: String| {
        [format!("scipy_{symbol}"), symbol]
            .into_iter()
            .find_map(|name| {
                // SAFETY: only the address is taken; it is called later with its own signature.
                unsafe { library.get::<*mut c_void>(name.as_bytes()) }
                    .ok()
                    .map(|f| *f)
            })
    };
    let mut found = 0;
    for (name, slot) in ROUTINES.iter().zip(&POINTERS) {
        if let Some(f) = find(format!("{name}_")) {
            slot.store(f, Ordering::Release);
            found += 1;
        }
    }
    if found == 0 {
        return Err(format!(
            "{} exports none of the LAPACK routines ferrax needs",
            path.display()
        ));
    }
    if let Some(f) = find(crate::threads::SET_NUM_THREADS_LOCAL.to_string()) {
        crate::threads::register(f);
    }
    std::mem::forget(library);
    Ok(found)
}
