//! `hvtrain predict`: the model's outputs for new rows, from weights.h5 or a checkpoint, on
//! the CPU in one process. The rows come from HDF5 (`data.x_dataset`), or from CSV/TSV
//! (gzipped or not), Parquet, `.npy` or `.npz`, read by `data import`'s readers into a
//! temporary HDF5 file beside the output (removed afterwards; only the columns the model was
//! trained on are read). Where the weights and the input both name their columns
//! (`data::columns`), the input's columns are matched to the model's by name: reordered,
//! extra ones (an id, the label) left out, a missing one an error naming it. The results go
//! to HDF5, or to a CSV/TSV table with a header when the output's name ends so.
//!
//! Must not: train, call MPI, or read the rows another way than training does (`read_x`).

use super::CHUNK;
use crate::config::{Job, OutputActivation};
use crate::data::columns::{self, Layout};
use crate::data::h5;
use crate::data::import;
use crate::device::{Backend, Cpu};
use crate::error::{Error, Result};
use crate::model::{Mlp, Workspace};
use crate::weights;
use log::info;
use std::path::{Path, PathBuf};

/// `predict`'s options beside its paths.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// A table input: the value of a missing field (else an error).
    pub fill: Option<f32>,
    /// A table input's columns copied, as they stand, beside each row's prediction (an id).
    pub keep: Vec<String>,
    /// Two classes: class 1 where its probability is at least this (else the larger
    /// probability's class); multi-label: a label set where its probability is at least this
    /// (else above ½).
    pub threshold: Option<f32>,
    /// A CSV/TSV input: its first line is data, and its columns are the model's by position.
    pub no_header: bool,
    /// A CSV/TSV input's field separator (None: by the file name, as `data import`).
    pub delimiter: Option<u8>,
}

/// What `predict` computed for every row.
struct Predictions {
    n: usize,
    k: usize,
    /// [n, k]: logits (classes, multi-label) or predictions in the targets' units.
    outputs: Vec<f32>,
    /// [n, k]: softmax (classes) or sigmoid (multi-label) of the outputs; empty for regression.
    probs: Vec<f32>,
    /// Each row's class (classification).
    classes: Vec<i32>,
    head: OutputActivation,
    /// `--keep`'s columns: name, and a text a row.
    kept: Vec<(String, Vec<String>)>,
    /// `Options::threshold`, for the multi-label labels.
    threshold: Option<f32>,
}

impl Predictions {
    /// A multi-label output's label from its probability.
    fn label(&self, p: f32) -> u8 {
        match self.threshold {
            Some(t) => (p >= t) as u8,
            None => (p > 0.5) as u8,
        }
    }
}

/// Whether `path` is read through `data import` (a table or NumPy file), not as HDF5.
fn is_table(path: &Path) -> bool {
    import::kind_of(path).is_some()
}

/// Whether `path` is a CSV/TSV input (by its name, .gz too).
fn is_text(path: &Path) -> bool {
    import::kind_of(path) == Some(import::Kind::Text)
}

/// Whether the output is a text table (by its name), and its separator.
fn text_output(path: &Path) -> Option<u8> {
    let name = path.to_string_lossy().to_lowercase();
    if name.ends_with(".csv") {
        Some(b',')
    } else if name.ends_with(".tsv") || name.ends_with(".tab") {
        Some(b'\t')
    } else {
        None
    }
}

