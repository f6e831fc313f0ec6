//! The order of the training rows, a function of the global row index, `training.seed`, the
//! epoch and `data.shuffle_block`/`shuffle_window`, never of the rank count; and `Schedule`,
//! which part of each step's global batch each rank takes.
//!
//! Global rows are the rows of every training file one after another, in file order (the
//! `{rank}` files 0, 1, 2, ...). An epoch cuts them into blocks of `shuffle_block` rows, visits
//! the blocks in a seeded random order, a window of `shuffle_window / shuffle_block` blocks at a
//! time, and shuffles the rows inside each window (seeded by the epoch and the window's index,
//! so any window's order is known without the ones before it). Position p of the epoch is
//! the p-th row of that order; step s takes positions [s·G, (s+1)·G), G the global batch.
//!
//! Which rank takes which rows of a step: the step's rows sorted by their place in the
//! block order ("read position"), and rank r of M takes the r-th run of G/M of them. The
//! global batch, as a set of rows, is the same for every M, so the summed gradient is too (up
//! to the order of the float additions); and sorting gives each rank about one M-th of every
//! window, contiguous in the file, so the ranks between them read each row about once.
//!
//! Must not: read files or depend on the rank count for the order itself (only for a rank's share).

use crate::rng::Rng;

/// Which rows every rank uses at each step of an epoch: a pure function of the number of
/// training rows, the global batch, the rank count and `drop_last`, so every rank knows each
/// step's global row count without a collective.
///
/// Steps per epoch: ceil(rows / G), or with `drop_last` floor(rows / G) (the last rows of the
/// epoch's order are left out). Every step but the last is full: G rows, G/M on each rank.
/// The last one is short: rank r takes rows [r·b, (r+1)·b) of it, b = G/M, so the first
/// ranks have rows and the others a short or empty batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Training rows (all files).
    pub rows: usize,
    pub global_batch: usize,
    pub ranks: usize,
    /// Rows per rank in a full step: global_batch / ranks.
    pub batch: usize,
    pub drop_last: bool,
    pub steps: usize,
}

impl Schedule {
    /// `global_batch` must be a multiple of `ranks` (checked by the caller, with a message).
    pub fn new(rows: usize, global_batch: usize, ranks: usize, drop_last: bool) -> Schedule {
        assert!(
            global_batch > 0 && ranks > 0 && global_batch.is_multiple_of(ranks),
            "{global_batch} over {ranks} ranks"
        );
        let steps = if drop_last { rows / global_batch } else { rows.div_ceil(global_batch) };
        Schedule { rows, global_batch, ranks, batch: global_batch / ranks, drop_last, steps }
    }

    /// Rows used per epoch (all ranks).
    pub fn used(&self) -> usize {
        self.rows.min(self.steps * self.global_batch)
    }

    /// Rows all ranks together use in step `i`.
    pub fn global_rows(&self, i: usize) -> usize {
        if i >= self.steps {
            return 0;
        }
        (self.used() - i * self.global_batch).min(self.global_batch)
    }

    /// Rows rank `r` uses in step `i` (0-based) of an epoch.
    pub fn rows(&self, r: usize, i: usize) -> usize {
        self.global_rows(i).saturating_sub(r * self.batch).min(self.batch)
    }

    /// Rows rank `r` uses in the first `i` steps of an epoch (all but the last step are full).
    pub fn rows_before(&self, r: usize, i: usize) -> usize {
        match i.min(self.steps) {
            0 => 0,
            i => (i - 1) * self.batch + self.rows(r, i - 1),
        }
    }

    /// Rows all ranks together use in steps `from..to`.
    pub fn global_rows_in(&self, from: usize, to: usize) -> usize {
        let before = |i: usize| (i.min(self.steps) * self.global_batch).min(self.used());
        before(to) - before(from)
    }

    /// Rows rank `r` uses per epoch.
    pub fn epoch_rows(&self, r: usize) -> usize {
        self.rows_before(r, self.steps)
    }
}

