//! The background loader: a thread that streams this rank's training batches out of its
//! `Shard`, epoch after epoch, a few batches ahead of the training loop.
//!
//! Memory stays bounded whatever the file size: the thread holds one window of
//! `shuffle_window` rows. With shuffling, each epoch visits the shard's blocks of
//! `shuffle_block` contiguous rows in a seeded random order, a window of blocks at a time,
//! and shuffles the rows inside each window (the usual block-shuffle of streaming readers).
//! Without shuffling, rows come in file order. Every epoch yields exactly `steps` batches
//! (the same on every rank, see `Schedule`): full ones while this rank has rows, then a
//! short one with the rest, then empty ones; every row is used once per epoch. With
//! `drop_last`, `steps` full batches and the rest of the rows left out.

use super::shard::{Labels, Shard};
use crate::error::Result;
use crate::rng::Rng;
use log::debug;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

/// One batch: `rows` samples, features [rows, d] and the matching targets. `rows` is the
/// batch size, fewer for a rank's short last batch of the epoch, 0 once it has run out.
pub struct Batch {
    pub rows: usize,
    pub x: Vec<f32>,
    pub classes: Vec<i32>,
    pub values: Vec<f32>,
}

/// Which rows every rank uses at each step of an epoch: a pure function of every rank's
/// share (all-gathered once at start-up), the batch size and `drop_last`, so every rank
/// knows each step's global row count without a collective.
///
/// Every rank runs `steps` steps so that the collectives line up: the most batches any rank
/// has (max of ceil(share / batch)), or with `drop_last` the fewest full ones (min of
/// floor(share / batch)). At step i rank r uses min(batch, share_r - i × batch) rows, or 0.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub batch: usize,
    /// Rows of each rank's shard.
    pub shares: Vec<usize>,
    pub drop_last: bool,
    pub steps: usize,
}

impl Schedule {
    pub fn new(shares: Vec<usize>, batch: usize, drop_last: bool) -> Schedule {
        assert!(batch > 0 && !shares.is_empty());
        let steps = if drop_last {
            shares.iter().map(|s| s / batch).min()
        } else {
            shares.iter().map(|s| s.div_ceil(batch)).max()
        };
        Schedule { steps: steps.unwrap_or(0), shares, batch, drop_last }
    }

    /// Rows rank `r` uses in step `i` (0-based) of an epoch.
    pub fn rows(&self, r: usize, i: usize) -> usize {
        if i >= self.steps {
            return 0;
        }
        self.shares[r].saturating_sub(i * self.batch).min(self.batch)
    }

    /// Rows all ranks together use in step `i`.
    pub fn global_rows(&self, i: usize) -> usize {
        (0..self.shares.len()).map(|r| self.rows(r, i)).sum()
    }

    /// Rows rank `r` uses in the first `i` steps of an epoch.
    pub fn rows_before(&self, r: usize, i: usize) -> usize {
        self.shares[r].min(i.min(self.steps) * self.batch)
    }

    /// Rows all ranks together use in steps `from..to`.
    pub fn global_rows_in(&self, from: usize, to: usize) -> usize {
        (0..self.shares.len()).map(|r| self.rows_before(r, to) - self.rows_before(r, from)).sum()
    }

    /// Rows rank `r` uses per epoch.
    pub fn epoch_rows(&self, r: usize) -> usize {
        self.rows_before(r, self.steps)
    }
}

#[derive(Clone, Debug)]
pub struct LoaderCfg {
    pub batch: usize,
    pub steps: usize,
    pub epochs: usize,
    pub shuffle: bool,
    pub block: usize,
    pub window: usize,
    pub seed: u64,
    pub rank: usize,
    /// Batches produced ahead of the consumer.
    pub depth: usize,
    /// Where to start (resuming): epoch (0-based) and batches of it already done.
    pub start_epoch: usize,
    pub start_batch: usize,
}

pub struct Loader {
    rx: Receiver<Result<Batch>>,
    recycle: SyncSender<Batch>,
    handle: Option<JoinHandle<()>>,
}

impl Loader {
    pub fn spawn(shard: Shard, cfg: LoaderCfg) -> Loader {
        let (tx, rx) = sync_channel(cfg.depth);
        let (recycle, spare) = sync_channel(cfg.depth + 2);
        let handle = std::thread::Builder::new()
            .name("hvtrain-loader".into())
            .spawn(move || {
                if let Err(e) = produce(&shard, &cfg, &tx, &spare) {
                    let _ = tx.send(Err(e));
                }
            })
            .expect("spawn loader thread");
        Loader { rx, recycle, handle: Some(handle) }
    }