/// A file removed when dropped (the imported input, whatever happens).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `hvtrain predict`: the outputs for every row of `input`, written to `output` (see the
/// module's text). Returns the rows.
pub fn predict(job: &Job, weights_path: &Path, input: &Path, output: &Path, opts: &Options) -> Result<usize> {
    let fill = opts.fill;
    if !opts.keep.is_empty() && !import::keep::readable(input) {
        return Err(Error::config(
            "command line",
            "--keep",
            format!(
                "copies columns of a CSV/TSV or Parquet input; {} is not one (an HDF5 file's other datasets can be \
                 read beside the predictions by row)",
                input.display()
            ),
        ));
    }
    let model = Mlp::from_cfg(&job.model);
    if let Some(t) = opts.threshold {
        check_threshold(t, &model)?;
    }
    if (opts.no_header || opts.delimiter.is_some()) && !is_text(input) {
        let flag = if opts.no_header { "--no-header" } else { "--delimiter" };
        return Err(Error::config(
            "command line",
            flag,
            format!("is for a CSV/TSV input; {} is not one", input.display()),
        ));
    }
    let params = crate::checkpoint::params_of(weights_path, &model)?;
    let norm = weights::load_norm(&model, weights_path)?;
    let names = weights::read_names(weights_path)?;
    // A table is imported first: exactly the model's columns, by name, when the weights name them.
    let (h5_input, xn, _scratch) = if is_table(input) {
        let tmp = scratch_path(output);
        let scratch = Scratch(tmp.clone());
        // Without a header the columns have no names: every one, by position.
        let select = (!names.x_columns.is_empty() && !opts.no_header).then(|| names.x_columns.clone());
        match &select {
            Some(c) => info!("{}: read as a table, the model's columns {c:?} by name", input.display()),
            None if opts.no_header => info!(
                "{}: read as a table without a header (--no-header): its columns are the model's {}, by position",
                input.display(),
                if names.x_columns.is_empty() { "inputs".to_string() } else { format!("{:?}", names.x_columns) }
            ),
            None => info!("{}: read as a table, its columns in order (the weights name none)", input.display()),
        }
        let mut o = import::Opts::features(select, fill);
        (o.no_header, o.delimiter) = (opts.no_header, opts.delimiter);
        import::import(input, &tmp, &o)?;
        (tmp, "x".to_string(), Some(scratch))
    } else {
        (input.to_path_buf(), job.data.x_dataset.clone(), None)
    };
    let f = h5::open(&h5_input, "--input")?;
    let x = h5::dataset(&f, &h5_input, &xn)?;
    let shape = x.shape();
    let d = model.n_inputs();
    let need = format!(
        "x must be [N, {d}] (model.layers[0]; or [N, d1, d2, ...] of as many values, read flattened) of integers \
         (int8 to uint64) or floats (float16, float32, float64)"
    );
    let elem = h5::elem(&x, input, &xn, &need)?;
    let have = columns::read(&f, &h5_input, &xn)?;
    let pick = match columns::layout(&names.x_columns, &have) {
        Ok(Layout::AsStored) => None,
        Ok(Layout::Pick(p)) if shape.len() == 2 && have.len() == shape[1] => Some(p),
        Ok(Layout::Pick(_)) => {
            return Err(Error::data(
                input,
                columns::names_dataset(&xn),
                format!("holds {} names for the {shape:?} dataset {xn}: one name a column is needed", have.len()),
            ))
        }
        Err(missing) => {
            return Err(Error::data(
                input,
                columns::names_dataset(&xn),
                format!(
                    "has no column {missing:?} of the {d} the model was trained on ({:?}, from {}); the input's \
                     columns are {have:?}",
                    names.x_columns,
                    weights_path.display()
                ),
            ))
        }
    };
    if pick.is_none() && h5::features(&shape) != Some(d) {
        return Err(Error::data(input, &xn, format!("found shape {shape:?}; {need}")));
    }
    if let Some(p) = &pick {
        let extra: Vec<&String> = have.iter().enumerate().filter(|(i, _)| !p.contains(i)).map(|(_, s)| s).collect();
        info!(
            "{}: its columns matched to the model's {d} by name (reordered{}{})",
            input.display(),
            if extra.is_empty() { "" } else { "; left out: " },
            extra.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
        );
    }
    // As training reads it: converted to float32, data.x_scale and data.x_offset applied, then
    // the normalization that training learned (from the weights file).
    let n = shape[0];
    let k = model.n_outputs();
    let affine = crate::data::shard::affine_of(&job.data, &norm, d);
    let mut rows = vec![0.0f32; CHUNK * d];
    let be = Cpu;
    let mut ws = Workspace::new(&be, &model, CHUNK)?;
    let params = be.upload(&params)?;
    let mut xd = be.zeros(CHUNK * d)?;
    let head = model.loss.kind.output_activation();
    let classify = head == OutputActivation::Softmax;
    let mut outputs = vec![0.0f32; n * k];
    let mut probs = if classify { vec![0.0f32; n * k] } else { Vec::new() };
    let (mut start, t0) = (0, std::time::Instant::now());
    while start < n {
        let c = CHUNK.min(n - start);
        let rows = &mut rows[..c * d];
        let p = pick.as_deref();
        h5::with_elem!(elem, T => crate::data::shard::read_x::<T>(&x, input, elem, &xn, start, c, d, &affine, rows, p))?;
        be.upload_into(rows, &mut xd)?;
        model.forward(&be, &params, &xd, c, &mut ws)?;
        ws.output_host(&be, &model, c, &mut outputs[start * k..(start + c) * k])?;
        if classify {
            be.softmax(ws.output_mut(&be, &model, c), k)?;
            ws.output_host(&be, &model, c, &mut probs[start * k..(start + c) * k])?;
        }
        start += c;
    }
    drop((x, f));
    let secs = t0.elapsed().as_secs_f64();
    info!(
        "predicted {n} rows in {secs:.2} s ({:.0} rows/s, {} CPU thread(s): training.threads)",
        n as f64 / secs.max(1e-9),
        crate::device::cpu_thread_count()
    );
    norm.unapply_y(&mut outputs); // regression outputs in the targets' units
    if head == OutputActivation::Sigmoid {
        probs = outputs.iter().map(|&z| crate::device::cpu::sigmoid(z)).collect();
    }
    let classes = if let (true, Some(t)) = (classify, opts.threshold) {
        probs.chunks_exact(k).map(|row| (row[1] >= t) as i32).collect() // two classes (check_threshold)
    } else if classify {
        probs.chunks_exact(k).map(|row| crate::metrics::confusion::predicted(row) as i32).collect()
    } else {
        Vec::new()
    };
    if !names.class_names.is_empty() && names.class_names.len() != k {
        return Err(Error::data(
            weights_path,
            "class_names",
            format!("holds {} names but the model has {k} outputs", names.class_names.len()),
        ));
    }
    let mut kept = Vec::new();
    if !opts.keep.is_empty() {
        let cols = import::keep::columns(input, &opts.keep, opts.delimiter, opts.no_header)?;
        for (name, v) in opts.keep.iter().zip(cols) {
            if v.len() != n {
                return Err(Error::data(
                    input,
                    format!("column {name:?}"),
                    format!("has {} rows, the input {n}", v.len()),
                ));
            }
            kept.push((name.clone(), v));
        }
    }
    let p = Predictions { n, k, outputs, probs, classes, head, kept, threshold: opts.threshold };
    match text_output(output) {
        Some(delim) => write_table(&p, &names, output, delim)?,
        None => write_h5(&p, &names, output)?,
    }
    Ok(n)
}

