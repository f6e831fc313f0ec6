//! `Shard`: a dataset, or one rank's slice of it, opened and validated up front (shapes,
//! types, label range, finite targets), with the features `x` read lazily by rows. This
//! file finds the files and splits the global rows over ranks; `check.rs` opens one file and
//! validates it against the model (and reads its labels), `read.rs` reads rows of `x` as
//! float32. Must not know the model beyond `Expect`, nor the data order (`order.rs`).
//!
//! `x` may be stored as any integer or float type; rows are converted to float32 as they are
//! read, with `data.x_scale` and `data.x_offset` applied (x * scale + offset, computed in
//! float64 and rounded once). Class labels may be any integer type, regression targets any
//! integer or float type (read as float32, not scaled).
//!
//! A path containing `{rank}` names numbered files `0, 1, 2, ...` (as many as exist,
//! counted from 0), whatever the rank count; otherwise it is one file. The dataset's global
//! rows are its files' rows one after another, in file order. Training opens them all (every
//! rank: the loader takes each step's rows from anywhere, see `order.rs`), keeping a handle
//! per file; evaluation gives rank r of N the global rows [r*n/N, (r+1)*n/N). The labels of
//! the opened rows are read whole (4 bytes a row for classes).

mod check;
mod read;
mod weights;

use super::classes::{relate, Reference};
use super::h5::with_elem;
use super::norm::Norm;
use crate::config::DataCfg;
use crate::error::{Error, Result};
use check::open_file;
pub use check::{Expect, Labels};
use read::read_part;
pub use read::{affine_of, read_x, Affine};
use std::ops::Range;
use std::path::PathBuf;

/// One file's rows of a shard.
struct Part {
    path: PathBuf,
    /// The file's number (the `{rank}` value; 0 for a single file).
    number: usize,
    /// Rows of the file that belong to this rank.
    rows: Range<usize>,
    /// Shard row of `rows.start`.
    first: usize,
    file: hdf5::File,
    x: hdf5::Dataset,
    /// How `x` is stored.
    elem: super::h5::Elem,
}

pub struct Shard {
    pub x_name: String,
    pub features: usize,
    /// The model's output width (classes, or targets per row).
    pub outputs: usize,
    pub labels: Labels,
    /// One weight per shard row (`data.sample_weight`), finite and >= 0; None without the key.
    pub sample_weights: Option<Vec<f32>>,
    /// The class names of `labels`' numbers (class i is `class_names[i]`), when the files
    /// that define them have names (`classes::Reference::Names`); else empty.
    pub class_names: Vec<String>,
    /// The names of the features and numeric targets (`x_columns`, `y_columns`), where the
    /// files have them (every file that does has the same).
    pub columns: crate::data::columns::Columns,
    parts: Vec<Part>,
    len: usize,
    affine: Affine,
    /// The normalization applied as rows are read (x) and to `labels` (y); none at open.
    norm: Norm,
}

/// Which of a dataset's global rows a shard takes (see `Shard::open_in`).
#[derive(Clone, Copy, Debug)]
pub enum Within {
    All,
    /// The training rows of `data.validation_split = f`.
    TrainOf(f64),
    /// Its validation rows.
    ValidationOf(f64),
}

/// Keras' rule: the first ⌊N·(1 − f)⌋ rows train, the rest validate.
pub fn split_at(rows: usize, f: f64) -> usize {
    ((rows as f64) * (1.0 - f)).floor() as usize
}

/// Every file of the dataset, with its number: the numbered files `0, 1, 2, ...` of a
/// `{rank}` template (as many as exist, counted from 0), else the one path. `key` names the
/// job field in errors.
pub fn files(template: &str, key: &str) -> Result<Vec<(usize, PathBuf)>> {
    if !template.contains("{rank}") {
        return Ok(vec![(0, PathBuf::from(template))]);
    }
    let path = |i: usize| PathBuf::from(template.replace("{rank}", &i.to_string()));
    let found = (0..).take_while(|&i| path(i).exists()).count();
    if found == 0 {
        return Err(Error::data(
            path(0),
            key,
            format!("no such file: `{template}` matches no file ({} does not exist)", path(0).display()),
        ));
    }
    Ok((0..found).map(|i| (i, path(i))).collect())
}

