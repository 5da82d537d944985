//! The pictures: `concurrency.svg` and `concurrency.png` under one title,
//! in flight (the most per column), the limit and the knee over time
//! above, with the probes shaded (the limit halved on purpose, not a
//! glitch), refusals per second by priority below; whole-number y ticks,
//! and the legends in a strip right of the plots, never over the data.

use super::model::Model;
use super::run::Trace;
use crate::messages;
use crate::simulate::plot;

/// Columns of the panels: the series are reduced to one point per column.
const COLUMNS: usize = 600;

/// Draws `concurrency.svg` and `concurrency.png` into `dir`: in flight, the
/// limit and the knee over time; refusals per second by priority.
pub(super) fn draw(
    dir: &std::path::Path,
    model: &Model,
    trace: &Trace,
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use anyhow::{Context, anyhow};
    use plotters::prelude::*;

    plot::register_font()?;
    std::fs::create_dir_all(dir).with_context(|| messages::cannot_write(dir))?;
    let seconds = model.duration as f64 / 1e9;
    let column =
        |at: u64| ((u128::from(at) * COLUMNS as u128) / u128::from(model.duration.max(1))) as usize;
    // Most in flight per column; the limit at the end of each column.
    let mut in_flight = vec![0_u32; COLUMNS];
    for &(at, value) in &trace.in_flight {
        let c = column(at).min(COLUMNS - 1);
        in_flight[c] = in_flight[c].max(value);
    }
    let mut limit = vec![None; COLUMNS];
    for &(at, value) in &trace.limit {
        limit[column(at).min(COLUMNS - 1)] = Some(value);
    }
    let mut last = trace.limit.first().map_or(0, |&(_, value)| value);
    let limit: Vec<u32> = limit
        .into_iter()
        .map(|value| {
            last = value.unwrap_or(last);
            last
        })
        .collect();
    let per_second = COLUMNS as f64 / seconds;
    let refused: Vec<Vec<f64>> = trace
        .refused
        .iter()
        .map(|instants| {
            let mut counts = vec![0.0; COLUMNS];
            for &at in instants {
                counts[column(at).min(COLUMNS - 1)] += per_second;
            }
            counts
        })
        .collect();
    let top = in_flight.iter().chain(&limit).copied().max().unwrap_or(1) as f64 * 1.15 + 1.0;
    let refused_top = refused.iter().flatten().copied().fold(1.0, f64::max) * 1.15;
    let knee: Vec<f64> = (0..COLUMNS)
        .map(|c| {
            f64::from(model.knee_at((c as u64).saturating_mul(model.duration) / COLUMNS as u64))
        })
        .collect();
    let probes: Vec<(f64, f64)> = trace
        .probes
        .iter()
        .map(|&(from, to)| (from as f64 / 1e9, to as f64 / 1e9))
        .collect();
    let panels = Panels {
        probes,
        seconds,
        in_flight,
        limit,
        knee,
        refused,
        top,
        refused_top,
    };
    let mut written = Vec::new();
    for path in [dir.join("concurrency.svg"), dir.join("concurrency.png")] {
        let result = if path.extension().is_some_and(|e| e == "svg") {
            render(
                SVGBackend::new(&path, (1200, 600)).into_drawing_area(),
                &panels,
            )
        } else {
            render(
                BitMapBackend::new(&path, (1200, 600)).into_drawing_area(),
                &panels,
            )
        };
        result.map_err(|error| anyhow!(messages::cannot_draw(&path, &error)))?;
        written.push(path);
    }
    Ok(written)
}

/// What the two panels plot, one point per column.
struct Panels {
    /// `[from, to)` seconds of each probe (the limit halved on purpose).
    probes: Vec<(f64, f64)>,
    seconds: f64,
    in_flight: Vec<u32>,
    limit: Vec<u32>,
    knee: Vec<f64>,
    refused: Vec<Vec<f64>>,
    top: f64,
    refused_top: f64,
}

impl Panels {
    fn x(&self, c: usize) -> f64 {
        c as f64 * self.seconds / COLUMNS as f64
    }
}

