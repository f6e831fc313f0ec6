//! NumPy's `.npy` format (version 1, 2 and 3 headers), read as a stream of rows: the header's
//! dtype, order and shape, then row-major data converted to float32 (features, values) or
//! int32 (class labels). `.npz` archives (`np.savez`, `np.savez_compressed`) are zip files of
//! `.npy` members, read through the `zip` crate member by member.
//!
//! Must not: read a whole array at once (files larger than memory stream).

use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

/// The element types `np.save` writes that hold numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F4,
    F8,
    I1,
    I2,
    I4,
    I8,
    U1,
    U2,
    U4,
    U8,
    B1,
}

impl Dtype {
    fn size(self) -> usize {
        match self {
            Dtype::I1 | Dtype::U1 | Dtype::B1 => 1,
            Dtype::I2 | Dtype::U2 => 2,
            Dtype::F4 | Dtype::I4 | Dtype::U4 => 4,
            Dtype::F8 | Dtype::I8 | Dtype::U8 => 8,
        }
    }
    pub fn is_int(self) -> bool {
        !matches!(self, Dtype::F4 | Dtype::F8)
    }
}

/// An open `.npy` stream positioned at its first element.
pub struct Npy<R: Read> {
    r: R,
    pub dtype: Dtype,
    big_endian: bool,
    /// [N] or [N, D] (more dimensions are flattened into D).
    pub shape: Vec<usize>,
    /// What to call it in errors: the file (and the member of an archive).
    pub name: String,
    buf: Vec<u8>,
}

fn bad(name: &str, why: impl Into<String>) -> Error {
    Error::data(Path::new(name), "(npy header)", why)
}

/// The value of `'key':` in the header's Python dict literal (up to the next top-level comma).
fn field<'a>(h: &'a str, key: &str) -> Option<&'a str> {
    let at = h.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = h[at..].trim_start().strip_prefix(':')?.trim_start();
    if rest.starts_with('(') {
        return Some(&rest[..=rest.find(')')?]);
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

impl<R: Read> Npy<R> {
    pub fn open(mut r: R, name: &str) -> Result<Npy<R>> {
        let io = |e| Error::io(Path::new(name), "read", e);
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).map_err(io)?;
        if &magic[..6] != b"\x93NUMPY" {
            return Err(bad(name, "not a .npy file (no \\x93NUMPY magic)"));
        }
        let len = if magic[6] == 1 {
            let mut l = [0u8; 2];
            r.read_exact(&mut l).map_err(io)?;
            u16::from_le_bytes(l) as usize
        } else {
            let mut l = [0u8; 4];
            r.read_exact(&mut l).map_err(io)?;
            u32::from_le_bytes(l) as usize
        };
        let mut h = vec![0u8; len];
        r.read_exact(&mut h).map_err(io)?;
        let h = String::from_utf8_lossy(&h).into_owned();
        let descr = field(&h, "descr").ok_or_else(|| bad(name, format!("no 'descr' in {h}")))?.trim_matches('\'');
        let (endian, code) = descr.split_at(1);
        let dtype = match code {
            "f4" => Dtype::F4,
            "f8" => Dtype::F8,
            "i1" => Dtype::I1,
            "i2" => Dtype::I2,
            "i4" => Dtype::I4,
            "i8" => Dtype::I8,
            "u1" => Dtype::U1,
            "u2" => Dtype::U2,
            "u4" => Dtype::U4,
            "u8" => Dtype::U8,
            "b1" => Dtype::B1,
            _ => {
                return Err(bad(
                    name,
                    format!("dtype {descr:?} holds no plain numbers (float, int, uint or bool are read); convert it with astype"),
                ))
            }
        };
        if field(&h, "fortran_order") == Some("True") {
            return Err(bad(name, "is stored in Fortran order; save np.ascontiguousarray(a) instead"));
        }
        let shape_s = field(&h, "shape").ok_or_else(|| bad(name, format!("no 'shape' in {h}")))?;
        let shape: Vec<usize> = shape_s
            .trim_matches(|c| c == '(' || c == ')')
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.trim_end_matches('L').parse::<usize>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| bad(name, format!("shape {shape_s} is not a tuple of sizes")))?;
        if shape.is_empty() {
            return Err(bad(name, "is a scalar; an array of rows is needed"));
        }
        let shape = if shape.len() > 2 { vec![shape[0], shape[1..].iter().product()] } else { shape };
        Ok(Npy { r, dtype, big_endian: endian == ">", shape, name: name.to_string(), buf: Vec::new() })
    }

    pub fn rows(&self) -> usize {
        self.shape[0]
    }
    /// Elements a row.
    pub fn width(&self) -> usize {
        self.shape.get(1).copied().unwrap_or(1)
    }

    /// The next `rows` rows' raw bytes into `self.buf`.
    fn fill(&mut self, rows: usize) -> Result<()> {
        let n = rows * self.width() * self.dtype.size();
        self.buf.resize(n, 0);
        self.r
            .read_exact(&mut self.buf)
            .map_err(|e| Error::io(Path::new(&self.name), "read (the file is shorter than its shape)", e))
    }

    /// Element `i` of the buffer as f64.
    fn get(&self, i: usize) -> f64 {
        let s = self.dtype.size();
        let mut b = [0u8; 8];
        b[..s].copy_from_slice(&self.buf[i * s..(i + 1) * s]);
        if self.big_endian {
            b[..s].reverse();
        }
        match self.dtype {
            Dtype::F4 => f32::from_le_bytes(b[..4].try_into().unwrap()) as f64,
            Dtype::F8 => f64::from_le_bytes(b),
            Dtype::I1 => b[0] as i8 as f64,
            Dtype::I2 => i16::from_le_bytes(b[..2].try_into().unwrap()) as f64,
            Dtype::I4 => i32::from_le_bytes(b[..4].try_into().unwrap()) as f64,
            Dtype::I8 => i64::from_le_bytes(b) as f64,
            Dtype::U1 | Dtype::B1 => b[0] as f64,
            Dtype::U2 => u16::from_le_bytes(b[..2].try_into().unwrap()) as f64,
            Dtype::U4 => u32::from_le_bytes(b[..4].try_into().unwrap()) as f64,
            Dtype::U8 => u64::from_le_bytes(b) as f64,
        }
    }

    /// The next `rows` rows appended to `out` as float32; a NaN or infinite value is an error
    /// naming its row (0-based, `first` the first of these) and column.
    pub fn read_f32(&mut self, rows: usize, first: usize, out: &mut Vec<f32>) -> Result<()> {
        self.fill(rows)?;
        let w = self.width();
        for i in 0..rows * w {
            let v = self.get(i) as f32;
            if !v.is_finite() {
                return Err(Error::data(
                    Path::new(&self.name),
                    "(data)",
                    format!("row {}, column {}: {v} (training needs finite numbers)", first + i / w, i % w),
                ));
            }
            out.push(v);
        }
        Ok(())
    }

    /// The next `rows` values (a 1-D integer array) appended to `out` as int32 class labels.
    pub fn read_classes(&mut self, rows: usize, first: usize, out: &mut Vec<i32>) -> Result<()> {
        self.fill(rows)?;
        for i in 0..rows {
            let v = self.get(i);
            if v < 0.0 || v > i32::MAX as f64 {
                return Err(Error::data(
                    Path::new(&self.name),
                    "(data)",
                    format!("row {}: class label {v} is not in 0..2^31 (labels are 0, 1, …, classes − 1)", first + i),
                ));
            }
            out.push(v as i32);
        }
        Ok(())
    }
}
