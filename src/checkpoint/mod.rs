//! Checkpoints: everything needed to continue a run exactly, in one HDF5 file per save,
//! `OUTPUT_DIR/ckpt-step000001234.h5`, readable with h5py:
//!
//! - `dense{l}/weight`, `dense{l}/bias`, `layers`: the parameters, laid out as `weights.h5`
//!   (the same writer, `weights::write_layers`), so `eval --weights` and `predict --weights`
//!   take a checkpoint as well;
//! - `optimizer/m`, `optimizer/v`: momentum / Adam moments (absent when the optimizer has none);
//! - `optimizer/ema`: the parameters' moving average (`optimizer.ema`; absent without one),
//!   flat in the stored order as m and v are;
//! - `step`, `epoch`, `step_in_epoch`, `global_batch` (format 3): where training stands. The
//!   data order is a pure function of (seed, epoch, global row), and step s of an epoch takes
//!   its positions [s·global_batch, (s+1)·global_batch), so this position is all the loader
//!   needs, on any number of ranks that divides `global_batch`. `world_size` is the writer's
//!   data-parallel degree (ranks / parallel.tensor), for the log: the parameters are always the
//!   whole model and the optimizer state is replicated, so any degrees resume;
//! - `loss_sums`: each rank's running loss sum in the current epoch, so its metrics are exact;
//!   `loss_sums_exact` is 0 when rank 0 wrote a stop checkpoint on its own and estimated the
//!   other ranks' last batch;
//! - lineage (format 2): `run_id` (new at every start), `parent_run` and `parent_step` (the
//!   checkpoint that run resumed from; `parent_step` -1 for a fresh run), `written_at` (Unix
//!   milliseconds);
//! - `trainer_json` (format 4): the trainer's own state as JSON (UTF-8 bytes): the learning
//!   rate's plateau state (`train::trainer::TrainerState`); `{}` when read from older formats;
//! - `train_sums` (format 5): [data ranks, W], each rank's running sums of the epoch's train
//!   metrics besides the loss (correct predictions, top-5 hits, Σ|e|, Σe² per output: see
//!   `step::Sums`); empty when read from older formats (the resumed epoch's train metrics then
//!   start from zero);
//! - `job_json`: the job configuration (UTF-8 bytes); `checksum`: FNV-1a over all of the above;
//! - `parts` (format 6, sharded state): the parameters and optimizer state are not in this
//!   file but in one file per data rank, written by all ranks at once, which this one (the
//!   index) names: see `parts.rs`. `dense{l}` and `optimizer` are then absent; `load` puts the
//!   parts together, `load_index` only checks them, and a sharded resume reads each rank's
//!   pieces from them (`parts::read`). A whole checkpoint resumed sharded or under model
//!   parallelism is checked without holding its arrays and read in pieces the same way
//!   (`whole.rs`).
//!
//! Writing is atomic and durable (temporary file, fsync, rename, fsync of the directory:
//! `weights::commit`): a crash mid-write never damages the newest good checkpoint.
//!
//! Lineage: after `--resume` from an older checkpoint, the files of the abandoned run with
//! higher steps are still there. `--resume auto` takes the most recently written valid
//! checkpoint (the live run's newest), and keep-K counts only the live run's lineage (its own
//! files and its ancestors' up to where it branched off), never deleting other files.
//!
//! Must not: decide when to checkpoint or gather state (the training loop and its mode do).

use crate::data::h5;
use crate::error::{CheckpointKind, Error, Result};
use crate::model::Mlp;
use std::path::{Path, PathBuf};

pub mod average;
pub mod inspect;
mod lineage;
pub mod parts;
pub mod whole;

#[cfg(test)]
pub use lineage::newest_valid;
pub use lineage::{abandoned_newer, newest_valid_by};

/// The format written; format 1 (no lineage), 2 (no `global_batch`), 3 (no
/// `trainer_json`), 4 (no `train_sums`) and 5 (never in parts) are still read.
pub const FORMAT: i64 = 6;

