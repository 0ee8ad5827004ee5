//! Drop-in replacements for the LAPACK custom calls that PennyLane Catalyst's compiler emits
//! (`lapack_<t><op>_ffi`), so a Catalyst-compiled program can link ferrax instead of Catalyst's
//! vendored copy of jaxlib's old row-major kernels.
//!
//! The calling convention is Catalyst's (frontend/catalyst/utils/libcustom_calls.cpp):
//! `void lapack_dgetrf_ffi(void **data, void **results)`, each entry pointing to an
//! [`EncodedMemref`] `{ int64_t rank; void *data_aligned; int8_t dtype; }`. Catalyst's
//! `HloCustomCallPatterns` lowering puts first the custom call's attributes (from its
//! `backend_config` dictionary, so in alphabetical order) as rank-0 tensors, then for every
//! operand its sizes (`batch, rows, cols` as rank-0 `int32` tensors for a matrix, the length
//! for a vector), then the operands themselves. Matrices are contiguous and ROW-MAJOR, batched
//! one after another; results are separate buffers (the input is copied to the output first).
//!
//! The functions return nothing: an invalid call (a null or mis-ranked entry, a bad flag, a
//! negative size, no LAPACK loaded, ...) or a panic leaves its message in `ferrax_last_error()`,
//! fills the floating-point outputs it could size with NaN and the `info` outputs with -1.
//! LAPACK's own `info` is reported as the kernels report it.

use super::linalg::{self, guard, FERRAX_ROW_MAJOR as ROW};
use crate::linalg::LapackScalar;
use crate::linalg::{eig::Geev, eigh::Evd, schur::Gees, svd::Svd};
use crate::memory;
use ferrax_cpu_fallback::Real;
use num_complex::Complex;
use std::ffi::{c_char, c_void};
use std::mem::size_of;

type Result<T> = std::result::Result<T, String>;

/// What each entry of Catalyst's `data` and `results` arrays points to.
#[repr(C)]
pub struct EncodedMemref {
    pub rank: i64,
    pub data_aligned: *mut c_void,
    pub dtype: i8,
}

/// One of the two argument arrays of a call.
#[derive(Clone, Copy)]
struct Args {
    what: &'static str,
    list: *const *mut c_void,
}

impl Args {
    unsafe fn entry(self, i: usize) -> Result<&'static EncodedMemref> {
        if self.list.is_null() {
            return Err(format!("{} is null", self.what));
        }
        let entry = *self.list.add(i);
        if entry.is_null() {
            return Err(format!("{}[{i}] is null", self.what));
        }
        Ok(&*entry.cast::<EncodedMemref>())
    }

    unsafe fn rank(self, i: usize) -> Result<i64> {
        Ok(self.entry(i)?.rank)
    }

    /// The data of entry `i`, whose rank must be at least `min_rank`.
    unsafe fn ptr<T>(self, i: usize, min_rank: i64) -> Result<*mut T> {
        let entry = self.entry(i)?;
        if entry.rank < min_rank || entry.rank > 64 {
            return Err(format!(
                "{}[{i}]: rank {}, expected >= {min_rank}",
                self.what, entry.rank
            ));
        }
        Ok(entry.data_aligned.cast())
    }

    /// A rank-0 tensor's value.
    unsafe fn scalar<T: Copy>(self, i: usize) -> Result<T> {
        let entry = self.entry(i)?;
        if entry.rank != 0 {
            return Err(format!(
                "{}[{i}]: rank {}, expected a scalar (rank 0)",
                self.what, entry.rank
            ));
        }
        if entry.data_aligned.is_null() {
            return Err(format!("{}[{i}]: data is null", self.what));
        }
        Ok(entry.data_aligned.cast::<T>().read_unaligned())
    }

    unsafe fn dim(self, i: usize) -> Result<i32> {
        let value: i32 = self.scalar(i)?;
        if value < 0 {
            return Err(format!(
                "{}[{i}] = {value}: expected a size >= 0",
                self.what
            ));
        }
        Ok(value)
    }

    unsafe fn flag(self, i: usize) -> Result<c_char> {
        Ok(self.scalar::<u8>(i)? as c_char)
    }
}

/// Outputs to fill when a call fails: (pointer, elements, element kind).
#[derive(Default)]
struct Poison(Vec<(*mut u8, usize, Fill)>);

#[derive(Clone, Copy)]
enum Fill {
    /// NaN in every component of `usize`-byte floats (4 or 8), `n` components per element.
    Float(usize, usize),
    /// -1 as int32.
    Info,
}

