//! Device-like buffers for the kernels' host tests: 16-byte aligned storage, optionally
//! offset by whole words to exercise the kernels' unaligned paths.

extern crate std;
use std::vec::Vec;

pub struct Buffer<T> {
    storage: Vec<u128>,
    offset: usize,
    len: usize,
    _word: core::marker::PhantomData<T>,
}

impl<T: Copy> Buffer<T> {
    /// `values`, starting `offset` words after a 16-byte boundary.
    pub fn new(values: &[T], offset: usize) -> Self {
        let bytes = (values.len() + offset) * core::mem::size_of::<T>();
        let mut buffer = Buffer {
            storage: std::vec![0; bytes.div_ceil(16)],
            offset,
            len: values.len(),
            _word: core::marker::PhantomData,
        };
        buffer.as_mut_slice().copy_from_slice(values);
        buffer
    }

    /// The first word's address, as an integer so that launch closures can share it.
    pub fn ptr(&mut self) -> usize {
        // SAFETY: `offset + len` words fit in the storage.
        unsafe { (self.storage.as_mut_ptr() as *mut T).add(self.offset) as usize }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `ptr`.
        unsafe { core::slice::from_raw_parts_mut(self.ptr() as *mut T, self.len) }
    }
}