/// `--threshold t`: a probability, for a model of two classes or of labels.
fn check_threshold(t: f32, model: &Mlp) -> Result<()> {
    let (head, k) = (model.loss.kind.output_activation(), model.n_outputs());
    let why = if !(0.0..=1.0).contains(&t) {
        Some(format!("is {t}; a threshold is a probability, from 0 to 1"))
    } else {
        match head {
            OutputActivation::Softmax if k != 2 => Some(format!(
                "is for two classes (class 1 where its probability is at least the threshold) or multi-label outputs; this model has {k} classes, each row takes the most probable"
            )),
            OutputActivation::Identity => Some("is for classifiers; this model is a regression".to_string()),
            _ => None,
        }
    };
    match why {
        Some(why) => Err(Error::config("command line", "--threshold", why)),
        None => Ok(()),
    }
}

/// The temporary HDF5 file a table input is imported into: beside the output, named after it.
fn scratch_path(output: &Path) -> PathBuf {
    let name = output.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    output.with_file_name(format!(".{name}.input.h5.tmp"))
}

/// `outputs` [N, K]; for classes `classes` [N] and `probabilities` [N, K] (and with class
/// names, each row's `class_names` [N] and the list `y_classes`); for multi-label
/// `probabilities` and `labels` uint8 [N, K] (probability > ½); `--keep`'s columns as strings
/// in the group `kept`.
fn write_h5(p: &Predictions, names: &weights::Names, output: &Path) -> Result<()> {
    let (n, k) = (p.n, p.k);
    let tmp = output.with_extension("h5.tmp");
    {
        let o = h5::create(&tmp)?;
        h5::write(&o, &tmp, "outputs", &p.outputs, &[n, k])?;
        if p.head == OutputActivation::Softmax {
            h5::write(&o, &tmp, "probabilities", &p.probs, &[n, k])?;
            h5::write(&o, &tmp, "classes", &p.classes, &[n])?;
            // The training data's names, when it had them: each row's, and the list.
            if !names.class_names.is_empty() {
                let row_names: Vec<String> = p.classes.iter().map(|&c| names.class_names[c as usize].clone()).collect();
                h5::write_strings(&o, &tmp, "class_names", &row_names)?;
                h5::write_strings(&o, &tmp, "y_classes", &names.class_names)?;
            }
        }
        if p.head == OutputActivation::Sigmoid {
            let labels: Vec<u8> = p.probs.iter().map(|&v| p.label(v)).collect();
            h5::write(&o, &tmp, "probabilities", &p.probs, &[n, k])?;
            h5::write(&o, &tmp, "labels", &labels, &[n, k])?;
        }
        if !p.kept.is_empty() {
            o.create_group("kept").map_err(|e| Error::hdf5(&tmp, "create group kept", e))?;
            for (name, v) in &p.kept {
                h5::write_strings(&o, &tmp, &format!("kept/{}", name.replace('/', "_")), v)?;
            }
        }
    }
    std::fs::rename(&tmp, output).map_err(|e| Error::io(output, "rename the finished output into place", e))
}

