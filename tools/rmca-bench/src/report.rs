//! Summaries of measured runs: table, JSON lines and an SVG plot drawn by hand.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::bench::Bench;

/// Figures of one (benchmark, configuration, size): one vector of runs per metric.
pub type Runs = Vec<Vec<f64>>;

/// All measurements: benchmark -> configuration (in run order) -> size -> runs.
#[derive(Default)]
pub struct Results {
    /// Configuration names in the order they were run (rmca first).
    pub configs: Vec<String>,
    /// Ratio columns: (numerator, denominator) configuration names.
    pub ratios: Vec<(String, String)>,
    /// The figures.
    pub data: BTreeMap<&'static str, BTreeMap<String, BTreeMap<usize, Runs>>>,
}

/// Median, minimum and maximum of a sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Median (mean of the middle two for even counts).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

/// Summarize `v` (None when empty).
pub fn summarize(v: &[f64]) -> Option<Summary> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    let median = if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    };
    Some(Summary {
        median,
        min: s[0],
        max: s[s.len() - 1],
    })
}

impl Results {
    /// Record one run's result line for `config` (NaN figures were not measured).
    pub fn add(&mut self, bench: Bench, config: &str, size: usize, figures: &[f64]) {
        let runs = self
            .data
            .entry(bench.name())
            .or_default()
            .entry(config.to_owned())
            .or_default()
            .entry(size)
            .or_default();
        if runs.len() < figures.len() {
            runs.resize(figures.len(), Vec::new());
        }
        for (r, f) in runs.iter_mut().zip(figures) {
            if f.is_finite() {
                r.push(*f);
            }
        }
    }

    fn summary(&self, bench: Bench, config: &str, size: usize, metric: usize) -> Option<Summary> {
        let runs = self.data.get(bench.name())?.get(config)?.get(&size)?;
        summarize(runs.get(metric)?)
    }

