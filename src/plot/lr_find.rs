//! `hvtrain lr-find`'s picture, `lr_find.png` (fastai's `lr_find` plot): each step's loss
//! (thin) and its smoothed loss (bold) against the learning rate on a log axis, with the
//! suggested rate (red) and a tenth of the lowest-loss rate (grey, dashed) as vertical lines.
//! The loss axis ends a little above the smoothed curve's highest value before its lowest
//! point: the losses past it (the test ends where the loss diverges, often to hundreds of
//! times the rest) are drawn at its top rather than squashing the curve that matters.
//!
//! Must not: read files, or decide anything (the caller passes the points and the rates).

use super::style::{draw_error, legend, short, value_range, DrawResult};
use crate::error::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Image size in pixels (one panel).
pub const WIDTH: u32 = 1000;
pub const HEIGHT: u32 = 640;

/// The suggested rate's colour (the tests look for it).
pub const SUGGESTED: RGBColor = RGBColor(214, 39, 40);
/// The smoothed loss's colour.
pub const SMOOTHED: RGBColor = RGBColor(31, 119, 180);
const RAW: RGBColor = RGBColor(160, 190, 220);
const LOWEST: RGBColor = RGBColor(110, 110, 110);

/// One step of the test: (learning rate, loss, smoothed loss).
pub type Step = (f64, f64, f64);

/// Draw `steps` into `output`, with `suggested` (where the smoothed loss fell fastest) and
/// `lowest` (where it was lowest) when the caller has them; `title` heads the picture.
pub fn plot_lr_find(
    steps: &[Step],
    suggested: Option<f64>,
    lowest: Option<f64>,
    title: &str,
    output: &Path,
) -> Result<()> {
    super::style::register_font();
    let root = BitMapBackend::new(output, (WIDTH, HEIGHT)).into_drawing_area();
    draw(&root, steps, suggested, lowest, title).map_err(|e| draw_error(output, e))?;
    root.present().map_err(|e| draw_error(output, e))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    steps: &[Step],
    suggested: Option<f64>,
    lowest: Option<f64>,
    title: &str,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let finite: Vec<Step> = steps.iter().copied().filter(|s| s.0 > 0.0 && s.1.is_finite() && s.2.is_finite()).collect();
    let lx: Vec<f64> = finite.iter().map(|s| s.0.log10()).collect();
    let (x_lo, x_hi) = match (lx.first(), lx.last()) {
        (Some(&a), Some(&b)) if b > a => (a, b),
        (Some(&a), _) => (a - 0.5, a + 0.5),
        _ => (-7.0, 1.0),
    };
    // The loss axis: from the lowest raw loss to the highest smoothed loss before the
    // smoothed lowest, and half that span again above it, so the start of the divergence
    // shows but its end (often 10 to 1000 times the rest) does not flatten the curve.
    let low = (0..finite.len()).min_by(|&a, &b| finite[a].2.total_cmp(&finite[b].2)).unwrap_or(0);
    let before: Vec<(f64, f64)> = finite[..finite.len().min(low + 1)].iter().map(|s| (0.0, s.2)).collect();
    let raw_lo = finite.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
    let mut y = value_range(std::iter::once(&before), false);
    if raw_lo.is_finite() && raw_lo < y.start {
        y.start = raw_lo;
    }
    let span = (y.end - y.start).max(1e-6);
    y = (y.start - span * 0.03)..(y.end + span * 0.5);
    let top = y.end;
    let smoothed: Vec<(f64, f64)> = finite.iter().zip(&lx).map(|(s, &x)| (x, s.2.min(top))).collect();
    let mut c = ChartBuilder::on(&root)
        .margin(14)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x_lo..x_hi, y.clone())?;
    c.configure_mesh()
        .x_desc("learning rate (log scale)")
        .y_desc("loss")
        .x_labels(8)
        .x_label_formatter(&|v| format!("{:.0e}", 10f64.powf(*v)))
        .y_label_formatter(&|v| short(*v))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(WHITE)
        .draw()?;
    let raw: Vec<(f64, f64)> = finite.iter().zip(&lx).map(|(s, &x)| (x, s.1.min(top))).collect();
    c.draw_series(LineSeries::new(raw, RAW.stroke_width(1)))?
        .label("loss per step")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 19, y)], RAW.stroke_width(2)));
    c.draw_series(LineSeries::new(smoothed, SMOOTHED.stroke_width(3)))?
        .label("smoothed loss")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 19, y)], SMOOTHED.stroke_width(3)));
    if let Some(l) = lowest.filter(|l| *l > 0.0) {
        let x = (l / 10.0).log10().clamp(x_lo, x_hi);
        c.draw_series(DashedLineSeries::new([(x, y.start), (x, y.end)], 6, 6, LOWEST.stroke_width(2)))?
            .label(format!("lowest loss / 10: {:.1e}", l / 10.0))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 19, y)], LOWEST.stroke_width(2)));
    }
    if let Some(s) = suggested.filter(|s| *s > 0.0) {
        let x = s.log10().clamp(x_lo, x_hi);
        c.draw_series(LineSeries::new([(x, y.start), (x, y.end)], SUGGESTED.stroke_width(2)))?
            .label(format!("suggested: {s:.1e} (steepest fall)"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 19, y)], SUGGESTED.stroke_width(2)));
    }
    legend(&mut c, SeriesLabelPosition::UpperLeft)
}
