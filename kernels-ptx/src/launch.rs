//! The kernels' ABI and how the host launches them.
//!
//! Every kernel family has one `#[repr(C)]` argument struct ([`kernel_args!`]), passed by
//! value as the PTX entry's one parameter (`.param .align A .b8 NAME_param_0[S]`, CUDA C's
//! byval convention: the host passes one kernel parameter pointing to the struct and
//! `cuLaunchKernel` copies its bytes), and taken whole by the kernel bodies. One macro,
//! [`kernel_entries!`], emits a family's entry points from one list: on nvptx the
//! `extern "ptx-kernel"` functions, on every target the family's name table ([`Kernels`]),
//! and on the host a table of [`HostEntry`]s that run the same bodies on the grid emulator
//! ([`crate::grid`]). Plans pick an entry from the table and get a [`LaunchConfig`] typed by the
//! family's argument struct, so that a launch can only pass the arguments its entry takes.
//! `tests/ptx_abi.rs` checks the committed PTX against these tables.

use core::marker::PhantomData;

/// One field of a kernel argument struct: its name, byte offset and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub offset: usize,
    pub bytes: usize,
}

/// The layout of an argument struct: the PTX entry's `.param .align {align} .b8 [{size}]`, and
/// the fields its body reads from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgsLayout {
    pub size: usize,
    pub align: usize,
    pub fields: &'static [Field],
}

/// A kernel family's argument struct, declared by [`kernel_args!`]: `#[repr(C)]`, flat (each
/// field a scalar or a pointer, so that the entry reads it with one `ld.param`), passed by
/// value.
pub trait KernelArgs: Copy + 'static {
    /// The fields in declaration order, with their offsets.
    const FIELDS: &'static [Field];
    const LAYOUT: ArgsLayout = ArgsLayout {
        size: core::mem::size_of::<Self>(),
        align: core::mem::align_of::<Self>(),
        fields: Self::FIELDS,
    };
    /// The entry's parameter read field by field from `P`, each with one `ld.param` of its
    /// own size at its own offset.
    #[cfg(target_arch = "nvptx64")]
    unsafe fn load<P: ParamSpace>() -> Self;
}

/// An entry point's parameter in PTX's parameter space: loads of its bytes at `OFFSET`.
///
/// rustc passes a struct to a kernel as an array of its alignment's words (`[7 x i64]` for
/// `GetrfArgs`), so LLVM would read two `u32` fields with one 8-byte load and split it, and
/// the PTX would no longer say where each field is. The entries read their parameter with one
/// `ld.param` per field instead (`kernel_entries!` implements this for each entry, the
/// parameter's name in the instruction), which is what `tests/ptx_abi.rs` checks against the
/// struct.
#[cfg(target_arch = "nvptx64")]
pub trait ParamSpace {
    unsafe fn b32<const OFFSET: usize>() -> u32;
    unsafe fn b64<const OFFSET: usize>() -> u64;
}

/// The types of argument struct fields: 4- and 8-byte integers and pointers.
pub trait ArgField: Copy {
    /// The field at `OFFSET` of the entry's parameter.
    #[cfg(target_arch = "nvptx64")]
    unsafe fn load<P: ParamSpace, const OFFSET: usize>() -> Self;
}

impl ArgField for u32 {
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    unsafe fn load<P: ParamSpace, const OFFSET: usize>() -> Self {
        P::b32::<OFFSET>()
    }
}

impl ArgField for u64 {
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    unsafe fn load<P: ParamSpace, const OFFSET: usize>() -> Self {
        P::b64::<OFFSET>()
    }
}

impl<T> ArgField for *const T {
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    unsafe fn load<P: ParamSpace, const OFFSET: usize>() -> Self {
        core::ptr::with_exposed_provenance(P::b64::<OFFSET>() as usize)
    }
}

impl<T> ArgField for *mut T {
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    unsafe fn load<P: ParamSpace, const OFFSET: usize>() -> Self {
        core::ptr::with_exposed_provenance_mut(P::b64::<OFFSET>() as usize)
    }
}

