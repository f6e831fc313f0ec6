//! Thin helpers over the `hdf5` crate that turn its errors into ones naming the file and
//! the dataset, with a hint of how to fix them.

use crate::error::{Error, Result};
use hdf5::types::TypeDescriptor;
use std::path::Path;

/// Open `path` for reading; `origin` says where the path came from (a job key such as
/// `data.train`, or a command-line argument) so the error can say what to fix.
pub fn open(path: &Path, origin: &str) -> Result<hdf5::File> {
    if !path.exists() {
        let hint = if origin.starts_with("data.") {
            " (a `{rank}` in the path is replaced by each rank's number)"
        } else {
            ""
        };
        return Err(Error::data(path, origin, format!("no such file{hint}")));
    }
    hdf5::File::open(path)
        .map_err(|e| Error::data(path, origin, format!("cannot open as HDF5 (not an HDF5 file, or damaged): {e}")))
}

pub fn dataset(file: &hdf5::File, path: &Path, name: &str) -> Result<hdf5::Dataset> {
    file.dataset(name).map_err(|e| {
        let members = file.member_names().unwrap_or_default();
        let top = name.split('/').next().unwrap_or(name);
        if members.iter().any(|m| m == top) {
            return Error::data(path, name, format!("cannot open the dataset (is the file damaged?): {e}"));
        }
        let hint = if name.starts_with("dense") || ["layers", "format", "step"].contains(&name) {
            "is this a weights or checkpoint file written by hvtrain?"
        } else {
            "set data.x_dataset / data.y_dataset"
        };
        Error::data(path, name, format!("dataset not found (the file has: [{}]); {hint}", members.join(", ")))
    })
}

/// The element type class of a dataset: "float", "int" or something else (named).
pub fn kind(ds: &hdf5::Dataset, path: &Path, name: &str) -> Result<&'static str> {
    let d = ds
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| Error::data(path, name, format!("unreadable element type: {e}")))?;
    Ok(match d {
        TypeDescriptor::Float(_) => "float",
        TypeDescriptor::Integer(_) | TypeDescriptor::Unsigned(_) => "int",
        _ => "other",
    })
}

/// Create (or truncate) an HDF5 file for writing.
pub fn create(path: &Path) -> Result<hdf5::File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create directory", e))?;
    }
    hdf5::File::create(path).map_err(|e| Error::hdf5(path, "create file", e))
}

/// Write a whole 1-D or 2-D f32/i32 array as dataset `name` (created, contiguous).
pub fn write<T: hdf5::H5Type + Copy>(
    file: &hdf5::File,
    path: &Path,
    name: &str,
    data: &[T],
    shape: &[usize],
) -> Result<()> {
    assert_eq!(data.len(), shape.iter().product::<usize>(), "write {name}: shape does not match data");
    let arr = ndarray::ArrayViewD::from_shape(ndarray::IxDyn(shape), data).expect("shape checked above");
    file.new_dataset_builder()
        .with_data(arr)
        .create(name)
        .map_err(|e| Error::hdf5(path, format!("write dataset {name}"), e))?;
    Ok(())
}
