//! LAPACK-style row swaps (`ipiv`, 0-based) to a permutation, as `lu_pivots_to_permutation`.

/// Writes into `permutation` the row order produced by applying the swaps `i <-> pivots[i]`
/// in turn to the identity. Pivots outside `0..permutation.len()` (never produced by a
/// successful factorization) leave the row in place instead of indexing out of bounds.
#[inline]
pub fn pivots_to_permutation(pivots: &[i32], permutation: &mut [i32]) {
    for (i, p) in permutation.iter_mut().enumerate() {
        *p = i as i32;
    }
    let size = permutation.len();
    for (i, &pivot) in pivots.iter().enumerate().take(size) {
        if let Ok(j) = usize::try_from(pivot) {
            if j < size {
                permutation.swap(i, j);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_swaps_in_order() {
        // Swaps (0,2), (1,2), (2,2) on [0,1,2,3]: [2,1,0,3] -> [2,0,1,3].
        let mut perm = [0; 4];
        pivots_to_permutation(&[2, 2, 2], &mut perm);
        assert_eq!(perm, [2, 0, 1, 3]);
    }

    #[test]
    fn out_of_range_pivots_are_ignored() {
        let mut perm = [0; 3];
        pivots_to_permutation(&[-1, 7, 1], &mut perm);
        assert_eq!(perm, [0, 2, 1]);
    }

    #[test]
    fn empty_inputs() {
        let mut perm: [i32; 0] = [];
        pivots_to_permutation(&[], &mut perm);
        let mut perm = [0; 2];
        pivots_to_permutation(&[], &mut perm);
        assert_eq!(perm, [0, 1]);
    }
}