impl Poison {
    fn scalar<T: LapackScalar>(&mut self, data: *mut T, len: usize) {
        let parts = size_of::<T>() / size_of::<Real<T>>();
        self.0
            .push((data.cast(), len, Fill::Float(size_of::<Real<T>>(), parts)));
    }

    fn real<T: LapackScalar>(&mut self, data: *mut Real<T>, len: usize) {
        self.0
            .push((data.cast(), len, Fill::Float(size_of::<Real<T>>(), 1)));
    }

    fn complex<T: LapackScalar>(&mut self, data: *mut T::Complex, len: usize) {
        self.0
            .push((data.cast(), len, Fill::Float(size_of::<Real<T>>(), 2)));
    }

    fn info(&mut self, data: *mut i32, len: usize) {
        self.0.push((data.cast(), len, Fill::Info));
    }

    unsafe fn apply(&self) {
        for &(data, len, fill) in &self.0 {
            if data.is_null() {
                continue;
            }
            match fill {
                Fill::Float(4, parts) => {
                    let data = data.cast::<f32>();
                    (0..len * parts).for_each(|i| data.add(i).write_unaligned(f32::NAN));
                }
                Fill::Float(_, parts) => {
                    let data = data.cast::<f64>();
                    (0..len * parts).for_each(|i| data.add(i).write_unaligned(f64::NAN));
                }
                Fill::Info => {
                    let data = data.cast::<i32>();
                    (0..len).for_each(|i| data.add(i).write_unaligned(-1));
                }
            }
        }
    }
}

/// `a * b * c` elements, refusing sizes that overflow.
fn count(dims: &[i32]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
        // Memory a caller can have for the widest element (16 bytes): Rust's slices stop at
        // `isize::MAX` bytes.
        .filter(|&n| {
            n.checked_mul(16)
                .is_some_and(|bytes| isize::try_from(bytes).is_ok())
        })
        .ok_or_else(|| format!("sizes {dims:?} overflow"))
}

/// Catalyst's kernels copy the input into the output buffer, then factor in place.
unsafe fn copy_in<T>(name: &str, from: *const T, to: *mut T, len: usize) -> Result<()> {
    if len == 0 || from == to.cast_const() {
        return Ok(());
    }
    if from.is_null() || to.is_null() {
        return Err(format!("{name}: null data for {len} elements"));
    }
    std::ptr::copy(from, to, len);
    Ok(())
}

fn lda(n: i32) -> i32 {
    n.max(1)
}

/// Runs `body`, the outputs it names poisoned and the message saved if it fails.
fn run(name: &str, body: impl FnOnce(&mut Poison) -> Result<()>) {
    let mut poison = Poison::default();
    let rc = guard(|| body(&mut poison).map_err(|message| format!("{name}: {message}")));
    if rc != 0 {
        // SAFETY: every poisoned pointer came from the caller with the element count that the
        // call's own sizes give, as Catalyst's kernels would have written.
        unsafe { poison.apply() };
    }
}

/// getrf: data `[b, m, n, a]`, results `[a_out, ipiv, info]`.
unsafe fn getrf<T: LapackScalar>(data: Args, out: Args, poison: &mut Poison) -> Result<()> {
    let (b, m, n) = (data.dim(0)?, data.dim(1)?, data.dim(2)?);
    let (a_out, ipiv, info) = (out.ptr::<T>(0, 2)?, out.ptr(1, 1)?, out.ptr(2, 1)?);
    let len = count(&[b, m, n])?;
    poison.scalar(a_out, len);
    poison.info(info, b as usize);
    let a: *mut T = data.ptr(3, 2)?;
    copy_in("a", a, a_out, len)?;
    linalg::getrf::<T>(ROW, b.into(), m, n, a_out, lda(n), ipiv, info)
}

/// geqrf: data `[b, m, n, a]`, results `[a_out, tau]`.
unsafe fn geqrf<T: LapackScalar>(data: Args, out: Args, poison: &mut Poison) -> Result<()> {
    let (b, m, n) = (data.dim(0)?, data.dim(1)?, data.dim(2)?);
    let (a_out, tau) = (out.ptr::<T>(0, 2)?, out.ptr::<T>(1, 1)?);
    let len = count(&[b, m, n])?;
    poison.scalar(a_out, len);
    poison.scalar(tau, count(&[b, m.min(n)])?);
    let a: *mut T = data.ptr(3, 2)?;
    copy_in("a", a, a_out, len)?;
    linalg::geqrf::<T>(ROW, b.into(), m, n, a_out, lda(n), tau)
}

