//! Thin helpers over the `hdf5` crate that turn its errors into ones naming the file and
//! the dataset, with a hint of how to fix them.
//!
//! Must not: know the job's meaning of a dataset (shapes and labels are `shard`'s).

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

/// Open dataset `name`, which may be a path inside groups (`train/images`). When it is not
/// there, the error lists what the deepest existing group on the way holds.
/// A dataset whose filters this HDF5 cannot load is refused here (`filters::check`), before
/// any read.
pub fn dataset(file: &hdf5::File, path: &Path, name: &str) -> Result<hdf5::Dataset> {
    let ds = open_dataset(file, path, name)?;
    super::filters::check(&ds, path, name)?;
    Ok(ds)
}

fn open_dataset(file: &hdf5::File, path: &Path, name: &str) -> Result<hdf5::Dataset> {
    file.dataset(name).map_err(|e| {
        let hint = if name.starts_with("dense") || ["layers", "format", "step"].contains(&name) {
            "is this a weights or checkpoint file written by hvtrain?"
        } else {
            "set data.x_dataset / data.y_dataset"
        };
        let parts: Vec<&str> = name.split('/').filter(|p| !p.is_empty()).collect();
        let mut group: hdf5::Group = (**file).clone();
        let mut inside = String::new();
        for (i, part) in parts.iter().enumerate() {
            let members = group.member_names().unwrap_or_default();
            let holder = if inside.is_empty() { "the file".to_string() } else { format!("group {inside}") };
            if !members.iter().any(|m| m == part) {
                return Error::data(
                    path,
                    name,
                    format!("dataset not found ({holder} has: [{}]); {hint}", members.join(", ")),
                );
            }
            inside = format!("{inside}/{part}");
            match group.group(part) {
                Ok(g) if i + 1 == parts.len() => {
                    let held = g.member_names().unwrap_or_default().join(", ");
                    return Error::data(path, name, format!("is a group, not a dataset (it holds: [{held}]); {hint}"));
                }
                Ok(g) => group = g,
                Err(_) if i + 1 < parts.len() => {
                    return Error::data(path, name, format!("{inside} is not a group, so it holds no {name}; {hint}"));
                }
                Err(_) => break,
            }
        }
        Error::data(path, name, format!("cannot open the dataset (is the file damaged?): {e}"))
    })
}

/// The element type class of a dataset: "float", "int", "bool" or something else ("other").
pub fn kind(ds: &hdf5::Dataset, path: &Path, name: &str) -> Result<&'static str> {
    let d = ds
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| Error::data(path, name, format!("unreadable element type: {e}")))?;
    Ok(match d {
        TypeDescriptor::Float(_) => "float",
        TypeDescriptor::Integer(_) | TypeDescriptor::Unsigned(_) => "int",
        // An enum of FALSE and TRUE: numpy's and h5py's bool.
        TypeDescriptor::Boolean => "bool",
        _ => "other",
    })
}

/// The element types a features dataset (`x`) may have. Every one is converted to float32
/// as rows are read (`shard::read_rows`), so a file of uint8 images is read as it is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F32,
    F64,
    /// float16 (or another 2-byte float): HDF5 converts it to float32 as it reads, since the
    /// `hdf5` crate has no f16 type without its `f16` feature.
    F16,
}

impl Elem {
    /// The name HDF5 tools (and numpy) use: `uint8`, `float32`.
    pub fn name(self) -> &'static str {
        match self {
            Elem::U8 => "uint8",
            Elem::I8 => "int8",
            Elem::U16 => "uint16",
            Elem::I16 => "int16",
            Elem::U32 => "uint32",
            Elem::I32 => "int32",
            Elem::U64 => "uint64",
            Elem::I64 => "int64",
            Elem::F32 => "float32",
            Elem::F64 => "float64",
            Elem::F16 => "float16",
        }
    }
}

/// Run `$body` with the type alias `$T` bound to the Rust type of element type `$e`.
macro_rules! with_elem {
    ($e:expr, $T:ident => $body:expr) => {
        match $e {
            $crate::data::h5::Elem::U8 => {
                type $T = u8;
                $body
            }
            $crate::data::h5::Elem::I8 => {
                type $T = i8;
                $body
            }
            $crate::data::h5::Elem::U16 => {
                type $T = u16;
                $body
            }
            $crate::data::h5::Elem::I16 => {
                type $T = i16;
                $body
            }
            $crate::data::h5::Elem::U32 => {
                type $T = u32;
                $body
            }
            $crate::data::h5::Elem::I32 => {
                type $T = i32;
                $body
            }
            $crate::data::h5::Elem::U64 => {
                type $T = u64;
                $body
            }
            $crate::data::h5::Elem::I64 => {
                type $T = i64;
                $body
            }
            $crate::data::h5::Elem::F32 => {
                type $T = f32;
                $body
            }
            $crate::data::h5::Elem::F64 => {
                type $T = f64;
                $body
            }
            $crate::data::h5::Elem::F16 => {
                type $T = f32;
                $body
            }
        }
    };
}
pub(crate) use with_elem;

