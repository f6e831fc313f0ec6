//! Final weights as HDF5: one dataset per layer's weight ([in, out], Keras' kernel layout)
//! and bias, named `dense{l}/weight` and `dense{l}/bias`, plus the layer sizes as a dataset
//! `layers`. Readable with h5py: `h5py.File("weights.h5")["dense0/weight"][:]`.
//!
//! The file also says how to rebuild the network, as attributes of its root group (since
//! 0.1 with ONNX export; older files lack them): `layers` (int64 widths, input first),
//! `activation` (relu, tanh, gelu: tanh approximation, silu, sigmoid, softplus, elu, selu,
//! leaky_relu, identity: `config::Activation::name`; after every layer but the
//! last), `final_activation` ("identity": the last layer's outputs are logits or regression
//! values), `loss` (softmax_cross_entropy, mse) and `weight_layout` ("[in, out]": y = x·W + b).
//!
//! With `data.normalize` or `data.normalize_y`, the group `normalization` holds what training
//! learned from the data (float64): `x_shift`, `x_div` [D] (x is used as (x·x_scale +
//! x_offset − x_shift) / x_div), attribute `x_kind` (standard, minmax), and `y_shift`, `y_div`
//! [K] (outputs are y_shift + y_div · the network's output). `eval`, `predict` and `export`
//! apply them, so they take and return raw units.
//!
//! A classifier trained on files with class names (`y_classes`) keeps them as the root
//! attribute `class_names` (class i is the i-th): `eval` checks the test file's names against
//! them, `predict` writes each row's name, `export` puts them in the ONNX metadata. Files
//! with column names (`x_columns`, `y_columns`: `data::columns`) leave them as the root
//! attributes `x_columns` and `y_columns`: `predict` matches its input's columns to them by
//! name and names its output columns by them.
//!
//! Checkpoints hold the parameters in the same layout: `write_layers` and `read_params` are
//! the one writer and reader of it, and `commit` the one way both kinds of file are put in
//! place (fsync, rename, fsync of the directory).
//!
//! Must not: hold optimizer state or positions (checkpoints do).

use crate::config::Normalize;
use crate::data::h5;
use crate::data::norm::Norm;
use crate::error::{Error, Result};
use crate::model::Mlp;
use std::path::{Path, PathBuf};

/// What the training data's numbers are, kept in weights.h5 as root attributes of these
/// names (each left out when empty).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Names {
    /// `class_names`: class i is the i-th (empty for plain integer labels).
    pub class_names: Vec<String>,
    /// `x_columns`: the features' names, input 0 first.
    pub x_columns: Vec<String>,
    /// `y_columns`: the numeric targets' names, output 0 first.
    pub y_columns: Vec<String>,
}

impl Names {
    /// The names of a training shard's classes and columns.
    pub fn of(train: &crate::data::shard::Shard) -> Names {
        Names {
            class_names: train.class_names.clone(),
            x_columns: train.columns.x.clone(),
            y_columns: train.columns.y.clone(),
        }
    }
}

/// Write to a temporary file and rename, so a crash never leaves a half-written file
/// under the final name. `names`: the training data's class and column names.
pub fn save(model: &Mlp, params: &[f32], norm: &Norm, names: &Names, path: &Path) -> Result<()> {
    let mut w = Layered::create(model, norm, path)?;
    for l in 0..model.layers.len() {
        w.layer(l, &params[model.slot(l)])?;
    }
    w.finish(names)
}

/// A weights file written one layer at a time (`save`'s file, the same bytes): what a rank
/// that never holds the whole model writes (`shard = "parameters"`: each layer gathered in
/// turn). Under the temporary name until `finish` renames it into place.
pub struct Layered<'a> {
    f: hdf5::File,
    tmp: PathBuf,
    path: PathBuf,
    model: &'a Mlp,
    written: usize,
}