/// Which run wrote a checkpoint, and where that run came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lineage {
    pub run_id: u64,
    /// The run this one resumed from (meaningful when `parent_step >= 0`).
    pub parent_run: u64,
    /// The step it resumed from; -1 for a fresh run.
    pub parent_step: i64,
}

impl Lineage {
    /// A new run: a fresh random id, with the checkpoint it resumes from (if any) as parent.
    pub fn new_run(parent: Option<&Checkpoint>) -> Lineage {
        Lineage {
            run_id: fresh_run_id(),
            parent_run: parent.map_or(0, |c| c.lineage.run_id),
            parent_step: parent.map_or(-1, |c| c.step as i64),
        }
    }
    /// What a format-1 checkpoint (written before lineage existed) counts as.
    const LEGACY: Lineage = Lineage { run_id: 0, parent_run: 0, parent_step: -1 };
}

/// Not 0 (the id of format-1 checkpoints): time, process id and address-space randomness.
fn fresh_run_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    h.finish().max(1)
}

/// Unix time in milliseconds, for `written_at`.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub step: u64,
    pub epoch: usize,
    pub step_in_epoch: usize,
    pub world_size: usize,
    /// Rows per step over all ranks; 0 when read from format 1 or 2 (the caller derives it).
    pub global_batch: usize,
    pub loss_sums: Vec<f64>,
    /// The same number of sums per entry of `loss_sums`, rank after rank (empty: none known).
    pub train_sums: Vec<f64>,
    /// False when the other ranks' last batch losses were estimated (a stop checkpoint that
    /// rank 0 wrote without hearing from them).
    pub loss_sums_exact: bool,
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    /// The parameters' moving average (`optimizer.ema`; empty: none kept).
    pub ema: Vec<f32>,
    pub job_json: String,
    /// The trainer's state (JSON; "{}" before format 4).
    pub trainer_json: String,
    /// The data's normalization (the `normalization` group, as in weights.h5).
    pub norm: crate::data::norm::Norm,
    /// The training data's class and column names (root attributes, as in weights.h5), so
    /// that `predict` and `checkpoint average` name the classes of a checkpoint's model. Not
    /// in the checksum: they describe the outputs, training does not read them back.
    pub names: crate::weights::Names,
    pub lineage: Lineage,
    /// Unix milliseconds; i64::MIN for format 1.
    pub written_at: i64,
    /// Where the parameters and optimizer state are when written in parts (sharded state):
    /// `params`, `m` and `v` are then empty until `assemble` reads them.
    pub parts: Option<parts::Parts>,
    /// A whole checkpoint read without its arrays (`load_index_by` with `keep_whole` false):
    /// checked, and left in the file for each rank to read its own pieces of (`read_stored`);
    /// `params`, `m` and `v` are then empty.
    pub unread: Option<whole::Unread>,
}

/// Where the arrays of a checkpoint that does not hold them are: its parts, or its own file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Parts(parts::Parts),
    Whole(whole::Unread),
}

impl Source {
    /// Whether the arrays keep the parameters' moving average (`optimizer/ema`).
    pub fn keeps_ema(&self) -> bool {
        match self {
            Source::Parts(p) => p.ema,
            Source::Whole(u) => u.ema > 0,
        }
    }
}

/// The values of `name` ("params", "optimizer/m", "optimizer/v") at arena ranges `want` of the
/// arena `map` describes, from `src` (of the checkpoint at `step` of `model`, the whole model),
/// a slice at a time: a rank's own pieces without the rest.
pub fn read_stored(
    src: &Source,
    step: u64,
    model: &Mlp,
    map: &parts::StoredMap,
    name: &str,
    want: &[std::ops::Range<usize>],
) -> Result<Vec<f32>> {
    match src {
        Source::Parts(p) => parts::read(p, step, map, name, want),
        Source::Whole(u) => whole::read(u, model, map, name, want),
    }
}

