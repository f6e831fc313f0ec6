//! Dropout's mask as every backend draws it: a counter-based hash (SplitMix64's finalizer) of
//! (seed, step, layer) and (row id, column), so the mask of an element does not depend on the
//! rank, the tensor split or the backend (`kernels.cu`'s `hv_mask_bits` computes the same).
//!
//! Must not: touch buffers (the backends apply the mask).

/// One dropout mask over a [rows, cols] block of a layer's activations: element (r, c) is
/// kept when `mask_bits(salt, keys[r], col0 + c) >= threshold` (24-bit uniform), and a kept
/// element is multiplied by `scale`, a dropped one set to 0. `keys` are the rows' global ids,
/// `col0` the block's first column in the whole layer, `salt` mixes the seed, the step and the
/// layer: the mask of a row does not depend on which rank holds it or on tensor splits.
/// `threshold` 0 keeps every element (a plain scale).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mask {
    pub salt: u64,
    pub col0: u32,
    pub threshold: u32,
    pub scale: f32,
}

/// SplitMix64's finalizer: a bijection of u64 that mixes every bit into every other.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 24 uniform bits of element (key, col) under `salt` (kernels.cu `hv_mask_bits` computes
/// the same).
pub fn mask_bits(salt: u64, key: u32, col: u32) -> u32 {
    (mix64(salt ^ (key as u64 | (col as u64) << 32)) >> 40) as u32
}

impl Mask {
    /// The mask of rate `p` (drop share) for whole-model layer `layer` at global step `step`
    /// (inverted dropout: kept units scaled by 1/(1 − p)).
    pub fn new(seed: u64, step: u64, layer: usize, p: f32) -> Mask {
        let salt = mix64(mix64(seed ^ 0xD809_0000_0000_0000) ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ layer as u64);
        Mask { salt, col0: 0, threshold: (p as f64 * (1u64 << 24) as f64).round() as u32, scale: 1.0 / (1.0 - p) }
    }

    /// The same mask on a block whose first column is `col0` of the whole layer.
    pub fn at_col(self, col0: usize) -> Mask {
        Mask { col0: col0 as u32, ..self }
    }

    /// Multiply every element by `scale` (no element dropped).
    pub fn scale_only(scale: f32) -> Mask {
        Mask { salt: 0, col0: 0, threshold: 0, scale }
    }
}
