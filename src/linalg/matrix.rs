//! Batches of matrices where their owner keeps them: XLA's arrays (packed, row- or
//! column-major) and the C ABI's (a leading dimension, either layout), as one strided view, so
//! that a core reads its operands where they are and stages a matrix only where its algorithm
//! needs another layout.

use super::transpose::{transpose, Transposition};
use crate::error::Result;
use crate::memory;
pub use ferrax_kernels::small::simd::Layout;

/// `count` matrices of `rows × cols`: element `(b, i, j)` at
/// `b·batch_stride + i·row_stride + j·col_stride` elements from the start (as faer's `MatMut`,
/// plus a batch stride). A view is a plain pointer: the functions that read or write through
/// it are `unsafe`, their callers vouch for the memory and for who else touches it.
#[derive(Clone, Copy, Debug)]
pub struct Batch<T> {
    ptr: *mut T,
    count: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
    batch_stride: usize,
}

// A view is shared by the pool tasks of one call, each touching its own matrices.
unsafe impl<T: Send> Send for Batch<T> {}
unsafe impl<T: Send> Sync for Batch<T> {}

impl<T: Copy> Batch<T> {
    /// Contiguous matrices, one after another, each packed in `layout`.
    ///
    /// # Safety
    /// `ptr` spans `count·rows·cols` elements, for as long as the view is used.
    pub unsafe fn packed(ptr: *mut T, [count, rows, cols]: [usize; 3], layout: Layout) -> Self {
        let ld = match layout {
            Layout::ColumnMajor => rows,
            Layout::RowMajor => cols,
        };
        Self::with_ld(ptr, [count, rows, cols], layout, ld)
    }

    /// Matrices in `layout` with leading dimension `ld` (at least the minor dimension), one
    /// after another (`ld × cols` elements apart column-major, `ld × rows` row-major): LAPACK's
    /// and the C ABI's batches.
    ///
    /// # Safety
    /// `ptr` spans every matrix so laid out, for as long as the view is used.
    pub unsafe fn with_ld(
        ptr: *mut T,
        [count, rows, cols]: [usize; 3],
        layout: Layout,
        ld: usize,
    ) -> Self {
        let (row_stride, col_stride, major) = match layout {
            Layout::ColumnMajor => (1, ld, cols),
            Layout::RowMajor => (ld, 1, rows),
        };
        Batch {
            ptr,
            count,
            rows,
            cols,
            row_stride,
            col_stride,
            batch_stride: ld * major,
        }
    }