    /// The next batch; blocks until the loader has it.
    pub fn next(&self) -> Result<Batch> {
        self.rx.recv().expect("loader thread ended early")
    }

    /// Hand a used batch back so its buffers are reused.
    pub fn give_back(&self, b: Batch) {
        let _ = self.recycle.try_send(b);
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Dropping the receiver makes a send blocked in the thread fail, so it ends.
        drop(std::mem::replace(&mut self.rx, sync_channel(1).1));
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The order in which one epoch visits the shard: a list of windows, each a list of
/// (start row, row count) blocks, plus whether to shuffle rows within each window.
pub fn epoch_windows(n: usize, cfg: &LoaderCfg, epoch: usize) -> Vec<Vec<(usize, usize)>> {
    let block = cfg.block.min(n).max(1);
    let mut blocks: Vec<(usize, usize)> =
        (0..n.div_ceil(block)).map(|i| (i * block, block.min(n - i * block))).collect();
    if cfg.shuffle {
        Rng::new(cfg.seed, 0xB10C_0000 ^ ((epoch as u64) << 20) ^ cfg.rank as u64).shuffle(&mut blocks);
    }
    let per_window = (cfg.window / block).max(1);
    blocks.chunks(per_window).map(|c| c.to_vec()).collect()
}

/// The loader's record of an epoch, for its debug line (what the tests check).
#[derive(Default)]
struct Used {
    rows: usize,
    short: usize,
    empty: usize,
    /// Sum of `row_digest` over the rows used: order-independent.
    digest: u64,
}

/// A row's fingerprint: splitmix64 of (file number << 32 | row in the file).
pub fn row_digest(file: usize, row: usize) -> u64 {
    let mut z = ((file as u64) << 32 | row as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn produce(shard: &Shard, cfg: &LoaderCfg, tx: &SyncSender<Result<Batch>>, spare: &Receiver<Batch>) -> Result<()> {
    let d = shard.features;
    let k = match &shard.labels {
        Labels::Values(_, k) => *k,
        Labels::Classes(_) => 0,
    };
    let record = log::log_enabled!(log::Level::Debug);
    let mut window = vec![0.0f32; cfg.window.max(cfg.block) * d];
    let mut rows: Vec<usize> = Vec::with_capacity(cfg.window);
    for epoch in cfg.start_epoch..cfg.epochs {
        if epoch == cfg.start_epoch && cfg.start_batch >= cfg.steps {
            continue; // resumed at the very end of this epoch
        }
        let mut rng = Rng::new(cfg.seed, 0x5A11_0000 ^ ((epoch as u64) << 20) ^ cfg.rank as u64);
        let mut batch = new_batch(spare, cfg.batch, d, k);
        let mut sent = 0;
        let mut used = Used::default();
        // Resuming mid-epoch: replay the order without reading what was already trained on.
        let mut skip = if epoch == cfg.start_epoch { cfg.start_batch * cfg.batch } else { 0 };
        if epoch == cfg.start_epoch {
            sent = cfg.start_batch;
        }
        'epoch: for blocks in epoch_windows(shard.len(), cfg, epoch) {
            let rows_in: usize = blocks.iter().map(|b| b.1).sum();
            if skip >= rows_in {
                // The whole window was consumed before the checkpoint: only keep the RNG in step.
                let mut pos: Vec<usize> = (0..rows_in).collect();
                if cfg.shuffle {
                    rng.shuffle(&mut pos);
                }
                skip -= rows_in;
                continue;
            }
            // Fill the window: `rows[i]` is the shard row held at window position i.
            rows.clear();
            for &(start, count) in &blocks {
                let at = rows.len();
                shard.read_rows(start, count, &mut window[at * d..(at + count) * d])?;
                rows.extend(start..start + count);
            }
            let mut pos: Vec<usize> = (0..rows.len()).collect();
            if cfg.shuffle {
                rng.shuffle(&mut pos);
            }
            for p in pos.into_iter().skip(std::mem::take(&mut skip)) {
                batch.x.extend_from_slice(&window[p * d..(p + 1) * d]);
                match &shard.labels {
                    Labels::Classes(c) => batch.classes.push(c[rows[p]]),
                    Labels::Values(v, k) => batch.values.extend_from_slice(&v[rows[p] * k..(rows[p] + 1) * k]),
                }
                batch.rows += 1;
                if record {
                    let (file, row) = shard.row_id(rows[p]);
                    used.digest = used.digest.wrapping_add(row_digest(file, row));
                }
                if batch.rows == cfg.batch {
                    used.rows += batch.rows;
                    let full = std::mem::replace(&mut batch, new_batch(spare, cfg.batch, d, k));
                    if tx.send(Ok(full)).is_err() {
                        return Ok(()); // the consumer is gone: stop quietly
                    }
                    sent += 1;
                    if sent == cfg.steps {
                        break 'epoch;
                    }
                }
            }
        }
        // Out of rows before the last step: the short batch with the rest, then empty ones
        // (this rank still takes part in every step's collectives).
        while sent < cfg.steps {
            if batch.rows == 0 {
                used.empty += 1;
            } else {
                used.short += 1;
            }
            used.rows += batch.rows;
            let last = std::mem::replace(&mut batch, new_batch(spare, cfg.batch, d, k));
            if tx.send(Ok(last)).is_err() {
                return Ok(());
            }
            sent += 1;
        }
        if record {
            debug!(
                "loader: epoch {}: used {} rows in {} batches ({} short, {} empty), row digest {:016x}",
                epoch + 1,
                used.rows,
                cfg.steps - if epoch == cfg.start_epoch { cfg.start_batch } else { 0 },
                used.short,
                used.empty,
                used.digest
            );
        }
    }
    Ok(())
}

fn new_batch(spare: &Receiver<Batch>, b: usize, d: usize, k: usize) -> Batch {
    let mut batch = spare.try_recv().unwrap_or_else(|_| Batch {
        rows: 0,
        x: Vec::with_capacity(b * d),
        classes: Vec::with_capacity(b),
        values: Vec::with_capacity(b * k),
    });
    batch.rows = 0;
    batch.x.clear();
    batch.classes.clear();
    batch.values.clear();
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(shuffle: bool) -> LoaderCfg {
        LoaderCfg {
            batch: 4,
            steps: 10,
            epochs: 2,
            shuffle,
            block: 8,
            window: 24,
            seed: 3,
            rank: 0,
            depth: 2,
            start_epoch: 0,
            start_batch: 0,
        }
    }

    #[test]
    fn windows_cover_every_row_once() {
        for shuffle in [false, true] {
            let w = epoch_windows(100, &cfg(shuffle), 1);
            let mut rows: Vec<usize> = w.iter().flatten().flat_map(|&(s, c)| s..s + c).collect();
            assert!(w.iter().all(|win| win.len() <= 3));
            if !shuffle {
                assert_eq!(rows, (0..100).collect::<Vec<_>>());
            }
            rows.sort();
            assert_eq!(rows, (0..100).collect::<Vec<_>>());
        }
    }

    #[test]
    fn schedule_uses_every_row_once_and_drop_last_the_old_steps() {
        let s = Schedule::new(vec![70, 50, 33], 16, false);
        assert_eq!(s.steps, 5);
        assert_eq!((0..5).map(|i| s.rows(0, i)).collect::<Vec<_>>(), [16, 16, 16, 16, 6]);
        assert_eq!((0..5).map(|i| s.rows(1, i)).collect::<Vec<_>>(), [16, 16, 16, 2, 0]);
        assert_eq!((0..5).map(|i| s.rows(2, i)).collect::<Vec<_>>(), [16, 16, 1, 0, 0]);
        assert_eq!((0..5).map(|i| s.global_rows(i)).collect::<Vec<_>>(), [48, 48, 33, 18, 6]);
        assert_eq!(s.global_rows_in(0, 5), 153);
        assert_eq!(s.global_rows_in(2, 4), 51);
        assert_eq!((s.epoch_rows(0), s.epoch_rows(1), s.epoch_rows(2)), (70, 50, 33));
        assert_eq!(s.rows_before(1, 4), 50);

        let s = Schedule::new(vec![70, 50, 33], 16, true);
        assert_eq!(s.steps, 2);
        assert!((0..2).all(|i| s.global_rows(i) == 48));
        assert_eq!(s.global_rows_in(0, 2), 96);
        assert_eq!(s.epoch_rows(0), 32);
        // A batch larger than every share: one step with everything.
        let s = Schedule::new(vec![7, 3, 1], 8, false);
        assert_eq!((s.steps, s.global_rows(0)), (1, 11));
        assert_eq!(Schedule::new(vec![7, 3, 1], 8, true).steps, 0);
    }

    #[test]
    fn shuffled_order_depends_on_epoch() {
        assert_ne!(epoch_windows(100, &cfg(true), 0), epoch_windows(100, &cfg(true), 1));
        assert_eq!(epoch_windows(100, &cfg(true), 2), epoch_windows(100, &cfg(true), 2));
    }
}
