//! HDF5 compression filters: what a dataset's pipeline holds, whether this HDF5 can load each
//! filter (built in, or a plugin from `HDF5_PLUGIN_PATH` or HDF5's default plugin folder,
//! `/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins` on Debian, or the `hdf5plugin` Python
//! package's folder, found and added when HDF5_PLUGIN_PATH is unset: in the active virtual or
//! conda environment, ~/.local and the system's Python, else asked of the `python3` on PATH,
//! which covers pyenv, conda and module Pythons; the log says where a plugin came from; LZF
//! is built in), and, when it cannot, an error
//! that names the file, the dataset, the filter's registered id and name and where to get it.
//! Checked when a dataset is opened, so on every rank before the first step instead of inside
//! a read mid-epoch.
//!
//! Must not: read data (availability comes from HDF5's filter table and plugin loader).

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The registered name of filter `id` (The HDF Group's registry of filter ids), for messages.
pub fn name(id: i32) -> &'static str {
    match id {
        1 => "deflate (gzip)",
        2 => "shuffle",
        3 => "fletcher32",
        4 => "szip",
        5 => "nbit",
        6 => "scaleoffset",
        307 => "bzip2",
        32000 => "lzf",
        32001 => "blosc",
        32004 => "lz4",
        32008 => "bitshuffle",
        32013 => "zfp",
        32015 => "zstd",
        32017 => "sz",
        32024 => "sz3",
        32026 => "blosc2",
        _ => "not in hvtrain's list of registered filters",
    }
}

/// Where filter `id` comes from on Debian, when a package has it.
pub fn debian_package(id: i32) -> Option<&'static str> {
    match id {
        32000 => Some("hdf5-plugin-lzf"),
        32001 => Some("hdf5-filter-plugin-blosc-serial"),
        307 | 32004 => Some("hdf5-filter-plugin"),
        32013 => Some("hdf5-filter-plugin-zfp-serial"),
        _ => None,
    }
}

/// One filter of a dataset's pipeline.
#[derive(Clone, Debug)]
pub struct Step {
    pub id: i32,
    pub available: bool,
}

/// The filters of `ds`, in pipeline order, each with whether this HDF5 can apply it (asking
/// loads a plugin when one is found).
pub fn pipeline(ds: &hdf5::Dataset) -> Vec<Step> {
    ds.filters()
        .iter()
        .map(|f| {
            let id = f.id();
            Step { id, available: hdf5::filters::Filter::get_info(id).is_available }
        })
        .collect()
}

/// How to get filter `id`.
pub fn how_to_get(id: i32) -> String {
    let path = match std::env::var("HDF5_PLUGIN_PATH") {
        Ok(p) => format!("HDF5_PLUGIN_PATH is \"{p}\", and HDF5 looks only there"),
        Err(_) => "HDF5_PLUGIN_PATH is unset, so HDF5 looks in its default plugin folder (Debian: \
                   /usr/lib/x86_64-linux-gnu/hdf5/serial/plugins) and hvtrain in the hdf5plugin package's folder of \
                   the active virtual or conda environment, ~/.local, the system's Python and the python3 on PATH"
            .to_string(),
    };
    let get = match debian_package(id) {
        Some(p) => format!("install Debian's {p} (`make deps` does), or "),
        None => String::new(),
    };
    format!(
        "{get}install the hdf5plugin Python package (`pip install hdf5plugin`) and point HDF5_PLUGIN_PATH at its \
         plugins folder (`python3 -c 'import hdf5plugin; print(hdf5plugin.PLUGIN_PATH)'`); {path}"
    )
}

/// The plugin folders of the `hdf5plugin` Python package where it is commonly installed: the
/// active virtual or conda environment, the user's site-packages, the system's.
fn hdf5plugin_folders() -> Vec<PathBuf> {
    crate::python::site_folders("hdf5plugin/plugins").into_iter().filter(|d| d.is_dir()).collect()
}

/// Once per process, when HDF5_PLUGIN_PATH is unset: add the hdf5plugin package's folders
/// found to HDF5's plugin search path (after its default folder). Returns them.
pub fn add_hdf5plugin_folders() -> &'static [PathBuf] {
    static ADDED: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    ADDED.get_or_init(|| {
        if std::env::var_os("HDF5_PLUGIN_PATH").is_some() {
            return Vec::new();
        }
        let found = hdf5plugin_folders();
        for d in &found {
            append_plugin_folder(d);
            log::debug!("HDF5 plugins: added the hdf5plugin package's folder {}", d.display());
        }
        found
    })
}