/// The element type of an argument struct whose element type the host knows only at run time
/// (a [`ScalarKind`], or a word size): `GetrfArgs<AnyElement>` has the layout of every
/// `GetrfArgs<T>`, since its fields are pointers to elements, never elements.
pub enum AnyElement {}

/// Declares a kernel family's argument struct: `#[repr(C)]`, `Copy` whatever its element type,
/// and [`KernelArgs`] with its fields' offsets and sizes.
macro_rules! kernel_args {
    (
        $(#[$meta:meta])*
        pub struct $name:ident $(<$t:ident>)? {
            $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        pub struct $name $(<$t>)? {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $(<$t>)? Clone for $name $(<$t>)? {
            fn clone(&self) -> Self {
                *self
            }
        }

        impl $(<$t>)? Copy for $name $(<$t>)? {}

        impl $(<$t: 'static>)? $crate::launch::KernelArgs for $name $(<$t>)? {
            const FIELDS: &'static [$crate::launch::Field] = &[$($crate::launch::Field {
                name: stringify!($field),
                offset: core::mem::offset_of!(Self, $field),
                bytes: core::mem::size_of::<$ty>(),
            }),*];

            #[cfg(target_arch = "nvptx64")]
            #[inline(always)]
            unsafe fn load<P: $crate::launch::ParamSpace>() -> Self {
                // Offsets from a concrete instance (a const argument may not name `T`); the
                // fields are pointers to `T`, never `T`s, so every instance has one layout.
                type Concrete = $crate::launch::kernel_args!(@concrete $name $($t)?);
                unsafe {
                    Self {$(
                        $field: <$ty as $crate::launch::ArgField>::load::<
                            P,
                            { core::mem::offset_of!(Concrete, $field) },
                        >(),
                    )*}
                }
            }
        }
    };
    (@concrete $name:ident $t:ident) => { $name<u8> };
    (@concrete $name:ident) => { $name };
}
pub(crate) use kernel_args;

/// A 1-D launch of the PTX entry point `kernel`, whose one parameter is an `A`. Made only by a
/// family's [`Kernels`] table, so the entry and its arguments go together.
pub struct LaunchConfig<A> {
    pub kernel: &'static str,
    pub grid: u32,
    pub block: u32,
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
    args: PhantomData<fn(A)>,
}

impl<A> Clone for LaunchConfig<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for LaunchConfig<A> {}

impl<A> PartialEq for LaunchConfig<A> {
    fn eq(&self, other: &Self) -> bool {
        (self.kernel, self.grid, self.block, self.shared_bytes)
            == (other.kernel, other.grid, other.block, other.shared_bytes)
    }
}

impl<A> Eq for LaunchConfig<A> {}

impl<A> core::fmt::Debug for LaunchConfig<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LaunchConfig")
            .field("kernel", &self.kernel)
            .field("grid", &self.grid)
            .field("block", &self.block)
            .field("shared_bytes", &self.shared_bytes)
            .finish()
    }
}

/// An entry point run on the host: its name, the layout of the arguments it reads, and a
/// function reading them from `args` (what `cuLaunchKernel`'s one kernel parameter points to)
/// and running the kernel body as one thread of the emulated grid.
#[cfg(not(target_arch = "nvptx64"))]
#[derive(Clone, Copy, Debug)]
pub struct HostEntry {
    pub name: &'static str,
    pub args: ArgsLayout,
    pub run: unsafe fn(args: *const core::ffi::c_void),
}

/// A kernel family's entry points by key (element type, kernel shape, ...), all taking an `A`;
/// made by [`kernel_entries!`].
pub struct Kernels<K: 'static, A> {
    /// Each entry's key and PTX name.
    pub(crate) entries: &'static [(K, &'static str)],
    /// The same entries, in the same order, runnable on the host.
    #[cfg(not(target_arch = "nvptx64"))]
    pub(crate) host: &'static [HostEntry],
    pub(crate) args: PhantomData<fn(A)>,
}

