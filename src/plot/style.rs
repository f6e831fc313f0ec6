//! What every plot shares: the embedded font, the colours, a chart with epoch-style axes,
//! curves with markers, the legend, axis ranges and labels.
//! Text is drawn with DejaVu Sans embedded in the binary (assets/DejaVuSans.ttf), so no
//! system font lookup (fontconfig) is needed on the node that draws.
//!
//! Must not: read files.

use crate::error::Error;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::ops::Range;
use std::path::Path;

/// Image size in pixels: three panels of 600 x 560 and a title.
pub const WIDTH: u32 = 1800;
pub const HEIGHT: u32 = 600;

pub static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// One run's colours, in order (Tableau 10), then again.
pub const COLOURS: [RGBColor; 10] = [
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

/// How a curve is stroked: train solid, test dashed, validation dotted.
#[derive(Clone, Copy, PartialEq)]
pub enum Stroke {
    Solid,
    Dashed,
    Dotted,
}

/// Register the embedded font as "sans-serif". The font table is global and the name may
/// already hold it (a second call): that is ignored.
pub fn register_font() {
    let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
}

pub fn draw_error(output: &Path, e: impl std::fmt::Display) -> Error {
    Error::io(output, "drawing the plot", std::io::Error::other(e.to_string()))
}

pub type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

pub type Chart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>;

pub fn chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x: Range<f64>,
    y: Range<f64>,
    y_desc: &str,
) -> std::result::Result<Chart<'a, DB>, Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    chart_labelled(area, caption, x, y, y_desc, &|v| short(*v))
}

/// `chart` with the y axis's labels written by `y_label` (a log axis: 10^v).
pub fn chart_labelled<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x: Range<f64>,
    y: Range<f64>,
    y_desc: &str,
    y_label: &dyn Fn(&f64) -> String,
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
        .y_label_formatter(y_label)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(WHITE)
        .draw()?;
    Ok(chart)
}

/// One curve with a marker at every epoch (so that a one-epoch run shows too).
pub fn curve<'a, DB: DrawingBackend + 'a>(
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

pub fn legend<'a, DB: DrawingBackend + 'a>(chart: &mut Chart<'a, DB>, at: SeriesLabelPosition) -> DrawResult
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

/// The values of every curve with 5% room; from 0 when `from_zero`.
pub fn value_range<'a>(curves: impl Iterator<Item = &'a Vec<(f64, f64)>>, from_zero: bool) -> Range<f64> {
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

/// A learning rate's label: `short` from 0.01 up, else as 5e-4.
pub fn rate(v: f64) -> String {
    if v == 0.0 || v.abs() >= 0.01 {
        short(v)
    } else {
        format!("{v:.0e}")
    }
}

/// An axis label: few digits, thousands as k.
pub fn short(v: f64) -> String {
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
