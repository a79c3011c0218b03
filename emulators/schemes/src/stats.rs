//! Counters an endpoint keeps so that it can print a one-line summary when it is stopped.
//! Shared between the data path and the termination handler through an `Arc`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

#[derive(Debug)]
pub struct Stats {
    scheme: String,
    role: &'static str,
    /// What one count is: "packets" for datagram schemes, "chunks" (read/write calls)
    /// for stream schemes.
    unit: &'static str,
    started: Instant,
    bytes: AtomicU64,
    packets: AtomicU64,
    lost: AtomicU64,
}

impl Stats {
    pub fn new(scheme: &str, role: &'static str, unit: &'static str) -> Self {
        Self {
            scheme: scheme.to_string(),
            role,
            unit,
            started: Instant::now(),
            bytes: AtomicU64::new(0),
            packets: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    /// Payload bytes sent (sender) or received (receiver), one packet or chunk.
    pub fn add_bytes(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.packets.fetch_add(1, Ordering::Relaxed);
    }

    /// For the UDP transport, whose packets are counted by the caller.
    pub fn set_lost(&self, lost: u64) {
        self.lost.store(lost, Ordering::Relaxed);
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// e.g. `calibrate-scheme udp-copa receiver: 1234567 bytes in 2.00 s (4.94 Mbit/s), 840 packets`
    pub fn summary(&self) -> String {
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        let bytes = self.bytes();
        let mut line = format!(
            "calibrate-scheme {} {}: {} bytes in {:.2} s ({:.2} Mbit/s), {} {}",
            self.scheme,
            self.role,
            bytes,
            secs,
            bytes as f64 * 8.0 / secs / 1e6,
            self.packets.load(Ordering::Relaxed),
            self.unit,
        );
        let lost = self.lost.load(Ordering::Relaxed);
        if lost > 0 {
            line.push_str(&format!(", {lost} lost"));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_reports_bytes_and_rate() {
        let s = Stats::new("cubic", "receiver", "chunks");
        s.add_bytes(1000);
        s.add_bytes(500);
        let line = s.summary();
        assert!(line.starts_with("calibrate-scheme cubic receiver: 1500 bytes in "), "{line}");
        assert!(line.ends_with("2 chunks"), "{line}");
    }
}