impl Shard {
    /// Rank `rank` of `ranks`' slice of the dataset's global rows (every file's rows one after
    /// another, in file order): rows [rank·n/ranks, (rank+1)·n/ranks). Training opens it whole
    /// (rank 0 of 1) and the loader picks each step's rows; evaluation splits the test data.
    pub fn open(
        cfg: &DataCfg,
        key: &str,
        template: &str,
        rank: usize,
        ranks: usize,
        want: Expect,
        classes: &Reference,
    ) -> Result<Shard> {
        Shard::open_in(cfg, key, template, Within::All, rank, ranks, want, classes)
    }

    /// As `open`, over the part of the dataset's global rows that `within` says:
    /// `data.validation_split`'s training rows (the first ⌊N·(1 − f)⌋) or validation rows
    /// (the rest), an error naming the key when that part is empty. A classifier's labels are
    /// compared by their class names with `classes` (`classes::relate`): used as stored,
    /// remapped to its numbers (rank 0 logs it), or refused.
    #[allow(clippy::too_many_arguments)]
    pub fn open_in(
        cfg: &DataCfg,
        key: &str,
        template: &str,
        within: Within,
        rank: usize,
        ranks: usize,
        want: Expect,
        classes: &Reference,
    ) -> Result<Shard> {
        let mut opened = Vec::new();
        let mut columns = crate::data::columns::Columns::default();
        for (number, path) in files(template, key)? {
            let f = open_file(cfg, key, &path, want)?;
            columns.agree(&f.columns, key)?;
            if f.n == 0 {
                return Err(Error::data(&path, &cfg.x_dataset, "gets no samples: the file has 0 rows"));
            }
            let note = &mut |line: String| {
                if crate::sys::rank().unwrap_or(0) == 0 {
                    log::info!("{line}");
                }
            };
            let relation = relate(classes, &path, key, f.names.as_deref(), note)?;
            opened.push((number, path, f, relation));
        }
        let all: usize = opened.iter().map(|o| o.2.n).sum();
        let cut = match within {
            Within::All => 0..all,
            Within::TrainOf(f) => 0..split_at(all, f),
            Within::ValidationOf(f) => split_at(all, f)..all,
        };
        if cut.is_empty() {
            let which = if matches!(within, Within::TrainOf(_)) { "training" } else { "validation" };
            return Err(Error::config(
                &cfg.train,
                "data.validation_split",
                format!(
                    "= {} of the {all} training rows leaves no {which} rows; choose a fraction that leaves both",
                    crate::config::num(cfg.validation_split)
                ),
            ));
        }
        let total = cut.len();
        let (lo, hi) = (cut.start + rank * total / ranks, cut.start + (rank + 1) * total / ranks);
        if lo == hi {
            return Err(Error::data(
                &opened[0].1,
                &cfg.x_dataset,
                format!("rank {rank} gets no samples: the data has {total} rows for {ranks} ranks"),
            ));
        }
        let mut parts = Vec::with_capacity(opened.len());
        let mut labels: Option<Labels> = None;
        let (mut len, mut at) = (0, 0);
        for (number, path, f, relation) in opened {
            let rows = lo.max(at) - at..hi.min(at + f.n).max(lo.max(at)) - at;
            at += f.n;
            if rows.is_empty() {
                continue;
            }
            let (part, l) = f.part(cfg, path, number, rows, want, len, &relation)?;
            len += part.rows.len();
            labels = Some(match (labels, l) {
                (None, l) => l,
                (Some(Labels::Classes(mut a)), Labels::Classes(b)) => {
                    a.extend(b);
                    Labels::Classes(a)
                }
                (Some(Labels::Values(mut a, k)), Labels::Values(b, _)) => {
                    a.extend(b);
                    Labels::Values(a, k)
                }
                (Some(Labels::Bits(mut a, k)), Labels::Bits(b, _)) => {
                    a.extend(b);
                    Labels::Bits(a, k)
                }
                _ => unreachable!("one loss, one kind of labels"),
            });
            parts.push(part);
        }
        Ok(Shard {
            x_name: cfg.x_dataset.clone(),
            features: want.inputs,
            outputs: want.outputs,
            labels: labels.expect("at least one file"),
            sample_weights: None,
            class_names: classes.names().to_vec(),
            columns,
            parts,
            len,
            affine: affine_of(cfg, &Norm::default(), want.inputs),
            norm: Norm::default(),
        })
    }