impl<'a> Layered<'a> {
    /// The file under its temporary name, with everything but the layers' values.
    pub fn create(model: &'a Mlp, norm: &Norm, path: &Path) -> Result<Self> {
        let tmp = tmp_path(path);
        let f = h5::create(&tmp)?;
        write_head(&f, &tmp, model, norm)?;
        Ok(Layered { f, tmp, path: path.to_path_buf(), model, written: 0 })
    }

    /// Layer `l`'s weight and bias from `slot`, its slot of the arena (`Mlp::slot`); the
    /// layers in order.
    pub fn layer(&mut self, l: usize, slot: &[f32]) -> Result<()> {
        assert_eq!(l, self.written, "layers in order");
        write_layer(&self.f, &self.tmp, self.model, l, slot)?;
        self.written += 1;
        Ok(())
    }

    /// The class and column names, then the file flushed and renamed into place (`commit`).
    pub fn finish(self, names: &Names) -> Result<()> {
        assert_eq!(self.written, self.model.layers.len(), "every layer written");
        write_all_names(&self.f, &self.tmp, names)?;
        self.f.flush().map_err(|e| Error::hdf5(&self.tmp, "flush", e))?;
        drop(self.f);
        commit(&self.tmp, &self.path, "rename the finished weights file into place", || {})
    }
}

/// The temporary name a file is written under before `commit` renames it: `NAME.tmp`.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// `layers` and `dense{l}/weight` ([in, out]), `dense{l}/bias` of the arena `params`, and the
/// `normalization` group (when `norm` has one), into an open file (`path` names it in errors).
pub fn write_layers(f: &hdf5::File, path: &Path, model: &Mlp, params: &[f32], norm: &Norm) -> Result<()> {
    write_head(f, path, model, norm)?;
    for l in 0..model.layers.len() {
        write_layer(f, path, model, l, &params[model.slot(l)])?;
    }
    Ok(())
}

/// The normalization, `layers` and the model's attributes: all but the layers' values.
pub fn write_head(f: &hdf5::File, path: &Path, model: &Mlp, norm: &Norm) -> Result<()> {
    write_norm(f, path, norm)?;
    let sizes: Vec<i64> = model.sizes.iter().map(|&s| s as i64).collect();
    h5::write(f, path, "layers", &sizes, &[sizes.len()])?;
    write_model_attrs(f, path, model, &sizes)
}

/// `dense{l}/weight` and `dense{l}/bias` from `slot`, layer l's slot of the arena.
fn write_layer(f: &hdf5::File, path: &Path, model: &Mlp, l: usize, slot: &[f32]) -> Result<()> {
    let s = &model.layers[l];
    let at = |r: &std::ops::Range<usize>| &slot[r.start - s.w.start..r.end - s.w.start];
    f.create_group(&format!("dense{l}")).map_err(|e| Error::hdf5(path, "create group", e))?;
    h5::write(f, path, &format!("dense{l}/weight"), at(&s.w), &[s.inp, s.out])?;
    h5::write(f, path, &format!("dense{l}/bias"), at(&s.b), &[s.out])
}

fn write_norm(f: &hdf5::File, path: &Path, norm: &Norm) -> Result<()> {
    if norm.is_none() {
        return Ok(());
    }
    let g = f.create_group("normalization").map_err(|e| Error::hdf5(path, "create group normalization", e))?;
    for (name, v) in
        [("x_shift", &norm.x_shift), ("x_div", &norm.x_div), ("y_shift", &norm.y_shift), ("y_div", &norm.y_div)]
    {
        if !v.is_empty() {
            h5::write(f, path, &format!("normalization/{name}"), v, &[v.len()])?;
        }
    }
    let kind: hdf5::types::VarLenUnicode = norm.x_kind.name().parse().expect("no NUL");
    g.new_attr::<hdf5::types::VarLenUnicode>()
        .create("x_kind")
        .and_then(|a| a.write_scalar(&kind))
        .map_err(|e| Error::hdf5(path, "write normalization/x_kind", e))
}

