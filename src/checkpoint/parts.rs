//! Checkpoints written in parts (sharded state, `distribution.shard`): every rank writes its
//! own pieces of the parameters and optimizer state into a file of its own, all ranks at once
//! (with tensor or pipeline parallelism too: each rank's pieces of its shard of its stage,
//! mapped into the whole model's order by `StoredMap`), and rank 0 then writes the index, `ckpt-step{S}.h5`, which holds everything else a
//! checkpoint holds and, in its group `parts`, what binds the parts to it: `token` (a fresh
//! random number of this write, in every part's name), `checksums` (one per part, in rank
//! order) and `optimizer` (whether m and v are there, and a third flag where the moving
//! average is). The index is renamed into place last,
//! after every part is: a crash before leaves the previous checkpoint the newest whole one, and
//! a rewrite of the same step (another token) never touches the parts the old index names.
//!
//! A part, `ckpt-step{S:09}.{token:016x}.part{r}of{k}.h5` (h5py reads it):
//!
//! - `ranges` [n, 2] int64: runs of the stored order, (start, length) each: the positions of
//!   the checkpoint's flat order (`Mlp::unpad`: the layers last to first, each layer's weight
//!   [in, out] then its bias) that this part holds;
//! - `params`, `optimizer/m`, `optimizer/v`, `optimizer/ema`: the values at those runs, end to
//!   end (the moving average only where one is kept; without one a part sums as before it
//!   existed);
//! - `step`, `part`, `parts`, `token`, and `checksum` over all of the above.
//!
//! The parts together hold every position exactly once, in any split: a reader takes the runs
//! it wants from whichever parts hold them (`read`), so a checkpoint written on k ranks resumes
//! on any number, sharded or not, with or without model parallelism. A tensor shard's column
//! slice of a weight is one run per input row.
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
    /// Whether the parts hold optimizer m and v, and the parameters' moving average.
    pub m: bool,
    pub v: bool,
    pub ema: bool,
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

/// Where a rank's arena positions sit in the stored order: runs (arena range, stored start),
/// sorted by arena start, not overlapping. The arena's padding is in none, and neither is,
/// for a rank that writes a tensor-parallel shard, what another rank of its group writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMap {
    runs: Vec<(Range<usize>, usize)>,
}

impl StoredMap {
    /// The whole model's arena: each layer's weight and bias, the layers last to first.
    pub fn whole(model: &Mlp) -> StoredMap {
        let mut at = 0;
        let mut runs: Vec<(Range<usize>, usize)> = Vec::new();
        for s in model.layers.iter().rev() {
            runs.push((s.w.start..s.b.end, at));
            at += s.b.end - s.w.start;
        }
        runs.sort_by_key(|r| r.0.start);
        StoredMap { runs }
    }

    /// A model-parallel rank's arena: `local`, its tensor shard of the whole stage `stage`
    /// (of itself without tensor parallelism), whose arena starts at `offset` in the whole
    /// model `full`'s. `all`: every value the rank holds (what it reads); otherwise (what it
    /// writes) the values every rank of its tensor group holds alike (a row-parallel bias, an
    /// unpaired last layer) only on tensor rank 0, so that the parts hold each value once.
    pub fn shard(full: &Mlp, stage: &Mlp, offset: usize, local: &Mlp, all: bool) -> StoredMap {
        let whole = StoredMap::whole(full);
        let skip_shared = !all && local.tensor.0 != 0;
        let mut runs = Vec::new();
        for (l, w, shared) in crate::model::tensor::runs_in_whole(local, stage) {
            if shared && skip_shared {
                continue;
            }
            let w = w.start + offset..w.end + offset;
            for (from, n, stored) in whole.runs_of(std::slice::from_ref(&w)).0 {
                runs.push((l.start + from..l.start + from + n, stored));
            }
        }
        runs.sort_by_key(|r| r.0.start);
        // Runs that continue each other in both orders (a weight and its bias) as one.
        let mut merged: Vec<(Range<usize>, usize)> = Vec::with_capacity(runs.len());
        for (a, s) in runs {
            match merged.last_mut() {
                Some((b, t)) if b.end == a.start && *t + b.len() == s => b.end = a.end,
                _ => merged.push((a, s)),
            }
        }
        StoredMap { runs: merged }
    }

    /// The stored runs of arena `ranges` (values end to end in that order): (where a run is in
    /// the values, its length, its stored start) in the ranges' order, and the values' length.
    pub fn runs_of(&self, ranges: &[Range<usize>]) -> (Vec<(usize, usize, usize)>, usize) {
        let mut out = Vec::new();
        let mut at = 0;
        for r in ranges {
            let first = self.runs.partition_point(|(a, _)| a.end <= r.start);
            for (a, stored) in &self.runs[first..] {
                if a.start >= r.end {
                    break;
                }
                let ov = crate::parallel::shard::intersect(r, a);
                if !ov.is_empty() {
                    out.push((at + ov.start - r.start, ov.len(), stored + ov.start - a.start));
                }
            }
            at += r.len();
        }
        (out, at)
    }
}