impl Checkpoint {
    /// Over the arenas as stored (without the arena's padding, `Mlp::unpad`), so that it
    /// does not change with the padding.
    fn checksum(&self, model: &Mlp, format: i64) -> u64 {
        let arrays = [&self.params, &self.m, &self.v].map(|a| stored_checksum(model, a));
        let ema = (!self.ema.is_empty()).then(|| stored_checksum(model, &self.ema));
        self.checksum_of(arrays, ema, format)
    }

    /// `checksum` with the checksums of params, m and v given (`stored_checksum`, or streamed
    /// from a file: `whole::checksums`), and the moving average's where there is one (a file
    /// without one sums as before it existed).
    fn checksum_of(&self, arrays: [u64; 3], ema: Option<u64>, format: i64) -> u64 {
        let mut h = arrays[0];
        for a in arrays[1..].iter().chain(&ema) {
            h = h.rotate_left(17) ^ a;
        }
        let mut ints = vec![self.step, self.epoch as u64, self.step_in_epoch as u64, self.world_size as u64];
        if format >= 2 {
            let l = &self.lineage;
            ints.extend([l.run_id, l.parent_run, l.parent_step as u64, self.written_at as u64]);
            ints.push(u64::from(self.loss_sums_exact));
        }
        if format >= 3 {
            ints.push(self.global_batch as u64);
        }
        let mut bytes: Vec<u8> = ints.iter().flat_map(|i| i.to_le_bytes()).collect();
        bytes.extend(self.loss_sums.iter().flat_map(|x| x.to_le_bytes()));
        bytes.extend(self.job_json.as_bytes());
        if format >= 4 {
            bytes.extend(self.trainer_json.as_bytes());
            let n = &self.norm;
            for v in [&n.x_shift, &n.x_div, &n.y_shift, &n.y_div] {
                bytes.extend(v.iter().flat_map(|x| x.to_le_bytes()));
            }
            bytes.extend(n.x_kind.name().as_bytes());
        }
        if format >= 5 {
            bytes.extend(self.train_sums.iter().flat_map(|x| x.to_le_bytes()));
        }
        if let Some(p) = &self.parts {
            let ema = p.ema.then_some(1);
            let words =
                [p.token, u64::from(p.m), u64::from(p.v)].into_iter().chain(ema).chain(p.checksums.iter().copied());
            bytes.extend(words.flat_map(|x| x.to_le_bytes()));
        }
        h ^ crate::config::fnv1a(&bytes)
    }
}

pub fn file_name(step: u64) -> String {
    format!("ckpt-step{step:09}.h5")
}

/// Checkpoints in `dir`, newest (highest step) first.
pub fn list(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let step = name.strip_prefix("ckpt-step")?.strip_suffix(".h5")?.parse().ok()?;
            Some((step, e.path()))
        })
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.0));
    v
}

/// Delete the temporary files a crash mid-write leaves (`ckpt-step*.h5.tmp`,
/// `weights.h5.tmp`); returns their names.
pub fn remove_stale_tmp(dir: &Path) -> Vec<String> {
    let mut gone = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(name) = e.file_name().into_string() else { continue };
        let ours = (name.starts_with("ckpt-step") && name.ends_with(".h5.tmp")) || name == "weights.h5.tmp";
        if ours && std::fs::remove_file(e.path()).is_ok() {
            gone.push(name);
        }
    }
    gone.sort();
    gone
}

/// The runs of `a` that make up what a checkpoint stores of it: an arena of `model`'s layout
/// without the padding (`Mlp::stored_runs`); another length, as read from a file that did not
/// fit, as it is.
fn stored_runs<'a>(model: &'a Mlp, a: &'a [f32]) -> Box<dyn Iterator<Item = &'a [f32]> + 'a> {
    if a.len() == model.n_params {
        Box::new(model.stored_runs().map(move |r| &a[r]))
    } else {
        Box::new(std::iter::once(a))
    }
}

/// `parallel::checksum` of `a` as stored (`stored_runs`), without a copy.
fn stored_checksum(model: &Mlp, a: &[f32]) -> u64 {
    let mut c = crate::parallel::Checksum::new();
    stored_runs(model, a).for_each(|r| c.add(r));
    c.finish()
}

