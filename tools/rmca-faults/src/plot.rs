//! SVG plots of a sweep: goodput against the swept impairment (one file per message size, a
//! line per transport) and latency CDFs (one file per transport, a line per point).

use plotters::prelude::*;

/// A named line of (x, y) points.
pub type Line = (String, Vec<(f64, f64)>);

/// Draws `lines` into an SVG string; `log_x` puts x on a log scale (positive values only).
pub fn svg(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[Line],
    log_x: bool,
) -> Result<String, String> {
    let pts = lines.iter().flat_map(|(_, p)| p.iter().copied());
    let pts: Vec<(f64, f64)> = pts
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log_x || *x > 0.0))
        .collect();
    let (mut xmin, mut xmax, mut ymax) = (f64::MAX, f64::MIN, 0.0f64);
    for (x, y) in &pts {
        xmin = xmin.min(*x);
        xmax = xmax.max(*x);
        ymax = ymax.max(*y);
    }
    if pts.is_empty() {
        return Err(format!("{title}: nothing to plot"));
    }
    if xmax <= xmin {
        xmax = if log_x { xmin * 10.0 } else { xmin + 1.0 };
    }
    let ymax = if ymax > 0.0 { ymax * 1.08 } else { 1.0 };
    let mut out = String::new();
    let err = |e: &dyn std::fmt::Display| format!("drawing {title}: {e}");
    {
        let root = SVGBackend::with_string(&mut out, (760, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut b = ChartBuilder::on(&root);
        b.caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64);
        macro_rules! finish {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .draw()
                    .map_err(|e| err(&e))?;
                for (i, (name, p)) in lines.iter().enumerate() {
                    let color = Palette99::pick(i).to_rgba();
                    let p: Vec<(f64, f64)> = p
                        .iter()
                        .copied()
                        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log_x || *x > 0.0))
                        .collect();
                    chart
                        .draw_series(LineSeries::new(p, color.stroke_width(2)))
                        .map_err(|e| err(&e))?
                        .label(name.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3))
                        });
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .position(SeriesLabelPosition::UpperRight)
                    .draw()
                    .map_err(|e| err(&e))?;
            }};
        }
        if log_x {
            finish!(b
                .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax)
                .map_err(|e| err(&e))?);
        } else {
            finish!(b
                .build_cartesian_2d(xmin..xmax, 0.0..ymax)
                .map_err(|e| err(&e))?);
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_series_named_in_the_legend() {
        let lines = vec![
            (
                "dr+ud".to_owned(),
                vec![(0.0, 10.0), (0.1, 8.0), (0.2, 5.0)],
            ),
            (
                "ob1+rc".to_owned(),
                vec![(0.0, 12.0), (0.1, 3.0), (0.2, 1.0)],
            ),
        ];
        let s = svg("goodput", "loss", "MB/s", &lines, false).unwrap();
        assert!(
            s.starts_with("<svg") && s.contains("dr+ud") && s.contains("ob1+rc"),
            "{s}"
        );
        assert!(svg("empty", "x", "y", &[], true)
            .unwrap_err()
            .contains("nothing to plot"));
        // A log axis drops what it cannot show rather than failing.
        let cdf = vec![("p".to_owned(), vec![(0.0, 0.0), (5.0, 0.5), (50.0, 1.0)])];
        assert!(svg("cdf", "us", "fraction", &cdf, true).is_ok());
    }
}