/// One epoch's order of `n` global rows: blocks (first global row, rows) in visiting order,
/// grouped into windows; window k covers positions (and read positions) [start[k], start[k+1]).
#[derive(Clone, Debug, PartialEq)]
pub struct Order {
    pub blocks: Vec<(usize, usize)>,
    /// Blocks per window.
    pub per_window: usize,
    /// Position of each window's first row; one more entry, `n`, at the end.
    pub start: Vec<usize>,
    shuffle: bool,
    seed: u64,
    epoch: usize,
}

impl Order {
    pub fn new(n: usize, block: usize, window: usize, shuffle: bool, seed: u64, epoch: usize) -> Order {
        let block = block.min(n).max(1);
        let mut blocks: Vec<(usize, usize)> =
            (0..n.div_ceil(block)).map(|i| (i * block, block.min(n - i * block))).collect();
        if shuffle {
            Rng::new(seed, 0xB10C_0000_0000_0000 ^ epoch as u64).shuffle(&mut blocks);
        }
        let per_window = (window / block).max(1);
        let mut start = vec![0];
        for w in blocks.chunks(per_window) {
            start.push(start.last().unwrap() + w.iter().map(|b| b.1).sum::<usize>());
        }
        Order { blocks, per_window, start, shuffle, seed, epoch }
    }

    pub fn windows(&self) -> usize {
        self.start.len() - 1
    }

    /// The blocks of window `k`.
    pub fn window_blocks(&self, k: usize) -> &[(usize, usize)] {
        let a = k * self.per_window;
        &self.blocks[a..(a + self.per_window).min(self.blocks.len())]
    }

    /// Window `k`'s shuffle: its i-th position holds the row at read position perm[i] of the
    /// window (both counted from the window's start).
    pub fn perm(&self, k: usize) -> Vec<u32> {
        let len = self.start[k + 1] - self.start[k];
        let mut p: Vec<u32> = (0..len as u32).collect();
        if self.shuffle {
            Rng::new(self.seed, 0x5A11_0000_0000_0000 ^ (self.epoch as u64) << 32 ^ k as u64).shuffle(&mut p);
        }
        p
    }

    /// The global row at each read position of window `k`, into `out`.
    pub fn window_rows(&self, k: usize, out: &mut Vec<usize>) {
        out.clear();
        for &(s, c) in self.window_blocks(k) {
            out.extend(s..s + c);
        }
    }
}

/// What rank `rank` of a step takes from window `k` (positions [ws, we) of the epoch):
/// for each step overlapping the window from `first_step` on and before `n_used`, the step,
/// the read positions (relative to the window, sorted) of this rank's rows in it, and whether
/// the window completes the step. `scratch` is reused between calls.
pub struct Part {
    pub step: usize,
    pub rows: std::ops::Range<usize>,
    pub completes: bool,
}

#[allow(clippy::too_many_arguments)]
pub fn window_parts(
    perm: &[u32],
    ws: usize,
    n_used: usize,
    g: usize,
    b: usize,
    rank: usize,
    first_step: usize,
    need: &mut Vec<u32>,
    scratch: &mut Vec<u32>,
) -> Vec<Part> {
    need.clear();
    let we = (ws + perm.len()).min(n_used);
    let mut parts = Vec::new();
    if we <= ws {
        return parts;
    }
    for s in first_step.max(ws / g)..=(we - 1) / g {
        let (p0, p1) = ((s * g).max(ws), ((s + 1) * g).min(we));
        if p0 >= p1 {
            continue;
        }
        // This window's part of the step is at offset o of the step's sorted rows (an earlier
        // window's read positions all come first).
        let o = p0 - s * g;
        let (lo, hi) = ((rank * b).max(o), ((rank + 1) * b).min(o + p1 - p0));
        let at = need.len();
        if lo < hi {
            scratch.clear();
            scratch.extend_from_slice(&perm[p0 - ws..p1 - ws]);
            scratch.sort_unstable();
            need.extend_from_slice(&scratch[lo - o..hi - o]);
        }
        parts.push(Part { step: s, rows: at..need.len(), completes: p1 == ((s + 1) * g).min(n_used) });
    }
    parts
}