/// orgqr/ungqr: data `[b, m, n, k, a, tau]` when tau is a vector (one matrix), or
/// `[b, m, n, tau_batch, tau_rows, k, a, tau]` when tau is batched; results `[a_out]`.
unsafe fn orgqr<T: LapackScalar>(data: Args, out: Args, poison: &mut Poison) -> Result<()> {
    let (b, m, n) = (data.dim(0)?, data.dim(1)?, data.dim(2)?);
    let batched_tau = data.rank(4)? == 0;
    let (k, first) = if batched_tau {
        let (tb, tr) = (data.dim(3)?, data.dim(4)?);
        if i64::from(tb) * i64::from(tr) != i64::from(b) {
            return Err(format!("tau's batch {tb} x {tr} != a's batch {b}"));
        }
        (data.dim(5)?, 6)
    } else {
        (data.dim(3)?, 4)
    };
    let a_out = out.ptr::<T>(0, 2)?;
    let len = count(&[b, m, n])?;
    poison.scalar(a_out, len);
    let a: *mut T = data.ptr(first, 2)?;
    let tau: *mut T = data.ptr(first + 1, 1)?;
    copy_in("a", a, a_out, len)?;
    linalg::orgqr::<T>(ROW, b.into(), m, n, k, a_out, lda(n), tau)
}

/// potrf: data `[uplo, b, n, n, a]`, results `[a_out, info]`.
unsafe fn potrf<T: LapackScalar>(data: Args, out: Args, poison: &mut Poison) -> Result<()> {
    let uplo = data.flag(0)?;
    let (b, rows, n) = (data.dim(1)?, data.dim(2)?, data.dim(3)?);
    let (a_out, info) = (out.ptr::<T>(0, 2)?, out.ptr(1, 1)?);
    let len = count(&[b, rows, n])?;
    poison.scalar(a_out, len);
    poison.info(info, b as usize);
    if rows != n {
        return Err(format!("a is {rows} x {n}: expected a square matrix"));
    }
    let a: *mut T = data.ptr(4, 2)?;
    copy_in("a", a, a_out, len)?;
    linalg::potrf::<T>(ROW, b.into(), uplo, n, a_out, lda(n), info)
}

/// trsm: data `[diag, side, trans_x, uplo, a_b, a_rows, a_cols, b, m, n, a, b]`, results `[x]`.
/// Flags are read as Catalyst's kernels read them: side 'L' or right, uplo 'L' or upper,
/// trans 'T', 'C' or none, diag 'U' or non-unit.
unsafe fn trsm<T: LapackScalar>(data: Args, out: Args, poison: &mut Poison) -> Result<()> {
    let pick = |c: c_char, yes: u8, no: u8| (if c as u8 == yes { yes } else { no }) as c_char;
    let diag = pick(data.flag(0)?, b'U', b'N');
    let side = pick(data.flag(1)?, b'L', b'R');
    let trans = match data.flag(2)? as u8 {
        t @ (b'T' | b'C') => t as c_char,
        _ => b'N' as c_char,
    };
    let uplo = pick(data.flag(3)?, b'L', b'U');
    let (a_batch, a_rows, a_cols) = (data.dim(4)?, data.dim(5)?, data.dim(6)?);
    let (batch, m, n) = (data.dim(7)?, data.dim(8)?, data.dim(9)?);
    let x = out.ptr::<T>(0, 2)?;
    let len = count(&[batch, m, n])?;
    poison.scalar(x, len);
    let k = if side as u8 == b'L' { m } else { n };
    if (a_batch, a_rows, a_cols) != (batch, k, k) {
        return Err(format!(
            "a is {a_batch} x {a_rows} x {a_cols}: expected {batch} x {k} x {k}"
        ));
    }
    let a: *mut T = data.ptr(10, 2)?;
    let b: *mut T = data.ptr(11, 2)?;
    copy_in("b", b, x, len)?;
    linalg::trsm::<T>(
        ROW,
        batch.into(),
        side,
        uplo,
        trans,
        diag,
        m,
        n,
        a,
        lda(k),
        x,
        lda(n),
    )
}

