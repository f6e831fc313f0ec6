//! `hvtrain plot`: the curves of one or more runs in one PNG, read from each run's
//! `metrics.jsonl` (written by `metrics::MetricsLog`, one JSON object per epoch).
//!
//! Three panels side by side: loss (train solid, test dashed), test accuracy and samples/s,
//! per epoch. Runs are overlaid, one colour each, with a legend naming the directory.
//! Text is drawn with DejaVu Sans embedded in the binary (assets/DejaVuSans.ttf), so no
//! system font lookup (fontconfig) is needed on the node that draws.
//!
//! Must not: read anything but `metrics.jsonl` files.

use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Deserialize;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Image size in pixels: three panels of 600 x 560 and a title.
pub const WIDTH: u32 = 1800;
pub const HEIGHT: u32 = 600;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// One run's colours, in order (Tableau 10), then again.
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The fields of a metrics.jsonl line that the plot uses. A value may be missing or null
/// (serde_json writes a non-finite number as null): that epoch is left out of that curve.
#[derive(Debug, Deserialize)]
struct Line {
    epoch: usize,
    train_loss: Option<f64>,
    test_loss: Option<f64>,
    test_accuracy: Option<f64>,
    val_loss: Option<f64>,
    samples_per_sec: Option<f64>,
}

/// How a curve is stroked: train solid, test dashed, validation dotted.
#[derive(Clone, Copy, PartialEq)]
enum Stroke {
    Solid,
    Dashed,
    Dotted,
}

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

fn draw_error(output: &Path, e: impl std::fmt::Display) -> Error {
    Error::io(output, "drawing the plot", std::io::Error::other(e.to_string()))
}

/// Draw the runs in `dirs` into `output` (default: the first directory's curves.png).
/// Returns the path written.
pub fn plot(dirs: &[PathBuf], output: Option<&Path>) -> Result<PathBuf> {
    let runs = dirs.iter().map(|d| read_run(d)).collect::<Result<Vec<_>>>()?;
    let output = output.map(Path::to_path_buf).unwrap_or_else(|| dirs[0].join("curves.png"));
    // The font table is global and the name may already hold it (a second call): ignore that.
    let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    {
        let root = BitMapBackend::new(&output, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, &runs).map_err(|e| draw_error(&output, e))?;
        root.present().map_err(|e| draw_error(&output, e))?;
    }
    Ok(output)
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

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
    let panels = root.split_evenly((1, 3));

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

    // Test accuracy, when any run has test data.
    if acc.iter().all(Vec::is_empty) {
        let area = &panels[1];
        let (w, h) = area.dim_in_pixel();
        area.draw(&Text::new(
            "test accuracy: no test data",
            (w as i32 / 2 - 150, h as i32 / 2 - 20),
            ("sans-serif", 22).into_font().color(&BLACK),
        ))?;
        area.draw(&Text::new(
            "(no data.test in the job, or a regression loss)",
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

    // Training throughput.
    {
        let y = value_range(speed.iter(), true);
        let mut chart = chart(&panels[2], "training samples/s (all ranks)", x, y, "samples/s")?;
        for (i, r) in runs.iter().enumerate() {
            curve(&mut chart, &speed[i], COLOURS[i % COLOURS.len()], Stroke::Solid, &r.label)?;
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    }
    Ok(())
}

type Chart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>;

fn chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x: Range<f64>,
    y: Range<f64>,
    y_desc: &str,
) -> std::result::Result<Chart<'a, DB>, Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(x.clone(), y)?;
    // Epochs are whole numbers: label only those (at most 10).
    let first = x.start.ceil() as i64;
    let last = x.end.floor() as i64;
    let n = (last - first + 1).clamp(2, 10) as usize;
    chart
        .configure_mesh()
        .x_desc("epoch")
        .y_desc(y_desc)
        .x_labels(n)
        .x_label_formatter(&|v| {
            if (v - v.round()).abs() < 1e-9 {
                format!("{}", v.round() as i64)
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| short(*v))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(WHITE)
        .draw()?;
    Ok(chart)
}

/// One curve with a marker at every epoch (so that a one-epoch run shows too).
fn curve<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    points: &[(f64, f64)],
    colour: RGBColor,
    stroke: Stroke,
    label: &str,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let style = colour.stroke_width(2);
    let anno = match stroke {
        Stroke::Dashed => chart.draw_series(DashedLineSeries::new(points.iter().copied(), 8, 5, style))?,
        Stroke::Dotted => chart.draw_series(DashedLineSeries::new(points.iter().copied(), 2, 4, style))?,
        Stroke::Solid => chart.draw_series(LineSeries::new(points.iter().copied(), style))?,
    };
    anno.label(label).legend(move |(x, y)| {
        if stroke == Stroke::Dotted {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (3, 0)], style)
                + PathElement::new(vec![(9, 0), (12, 0)], style)
        } else if stroke == Stroke::Dashed {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (7, 0)], style)
                + PathElement::new(vec![(12, 0), (19, 0)], style)
        } else {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (10, 0)], style)
                + PathElement::new(vec![(10, 0), (19, 0)], style)
        }
    });
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
    Ok(())
}

fn legend<'a, DB: DrawingBackend + 'a>(chart: &mut Chart<'a, DB>, at: SeriesLabelPosition) -> DrawResult
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(at)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .draw()?;
    Ok(())
}

/// The epochs of all runs, widened a little so that the first and last markers show.
fn epoch_range(runs: &[Run]) -> Range<f64> {
    let lo = runs.iter().filter_map(|r| r.epochs.first()).map(|m| m.epoch).min().unwrap_or(1) as f64;
    let hi = runs.iter().filter_map(|r| r.epochs.last()).map(|m| m.epoch).max().unwrap_or(1) as f64;
    let pad = ((hi - lo) * 0.03).max(0.25);
    lo - pad..hi + pad
}

/// The values of every curve with 5% room; from 0 when `from_zero`.
fn value_range<'a>(curves: impl Iterator<Item = &'a Vec<(f64, f64)>>, from_zero: bool) -> Range<f64> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for &(_, v) in curves.flatten() {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return 0.0..1.0;
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    let pad = if hi > lo { (hi - lo) * 0.05 } else { hi.abs().max(1.0) * 0.05 };
    (if from_zero { lo } else { lo - pad })..hi + pad
}

/// An axis label: few digits, thousands as k.
fn short(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}