    pub fn count(&self) -> usize {
        self.count
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// The first `cols` columns of each matrix, as a view of their own.
    pub fn leading_columns(&self, cols: usize) -> Self {
        Batch {
            cols: cols.min(self.cols),
            ..*self
        }
    }

    /// The leading dimension with which LAPACK can take the matrices where they are (column
    /// after column, each `ld ≥ max(1, rows)` elements apart), if it can.
    pub fn lapack_ld(&self) -> Option<usize> {
        // A single row has no row stride to speak of, a single column no column stride.
        if self.row_stride != 1 && self.rows > 1 {
            return None;
        }
        let ld = if self.cols <= 1 {
            self.rows.max(1)
        } else {
            self.col_stride
        };
        (ld >= self.rows.max(1)).then_some(ld)
    }

    /// The layout in which the batch is one contiguous array of packed matrices, if it is.
    pub fn packed_layout(&self) -> Option<Layout> {
        let (rows, cols) = (self.rows, self.cols);
        if self.batch_stride != rows * cols && self.count > 1 {
            return None;
        }
        let column_major =
            (self.row_stride == 1 || rows <= 1) && (self.col_stride == rows || cols <= 1);
        let row_major =
            (self.col_stride == 1 || cols <= 1) && (self.row_stride == cols || rows <= 1);
        if column_major {
            Some(Layout::ColumnMajor)
        } else if row_major {
            Some(Layout::RowMajor)
        } else {
            None
        }
    }

    /// Whether the matrices have no elements: then their pointer may be null (the C ABI allows
    /// it), so no slice is made from it.
    fn matrices_are_empty(&self) -> bool {
        self.rows == 0 || self.cols == 0
    }

    /// The distances between a matrix's rows and between its columns, in elements.
    pub fn strides(&self) -> [usize; 2] {
        [self.row_stride, self.col_stride]
    }

    /// The first element of matrix `b`.
    ///
    /// # Safety
    /// `b < count`.
    pub unsafe fn matrix(&self, b: usize) -> *mut T {
        self.ptr.add(b * self.batch_stride)
    }

    /// Matrix `b`'s elements from the first to the last as a slice (with the gaps of a
    /// leading dimension above the minimum).
    ///
    /// # Safety
    /// `b < count`; nothing else reads or writes the span while the slice lives.
    #[allow(clippy::mut_from_ref)] // the memory is the caller's, as the view's contract says
    pub unsafe fn matrix_span<'s>(&self, b: usize) -> &'s mut [T] {
        if self.matrices_are_empty() {
            return &mut [];
        }
        let span = (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride + 1;
        std::slice::from_raw_parts_mut(self.matrix(b), span)
    }

    /// Matrices `first..first + count` as one slice, if the batch is packed.
    ///
    /// # Safety
    /// As [`Batch::matrix_span`], for the matrices.
    #[allow(clippy::mut_from_ref)] // as `matrix_span`
    pub unsafe fn packed_group<'s>(&self, first: usize, count: usize) -> Option<&'s mut [T]> {
        let len = self.rows * self.cols;
        self.packed_layout().map(|_| match count * len {
            0 => &mut [][..],
            all => std::slice::from_raw_parts_mut(self.ptr.add(first * len), all),
        })
    }

    /// Copies matrix `b` into `dst` column-major (leading dimension `rows`).
    ///
    /// # Safety
    /// `b < count`; nothing writes the matrix meanwhile.
    pub unsafe fn gather(&self, b: usize, dst: &mut [T]) {
        if self.matrices_are_empty() {
            return;
        }
        let (rows, cols) = (self.rows, self.cols);
        let src = self.matrix(b);
        if self.row_stride == 1 {
            for j in 0..cols {
                let column = std::slice::from_raw_parts(src.add(j * self.col_stride), rows);
                dst[j * rows..(j + 1) * rows].copy_from_slice(column);
            }
        } else if self.col_stride == 1 {
            assert!(dst.len() >= rows * cols);
            transpose(Transposition {
                src,
                src_ld: self.row_stride,
                dst: dst.as_mut_ptr(),
                dst_ld: rows,
                rows,
                cols,
            });
        } else {
            // Tiles keep the strided side in cache.
            for_tiles(rows, cols, |i, j| {
                dst[j * rows + i] = *src.add(i * self.row_stride + j * self.col_stride)
            });
        }
    }

    /// Writes the column-major `src` (leading dimension `rows`) to matrix `b`.
    ///
    /// # Safety
    /// `b < count`; nothing else reads or writes the matrix meanwhile.
    pub unsafe fn scatter(&self, b: usize, src: &[T]) {
        if self.matrices_are_empty() {
            return;
        }
        let (rows, cols) = (self.rows, self.cols);
        let dst = self.matrix(b);
        if self.row_stride == 1 {
            for j in 0..cols {
                let column = std::slice::from_raw_parts_mut(dst.add(j * self.col_stride), rows);
                column.copy_from_slice(&src[j * rows..(j + 1) * rows]);
            }
        } else if self.col_stride == 1 {
            // `src` read as the row-major cols × rows matrix it also is.
            assert!(src.len() >= rows * cols);
            transpose(Transposition {
                src: src.as_ptr(),
                src_ld: rows,
                dst,
                dst_ld: self.row_stride,
                rows: cols,
                cols: rows,
            });
        } else {
            for_tiles(rows, cols, |i, j| {
                *dst.add(i * self.row_stride + j * self.col_stride) = src[j * rows + i]
            });
        }
    }

    /// Matrix `b` as a column-major matrix and its leading dimension, for reading: where it is
    /// if LAPACK can take it there, else copied into `scratch` (grown as needed; an error if it
    /// cannot be).
    ///
    /// # Safety
    /// `b < count`; nothing writes the matrix while the slice lives.
    pub unsafe fn column_major<'s>(
        &self,
        b: usize,
        scratch: &'s mut Vec<T>,
    ) -> Result<(&'s [T], usize)> {
        if let Some(ld) = self.lapack_ld() {
            return Ok((self.matrix_span(b), ld));
        }
        let staged = stage(scratch, self.rows * self.cols, self.ptr)?;
        self.gather(b, staged);
        Ok((staged, self.rows.max(1)))
    }

    /// Copies matrix `b` of `self` to matrix `b` of `to` (same shape, any strides); nothing
    /// to do when they are the same memory.
    ///
    /// # Safety
    /// `b` is in both; the two matrices are the same memory or do not overlap, and nothing
    /// else touches them meanwhile.
    pub unsafe fn copy_to(&self, b: usize, to: &Batch<T>) {
        let (src, dst) = (self.matrix(b), to.matrix(b));
        if std::ptr::eq(src, dst) && self.same_layout(to) {
            return;
        }
        if self.same_layout(to) && self.packed_layout().is_some() {
            std::ptr::copy_nonoverlapping(src, dst, self.rows * self.cols);
            return;
        }
        for j in 0..self.cols {
            for i in 0..self.rows {
                *dst.add(i * to.row_stride + j * to.col_stride) =
                    *src.add(i * self.row_stride + j * self.col_stride);
            }
        }
    }

    /// Runs `f(m, ld)` on matrix `b` as a column-major matrix with leading dimension `ld` for
    /// a result that `f` writes (LAPACK's `U`, eigenvectors, ...): in place where LAPACK can
    /// take it, else in `scratch` (grown as needed), written to the matrix afterwards. The
    /// matrix starts as `fill` either way, so whatever `f` leaves unwritten is `fill`.
    ///
    /// # Safety
    /// `b < count`; nothing else reads or writes the matrix meanwhile.
    pub unsafe fn column_major_result<R>(
        &self,
        b: usize,
        fill: T,
        scratch: &mut Vec<T>,
        f: impl FnOnce(&mut [T], usize) -> R,
    ) -> Result<R> {
        let (rows, cols) = (self.rows, self.cols);
        if let Some(ld) = self.lapack_ld() {
            let span = self.matrix_span(b);
            if rows > 0 {
                (0..cols).for_each(|j| span[j * ld..j * ld + rows].fill(fill));
            }
            return Ok(f(span, ld));
        }
        memory::grow(scratch, rows * cols, fill)?;
        let staged = &mut scratch[..rows * cols];
        staged.fill(fill);
        let result = f(staged, rows.max(1));
        self.scatter(b, staged);
        Ok(result)
    }

    fn same_layout(&self, other: &Batch<T>) -> bool {
        (self.row_stride, self.col_stride) == (other.row_stride, other.col_stride)
    }
}

/// `visit(i, j)` over a `rows × cols` matrix in 16 × 16 tiles.
fn for_tiles(rows: usize, cols: usize, mut visit: impl FnMut(usize, usize)) {
    const TILE: usize = 16;
    for i0 in (0..rows).step_by(TILE) {
        for j0 in (0..cols).step_by(TILE) {
            for i in i0..(i0 + TILE).min(rows) {
                for j in j0..(j0 + TILE).min(cols) {
                    visit(i, j);
                }
            }
        }
    }
}

/// An operand and the result that replaces it (jaxlib's in-place contracts): one memory where
/// XLA aliased them and in the C ABI, else two views of one shape. Each matrix is copied to
/// the result right before it is worked on (in the task that works on it, while in cache).
#[derive(Clone, Copy, Debug)]
pub struct InOut<T> {
    pub input: Batch<T>,
    pub output: Batch<T>,
}

impl<T: Copy> InOut<T> {
    /// The same memory read and written.
    pub fn in_place(batch: Batch<T>) -> Self {
        InOut {
            input: batch,
            output: batch,
        }
    }

