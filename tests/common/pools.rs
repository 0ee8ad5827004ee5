//! Pools for the Rust tests of code that splits work over `linalg::parallel::Pool`.
#![allow(dead_code)] // each test crate uses part of it

use ferrax::linalg::parallel::Pool;
use std::ffi::c_void;

/// A pool of `threads` threads, each task on a thread of its own, started at once.
pub struct Spawn(pub usize);

impl Pool for Spawn {
    fn threads(&self) -> usize {
        self.0
    }
    fn schedule(&self, task: unsafe extern "C" fn(*mut c_void), data: *mut c_void) -> bool {
        let data = data as usize;
        // SAFETY: the pool's contract: `task(data)` runs once.
        std::thread::spawn(move || unsafe { task(data as *mut c_void) });
        true
    }
}

/// A pool that claims `threads` threads and never runs a task: the caller does them all.
pub struct Absent(pub usize);

impl Pool for Absent {
    fn threads(&self) -> usize {
        self.0
    }
    fn schedule(&self, _: unsafe extern "C" fn(*mut c_void), _: *mut c_void) -> bool {
        false
    }
}
