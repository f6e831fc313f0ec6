//! NumPy inputs: a `.npy` of features with `--y-file` (and a `.npy` of weights), or a `.npz`
//! with arrays `x` and `y` (and a weights array), streamed a chunk of rows at a time into the
//! sink (no `y` with `--features-only`).
//!
//! Must not: parse the `.npy` format (`npy.rs` does).

use super::sink::{Chunk, Sink, YKind};
use super::{npy, summary, ClassOrder, Opts, Progress, Summary, CHUNK_ROWS};
use crate::error::{Error, Result};
use std::path::Path;

/// Stream `x`, `y` (none with `--features-only`) and sample weights `w` arrays of the same
/// row count into the sink.
fn stream<A: std::io::Read, B: std::io::Read, C: std::io::Read>(
    mut x: npy::Npy<A>,
    mut y: Option<npy::Npy<B>>,
    mut w: Option<npy::Npy<C>>,
    out: &Path,
    o: &Opts,
) -> Result<Summary> {
    let (n, d) = (x.rows(), x.width());
    if let Some(y) = y.as_ref().filter(|y| y.rows() != n) {
        return Err(Error::data(Path::new(&y.name), "(shape)", format!("{} rows, {} has {n}", y.rows(), x.name)));
    }
    if let Some(w) = &w {
        if w.rows() != n || w.width() != 1 {
            return Err(Error::data(
                Path::new(&w.name),
                "(shape)",
                format!(
                    "sample weights must be an array [N] or [N, 1] with one weight per row of {} ({n} rows), found \
                     shape {:?}",
                    x.name, w.shape
                ),
            ));
        }
    }
    if n == 0 {
        return Err(Error::data(Path::new(&x.name), "(shape)", "has no rows"));
    }
    let classes = y.as_ref().is_some_and(|y| y.dtype.is_int() && y.shape.len() == 1 && !o.regression);
    if let (ClassOrder::Given { source, .. }, Some(y)) = (&o.classes, &y) {
        return Err(Error::config(
            "command line",
            source.as_str(),
            format!(
                "numbers class names, but {} holds numbers; it is for CSV/TSV or Parquet labels that are strings",
                y.name
            ),
        ));
    }
    let kind = match &y {
        None => YKind::None,
        Some(_) if classes => YKind::Classes,
        Some(y) => YKind::Values(y.width()),
    };
    let mut sink = Sink::new(out, d, kind, o.compress, o.shard, Some(n), Vec::new())?;
    if w.is_some() {
        sink = sink.with_weights();
    }
    let (mut chunk, mut at, mut progress) = (Chunk::default(), 0, Progress::new());
    while at < n {
        let m = CHUNK_ROWS.min(n - at);
        chunk.clear();
        x.read_f32(m, at, &mut chunk.x)?;
        match &mut y {
            Some(y) if classes => y.read_classes(m, at, &mut chunk.classes)?,
            Some(y) => y.read_f32(m, at, &mut chunk.values)?,
            None => {}
        }
        if let Some(w) = &mut w {
            w.read_f32(m, at, &mut chunk.w)?;
            if let Some(i) = chunk.w.iter().position(|&v| v < 0.0) {
                return Err(Error::data(
                    Path::new(&w.name),
                    "(data)",
                    format!(
                        "row {}: sample weight {} is negative: weights must be finite numbers >= 0",
                        at + i,
                        chunk.w[i]
                    ),
                ));
            }
        }
        sink.write(&chunk)?;
        at += m;
        progress.rows(at, Some(n));
    }
    let files = sink.finish(&[], None)?;
    Ok(summary(n, d, kind, Vec::new(), files, out, o))
}

pub(super) fn from_npy(input: &Path, out: &Path, o: &Opts) -> Result<Summary> {
    let yf = match (&o.y_file, o.features_only) {
        (Some(f), false) => Some(f),
        (None, true) => None,
        (Some(_), true) => {
            return Err(Error::config("command line", "--y-file", "gives targets, which --features-only leaves out"))
        }
        (None, false) => {
            return Err(Error::config(
                "command line",
                "--y-file",
                "a .npy of features needs its targets: --y-file Y.npy (or import a .npz with x and y; rows to \
                 predict on: --features-only)",
            ))
        }
    };
    let open = |p: &Path| -> Result<npy::Npy<std::io::BufReader<std::fs::File>>> {
        let f = std::fs::File::open(p).map_err(|e| Error::io(p, "open", e))?;
        npy::Npy::open(std::io::BufReader::with_capacity(1 << 20, f), &p.display().to_string())
    };
    let w = o.sample_weight.as_deref().map(|p| open(Path::new(p))).transpose()?;
    let y = yf.map(|f| open(f)).transpose()?;
    stream(open(input)?, y, w, out, o)
}

pub(super) fn from_npz(input: &Path, out: &Path, o: &Opts) -> Result<Summary> {
    let archive = || -> Result<zip::ZipArchive<std::fs::File>> {
        let f = std::fs::File::open(input).map_err(|e| Error::io(input, "open", e))?;
        zip::ZipArchive::new(f)
            .map_err(|e| Error::data(input, "(zip)", format!("not a readable .npz (zip) archive: {e}")))
    };
    let (mut ax, mut ay, mut aw) = (archive()?, archive()?, archive()?);
    let member = |a: &mut zip::ZipArchive<std::fs::File>, name: &str| -> Result<()> {
        a.index_for_name(&format!("{name}.npy")).map(|_| ()).ok_or_else(|| {
            let have: Vec<String> =
                a.file_names().filter_map(|s| s.ok()).map(|s| s.trim_end_matches(".npy").to_string()).collect();
            Error::data(
                input,
                name,
                format!(
                    "the archive has no array {name:?} (it has {have:?}); save it as np.savez(path, x=..., y=...{})",
                    if name == "x" || name == "y" { String::new() } else { format!(", {name}=...") }
                ),
            )
        })
    };
    member(&mut ax, "x")?;
    if !o.features_only {
        member(&mut ay, "y")?;
    }
    if let Some(name) = &o.sample_weight {
        member(&mut aw, name)?;
    }
    let xr = ax.by_name("x.npy").map_err(|e| Error::data(input, "x", e.to_string()))?;
    let yr = if o.features_only {
        None
    } else {
        Some(ay.by_name("y.npy").map_err(|e| Error::data(input, "y", e.to_string()))?)
    };
    let (xn, yn) = (format!("{}:x", input.display()), format!("{}:y", input.display()));
    let w = match &o.sample_weight {
        Some(name) => {
            let r = aw.by_name(&format!("{name}.npy")).map_err(|e| Error::data(input, name, e.to_string()))?;
            Some(npy::Npy::open(r, &format!("{}:{name}", input.display()))?)
        }
        None => None,
    };
    let y = yr.map(|r| npy::Npy::open(r, &yn)).transpose()?;
    // Bound first: the readers borrow the archives, which a tail expression's temporaries
    // would outlive.
    #[allow(clippy::let_and_return)]
    let s = stream(npy::Npy::open(xr, &xn)?, y, w, out, o);
    s
}
