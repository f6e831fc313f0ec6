//! `hvtrain data check FILE`: every dataset of an HDF5 file (groups walked), with its shape,
//! element type, chunks and filters, and whether this HDF5 can load each filter; what to
//! install for one it cannot. The same availability test that opening a training file makes.
//!
//! Must not: read data.

use super::filters;
use super::h5;
use crate::error::Result;
use std::path::Path;

/// Print the report to stdout; Ok(false) when some filter cannot be loaded.
pub fn check_file(path: &Path) -> Result<bool> {
    let file = h5::open(path, "FILE")?;
    println!("{}", path.display());
    for d in filters::add_hdf5plugin_folders() {
        println!("  (HDF5 plugins also from the hdf5plugin package: {})", d.display());
    }
    // A filter still missing: ask the python3 on PATH for its hdf5plugin folder too.
    let mut any_missing = false;
    walk(&file, "", &mut |_, ds| any_missing |= filters::pipeline(ds).iter().any(|s| !s.available))?;
    if any_missing {
        if let Some((d, python)) = filters::add_python_plugin_folder() {
            println!("  (HDF5 plugins also from hdf5plugin.PLUGIN_PATH of {python}: {})", d.display());
        }
    }
    let mut all_ok = true;
    let mut missing = Vec::new();
    walk(&file, "", &mut |name, ds| {
        let dtype = ds.dtype().ok().and_then(|t| t.to_descriptor().ok()).map_or("?".to_string(), |t| format!("{t}"));
        let chunks = ds.chunk().map_or("contiguous".to_string(), |c| format!("chunks {c:?}"));
        let steps = filters::pipeline(ds);
        let fs = if steps.is_empty() {
            "no filters".to_string()
        } else {
            steps
                .iter()
                .map(|s| {
                    if !s.available && !missing.contains(&s.id) {
                        missing.push(s.id);
                    }
                    format!(
                        "{} {} ({})",
                        s.id,
                        filters::name(s.id),
                        if s.available { "available" } else { "NOT AVAILABLE" }
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        all_ok &= steps.iter().all(|s| s.available);
        let shape = ds.shape();
        // What a model's input width must be for this as x (images are read flattened).
        let flat = match shape.len() {
            3.. => format!(" (as x: {} features per sample, read flattened)", h5::features_text(&shape)),
            _ => String::new(),
        };
        println!("  {name}: shape {shape:?}{flat}, {dtype}, {chunks}, filters: {fs}");
    })?;
    for id in missing {
        println!("filter {id} ({}): {}", filters::name(id), filters::how_to_get(id));
    }
    Ok(all_ok)
}

fn walk(g: &hdf5::Group, prefix: &str, f: &mut dyn FnMut(&str, &hdf5::Dataset)) -> Result<()> {
    let mut names = g.member_names().unwrap_or_default();
    names.sort();
    for m in names {
        let full = format!("{prefix}/{m}");
        if let Ok(ds) = g.dataset(&m) {
            f(&full, &ds);
        } else if let Ok(sub) = g.group(&m) {
            walk(&sub, &full, f)?;
        }
    }
    Ok(())
}
