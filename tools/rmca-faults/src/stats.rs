//! Percentiles and CDFs of latency samples.

/// The `q`-quantile (0..=1) of sorted `xs` by the nearest-rank method; NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.saturating_sub(1).min(sorted.len() - 1)]
}

/// `points` (value, cumulative fraction) pairs of the empirical CDF of sorted `xs`, at
/// evenly spaced fractions, for plotting without carrying every sample.
pub fn cdf(sorted: &[f64], points: usize) -> Vec<(f64, f64)> {
    if sorted.is_empty() || points < 2 {
        return Vec::new();
    }
    (0..points)
        .map(|i| {
            let q = i as f64 / (points - 1) as f64;
            (quantile(sorted, q), q)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let xs: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(quantile(&xs, 0.5), 500.0);
        assert_eq!(quantile(&xs, 0.99), 990.0);
        assert_eq!(quantile(&xs, 0.999), 999.0);
        assert_eq!(quantile(&xs, 1.0), 1000.0);
        assert_eq!(quantile(&xs, 0.0), 1.0);
        assert!(quantile(&[], 0.5).is_nan());
        let c = cdf(&xs, 11);
        assert_eq!(c.len(), 11);
        assert_eq!(c[10], (1000.0, 1.0));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}