/// gesdd: data `[jobz, b, m, n, a]`, results `[a_out, s, u, vt, info]`; u is m x m (jobz 'A')
/// or m x min(m, n) ('S'), vt n x n or min(m, n) x n, both contiguous per matrix.
unsafe fn gesdd<T: Svd>(data: Args, out: Args, poison: &mut Poison) -> Result<()> {
    let jobz = data.flag(0)?;
    let (b, m, n) = (data.dim(1)?, data.dim(2)?, data.dim(3)?);
    let a_out = out.ptr::<T>(0, 2)?;
    let s = out.ptr::<Real<T>>(1, 1)?;
    let (u, vt) = (out.ptr::<T>(2, 0)?, out.ptr::<T>(3, 0)?);
    let info = out.ptr(4, 1)?;
    let k = m.min(n);
    let len = count(&[b, m, n])?;
    poison.real::<T>(s, count(&[b, k])?);
    poison.info(info, b as usize);
    let (u_cols, vt_rows) = match jobz as u8 {
        b'A' => (m, n),
        b'S' => (k, k),
        _ => (1, 1),
    };
    if jobz as u8 == b'A' || jobz as u8 == b'S' {
        poison.scalar(u, count(&[b, m, u_cols])?);
        poison.scalar(vt, count(&[b, vt_rows, n])?);
    }
    let a: *mut T = data.ptr(4, 2)?;
    copy_in("a", a, a_out, len)?;
    linalg::gesdd::<T>(
        ROW,
        b.into(),
        jobz,
        m,
        n,
        a_out,
        lda(n),
        s,
        u,
        lda(u_cols),
        vt,
        lda(n),
        info,
    )
}

/// syevd/heevd: data `[jobz, uplo, b, n, n, a]`, results `[a_out, w, info]`.
unsafe fn syevd<T: Evd>(data: Args, out: Args, poison: &mut Poison) -> Result<()> {
    let (jobz, uplo) = (data.flag(0)?, data.flag(1)?);
    let (b, rows, n) = (data.dim(2)?, data.dim(3)?, data.dim(4)?);
    let (a_out, w, info) = (out.ptr::<T>(0, 2)?, out.ptr(1, 1)?, out.ptr(2, 1)?);
    let len = count(&[b, rows, n])?;
    poison.scalar(a_out, len);
    poison.real::<T>(w, count(&[b, n])?);
    poison.info(info, b as usize);
    if rows != n {
        return Err(format!("a is {rows} x {n}: expected a square matrix"));
    }
    let a: *mut T = data.ptr(5, 2)?;
    copy_in("a", a, a_out, len)?;
    linalg::syevd::<T>(ROW, b.into(), jobz, uplo, n, a_out, lda(n), w, info)
}

/// Eigenvalue outputs: `[wr, wi]` (real dtypes) or `[w]` (complex), from complex `w`.
struct Eigenvalues<T: LapackScalar> {
    complex: *mut T::Complex,
    parts: Option<(*mut Real<T>, *mut Real<T>)>,
    scratch: Vec<T::Complex>,
}

impl<T: LapackScalar> Eigenvalues<T> {
    /// Reads the outputs from results entry `i` on; returns them and the next entry.
    unsafe fn new(out: Args, i: usize, len: usize, poison: &mut Poison) -> Result<(Self, usize)> {
        if T::DTYPE.is_complex() {
            let w = out.ptr::<T::Complex>(i, 1)?;
            poison.scalar::<T>(w.cast(), len);
            let eigenvalues = Eigenvalues {
                complex: w,
                parts: None,
                scratch: Vec::new(),
            };
            return Ok((eigenvalues, i + 1));
        }
        let (wr, wi) = (out.ptr::<Real<T>>(i, 1)?, out.ptr::<Real<T>>(i + 1, 1)?);
        poison.real::<T>(wr, len);
        poison.real::<T>(wi, len);
        let mut scratch = memory::vec_of(len, T::Complex::default()).map_err(|e| e.message)?;
        let eigenvalues = Eigenvalues {
            complex: scratch.as_mut_ptr(),
            parts: Some((wr, wi)),
            scratch,
        };
        Ok((eigenvalues, i + 2))
    }

    unsafe fn finish(&self) -> Result<()> {
        if let Some((wr, wi)) = self.parts {
            if self.scratch.is_empty() {
                return Ok(());
            }
            if wr.is_null() || wi.is_null() {
                return Err("wr or wi is null".into());
            }
            let pairs = self.scratch.as_ptr().cast::<Real<T>>();
            for j in 0..self.scratch.len() {
                *wr.add(j) = *pairs.add(2 * j);
                *wi.add(j) = *pairs.add(2 * j + 1);
            }
        }
        Ok(())
    }
}

