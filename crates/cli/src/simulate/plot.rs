//! The picture: one panel per algorithm, arrivals and admissions over time,
//! to `simulate.svg` and `simulate.png`.
//!
//! Each panel plots, at every instant `x`, how many requests arrived (grey
//! area) and how many were admitted (blue line) in the trailing window
//! `(x − T, x]` of one period: the quantity the algorithms' guarantees are
//! about, so the limit (red) and the algorithm's bound (orange, dashed)
//! are drawn on the same scale. The fixed window's boundary burst shows as
//! a blue peak at twice the limit, the sliding log's strictness as a line
//! that never crosses the limit, and the token bucket's burst as a peak of
//! `burst` above the rate.
//!
//! Decisions: the time axis is in the largest unit (s, ms, µs, ns) in
//! which the run lasts at least 1, with ticks of up to 3 decimals; the y
//! labels get the width their widest number needs; when the offered load
//! is far above every bound, its area is clipped at the top and the legend
//! says so with its peak; each bound names the windows it is over (GCRA's
//! `burst + limit` is over closed windows `[t, t+T]`, one more than the
//! half-open windows measured can hold).
//!
//! Text is drawn with DejaVu Sans embedded from the `dejavu` crate through
//! plotters' `ab_glyph` renderer, so the PNG needs no system font (a fresh
//! Debian has none that plotters' `font-kit` would find without
//! fontconfig).

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{Context, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::{Config, Outcome, window};
use crate::messages;

const PANEL_HEIGHT: u32 = 240;
const HEADER_HEIGHT: u32 = 40;
const WIDTH: u32 = 1200;
/// Above this many steps a series is reduced to its maximum per column of
/// pixels, which keeps every peak.
const MAX_STEPS: usize = 20_000;

pub(super) const FONT: &str = "sans-serif";
const ADMITTED: RGBColor = RGBColor(31, 119, 180);
const OFFERED: RGBColor = RGBColor(150, 150, 150);
const LIMIT: RGBColor = RGBColor(214, 39, 40);
const BOUND: RGBColor = RGBColor(255, 127, 14);

/// Draws the panels into `dir` (created if missing); returns the files.
pub fn draw(
    dir: &Path,
    config: &Config,
    arrivals: &[u64],
    outcomes: &[Outcome],
) -> anyhow::Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(dir).with_context(|| messages::cannot_write(dir))?;
    let height = HEADER_HEIGHT + PANEL_HEIGHT * outcomes.len().max(1) as u32;
    let svg = dir.join("simulate.svg");
    let png = dir.join("simulate.png");
    let picture = Picture::new(config, arrivals, outcomes);

    let root = SVGBackend::new(&svg, (WIDTH, height)).into_drawing_area();
    picture
        .render(&root)
        .map_err(|error| anyhow!(messages::cannot_draw(&svg, &error)))?;
    root.present()
        .map_err(|error| anyhow!(messages::cannot_draw(&svg, &error)))?;
    drop(root);

    let root = BitMapBackend::new(&png, (WIDTH, height)).into_drawing_area();
    picture
        .render(&root)
        .map_err(|error| anyhow!(messages::cannot_draw(&png, &error)))?;
    root.present()
        .map_err(|error| anyhow!(messages::cannot_draw(&png, &error)))?;
    drop(root);
    Ok(vec![svg, png])
}

/// Embeds DejaVu Sans as plotters' "sans-serif", once per process.
pub(super) fn register_font() -> anyhow::Result<()> {
    static REGISTER: Once = Once::new();
    let mut result = Ok(());
    REGISTER.call_once(|| {
        result = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| anyhow!("the embedded DejaVu Sans font cannot be read"));
    });
    result
}

