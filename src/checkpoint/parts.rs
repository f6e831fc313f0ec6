//! Checkpoints written in parts (sharded state, `distribution.shard`): every data rank writes
//! its own pieces of the parameters and optimizer state into a file of its own, all ranks at
//! once, and rank 0 then writes the index, `ckpt-step{S}.h5`, which holds everything else a
//! checkpoint holds and, in its group `parts`, what binds the parts to it: `token` (a fresh
//! random number of this write, in every part's name), `checksums` (one per part, in rank
//! order) and `optimizer` (whether m and v are there). The index is renamed into place last,
//! after every part is: a crash before leaves the previous checkpoint the newest whole one, and
//! a rewrite of the same step (another token) never touches the parts the old index names.
//!
//! A part, `ckpt-step{S:09}.{token:016x}.part{r}of{k}.h5` (h5py reads it):
//!
//! - `ranges` [n, 2] int64: runs of the stored order, (start, length) each: the positions of
//!   the checkpoint's flat order (`Mlp::unpad`: the layers last to first, each layer's weight
//!   [in, out] then its bias) that this part holds;
//! - `params`, `optimizer/m`, `optimizer/v`: the values at those runs, end to end;
//! - `step`, `part`, `parts`, `token`, and `checksum` over all of the above.
//!
//! The parts together hold every position exactly once, in any split: a reader takes the runs
//! it wants from whichever parts hold them (`read`), so a checkpoint written on k ranks resumes
//! on any number, sharded or not.
//!
//! Must not: decide which pieces a rank holds (the sharder's layout does) or call MPI.

use crate::data::h5;
use crate::error::{Error, Result};
use crate::model::Mlp;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// What an index says of its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parts {
    /// The folder the index and its parts are in.
    pub dir: PathBuf,
    /// This write's number, in every part's name.
    pub token: u64,
    /// Every part's checksum, in rank order (their count is the number of parts).
    pub checksums: Vec<u64>,
    /// Whether the parts hold optimizer m and v.
    pub m: bool,
    pub v: bool,
}

impl Parts {
    /// Part `r`'s file of the checkpoint at `step`.
    pub fn path(&self, step: u64, r: usize) -> PathBuf {
        self.dir.join(name(step, self.token, r, self.checksums.len()))
    }
}

/// Part `r` of `k`'s file name.
pub fn name(step: u64, token: u64, r: usize, k: usize) -> String {
    format!("ckpt-step{step:09}.{token:016x}.part{r}of{k}.h5")
}

/// The (step, token) of a part's file name; None for any other name.
pub fn parse_name(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix("ckpt-step")?.strip_suffix(".h5")?;
    let mut it = rest.splitn(3, '.');
    let step = it.next()?.parse().ok()?;
    let token = u64::from_str_radix(it.next()?, 16).ok()?;
    it.next()?.strip_prefix("part")?;
    Some((step, token))
}

/// A new token: not the same twice (time, process, address-space randomness).
pub fn fresh_token() -> u64 {
    super::fresh_run_id()
}

/// The runs of arena range `r` that hold parameters (each layer's padding left out), each
/// with where it starts in the stored order.
pub fn stored_runs(model: &Mlp, r: &Range<usize>) -> Vec<(Range<usize>, usize)> {
    let mut at = 0;
    let mut runs = Vec::new();
    for s in model.layers.iter().rev() {
        let span = s.w.start..s.b.end;
        let ov = crate::parallel::shard::intersect(r, &span);
        if !ov.is_empty() {
            runs.push((ov.clone(), at + ov.start - span.start));
        }
        at += span.len();
    }
    runs
}

/// One rank's state for its part: its arena ranges, and the parameters, m and v there, each
/// end to end (m and v empty where the optimizer keeps none).
pub struct Piece<'a> {
    pub ranges: &'a [Range<usize>],
    pub params: &'a [f32],
    pub m: &'a [f32],
    pub v: &'a [f32],
}

fn part_checksum(runs: &[i64], params: &[f32], m: &[f32], v: &[f32]) -> u64 {
    let mut h = crate::parallel::checksum(params);
    for a in [m, v] {
        h = h.rotate_left(17) ^ crate::parallel::checksum(a);
    }
    let bytes: Vec<u8> = runs.iter().flat_map(|x| x.to_le_bytes()).collect();
    h ^ crate::config::fnv1a(&bytes)
}

