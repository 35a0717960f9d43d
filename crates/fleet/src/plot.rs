//! The plot of a run (PNG): pods with an address over simulated time, one line per
//! algorithm, and the pods created.

use std::path::Path;

use anyhow::{Context, anyhow};
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::report::{Report, Side};

/// The TTF the labels are drawn with (Debian's fonts-dejavu-core).
pub const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// How many of `times` (seconds) are at or before each second up to `end`.
fn cumulative(times: &[f64], end: u64) -> Vec<(f64, f64)> {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut i = 0;
    (0..=end)
        .map(|t| {
            while i < sorted.len() && sorted[i] <= t as f64 {
                i += 1;
            }
            (t as f64, i as f64)
        })
        .collect()
}

fn draw_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the plot: {e}")
}

/// Writes `report`'s plot to `path`.
pub fn plot(report: &Report, path: &Path) -> anyhow::Result<()> {
    let font = std::fs::read(FONT)
        .with_context(|| format!("reading the font {FONT} (Debian package fonts-dejavu-core)"))?;
    // plotters keeps the font for the life of the process.
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    )
    .map_err(|_| anyhow!("{FONT} is not a font plotters can read"))?;
    let end = report.simulated_seconds;
    let mut sides: Vec<(&str, &Side, RGBColor)> = vec![
        ("ours (ipamd)", &report.ours, RGBColor(0, 110, 190)),
        (
            "the Go CNI's algorithm",
            &report.go_cni,
            RGBColor(210, 80, 30),
        ),
    ];
    if let Some(w) = &report.ours_without_scarcity_mode {
        sides.push((
            "ours, SUBNET_SCARCITY_MODE=false",
            w,
            RGBColor(120, 120, 120),
        ));
    }
    let top = report.ours.pods_bound.max(report.go_cni.pods_bound) as f64 * 1.05;
    let root = BitMapBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{}, {} nodes: pods with an address",
                report.title(),
                report.nodes
            ),
            ("sans-serif", 24),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..end as f64, 0f64..top.max(1.0))
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc("simulated seconds")
        .y_desc("pods")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(draw_error)?;
    let bound = cumulative(&report.ours.created_at_s, end);
    chart
        .draw_series(LineSeries::new(bound, BLACK.mix(0.4).stroke_width(1)))
        .map_err(draw_error)?
        .label("pods created")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    if let Some(healed) = report.healed_at_seconds {
        // Green, apart from the grid's greys and the sides' colours.
        let color = RGBColor(40, 150, 60);
        let at = healed as f64;
        chart
            .draw_series(LineSeries::new(
                [(at, 0.0), (at, top.max(1.0))],
                color.stroke_width(2),
            ))
            .map_err(draw_error)?
            .label("the strays go: /28s free again")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    for (name, side, color) in sides {
        chart
            .draw_series(LineSeries::new(
                cumulative(&side.placed_at_s, end),
                color.stroke_width(2),
            ))
            .map_err(draw_error)?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(draw_error)?;
    root.present().map_err(draw_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_counts_up_to_each_second() {
        assert_eq!(
            cumulative(&[2.5, 0.0, 1.0], 3),
            [(0.0, 1.0), (1.0, 2.0), (2.0, 2.0), (3.0, 3.0)]
        );
    }
}
