//! Which checkpoints belong to which run: `--resume auto`'s choice (the live run's newest
//! checkpoint that loads and verifies, damaged ones skipped with a warning), keep-K within the
//! live run's lineage (its own files and its ancestors' up to where it branched off), and the
//! files of an abandoned branch (newer checkpoints of the run resumed from), which neither
//! chooses nor deletes.
//!
//! Must not: delete a checkpoint outside the live lineage.

use super::{list, load_index_by, parts, Checkpoint, Lineage};
use crate::error::{CheckpointKind, Error, Result};
use crate::model::Mlp;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// What `--resume auto` and keep-K need of a checkpoint, read without its arrays.
#[derive(Clone, Debug)]
struct Meta {
    step: u64,
    path: PathBuf,
    /// None when unreadable (damaged, or not a checkpoint).
    lineage: Option<Lineage>,
    written_at: i64,
}

fn meta(step: u64, path: PathBuf) -> Meta {
    let read = || -> Option<(Lineage, i64)> {
        let f = hdf5::File::open(&path).ok()?;
        let one = |name: &str| f.dataset(name).ok()?.read_raw::<i64>().ok()?.first().copied();
        let one_u = |name: &str| f.dataset(name).ok()?.read_raw::<u64>().ok()?.first().copied();
        let format = one("format")?;
        if format < 2 {
            return Some((Lineage::LEGACY, i64::MIN));
        }
        let l =
            Lineage { run_id: one_u("run_id")?, parent_run: one_u("parent_run")?, parent_step: one("parent_step")? };
        Some((l, one("written_at")?))
    };
    match read() {
        Some((l, t)) => Meta { step, path, lineage: Some(l), written_at: t },
        None => Meta { step, path, lineage: None, written_at: i64::MIN },
    }
}

/// The checkpoints of `dir` that belong to the lineage of `run`: its own, and its ancestors'
/// up to the step each child branched off at. Unreadable files count as members (so that
/// damaged files still age out). Newest (highest step) first.
fn lineage_members(metas: &[Meta], run: Lineage) -> Vec<&Meta> {
    // Every run's own lineage, from any of its files.
    let runs: HashMap<u64, Lineage> = metas.iter().filter_map(|m| m.lineage).map(|l| (l.run_id, l)).collect();
    let mut members: Vec<&Meta> = metas.iter().filter(|m| m.lineage.is_none()).collect();
    let (mut cur, mut limit, mut seen) = (run, u64::MAX, HashSet::new());
    loop {
        members.extend(metas.iter().filter(|m| m.lineage.is_some_and(|l| l.run_id == cur.run_id) && m.step <= limit));
        if cur.parent_step < 0 || !seen.insert(cur.run_id) {
            break;
        }
        limit = cur.parent_step as u64;
        match runs.get(&cur.parent_run) {
            Some(p) => cur = *p,
            None => break, // none of the parent's files is left
        }
    }
    members.sort_by(|a, b| b.step.cmp(&a.step).then(b.written_at.cmp(&a.written_at)));
    members
}

/// Keep-K within `c`'s lineage: delete all but its newest `keep` checkpoints; files of other
/// lineages (an abandoned branch, another run) are left alone.
pub(super) fn prune(dir: &Path, c: &Checkpoint, keep: usize) {
    let metas: Vec<Meta> = list(dir).into_iter().map(|(s, p)| meta(s, p)).collect();
    for m in lineage_members(&metas, c.lineage).into_iter().skip(keep.max(1)) {
        if m.step != c.step {
            let _ = std::fs::remove_file(&m.path);
        }
    }
}

/// The live run's newest checkpoint in `dir` that loads and verifies: candidates are tried
/// most recently written first (format-1 files, which carry no time, by step after them),
/// damaged ones skipped with a warning. A checkpoint of another model or format is an error.
/// One in parts is returned as its index (`load_index`: checked, not put together).
#[cfg(test)]
pub fn newest_valid(dir: &Path, model: &Mlp) -> Result<Option<(PathBuf, Checkpoint)>> {
    newest_valid_by(dir, model, true, &mut parts::verify)
}

/// How `--resume auto` ranks usable checkpoints, highest first: the most recently written
/// (the run that stopped last), then the higher step (`hvtrain checkpoint check` names the
/// same choice).
pub(super) fn preference(written_at: i64, step: u64) -> (i64, u64) {
    (written_at, step)
}

/// `newest_valid`, each candidate loaded by `load_index_by` with `keep_whole` and
/// `verify_parts`.
pub fn newest_valid_by(
    dir: &Path,
    model: &Mlp,
    keep_whole: bool,
    verify_parts: &mut dyn FnMut(&parts::Parts, u64, &Mlp) -> Result<()>,
) -> Result<Option<(PathBuf, Checkpoint)>> {
    let mut metas: Vec<Meta> = list(dir).into_iter().map(|(s, p)| meta(s, p)).collect();
    metas.sort_by_key(|m| std::cmp::Reverse(preference(m.written_at, m.step)));
    // Unreadable files sort last; say so when one of them has a higher step than the choice.
    let unreadable: Vec<Meta> = metas.iter().filter(|m| m.lineage.is_none()).cloned().collect();
    for m in metas {
        match load_index_by(&m.path, model, keep_whole, verify_parts) {
            Ok(c) => {
                for u in unreadable.iter().filter(|u| u.step > c.step) {
                    if let Err(e) = load_index_by(&u.path, model, keep_whole, verify_parts) {
                        log::warn!("skipping checkpoint {}: {e}", u.path.display());
                    }
                }
                return Ok(Some((m.path, c)));
            }
            Err(e @ Error::Checkpoint { kind: CheckpointKind::OtherModel | CheckpointKind::Format, .. }) => {
                return Err(e)
            }
            Err(e) => log::warn!("skipping checkpoint {}: {e}", m.path.display()),
        }
    }
    Ok(None)
}

/// The checkpoints of `dir` in the live lineage, (step, path), highest step first: the run of
/// the most recently written checkpoint (the one `--resume auto` continues) and its ancestors'
/// up to where each branched off; an abandoned branch's files are left out (unreadable files
/// are in, to be found damaged by whoever reads them). All of them where none is readable.
pub fn live(dir: &Path) -> Vec<(u64, PathBuf)> {
    let metas: Vec<Meta> = list(dir).into_iter().map(|(s, p)| meta(s, p)).collect();
    let newest = metas.iter().filter(|m| m.lineage.is_some()).max_by_key(|m| preference(m.written_at, m.step));
    match newest.and_then(|m| m.lineage) {
        Some(run) => lineage_members(&metas, run).into_iter().map(|m| (m.step, m.path.clone())).collect(),
        None => metas.into_iter().map(|m| (m.step, m.path)).collect(),
    }
}

/// Checkpoints in `dir` with a higher step than the one `run` resumed from that are not in
/// its lineage: an abandoned branch, which `--resume auto` will not choose and keep-K will not
/// delete (for the start-up log).
pub fn abandoned_newer(dir: &Path, run: Lineage) -> Vec<PathBuf> {
    let metas: Vec<Meta> = list(dir).into_iter().map(|(s, p)| meta(s, p)).collect();
    let from = run.parent_step.max(0) as u64;
    let members: HashSet<&Path> = lineage_members(&metas, run).into_iter().map(|m| m.path.as_path()).collect();
    let mut v: Vec<PathBuf> =
        metas.iter().filter(|m| m.step > from && !members.contains(m.path.as_path())).map(|m| m.path.clone()).collect();
    v.sort();
    v
}