fn render<DB: plotters::prelude::DrawingBackend>(
    root: plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    p: &Panels,
) -> Result<(), String> {
    use plotters::prelude::*;
    let colors = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(150, 150, 150),
    ];
    let names = ["critical", "default", "sheddable"];

    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(
            "tollgate simulate --concurrency: the default adaptive limit (Knee) before a service whose knee halves, then recovers",
            (plot::FONT, 18),
        )
        .map_err(|e| e.to_string())?;
    // The legends sit in a strip right of the plots, never over the data.
    let (plots, legend) = root.split_horizontally(1040);
    let (upper, lower) = plots.split_vertically(290);
    let (upper_legend, lower_legend) = legend.split_vertically(290);
    let probe_fill = RGBColor(255, 200, 120).mix(0.35);
    let mut chart = ChartBuilder::on(&upper)
        .caption(
            "in flight (most per column), adaptive limit and the service's knee",
            (plot::FONT, 16),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..p.seconds, 0.0..p.top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("requests")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((plot::FONT, 12))
        .draw()
        .map_err(|e| e.to_string())?;
    // The probes: the limit halved on purpose to time the service below
    // its knee, shaded so that the dips do not read as glitches.
    chart
        .draw_series(
            p.probes
                .iter()
                .map(|&(from, to)| Rectangle::new([(from, 0.0), (to, p.top)], probe_fill.filled())),
        )
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(LineSeries::new(
            (0..COLUMNS).map(|c| (p.x(c), f64::from(p.in_flight[c]))),
            RGBColor(150, 150, 150),
        ))
        .map_err(|e| e.to_string())?
        .label("in flight")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RGBColor(150, 150, 150)));
    chart
        .draw_series(LineSeries::new(
            (0..COLUMNS).map(|c| (p.x(c), f64::from(p.limit[c]))),
            RGBColor(31, 119, 180).stroke_width(2),
        ))
        .map_err(|e| e.to_string())?
        .label("limit")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RGBColor(31, 119, 180)));
    chart
        .draw_series(LineSeries::new(
            (0..COLUMNS).map(|c| (p.x(c), p.knee[c])),
            RGBColor(214, 39, 40),
        ))
        .map_err(|e| e.to_string())?
        .label("knee")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RGBColor(214, 39, 40)));
    let mut chart = ChartBuilder::on(&lower)
        .caption("refused per second, by priority", (plot::FONT, 16))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..p.seconds, 0.0..p.refused_top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("per second")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((plot::FONT, 12))
        .draw()
        .map_err(|e| e.to_string())?;
    for lane in 0..3 {
        let color = colors[lane];
        chart
            .draw_series(LineSeries::new(
                (0..COLUMNS).map(|c| (p.x(c), p.refused[lane][c])),
                color,
            ))
            .map_err(|e| e.to_string())?
            .label(names[lane])
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    legend_strip(
        &upper_legend,
        &[
            ("in flight", RGBColor(150, 150, 150), false),
            ("limit", RGBColor(31, 119, 180), false),
            ("knee", RGBColor(214, 39, 40), false),
            ("probe (limit", RGBColor(255, 200, 120), true),
        ],
    )?;
    upper_legend
        .draw(&Text::new(
            "halved on purpose)",
            (32, 138),
            (plot::FONT, 12),
        ))
        .map_err(|e| e.to_string())?;
    let lower_entries: Vec<(&str, RGBColor, bool)> = (0..3)
        .map(|lane| (names[lane], colors[lane], false))
        .collect();
    legend_strip(&lower_legend, &lower_entries)?;
    root.present().map_err(|e| e.to_string())
}

/// A legend in its own area: a swatch (a line, or a box when `filled`)
/// and a name per entry.
fn legend_strip<DB: plotters::prelude::DrawingBackend>(
    area: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(&str, plotters::prelude::RGBColor, bool)],
) -> Result<(), String> {
    use plotters::prelude::*;
    for (i, &(name, color, filled)) in entries.iter().enumerate() {
        let y = 50 + 22 * i as i32;
        if filled {
            area.draw(&Rectangle::new(
                [(8, y - 6), (26, y + 6)],
                color.mix(0.6).filled(),
            ))
        } else {
            area.draw(&PathElement::new(
                vec![(8, y), (26, y)],
                color.stroke_width(2),
            ))
        }
        .map_err(|e| e.to_string())?;
        area.draw(&Text::new(name, (32, y - 7), (plot::FONT, 12)))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::run::run;
    use super::super::tests::model;
    use super::*;

    #[test]
    fn the_panels_are_drawn_as_svg_and_png() {
        let model = Model {
            duration: 3_000_000_000,
            ..model()
        };
        let trace = run(&model);
        let dir = std::env::temp_dir().join(format!("tollgate-concurrency-{}", std::process::id()));
        let written = draw(&dir, &model, &trace).unwrap();
        for path in &written {
            assert!(
                std::fs::metadata(path).unwrap().len() > 1_000,
                "{}",
                path.display()
            );
        }
        assert_eq!(written.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
