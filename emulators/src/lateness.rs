//! How late the real-time loop wrote packets out, against the times the model released them.
//!
//! The model ([`crate::ferry::Ferries`], [`crate::stage::Pipeline`]) says when each packet
//! leaves the path; the loop writes it when it next runs. A loop that wakes a little late adds
//! tens of microseconds. A loop that is held off the CPU (by the hypervisor, by blocking I/O,
//! by real-time throttling) holds both directions for as long, which the model does not
//! include and a sender sees as a path that paused. This histogram is the engine's own error,
//! reported with each run so that a run spoiled by its host can be told apart from the path.

use serde_json::json;

/// Width of one bin, microseconds.
const BIN_US: u64 = 10;
/// Bins up to 100 ms; anything later lands in the last one (the maximum is kept exactly).
const BINS: usize = 10_000;

/// A histogram of per-packet lateness, in microseconds.
pub struct Lateness {
    bins: Vec<u64>,
    count: u64,
    max_us: u64,
    over_1ms: u64,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness { bins: vec![0; BINS], count: 0, max_us: 0, over_1ms: 0 }
    }
}

impl Lateness {
    /// One packet written at `written_us` that the model released at `due_us`.
    pub fn record(&mut self, due_us: u64, written_us: u64) {
        let late = written_us.saturating_sub(due_us);
        self.bins[((late / BIN_US) as usize).min(BINS - 1)] += 1;
        self.count += 1;
        self.max_us = self.max_us.max(late);
        self.over_1ms += u64::from(late > 1000);
    }

    /// The `q` quantile in milliseconds (the upper edge of its bin), or 0 with no packets.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, n) in self.bins.iter().enumerate() {
            seen += n;
            if seen >= rank && i < BINS - 1 {
                let edge = (i as u64 + 1) * BIN_US;
                return edge.min(self.max_us) as f64 / 1000.0;
            }
        }
        // In the last bin, whose upper edge is the maximum.
        self.max_us as f64 / 1000.0
    }

    pub fn summary(&self) -> serde_json::Value {
        json!({
            "packets": self.count,
            "p50_ms": self.quantile_ms(0.5),
            "p99_ms": self.quantile_ms(0.99),
            "p999_ms": self.quantile_ms(0.999),
            "max_ms": self.max_us as f64 / 1000.0,
            "over_1ms_packets": self.over_1ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_recorded_lateness() {
        let mut l = Lateness::default();
        assert_eq!(l.quantile_ms(0.99), 0.0);
        for i in 0..1000u64 {
            // 990 packets 30-39 µs late, 10 packets 5 ms late.
            let late = if i < 990 { 30 + i % 10 } else { 5000 };
            l.record(1_000_000 + i, 1_000_000 + i + late);
        }
        assert_eq!(l.quantile_ms(0.5), 0.04);
        assert_eq!(l.quantile_ms(0.99), 0.04);
        assert_eq!(l.quantile_ms(0.999), 5.0);
        let s = l.summary();
        assert_eq!(s["packets"], 1000);
        assert_eq!(s["max_ms"], 5.0);
        assert_eq!(s["over_1ms_packets"], 10);
    }

    #[test]
    fn early_and_very_late_writes_are_kept_in_range() {
        let mut l = Lateness::default();
        l.record(500, 400); // written before it was due: not late
        l.record(0, 250_000); // later than the last bin
        assert_eq!(l.quantile_ms(0.5), 0.01);
        assert_eq!(l.quantile_ms(1.0), 250.0);
        assert_eq!(l.summary()["over_1ms_packets"], 1);
    }
}
