//! `hvtrain plot RUN_DIR...`: the curves of one or more runs in one PNG, read from each
//! run's `metrics.jsonl` (written by `metrics::MetricsLog`, one JSON object per epoch).
//!
//! Four panels, two by two, per epoch: loss (train solid, test dashed, validation dotted) and
//! test accuracy (test R² for a regression loss) above, the learning rate (a log axis when it
//! spans more than a decade, as a schedule's drops do) and samples/s below. Runs are overlaid,
//! one colour each, with a legend naming the directory.
//!
//! Must not: read anything but `metrics.jsonl` files.

use super::style::{chart, chart_labelled, curve, draw_error, legend, rate, value_range, DrawResult, Stroke, COLOURS};
use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Deserialize;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The fields of a metrics.jsonl line that the plot uses. A value may be missing or null
/// (serde_json writes a non-finite number as null): that epoch is left out of that curve.
#[derive(Debug, Deserialize)]
struct Line {
    epoch: usize,
    train_loss: Option<f64>,
    test_loss: Option<f64>,
    test_accuracy: Option<f64>,
    test_r2: Option<f64>,
    val_loss: Option<f64>,
    samples_per_sec: Option<f64>,
    lr: Option<f64>,
}

/// Image size in pixels: four panels of 800 x 540, two by two, and a title.
pub const WIDTH: u32 = 1600;
pub const HEIGHT: u32 = 1120;

/// One run: its label (the directory as given) and its epochs in order.
struct Run {
    label: String,
    epochs: Vec<Line>,
}

fn read_run(dir: &Path) -> Result<Run> {
    let path = dir.join("metrics.jsonl");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        let hint = if dir.is_dir() {
            "reading the metrics (a run writes it after its first epoch)"
        } else {
            "reading the metrics (RUN_DIR is the job's output.dir)"
        };
        Error::io(&path, hint, e)
    })?;
    let mut epochs = Vec::new();
    let n = text.lines().count();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let parsed = serde_json::from_str::<Line>(l);
        if parsed.is_err() && i + 1 == n && !text.ends_with('\n') {
            // A running job is appending this line right now: plot the epochs before it.
            log::warn!("{}: line {} is still being written; left out", path.display(), i + 1);
            continue;
        }
        let m: Line = parsed.map_err(|e| {
            // serde_json's message ends "at line 1 column C": of this one line, so keep the column.
            let what = e.to_string();
            let what = what.split(" at line ").next().unwrap_or_default();
            let msg = format!("not an epoch's metrics: {what} at column {}: {}", e.column(), clip(l));
            Error::data(&path, format!("line {}", i + 1), msg)
        })?;
        epochs.push(m);
    }
    if epochs.is_empty() {
        return Err(Error::data(&path, "line 1", "no epochs in the file: the run has not finished an epoch yet"));
    }
    epochs.sort_by_key(|m| m.epoch);
    Ok(Run { label: dir.display().to_string(), epochs })
}

/// The start of a long line, for an error message.
fn clip(l: &str) -> String {
    match l.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &l[..i]),
        None => l.to_string(),
    }
}