    /// Read the sample weights of this shard's rows from dataset `name` of each file
    /// (`data.sample_weight`): every training file must hold it.
    pub fn load_sample_weights(&mut self, name: &str) -> Result<()> {
        let mut w = Vec::with_capacity(self.len);
        for p in &self.parts {
            let n = p.x.shape().first().copied().unwrap_or(0);
            w.extend(weights::read(&p.file, &p.path, name, n, p.rows.clone())?);
        }
        self.sample_weights = Some(w);
        Ok(())
    }

    /// An evaluation shard's (validation, test) sample weights from dataset `name` of data
    /// path `template` (`key`), as Keras weighs `val_loss` and `evaluate`'s loss by the rows'
    /// weights when they come with them: read when every file of the path holds it (true),
    /// not when none does (false: its loss stays unweighted). Every rank decides alike, from
    /// all the files, not only its own.
    pub fn load_eval_weights(&mut self, template: &str, key: &str, name: &str) -> Result<bool> {
        if !weights::in_every_file(template, key, name)? {
            return Ok(false);
        }
        self.load_sample_weights(name)?;
        Ok(true)
    }

    /// From now on read x normalized by `norm` (after `cfg`'s x_scale and x_offset), and
    /// standardize the regression targets with its y part. Once, on a shard opened plain.
    pub fn set_norm(&mut self, cfg: &DataCfg, norm: &Norm) {
        assert!(self.norm.is_none(), "a shard is normalized once");
        self.affine = affine_of(cfg, norm, self.features);
        if let Labels::Values(v, _) = &mut self.labels {
            norm.apply_y(v);
        }
        self.norm = norm.clone();
    }

    pub fn norm(&self) -> &Norm {
        &self.norm
    }

    /// This rank's part of x's normalization statistics: the slots of the blocks of rows that
    /// rank `rank` of `ranks` owns (`norm::block_count` blocks), zero elsewhere. Sum them over
    /// the ranks, then `norm::merge`.
    pub fn stat_partials(&self, rank: usize, ranks: usize) -> Result<Vec<f64>> {
        let (n, f) = (self.len, self.features);
        let blocks = super::norm::block_count(n, f);
        let mut p = vec![0.0; super::norm::partials_len(blocks, f)];
        let mine = rank * blocks / ranks..(rank + 1) * blocks / ranks;
        super::norm::fill(&mut p, blocks, n, f, mine, |a, c, out| self.read_rows(a, c, out))?;
        Ok(p)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The files and rows this shard reads, for the log: `d-0.h5 rows 0..70, d-2.h5 rows 0..25`.
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        for p in &self.parts {
            v.push(format!("{} rows {}..{}", p.path.display(), p.rows.start, p.rows.end));
        }
        v.join(", ")
    }

    /// Which row of which file shard row `i` is: (file number, row in the file).
    pub fn row_id(&self, i: usize) -> (usize, usize) {
        let p = &self.parts[self.part_of(i)];
        (p.number, p.rows.start + (i - p.first))
    }

    fn part_of(&self, i: usize) -> usize {
        self.parts.partition_point(|p| p.first + p.rows.len() <= i)
    }

    /// Read `count` rows starting at shard row `start` into `out` ([count, features]),
    /// converted to float32 with the scale and offset applied, rejecting NaN or infinite
    /// results with the file row that holds them.
    pub fn read_rows(&self, start: usize, count: usize, out: &mut [f32]) -> Result<()> {
        let d = self.features;
        let (mut at, mut done) = (start, 0);
        while done < count {
            let p = &self.parts[self.part_of(at)];
            let a = p.rows.start + (at - p.first);
            let n = (count - done).min(p.rows.end - a);
            let dst = &mut out[done * d..(done + n) * d];
            with_elem!(p.elem, T => read_part::<T>(p, &self.x_name, a, n, d, &self.affine, dst))?;
            (at, done) = (at + n, done + n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
