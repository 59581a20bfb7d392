//! SVG plots of a scenario's sampled key, with plotters' SVG backend only.
//!
//! Promise: the same samples give the same SVG bytes on every machine. Coordinates are integer pixels,
//! tick labels are formatted by plotters from the same `f64`s, and text is emitted as `<text>` elements
//! (no font files are read: plotters estimates text extents itself without its `ttf` feature).

use bucketproof_check::runner::Sample;
use plotters::prelude::*;

const SIZE: (u32, u32) = (720, 360);

/// Times as seconds since the first sample (exact up to f64 precision; relative, so a clock near
/// `u64::MAX` still plots).
fn seconds(samples: &[Sample]) -> Vec<f64> {
    let first = samples.first().map_or(0, |s| s.at);
    samples
        .iter()
        .map(|s| s.at.saturating_sub(first) as f64 / 1e9)
        .collect()
}

fn finite_max(values: impl Iterator<Item = f64>) -> f64 {
    values.filter(|v| v.is_finite()).fold(0.0, f64::max)
}

fn x_range(xs: &[f64]) -> std::ops::Range<f64> {
    let end = xs.last().copied().unwrap_or(0.0);
    0.0..if end > 0.0 { end } else { 1.0 }
}

/// A two-series line chart. `series`: (label, color, values aligned with `xs`).
fn line_chart(
    title: &str,
    y_label: &str,
    xs: &[f64],
    series: &[(&str, RGBColor, Vec<f64>)],
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let y_max = finite_max(series.iter().flat_map(|(_, _, v)| v.iter().copied()));
        let y_top = if y_max > 0.0 { y_max * 1.05 } else { 1.0 };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(x_range(xs), 0.0..y_top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("seconds since the first sample")
            .y_desc(y_label)
            .draw()
            .map_err(|e| e.to_string())?;
        for (label, color, values) in series {
            let color = *color;
            let points: Vec<(f64, f64)> = xs
                .iter()
                .zip(values)
                .filter(|(_, y)| y.is_finite())
                .map(|(&x, &y)| (x, y))
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(*label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The sampled key's balance over time: the subject's and the model's.
pub(super) fn balance(scenario: &str, key: u64, samples: &[Sample]) -> Result<String, String> {
    let xs = seconds(samples);
    line_chart(
        &format!("{scenario}: balance of key {key}"),
        "tokens",
        &xs,
        &[
            (
                "subject",
                RGBColor(31, 119, 180),
                samples.iter().map(|s| s.subject_remaining).collect(),
            ),
            (
                "model",
                RGBColor(255, 127, 14),
                samples.iter().map(|s| s.model_remaining).collect(),
            ),
        ],
    )
}

/// Admitted cost on the sampled key against the arrival-curve bound (capacity + rate * elapsed).
pub(super) fn arrival(scenario: &str, key: u64, samples: &[Sample]) -> Result<String, String> {
    let xs = seconds(samples);
    line_chart(
        &format!("{scenario}: admitted cost vs arrival curve, key {key}"),
        "tokens",
        &xs,
        &[
            (
                "admitted",
                RGBColor(44, 160, 44),
                samples.iter().map(|s| s.admitted as f64).collect(),
            ),
            (
                "bound",
                RGBColor(214, 39, 40),
                samples.iter().map(|s| s.bound).collect(),
            ),
        ],
    )
}