/// Write part `r` of `k` of the checkpoint at `step` into `dir` (temporary file, fsync, rename:
/// `weights::commit`; `before_rename` is fault injection). Returns its checksum.
pub fn write(
    dir: &Path,
    model: &Mlp,
    (step, token): (u64, u64),
    (r, k): (usize, usize),
    p: &Piece,
    before_rename: impl FnOnce(),
) -> Result<u64> {
    let total: usize = p.ranges.iter().map(|r| r.len()).sum();
    assert_eq!(p.params.len(), total, "the parameters of the ranges");
    let (mut runs, mut params) = (Vec::new(), Vec::with_capacity(total));
    let (mut m, mut v) = (Vec::new(), Vec::new());
    let mut at = 0;
    for range in p.ranges {
        for (ov, stored) in stored_runs(model, range) {
            runs.extend([stored as i64, ov.len() as i64]);
            let here = at + ov.start - range.start..at + ov.end - range.start;
            params.extend_from_slice(&p.params[here.clone()]);
            if !p.m.is_empty() {
                m.extend_from_slice(&p.m[here.clone()]);
            }
            if !p.v.is_empty() {
                v.extend_from_slice(&p.v[here]);
            }
        }
        at += range.len();
    }
    let sum = part_checksum(&runs, &params, &m, &v);
    let path = dir.join(name(step, token, r, k));
    let tmp = crate::weights::tmp_path(&path);
    {
        let f = h5::create(&tmp)?;
        for (field, x) in [("format", 1), ("step", step as i64), ("part", r as i64), ("parts", k as i64)] {
            h5::write(&f, &tmp, field, &[x], &[1])?;
        }
        h5::write(&f, &tmp, "token", &[token], &[1])?;
        h5::write(&f, &tmp, "ranges", &runs, &[runs.len() / 2, 2])?;
        h5::write(&f, &tmp, "params", &params, &[params.len()])?;
        if !m.is_empty() || !v.is_empty() {
            f.create_group("optimizer").map_err(|e| Error::hdf5(&tmp, "create group", e))?;
        }
        for (field, a) in [("optimizer/m", &m), ("optimizer/v", &v)] {
            if !a.is_empty() {
                h5::write(&f, &tmp, field, a, &[a.len()])?;
            }
        }
        h5::write(&f, &tmp, "checksum", &[sum], &[1])?;
        f.flush().map_err(|e| Error::hdf5(&tmp, "flush", e))?;
    }
    crate::weights::commit(&tmp, &path, "rename the finished checkpoint part into place", before_rename)?;
    Ok(sum)
}

/// An open part, checked against its index: the file and its runs (stored start, length).
struct Open {
    f: hdf5::File,
    path: PathBuf,
    runs: Vec<(usize, usize)>,
}

fn one<T: hdf5::H5Type + Copy>(f: &hdf5::File, path: &Path, name: &str) -> Result<T> {
    let v: Vec<T> = h5::dataset(f, path, name)?.read_raw().map_err(|e| Error::hdf5(path, format!("read {name}"), e))?;
    v.first().copied().ok_or_else(|| Error::data(path, name, "is empty"))
}

fn open(parts: &Parts, step: u64, r: usize) -> Result<Open> {
    let path = parts.path(step, r);
    if !path.exists() {
        return Err(Error::data(
            &path,
            "(file)",
            format!("is missing: part {r} of the {} of the checkpoint at step {step}", parts.checksums.len()),
        ));
    }
    let f = h5::open(&path, "--resume")?;
    let k = parts.checksums.len() as i64;
    for (field, want) in [("step", step as i64), ("part", r as i64), ("parts", k)] {
        let got: i64 = one(&f, &path, field)?;
        if got != want {
            return Err(Error::data(&path, field, format!("is {got}, its index says {want}")));
        }
    }
    if one::<u64>(&f, &path, "token")? != parts.token {
        return Err(Error::data(&path, "token", "is not its index's: a part of another write"));
    }
    let ds = h5::dataset(&f, &path, "ranges")?;
    let flat: Vec<i64> = ds.read_raw().map_err(|e| Error::hdf5(&path, "read ranges", e))?;
    if ds.ndim() != 2 || flat.len() % 2 != 0 || flat.iter().any(|&x| x < 0) {
        return Err(Error::data(&path, "ranges", "is not [n, 2] of (start, length) ≥ 0"));
    }
    let runs = flat.chunks(2).map(|c| (c[0] as usize, c[1] as usize)).collect();
    Ok(Open { f, path, runs })
}

fn read_all(o: &Open, name: &str) -> Result<Vec<f32>> {
    match o.f.dataset(name) {
        Ok(ds) => ds.read_raw().map_err(|e| Error::hdf5(&o.path, format!("read {name}"), e)),
        Err(_) => Ok(Vec::new()),
    }
}

