//! The converters behind `hvtrain data`: IDX (the MNIST format) to HDF5, and one HDF5 file
//! into N shard files for `{rank}` paths.
//!
//! Must not: be used by training; it writes files a job then reads.

use super::h5::{self, with_elem, Num};
use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

/// An IDX array: dimensions and raw u8 elements (the only element type MNIST uses).
struct Idx {
    dims: Vec<usize>,
    data: Vec<u8>,
}

fn read_idx(path: &Path) -> Result<Idx> {
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut raw = Vec::new();
    let is_gz = path.extension().is_some_and(|e| e == "gz");
    let res = if is_gz {
        flate2::read::GzDecoder::new(f).read_to_end(&mut raw)
    } else {
        std::io::BufReader::new(f).read_to_end(&mut raw)
    };
    res.map_err(|e| Error::io(path, if is_gz { "decompress (gzip)" } else { "read" }, e))?;
    if raw.len() < 4 || raw[0] != 0 || raw[1] != 0 {
        return Err(Error::data(path, "(header)", "not an IDX file: the magic number must start with two zero bytes"));
    }
    if raw[2] != 0x08 {
        return Err(Error::data(
            path,
            "(header)",
            format!("element type 0x{:02x} is not supported; only unsigned bytes (0x08)", raw[2]),
        ));
    }
    let nd = raw[3] as usize;
    let head = 4 + 4 * nd;
    if raw.len() < head {
        return Err(Error::data(path, "(header)", "truncated header"));
    }
    let dims: Vec<usize> =
        (0..nd).map(|i| u32::from_be_bytes(raw[4 + 4 * i..8 + 4 * i].try_into().unwrap()) as usize).collect();
    let want: usize = dims.iter().product();
    if raw.len() - head != want {
        return Err(Error::data(
            path,
            "(data)",
            format!("dimensions {dims:?} need {want} bytes of data, the file has {}", raw.len() - head),
        ));
    }
    Ok(Idx { dims, data: raw.split_off(head) })
}

/// Convert MNIST-style IDX images and labels into HDF5: `x` float32 [N, rows*cols] scaled
/// to [0, 1], `y` int32 [N]. Returns (samples, features).
pub fn import_idx(images: &Path, labels: &Path, out: &Path) -> Result<(usize, usize)> {
    let img = read_idx(images)?;
    let lab = read_idx(labels)?;
    if img.dims.len() < 2 {
        return Err(Error::data(
            images,
            "(header)",
            format!("images need at least 2 dimensions, found {:?}", img.dims),
        ));
    }
    if lab.dims.len() != 1 {
        return Err(Error::data(labels, "(header)", format!("labels must be 1-D, found {:?}", lab.dims)));
    }
    let n = img.dims[0];
    if lab.dims[0] != n {
        return Err(Error::data(
            labels,
            "(header)",
            format!("{} labels for {n} images in {}", lab.dims[0], images.display()),
        ));
    }
    let d = img.dims[1..].iter().product();
    let x: Vec<f32> = img.data.iter().map(|&b| b as f32 / 255.0).collect();
    let y: Vec<i32> = lab.data.iter().map(|&b| b as i32).collect();
    let f = h5::create(out)?;
    h5::write(&f, out, "x", &x, &[n, d])?;
    h5::write(&f, out, "y", &y, &[n])?;
    Ok((n, d))
}

