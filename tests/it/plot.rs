//! `hvtrain plot`: from the metrics.jsonl of real training runs to a PNG that is whole
//! (signature, IHDR, IEND, decodes), of a sensible size, and shows curves (not blank) in each
//! of its four panels (loss, test accuracy or a regression's R², the learning rate, samples/s);
//! several runs overlaid in their own colours; a bad metrics file is a clear error.

use crate::common;
use common::*;
use std::collections::HashSet;
use std::path::Path;

const D: usize = 6;

/// The colours of the first and second run (src/plot.rs, Tableau 10).
const RUN1: [u8; 3] = [31, 119, 180];
const RUN2: [u8; 3] = [255, 127, 14];

/// Train a tiny classifier for 3 epochs, with test data, into `dir`/`out_dir`.
fn train(dir: &Path, out_dir: &str, lr: &str) {
    let run = hvtrain(
        &[
            "train",
            "job.toml",
            "--set",
            "training.epochs=3",
            "--set",
            &format!("optimizer.lr={lr}"),
            "--set",
            &format!("output.dir=\"{out_dir}\""),
        ],
        dir,
        120,
    );
    assert!(run.ok(), "{}", run.all());
    let lines = std::fs::read_to_string(dir.join(out_dir).join("metrics.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 3, "{lines}");
}

fn setup(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(96, D, 3, 5);
    write_classes(&dir.join("train.h5"), &x, D, &y);
    let (x, y) = synthetic(32, D, 3, 6);
    write_classes(&dir.join("test.h5"), &x, D, &y);
    job(&dir, &[D, 16, 3], "train.h5", Some("test.h5"), "");
    dir
}

/// A decoded PNG: width, height and the RGB of every pixel.
pub(crate) struct Image {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) rgb: Vec<[u8; 3]>,
}

/// Check the PNG's structure by hand (signature, IHDR first with the size, IEND last, every
/// chunk's length within the file), then decode it with the `png` crate.
pub(crate) fn read_png(path: &Path) -> Image {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{}: no PNG signature", path.display());
    let mut at = 8;
    let mut chunks = Vec::new();
    while at + 12 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = String::from_utf8_lossy(&bytes[at + 4..at + 8]).into_owned();
        assert!(at + 12 + len <= bytes.len(), "{}: chunk {kind} runs past the end", path.display());
        if kind == "IHDR" {
            let w = u32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            let h = u32::from_be_bytes(bytes[at + 12..at + 16].try_into().unwrap());
            assert!(w >= 600 && h >= 400, "{}: IHDR says {w}x{h}, too small", path.display());
        }
        chunks.push(kind);
        at += 12 + len;
    }
    assert_eq!(at, bytes.len(), "{}: bytes after the last chunk", path.display());
    assert_eq!(chunks.first().map(String::as_str), Some("IHDR"), "{}: {chunks:?}", path.display());
    assert_eq!(chunks.last().map(String::as_str), Some("IEND"), "{}: {chunks:?}", path.display());
    assert!(chunks.iter().any(|c| c == "IDAT"), "{}: no image data: {chunks:?}", path.display());

    let mut dec = png::Decoder::new(std::io::Cursor::new(bytes));
    dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = dec.read_info().unwrap_or_else(|e| panic!("{}: does not decode: {e}", path.display()));
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap_or_else(|e| panic!("{}: does not decode: {e}", path.display()));
    let px = info.color_type.samples();
    assert!(px >= 3, "{}: not a colour image ({:?})", path.display(), info.color_type);
    let rgb = buf[..info.buffer_size()].chunks(px).map(|p| [p[0], p[1], p[2]]).collect();
    Image { width: info.width, height: info.height, rgb }
}

impl Image {
    pub(crate) fn colours(&self) -> usize {
        self.rgb.iter().collect::<HashSet<_>>().len()
    }
    pub(crate) fn count(&self, c: [u8; 3]) -> usize {
        self.rgb.iter().filter(|&&p| p == c).count()
    }
    /// Pixels of colour `c` in panel (row, col) of the run plot's 2 × 2 grid (the title's
    /// band counted in the top row).
    fn count_in(&self, c: [u8; 3], row: u32, col: u32) -> usize {
        let (w, h) = (self.width / 2, self.height / 2);
        (row * h..(row + 1) * h)
            .flat_map(|y| (col * w..(col + 1) * w).map(move |x| (x, y)))
            .filter(|&(x, y)| self.rgb[(y * self.width + x) as usize] == c)
            .count()
    }
    fn not_white(&self) -> usize {
        self.rgb.iter().filter(|&&p| p != [255, 255, 255]).count()
    }
    /// Not blank: text, axes and curves in many shades (anti-aliased text), a fair share
    /// of ink, and the first run's curve colour on many pixels.
    fn assert_drawn(&self, what: &str) {
        let total = self.rgb.len();
        assert_eq!(total, (self.width * self.height) as usize);
        assert!(self.colours() > 20, "{what}: only {} distinct colours: blank?", self.colours());
        assert!(self.not_white() > total / 100, "{what}: {} of {total} pixels not white: blank?", self.not_white());
        assert!(
            self.count(RUN1) > 500,
            "{what}: the run's curves are missing ({} pixels of its colour)",
            self.count(RUN1)
        );
    }
}