    /// Whether matrix `b` of the input is the result's own memory (XLA aliased them, or the
    /// C ABI's in-place call).
    ///
    /// # Safety
    /// `b` is in both views.
    pub unsafe fn aliased(&self, b: usize) -> bool {
        std::ptr::eq(self.input.matrix(b), self.output.matrix(b))
    }

    /// Copies every matrix of the input to the result: nothing to do (and no batch to walk)
    /// where the matrices are empty or the two are one memory.
    ///
    /// # Safety
    /// Nothing else touches either meanwhile.
    pub unsafe fn copy_all(&self) {
        let (input, output) = (&self.input, &self.output);
        if input.rows * input.cols == 0 || (input.ptr == output.ptr && input.same_layout(output)) {
            return;
        }
        (0..input.count).for_each(|b| input.copy_to(b, output));
    }

    /// Runs `f(a, ld)` on matrix `b` as a column-major matrix with leading dimension `ld`,
    /// whose final values become the result's: in the result itself where LAPACK can take it
    /// there (the input copied in first), else in `scratch` (grown as needed), read from the
    /// input and written back to the result.
    ///
    /// # Safety
    /// `b` is in both views; no other task touches matrix `b` of either.
    pub unsafe fn column_major<R>(
        &self,
        b: usize,
        scratch: &mut Vec<T>,
        f: impl FnOnce(&mut [T], usize) -> R,
    ) -> Result<R> {
        if let Some(ld) = self.output.lapack_ld() {
            self.input.copy_to(b, &self.output);
            return Ok(f(self.output.matrix_span(b), ld));
        }
        self.staged(b, scratch, |a| f(a, self.input.rows.max(1)))
    }

