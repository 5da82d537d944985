//! The picture: `budget.svg` and `budget.png`, the tokens spent over time
//! by each strategy beside what the budget allows (burst + rate × t).

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use plotters::prelude::*;

use super::{Model, Outcome, allowed};
use crate::messages;
use crate::simulate::plot;

const COLORS: [RGBColor; 3] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// Draws `budget.svg` and `budget.png` into `dir`.
pub(super) fn draw(
    dir: &Path,
    model: &Model,
    outcomes: &[Outcome],
) -> anyhow::Result<Vec<PathBuf>> {
    plot::register_font()?;
    std::fs::create_dir_all(dir).with_context(|| messages::cannot_write(dir))?;
    let mut written = Vec::new();
    for path in [dir.join("budget.svg"), dir.join("budget.png")] {
        if path.extension().is_some_and(|e| e == "svg") {
            let root = SVGBackend::new(&path, (1000, 500)).into_drawing_area();
            render(root, model, outcomes)
                .map_err(|error| anyhow!(messages::cannot_draw(&path, &error)))?;
        } else {
            let root = BitMapBackend::new(&path, (1000, 500)).into_drawing_area();
            render(root, model, outcomes)
                .map_err(|error| anyhow!(messages::cannot_draw(&path, &error)))?;
        }
        written.push(path);
    }
    Ok(written)
}

fn render<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    model: &Model,
    outcomes: &[Outcome],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let seconds = model.duration as f64 / 1e9;
    let top = outcomes
        .iter()
        .map(|o| o.spent)
        .chain([allowed(model.duration)])
        .max()
        .unwrap_or(1) as f64
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("token budget {} a minute: tokens spent", super::BUDGET),
            (plot::FONT, 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..seconds, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("tokens")
        .label_style((plot::FONT, 13))
        .draw()?;
    let budget = (0..=100).map(|i| {
        let t = seconds * f64::from(i) / 100.0;
        (t, allowed((t * 1e9) as u64) as f64)
    });
    chart
        .draw_series(LineSeries::new(budget, BLACK.stroke_width(1)))?
        .label("allowed: burst + rate x t")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
    for (outcome, color) in outcomes.iter().zip(COLORS) {
        let points = std::iter::once((0.0, 0.0)).chain(
            outcome
                .spending
                .iter()
                .map(|&(at, spent)| (at as f64 / 1e9, spent as f64)),
        );
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(outcome.strategy.label())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((plot::FONT, 13))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()
}
