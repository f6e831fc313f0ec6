//! Checkpoints: everything needed to continue a run exactly, in one HDF5 file per save,
//! `OUTPUT_DIR/ckpt-step000001234.h5`, readable with h5py:
//!
//! - `dense{l}/weight`, `dense{l}/bias`, `layers`: the parameters, laid out as `weights.h5`
//!   (so `eval --weights` and `predict --weights` take a checkpoint as well);
//! - `optimizer/m`, `optimizer/v`: momentum / Adam moments (absent when the optimizer has none);
//! - `step`, `epoch`, `step_in_epoch`, `world_size`: where training stands. The data order is
//!   a pure function of (seed, epoch, rank), so this position is all the loader needs;
//! - `loss_sums`: each rank's running loss sum in the current epoch, so its metrics are exact;
//! - `job_json`: the job configuration (UTF-8 bytes); `checksum`: FNV-1a over all of the above.
//!
//! Writing is atomic (temporary file, fsync, rename, fsync of the directory): a crash mid-write
//! never damages the newest good checkpoint. The last `keep` are kept.

use crate::data::h5;
use crate::error::{Error, Result};
use crate::model::Mlp;
use std::path::{Path, PathBuf};

pub const FORMAT: i64 = 1;

#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub step: u64,
    pub epoch: usize,
    pub step_in_epoch: usize,
    pub world_size: usize,
    pub loss_sums: Vec<f64>,
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    pub job_json: String,
}

impl Checkpoint {
    fn checksum(&self) -> u64 {
        let mut h = crate::parallel::checksum(&self.params);
        for part in [&self.m, &self.v] {
            h = h.rotate_left(17) ^ crate::parallel::checksum(part);
        }
        let ints = [self.step, self.epoch as u64, self.step_in_epoch as u64, self.world_size as u64];
        let mut bytes: Vec<u8> = ints.iter().flat_map(|i| i.to_le_bytes()).collect();
        bytes.extend(self.loss_sums.iter().flat_map(|x| x.to_le_bytes()));
        bytes.extend(self.job_json.as_bytes());
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
    v.sort_by(|a, b| b.0.cmp(&a.0));
    v
}

/// Write `c` atomically into `dir`, then delete all but the newest `keep` checkpoints.
/// `before_rename` runs when the temporary file is complete (fault injection).
pub fn save(dir: &Path, model: &Mlp, c: &Checkpoint, keep: usize, before_rename: impl FnOnce()) -> Result<PathBuf> {
    let path = dir.join(file_name(c.step));
    let tmp = dir.join(format!("{}.tmp", file_name(c.step)));
    {
        let f = h5::create(&tmp)?;
        let w = |name: &str, data: &[f32], shape: &[usize]| h5::write(&f, &tmp, name, data, shape);
        let sizes: Vec<i64> = model.sizes.iter().map(|&s| s as i64).collect();
        h5::write(&f, &tmp, "layers", &sizes, &[sizes.len()])?;
        for (l, s) in model.layers.iter().enumerate() {
            f.create_group(&format!("dense{l}")).map_err(|e| Error::hdf5(&tmp, "create group", e))?;
            w(&format!("dense{l}/weight"), &c.params[s.w.clone()], &[s.inp, s.out])?;
            w(&format!("dense{l}/bias"), &c.params[s.b.clone()], &[s.out])?;
        }
        if !c.m.is_empty() || !c.v.is_empty() {
            f.create_group("optimizer").map_err(|e| Error::hdf5(&tmp, "create group", e))?;
        }
        if !c.m.is_empty() {
            w("optimizer/m", &c.m, &[c.m.len()])?;
        }
        if !c.v.is_empty() {
            w("optimizer/v", &c.v, &[c.v.len()])?;
        }
        for (name, v) in [("format", FORMAT), ("step", c.step as i64), ("epoch", c.epoch as i64)] {
            h5::write(&f, &tmp, name, &[v], &[1])?;
        }
        for (name, v) in [("step_in_epoch", c.step_in_epoch), ("world_size", c.world_size)] {
            h5::write(&f, &tmp, name, &[v as i64], &[1])?;
        }
        h5::write(&f, &tmp, "loss_sums", &c.loss_sums, &[c.loss_sums.len()])?;
        h5::write(&f, &tmp, "job_json", c.job_json.as_bytes(), &[c.job_json.len()])?;
        h5::write(&f, &tmp, "checksum", &[c.checksum()], &[1])?;
        f.flush().map_err(|e| Error::hdf5(&tmp, "flush", e))?;
    }
    before_rename();
    let sync = |p: &Path| std::fs::File::open(p).and_then(|f| f.sync_all()).map_err(|e| Error::io(p, "fsync", e));
    sync(&tmp)?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, "rename the finished checkpoint into place", e))?;
    sync(dir)?;
    for (_, old) in list(dir).into_iter().skip(keep.max(1)) {
        let _ = std::fs::remove_file(old);
    }
    Ok(path)
}

fn read1(f: &hdf5::File, path: &Path, name: &str) -> Result<i64> {
    let v: Vec<i64> =
        h5::dataset(f, path, name)?.read_raw().map_err(|e| Error::hdf5(path, format!("read {name}"), e))?;
    v.first().copied().ok_or_else(|| Error::data(path, name, "is empty"))
}