/// The `normalization` group of a weights file or checkpoint (none when absent: files
/// written without normalization, or before hvtrain had it), its lengths checked against
/// the model's inputs and outputs.
pub fn read_norm(f: &hdf5::File, path: &Path, model: &Mlp) -> Result<Norm> {
    let Ok(g) = f.group("normalization") else { return Ok(Norm::default()) };
    let read = |name: &str, len: usize| -> Result<Vec<f64>> {
        let field = format!("normalization/{name}");
        let Ok(ds) = f.dataset(&field) else { return Ok(Vec::new()) };
        let v: Vec<f64> = ds.read_raw().map_err(|e| Error::hdf5(path, format!("read {field}"), e))?;
        if v.len() != len || v.iter().any(|x| !x.is_finite()) {
            return Err(Error::data(
                path,
                &field,
                format!("must be {len} finite numbers (the model's widths), found {}", v.len()),
            ));
        }
        Ok(v)
    };
    let (d, k) = (model.n_inputs(), model.n_outputs());
    let x_kind = match g.attr("x_kind").and_then(|a| a.read_scalar::<hdf5::types::VarLenUnicode>()) {
        Ok(s) if s.as_str() == "standard" => Normalize::Standard,
        Ok(s) if s.as_str() == "minmax" => Normalize::Minmax,
        _ => Normalize::None,
    };
    let norm = Norm {
        x_kind,
        x_shift: read("x_shift", d)?,
        x_div: read("x_div", d)?,
        y_shift: read("y_shift", k)?,
        y_div: read("y_div", k)?,
    };
    if norm.x_shift.len() != norm.x_div.len() || norm.y_shift.len() != norm.y_div.len() {
        return Err(Error::data(path, "normalization", "holds a shift without its divisor (or the reverse)"));
    }
    Ok(norm)
}

/// The normalization of the weights file (or checkpoint) at `path`.
pub fn load_norm(model: &Mlp, path: &Path) -> Result<Norm> {
    let f = h5::open(path, "--weights")?;
    read_norm(&f, path, model)
}

/// The model as root attributes (see the module doc), for `export` and for h5py users.
fn write_model_attrs(f: &hdf5::File, path: &Path, model: &Mlp, sizes: &[i64]) -> Result<()> {
    let err = |e| Error::hdf5(path, "write the model attributes", e);
    f.new_attr_builder().with_data(sizes).create("layers").map_err(err)?;
    for (name, value) in [
        ("activation", model.act_names()),
        ("final_activation", "identity".into()),
        ("loss", model.loss.kind.name().to_string()),
        ("weight_layout", "[in, out]".into()),
    ] {
        let v: hdf5::types::VarLenUnicode = value.parse().expect("attribute text has no NUL");
        f.new_attr::<hdf5::types::VarLenUnicode>().create(name).map_err(err)?.write_scalar(&v).map_err(err)?;
    }
    Ok(())
}

/// The class and column names as root attributes `class_names`, `x_columns`, `y_columns`
/// (each left out when empty), into an open weights file or checkpoint.
pub fn write_all_names(f: &hdf5::File, path: &Path, names: &Names) -> Result<()> {
    write_names(f, path, "class_names", &names.class_names)?;
    write_names(f, path, "x_columns", &names.x_columns)?;
    write_names(f, path, "y_columns", &names.y_columns)
}

/// `names` as the root attribute `attr` (1-D variable-length UTF-8 strings; none when empty).
fn write_names(f: &hdf5::File, path: &Path, attr: &str, names: &[String]) -> Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    let v: Vec<hdf5::types::VarLenUnicode> =
        names.iter().map(|s| s.parse().unwrap_or_else(|_| hdf5::types::VarLenUnicode::new())).collect();
    f.new_attr_builder()
        .with_data(&v)
        .create(attr)
        .map_err(|e| Error::hdf5(path, format!("write the attribute {attr}"), e))?;
    Ok(())
}

/// The class names a weights file records (`class_names`), empty when it has none (plain
/// integer labels, or a file written before they were kept).
pub fn read_class_names(path: &Path) -> Result<Vec<String>> {
    Ok(read_names(path)?.class_names)
}