    /// [`InOut::column_major`] for routines that take no leading dimension: `f(a)` on matrix
    /// `b` packed column-major (leading dimension `rows`), in the result where it is so laid
    /// out, else staged in `scratch`.
    ///
    /// # Safety
    /// As [`InOut::column_major`].
    pub unsafe fn packed_column_major<R>(
        &self,
        b: usize,
        scratch: &mut Vec<T>,
        f: impl FnOnce(&mut [T]) -> R,
    ) -> Result<R> {
        if self.output.lapack_ld() == Some(self.input.rows.max(1)) {
            return self.column_major(b, scratch, |a, _| f(a));
        }
        self.staged(b, scratch, f)
    }

    /// `f` on matrix `b` gathered column-major into `scratch`, then scattered to the result.
    unsafe fn staged<R>(
        &self,
        b: usize,
        scratch: &mut Vec<T>,
        f: impl FnOnce(&mut [T]) -> R,
    ) -> Result<R> {
        let (rows, cols) = (self.input.rows, self.input.cols);
        let staged = stage(scratch, rows * cols, self.input.ptr)?;
        // Where the two are one memory, this reads the result's own elements before writing.
        self.input.gather(b, staged);
        let result = f(staged);
        self.output.scatter(b, staged);
        Ok(result)
    }

    /// Runs `f(input, output)` on matrix `b` of each, both packed column-major (leading
    /// dimension `rows`), for a routine that computes the result from the operand out of
    /// place: each is the caller's own memory where it is packed so (and the two are not one
    /// memory), else staged in `scratch` (the input read from, the output written back to,
    /// the caller's).
    ///
    /// # Safety
    /// As [`InOut::column_major`].
    pub unsafe fn apart<R>(
        &self,
        b: usize,
        scratch: &mut [Vec<T>; 2],
        f: impl FnOnce(&[T], &mut [T]) -> R,
    ) -> Result<R> {
        let (rows, len) = (self.input.rows, self.input.rows * self.input.cols);
        let packed = |view: &Batch<T>| view.lapack_ld() == Some(rows.max(1));
        let [staged_in, staged_out] = scratch;
        let input: &[T] = if packed(&self.input) && !self.aliased(b) {
            self.input.matrix_span(b)
        } else {
            let staged = stage(staged_in, len, self.input.ptr)?;
            self.input.gather(b, staged);
            staged
        };
        if packed(&self.output) {
            return Ok(f(input, self.output.matrix_span(b)));
        }
        let staged = stage(staged_out, len, self.input.ptr)?;
        let result = f(input, staged);
        self.output.scatter(b, staged);
        Ok(result)
    }