/// Dataset `name` of `f`: `a` as stored (`stored_runs`), written run by run, without a copy.
fn write_stored(f: &hdf5::File, path: &Path, name: &str, model: &Mlp, a: &[f32]) -> Result<()> {
    let total: usize = stored_runs(model, a).map(|r| r.len()).sum();
    let ds = f
        .new_dataset::<f32>()
        .shape([total])
        .create(name)
        .map_err(|e| Error::hdf5(path, format!("create dataset {name}"), e))?;
    let mut at = 0;
    for r in stored_runs(model, a) {
        ds.write_slice(r, at..at + r.len()).map_err(|e| Error::hdf5(path, format!("write {name}"), e))?;
        at += r.len();
    }
    Ok(())
}

/// Write `c` atomically into `dir`, then delete all but the newest `keep` checkpoints of its
/// lineage. `before_rename` runs when the temporary file is complete (fault injection).
pub fn save(dir: &Path, model: &Mlp, c: &Checkpoint, keep: usize, before_rename: impl FnOnce()) -> Result<PathBuf> {
    let path = dir.join(file_name(c.step));
    let tmp = crate::weights::tmp_path(&path);
    {
        let f = h5::create(&tmp)?;
        match &c.parts {
            None => crate::weights::write_layers(&f, &tmp, model, &c.params, &c.norm)?,
            Some(p) => {
                crate::weights::write_head(&f, &tmp, model, &c.norm)?;
                f.create_group("parts").map_err(|e| Error::hdf5(&tmp, "create group", e))?;
                h5::write(&f, &tmp, "parts/token", &[p.token], &[1])?;
                h5::write(&f, &tmp, "parts/checksums", &p.checksums, &[p.checksums.len()])?;
                // (m, v) and, only where there is one, the moving average: as before it existed.
                let mut has = vec![i64::from(p.m), i64::from(p.v)];
                has.extend(p.ema.then_some(1));
                h5::write(&f, &tmp, "parts/optimizer", &has, &[has.len()])?;
            }
        }
        crate::weights::write_all_names(&f, &tmp, &c.names)?;
        if !c.m.is_empty() || !c.v.is_empty() || !c.ema.is_empty() {
            f.create_group("optimizer").map_err(|e| Error::hdf5(&tmp, "create group", e))?;
        }
        for (name, a) in [("optimizer/m", &c.m), ("optimizer/v", &c.v), ("optimizer/ema", &c.ema)] {
            if !a.is_empty() {
                write_stored(&f, &tmp, name, model, a)?;
            }
        }
        let l = &c.lineage;
        for (name, v) in [
            ("format", FORMAT),
            ("step", c.step as i64),
            ("epoch", c.epoch as i64),
            ("step_in_epoch", c.step_in_epoch as i64),
            ("world_size", c.world_size as i64),
            ("global_batch", c.global_batch as i64),
            ("loss_sums_exact", i64::from(c.loss_sums_exact)),
            ("parent_step", l.parent_step),
            ("written_at", c.written_at),
        ] {
            h5::write(&f, &tmp, name, &[v], &[1])?;
        }
        h5::write(&f, &tmp, "run_id", &[l.run_id], &[1])?;
        h5::write(&f, &tmp, "parent_run", &[l.parent_run], &[1])?;
        h5::write(&f, &tmp, "loss_sums", &c.loss_sums, &[c.loss_sums.len()])?;
        let n = c.loss_sums.len().max(1);
        assert_eq!(c.train_sums.len() % n, 0, "as many train sums for every rank");
        h5::write(&f, &tmp, "train_sums", &c.train_sums, &[n, c.train_sums.len() / n])?;
        h5::write(&f, &tmp, "job_json", c.job_json.as_bytes(), &[c.job_json.len()])?;
        h5::write(&f, &tmp, "trainer_json", c.trainer_json.as_bytes(), &[c.trainer_json.len()])?;
        h5::write(&f, &tmp, "checksum", &[c.checksum(model, FORMAT)], &[1])?;
        f.flush().map_err(|e| Error::hdf5(&tmp, "flush", e))?;
    }
    crate::weights::commit(&tmp, &path, "rename the finished checkpoint into place", before_rename)?;
    lineage::prune(dir, c, keep);
    // The parts of the checkpoints just deleted, and of the one this replaced at this step.
    for p in parts::orphans(dir) {
        let _ = std::fs::remove_file(p);
    }
    Ok(path)
}