/// What every panel needs, computed once for both backends.
struct Picture {
    header: String,
    /// The run's length in `unit`s.
    length: f64,
    /// The period in `unit`s.
    period: f64,
    /// The time axis' unit: s, ms, µs or ns, the largest in which the run
    /// lasts at least 1 (at `--period 1ns` every tick read 0.0 in seconds).
    unit: TimeUnit,
    limit: u64,
    offered: Vec<(f64, f64)>,
    /// The highest offered count, when above the scale (then clipped, and
    /// said in the legend).
    offered_clipped: Option<u64>,
    panels: Vec<Panel>,
    y_max: f64,
}

/// A unit of the time axis.
#[derive(Clone, Copy, Debug)]
struct TimeUnit {
    name: &'static str,
    nanos: f64,
}

impl TimeUnit {
    fn for_length(nanos: u64) -> TimeUnit {
        let (name, nanos_per) = match nanos {
            1_000_000_000.. => ("s", 1e9),
            1_000_000.. => ("ms", 1e6),
            1_000.. => ("µs", 1e3),
            _ => ("ns", 1.0),
        };
        TimeUnit {
            name,
            nanos: nanos_per,
        }
    }
}

/// A tick label: at most 3 decimals, without trailing zeros.
fn tick(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

/// Pixels for the y labels and the axis title beside them: the widest
/// label (`digits` digits at about 7 px each in 12 px DejaVu Sans), the
/// title's line and margins, so that neither is cut nor overlaps.
fn y_label_area(y_max: f64) -> u32 {
    let digits = format!("{}", y_max.ceil() as u64).len() as u32;
    7 * digits + 30
}

struct Panel {
    title: String,
    /// The legend's label of the bound line.
    bound_label: String,
    admitted: Vec<(f64, f64)>,
    bound: u64,
}

impl Picture {
    fn new(config: &Config, arrivals: &[u64], outcomes: &[Outcome]) -> Picture {
        let period = config.quota.period_nanos();
        let unit = TimeUnit::for_length(config.duration);
        let offered = step_points(
            &window::trailing_counts(arrivals, period),
            config.duration,
            unit,
        );
        let panels: Vec<Panel> = outcomes
            .iter()
            .map(|outcome| {
                let over = messages::bound_windows(outcome.bounds.closed);
                Panel {
                    title: format!(
                        "{}: admitted {} of {}, at most {} in any [t, t+{:?}) (bound {} over {over})",
                        outcome.title,
                        outcome.admitted.len(),
                        arrivals.len(),
                        outcome.max_any_window,
                        config.quota.period(),
                        outcome.bounds.any_window
                    ),
                    bound_label: format!("bound {} over {over}", outcome.bounds.any_window),
                    admitted: step_points(
                        &window::trailing_counts(&outcome.admitted, period),
                        config.duration,
                        unit,
                    ),
                    bound: outcome.bounds.any_window,
                }
            })
            .collect();
        // The same scale on every panel, so that they compare at a glance;
        // the offered load is clipped if it is far above every bound, and
        // the legend says so with its peak.
        let highest_bound = panels.iter().map(|panel| panel.bound).max().unwrap_or(0);
        let highest_offered = offered.iter().map(|&(_, y)| y).fold(0.0, f64::max);
        let y_max = highest_offered
            .min(highest_bound as f64 * 1.5)
            .max(highest_bound as f64)
            * 1.1
            + 1.0;
        Picture {
            header: format!(
                "tollgate simulate: {} per {:?} (burst {}), {}; counts in the trailing {:?}",
                config.quota.limit(),
                config.quota.period(),
                config.quota.burst(),
                config.pattern_label(),
                config.quota.period()
            ),
            length: config.duration as f64 / unit.nanos,
            period: period as f64 / unit.nanos,
            unit,
            limit: config.quota.limit(),
            offered_clipped: (highest_offered > y_max).then_some(highest_offered as u64),
            offered,
            panels,
            y_max,
        }
    }

    fn render<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        root.fill(&WHITE)?;
        let (header, body) = root.split_vertically(HEADER_HEIGHT);
        header.draw(&Text::new(
            self.header.as_str(),
            (12, 12),
            (FONT, 18).into_font().color(&BLACK),
        ))?;
        let areas = body.split_evenly((self.panels.len().max(1), 1));
        for (area, panel) in areas.iter().zip(&self.panels) {
            self.render_panel(area, panel)?;
        }
        Ok(())
    }

    fn render_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        panel: &Panel,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let mut chart = ChartBuilder::on(area)
            .caption(panel.title.as_str(), (FONT, 16))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(y_label_area(self.y_max))
            .build_cartesian_2d(0.0..self.length, 0.0..self.y_max)?;
        let periods = (self.length / self.period).round() as usize;
        let x_desc = format!("time ({})", self.unit.name);
        chart
            .configure_mesh()
            .x_labels(if periods <= 20 { periods + 1 } else { 11 })
            .y_labels(6)
            .x_label_formatter(&|x| tick(*x))
            .y_label_formatter(&|y| tick(*y))
            .x_desc(x_desc.as_str())
            .y_desc("requests")
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 12))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;

        let clipped = self.offered.iter().map(|&(x, y)| (x, y.min(self.y_max)));
        chart
            .draw_series(AreaSeries::new(clipped, 0.0, OFFERED.mix(0.35)).border_style(OFFERED))?
            .label(match self.offered_clipped {
                Some(peak) => format!("offered (clipped at the top: peaks at {peak})"),
                None => "offered".to_owned(),
            })
            .legend(|(x, y)| {
                Rectangle::new([(x, y - 5), (x + 16, y + 5)], OFFERED.mix(0.35).filled())
            });
        chart
            .draw_series(LineSeries::new(
                panel.admitted.iter().copied(),
                ADMITTED.stroke_width(2),
            ))?
            .label("admitted")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], ADMITTED.stroke_width(2)));
        let limit = self.limit as f64;
        chart
            .draw_series(LineSeries::new(
                [(0.0, limit), (self.length, limit)],
                LIMIT.stroke_width(1),
            ))?
            .label(format!("limit {}", self.limit))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], LIMIT));
        let bound = panel.bound as f64;
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, bound), (self.length, bound)],
                6,
                4,
                BOUND.stroke_width(1),
            ))?
            .label(panel.bound_label.as_str())
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BOUND));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        Ok(())
    }
}