    fn sizes(&self, bench: Bench) -> Vec<usize> {
        let mut s: Vec<usize> = self
            .data
            .get(bench.name())
            .into_iter()
            .flat_map(|c| c.values().flat_map(|m| m.keys().copied()))
            .collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    fn ratio(&self, bench: Bench, a: &str, b: &str, size: usize, metric: usize) -> Option<f64> {
        let (x, y) = (
            self.summary(bench, a, size, metric)?,
            self.summary(bench, b, size, metric)?,
        );
        (y.median > 0.0).then(|| x.median / y.median)
    }

    fn has_metric(&self, bench: Bench, metric: usize) -> bool {
        self.data.get(bench.name()).is_some_and(|c| {
            c.values().any(|m| {
                m.values()
                    .any(|r| r.get(metric).is_some_and(|v| !v.is_empty()))
            })
        })
    }

    /// The human-readable table of `bench`: medians with [min..max] per configuration, then
    /// the ratio columns A/B of the medians. Rows are sizes, or process counts for allconn and
    /// ringconn; metrics nobody measured are left out.
    pub fn table(&self, bench: Bench, ranks: usize, runs: usize) -> String {
        let mut out = String::new();
        let xlabel = if bench.sweeps_procs() {
            "procs"
        } else {
            "size"
        };
        for (mi, (metric, unit)) in bench.metrics().iter().enumerate() {
            if !self.has_metric(bench, mi) {
                continue;
            }
            let better = if bench.metric_higher_is_better(mi) {
                "higher is better"
            } else {
                "lower is better"
            };
            let title = if *metric == bench.name() {
                bench.name().to_owned()
            } else {
                format!("{}: {metric}", bench.name())
            };
            let who = if bench.sweeps_procs() {
                String::new()
            } else {
                format!(", {ranks} ranks")
            };
            let _ = writeln!(
                out,
                "# {title} ({unit}, {better}){who}, median [min..max] of {runs} runs"
            );
            let xs = self.sizes(bench);
            let cells: Vec<Vec<String>> = xs
                .iter()
                .map(|&x| {
                    let mut row: Vec<String> = self
                        .configs
                        .iter()
                        .map(|c| match self.summary(bench, c, x, mi) {
                            Some(s) => {
                                format!("{} [{}..{}]", fig(s.median), fig(s.min), fig(s.max))
                            }
                            None => "-".into(),
                        })
                        .collect();
                    row.extend(self.ratios.iter().map(|(a, b)| {
                        self.ratio(bench, a, b, x, mi)
                            .map_or("-".into(), |r| format!("{r:.2}"))
                    }));
                    row
                })
                .collect();
            let heads: Vec<String> = self
                .configs
                .iter()
                .cloned()
                .chain(self.ratios.iter().map(|(a, b)| format!("{a}/{b}")))
                .collect();
            let widths: Vec<usize> = heads
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    cells
                        .iter()
                        .map(|r| r[i].len())
                        .chain([h.len()])
                        .max()
                        .unwrap_or(1)
                })
                .collect();
            let _ = write!(out, "{xlabel:>9}");
            for (h, w) in heads.iter().zip(&widths) {
                let _ = write!(out, "  {h:>w$}");
            }
            out.push('\n');
            for (x, row) in xs.iter().zip(&cells) {
                let label = if bench.sweeps_procs() {
                    x.to_string()
                } else {
                    human_size(*x)
                };
                let _ = write!(out, "{label:>9}");
                for (c, w) in row.iter().zip(&widths) {
                    let _ = write!(out, "  {c:>w$}");
                }
                out.push('\n');
            }
            out.push('\n');
        }
        out
    }

    /// One JSON object per (configuration, size, metric) of `bench`.
    pub fn json_lines(&self, bench: Bench, context: &serde_json::Value) -> Vec<String> {
        let mut lines = Vec::new();
        for size in self.sizes(bench) {
            for c in &self.configs {
                for (mi, (metric, unit)) in bench.metrics().iter().enumerate() {
                    let Some(s) = self.summary(bench, c, size, mi) else {
                        continue;
                    };
                    let runs = &self.data[bench.name()][c][&size][mi];
                    let xkey = if bench.sweeps_procs() {
                        "procs"
                    } else {
                        "size"
                    };
                    let mut obj = serde_json::json!({
                        "benchmark": bench.name(),
                        "config": c,
                        "metric": metric,
                        "unit": unit,
                        "median": s.median,
                        "min": s.min,
                        "max": s.max,
                        "values": runs,
                    });
                    if let (Some(o), Some(ctx)) = (obj.as_object_mut(), context.as_object()) {
                        o.insert(xkey.into(), size.into());
                        for (k, v) in ctx {
                            o.insert(k.clone(), v.clone());
                        }
                        let ratios: serde_json::Map<String, serde_json::Value> = self
                            .ratios
                            .iter()
                            .filter(|(a, _)| a == c)
                            .filter_map(|(a, b)| {
                                let r = self.ratio(bench, a, b, size, mi)?;
                                Some((format!("{a}/{b}"), serde_json::json!(r)))
                            })
                            .collect();
                        if !ratios.is_empty() {
                            o.insert("ratios".into(), serde_json::Value::Object(ratios));
                        }
                    }
                    lines.push(obj.to_string());
                }
            }
        }
        lines
    }

    /// An SVG with one log-log panel per size-sweeping benchmark (first metric), one line per
    /// configuration (medians; sizes from 1 B, since 0 has no place on a log axis).
    pub fn svg(&self, benches: &[Bench], ranks: usize) -> Result<String, String> {
        use plotters::prelude::*;
        const W: u32 = 760;
        const H: u32 = 400;
        let panels: Vec<Bench> = benches
            .iter()
            .copied()
            .filter(|b| b.sweeps_sizes() && self.data.contains_key(b.name()))
            .collect();
        let mut svg = String::new();
        {
            let height = H * u32::try_from(panels.len().max(1)).unwrap_or(1);
            let root = SVGBackend::with_string(&mut svg, (W, height)).into_drawing_area();
            let draw_err = |e: &dyn std::fmt::Display| format!("drawing the plot: {e}");
            root.fill(&WHITE).map_err(|e| draw_err(&e))?;
            let areas = root.split_evenly((panels.len().max(1), 1));
            for (bench, area) in panels.iter().zip(areas) {
                let (metric, unit) = bench.metrics()[0];
                // Per configuration, the (size, median) points a log axis can show.
                let lines: Vec<(&String, Vec<(f64, f64)>)> = self
                    .configs
                    .iter()
                    .map(|c| {
                        let pts = self
                            .sizes(*bench)
                            .into_iter()
                            .filter(|&s| s > 0)
                            .filter_map(|s| {
                                self.summary(*bench, c, s, 0)
                                    .filter(|m| m.median > 0.0)
                                    .map(|m| (s as f64, m.median))
                            })
                            .collect();
                        (c, pts)
                    })
                    .filter(|(_, pts): &(_, Vec<_>)| !pts.is_empty())
                    .collect();
                let all = lines.iter().flat_map(|(_, p)| p.iter().copied());
                let Some((xmin, xmax, ymin, ymax)) = all.fold(None, |acc, (x, y)| {
                    let (a, b, c, d) = acc.unwrap_or((x, x, y, y));
                    Some((a.min(x), b.max(x), c.min(y), d.max(y)))
                }) else {
                    continue;
                };
                // Whole decades on y, and never a zero-width axis.
                let (ymin, ymax) = (
                    10f64.powf(ymin.log10().floor()),
                    10f64.powf(ymax.log10().ceil().max(ymin.log10().floor() + 1.0)),
                );
                let xmax = xmax.max(xmin * 2.0);
                let mut chart = ChartBuilder::on(&area)
                    .caption(
                        format!("{} {metric} ({unit}), {ranks} ranks", bench.name()),
                        ("sans-serif", 16),
                    )
                    .margin(12)
                    .x_label_area_size(36)
                    .y_label_area_size(64)
                    .build_cartesian_2d((xmin..xmax).log_scale(), (ymin..ymax).log_scale())
                    .map_err(|e| draw_err(&e))?;
                chart
                    .configure_mesh()
                    .x_desc("message size (bytes)")
                    .y_desc(format!("{metric} ({unit})"))
                    .x_label_formatter(&|x| human_size(x.round() as usize))
                    .y_label_formatter(&|y| fig(*y))
                    .draw()
                    .map_err(|e| draw_err(&e))?;
                for (i, (config, pts)) in lines.into_iter().enumerate() {
                    let color = Palette99::pick(i).to_rgba();
                    chart
                        .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                        .map_err(|e| draw_err(&e))?
                        .label(config.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3))
                        });
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .position(SeriesLabelPosition::UpperLeft)
                    .draw()
                    .map_err(|e| draw_err(&e))?;
            }
            root.present().map_err(|e| draw_err(&e))?;
        }
        Ok(svg)
    }
}