/// Split `input` into `parts` files `DIR/<stem>-<i>.h5` of contiguous, balanced row ranges,
/// copying datasets `x_name` and `y_name`. Returns the written paths.
pub fn shard(
    input: &Path,
    parts: usize,
    out_dir: &Path,
    x_name: &str,
    y_name: &str,
) -> Result<Vec<std::path::PathBuf>> {
    if parts == 0 {
        return Err(Error::config("command line", "--parts", "must be at least 1"));
    }
    let f = h5::open(input, "(input file)")?;
    let x = h5::dataset(&f, input, x_name)?;
    let y = h5::dataset(&f, input, y_name)?;
    let (xs, ys) = (x.shape(), y.shape());
    if h5::features(&xs).is_none() {
        return Err(Error::data(
            input,
            x_name,
            format!("must be [samples, features] (or [samples, d1, ...]), found shape {xs:?}"),
        ));
    }
    let n = xs[0];
    if ys.first() != Some(&n) {
        return Err(Error::data(input, y_name, format!("has {:?} rows, {x_name} has {n}", ys.first())));
    }
    if parts > n {
        return Err(Error::data(input, x_name, format!("{n} samples cannot fill {parts} parts")));
    }
    let stem = input.file_stem().and_then(|s| s.to_str()).unwrap_or("part");
    // Each part keeps the stored element types (uint8 images stay uint8).
    let xe = h5::elem(&x, input, x_name, "x must hold integers or floats")?;
    let ye = h5::elem(&y, input, y_name, "y must hold integers or floats")?;
    let others = beside(&f, input, x_name, y_name, n)?;
    let mut written = Vec::new();
    for i in 0..parts {
        let (a, b) = (i * n / parts, (i + 1) * n / parts);
        let path = out_dir.join(format!("{stem}-{i}.h5"));
        let o = h5::create(&path)?;
        with_elem!(xe, T => copy_rows::<T>(&x, input, x_name, &xs, a..b, &o, &path))?;
        with_elem!(ye, T => copy_rows::<T>(&y, input, y_name, &ys, a..b, &o, &path))?;
        for (name, other) in &others {
            match other {
                Beside::Rows(ds, Some(e)) => {
                    with_elem!(*e, T => copy_rows::<T>(ds, input, name, &ds.shape(), a..b, &o, &path))?
                }
                Beside::Rows(ds, None) => {
                    let v: Vec<bool> =
                        h5::read_rows(ds, a..b).map_err(|e| Error::hdf5(input, format!("read {name}"), e))?;
                    let mut shape = ds.shape();
                    shape[0] = b - a;
                    h5::write(&o, &path, name, &v, &shape)?;
                }
                Beside::Names(v) => h5::write_strings(&o, &path, name, v)?,
            }
        }
        written.push(path);
    }
    Ok(written)
}

/// A dataset of the input file beside x and y that every shard file gets: one with a row per
/// sample (sample weights, further targets; numbers or bool) split as x is, or strings (class
/// names, `y_classes`) copied whole.
enum Beside {
    Rows(hdf5::Dataset, Option<h5::Elem>),
    Names(Vec<String>),
}

/// The input file's top-level datasets other than x and y, as `Beside`, each logged with what
/// becomes of it; what cannot be carried (another shape or type) is left out with a warning.
fn beside(f: &hdf5::File, input: &Path, x_name: &str, y_name: &str, n: usize) -> Result<Vec<(String, Beside)>> {
    let mut out = Vec::new();
    for name in f.member_names().map_err(|e| Error::hdf5(input, "list the datasets", e))? {
        if [x_name, y_name].iter().any(|m| name == m.trim_start_matches('/')) {
            continue;
        }
        let Ok(ds) = f.dataset(&name) else { continue };
        let shape = ds.shape();
        let rows = shape.first() == Some(&n);
        if rows && h5::kind(&ds, input, &name).ok() == Some("bool") {
            log::info!("{name} {shape:?}: split with x (a row per sample)");
            out.push((name, Beside::Rows(ds, None)));
        } else if let (true, Ok(e)) = (rows, h5::elem(&ds, input, &name, "")) {
            log::info!("{name} {shape:?}: split with x (a row per sample)");
            out.push((name, Beside::Rows(ds, Some(e))));
        } else if let (1, Ok(v)) = (shape.len(), super::classes::read_strings(&ds, input, &name)) {
            log::info!("{name}: {} strings, copied into every part", v.len());
            out.push((name, Beside::Names(v)));
        } else {
            log::warn!("{name} {shape:?}: left out of the parts (neither a row per sample nor strings)");
        }
    }
    Ok(out)
}

/// Copy rows `rows` of the dataset `name` (any rank) (shape `shape`, stored as `T`) from
/// `input` into a dataset of the same name and type in `out`.
fn copy_rows<T: Num>(
    ds: &hdf5::Dataset,
    input: &Path,
    name: &str,
    shape: &[usize],
    rows: std::ops::Range<usize>,
    out: &hdf5::File,
    out_path: &Path,
) -> Result<()> {
    let read = |e| Error::hdf5(input, format!("read {name}"), e);
    let mut part_shape = shape.to_vec();
    part_shape[0] = rows.len();
    let v: Vec<T> = h5::read_rows(ds, rows).map_err(read)?;
    h5::write(out, out_path, name, &v, &part_shape)
}