/// A step function `(instant ns, count)` as line points in `unit`s, up to
/// `end`; reduced to the highest count per column of pixels when it has
/// more steps than a picture can show.
fn step_points(steps: &[(u64, u64)], end: u64, unit: TimeUnit) -> Vec<(f64, f64)> {
    let seconds = |ns: u64| ns as f64 / unit.nanos;
    if steps.len() > MAX_STEPS {
        let columns = u64::from(WIDTH);
        let mut highest = vec![0_u64; columns as usize];
        for (index, &(at, count)) in steps.iter().enumerate() {
            // A step holds from its instant until the next one.
            let until = steps.get(index + 1).map_or(end, |next| next.0).min(end);
            let first =
                (u128::from(at.min(end)) * u128::from(columns) / u128::from(end.max(1))) as usize;
            let last = (u128::from(until) * u128::from(columns) / u128::from(end.max(1))) as usize;
            for column in highest
                .iter_mut()
                .take(last.min(columns as usize - 1) + 1)
                .skip(first)
            {
                *column = (*column).max(count);
            }
        }
        let width = end as f64 / columns as f64;
        return highest
            .iter()
            .enumerate()
            .map(|(column, &count)| (column as f64 * width / unit.nanos, count as f64))
            .collect();
    }
    let mut points = Vec::with_capacity(2 * steps.len() + 1);
    let mut previous = 0_u64;
    for &(at, count) in steps {
        if at > end {
            break;
        }
        points.push((seconds(at), previous as f64));
        points.push((seconds(at), count as f64));
        previous = count;
    }
    points.push((seconds(end), previous as f64));
    points
}
