//! The background loader: a thread that streams this rank's training batches, epoch after
//! epoch, a few batches ahead of the training loop.
//!
//! The rows come in the epoch's global order (`order.rs`: blocks of `shuffle_block` rows in
//! a seeded order, rows shuffled within windows of `shuffle_window` rows; file order without
//! shuffling), the same whatever the rank count; each step's global batch is split over the
//! ranks by `window_parts`. Memory stays bounded whatever the file size: the thread holds one
//! window, and reads of it only the rows this rank takes (per block, the span from the first
//! to the last of them). Every epoch yields exactly `steps` batches (the same on every rank,
//! see `Schedule`): full ones, and in the last step a short or empty one on the ranks past
//! the step's rows; every row is used once per epoch. With `drop_last`, the epoch's last
//! positions past the last full step are left out.
//!
//! Must not: call MPI (the loader thread is outside MPI's thread rules), or decide which rows a
//! rank takes (`order.rs` does).

pub use super::order::Schedule;
use super::order::{window_parts, Order};
use super::shard::{Labels, Shard};
use crate::error::Result;
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
    /// The rows' sample weights (`data.sample_weight`); empty without them.
    pub weights: Vec<f32>,
    /// The rows' global ids (their row in the training data): dropout's masks are drawn from them.
    pub ids: Vec<u32>,
    /// Sum of `row_digest` over its rows (0 unless debug logging is on).
    pub digest: u64,
}

