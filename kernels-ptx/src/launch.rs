//! How the host launches each kernel: the entry point's name and its 1-D launch shape. Each
//! op's module offers a plan function returning these, so launch shapes are decided next to
//! the kernel code that depends on them and the host crate only executes them.

/// A 1-D launch of the PTX entry point `kernel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub kernel: &'static str,
    pub grid: u32,
    pub block: u32,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

/// The four element types of the linear-algebra kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarKind {
    F32,
    F64,
    C64,
    C128,
}

impl ScalarKind {
    /// Position in the kernels' per-type name tables: f32, f64, c64, c128.
    pub const fn index(self) -> usize {
        match self {
            ScalarKind::F32 => 0,
            ScalarKind::F64 => 1,
            ScalarKind::C64 => 2,
            ScalarKind::C128 => 3,
        }
    }

    pub const fn bytes(self) -> usize {
        match self {
            ScalarKind::F32 => 4,
            ScalarKind::F64 | ScalarKind::C64 => 8,
            ScalarKind::C128 => 16,
        }
    }
}