fn read1(f: &hdf5::File, path: &Path, name: &str) -> Result<i64> {
    let v: Vec<i64> =
        h5::dataset(f, path, name)?.read_raw().map_err(|e| Error::hdf5(path, format!("read {name}"), e))?;
    v.first().copied().ok_or_else(|| Error::data(path, name, "is empty"))
}

fn read1_u64(f: &hdf5::File, path: &Path, name: &str) -> Result<u64> {
    let v: Vec<u64> =
        h5::dataset(f, path, name)?.read_raw().map_err(|e| Error::hdf5(path, format!("read {name}"), e))?;
    v.first().copied().ok_or_else(|| Error::data(path, name, "is empty"))
}

/// Any error while reading a checkpoint that is not already typed means damage.
pub fn damaged(e: Error) -> Error {
    match e {
        Error::Data { file, field, msg } => Error::checkpoint(file, field, CheckpointKind::Damaged, msg),
        Error::Hdf5 { file, what, source } => {
            Error::checkpoint(file, what, CheckpointKind::Damaged, format!("{source} (is the file damaged?)"))
        }
        Error::Io { file, what, source } => Error::checkpoint(file, what, CheckpointKind::Damaged, source.to_string()),
        other => other,
    }
}

/// Load and verify a checkpoint for `model`: shapes, format and checksum; one written in
/// parts put together whole. Errors are `Error::Checkpoint`, whose kind tells damage from
/// another model's file.
pub fn load(path: &Path, model: &Mlp) -> Result<Checkpoint> {
    let mut c = load_index(path, model)?;
    assemble(&mut c, model)?;
    Ok(c)
}

/// The parameters of a weights file or a checkpoint, for `eval`, `predict` and `export`: the
/// model the file records must be `model` (`weights::check_recorded`), and a checkpoint in
/// parts is checked and put together (`load`).
///
/// A checkpoint of a run with `optimizer.ema` gives its moving average, the weights that run
/// evaluated and wrote into weights.h5 (the trained parameters are for `--resume`).
pub fn params_of(path: &Path, model: &Mlp) -> Result<Vec<f32>> {
    crate::weights::check_recorded(path, model)?;
    let (in_parts, ema) = match hdf5::File::open(path) {
        Ok(f) => (f.group("parts").is_ok(), f.dataset("optimizer/ema").is_ok() || ema_in_parts(&f)),
        Err(_) => (false, false),
    };
    if ema {
        log::info!("{}: the checkpoint's moving average of the parameters (optimizer.ema)", path.display());
    }
    if in_parts || ema {
        let c = load(path, model)?;
        Ok(if c.ema.is_empty() { c.params } else { c.ema })
    } else {
        crate::weights::load(model, path)
    }
}

/// Whether the index of a checkpoint in parts says its parts hold a moving average.
fn ema_in_parts(f: &hdf5::File) -> bool {
    let flags = f.dataset("parts/optimizer").and_then(|d| d.read_raw::<i64>());
    flags.is_ok_and(|v| v.get(2).is_some_and(|&x| x != 0))
}

/// `load` without putting the parts of a checkpoint in parts together (`params`, `m`, `v`
/// empty): each part is still read and checked, one at a time.
pub fn load_index(path: &Path, model: &Mlp) -> Result<Checkpoint> {
    load_index_by(path, model, true, &mut parts::verify)
}

