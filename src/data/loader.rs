//! The background loader: a thread that streams this rank's training batches out of its
//! `Shard`, epoch after epoch, a few batches ahead of the training loop.
//!
//! Memory stays bounded whatever the file size: the thread holds one window of
//! `shuffle_window` rows. With shuffling, each epoch visits the shard's blocks of
//! `shuffle_block` contiguous rows in a seeded random order, a window of blocks at a time,
//! and shuffles the rows inside each window (the usual block-shuffle of streaming readers).
//! Without shuffling, rows come in file order. Every epoch yields exactly `steps` batches;
//! rows past `steps × batch` are dropped (the training loop logs how many).

use super::shard::{Labels, Shard};
use crate::error::Result;
use crate::rng::Rng;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

/// One batch: features [n, d] and the matching targets.
pub struct Batch {
    pub x: Vec<f32>,
    pub classes: Vec<i32>,
    pub values: Vec<f32>,
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

fn produce(shard: &Shard, cfg: &LoaderCfg, tx: &SyncSender<Result<Batch>>, spare: &Receiver<Batch>) -> Result<()> {
    let d = shard.features;
    let k = match &shard.labels {
        Labels::Values(_, k) => *k,
        Labels::Classes(_) => 0,
    };
    let mut window = vec![0.0f32; cfg.window.max(cfg.block) * d];
    let mut rows: Vec<usize> = Vec::with_capacity(cfg.window);
    for epoch in cfg.start_epoch..cfg.epochs {
        if epoch == cfg.start_epoch && cfg.start_batch >= cfg.steps {
            continue; // resumed at the very end of this epoch
        }
        let mut rng = Rng::new(cfg.seed, 0x5A11_0000 ^ ((epoch as u64) << 20) ^ cfg.rank as u64);
        let mut batch = new_batch(spare, cfg.batch, d, k);
        let mut sent = 0;
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
                if batch.x.len() == cfg.batch * d {
                    if tx.send(Ok(batch)).is_err() {
                        return Ok(()); // the consumer is gone: stop quietly
                    }
                    sent += 1;
                    if sent == cfg.steps {
                        break 'epoch;
                    }
                    batch = new_batch(spare, cfg.batch, d, k);
                }
            }
        }
        debug_assert_eq!(sent, cfg.steps);
    }
    Ok(())
}

fn new_batch(spare: &Receiver<Batch>, b: usize, d: usize, k: usize) -> Batch {
    let mut batch = spare.try_recv().unwrap_or_else(|_| Batch {
        x: Vec::with_capacity(b * d),
        classes: Vec::with_capacity(b),
        values: Vec::with_capacity(b * k),
    });
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
    fn shuffled_order_depends_on_epoch() {
        assert_ne!(epoch_windows(100, &cfg(true), 0), epoch_windows(100, &cfg(true), 1));
        assert_eq!(epoch_windows(100, &cfg(true), 2), epoch_windows(100, &cfg(true), 2));
    }
}
