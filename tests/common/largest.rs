//! The largest modulus among a matrix's elements, the scale of the reductions' tolerances.

use faer::MatRef;
use ferrax::linalg::LapackScalar;

pub fn largest<T: LapackScalar>(a: MatRef<'_, T>) -> f64 {
    let (rows, cols) = (a.nrows(), a.ncols());
    (0..rows * cols)
        .map(|e| a[(e % rows, e / rows)].cabs().into())
        .fold(0.0, f64::max)
}