    /// Runs `f(matrices, layout)` on matrices `first..first + count` as one packed array in
    /// `layout` (the SIMD routines' operand): the result's own where it is packed column-major
    /// (or row-major, if `row_major_too`), the input copied in first; else `scratch` holding
    /// them column-major, read from the input and written back to the result.
    ///
    /// # Safety
    /// As [`InOut::column_major`], for every matrix of the group.
    pub unsafe fn packed<R>(
        &self,
        first: usize,
        count: usize,
        row_major_too: bool,
        scratch: &mut Vec<T>,
        f: impl FnOnce(&mut [T], Layout) -> R,
    ) -> Result<R> {
        self.packed_from(
            first,
            count,
            row_major_too,
            scratch,
            |source, group, layout| {
                if let Some(source) = source {
                    group.copy_from_slice(source);
                }
                f(group, layout)
            },
        )
    }

    /// [`InOut::packed`] for routines that read their operand once, into scratch of their
    /// own: `f(source, matrices, layout)` gets the input's matrices as `source` where they are
    /// packed as the result's and apart from them (then `matrices`, the result's, is only to
    /// be written), else None and `matrices` holding the input (no copy to make).
    ///
    /// # Safety
    /// As [`InOut::packed`].
    pub unsafe fn packed_from<R>(
        &self,
        first: usize,
        count: usize,
        row_major_too: bool,
        scratch: &mut Vec<T>,
        f: impl FnOnce(Option<&[T]>, &mut [T], Layout) -> R,
    ) -> Result<R> {
        let range = first..first + count;
        let layout = self
            .output
            .packed_layout()
            .filter(|&layout| row_major_too || layout == Layout::ColumnMajor);
        if let (Some(layout), Some(group)) = (layout, self.output.packed_group(first, count)) {
            if let Some(source) = self
                .input
                .packed_group(first, count)
                .filter(|_| !self.aliased(first) && self.input.packed_layout() == Some(layout))
            {
                return Ok(f(Some(source), group, layout));
            }
            range.for_each(|b| self.input.copy_to(b, &self.output));
            return Ok(f(None, group, layout));
        }
        let len = self.input.rows * self.input.cols;
        let staged = stage(scratch, count * len, self.input.ptr)?;
        for (k, b) in range.clone().enumerate() {
            self.input.gather(b, &mut staged[k * len..(k + 1) * len]);
        }
        let result = f(None, staged, Layout::ColumnMajor);
        for (k, b) in range.enumerate() {
            self.output.scatter(b, &staged[k * len..(k + 1) * len]);
        }
        Ok(result)
    }
}

/// `scratch`'s first `len` elements, grown with copies of any element to get there (every
/// staging overwrites them before reading).
unsafe fn stage<T: Copy>(scratch: &mut Vec<T>, len: usize, any: *const T) -> Result<&mut [T]> {
    // `any` is read only to grow: an empty operand's pointer may point nowhere.
    if scratch.len() < len {
        memory::grow(scratch, len, *any)?;
    }
    Ok(&mut scratch[..len])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2 × 3 × 4 batch numbered by position, in each layout, with and without padding.
    fn batches(data: &mut Vec<f64>) -> Vec<(Batch<f64>, &'static str)> {
        data.clear();
        data.resize(2 * 6 * 5, -1.0);
        let p = data.as_mut_ptr();
        // SAFETY: each view spans at most the 60 elements.
        unsafe {
            vec![
                (
                    Batch::packed(p, [2, 3, 4], Layout::ColumnMajor),
                    "column-major",
                ),
                (Batch::packed(p, [2, 3, 4], Layout::RowMajor), "row-major"),
                (
                    Batch::with_ld(p, [2, 3, 4], Layout::ColumnMajor, 5),
                    "column-major ld 5",
                ),
                (
                    Batch::with_ld(p, [2, 3, 4], Layout::RowMajor, 6),
                    "row-major ld 6",
                ),
            ]
        }
    }

    fn value(b: usize, i: usize, j: usize) -> f64 {
        (100 * b + 10 * i + j) as f64
    }

    #[test]
    fn scatter_then_gather_round_trips_and_lands_where_the_strides_say() {
        let mut data = Vec::new();
        for (view, name) in batches(&mut data) {
            for b in 0..2 {
                let column_major: Vec<f64> = (0..12).map(|k| value(b, k % 3, k / 3)).collect();
                let mut back = vec![0.0; 12];
                // SAFETY: matrices of the view, touched by this thread only.
                unsafe {
                    view.scatter(b, &column_major);
                    for (i, j) in (0..3).flat_map(|i| (0..4).map(move |j| (i, j))) {
                        let at = view
                            .matrix(b)
                            .add(i * view.row_stride + j * view.col_stride);
                        assert_eq!(*at, value(b, i, j), "{name} ({b}, {i}, {j})");
                    }
                    view.gather(b, &mut back);
                }
                assert_eq!(back, column_major, "{name}");
            }
        }
    }

    #[test]
    fn layouts_are_recognised() {
        let mut data = Vec::new();
        let views = batches(&mut data);
        assert_eq!(views[0].0.packed_layout(), Some(Layout::ColumnMajor));
        assert_eq!(views[1].0.packed_layout(), Some(Layout::RowMajor));
        assert_eq!(views[2].0.packed_layout(), None);
        assert_eq!(views[3].0.packed_layout(), None);
        let lds: Vec<Option<usize>> = views.iter().map(|(v, _)| v.lapack_ld()).collect();
        assert_eq!(lds, [Some(3), None, Some(5), None]);
    }

    #[test]
    fn in_out_stages_row_major_and_works_in_place_on_column_major() {
        let mut data = Vec::new();
        for (view, name) in batches(&mut data) {
            let column_major: Vec<f64> = (0..12).map(|k| value(1, k % 3, k / 3)).collect();
            let mut scratch = Vec::new();
            // SAFETY: as above.
            unsafe {
                view.scatter(1, &column_major);
                let in_out = InOut::in_place(view);
                let seen = in_out.column_major(1, &mut scratch, |a, ld| {
                    let seen: Vec<f64> = (0..4)
                        .flat_map(|j| a[j * ld..j * ld + 3].to_vec())
                        .collect();
                    a[ld + 2] = -7.0; // element (2, 1)
                    seen
                });
                assert_eq!(seen, Ok(column_major), "{name}");
                let mut back = vec![0.0; 12];
                view.gather(1, &mut back);
                assert_eq!(back[3 + 2], -7.0, "{name}");
            }
        }
    }
    #[test]
    fn column_major_result_starts_filled_in_every_layout() {
        let mut data = Vec::new();
        for (view, name) in batches(&mut data) {
            data.fill(-1.0);
            let mut scratch = vec![5.0; 2];
            // SAFETY: as above.
            unsafe {
                view.column_major_result(1, 0.0, &mut scratch, |a, ld| a[ld + 2] = -7.0)
                    .unwrap();
                let mut back = vec![1.0; 12];
                view.gather(1, &mut back);
                let expected: Vec<f64> = (0..12).map(|k| if k == 5 { -7.0 } else { 0.0 }).collect();
                assert_eq!(back, expected, "{name}");
            }
            // Nothing else is written: not the other matrix, not the padding.
            assert_eq!(data.iter().filter(|&&x| x != -1.0).count(), 12, "{name}");
        }
    }
}