/// geev: data `[jobvl, jobvr, b, n, n, a]`; results `[wr, wi, vl, vr, info]` (real dtypes,
/// vl and vr complex) or `[w, vl, vr, info]`. Eigenvectors are the columns of vl and vr.
unsafe fn geev<T: Geev>(data: Args, out: Args, poison: &mut Poison) -> Result<()> {
    let (jobvl, jobvr) = (data.flag(0)?, data.flag(1)?);
    let (b, rows, n) = (data.dim(2)?, data.dim(3)?, data.dim(4)?);
    let (w, next) = Eigenvalues::<T>::new(out, 0, count(&[b, n])?, poison)?;
    let vl = out.ptr::<T::Complex>(next, 2)?;
    let vr = out.ptr::<T::Complex>(next + 1, 2)?;
    let info = out.ptr(next + 2, 1)?;
    let len = count(&[b, rows, n])?;
    if jobvl as u8 == b'V' {
        poison.complex::<T>(vl, len);
    }
    if jobvr as u8 == b'V' {
        poison.complex::<T>(vr, len);
    }
    poison.info(info, b as usize);
    if rows != n {
        return Err(format!("a is {rows} x {n}: expected a square matrix"));
    }
    let mut work = memory::vec_of(len, T::default()).map_err(|e| e.message)?;
    let a: *mut T = data.ptr(5, 2)?;
    copy_in("a", a, work.as_mut_ptr(), len)?;
    linalg::geev::<T>(
        ROW,
        b.into(),
        jobvl,
        jobvr,
        n,
        work.as_mut_ptr(),
        lda(n),
        w.complex,
        vl,
        lda(n),
        vr,
        lda(n),
        info,
    )?;
    w.finish()
}

/// gees: data `[jobvs, sort, b, n, n, a]`; results `[a_out, vs, wr, wi, sdim, info]` (real
/// dtypes) or `[a_out, vs, w, sdim, info]`. Only sort 'N' (Catalyst passes no select function).
unsafe fn gees<T: Gees>(data: Args, out: Args, poison: &mut Poison) -> Result<()> {
    let (jobvs, sort) = (data.flag(0)?, data.flag(1)?);
    let (b, rows, n) = (data.dim(2)?, data.dim(3)?, data.dim(4)?);
    let (a_out, vs) = (out.ptr::<T>(0, 2)?, out.ptr::<T>(1, 2)?);
    let len = count(&[b, rows, n])?;
    poison.scalar(a_out, len);
    let (w, next) = Eigenvalues::<T>::new(out, 2, count(&[b, n])?, poison)?;
    let (sdim, info) = (out.ptr::<i32>(next, 1)?, out.ptr(next + 1, 1)?);
    poison.info(info, b as usize);
    if rows != n {
        return Err(format!("a is {rows} x {n}: expected a square matrix"));
    }
    if sort as u8 != b'N' {
        return Err(format!("sort = {}: only 'N' is supported", sort as u8));
    }
    let a: *mut T = data.ptr(5, 2)?;
    copy_in("a", a, a_out, len)?;
    linalg::gees::<T>(
        ROW,
        b.into(),
        jobvs,
        n,
        a_out,
        lda(n),
        w.complex,
        vs,
        lda(n),
        info,
    )?;
    w.finish()?;
    if b > 0 {
        if sdim.is_null() {
            return Err("sdim is null".into());
        }
        (0..b as usize).for_each(|i| *sdim.add(i) = 0);
    }
    Ok(())
}

/// gehrd: data `[high, low, b, n, n, a]` (attributes `high` = ihi and `low` = ilo, 1-based as
/// LAPACK's), results `[a_out, tau, info]`.
unsafe fn gehrd<T: LapackScalar>(data: Args, out: Args, poison: &mut Poison) -> Result<()> {
    let (ihi, ilo): (i32, i32) = (data.scalar(0)?, data.scalar(1)?);
    let (b, rows, n) = (data.dim(2)?, data.dim(3)?, data.dim(4)?);
    let (a_out, tau, info) = (out.ptr::<T>(0, 2)?, out.ptr::<T>(1, 1)?, out.ptr(2, 1)?);
    let len = count(&[b, rows, n])?;
    poison.scalar(a_out, len);
    poison.scalar(tau, count(&[b, (n - 1).max(0)])?);
    poison.info(info, b as usize);
    if rows != n {
        return Err(format!("a is {rows} x {n}: expected a square matrix"));
    }
    let a: *mut T = data.ptr(5, 2)?;
    copy_in("a", a, a_out, len)?;
    linalg::gehrd::<T>(ROW, b.into(), n, ilo, ihi, a_out, lda(n), tau, info)
}