/// Load and verify a checkpoint for `model`: shapes, format and checksum.
pub fn load(path: &Path, model: &Mlp) -> Result<Checkpoint> {
    let f = h5::open(path, "--resume")?;
    let format = read1(&f, path, "format")?;
    if format != FORMAT {
        return Err(Error::data(path, "format", format!("is {format}; this hvtrain reads checkpoint format {FORMAT}")));
    }
    let sizes: Vec<i64> =
        h5::dataset(&f, path, "layers")?.read_raw().map_err(|e| Error::hdf5(path, "read layers", e))?;
    let want: Vec<i64> = model.sizes.iter().map(|&s| s as i64).collect();
    if sizes != want {
        return Err(Error::data(path, "layers", format!(
            "the checkpoint is of a model with layers {sizes:?}, this job's model.layers is {want:?}; resume with the job that wrote it")));
    }
    let params = crate::weights::read_params(&f, path, model)?;
    let opt = |name: &str| -> Result<Vec<f32>> {
        match f.dataset(name) {
            Ok(ds) => ds.read_raw().map_err(|e| Error::hdf5(path, format!("read {name}"), e)),
            Err(_) => Ok(Vec::new()),
        }
    };
    let (m, v) = (opt("optimizer/m")?, opt("optimizer/v")?);
    let loss_sums: Vec<f64> =
        h5::dataset(&f, path, "loss_sums")?.read_raw().map_err(|e| Error::hdf5(path, "read loss_sums", e))?;
    let json: Vec<u8> =
        h5::dataset(&f, path, "job_json")?.read_raw().map_err(|e| Error::hdf5(path, "read job_json", e))?;
    let stored: Vec<u64> =
        h5::dataset(&f, path, "checksum")?.read_raw().map_err(|e| Error::hdf5(path, "read checksum", e))?;
    let c = Checkpoint {
        step: read1(&f, path, "step")? as u64,
        epoch: read1(&f, path, "epoch")? as usize,
        step_in_epoch: read1(&f, path, "step_in_epoch")? as usize,
        world_size: read1(&f, path, "world_size")? as usize,
        loss_sums,
        params,
        m,
        v,
        job_json: String::from_utf8(json).map_err(|_| Error::data(path, "job_json", "is not UTF-8"))?,
    };
    if stored.first() != Some(&c.checksum()) {
        return Err(Error::data(path, "checksum", "does not match the contents: the file is damaged"));
    }
    Ok(c)
}

/// The newest checkpoint in `dir` that loads and verifies, skipping damaged ones with a
/// warning. Errors that are not about damage (another model) are returned.
pub fn newest_valid(dir: &Path, model: &Mlp) -> Result<Option<(PathBuf, Checkpoint)>> {
    for (_, path) in list(dir) {
        match load(&path, model) {
            Ok(c) => return Ok(Some((path, c))),
            Err(e @ Error::Data { .. }) if e.to_string().contains("layers") => return Err(e),
            Err(e) => log::warn!("skipping checkpoint {}: {e}", path.display()),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Activation, LossKind};

    fn sample(model: &Mlp, step: u64) -> Checkpoint {
        let params = model.init_params(step);
        let n = params.len();
        Checkpoint {
            step,
            epoch: 2,
            step_in_epoch: 7,
            world_size: 3,
            loss_sums: vec![1.5, 2.5, 3.5],
            m: params.iter().map(|p| p * 0.5).collect(),
            v: vec![0.25; n],
            params,
            job_json: "{\"a\":1}".into(),
        }
    }

    #[test]
    fn round_trip_keep_and_damage() {
        let dir = std::env::temp_dir().join(format!("hvtrain-ckpt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let model = Mlp::new(&[4, 5, 3], Activation::Tanh, LossKind::SoftmaxCrossEntropy);
        for step in [10, 20, 30, 40] {
            save(&dir, &model, &sample(&model, step), 3, || {}).unwrap();
        }
        let steps: Vec<u64> = list(&dir).iter().map(|e| e.0).collect();
        assert_eq!(steps, vec![40, 30, 20], "keeps the newest 3");
        assert_eq!(load(&dir.join(file_name(30)), &model).unwrap(), sample(&model, 30));
        // Damage the newest: the one before it is chosen, with a warning.
        let newest = dir.join(file_name(40));
        let mut bytes = std::fs::read(&newest).unwrap();
        let mid = bytes.len() / 2;
        bytes.truncate(mid);
        std::fs::write(&newest, bytes).unwrap();
        let (path, c) = newest_valid(&dir, &model).unwrap().unwrap();
        assert_eq!((path, c.step), (dir.join(file_name(30)), 30));
        // Another model's checkpoint is refused, naming the field.
        let other = Mlp::new(&[4, 6, 3], Activation::Tanh, LossKind::SoftmaxCrossEntropy);
        let e = load(&dir.join(file_name(30)), &other).unwrap_err().to_string();
        assert!(e.contains("layers") && e.contains(&file_name(30)), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