#[test]
fn plot_of_a_real_run_is_a_whole_png_with_curves_and_two_runs_overlay() {
    let _g = mpi_lock();
    let dir = setup("plot-real-run");
    train(&dir, "a", "0.1");

    // One run, default output: RUN_DIR/curves.png.
    let run = hvtrain(&["plot", "a"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    assert!(run.stdout.contains("a/curves.png"), "does not say where: {}", run.all());
    let one = read_png(&dir.join("a/curves.png"));
    one.assert_drawn("one run");
    for (row, col, what) in [(0, 0, "loss"), (0, 1, "test accuracy"), (1, 0, "learning rate"), (1, 1, "samples/s")] {
        assert!(one.count_in(RUN1, row, col) > 150, "the {what} panel has no curve ({})", one.count_in(RUN1, row, col));
    }
    assert_eq!(one.count(RUN2), 0, "one run, yet a second run's colour is drawn");

    // Two runs overlaid into --output: both colours are there.
    train(&dir, "b", "0.02");
    let run = hvtrain(&["plot", "a", "b", "--output", "both.png"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    let both = read_png(&dir.join("both.png"));
    both.assert_drawn("two runs");
    assert!(both.count(RUN2) > 500, "the second run's curves are missing ({} pixels)", both.count(RUN2));
}

#[test]
fn a_run_without_test_data_still_plots() {
    let dir = scratch("plot-no-test");
    std::fs::create_dir_all(dir.join("r")).unwrap();
    // As a regression job writes it: no test_loss or test_accuracy.
    std::fs::write(
        dir.join("r/metrics.jsonl"),
        "{\"epoch\":1,\"train_loss\":0.9,\"samples_per_sec\":1500.0,\"steps\":3}\n\
         {\"epoch\":2,\"train_loss\":0.5,\"samples_per_sec\":1700.0,\"steps\":3}\n",
    )
    .unwrap();
    let run = hvtrain(&["plot", "r"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    let img = read_png(&dir.join("r/curves.png"));
    img.assert_drawn("no test data");
    assert_eq!(img.count_in(RUN1, 0, 1), 0, "a test curve without test data");
    assert_eq!(img.count_in(RUN1, 1, 0), 0, "a learning-rate curve without an lr column");
}

/// A regression run plots its test R² where a classifier's accuracy goes, and a schedule's
/// learning rate (a cosine from 0.05 to 0.0005: two decades, a log axis).
#[test]
fn a_regression_run_plots_its_r2_and_its_learning_rate() {
    let _g = mpi_lock();
    let dir = scratch("plot-regression");
    let (x, _) = synthetic(96, D, 2, 5);
    let y: Vec<f32> = x.chunks_exact(D).map(|r| 2.0 * r[0] - r[1]).collect();
    let f = hdf5::File::create(dir.join("r.h5")).unwrap();
    write_dataset(&f, "x", &x, &[96, D]);
    write_dataset(&f, "y", &y, &[96, 1]);
    drop(f);
    let extra = "[optimizer]\nlr = 0.05\nschedule = \"cosine\"\nmin_lr = 0.0005\n";
    job(&dir, &[D, 16, 1], "r.h5", Some("r.h5"), extra);
    let sets = ["--set", "model.loss=\"mse\"", "--set", "training.epochs=4", "--set", "output.dir=\"a\""];
    let mut args = vec!["train", "job.toml"];
    args.extend(sets);
    let run = hvtrain(&args, &dir, 120);
    assert!(run.ok(), "{}", run.all());
    let run = hvtrain(&["plot", "a"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    let img = read_png(&dir.join("a/curves.png"));
    img.assert_drawn("regression");
    assert!(img.count_in(RUN1, 0, 1) > 150, "no R² curve ({} pixels)", img.count_in(RUN1, 0, 1));
    assert!(img.count_in(RUN1, 1, 0) > 150, "no learning-rate curve ({} pixels)", img.count_in(RUN1, 1, 0));
}

#[test]
fn bad_metrics_files_are_clear_errors() {
    let dir = scratch("plot-bad");
    let write = |d: &str, text: &str| {
        std::fs::create_dir_all(dir.join(d)).unwrap();
        std::fs::write(dir.join(d).join("metrics.jsonl"), text).unwrap();
    };
    write("good", "{\"epoch\":1,\"train_loss\":0.9,\"samples_per_sec\":1500.0}\n");
    write("corrupt", "{\"epoch\":1,\"train_loss\":0.9,\"samples_per_sec\":1500.0}\n{\"epoch\":2,\"train_lo\n");
    write("empty", "");
    let cases = [
        ("corrupt", "corrupt/metrics.jsonl: line 2: not an epoch's metrics"),
        ("empty", "empty/metrics.jsonl: line 1: no epochs"),
        ("missing", "missing/metrics.jsonl: reading the metrics"),
    ];
    for (d, want) in cases {
        // The good run first: the bad one is named even when it is not the first.
        let run = hvtrain(&["plot", "good", d, "--output", "x.png"], &dir, 60);
        assert_eq!(run.code, Some(1), "{d}: {}", run.all());
        assert!(run.stderr.contains(want), "{d}: expected {want:?} in\n{}", run.all());
        assert!(!dir.join("x.png").exists(), "{d}: wrote a plot anyway");
    }
    let run = hvtrain(&["plot"], &dir, 60);
    assert_eq!(run.code, Some(2), "no RUN_DIR: {}", run.all());

    // A last line without its newline is one a running job is still writing: left out, no error.
    let two = "{\"epoch\":1,\"train_loss\":0.9,\"samples_per_sec\":1500.0}\n\
               {\"epoch\":2,\"train_loss\":0.7,\"samples_per_sec\":1600.0}\n";
    write("running", &format!("{two}{{\"epoch\":3,\"tra"));
    let run = hvtrain(&["plot", "running"], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    assert!(run.stderr.contains("line 3 is still being written"), "{}", run.all());
    read_png(&dir.join("running/curves.png")).assert_drawn("a running job");
}

/// A sweep's folder: every trial's curve (the best in red) and one panel per searched key,
/// numbers or categories; the image grows a row per three keys; a broken record is named.
#[test]
fn a_sweep_folder_plots_its_trials_and_keys() {
    let dir = scratch("plot-sweep");
    let s = dir.join("s");
    let mut lines = String::new();
    for t in 0..5u32 {
        let d = s.join("trials").join(format!("{t:04}"));
        std::fs::create_dir_all(&d).unwrap();
        let epochs = if t < 2 { 4 } else { 1 };
        let m: String = (1..=epochs)
            .map(|e| format!("{{\"epoch\":{e},\"train_loss\":1.0,\"val_loss\":{}}}\n", 1.0 / (e as f64 + t as f64)))
            .collect();
        std::fs::write(d.join("metrics.jsonl"), m).unwrap();
        let last = 1.0 / (epochs as f64 + t as f64);
        lines += &format!(
            "{{\"trial\":{t},\"status\":\"completed\",\"params\":{{\"optimizer.lr\":{},\"model.layers\":[4,{},2],\"training.batch_size\":{},\"model.activation\":\"{}\"}},\"metric\":{last},\"epochs\":{epochs}}}\n",
            0.001 * 3f64.powi(t as i32),
            8 << t,
            16 << (t % 2),
            if t % 2 == 0 { "relu" } else { "tanh" }
        );
    }
    std::fs::write(s.join("sweep.jsonl"), &lines).unwrap();
    std::fs::write(s.join("sweep.json"), "{\"sweep\":{\"metric\":\"val_loss\"}}").unwrap();
    let run = hvtrain(&["plot", "s"], &dir, 60);
    assert!(run.ok() && run.stdout.contains("wrote s/sweep.png"), "{}", run.all());
    let img = read_png(&s.join("sweep.png"));
    assert_eq!((img.width, img.height), (1800, 1200), "four keys: two rows of panels");
    assert!(img.colours() > 20 && img.not_white() > img.rgb.len() / 100, "blank?");
    // The best trial (4: 1/(1+4) = 0.2, the lowest) in red: its curve's point and four key panels.
    assert!(img.count([214, 39, 40]) > 100, "no red best trial: {} pixels", img.count([214, 39, 40]));
    std::fs::write(s.join("sweep.jsonl"), lines + "{\"trial\":9,\"sta\n").unwrap();
    let bad = hvtrain(&["plot", "s"], &dir, 60);
    assert!(!bad.ok() && bad.stderr.contains("s/sweep.jsonl: line 6: not a trial record"), "{}", bad.all());
}