/// The arrays of a part, in the order they are written.
pub const ARRAYS: [&str; 4] = ["params", "optimizer/m", "optimizer/v", "optimizer/ema"];

/// The array whose absence leaves no checksum (files written before it existed sum as then).
const OPTIONAL: &str = "optimizer/ema";

/// One rank's state for its part: its arena ranges, and where the values at them come from.
pub struct Piece<'a> {
    pub ranges: &'a [Range<usize>],
    /// The values of an array of `ARRAYS` at `ranges`, end to end; None where there are none
    /// (an optimizer without m or v). Asked once per array, in `ARRAYS`' order, so that a rank
    /// holds one array of its part at a time.
    pub values: &'a mut dyn FnMut(&str) -> Result<Option<Vec<f32>>>,
}

/// The checksum of an absent array.
const NO_ARRAY: u64 = 0x6e6f_6e65;

/// An array's checksum from its runs' values in order (FNV-1a of each run, chained).
fn array_checksum<'a>(runs: impl Iterator<Item = &'a [f32]>) -> u64 {
    runs.fold(0xcbf2_9ce4_8422_2325u64, |h, v| h.rotate_left(5) ^ crate::parallel::checksum(v))
}

/// A part's checksum: its runs (stored start, length) and each array's checksum.
fn part_checksum(runs: &[i64], arrays: &[u64]) -> u64 {
    let bytes: Vec<u8> = runs.iter().flat_map(|x| x.to_le_bytes()).collect();
    arrays.iter().fold(crate::config::fnv1a(&bytes), |h, &a| h.rotate_left(17) ^ a)
}

/// Write part `r` of `k` of the checkpoint at `step` into `dir` (temporary file, fsync, rename:
/// `weights::commit`; `before_rename` is fault injection): the stored runs (`map`) of the
/// rank's ranges, each array written run by run from the values `p` gives, without another
/// copy. Returns its checksum.
pub fn write(
    dir: &Path,
    map: &StoredMap,
    (step, token): (u64, u64),
    (r, k): (usize, usize),
    p: &mut Piece,
    before_rename: impl FnOnce(),
) -> Result<u64> {
    // (where the run is in the piece's values, its length, its stored start)
    let (runs, at) = map.runs_of(p.ranges);
    let flat: Vec<i64> = runs.iter().flat_map(|&(_, n, s)| [s as i64, n as i64]).collect();
    let total: usize = runs.iter().map(|r| r.1).sum();
    let path = dir.join(name(step, token, r, k));
    let tmp = crate::weights::tmp_path(&path);
    let mut sums = Vec::new();
    {
        let f = h5::create(&tmp)?;
        for (field, x) in [("format", 1), ("step", step as i64), ("part", r as i64), ("parts", k as i64)] {
            h5::write(&f, &tmp, field, &[x], &[1])?;
        }
        h5::write(&f, &tmp, "token", &[token], &[1])?;
        h5::write(&f, &tmp, "ranges", &flat, &[runs.len(), 2])?;
        for field in ARRAYS {
            let Some(values) = (p.values)(field)? else {
                if field != OPTIONAL {
                    sums.push(NO_ARRAY);
                }
                continue;
            };
            assert_eq!(values.len(), at, "{field}: the values of the ranges");
            if field.starts_with("optimizer/") && f.group("optimizer").is_err() {
                f.create_group("optimizer").map_err(|e| Error::hdf5(&tmp, "create group", e))?;
            }
            let ds = f
                .new_dataset::<f32>()
                .shape([total])
                .create(field)
                .map_err(|e| Error::hdf5(&tmp, format!("create dataset {field}"), e))?;
            let mut d = 0;
            for &(from, n, _) in &runs {
                ds.write_slice(&values[from..from + n], d..d + n)
                    .map_err(|e| Error::hdf5(&tmp, format!("write {field}"), e))?;
                d += n;
            }
            sums.push(array_checksum(runs.iter().map(|&(from, n, _)| &values[from..from + n])));
        }
        let sum = part_checksum(&flat, &sums);
        h5::write(&f, &tmp, "checksum", &[sum], &[1])?;
        f.flush().map_err(|e| Error::hdf5(&tmp, "flush", e))?;
    }
    crate::weights::commit(&tmp, &path, "rename the finished checkpoint part into place", before_rename)?;
    Ok(part_checksum(&flat, &sums))
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
    if ds.ndim() != 2 || !flat.len().is_multiple_of(2) || flat.iter().any(|&x| x < 0) {
        return Err(Error::data(&path, "ranges", "is not [n, 2] of (start, length) ≥ 0"));
    }
    let runs = flat.chunks(2).map(|c| (c[0] as usize, c[1] as usize)).collect();
    Ok(Open { f, path, runs })
}