/// Every part of `parts` checked against its index (name, step, token, checksum, its datasets'
/// lengths), and the parts together holding each position of `model`'s stored order exactly
/// once; one part in memory at a time.
pub fn verify(parts: &Parts, step: u64, model: &Mlp) -> Result<()> {
    let mut all: Vec<(usize, usize, usize)> = Vec::new();
    for (r, &want) in parts.checksums.iter().enumerate() {
        let o = open(parts, step, r)?;
        let (params, m, v) = (read_all(&o, "params")?, read_all(&o, "optimizer/m")?, read_all(&o, "optimizer/v")?);
        let n: usize = o.runs.iter().map(|r| r.1).sum();
        for (field, a, there) in [("params", &params, true), ("optimizer/m", &m, parts.m), ("optimizer/v", &v, parts.v)]
        {
            if there && a.len() != n {
                return Err(Error::data(&o.path, field, format!("has {} values for runs of {n}", a.len())));
            }
        }
        let runs: Vec<i64> = o.runs.iter().flat_map(|&(s, n)| [s as i64, n as i64]).collect();
        if part_checksum(&runs, &params, &m, &v) != want || one::<u64>(&o.f, &o.path, "checksum")? != want {
            return Err(Error::data(
                &o.path,
                "checksum",
                "does not match the contents or the index: the part is damaged",
            ));
        }
        all.extend(o.runs.iter().map(|&(s, n)| (s, n, r)));
    }
    all.sort_unstable();
    let mut at = 0;
    for (s, n, r) in all {
        if s != at {
            let what = if s < at { "twice" } else { "in no part" };
            return Err(Error::data(
                parts.path(step, r),
                "ranges",
                format!("the parts hold position {} of the stored parameters {what}", s.min(at)),
            ));
        }
        at += n;
    }
    if at != model.n_logical() {
        return Err(Error::data(
            parts.path(step, 0),
            "ranges",
            format!("the parts hold {at} parameters, the model has {}", model.n_logical()),
        ));
    }
    Ok(())
}

/// The values of `name` ("params", "optimizer/m", "optimizer/v") at arena ranges `want` of
/// `model`, end to end (the padding zeros), read from whichever parts hold them, a slice at a
/// time: a rank's own pieces without the rest, or with `[0..n_params]` the whole arena.
pub fn read(parts: &Parts, step: u64, model: &Mlp, name: &str, want: &[Range<usize>]) -> Result<Vec<f32>> {
    let mut targets = Vec::new(); // (stored range, where it goes in the output)
    let mut at = 0;
    for w in want {
        for (ov, stored) in stored_runs(model, w) {
            targets.push((stored..stored + ov.len(), at + ov.start - w.start));
        }
        at += w.len();
    }
    let mut out = crate::mem::zeros(at)?;
    for r in 0..parts.checksums.len() {
        let o = open(parts, step, r)?;
        let ds = h5::dataset(&o.f, &o.path, name)?;
        let mut d = 0;
        for &(s, n) in &o.runs {
            for (t, to) in &targets {
                let ov = crate::parallel::shard::intersect(&(s..s + n), t);
                if ov.is_empty() {
                    continue;
                }
                let from = d + ov.start - s..d + ov.end - s;
                let v = ds
                    .read_slice_1d::<f32, _>(from)
                    .map_err(|e| Error::hdf5(&o.path, format!("read part of {name}"), e))?;
                let dst = to + ov.start - t.start;
                out[dst..dst + ov.len()].copy_from_slice(v.as_slice().expect("1-D is contiguous"));
            }
            d += n;
        }
    }
    Ok(out)
}

/// The part files in `dir` that no index names (their step's index is gone or was rewritten
/// by another write, or never came: a crash between the parts and the index). Only while no
/// checkpoint is being written (start-up, or after an index is in place). The parts of an
/// index that cannot be read are kept (it may be read later, or age out with them).
pub fn orphans(dir: &Path) -> Vec<PathBuf> {
    let mut named: std::collections::HashMap<u64, Named> = Default::default();
    let mut gone = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(name) = e.file_name().into_string() else { continue };
        let Some((step, token)) = parse_name(&name) else { continue };
        let orphan = match named.entry(step).or_insert_with(|| index_names(&dir.join(super::file_name(step)))) {
            Named::Unknown => false,
            Named::Nothing => true,
            Named::Token(t) => *t != token,
        };
        if orphan {
            gone.push(e.path());
        }
    }
    gone.sort();
    gone
}

/// What the index at a path says of its parts.
enum Named {
    /// It cannot be read.
    Unknown,
    /// There is none, or it names no parts.
    Nothing,
    Token(u64),
}

fn index_names(path: &Path) -> Named {
    if !path.exists() {
        return Named::Nothing;
    }
    let Ok(f) = hdf5::File::open(path) else { return Named::Unknown };
    if f.group("parts").is_err() {
        return if f.dataset("format").is_ok() { Named::Nothing } else { Named::Unknown };
    }
    match f.dataset("parts/token").and_then(|d| d.read_raw::<u64>()) {
        Ok(v) if !v.is_empty() => Named::Token(v[0]),
        _ => Named::Unknown,
    }
}