/// The class and column names a weights file records (each empty when it has none: plain
/// integer labels, data without column names, or a file written before they were kept).
pub fn read_names(path: &Path) -> Result<Names> {
    read_names_of(&h5::open(path, "--weights")?, path)
}

/// `read_names` of an open file (`path` names it in errors).
pub fn read_names_of(f: &hdf5::File, path: &Path) -> Result<Names> {
    let attr = |a: &str| Ok::<_, Error>(crate::data::classes::read_attr(f, path, a)?.unwrap_or_default());
    Ok(Names { class_names: attr("class_names")?, x_columns: attr("x_columns")?, y_columns: attr("y_columns")? })
}

/// The model the file at `path` records in its attributes (where it records one: files from
/// before the attributes are taken as `model`, with a warning) must be `model`: the same
/// widths, hidden activations and loss. Otherwise `eval`, `predict` and `export` would run
/// the weights through another network and give wrong numbers without a word.
pub fn check_recorded(path: &Path, model: &Mlp) -> Result<()> {
    let f = h5::open(path, "--weights")?;
    check_attrs(&read_model_attrs(&f, path)?, model, path)
}

/// `check_recorded` on attributes read.
fn check_attrs(a: &ModelAttrs, model: &Mlp, path: &Path) -> Result<()> {
    // `set` is the file's value as a --set takes it (no spaces: one shell word).
    let differ = |attr: &str, file: String, key: &str, ours: String, set: String| {
        Error::data(
            path,
            format!("attribute {attr}"),
            format!(
                "the weights are of a model with {attr} {file}, the job's {key} is {ours}; use the job that \
                 trained them (or --set {key}={set})"
            ),
        )
    };
    if let Some(layers) = &a.layers {
        if *layers != model.sizes {
            let set = format!("[{}]", layers.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(","));
            return Err(differ("layers", format!("{layers:?}"), "model.layers", format!("{:?}", model.sizes), set));
        }
    }
    let (acts, loss) = (model.act_names(), model.loss.kind.name());
    if let Some(act) = &a.activation {
        if *act != acts {
            // One per hidden layer is written `relu,tanh`; the job file takes a list.
            let set = match act.contains(',') {
                true => format!("[{}]", act.split(',').map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(",")),
                false => act.clone(),
            };
            return Err(differ("activation", act.clone(), "model.activation", acts, set));
        }
    }
    if let Some(l) = &a.loss {
        if l != loss {
            return Err(differ("loss", l.clone(), "model.loss", loss.to_string(), l.clone()));
        }
    }
    if let Some(fin) = &a.final_activation {
        if fin != "identity" {
            return Err(Error::data(
                path,
                "attribute final_activation",
                format!("is {fin}; this hvtrain builds models whose last layer has no activation (identity)"),
            ));
        }
    }
    if a.activation.is_none() || a.loss.is_none() {
        log::warn!(
            "{} does not record its model (written before hvtrain did): reading it as the job's model, \
             activation {acts}, loss {loss}; make sure that is the model that was trained",
            path.display(),
        );
    }
    Ok(())
}

/// The model a weights file (or checkpoint) records in its attributes; `None` for a field
/// of a file written before the attributes existed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelAttrs {
    pub layers: Option<Vec<usize>>,
    pub activation: Option<String>,
    pub final_activation: Option<String>,
    pub loss: Option<String>,
}

