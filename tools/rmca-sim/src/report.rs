//! Output: a text table, one JSON object per row, and SVG line plots (plotters).

use plotters::prelude::*;

use crate::SimError;

/// A table of numbers with named columns (the first is the x axis of its plot).
#[derive(Debug, Clone)]
pub struct Table {
    /// What it shows.
    pub title: String,
    /// Column names.
    pub columns: Vec<String>,
    /// Rows of values (NaN: not applicable).
    pub rows: Vec<Vec<f64>>,
}

fn fmt(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v == v.trunc() && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.4}")
    }
}

impl Table {
    /// A table with these columns.
    pub fn new(title: &str, columns: &[&str]) -> Self {
        Self {
            title: title.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// The text form.
    pub fn render(&self) -> String {
        let w: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                self.rows
                    .iter()
                    .map(|r| fmt(r[i]).len())
                    .chain([c.len()])
                    .max()
                    .unwrap_or(1)
            })
            .collect();
        let mut out = format!("# {}\n", self.title);
        let line = |cells: Vec<String>| {
            cells
                .iter()
                .zip(&w)
                .map(|(c, w)| format!("{c:>w$}"))
                .collect::<Vec<_>>()
                .join("  ")
        };
        out += &line(self.columns.clone());
        out.push('\n');
        for r in &self.rows {
            out += &line(r.iter().map(|v| fmt(*v)).collect());
            out.push('\n');
        }
        out
    }

    /// One JSON object per row (`{"table": title, column: value, ...}`), NaN as null.
    pub fn json_lines(&self) -> String {
        let mut out = String::new();
        for r in &self.rows {
            let mut o = serde_json::Map::new();
            o.insert("table".into(), self.title.clone().into());
            for (c, v) in self.columns.iter().zip(r) {
                let v = if v.is_nan() {
                    serde_json::Value::Null
                } else {
                    serde_json::json!(v)
                };
                o.insert(c.clone(), v);
            }
            out += &serde_json::Value::Object(o).to_string();
            out.push('\n');
        }
        out
    }
}

/// Draws columns `ys` of `t` against its first column into an SVG file.
pub fn plot(
    t: &Table,
    ys: &[usize],
    path: &str,
    y_label: &str,
    log_x: bool,
    log_y: bool,
) -> Result<(), SimError> {
    let err = |e: String| SimError::Output {
        path: path.into(),
        why: e,
    };
    let pts = |c: usize| -> Vec<(f64, f64)> {
        t.rows
            .iter()
            .filter(|r| !r[c].is_nan() && (!log_y || r[c] > 0.0))
            .map(|r| (r[0], r[c]))
            .collect()
    };
    let all: Vec<(f64, f64)> = ys.iter().flat_map(|&c| pts(c)).collect();
    if all.is_empty() {
        return Err(err("nothing to plot".into()));
    }
    let (x0, x1) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y0, y1) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    let (y0, y1) = if log_y {
        (y0 / 1.5, y1 * 1.5)
    } else {
        (y0.min(0.0), if y1 > 0.0 { y1 * 1.1 } else { 1.0 })
    };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut b = ChartBuilder::on(&root);
    b.caption(&t.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart.map_err(|e| err(e.to_string()))?;
            chart
                .configure_mesh()
                .x_desc(t.columns[0].as_str())
                .y_desc(y_label)
                .draw()
                .map_err(|e| err(e.to_string()))?;
            for (i, &c) in ys.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(pts(c), color.stroke_width(2)))
                    .map_err(|e| err(e.to_string()))?
                    .label(t.columns[c].as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(|e| err(e.to_string()))?;
        }};
    }
    match (log_x, log_y) {
        (true, true) => draw!(b.build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())),
        (true, false) => draw!(b.build_cartesian_2d((x0..x1).log_scale(), y0..y1)),
        (false, true) => draw!(b.build_cartesian_2d(x0..x1, (y0..y1).log_scale())),
        (false, false) => draw!(b.build_cartesian_2d(x0..x1, y0..y1)),
    }
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_text_json_and_svg() {
        let mut t = Table::new("memory", &["procs", "a", "b"]);
        t.rows.push(vec![2.0, 1.5, f64::NAN]);
        t.rows.push(vec![4.0, 3.0, 7.0]);
        let text = t.render();
        assert!(
            text.contains("procs") && text.contains("1.5000") && text.contains('-'),
            "{text}"
        );
        let j = t.json_lines();
        assert!(j.contains("\"b\":null") && j.contains("\"procs\":4"), "{j}");
        let path = std::env::temp_dir().join(format!("rmca-sim-{}.svg", std::process::id()));
        let p = path.to_str().unwrap();
        plot(&t, &[1, 2], p, "bytes", true, true).unwrap();
        let svg = std::fs::read_to_string(p).unwrap();
        std::fs::remove_file(p).ok();
        assert!(svg.starts_with("<svg") && svg.contains("memory"));
    }
}
