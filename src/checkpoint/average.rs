//! `hvtrain checkpoint average`: one weights file whose every parameter is the mean of the
//! same parameter in several checkpoints or weights files of one model (checkpoint averaging,
//! as fairseq's `average_checkpoints.py`; taken along one run's last checkpoints it is the
//! averaging of stochastic weight averaging, Izmailov et al. 2018, done after the training).
//! The model is the one the first file records (layers, hidden activations, loss); every
//! other file must record the same (`weights::check_recorded`) and the same normalization.
//! Checkpoints are verified as `--resume` verifies them (each part of one in parts too); the
//! means are summed in float64 and rounded once; the file is written a layer at a time, with
//! one layer of one input in memory beside the sums, and the class and column names of the
//! first file that records them.
//!
//! Must not: change or delete an input, or write the output anywhere but under a temporary
//! name renamed into place (`weights::Layered`).

use super::parts::{self, StoredMap};
use super::{lineage, list, load_index_by, read_stored, Source};
use crate::config::{Activation, LossKind};
use crate::data::h5;
use crate::data::norm::Norm;
use crate::error::{Error, Result};
use crate::model::Mlp;
use crate::weights::{self, Names};
use log::info;
use serde::de::IntoDeserializer;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Where one input's layers are read from.
enum Reader {
    /// A weights file (`weights.h5`, `best-weights.h5`, an earlier average).
    Weights(hdf5::File),
    /// A checkpoint, checked, its arrays left where they are (its own file or its parts).
    /// `array`: the checkpoint's moving average (`optimizer/ema`) where it keeps one, as
    /// `eval` and `predict` read it; its parameters otherwise.
    Checkpoint { src: Source, step: u64, array: &'static str },
}

struct Input {
    path: PathBuf,
    from: Reader,
    norm: Norm,
    names: Names,
}

/// The files `paths` stand for: a file itself, a directory its checkpoints of the live lineage
/// (the run `--resume auto` would continue and the checkpoints it came from: not an abandoned
/// branch's, after a `--resume FILE` from an older one; the `last` of the highest steps, or
/// all), in the order given (a directory's by step).
pub fn inputs(paths: &[PathBuf], last: Option<usize>) -> Result<Vec<PathBuf>> {
    if last.is_some() && !paths.iter().any(|p| p.is_dir()) {
        return Err(Error::data(
            &paths[0],
            "--last",
            "takes the newest checkpoints of a directory, and no PATH is one: name a run's output.dir, or leave \
             --last out to average the files named"
                .to_string(),
        ));
    }
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let all = list(p).len();
            if all == 0 {
                return Err(Error::data(p, "PATH", "holds no checkpoints (ckpt-step*.h5)".to_string()));
            }
            let mut found: Vec<(u64, PathBuf)> = lineage::live(p);
            let left = all - found.len();
            if left > 0 {
                info!(
                    "{}: {left} checkpoint(s) of an abandoned branch left out (the live run's are averaged, as \
                     --resume auto would continue it)",
                    p.display()
                );
            }
            found.truncate(last.unwrap_or(usize::MAX));
            files.extend(found.into_iter().rev().map(|(_, f)| f));
        } else if p.exists() {
            files.push(p.clone());
        } else {
            return Err(Error::data(p, "PATH", "no such file or directory".to_string()));
        }
    }
    for (i, f) in files.iter().enumerate() {
        if let Some(j) = files[..i].iter().position(|g| same_file(f, g)) {
            return Err(Error::data(
                f,
                "PATH",
                format!("is given twice (as {} too); each file counts once in the mean", files[j].display()),
            ));
        }
    }
    if files.len() < 2 {
        let what = files.first().map_or("nothing".to_string(), |f| f.display().to_string());
        return Err(Error::data(
            paths.first().map_or(Path::new("PATH"), |p| p.as_path()),
            "PATH",
            format!(
                "gives {what}; an average needs two files or more (name several, or a run directory \
                 with several checkpoints: checkpoint.keep keeps the newest 3 by default)"
            ),
        ));
    }
    Ok(files)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The model file `path` records in its attributes.