/// Read `ModelAttrs` from an open file (`path` names it in errors).
pub fn read_model_attrs(f: &hdf5::File, path: &Path) -> Result<ModelAttrs> {
    let names = f.attr_names().map_err(|e| Error::hdf5(path, "list the attributes", e))?;
    let text = |name: &str| -> Result<Option<String>> {
        if !names.iter().any(|n| n == name) {
            return Ok(None);
        }
        let v: hdf5::types::VarLenUnicode = f
            .attr(name)
            .and_then(|a| a.read_scalar())
            .map_err(|e| Error::hdf5(path, format!("read attribute {name}"), e))?;
        Ok(Some(v.as_str().to_owned()))
    };
    let layers = if names.iter().any(|n| n == "layers") {
        let v: Vec<i64> =
            f.attr("layers").and_then(|a| a.read_raw()).map_err(|e| Error::hdf5(path, "read attribute layers", e))?;
        Some(v.into_iter().map(|x| x.max(0) as usize).collect())
    } else {
        None
    };
    Ok(ModelAttrs {
        layers,
        activation: text("activation")?,
        final_activation: text("final_activation")?,
        loss: text("loss")?,
    })
}

/// Put the finished (closed) file `tmp` in place as `path`, durably: fsync it, run
/// `before_rename` (fault injection), rename, fsync the directory. Only when this returns is
/// the file there after a crash or power loss, so only then may it be announced.
pub fn commit(tmp: &Path, path: &Path, what: &str, before_rename: impl FnOnce()) -> Result<()> {
    let sync = |p: &Path| std::fs::File::open(p).and_then(|f| f.sync_all()).map_err(|e| Error::io(p, "fsync", e));
    sync(tmp)?;
    before_rename();
    std::fs::rename(tmp, path).map_err(|e| Error::io(path, what, e))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    sync(dir)
}

/// Load weights written by `save` (or a checkpoint) into a parameter arena for `model`,
/// checking the shapes.
pub fn load(model: &Mlp, path: &Path) -> Result<Vec<f32>> {
    let f = h5::open(path, "--weights")?;
    read_params(&f, path, model)
}

/// The `dense{l}/weight` and `dense{l}/bias` datasets of an open file, as an arena.
pub fn read_params(f: &hdf5::File, path: &Path, model: &Mlp) -> Result<Vec<f32>> {
    let mut params = vec![0.0f32; model.n_params];
    for l in 0..model.layers.len() {
        params[model.slot(l)].copy_from_slice(&read_slot(f, path, model, l)?);
    }
    Ok(params)
}

/// Layer `l`'s slot of the arena (`Mlp::slot`: its weight, then its bias; padding zero) from
/// its `dense{l}/weight` and `dense{l}/bias` datasets, the shapes checked.
pub fn read_slot(f: &hdf5::File, path: &Path, model: &Mlp, l: usize) -> Result<Vec<f32>> {
    let (s, slot) = (&model.layers[l], model.slot(l));
    let mut out = vec![0.0f32; slot.len()];
    for (name, r) in [("weight", &s.w), ("bias", &s.b)] {
        let v: Vec<f32> = layer_dataset(f, path, model, l, name)?
            .read_raw()
            .map_err(|e| Error::hdf5(path, format!("read dense{l}/{name}"), e))?;
        out[r.start - slot.start..r.end - slot.start].copy_from_slice(&v);
    }
    Ok(out)
}

