//! One SVG chart per table: a line per library, message size against time (or bandwidth),
//! both axes logarithmic.

use plotters::prelude::*;

use super::table::Table;

const COLOURS: [RGBColor; 4] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
];

/// Draws `table` as an SVG document titled `caption`; `None` if it has fewer than two sizes
/// with values (a one-row table reads better as a table).
pub fn svg(table: &Table, caption: &str) -> Result<Option<String>, String> {
    let points = |c: usize| -> Vec<(f64, f64)> {
        table
            .rows
            .iter()
            .filter(|(size, _)| *size > 0)
            .filter_map(|(size, v)| Some((*size as f64, v[c]?)))
            .filter(|&(_, v)| v > 0.0)
            .collect()
    };
    let all: Vec<(f64, f64)> = (0..table.columns.len()).flat_map(points).collect();
    if points(0).len() < 2 {
        return Ok(None);
    }
    let (x_max, y_min, y_max) = all.iter().fold((1.0f64, f64::MAX, 0.0f64), |a, p| {
        (a.0.max(p.0), a.1.min(p.1), a.2.max(p.1))
    });
    let x_min = all.iter().map(|p| p.0).fold(f64::MAX, f64::min);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (720, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(
                (x_min..x_max * 1.2).log_scale(),
                (y_min * 0.8..y_max * 1.25).log_scale(),
            )
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("message size (bytes)")
            .y_desc(table.unit.as_str())
            .x_label_formatter(&|x| size_label(*x))
            .draw()
            .map_err(|e| e.to_string())?;
        for (c, name) in table.columns.iter().enumerate() {
            let colour = COLOURS[c % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(points(c), colour.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(Some(out))
}

/// `4096` as `4K`, `1048576` as `1M`.
fn size_label(x: f64) -> String {
    let b = x.round() as u64;
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}