/// The table's header: classes `class` then `p_NAME` per class; multi-label `p_NAME` then
/// `label_NAME` per output; regression one column per target. NAME: the training data's
/// class or target column names, else the output's index.
fn header(p: &Predictions, names: &weights::Names) -> Vec<String> {
    let name = |j: usize, list: &[String]| list.get(j).cloned().unwrap_or_else(|| j.to_string());
    let k = p.k;
    match p.head {
        OutputActivation::Softmax => std::iter::once("class".to_string())
            .chain((0..k).map(|j| format!("p_{}", name(j, &names.class_names))))
            .collect(),
        OutputActivation::Sigmoid => {
            let list = if names.class_names.len() == k { &names.class_names } else { &names.y_columns };
            (0..k)
                .map(|j| format!("p_{}", name(j, list)))
                .chain((0..k).map(|j| format!("label_{}", name(j, list))))
                .collect()
        }
        OutputActivation::Identity => {
            (0..k).map(|j| names.y_columns.get(j).cloned().unwrap_or_else(|| format!("output_{j}"))).collect()
        }
    }
}

/// The predictions as a CSV/TSV table with a header (`--keep`'s columns first, then see
/// `header`), a row per input row in its order; written under a temporary name and renamed
/// into place.
fn write_table(p: &Predictions, names: &weights::Names, output: &Path, delim: u8) -> Result<()> {
    let tmp = weights::tmp_path(output);
    let err = |e: csv::Error| Error::io(&tmp, "write", std::io::Error::other(e.to_string()));
    {
        let file = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, "create", e))?;
        let mut w = csv::WriterBuilder::new().delimiter(delim).from_writer(std::io::BufWriter::new(file));
        let kept = p.kept.iter().map(|(name, _)| name.clone());
        w.write_record(kept.chain(header(p, names))).map_err(err)?;
        let k = p.k;
        let mut rec: Vec<String> = Vec::with_capacity(2 * k + 1);
        for r in 0..p.n {
            rec.clear();
            rec.extend(p.kept.iter().map(|(_, v)| v[r].clone()));
            match p.head {
                OutputActivation::Softmax => {
                    let c = p.classes[r] as usize;
                    rec.push(names.class_names.get(c).cloned().unwrap_or_else(|| c.to_string()));
                    rec.extend(p.probs[r * k..(r + 1) * k].iter().map(|v| v.to_string()));
                }
                OutputActivation::Sigmoid => {
                    let row = &p.probs[r * k..(r + 1) * k];
                    rec.extend(row.iter().map(|v| v.to_string()));
                    rec.extend(row.iter().map(|&v| p.label(v).to_string()));
                }
                OutputActivation::Identity => rec.extend(p.outputs[r * k..(r + 1) * k].iter().map(|v| v.to_string())),
            }
            w.write_record(&rec).map_err(err)?;
        }
        w.flush().map_err(|e| Error::io(&tmp, "write", e))?;
    }
    std::fs::rename(&tmp, output).map_err(|e| Error::io(output, "rename the finished output into place", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_and_outputs_are_told_apart_by_their_names() {
        for t in ["new.csv", "a/new.CSV.gz", "x.tsv", "t.parquet", "x.npy", "arrays.npz"] {
            assert!(is_table(Path::new(t)), "{t}");
        }
        for h in ["new.h5", "data/test.hdf5", "noext"] {
            assert!(!is_table(Path::new(h)), "{h}");
        }
        assert_eq!(text_output(Path::new("p.csv")), Some(b','));
        assert_eq!(text_output(Path::new("p.TSV")), Some(b'\t'));
        assert_eq!(text_output(Path::new("p.h5")), None);
        assert_eq!(scratch_path(Path::new("out/p.csv")), Path::new("out/.p.csv.input.h5.tmp"));
    }

    #[test]
    fn the_header_names_classes_targets_and_outputs() {
        let p = |head, k| Predictions {
            n: 0,
            k,
            outputs: vec![],
            probs: vec![],
            classes: vec![],
            head,
            kept: vec![],
            threshold: None,
        };
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let named = weights::Names { class_names: s(&["cat", "dog"]), x_columns: vec![], y_columns: s(&["e", "p"]) };
        let none = weights::Names::default();
        assert_eq!(header(&p(OutputActivation::Softmax, 2), &named), s(&["class", "p_cat", "p_dog"]));
        assert_eq!(header(&p(OutputActivation::Softmax, 2), &none), s(&["class", "p_0", "p_1"]));
        assert_eq!(header(&p(OutputActivation::Identity, 2), &named), s(&["e", "p"]));
        assert_eq!(header(&p(OutputActivation::Identity, 1), &none), s(&["output_0"]));
        assert_eq!(header(&p(OutputActivation::Sigmoid, 2), &none), s(&["p_0", "p_1", "label_0", "label_1"]));
    }
}