impl<K: 'static, A> Kernels<K, A> {
    /// Every entry's key and name.
    pub const fn entries(&self) -> &'static [(K, &'static str)] {
        self.entries
    }

    #[cfg(not(target_arch = "nvptx64"))]
    pub const fn host_entries(&self) -> &'static [HostEntry] {
        self.host
    }
}

impl<K: Copy + PartialEq + 'static, A> Kernels<K, A> {
    /// The name of the entry for `key`, if the family has one.
    pub fn name(&self, key: K) -> Option<&'static str> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|&(_, name)| name)
    }

    /// A launch of the entry for `key`, if the family has one.
    pub fn launch(
        &self,
        key: K,
        grid: u32,
        block: u32,
        shared_bytes: u32,
    ) -> Option<LaunchConfig<A>> {
        Some(LaunchConfig {
            kernel: self.name(key)?,
            grid,
            block,
            shared_bytes,
            args: PhantomData,
        })
    }
}

/// Emits a kernel family's entry points and their [`Kernels`] table `$table`.
///
/// The general form lists each entry's key, name and body:
///
/// ```text
/// kernel_entries! {
///     pub const TABLE: Kernels<Key, Args<AnyElement>>;
///     (key) [name parts]: Args<Elem> = body;
///     ...
/// }
/// ```
///
/// naming the entry `ferrax_<name parts joined by _>` and running `body(args: Args<Elem>)`.
/// The product form derives keys, names and bodies from a dtype × variant list:
///
/// ```text
/// kernel_entries! {
///     pub const TABLE: Kernels<(ScalarKind, V), Args<_>>;
///     names [name parts] dtype variant;   // or `variant dtype`: the order in the name
///     variants { v1 => (key, body), ... } // or `variants = small(rows_body, block_body);`
///     f32: v1 v2 ...;                     // the variants each of f32, f64, c64, c128 has
///     ...
/// }
/// ```
///
/// keyed by `(ScalarKind, key)`, each body called with `Args<element type of the dtype>`
/// (write `body::<_, 4>` to let the arguments name the element type). `small(rows, block)`
/// is the small-matrix kernels' variants: `w4`, `w8`, `w16`, `w32` (`rows::<_, W>`, the
/// `W`-lane warp kernels, keyed `Variant::Rows(W)`) and `block` (`block`, `Variant::Block`).
macro_rules! kernel_entries {
    (
        $(#[$meta:meta])*
        $vis:vis const $table:ident: Kernels<$key:ty, $args:ident<_>>;
        names $parts:tt $first:ident $second:ident;
        variants = small($rows:ident, $block:ident);
        $($dtypes:tt)*
    ) => {
        $crate::launch::kernel_entries! {
            $(#[$meta])*
            $vis const $table: Kernels<$key, $args<_>>;
            names $parts $first $second;
            variants {
                w4 => ($crate::small::Variant::Rows(4), $rows::<_, 4>),
                w8 => ($crate::small::Variant::Rows(8), $rows::<_, 8>),
                w16 => ($crate::small::Variant::Rows(16), $rows::<_, 16>),
                w32 => ($crate::small::Variant::Rows(32), $rows::<_, 32>),
                block => ($crate::small::Variant::Block, $block),
            }
            $($dtypes)*
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis const $table:ident: Kernels<$key:ty, $args:ident<_>>;
        names $parts:tt $first:ident $second:ident;
        variants { $($v:ident => ($v_key:expr, $v_body:expr),)* }
        $($d:ident: $($dv:ident)*;)*
    ) => {
        $crate::launch::kernel_entries! {
            @table
            [macro_rules! variant { $((key $v) => { $v_key }; (body $v) => { $v_body };)* }]
            $(#[$meta])*
            $vis const $table: Kernels<$key, $args<$crate::launch::AnyElement>>;
            $($(
                (($crate::launch::kernel_entries!(@kind $d), variant!(key $dv)))
                [$parts ($first $second) $d $dv]:
                $args<$crate::launch::kernel_entries!(@type $d)> = variant!(body $dv);
            )*)*
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis const $table:ident: Kernels<$key:ty, $host_args:ty>;
        $(($e_key:expr) [$($e_part:ident)*]: $e_args:ty = $e_body:expr;)*
    ) => {
        $crate::launch::kernel_entries! {
            @table []
            $(#[$meta])*
            $vis const $table: Kernels<$key, $host_args>;
            $(($e_key) [$($e_part)*]: $e_args = $e_body;)*
        }
    };
    // The common expansion; `$prelude` (items) opens every block that uses keys or bodies.
    (
        @table [$($prelude:tt)*]
        $(#[$meta:meta])*
        $vis:vis const $table:ident: Kernels<$key:ty, $host_args:ty>;
        $(($e_key:expr) [$($e_part:tt)*]: $e_args:ty = $e_body:expr;)*
    ) => {
        $(#[$meta])*
        $vis const $table: $crate::launch::Kernels<$key, $host_args> = {
            $($prelude)*
            $crate::launch::Kernels {
                entries: &[$((
                    $e_key,
                    $crate::launch::kernel_entries!(@name [$($e_part)*]),
                ),)*],
                #[cfg(not(target_arch = "nvptx64"))]
                host: &[$($crate::launch::HostEntry {
                    name: $crate::launch::kernel_entries!(@name [$($e_part)*]),
                    args: <$e_args as $crate::launch::KernelArgs>::LAYOUT,
                    run: {
                        unsafe fn run(args: *const core::ffi::c_void) {
                            ($e_body)(args.cast::<$e_args>().read())
                        }
                        run
                    },
                },)*],
                args: core::marker::PhantomData,
            }
        };

        #[cfg(target_arch = "nvptx64")]
        const _: () = {
            $($prelude)*
            $(const _: () = {
                // The entry's parameter, `<name>_param_0` (see `launch::ParamSpace`).
                enum Param {}

                impl $crate::launch::ParamSpace for Param {
                    #[inline(always)]
                    unsafe fn b32<const OFFSET: usize>() -> u32 {
                        let value: u32;
                        // SAFETY: reads the launch's argument struct (OFFSET is a field's).
                        unsafe {
                            core::arch::asm!(
                                concat!(
                                    "ld.param.b32 {value}, [",
                                    $crate::launch::kernel_entries!(@name [$($e_part)*]),
                                    "_param_0+{offset}];",
                                ),
                                value = out(reg32) value,
                                offset = const OFFSET,
                                options(pure, nomem, nostack),
                            );
                        }
                        value
                    }

                    #[inline(always)]
                    unsafe fn b64<const OFFSET: usize>() -> u64 {
                        let value: u64;
                        // SAFETY: as in `b32`.
                        unsafe {
                            core::arch::asm!(
                                concat!(
                                    "ld.param.b64 {value}, [",
                                    $crate::launch::kernel_entries!(@name [$($e_part)*]),
                                    "_param_0+{offset}];",
                                ),
                                value = out(reg64) value,
                                offset = const OFFSET,
                                options(pure, nomem, nostack),
                            );
                        }
                        value
                    }
                }

                #[export_name = $crate::launch::kernel_entries!(@name [$($e_part)*])]
                unsafe extern "ptx-kernel" fn entry(_args: $e_args) {
                    // SAFETY: the launch's arguments are what the body requires.
                    unsafe {
                        ($e_body)(<$e_args as $crate::launch::KernelArgs>::load::<Param>())
                    }
                }
            };)*
        };
    };
    // `ferrax_` and the name's parts, joined by `_`: the product form's dtype and variant in
    // the order its `names` says.
    (@name [[$($part:ident)*] (dtype variant) $d:ident $v:ident]) => {
        concat!("ferrax" $(, "_", stringify!($part))*, "_", stringify!($d), "_", stringify!($v))
    };
    (@name [[$($part:ident)*] (variant dtype) $d:ident $v:ident]) => {
        concat!("ferrax" $(, "_", stringify!($part))*, "_", stringify!($v), "_", stringify!($d))
    };
    (@name [$($part:ident)*]) => {
        concat!("ferrax" $(, "_", stringify!($part))*)
    };
    (@kind f32) => { $crate::launch::ScalarKind::F32 };
    (@kind f64) => { $crate::launch::ScalarKind::F64 };
    (@kind c64) => { $crate::launch::ScalarKind::C64 };
    (@kind c128) => { $crate::launch::ScalarKind::C128 };
    (@type f32) => { ::core::primitive::f32 };
    (@type f64) => { ::core::primitive::f64 };
    (@type c64) => { ::num_complex::Complex<::core::primitive::f32> };
    (@type c128) => { ::num_complex::Complex<::core::primitive::f64> };
}
pub(crate) use kernel_entries;

/// Every family's host entries (the ABI test checks them against the PTX; the emulated device
/// looks entries up here).
#[cfg(not(target_arch = "nvptx64"))]
pub const HOST_ENTRIES: &[&[HostEntry]] = &[
    crate::small::GETRF.host_entries(),
    crate::small::POTRF.host_entries(),
    crate::small::CHOLESKY.host_entries(),
    crate::small::qr::GEQRF.host_entries(),
    crate::small::qr::ORGQR.host_entries(),
    crate::small::qr::ORMQR.host_entries(),
    crate::small::qr::QR.host_entries(),
    crate::cholesky_update::ENTRIES.host_entries(),
    crate::pivots::ENTRIES.host_entries(),
    crate::tridiagonal::ENTRIES.host_entries(),
    crate::sparse::CSR.host_entries(),
    crate::sparse::COO.host_entries(),
    crate::threefry::THREEFRY.host_entries(),
    crate::threefry::BITS.host_entries(),
    crate::relayout::COPY_MATRICES.host_entries(),
    crate::pointers::BATCH_POINTERS.host_entries(),
    crate::rnn::FORWARD_STEP.host_entries(),
    crate::rnn::BACKWARD_STEP.host_entries(),
    crate::rnn::FINISH.host_entries(),
    crate::rnn::COLUMN_SUMS.host_entries(),
];

/// The host entry named `kernel`.
#[cfg(not(target_arch = "nvptx64"))]
pub fn host_entry(kernel: &str) -> Option<&'static HostEntry> {
    HOST_ENTRIES
        .iter()
        .flat_map(|family| family.iter())
        .find(|entry| entry.name == kernel)
}

/// Runs the entry `kernel` on the emulated grid (`grid` blocks of `block` threads,
/// `shared_bytes` of dynamic shared memory) with `args` as its parameter, as `cuLaunchKernel`
/// would on the GPU. Panics if there is no such entry or it takes other arguments than an `A`.
///
/// # Safety
/// `args` must be what the entry's body requires (its pointers, sizes and launch shape).
#[cfg(not(target_arch = "nvptx64"))]
pub unsafe fn run_on_host<A: KernelArgs>(
    kernel: &str,
    grid: u32,
    block: u32,
    shared_bytes: usize,
    args: A,
) {
    let entry = host_entry(kernel).unwrap_or_else(|| panic!("no entry point {kernel}"));
    assert_eq!(entry.args, A::LAYOUT, "arguments of {kernel}");
    // An address, so that the emulated threads can share it.
    let args = &args as *const A as usize;
    let run = entry.run;
    crate::grid::launch(grid, block, shared_bytes, || {
        // SAFETY: `args` outlives the launch, which the caller vouches for.
        unsafe { run(args as *const core::ffi::c_void) }
    });
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
    pub const fn bytes(self) -> usize {
        match self {
            ScalarKind::F32 => 4,
            ScalarKind::F64 | ScalarKind::C64 => 8,
            ScalarKind::C128 => 16,
        }
    }
}