/// A stored number converted to float: `as` casts (round to nearest; integers beyond 2^24
/// lose their low bits in float32, exactly as numpy's `astype(np.float32)`).
pub trait Num: hdf5::H5Type + Copy + std::fmt::Display {
    fn to_f32(self) -> f32;
    fn to_f64(self) -> f64;
    /// The whole number this value is: an integer type's exact value; a float's value if it
    /// is finite and whole (saturated past i128's range), else None.
    fn whole(self) -> Option<i128>;
}

macro_rules! impl_num {
    ($whole:expr; $($t:ty),*) => {$(
        impl Num for $t {
            #[inline(always)]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn whole(self) -> Option<i128> {
                #[allow(clippy::redundant_closure_call)]
                ($whole)(self)
            }
        }
    )*};
}
impl_num!(|v| Some(v as i128); u8, i8, u16, i16, u32, i32, u64, i64);
impl_num!(|v: Self| (v.is_finite() && v.fract() == 0.0).then_some(v as i128); f32, f64);

/// The element type of dataset `name`, if it is a number type hvtrain reads (any integer,
/// float16, float32 or float64, whatever its byte order); otherwise an error naming the type found and `need`
/// (what the dataset must hold, e.g. "x must be a 2-D array [samples, features] of ...").
pub fn elem(ds: &hdf5::Dataset, path: &Path, name: &str, need: &str) -> Result<Elem> {
    use hdf5::types::{FloatSize, IntSize};
    let unreadable = |e| Error::data(path, name, format!("unreadable element type ({e}); {need}"));
    let t = ds.dtype().map_err(unreadable)?;
    let d = match t.to_descriptor() {
        Ok(d) => d,
        // Integers of every size have descriptors; a 2-byte type HDF5 can convert to float32
        // is a float16.
        Err(_) if t.size() == 2 && t.conv_to::<f32>().is_some() => return Ok(Elem::F16),
        Err(e) => return Err(unreadable(e)),
    };
    Ok(match d {
        TypeDescriptor::Unsigned(IntSize::U1) => Elem::U8,
        TypeDescriptor::Integer(IntSize::U1) => Elem::I8,
        TypeDescriptor::Unsigned(IntSize::U2) => Elem::U16,
        TypeDescriptor::Integer(IntSize::U2) => Elem::I16,
        TypeDescriptor::Unsigned(IntSize::U4) => Elem::U32,
        TypeDescriptor::Integer(IntSize::U4) => Elem::I32,
        TypeDescriptor::Unsigned(IntSize::U8) => Elem::U64,
        TypeDescriptor::Integer(IntSize::U8) => Elem::I64,
        TypeDescriptor::Float(FloatSize::U4) => Elem::F32,
        TypeDescriptor::Float(FloatSize::U8) => Elem::F64,
        other => {
            return Err(Error::data(path, name, format!("element type {other} is not supported; {need}")));
        }
    })
}

/// Rows `rows` of dataset `ds` whatever its rank: every element of those rows (all of their
/// trailing dimensions), in row-major order.
pub fn read_rows<T: hdf5::H5Type + Copy>(ds: &hdf5::Dataset, rows: std::ops::Range<usize>) -> hdf5::Result<Vec<T>> {
    use hdf5::{Hyperslab, SliceOrIndex};
    let mut dims = vec![SliceOrIndex::from(rows)];
    dims.extend((1..ds.ndim()).map(|_| SliceOrIndex::from(..)));
    let a = ds.read_slice::<T, _, ndarray::IxDyn>(Hyperslab::from(dims))?;
    Ok(match a.into_raw_vec_and_offset() {
        (v, None | Some(0)) => v,
        (v, Some(o)) => v[o..].to_vec(),
    })
}

/// The features per sample of an `x` of shape `shape` ([samples, features], or [samples,
/// d1, d2, ...] read flattened, as Keras' `Flatten` reads images), or None below 2-D.
pub fn features(shape: &[usize]) -> Option<usize> {
    (shape.len() >= 2).then(|| shape[1..].iter().product())
}

/// `shape`'s features as a person checks them: `784`, or `28 × 28 = 784`.
pub fn features_text(shape: &[usize]) -> String {
    let d = features(shape).unwrap_or(0);
    if shape.len() == 2 {
        d.to_string()
    } else {
        format!("{} = {d}", shape[1..].iter().map(|v| v.to_string()).collect::<Vec<_>>().join(" × "))
    }
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

/// Write strings as a 1-D dataset of variable-length UTF-8 (what h5py's `string_dtype()`
/// reads as `str`); a string holding NUL is written empty.
pub fn write_strings(file: &hdf5::File, path: &Path, name: &str, v: &[String]) -> Result<()> {
    let s: Vec<hdf5::types::VarLenUnicode> = v
        .iter()
        .map(|s| s.parse::<hdf5::types::VarLenUnicode>().unwrap_or_else(|_| hdf5::types::VarLenUnicode::new()))
        .collect();
    file.new_dataset_builder()
        .with_data(&s)
        .create(name)
        .map_err(|e| Error::hdf5(path, format!("write dataset {name}"), e))?;
    Ok(())
}
