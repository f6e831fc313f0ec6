//! `hvtrain plot SWEEP_DIR`: a sweep in one PNG. Left, every trial's metric per epoch (from
//! its `trials/NNNN/metrics.jsonl`), the best trial in red, the others from dark (better) to
//! light (worse); right, the metric after each trial's last epoch against each searched key,
//! one panel per key (a log axis for keys spread over more than a decade, categories for
//! values that are not numbers).
//!
//! Must not: read anything but `sweep.jsonl`, `sweep.json` and the trials' `metrics.jsonl`.

use super::style::{chart, draw_error, short, value_range, DrawResult, HEIGHT, WIDTH};
use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

pub const TRIALS: &str = "sweep.jsonl";

/// One trial as the plot needs it.
struct Trial {
    params: serde_json::Map<String, serde_json::Value>,
    metric: Option<f64>,
    /// (epoch, metric) of its metrics.jsonl.
    curve: Vec<(f64, f64)>,
}

/// Panels of the right part per row.
const PER_ROW: usize = 3;

pub fn plot_sweep(dir: &Path, output: Option<&Path>) -> Result<PathBuf> {
    let path = dir.join(TRIALS);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, "reading the sweep's trials", e))?;
    let metric = std::fs::read_to_string(dir.join("sweep.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["sweep"]["metric"].as_str().map(String::from))
        .unwrap_or_else(|| "val_loss".into());
    let mut trials = Vec::new();
    for (i, l) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(l)
            .map_err(|e| Error::data(&path, format!("line {}", i + 1), format!("not a trial record: {e}")))?;
        let n = v["trial"].as_u64().unwrap_or(0);
        let metrics = dir.join("trials").join(format!("{n:04}")).join("metrics.jsonl");
        let curve = std::fs::read_to_string(&metrics)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|m| Some((m["epoch"].as_f64()?, m[&metric].as_f64()?)))
            .filter(|p| p.1.is_finite())
            .collect();
        trials.push(Trial {
            params: v["params"].as_object().cloned().unwrap_or_default(),
            metric: v["metric"].as_f64().filter(|m| m.is_finite()),
            curve,
        });
    }
    if trials.is_empty() {
        return Err(Error::data(&path, "line 1", "no trials recorded yet"));
    }
    let maximize = metric.ends_with("accuracy") || metric.ends_with("r2") || metric.ends_with("f1");
    // Best first; trials without a metric last.
    trials.sort_by(|a, b| match (a.metric, b.metric) {
        (Some(x), Some(y)) if maximize => y.total_cmp(&x),
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        _ => std::cmp::Ordering::Equal,
    });
    let output = output.map(Path::to_path_buf).unwrap_or_else(|| dir.join("sweep.png"));
    let keys: Vec<String> = trials[0].params.keys().cloned().collect();
    let rows = keys.len().div_ceil(PER_ROW).max(1) as u32;
    super::style::register_font();
    {
        let root = BitMapBackend::new(&output, (WIDTH, HEIGHT * rows)).into_drawing_area();
        let title = format!("hvtrain sweep: {} ({} trials, {metric})", dir.display(), trials.len());
        draw(&root, &title, &trials, &keys, &metric).map_err(|e| draw_error(&output, e))?;
        root.present().map_err(|e| draw_error(&output, e))?;
    }
    Ok(output)
}

