//! Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
//! SC 2011), bit-exact with `jax._src.prng.threefry2x32_p`.

const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];
const KEY_PARITY: u32 = 0x1BD1_1BDA;

/// Hashes one counter pair `x` under `key`.
#[inline(always)]
pub fn threefry2x32(key: [u32; 2], x: [u32; 2]) -> [u32; 2] {
    let ks = [key[0], key[1], key[0] ^ key[1] ^ KEY_PARITY];
    let mut x0 = x[0].wrapping_add(ks[0]);
    let mut x1 = x[1].wrapping_add(ks[1]);
    for block in 0..5u32 {
        for &r in &ROTATIONS[(block % 2) as usize] {
            x0 = x0.wrapping_add(x1);
            x1 = x1.rotate_left(r) ^ x0;
        }
        let b = block as usize + 1;
        x0 = x0.wrapping_add(ks[b % 3]);
        x1 = x1.wrapping_add(ks[(b + 1) % 3]).wrapping_add(block + 1);
    }
    [x0, x1]
}

/// Element-wise hash of four equally long arrays, as `cu_threefry2x32_ffi` defines it.
/// Written as one flat loop so that the compiler vectorizes it.
#[inline(always)]
pub fn threefry2x32_slices(
    key0: &[u32],
    key1: &[u32],
    x0: &[u32],
    x1: &[u32],
    out0: &mut [u32],
    out1: &mut [u32],
) {
    let n = out0.len();
    let (key0, key1, x0, x1, out1) = (&key0[..n], &key1[..n], &x0[..n], &x1[..n], &mut out1[..n]);
    for i in 0..n {
        let [y0, y1] = threefry2x32([key0[i], key1[i]], [x0[i], x1[i]]);
        out0[i] = y0;
        out1[i] = y1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Known-answer vectors from the Random123 distribution (kat_vectors, threefry2x32_20).
    #[test]
    fn random123_known_answers() {
        assert_eq!(threefry2x32([0, 0], [0, 0]), [0x6b20_0159, 0x99ba_4efe]);
        assert_eq!(
            threefry2x32([u32::MAX, u32::MAX], [u32::MAX, u32::MAX]),
            [0x1cb9_96fc, 0xbb00_2be7]
        );
        assert_eq!(
            threefry2x32([0x1319_8a2e, 0x0370_7344], [0x243f_6a88, 0x85a3_08d3]),
            [0xc492_3a9c, 0x483d_f7a0]
        );
    }

    #[test]
    fn slices_match_scalar() {
        let n = 37;
        let mut state = 0x1234_5678u32;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        let mut inputs = [[0u32; 37]; 4];
        for row in inputs.iter_mut() {
            for v in row.iter_mut() {
                *v = next();
            }
        }
        let (mut out0, mut out1) = ([0u32; 37], [0u32; 37]);
        threefry2x32_slices(
            &inputs[0], &inputs[1], &inputs[2], &inputs[3], &mut out0, &mut out1,
        );
        for i in 0..n {
            let want = threefry2x32([inputs[0][i], inputs[1][i]], [inputs[2][i], inputs[3][i]]);
            assert_eq!([out0[i], out1[i]], want);
        }
    }
}