/// `load_index`, with a whole checkpoint's arrays kept in memory or not (`keep_whole`; not:
/// their checksum streamed, `Checkpoint::unread`), and the parts of one in parts checked by
/// `verify_parts` (`parts::verify`, or the same spread over the ranks of a job).
pub fn load_index_by(
    path: &Path,
    model: &Mlp,
    keep_whole: bool,
    verify_parts: &mut dyn FnMut(&parts::Parts, u64, &Mlp) -> Result<()>,
) -> Result<Checkpoint> {
    let c = load_inner(path, model, keep_whole).map_err(damaged)?;
    if let Some(p) = &c.parts {
        verify_parts(p, c.step, model).map_err(damaged)?;
    }
    Ok(c)
}

/// The parameters and optimizer state of a checkpoint in parts, whole (nothing to do for
/// one that holds them itself).
pub fn assemble(c: &mut Checkpoint, model: &Mlp) -> Result<()> {
    let Some(p) = &c.parts else { return Ok(()) };
    let (whole, map) = ([0..model.n_params], parts::StoredMap::whole(model));
    let read = |name: &str, there: bool| -> Result<Vec<f32>> {
        if there {
            parts::read(p, c.step, &map, name, &whole).map_err(damaged)
        } else {
            Ok(Vec::new())
        }
    };
    let (params, m, v) = (read("params", true)?, read("optimizer/m", p.m)?, read("optimizer/v", p.v)?);
    let ema = read("optimizer/ema", p.ema)?;
    (c.params, c.m, c.v, c.ema) = (params, m, v, ema);
    Ok(())
}