/// sytrd/hetrd: data `[uplo, b, n, n, a]`, results `[a_out, d, e, tau, info]`.
unsafe fn sytrd<T: LapackScalar>(data: Args, out: Args, poison: &mut Poison) -> Result<()> {
    let uplo = data.flag(0)?;
    let (b, rows, n) = (data.dim(1)?, data.dim(2)?, data.dim(3)?);
    let a_out = out.ptr::<T>(0, 2)?;
    let (d, e) = (out.ptr::<Real<T>>(1, 1)?, out.ptr::<Real<T>>(2, 1)?);
    let (tau, info) = (out.ptr::<T>(3, 1)?, out.ptr(4, 1)?);
    let len = count(&[b, rows, n])?;
    let off = count(&[b, (n - 1).max(0)])?;
    poison.scalar(a_out, len);
    poison.real::<T>(d, count(&[b, n])?);
    poison.real::<T>(e, off);
    poison.scalar(tau, off);
    poison.info(info, b as usize);
    if rows != n {
        return Err(format!("a is {rows} x {n}: expected a square matrix"));
    }
    let a: *mut T = data.ptr(4, 2)?;
    copy_in("a", a, a_out, len)?;
    linalg::sytrd::<T>(ROW, b.into(), uplo, n, a_out, lda(n), d, e, tau, info)
}

macro_rules! catalyst_functions {
    ($($op:ident => [$s:ident, $d:ident, $c:ident, $z:ident];)*) => {
        $(
            catalyst_functions!(@one $op, $s, f32);
            catalyst_functions!(@one $op, $d, f64);
            catalyst_functions!(@one $op, $c, Complex<f32>);
            catalyst_functions!(@one $op, $z, Complex<f64>);
        )*
        /// Every exported Catalyst-compatible symbol, each declared in ferrax.h as
        /// `void <name>(void **data, void **results);`.
        pub static CATALYST_FUNCTIONS: &[&str] = &[
            $(stringify!($s), stringify!($d), stringify!($c), stringify!($z),)*
        ];
    };
    (@one $op:ident, $name:ident, $t:ty) => {
        /// # Safety
        /// `data` and `results` as Catalyst's compiler passes them (see the module docs).
        #[no_mangle]
        pub unsafe extern "C" fn $name(data: *const *mut c_void, results: *const *mut c_void) {
            let (data, results) = (
                Args { what: "data", list: data },
                Args { what: "results", list: results },
            );
            run(stringify!($name), |poison| unsafe { $op::<$t>(data, results, poison) });
        }
    };
}

catalyst_functions! {
    trsm => [lapack_strsm_ffi, lapack_dtrsm_ffi, lapack_ctrsm_ffi, lapack_ztrsm_ffi];
    getrf => [lapack_sgetrf_ffi, lapack_dgetrf_ffi, lapack_cgetrf_ffi, lapack_zgetrf_ffi];
    geqrf => [lapack_sgeqrf_ffi, lapack_dgeqrf_ffi, lapack_cgeqrf_ffi, lapack_zgeqrf_ffi];
    orgqr => [lapack_sorgqr_ffi, lapack_dorgqr_ffi, lapack_cungqr_ffi, lapack_zungqr_ffi];
    potrf => [lapack_spotrf_ffi, lapack_dpotrf_ffi, lapack_cpotrf_ffi, lapack_zpotrf_ffi];
    gesdd => [lapack_sgesdd_ffi, lapack_dgesdd_ffi, lapack_cgesdd_ffi, lapack_zgesdd_ffi];
    syevd => [lapack_ssyevd_ffi, lapack_dsyevd_ffi, lapack_cheevd_ffi, lapack_zheevd_ffi];
    geev => [lapack_sgeev_ffi, lapack_dgeev_ffi, lapack_cgeev_ffi, lapack_zgeev_ffi];
    gees => [lapack_sgees_ffi, lapack_dgees_ffi, lapack_cgees_ffi, lapack_zgees_ffi];
    gehrd => [lapack_sgehrd_ffi, lapack_dgehrd_ffi, lapack_cgehrd_ffi, lapack_zgehrd_ffi];
    sytrd => [lapack_ssytrd_ffi, lapack_dsytrd_ffi, lapack_chetrd_ffi, lapack_zhetrd_ffi];
}