/// A figure with about four significant digits.
pub fn fig(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else if a >= 1.0 || a == 0.0 {
        format!("{v:.3}")
    } else {
        // Four significant digits below 1 too (message rates in Mmsg/s, ratios).
        let decimals = (3 - a.log10().floor() as i32).clamp(3, 9) as usize;
        format!("{v:.decimals$}")
    }
}

/// 0, 1, ..., 512, 1K, ..., 4M.
pub fn human_size(s: usize) -> String {
    if s >= 1 << 20 && s.is_multiple_of(1 << 20) {
        format!("{}M", s >> 20)
    } else if s >= 1 << 10 && s.is_multiple_of(1 << 10) {
        format!("{}K", s >> 10)
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_spread() {
        assert_eq!(
            summarize(&[3.0, 1.0, 2.0]),
            Some(Summary {
                median: 2.0,
                min: 1.0,
                max: 3.0
            })
        );
        assert_eq!(summarize(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(summarize(&[]), None);
    }

    fn sample() -> Results {
        let mut r = Results {
            configs: vec!["rmca".into(), "mpich".into()],
            ratios: vec![("rmca".into(), "mpich".into())],
            ..Default::default()
        };
        for (run, f) in [1.0, 3.0, 2.0].into_iter().enumerate() {
            for size in [0usize, 1, 1024] {
                r.add(Bench::Latency, "rmca", size, &[f * (size as f64 + 1.0)]);
                r.add(
                    Bench::Latency,
                    "mpich",
                    size,
                    &[0.5 * (run as f64 + 1.0) * (size as f64 + 1.0)],
                );
            }
        }
        r
    }

    #[test]
    fn table_has_medians_and_ratios() {
        let t = sample().table(Bench::Latency, 2, 3);
        assert!(t.contains("rmca/mpich"), "{t}");
        // Size 0: rmca runs 1,3,2 -> median 2; mpich 0.5,1,1.5 -> median 1; ratio 2.00.
        let row = t
            .lines()
            .find(|l| l.trim_start().starts_with("0 "))
            .expect("row for size 0");
        assert!(
            row.contains("2.000 [1.000..3.000]") && row.trim_end().ends_with("2.00"),
            "{row}"
        );
    }

    #[test]
    fn json_lines_are_objects_with_figures() {
        let ctx = serde_json::json!({"ranks": 2});
        let lines = sample().json_lines(Bench::Latency, &ctx);
        assert_eq!(lines.len(), 6);
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["benchmark"], "latency");
        assert_eq!(v["config"], "rmca");
        assert_eq!(v["size"], 0);
        assert_eq!(v["median"], 2.0);
        assert_eq!(v["ranks"], 2);
        assert_eq!(v["values"], serde_json::json!([1.0, 3.0, 2.0]));
        assert_eq!(v["ratios"]["rmca/mpich"], 2.0);
    }

    #[test]
    fn svg_draws_one_line_per_config_with_a_legend() {
        let svg = sample().svg(&[Bench::Latency], 2).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // One 2-px data line per configuration, each named in the legend.
        assert_eq!(
            svg.matches(r#"stroke-width="2" points="#).count(),
            2,
            "{svg}"
        );
        for name in ["rmca", "mpich"] {
            assert!(
                svg.contains(&format!("\n{name}\n")),
                "{name} in the legend: {svg}"
            );
        }
        // Nothing to sweep: an empty page, not an error.
        assert!(Results::default().svg(&[Bench::Latency], 2).is_ok());
    }

    #[test]
    fn figures_keep_four_significant_digits() {
        assert_eq!(fig(1234.6), "1235");
        assert_eq!(fig(12.345), "12.35");
        assert_eq!(fig(1.5), "1.500");
        assert_eq!(fig(0.0), "0.000");
        assert_eq!(fig(0.5), "0.5000");
        assert_eq!(fig(0.006123), "0.006123");
    }

    #[test]
    fn sizes_print_short() {
        assert_eq!(human_size(0), "0");
        assert_eq!(human_size(512), "512");
        assert_eq!(human_size(4096), "4K");
        assert_eq!(human_size(4 << 20), "4M");
    }
}
