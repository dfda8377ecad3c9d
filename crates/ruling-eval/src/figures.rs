//! The report's figures as SVG text, drawn with plotters' SVG backend (no font or bitmap
//! stack: text is left to the viewer's sans-serif).
//!
//! - A reliability diagram: per column, each non-empty confidence bin's mean confidence
//!   against its accuracy, over the diagonal a calibrated model follows.
//! - A confidence histogram: per column, the share of answers in each confidence bin (the same
//!   bins as the ECE), as grouped bars.

use plotters::prelude::*;
use ruling_calibration::ReliabilityDiagram;

const SIZE: (u32, u32) = (560, 420);

/// Distinct, print-safe colours for the columns (Okabe-Ito).
const COLOURS: [RGBColor; 5] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
];

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// Reliability diagram of each `(column name, diagram)`.
pub fn reliability(title: &str, columns: &[(&str, &ReliabilityDiagram)]) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..1f64, 0f64..1f64)?;
        chart
            .configure_mesh()
            .x_desc("confidence (largest probability)")
            .y_desc("accuracy")
            .max_light_lines(0)
            .draw()?;
        let grey = RGBColor(150, 150, 150);
        chart
            .draw_series(LineSeries::new(
                [(0.0, 0.0), (1.0, 1.0)],
                grey.stroke_width(1),
            ))?
            .label("perfect calibration")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], grey));
        for (i, (name, diagram)) in columns.iter().enumerate() {
            let c = colour(i);
            let points: Vec<(f64, f64)> = diagram
                .bins
                .iter()
                .filter_map(|b| Some((b.mean_confidence?, b.accuracy?)))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))?
                .label(format!("{name} (ECE {:.3})", diagram.ece))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// Confidence histogram of each `(column name, diagram)`: the share of answers per bin.
pub fn confidence(title: &str, columns: &[(&str, &ReliabilityDiagram)]) -> anyhow::Result<String> {
    let top = columns
        .iter()
        .flat_map(|(_, d)| {
            d.bins
                .iter()
                .map(move |b| b.count as f64 / d.total.max(1) as f64)
        })
        .fold(0.0f64, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..1f64, 0f64..(top * 1.1).max(0.05))?;
        chart
            .configure_mesh()
            .x_desc("confidence (largest probability)")
            .y_desc("share of answers")
            .max_light_lines(0)
            .draw()?;
        let n = columns.len().max(1) as f64;
        for (i, (name, diagram)) in columns.iter().enumerate() {
            let c = colour(i);
            let total = diagram.total.max(1) as f64;
            let bars = diagram.bins.iter().filter(|b| b.count > 0).map(|b| {
                let width = (b.upper - b.lower) * 0.9 / n;
                let left = b.lower + (b.upper - b.lower) * 0.05 + width * i as f64;
                Rectangle::new(
                    [(left, 0.0), (left + width, b.count as f64 / total)],
                    c.filled(),
                )
            });
            chart
                .draw_series(bars)?
                .label(*name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}