/// Dataset `dense{l}/{name}` ("weight" or "bias") of an open file, its shape checked against
/// `model`'s layer l.
pub fn layer_dataset(f: &hdf5::File, path: &Path, model: &Mlp, l: usize, name: &str) -> Result<hdf5::Dataset> {
    let s = &model.layers[l];
    let shape = if name == "weight" { vec![s.inp, s.out] } else { vec![s.out] };
    let field = format!("dense{l}/{name}");
    let ds = h5::dataset(f, path, &field)?;
    if ds.shape() != shape {
        return Err(Error::data(
            path,
            &field,
            format!("has shape {:?}, the model (model.layers = {:?}) needs {shape:?}", ds.shape(), model.sizes),
        ));
    }
    Ok(ds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Activation, LossKind};

    #[test]
    fn save_load_round_trip_and_shape_check() {
        let dir = std::env::temp_dir().join(format!("hvtrain-weights-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.h5");
        let m = Mlp::new(&[5, 4, 3], Activation::Relu, LossKind::SoftmaxCrossEntropy);
        let mut p = m.init_params(9);
        p[m.layers[1].b.clone()].copy_from_slice(&[0.5, -0.25, 2.0]);
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        let names = strings(&["cat", "dög", "emu"]);
        let all =
            Names { class_names: names.clone(), x_columns: strings(&["a", "b", "c", "d", "e"]), y_columns: vec![] };
        save(&m, &p, &Norm::default(), &all, &path).unwrap();
        assert!(!tmp_path(&path).exists(), "temporary file must be renamed away");
        assert_eq!(load(&m, &path).unwrap(), p);
        assert_eq!(read_class_names(&path).unwrap(), names);
        assert_eq!(read_names(&path).unwrap(), all);
        // The file is plain HDF5 with [in, out] kernels, as h5py users expect.
        let f = hdf5::File::open(&path).unwrap();
        assert_eq!(f.dataset("dense0/weight").unwrap().shape(), vec![5, 4]);
        assert_eq!(f.dataset("layers").unwrap().read_raw::<i64>().unwrap(), vec![5, 4, 3]);
        // The model is recorded as attributes, so the file alone says how to rebuild it.
        let attrs = read_model_attrs(&f, &path).unwrap();
        assert_eq!(attrs.layers, Some(vec![5, 4, 3]));
        assert_eq!(attrs.activation.as_deref(), Some("relu"));
        assert_eq!(attrs.final_activation.as_deref(), Some("identity"));
        assert_eq!(attrs.loss.as_deref(), Some("softmax_cross_entropy"));
        // Another model's weights are refused with the dataset named.
        let other = Mlp::new(&[5, 6, 3], Activation::Relu, LossKind::SoftmaxCrossEntropy);
        let err = load(&other, &path).unwrap_err().to_string();
        assert!(err.contains("dense0/weight") && err.contains("w.h5"), "{err}");
        // Plain integer labels: no attribute, no names. (The file is closed first: a save
        // renames a new file over the path while HDF5 may still hold the old one open.)
        drop(f);
        save(&m, &p, &Norm::default(), &Names::default(), &path).unwrap();
        assert_eq!(read_names(&path).unwrap(), Names::default());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn attributes_that_disagree_with_the_model_are_refused() {
        use crate::config::{Activation, LossKind};
        let m = Mlp::new(&[4, 3, 3, 2], Activation::Tanh, LossKind::SoftmaxCrossEntropy);
        let p = Path::new("w.h5");
        let ok = ModelAttrs {
            layers: Some(vec![4, 3, 3, 2]),
            activation: Some("tanh".into()),
            final_activation: Some("identity".into()),
            loss: Some("softmax_cross_entropy".into()),
        };
        check_attrs(&ok, &m, p).unwrap();
        check_attrs(&ModelAttrs::default(), &m, p).unwrap();
        let gelu = ModelAttrs { activation: Some("gelu".into()), ..ok.clone() };
        let e = check_attrs(&gelu, &m, p).unwrap_err().to_string();
        assert!(e.contains("activation gelu") && e.contains("model.activation is tanh"), "{e}");
        let mse = ModelAttrs { loss: Some("mse".into()), ..ok.clone() };
        let e = check_attrs(&mse, &m, p).unwrap_err().to_string();
        assert!(e.contains("loss mse"), "{e}");
        let wide = ModelAttrs { layers: Some(vec![4, 5, 3, 2]), ..ok.clone() };
        assert!(check_attrs(&wide, &m, p).unwrap_err().to_string().contains("--set model.layers=[4,5,3,2]"));
        // One per hidden layer: recorded `relu,tanh`, and the hint is a list.
        let per_layer =
            Mlp::new(&[4, 3, 3, 2], vec![Activation::Relu, Activation::Tanh], LossKind::SoftmaxCrossEntropy);
        let two = ModelAttrs { activation: Some("relu,tanh".into()), ..ok };
        check_attrs(&two, &per_layer, p).unwrap();
        let e = check_attrs(&two, &m, p).unwrap_err().to_string();
        assert!(e.contains(r#"--set model.activation=["relu","tanh"]"#), "{e}");
    }
}
