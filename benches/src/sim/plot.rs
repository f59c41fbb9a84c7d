//! A figure as an SVG line chart, x on a base-2 logarithmic axis, y linear or logarithmic.

use plotters::prelude::*;

use super::Figure;

const COLOURS: [RGBColor; 6] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x7f, 0x7f, 0x7f),
];

/// Draws `fig` as an SVG document.
pub fn svg(fig: &Figure) -> Result<String, String> {
    let all: Vec<(f64, f64)> = fig
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|p| p.0 > 0.0 && p.1.is_finite())
        .collect();
    if all.is_empty() {
        return Err(format!("{}: nothing to plot", fig.name));
    }
    let x_min = all.iter().map(|p| p.0).fold(f64::MAX, f64::min);
    let x_max = all.iter().map(|p| p.0).fold(0.0, f64::max);
    let y_max = all.iter().map(|p| p.1).fold(0.0, f64::max);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (760, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(&fig.title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56);
        let x_range = (x_min * 0.9..x_max * 1.1).log_scale().base(2.0);
        // The same drawing on either kind of y axis (their chart types differ).
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart.map_err(|e| e.to_string())?;
                chart
                    .configure_mesh()
                    .x_desc(fig.x_label.as_str())
                    .y_desc(fig.y_label.as_str())
                    .x_label_formatter(&|x| format!("{}", x.round()))
                    .draw()
                    .map_err(|e| e.to_string())?;
                for (i, s) in fig.series.iter().enumerate() {
                    let colour = COLOURS[i % COLOURS.len()];
                    chart
                        .draw_series(LineSeries::new(s.points.clone(), colour.stroke_width(2)))
                        .map_err(|e| e.to_string())?
                        .label(s.name.as_str())
                        .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour));
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .position(SeriesLabelPosition::UpperLeft)
                    .draw()
                    .map_err(|e| e.to_string())?;
            }};
        }
        if fig.log_y {
            let y_min = all
                .iter()
                .map(|p| p.1)
                .filter(|&y| y > 0.0)
                .fold(f64::MAX, f64::min);
            draw!(builder.build_cartesian_2d(x_range, (y_min * 0.8..y_max * 1.25).log_scale()));
        } else {
            draw!(builder.build_cartesian_2d(x_range, 0.0..y_max * 1.1));
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}