/// Trial `rank` of `n` (0 best): red for the best, then dark to light blue.
fn colour(rank: usize, n: usize) -> RGBColor {
    if rank == 0 {
        return RGBColor(214, 39, 40);
    }
    let t = rank as f64 / n.max(2) as f64;
    let mix = |a: f64, b: f64| (a + (b - a) * t) as u8;
    RGBColor(mix(20.0, 200.0), mix(60.0, 215.0), mix(140.0, 235.0))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    trials: &[Trial],
    keys: &[String],
    metric: &str,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 26))?;
    let (w, _) = root.dim_in_pixel();
    let (left, right) = root.split_horizontally(w / 3);
    let n = trials.len();
    let all: Vec<(f64, f64)> = trials.iter().flat_map(|t| t.curve.iter().copied()).collect();
    let values: Vec<f64> = all.iter().map(|p| p.1).chain(trials.iter().filter_map(|t| t.metric)).collect();
    let y = span(&values);
    let x_hi = all.iter().map(|p| p.0).fold(1.0, f64::max);
    {
        let mut c = chart(
            &left,
            &format!("{metric} per epoch, every trial (red: best)"),
            0.75..x_hi + 0.25,
            y.clone(),
            metric,
        )?;
        // Worst first, so the best is drawn on top.
        for (rank, t) in trials.iter().enumerate().rev() {
            let col = colour(rank, n);
            let width = if rank == 0 { 3 } else { 1 };
            c.draw_series(LineSeries::new(t.curve.iter().copied(), col.stroke_width(width)))?;
            c.draw_series(t.curve.last().map(|&p| Circle::new(p, 3, col.filled())))?;
        }
    }
    let rows = keys.len().div_ceil(PER_ROW).max(1);
    let cells = right.split_evenly((rows, PER_ROW));
    for (k, key) in keys.iter().enumerate() {
        let points: Vec<(usize, &serde_json::Value, f64)> =
            trials.iter().enumerate().filter_map(|(r, t)| Some((r, t.params.get(key)?, t.metric?))).collect();
        let numbers: Option<Vec<f64>> = points.iter().map(|p| p.1.as_f64()).collect();
        let area = &cells[k];
        match numbers {
            Some(xs) if !xs.is_empty() => {
                let (lo, hi) = xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |a, &x| (a.0.min(x), a.1.max(x)));
                let log = lo > 0.0 && hi / lo > 10.0;
                let tx = |x: f64| if log { x.log10() } else { x };
                let xr = span(&xs.iter().map(|&x| tx(x)).collect::<Vec<_>>());
                let desc = if log { format!("{key} (log)") } else { key.clone() };
                let mut c = ChartBuilder::on(area)
                    .caption(&desc, ("sans-serif", 17))
                    .margin(10)
                    .x_label_area_size(35)
                    .y_label_area_size(60)
                    .build_cartesian_2d(xr, y.clone())?;
                c.configure_mesh()
                    .x_labels(5)
                    .x_label_formatter(&|v| tick(if log { 10f64.powf(*v) } else { *v }))
                    .y_label_formatter(&|v| short(*v))
                    .label_style(("sans-serif", 13))
                    .light_line_style(WHITE)
                    .draw()?;
                c.draw_series(
                    points.iter().zip(&xs).map(|(p, &x)| Circle::new((tx(x), p.2), 5, colour(p.0, n).filled())),
                )?;
            }
            _ => {
                // Categories (lists, strings) in the order of first appearance.
                let mut cats: Vec<String> = Vec::new();
                for p in &points {
                    let s = p.1.to_string();
                    if !cats.contains(&s) {
                        cats.push(s);
                    }
                }
                let at = |v: &serde_json::Value| {
                    let v = v.to_string();
                    cats.iter().position(|c| *c == v).unwrap_or(0) as f64
                };
                let mut c = ChartBuilder::on(area)
                    .caption(key, ("sans-serif", 17))
                    .margin(10)
                    .x_label_area_size(35)
                    .y_label_area_size(60)
                    .build_cartesian_2d(-0.5..cats.len().max(1) as f64 - 0.5, y.clone())?;
                c.configure_mesh()
                    .x_labels(cats.len().max(1))
                    .x_label_formatter(&|v| {
                        let i = v.round();
                        if (v - i).abs() < 1e-6 && i >= 0.0 {
                            cats.get(i as usize).map(|s| clip(s)).unwrap_or_default()
                        } else {
                            String::new()
                        }
                    })
                    .y_label_formatter(&|v| short(*v))
                    .label_style(("sans-serif", 13))
                    .light_line_style(WHITE)
                    .draw()?;
                c.draw_series(points.iter().map(|p| Circle::new((at(p.1), p.2), 5, colour(p.0, n).filled())))?;
            }
        }
    }
    Ok(())
}

fn clip(s: &str) -> String {
    if s.chars().count() > 14 {
        format!("{}…", s.chars().take(13).collect::<String>())
    } else {
        s.to_string()
    }
}

/// The values with 5 % room (the y axis of `style::value_range`).
fn span(v: &[f64]) -> std::ops::Range<f64> {
    value_range(std::iter::once(&v.iter().map(|&x| (0.0, x)).collect::<Vec<_>>()), false)
}

/// A key's axis label: small values in e-notation (learning rates), others as `short`.
fn tick(v: f64) -> String {
    if v != 0.0 && v.abs() < 0.01 {
        format!("{v:.0e}")
    } else {
        short(v)
    }
}
