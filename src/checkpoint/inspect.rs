//! `hvtrain checkpoint check PATH`: a checkpoint, or every checkpoint of an output directory,
//! checked as a resume checks it (format, model, checksum; each part of one written in parts)
//! and described (position, writer, parts, optimizer state, lineage, age); for a directory,
//! the one `--resume auto` would continue from. One process, no MPI, a layer (or a part) in
//! memory at a time: on a login node, before resubmitting a job.
//!
//! Must not: change or delete a file.

use super::{load_index_by, parts, Checkpoint};
use crate::config::{Activation, LossKind};
use crate::data::h5;
use crate::error::Result;
use crate::model::Mlp;
use std::path::{Path, PathBuf};

/// Print the report to stdout; Ok(false) when a checkpoint is damaged or none is found.
pub fn check(path: &Path) -> Result<bool> {
    let files: Vec<PathBuf> =
        if path.is_dir() { super::list(path).into_iter().map(|(_, p)| p).collect() } else { vec![path.to_path_buf()] };
    if files.is_empty() {
        println!("{}: no checkpoints (ckpt-step*.h5) in it", path.display());
        return Ok(false);
    }
    let mut all_ok = true;
    // (written_at, step, path) of each good one: `--resume auto` takes the most recently written.
    let mut good: Vec<(i64, u64, &Path)> = Vec::new();
    for f in &files {
        match checked(f) {
            Ok(c) => {
                println!("{}: ok: {}", f.display(), describe(&c));
                good.push((c.written_at, c.step, f));
            }
            Err(e) => {
                all_ok = false;
                println!("{}: NOT USABLE: {e}", f.display());
            }
        }
    }
    if path.is_dir() {
        match good.iter().max_by_key(|g| super::lineage::preference(g.0, g.1)) {
            Some((_, step, f)) => println!("--resume auto would continue from {} (step {step})", f.display()),
            None => println!("--resume auto would start from the beginning: no usable checkpoint"),
        }
    }
    Ok(all_ok)
}

/// Checkpoint `path` loaded and verified as `--resume` does, without holding its arrays; the
/// model is the file's own layer widths (its layout is all the check needs).
fn checked(path: &Path) -> Result<Checkpoint> {
    let layers: Vec<i64> = {
        let f = h5::open(path, "PATH")?;
        h5::dataset(&f, path, "layers")?.read_raw().map_err(|e| crate::error::Error::hdf5(path, "read layers", e))?
    };
    let widths: Vec<usize> = layers.iter().map(|&w| w.max(0) as usize).collect();
    if widths.len() < 2 || widths.contains(&0) {
        return Err(crate::error::Error::data(path, "layers", format!("is {layers:?}, not a model's widths")));
    }
    let model = Mlp::new(&widths, Activation::Relu, LossKind::SoftmaxCrossEntropy);
    load_index_by(path, &model, false, &mut parts::verify)
}

/// One line about a verified checkpoint.
fn describe(c: &Checkpoint) -> String {
    let stored = match &c.parts {
        Some(p) => format!("in {} parts, each checked", p.checksums.len()),
        None => "whole".to_string(),
    };
    let (m, v, ema) = match (&c.parts, &c.unread) {
        (Some(p), _) => (p.m, p.v, p.ema),
        (None, Some(u)) => (u.m > 0, u.v > 0, u.ema > 0),
        (None, None) => (!c.m.is_empty(), !c.v.is_empty(), !c.ema.is_empty()),
    };
    let opt = match (m, v) {
        (true, true) => "optimizer state m and v",
        (true, false) => "optimizer state m",
        _ => "no optimizer state",
    };
    let ema = if ema { " and the weights' moving average (optimizer.ema)" } else { "" };
    let l = &c.lineage;
    let from = if l.parent_step >= 0 {
        format!(", resumed from run {:016x} at step {}", l.parent_run, l.parent_step)
    } else {
        String::new()
    };
    let batch = match c.global_batch {
        0 => "global batch not recorded (format 1 or 2)".to_string(),
        g => format!("global batch {g}"),
    };
    format!(
        "step {} (epoch {}, step {} of it), {batch}, written on {} data-parallel rank(s) {}, {stored}, {opt}{ema}; \
         run {:016x}{from}",
        c.step,
        c.epoch + 1,
        c.step_in_epoch,
        c.world_size,
        age(c.written_at),
        l.run_id
    )
}

/// How long ago `written_at` (Unix milliseconds) was, roughly.
fn age(written_at: i64) -> String {
    if written_at == i64::MIN {
        return "(no time recorded)".to_string();
    }
    let s = (super::now_ms() - written_at).max(0) / 1000;
    match s {
        0..=119 => format!("{s} s ago"),
        120..=7199 => format!("{} min ago", s / 60),
        7200..=172_799 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86400),
    }
}