/// Draw the runs in `dirs` into `output` (default: the first directory's curves.png).
/// Returns the path written.
pub fn plot_runs(dirs: &[PathBuf], output: Option<&Path>) -> Result<PathBuf> {
    let runs = dirs.iter().map(|d| read_run(d)).collect::<Result<Vec<_>>>()?;
    let output = output.map(Path::to_path_buf).unwrap_or_else(|| dirs[0].join("curves.png"));
    super::style::register_font();
    {
        let root = BitMapBackend::new(&output, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, &runs).map_err(|e| draw_error(&output, e))?;
        root.present().map_err(|e| draw_error(&output, e))?;
    }
    Ok(output)
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, runs: &[Run]) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let title = match runs {
        [r] => format!("hvtrain: {}", r.label),
        _ => format!("hvtrain: {} runs", runs.len()),
    };
    let root = root.titled(&title, ("sans-serif", 26))?;
    let panels = root.split_evenly((2, 2));

    let series = |f: fn(&Line) -> Option<f64>| -> Vec<Vec<(f64, f64)>> {
        runs.iter()
            .map(|r| {
                r.epochs.iter().filter_map(|m| f(m).filter(|v| v.is_finite()).map(|v| (m.epoch as f64, v))).collect()
            })
            .collect()
    };
    let train = series(|m| m.train_loss);
    let test = series(|m| m.test_loss);
    let val = series(|m| m.val_loss);
    let acc = series(|m| m.test_accuracy);
    let r2 = series(|m| m.test_r2);
    let lr = series(|m| m.lr);
    let speed = series(|m| m.samples_per_sec);
    let x = epoch_range(runs);

    // Loss: train solid, test dashed, one colour per run.
    {
        let y = value_range(train.iter().chain(&test).chain(&val), false);
        let title = if val.iter().all(Vec::is_empty) {
            "loss (train solid, test dashed)"
        } else {
            "loss (train solid, test dashed, val dotted)"
        };
        let mut chart = chart(&panels[0], title, x.clone(), y, "loss")?;
        for (i, r) in runs.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            curve(&mut chart, &train[i], c, Stroke::Solid, &format!("{} train", r.label))?;
            if !test[i].is_empty() {
                curve(&mut chart, &test[i], c, Stroke::Dashed, &format!("{} test", r.label))?;
            }
            if !val[i].is_empty() {
                curve(&mut chart, &val[i], c, Stroke::Dotted, &format!("{} val", r.label))?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }

    // Test accuracy, when any run has test data; test R² for regression runs.
    let regression = acc.iter().all(Vec::is_empty) && !r2.iter().all(Vec::is_empty);
    if regression {
        let y = value_range(r2.iter(), false);
        let y = y.start..y.end.min(1.0);
        let mut chart = chart(&panels[1], "test R² (regression)", x.clone(), y, "R²")?;
        for (i, r) in runs.iter().enumerate() {
            if !r2[i].is_empty() {
                curve(&mut chart, &r2[i], COLOURS[i % COLOURS.len()], Stroke::Solid, &r.label)?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    } else if acc.iter().all(Vec::is_empty) {
        let area = &panels[1];
        let (w, h) = area.dim_in_pixel();
        area.draw(&Text::new(
            "test accuracy: no test data",
            (w as i32 / 2 - 150, h as i32 / 2 - 20),
            ("sans-serif", 22).into_font().color(&BLACK),
        ))?;
        area.draw(&Text::new(
            "(no data.test in the job)",
            (w as i32 / 2 - 210, h as i32 / 2 + 10),
            ("sans-serif", 18).into_font().color(&RGBColor(90, 90, 90)),
        ))?;
    } else {
        let y = value_range(acc.iter(), false);
        let y = y.start.max(0.0)..y.end.min(1.0);
        let mut chart = chart(&panels[1], "test accuracy", x.clone(), y, "accuracy")?;
        for (i, r) in runs.iter().enumerate() {
            if !acc[i].is_empty() {
                curve(&mut chart, &acc[i], COLOURS[i % COLOURS.len()], Stroke::Solid, &r.label)?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    }

    // The learning rate after each epoch (metrics.jsonl's `lr`: the next step's).
    if lr.iter().all(Vec::is_empty) {
        let area = &panels[2];
        let (w, h) = area.dim_in_pixel();
        area.draw(&Text::new(
            "learning rate: not in metrics.jsonl",
            (w as i32 / 2 - 180, h as i32 / 2 - 20),
            ("sans-serif", 22).into_font().color(&BLACK),
        ))?;
    } else {
        let (lo, hi) = lr.iter().flatten().fold((f64::INFINITY, 0.0f64), |(lo, hi), &(_, v)| (lo.min(v), hi.max(v)));
        let log = lo > 0.0 && hi / lo > 10.0;
        let points: Vec<Vec<(f64, f64)>> = if log {
            lr.iter().map(|c| c.iter().map(|&(e, v)| (e, v.log10())).collect()).collect()
        } else {
            lr.clone()
        };
        let y = value_range(points.iter(), !log);
        let (caption, label): (&str, &dyn Fn(&f64) -> String) = if log {
            ("learning rate after each epoch (log scale)", &|v| rate(10f64.powf(*v)))
        } else {
            ("learning rate after each epoch", &|v| rate(*v))
        };
        let mut chart = chart_labelled(&panels[2], caption, x.clone(), y, "lr", label)?;
        for (i, r) in runs.iter().enumerate() {
            if !points[i].is_empty() {
                curve(&mut chart, &points[i], COLOURS[i % COLOURS.len()], Stroke::Solid, &r.label)?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }

    // Training throughput.
    {
        let y = value_range(speed.iter(), true);
        let mut chart = chart(&panels[3], "training samples/s (all ranks)", x, y, "samples/s")?;
        for (i, r) in runs.iter().enumerate() {
            curve(&mut chart, &speed[i], COLOURS[i % COLOURS.len()], Stroke::Solid, &r.label)?;
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    }
    Ok(())
}

/// The epochs of all runs, widened a little so that the first and last markers show.
fn epoch_range(runs: &[Run]) -> Range<f64> {
    let lo = runs.iter().filter_map(|r| r.epochs.first()).map(|m| m.epoch).min().unwrap_or(1) as f64;
    let hi = runs.iter().filter_map(|r| r.epochs.last()).map(|m| m.epoch).max().unwrap_or(1) as f64;
    let pad = ((hi - lo) * 0.03).max(0.25);
    lo - pad..hi + pad
}