pub fn recorded_model(path: &Path) -> Result<Mlp> {
    let f = h5::open(path, "PATH")?;
    let a = weights::read_model_attrs(&f, path)?;
    let missing = |what: &str| {
        Error::data(
            path,
            format!("attribute {what}"),
            "is missing (a file written before hvtrain recorded its model): average files written since, \
             or pass a newer one first"
                .to_string(),
        )
    };
    let layers = a.layers.ok_or_else(|| missing("layers"))?;
    let names = a.activation.ok_or_else(|| missing("activation"))?;
    let loss = a.loss.ok_or_else(|| missing("loss"))?;
    let bad = |what: &str, msg: String| Error::data(path, format!("attribute {what}"), msg);
    if layers.len() < 2 || layers.contains(&0) {
        return Err(bad("layers", format!("is {layers:?}, not a model's widths")));
    }
    let acts = names
        .split(',')
        .map(|n| Activation::deserialize(n.trim().into_deserializer()))
        .collect::<std::result::Result<Vec<Activation>, serde::de::value::Error>>()
        .map_err(|e| bad("activation", format!("is \"{names}\": {e}")))?;
    let hidden = layers.len() - 2;
    if acts.len() != 1 && acts.len() != hidden {
        return Err(bad("activation", format!("names {} activations for {hidden} hidden layers", acts.len())));
    }
    let loss = LossKind::deserialize(loss.as_str().into_deserializer())
        .map_err(|e: serde::de::value::Error| bad("loss", format!("is \"{loss}\": {e}")))?;
    Ok(Mlp::new(&layers, acts, loss))
}

fn open(path: &Path, model: &Mlp) -> Result<Input> {
    weights::check_recorded(path, model)?;
    let f = h5::open(path, "PATH")?;
    let is_checkpoint = f.dataset("format").is_ok() || f.dataset("ranges").is_ok();
    if !is_checkpoint {
        let norm = weights::read_norm(&f, path, model)?;
        let names = weights::read_names_of(&f, path)?;
        return Ok(Input { path: path.to_path_buf(), from: Reader::Weights(f), norm, names });
    }
    drop(f);
    let c = load_index_by(path, model, false, &mut parts::verify)?;
    let src = match (c.parts, c.unread) {
        (Some(p), _) => Source::Parts(p),
        (None, Some(u)) => Source::Whole(u),
        (None, None) => unreachable!("a checkpoint loaded without its arrays says where they are"),
    };
    let ema = src.keeps_ema();
    if ema {
        info!("{}: its moving average of the parameters (optimizer.ema)", path.display());
    }
    let array = if ema { "optimizer/ema" } else { "params" };
    Ok(Input {
        path: path.to_path_buf(),
        from: Reader::Checkpoint { src, step: c.step, array },
        norm: c.norm,
        names: c.names,
    })
}

impl Input {
    /// Layer `l`'s slot of the arena (`Mlp::slot`: its weight, then its bias).
    fn layer(&self, model: &Mlp, l: usize) -> Result<Vec<f32>> {
        match &self.from {
            Reader::Weights(f) => weights::read_slot(f, &self.path, model, l),
            Reader::Checkpoint { src, step, array } => {
                read_stored(src, *step, model, &StoredMap::whole(model), array, &[model.slot(l)])
            }
        }
    }
}

/// Average `files` (at least two, of one model) into `out`.
pub fn average(files: &[PathBuf], out: &Path) -> Result<()> {
    let model = recorded_model(&files[0])?;
    let inputs: Vec<Input> = files.iter().map(|p| open(p, &model)).collect::<Result<_>>()?;
    for i in &inputs[1..] {
        if i.norm != inputs[0].norm {
            return Err(Error::data(
                &i.path,
                "normalization",
                format!(
                    "differs from {}'s: the files were trained on other data or with another data.normalize, \
                     and their weights do not average",
                    inputs[0].path.display()
                ),
            ));
        }
    }
    if inputs.iter().any(|i| same_file(&i.path, out)) {
        return Err(Error::data(out, "--output", "is one of the files averaged; name a new file".to_string()));
    }
    // The names of the first file that records some (checkpoints written before they kept
    // names record none).
    let named = inputs.iter().find(|i| i.names != Names::default());
    let names = named.map(|i| i.names.clone()).unwrap_or_default();
    let mut w = weights::Layered::create(&model, &inputs[0].norm, out)?;
    let n = inputs.len() as f64;
    for l in 0..model.layers.len() {
        let mut sum = vec![0.0f64; model.slot(l).len()];
        for i in &inputs {
            for (s, v) in sum.iter_mut().zip(i.layer(&model, l)?) {
                *s += v as f64;
            }
        }
        let mean: Vec<f32> = sum.iter().map(|&s| (s / n) as f32).collect();
        w.layer(l, &mean)?;
    }
    w.finish(&names)?;
    let steps: Vec<String> = inputs
        .iter()
        .map(|i| match &i.from {
            Reader::Checkpoint { step, .. } => format!("step {step}"),
            Reader::Weights(_) => i.path.display().to_string(),
        })
        .collect();
    let names_line = match named {
        Some(i) => format!("; class and column names from {}", i.path.display()),
        None => "; no class or column names (no file records them)".to_string(),
    };
    info!(
        "averaged {} files ({}) of model {:?}, activation {}, loss {} into {}{names_line}",
        inputs.len(),
        steps.join(", "),
        model.sizes,
        model.act_names(),
        model.loss.kind.name(),
        out.display(),
    );
    Ok(())
}