/// Add `d` to the end of HDF5's plugin search path.
fn append_plugin_folder(d: &Path) {
    let Ok(c) = std::ffi::CString::new(d.to_string_lossy().as_bytes()) else { return };
    // SAFETY: a valid C string for the call's duration; HDF5 copies it.
    hdf5::sync::sync(|| unsafe { hdf5_sys::h5pl::H5PLappend(c.as_ptr()) });
}

/// Once per process, when HDF5_PLUGIN_PATH is unset: the `python3` on PATH asked for
/// `hdf5plugin.PLUGIN_PATH` (pyenv, conda, module and other Pythons the folder search misses),
/// that folder added to HDF5's search. Returns it and which python3 said so.
pub fn add_python_plugin_folder() -> Option<&'static (PathBuf, String)> {
    static ADDED: std::sync::OnceLock<Option<(PathBuf, String)>> = std::sync::OnceLock::new();
    ADDED
        .get_or_init(|| {
            if std::env::var_os("HDF5_PLUGIN_PATH").is_some() {
                return None;
            }
            let (line, python) = crate::python::ask("import hdf5plugin; print(hdf5plugin.PLUGIN_PATH)")?;
            let d = PathBuf::from(line);
            if !d.is_dir() || add_hdf5plugin_folders().contains(&d) {
                return None;
            }
            append_plugin_folder(&d);
            Some((d, python.display().to_string()))
        })
        .as_ref()
}

/// Once per filter and process (rank 0, or a command without ranks): which folder the plugins
/// of filters `ids` came from, when hvtrain had to find them.
fn log_source(ids: &[i32], how: &str, folders: &[PathBuf]) {
    static SAID: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    for &id in ids {
        if said.contains(&id) {
            continue;
        }
        said.push(id);
        if crate::sys::rank().unwrap_or(0) == 0 {
            let f: Vec<String> = folders.iter().map(|d| d.display().to_string()).collect();
            log::info!(
                "HDF5 plugins: filter {id} ({}) loads from {how} ({}); set HDF5_PLUGIN_PATH to choose the folder",
                name(id),
                f.join(", ")
            );
        }
    }
}

/// Refuse a dataset whose pipeline holds a filter this HDF5 cannot load. Before refusing, the
/// `hdf5plugin` Python package's plugin folders are added to HDF5's search (when
/// HDF5_PLUGIN_PATH is unset and one is installed) and the filter asked for again.
pub fn check(ds: &hdf5::Dataset, path: &Path, dataset: &str) -> Result<()> {
    let mut steps = pipeline(ds);
    let missing = |steps: &[Step]| -> Vec<i32> { steps.iter().filter(|s| !s.available).map(|s| s.id).collect() };
    let wanted = missing(&steps);
    if !wanted.is_empty() && !add_hdf5plugin_folders().is_empty() {
        steps = pipeline(ds);
        if missing(&steps).is_empty() {
            log_source(&wanted, "the hdf5plugin package's folder", add_hdf5plugin_folders());
        }
    }
    if !missing(&steps).is_empty() {
        if let Some((d, python)) = add_python_plugin_folder() {
            steps = pipeline(ds);
            if missing(&steps).is_empty() {
                let how = format!("hdf5plugin.PLUGIN_PATH of the python3 on PATH, {python}");
                log_source(&wanted, &how, std::slice::from_ref(d));
            }
        }
    }
    match steps.into_iter().find(|s| !s.available) {
        None => Ok(()),
        Some(s) => Err(Error::data(
            path,
            dataset,
            format!(
                "is compressed with HDF5 filter {} ({}), which this HDF5 cannot load, so no row of it can be read: {}",
                s.id,
                name(s.id),
                how_to_get(s.id)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_packages() {
        assert_eq!(name(32000), "lzf");
        assert_eq!(name(32015), "zstd");
        assert_eq!(debian_package(32001), Some("hdf5-filter-plugin-blosc-serial"));
        assert!(debian_package(32015).is_none());
        let how = how_to_get(32015);
        assert!(how.contains("hdf5plugin") && !how.contains("Debian's"), "{how}");
        assert!(how_to_get(32000).starts_with("install Debian's hdf5-plugin-lzf"));
    }
}