#[derive(Clone, Debug)]
pub struct LoaderCfg {
    /// Rows per rank in a full step (global batch / ranks).
    pub batch: usize,
    /// This rank's index among the data-parallel ranks, and their number.
    pub rank: usize,
    pub ranks: usize,
    pub steps: usize,
    pub epochs: usize,
    pub shuffle: bool,
    pub block: usize,
    pub window: usize,
    pub seed: u64,
    /// Batches produced ahead of the consumer.
    pub depth: usize,
    /// Keep every row read in memory when the shard's float32 rows fit in this many bytes
    /// (`data.cache_mb`; 0: never).
    pub cache_bytes: usize,
    /// Where to start (resuming): epoch (0-based) and batches of it already done.
    pub start_epoch: usize,
    pub start_batch: usize,
    /// Batches of ids, labels and targets only (`Batch::x` empty, no feature read): the rows
    /// are in the device's memory (`data.on_device`).
    pub ids_only: bool,
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

/// The loader's record of an epoch, for its debug line (what the tests check).
#[derive(Default)]
struct Used {
    rows: usize,
    short: usize,
    empty: usize,
    /// Sum of `row_digest` over the rows used: order-independent.
    digest: u64,
    /// Rows read from the files (the spans read; none that the cache held).
    read: usize,
}

impl Used {
    /// Count a complete batch of at most `b` rows.
    fn count(&mut self, batch: &Batch, b: usize) {
        match batch.rows {
            0 => self.empty += 1,
            r if r < b => self.short += 1,
            _ => {}
        }
        self.rows += batch.rows;
        self.digest = self.digest.wrapping_add(batch.digest);
    }
}

/// A row's fingerprint: splitmix64 of (file number << 32 | row in the file).
pub fn row_digest(file: usize, row: usize) -> u64 {
    let mut z = ((file as u64) << 32 | row as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The rows of consumed batches, added up by the training loop: with the loader's own line
/// at the end of an epoch, what a test compares across an interruption. `log_before_stop`
/// writes rank's share of an epoch that a stop cut short.
#[derive(Default, Clone, Copy, Debug)]
pub struct Tally {
    pub rows: usize,
    pub digest: u64,
}

impl Tally {
    pub fn add(&mut self, b: &Batch) {
        self.rows += b.rows;
        self.digest = self.digest.wrapping_add(b.digest);
    }

    /// Debug: the rows this rank trained on in epoch `epoch` (1-based), steps `from..to` (1-based).
    pub fn log_before_stop(&self, epoch: usize, from: usize, to: usize) {
        debug!(
            "loader: epoch {epoch} before the stop: used {} rows in steps {from}..{to}, row digest {:016x}",
            self.rows, self.digest
        );
    }
}

fn produce(shard: &Shard, cfg: &LoaderCfg, tx: &SyncSender<Result<Batch>>, spare: &Receiver<Batch>) -> Result<()> {
    let d = shard.features;
    let k = shard.labels.values().map_or(0, |(_, k)| k);
    let record = log::log_enabled!(log::Level::Debug);
    let (b, g, n) = (cfg.batch, cfg.batch * cfg.ranks, shard.len());
    // The epoch's last `n - n_used` positions are dropped (data.drop_last).
    let n_used = n.min(cfg.steps * g);
    let mut store = if cfg.ids_only {
        Store::Window(Vec::new())
    } else if n * d * 4 <= cfg.cache_bytes {
        debug!("loader: keeping the shard's {n} rows in memory ({} MiB, data.cache_mb)", (n * d * 4) >> 20);
        Store::Cache { x: vec![0.0f32; n * d], have: vec![false; n] }
    } else {
        Store::Window(vec![0.0f32; cfg.window.max(cfg.block) * d])
    };
    let (mut rows, mut need, mut scratch, mut mark) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for epoch in cfg.start_epoch..cfg.epochs {
        let first = if epoch == cfg.start_epoch { cfg.start_batch } else { 0 };
        if first >= cfg.steps {
            continue; // resumed at the very end of this epoch
        }
        let order = Order::new(n, cfg.block, cfg.window, cfg.shuffle, cfg.seed, epoch);
        let mut batch = new_batch(spare, b, d, k);
        let mut used = Used::default();
        let mut next = first;
        for w in 0..order.windows() {
            let (ws, we) = (order.start[w], order.start[w + 1]);
            // Resuming mid-epoch: windows already trained on are neither shuffled nor read.
            if we <= first * g {
                continue;
            }
            if ws >= n_used {
                break;
            }
            let perm = order.perm(w);
            let parts = window_parts(&perm, ws, n_used, g, b, cfg.rank, first, &mut need, &mut scratch);
            order.window_rows(w, &mut rows);
            if !cfg.ids_only {
                used.read += read_needed(shard, &order, w, &rows, &need, &mut mark, &mut store)?;
            }
            for p in parts {
                for &q in &need[p.rows] {
                    let q = q as usize;
                    let x = (!cfg.ids_only).then(|| store.row(q, rows[q], d));
                    push_row(&mut batch, shard, x, rows[q], record);
                }
                if !p.completes {
                    continue; // the step goes on in the next window
                }
                assert_eq!(p.step, next, "the loader's steps come in order");
                next += 1;
                used.count(&batch, b);
                let full = std::mem::replace(&mut batch, new_batch(spare, b, d, k));
                if tx.send(Ok(full)).is_err() {
                    return Ok(()); // the consumer is gone: stop quietly
                }
            }
        }
        if record {
            debug!(
                "loader: epoch {}: used {} rows in {} batches ({} short, {} empty), read {} rows from the files, row digest {:016x}",
                epoch + 1,
                used.rows,
                cfg.steps - first,
                used.short,
                used.empty,
                used.read,
                used.digest
            );
        }
    }
    Ok(())
}

/// Append shard row `row` (its features `x`, already read; None: ids only) to `batch`, with
/// its label and, when `record`, its digest.
fn push_row(batch: &mut Batch, shard: &Shard, x: Option<&[f32]>, row: usize, record: bool) {
    if let Some(x) = x {
        batch.x.extend_from_slice(x);
    }
    batch.ids.push(row as u32);
    match &shard.labels {
        Labels::Classes(c) => batch.classes.push(c[row]),
        Labels::Values(v, k) | Labels::Bits(v, k) => batch.values.extend_from_slice(&v[row * k..(row + 1) * k]),
    }
    if let Some(w) = &shard.sample_weights {
        batch.weights.push(w[row]);
    }
    batch.rows += 1;
    if record {
        let (file, r) = shard.row_id(row);
        batch.digest = batch.digest.wrapping_add(row_digest(file, r));
    }
}

/// Where the loader keeps the rows it has read.
enum Store {
    /// The current window's rows, at their read position.
    Window(Vec<f32>),
    /// Every shard row, at its shard row, and which of them have been read.
    Cache { x: Vec<f32>, have: Vec<bool> },
}

impl Store {
    /// The features of the row at read position `q` of the window, shard row `row`.
    fn row(&self, q: usize, row: usize, d: usize) -> &[f32] {
        match self {
            Store::Window(w) => &w[q * d..(q + 1) * d],
            Store::Cache { x, .. } => &x[row * d..(row + 1) * d],
        }
    }
}

/// Read, of window `w`, the rows at the read positions `need` into `store`: per block, one
/// read of the span from its first to its last needed row (none where the cache has it).
/// Returns the rows read from the files.
fn read_needed(
    shard: &Shard,
    order: &Order,
    w: usize,
    rows: &[usize],
    need: &[u32],
    mark: &mut Vec<bool>,
    store: &mut Store,
) -> Result<usize> {
    let d = shard.features;
    let mut read = 0;
    mark.clear();
    mark.resize(rows.len(), false);
    for &q in need {
        mark[q as usize] = true;
    }
    let mut at = 0;
    for &(_, count) in order.window_blocks(w) {
        let m = &mark[at..at + count];
        if let (Some(lo), Some(hi)) = (m.iter().position(|&x| x), m.iter().rposition(|&x| x)) {
            // A block's rows are contiguous shard rows: the span is rows[a]..rows[a] + (z − a).
            let (a, z) = (at + lo, at + hi + 1);
            match store {
                Store::Window(window) => {
                    shard.read_rows(rows[a], z - a, &mut window[a * d..z * d])?;
                    read += z - a;
                }
                Store::Cache { x, have } => {
                    // The span's runs of rows not read before, each once.
                    let (mut r, end) = (rows[a], rows[a] + (z - a));
                    while r < end {
                        let lo = r + have[r..end].iter().position(|&h| !h).unwrap_or(end - r);
                        let hi = lo + have[lo..end].iter().position(|&h| h).unwrap_or(end - lo);
                        if lo < hi {
                            shard.read_rows(lo, hi - lo, &mut x[lo * d..hi * d])?;
                            have[lo..hi].fill(true);
                            read += hi - lo;
                        }
                        r = hi;
                    }
                }
            }
        }
        at += count;
    }
    Ok(read)
}

fn new_batch(spare: &Receiver<Batch>, b: usize, d: usize, k: usize) -> Batch {
    let mut batch = spare.try_recv().unwrap_or_else(|_| Batch {
        rows: 0,
        x: Vec::with_capacity(b * d),
        classes: Vec::with_capacity(b),
        values: Vec::with_capacity(b * k),
        weights: Vec::with_capacity(b),
        ids: Vec::with_capacity(b),
        digest: 0,
    });
    batch.rows = 0;
    batch.digest = 0;
    batch.x.clear();
    batch.classes.clear();
    batch.values.clear();
    batch.weights.clear();
    batch.ids.clear();
    batch
}

#[cfg(test)]
mod tests {
    use super::super::order::{window_parts, Order, Schedule};

    #[test]
    fn windows_cover_every_row_once() {
        for shuffle in [false, true] {
            let o = Order::new(100, 8, 24, shuffle, 3, 1);
            assert!((0..o.windows()).all(|w| o.window_blocks(w).len() <= 3));
            let mut rows: Vec<usize> = Vec::new();
            let mut buf = Vec::new();
            for w in 0..o.windows() {
                o.window_rows(w, &mut buf);
                assert_eq!(buf.len(), o.start[w + 1] - o.start[w]);
                rows.extend(&buf);
            }
            if !shuffle {
                assert_eq!(rows, (0..100).collect::<Vec<_>>());
            }
            rows.sort();
            assert_eq!(rows, (0..100).collect::<Vec<_>>());
        }
    }

    #[test]
    fn schedule_splits_the_global_batch_and_uses_every_row_once() {
        let s = Schedule::new(153, 48, 3, false);
        assert_eq!((s.steps, s.batch), (4, 16));
        assert_eq!((0..4).map(|i| s.global_rows(i)).collect::<Vec<_>>(), [48, 48, 48, 9]);
        assert_eq!((0..4).map(|i| s.rows(0, i)).collect::<Vec<_>>(), [16, 16, 16, 9]);
        assert_eq!((0..4).map(|i| s.rows(1, i)).collect::<Vec<_>>(), [16, 16, 16, 0]);
        assert_eq!(s.global_rows_in(0, 4), 153);
        assert_eq!(s.global_rows_in(1, 3), 96);
        assert_eq!((s.epoch_rows(0), s.epoch_rows(1), s.epoch_rows(2)), (57, 48, 48));
        assert_eq!(s.rows_before(0, 2), 32);
        let s = Schedule::new(153, 48, 3, true);
        assert_eq!((s.steps, s.used(), s.epoch_rows(2)), (3, 144, 48));
        // A batch larger than the data: one step with everything.
        let s = Schedule::new(11, 12, 3, false);
        assert_eq!((s.steps, s.global_rows(0), s.rows(2, 0)), (1, 11, 3));
        assert_eq!(Schedule::new(11, 12, 3, true).steps, 0);
    }

    #[test]
    fn shuffled_order_depends_on_epoch() {
        let o = |e| Order::new(100, 8, 24, true, 3, e);
        assert_ne!(o(0), o(1));
        assert_eq!(o(2), o(2));
        assert_ne!(o(2).perm(1), o(1).perm(1));
    }

    /// Every step's rows, as the ranks take them, for M ranks: the same sets of rows per step
    /// whatever M, each rank's share its schedule's, every row once.
    fn steps_of(n: usize, g: usize, m: usize, drop_last: bool) -> Vec<Vec<usize>> {
        let s = Schedule::new(n, g, m, drop_last);
        let o = Order::new(n, 8, 24, true, 5, 2);
        let mut steps = vec![Vec::new(); s.steps];
        let (mut need, mut scratch, mut rows) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..m {
            let mut per_step = vec![0; s.steps];
            for w in 0..o.windows() {
                let perm = o.perm(w);
                o.window_rows(w, &mut rows);
                for p in window_parts(&perm, o.start[w], s.used(), g, s.batch, r, 0, &mut need, &mut scratch) {
                    per_step[p.step] += p.rows.len();
                    steps[p.step].extend(need[p.rows].iter().map(|&q| rows[q as usize]));
                }
            }
            assert!((0..s.steps).all(|i| per_step[i] == s.rows(r, i)), "{m} ranks, rank {r}: {per_step:?}");
        }
        steps.iter_mut().for_each(|v| v.sort());
        steps
    }

    #[test]
    fn the_steps_rows_do_not_depend_on_the_rank_count() {
        for drop_last in [false, true] {
            let one = steps_of(100, 12, 1, drop_last);
            for m in [2, 3, 4, 6] {
                assert_eq!(steps_of(100, 12, m, drop_last), one, "{m} ranks, drop_last {drop_last}");
            }
            let mut all: Vec<usize> = one.concat();
            all.sort();
            let want = if drop_last { 96 } else { 100 };
            assert_eq!(all.len(), want);
            all.dedup();
            assert_eq!(all.len(), want, "a row twice");
        }
    }
}