/// The whole dataset `name` of a part; None when it has none.
fn read_all(o: &Open, name: &str) -> Result<Option<Vec<f32>>> {
    match o.f.dataset(name) {
        Ok(ds) => ds.read_raw().map(Some).map_err(|e| Error::hdf5(&o.path, format!("read {name}"), e)),
        Err(_) => Ok(None),
    }
}

/// Every part of `parts` checked against its index (`verify_part`), and the parts together
/// holding each position of `model`'s stored order exactly once (`check_coverage`); one part
/// in memory at a time.
pub fn verify(parts: &Parts, step: u64, model: &Mlp) -> Result<()> {
    let mut runs = Vec::with_capacity(parts.checksums.len());
    for r in 0..parts.checksums.len() {
        runs.push(verify_part(parts, step, r)?);
    }
    check_coverage(parts, step, model, &runs)
}

/// Part `r` of `parts` checked against its index (name, step, token, checksum, its datasets'
/// lengths): its runs of the stored order, (start, length) each.
pub fn verify_part(parts: &Parts, step: u64, r: usize) -> Result<Vec<(usize, usize)>> {
    let want = parts.checksums[r];
    let o = open(parts, step, r)?;
    let n: usize = o.runs.iter().map(|r| r.1).sum();
    let mut sums = Vec::new();
    for (field, there) in ARRAYS.into_iter().zip([true, parts.m, parts.v, parts.ema]) {
        let a = read_all(&o, field)?;
        if a.is_none() && field == OPTIONAL && !there {
            continue;
        }
        match &a {
            Some(a) if a.len() != n => {
                return Err(Error::data(&o.path, field, format!("has {} values for runs of {n}", a.len())))
            }
            None if there => return Err(Error::data(&o.path, field, "is missing")),
            _ => {}
        }
        sums.push(a.map_or(NO_ARRAY, |a| {
            let mut at = 0;
            array_checksum(o.runs.iter().map(|&(_, len)| {
                at += len;
                &a[at - len..at]
            }))
        }));
    }
    let runs: Vec<i64> = o.runs.iter().flat_map(|&(s, n)| [s as i64, n as i64]).collect();
    if part_checksum(&runs, &sums) != want || one::<u64>(&o.f, &o.path, "checksum")? != want {
        return Err(Error::data(&o.path, "checksum", "does not match the contents or the index: the part is damaged"));
    }
    Ok(o.runs)
}

/// Whether the parts' runs (`runs[r]`: part r's, from `verify_part`) hold each position of
/// `model`'s stored order exactly once.
pub fn check_coverage(parts: &Parts, step: u64, model: &Mlp, runs: &[Vec<(usize, usize)>]) -> Result<()> {
    let mut all: Vec<(usize, usize, usize)> =
        runs.iter().enumerate().flat_map(|(r, v)| v.iter().map(move |&(s, n)| (s, n, r))).collect();
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

/// The values of `name` (one of `ARRAYS`) at arena ranges `want` of
/// the arena `map` describes, end to end (the padding zeros), read from whichever parts hold
/// them, a slice at a time: a rank's own pieces without the rest, or with `[0..n_params]` its
/// whole arena.
pub fn read(parts: &Parts, step: u64, map: &StoredMap, name: &str, want: &[Range<usize>]) -> Result<Vec<f32>> {
    // (stored start, length, where it goes in the output), by stored start
    let (runs, at) = map.runs_of(want);
    let mut targets: Vec<(usize, usize, usize)> = runs.into_iter().map(|(to, n, s)| (s, n, to)).collect();
    targets.sort_unstable();
    let mut out = crate::mem::zeros(at)?;
    for r in 0..parts.checksums.len() {
        let o = open(parts, step, r)?;
        let ds = h5::dataset(&o.f, &o.path, name)?;
        let mut d = 0;
        for &(s, n) in &o.runs {
            let first = targets.partition_point(|&(ts, tn, _)| ts + tn <= s);
            for &(ts, tn, to) in &targets[first..] {
                if ts >= s + n {
                    break;
                }
                let ov = crate::parallel::shard::intersect(&(s..s + n), &(ts..ts + tn));
                if ov.is_empty() {
                    continue;
                }
                let from = d + ov.start - s..d + ov.end - s;
                let v = ds
                    .read_slice_1d::<f32, _>(from)
                    .map_err(|e| Error::hdf5(&o.path, format!("read part of {name}"), e))?;
                let dst = to + ov.start - ts;
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
