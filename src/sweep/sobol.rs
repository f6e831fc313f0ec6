//! The Sobol sequence (Joe and Kuo's direction numbers, `new-joe-kuo-6.21201`, first 21
//! dimensions), in Gray-code order as SciPy's `qmc.Sobol` draws it, with an optional digital
//! shift (each dimension's 32 bits XORed with a seeded word), which keeps the sequence's
//! balance: the first 2^m points put one point in each of the 2^m equal parts of every axis.
//!
//! Must not: know the search space (`space.rs` maps points to values).

/// Dimensions the table covers.
pub const MAX_DIMS: usize = 21;

/// (degree s, coefficients a, initial m_1..m_s) for dimensions 2..=21 (dimension 1 is the
/// van der Corput sequence).
const JOE_KUO: [(u32, u32, &[u32]); MAX_DIMS - 1] = [
    (1, 0, &[1]),
    (2, 1, &[1, 3]),
    (3, 1, &[1, 3, 1]),
    (3, 2, &[1, 1, 1]),
    (4, 1, &[1, 1, 3, 3]),
    (4, 4, &[1, 3, 5, 13]),
    (5, 2, &[1, 1, 5, 5, 17]),
    (5, 4, &[1, 1, 5, 5, 5]),
    (5, 7, &[1, 1, 7, 11, 19]),
    (5, 11, &[1, 1, 5, 1, 1]),
    (5, 13, &[1, 1, 1, 3, 11]),
    (5, 14, &[1, 3, 5, 5, 31]),
    (6, 1, &[1, 3, 3, 9, 7, 49]),
    (6, 13, &[1, 1, 1, 15, 21, 21]),
    (6, 16, &[1, 3, 1, 13, 27, 49]),
    (6, 19, &[1, 1, 1, 15, 7, 5]),
    (6, 22, &[1, 3, 1, 15, 13, 25]),
    (6, 25, &[1, 1, 5, 5, 19, 61]),
    (7, 1, &[1, 3, 7, 11, 23, 15, 103]),
    (7, 4, &[1, 3, 7, 13, 13, 15, 69]),
];

const BITS: usize = 32;

/// The direction numbers V[k] (as 32-bit fractions) of one dimension.
fn directions(dim: usize) -> [u32; BITS] {
    let mut v = [0u32; BITS];
    if dim == 0 {
        for (k, x) in v.iter_mut().enumerate() {
            *x = 1 << (BITS - 1 - k);
        }
        return v;
    }
    let (s, a, m) = JOE_KUO[dim - 1];
    let s = s as usize;
    for k in 0..s.min(BITS) {
        v[k] = m[k] << (BITS - 1 - k);
    }
    for k in s..BITS {
        let mut x = v[k - s] ^ (v[k - s] >> s);
        for j in 1..s {
            if (a >> (s - 1 - j)) & 1 == 1 {
                x ^= v[k - j];
            }
        }
        v[k] = x;
    }
    v
}

/// Point `i` (0-based, Gray-code order) of the `dims`-dimensional sequence, each coordinate
/// XORed with `shift[d]`, as fractions in [0, 1).
pub fn point(i: u64, dims: usize, shift: &[u32]) -> Vec<f64> {
    assert!(dims <= MAX_DIMS, "the Sobol table has {MAX_DIMS} dimensions");
    let gray = i ^ (i >> 1);
    (0..dims)
        .map(|d| {
            let v = directions(d);
            let mut x = 0u32;
            for (k, vk) in v.iter().enumerate() {
                if (gray >> k) & 1 == 1 {
                    x ^= vk;
                }
            }
            x ^= shift.get(d).copied().unwrap_or(0);
            f64::from(x) / 4294967296.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first 64 points equal SciPy's `qmc.Sobol(d=21, scramble=False)` (an independent
    /// implementation of the same table), bit for bit.
    #[test]
    fn equals_scipy_unscrambled() {
        let text = include_str!("sobol-scipy.txt");
        let rows: Vec<Vec<u64>> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().map(|w| w.parse().unwrap()).collect())
            .collect();
        assert_eq!(rows.len(), 64);
        for (i, row) in rows.iter().enumerate() {
            let p = point(i as u64, MAX_DIMS, &[]);
            let got: Vec<u64> = p.iter().map(|x| (x * 4294967296.0) as u64).collect();
            assert_eq!(&got, row, "point {i}");
        }
    }

    /// A digital shift keeps every axis balanced: 2^m points, one in each of 2^m parts.
    #[test]
    fn a_shifted_sequence_stays_balanced() {
        let shift: Vec<u32> = (0..MAX_DIMS as u32).map(|d| d.wrapping_mul(0x9e37_79b9) ^ 0x5bd1_e995).collect();
        let n = 32u64;
        for d in 0..MAX_DIMS {
            let mut seen = vec![0; n as usize];
            for i in 0..n {
                seen[(point(i, MAX_DIMS, &shift)[d] * n as f64) as usize] += 1;
            }
            assert!(seen.iter().all(|&c| c == 1), "dimension {d}: {seen:?}");
        }
    }
}