fn load_inner(path: &Path, model: &Mlp, keep_whole: bool) -> Result<Checkpoint> {
    let f = h5::open(path, "--resume")?;
    if f.dataset("ranges").is_ok() && f.dataset("part").is_ok() {
        let index = read1(&f, path, "step").map_or_else(|_| "ckpt-step…h5".into(), |s| file_name(s as u64));
        return Err(Error::checkpoint(
            path,
            "ranges",
            CheckpointKind::Format,
            format!("is one part of a checkpoint written in parts: give its index, {index}, which names every part"),
        ));
    }
    let format = read1(&f, path, "format")?;
    if !(1..=FORMAT).contains(&format) {
        return Err(Error::checkpoint(
            path,
            "format",
            CheckpointKind::Format,
            format!("is {format}; this hvtrain reads checkpoint formats 1 to {FORMAT}"),
        ));
    }
    let sizes: Vec<i64> =
        h5::dataset(&f, path, "layers")?.read_raw().map_err(|e| Error::hdf5(path, "read layers", e))?;
    let want: Vec<i64> = model.sizes.iter().map(|&s| s as i64).collect();
    if sizes != want {
        return Err(Error::checkpoint(path, "layers", CheckpointKind::OtherModel, format!(
            "the checkpoint is of a model with layers {sizes:?}, this job's model.layers is {want:?}; resume with the job that wrote it")));
    }
    let parts = if format >= 6 && f.group("parts").is_ok() {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let has: Vec<i64> = h5::dataset(&f, path, "parts/optimizer")?
            .read_raw()
            .map_err(|e| Error::hdf5(path, "read parts/optimizer", e))?;
        if has.len() != 2 && has.len() != 3 {
            return Err(Error::data(path, "parts/optimizer", "is not two or three flags (m, v, the moving average)"));
        }
        let checksums: Vec<u64> = h5::dataset(&f, path, "parts/checksums")?
            .read_raw()
            .map_err(|e| Error::hdf5(path, "read parts/checksums", e))?;
        if checksums.is_empty() {
            return Err(Error::data(path, "parts/checksums", "is empty"));
        }
        Some(parts::Parts {
            dir: dir.to_path_buf(),
            token: read1_u64(&f, path, "parts/token")?,
            checksums,
            m: has[0] != 0,
            v: has[1] != 0,
            ema: has.get(2).is_some_and(|&x| x != 0),
        })
    } else {
        None
    };
    // A whole checkpoint not kept: its arrays' checksums streamed, the arrays left in the file.
    let (unread, streamed) = if parts.is_none() && !keep_whole {
        let (sums, [m, v, ema]) = whole::checksums(&f, path, model)?;
        (Some(whole::Unread { path: path.to_path_buf(), m, v, ema }), Some(sums))
    } else {
        (None, None)
    };
    let kept = parts.is_none() && unread.is_none();
    let params = if kept { crate::weights::read_params(&f, path, model)? } else { Vec::new() };
    let norm = crate::weights::read_norm(&f, path, model)?;
    let opt = |name: &str| -> Result<Vec<f32>> {
        match f.dataset(name) {
            Ok(ds) if kept => ds.read_raw().map_err(|e| Error::hdf5(path, format!("read {name}"), e)),
            _ => Ok(Vec::new()),
        }
    };
    // Stored without the arena's padding; a length that fits no arena of this model stays as
    // read (the optimizer's check then says it does not fit).
    let padded = |a: Vec<f32>| model.pad(&a).unwrap_or(a);
    let (m, v) = (padded(opt("optimizer/m")?), padded(opt("optimizer/v")?));
    let ema = padded(opt("optimizer/ema")?);
    let loss_sums: Vec<f64> =
        h5::dataset(&f, path, "loss_sums")?.read_raw().map_err(|e| Error::hdf5(path, "read loss_sums", e))?;
    let train_sums: Vec<f64> = if format >= 5 {
        let t: Vec<f64> =
            h5::dataset(&f, path, "train_sums")?.read_raw().map_err(|e| Error::hdf5(path, "read train_sums", e))?;
        if !t.len().is_multiple_of(loss_sums.len().max(1)) {
            return Err(Error::data(
                path,
                "train_sums",
                format!("has {} values for {} ranks", t.len(), loss_sums.len()),
            ));
        }
        t
    } else {
        Vec::new()
    };
    let json: Vec<u8> =
        h5::dataset(&f, path, "job_json")?.read_raw().map_err(|e| Error::hdf5(path, "read job_json", e))?;
    let stored: Vec<u64> =
        h5::dataset(&f, path, "checksum")?.read_raw().map_err(|e| Error::hdf5(path, "read checksum", e))?;
    let (lineage, written_at, loss_sums_exact) = if format >= 2 {
        let l = Lineage {
            run_id: read1_u64(&f, path, "run_id")?,
            parent_run: read1_u64(&f, path, "parent_run")?,
            parent_step: read1(&f, path, "parent_step")?,
        };
        (l, read1(&f, path, "written_at")?, read1(&f, path, "loss_sums_exact")? != 0)
    } else {
        (Lineage::LEGACY, i64::MIN, true)
    };
    let c = Checkpoint {
        step: read1(&f, path, "step")? as u64,
        epoch: read1(&f, path, "epoch")? as usize,
        step_in_epoch: read1(&f, path, "step_in_epoch")? as usize,
        world_size: read1(&f, path, "world_size")? as usize,
        global_batch: if format >= 3 { read1(&f, path, "global_batch")? as usize } else { 0 },
        loss_sums,
        train_sums,
        loss_sums_exact,
        params,
        m,
        v,
        ema,
        job_json: String::from_utf8(json).map_err(|_| Error::data(path, "job_json", "is not UTF-8"))?,
        norm,
        names: crate::weights::read_names_of(&f, path)?,
        trainer_json: if format >= 4 {
            let t: Vec<u8> = h5::dataset(&f, path, "trainer_json")?
                .read_raw()
                .map_err(|e| Error::hdf5(path, "read trainer_json", e))?;
            String::from_utf8(t).map_err(|_| Error::data(path, "trainer_json", "is not UTF-8"))?
        } else {
            "{}".into()
        },
        lineage,
        written_at,
        parts,
        unread,
    };
    let sum = match streamed {
        Some((arrays, ema)) => c.checksum_of(arrays, ema, format),
        None => c.checksum(model, format),
    };
    if stored.first() != Some(&sum) {
        return Err(Error::data(path, "checksum", "does not match the contents: the file is damaged"));
    }
    Ok(c)
}

#[cfg(test)]
mod tests;
