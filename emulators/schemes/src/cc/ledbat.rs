//! LEDBAT (RFC 6817) over our UDP transport.
//!
//! LEDBAT measures one-way delay (receiver clock at arrival minus sender clock at
//! sending: the reverse path's queue does not count) and keeps the queueing delay it
//! causes at TARGET = 100 ms:
//!
//! * base delay = minimum one-way delay over the last BASE_HISTORY = 10 minutes, kept as
//!   one minimum per minute so that a route change ages out (RFC 6817 §3.4.2); the unknown
//!   clock offset cancels when the base is subtracted;
//! * current delay = minimum of the last CURRENT_FILTER = 4 samples (the RFC's noise filter;
//!   the minimum is its suggested filter);
//! * per ACK: `off_target = (TARGET - queuing_delay) / TARGET` and
//!   `cwnd += GAIN * off_target * bytes_acked * MSS / cwnd`, so the window grows by at
//!   most GAIN = 1 packet per RTT far below target and shrinks above it;
//! * `cwnd <= flightsize + ALLOWED_INCREASE * MSS` (no growth while not using the window;
//!   applied to growth only, so a momentary dip in flight never shrinks the window),
//!   `cwnd >= MIN_CWND * MSS` with MIN_CWND = 2, INIT_CWND = 2;
//! * on loss, at most once per RTT: `cwnd = min(cwnd, max(cwnd / 2, MIN_CWND * MSS))`.
//!
//! RFC 6817 specifies the steady-state controller and leaves start-up open. Growing by at
//! most one packet per RTT from INIT_CWND would spend most of a 20–30 s Pantheon run
//! ramping up, so, like deployed LEDBAT implementations, this one starts with a slow start
//! (window += bytes acked) that ends at the first loss or once the queueing delay passes
//! half the target; the RFC rule takes over from there.

use std::collections::VecDeque;
use std::time::Duration;

use super::{window_pacing_rate, AckEvent, Controller, LossEvent};

pub const TARGET: Duration = Duration::from_millis(100);
const GAIN: f64 = 1.0;
const BASE_HISTORY: usize = 10;
const BASE_HISTORY_BUCKET: Duration = Duration::from_secs(60);
const CURRENT_FILTER: usize = 4;
const INIT_CWND_PACKETS: f64 = 2.0;
const MIN_CWND_PACKETS: f64 = 2.0;
const ALLOWED_INCREASE_PACKETS: f64 = 1.0;
/// Slow start ends when the queueing delay exceeds this fraction of the target.
const SLOW_START_EXIT_FRACTION: f64 = 0.5;

#[derive(Clone, Debug)]
pub struct Ledbat {
    mss: u64,
    target_us: f64,
    cwnd: f64,
    slow_start: bool,
    /// (bucket index, minimum one-way delay in that bucket), oldest first.
    base_history: VecDeque<(u64, i64)>,
    current_delays: VecDeque<i64>,
    recovery_start: Duration,
    last_queuing_delay_us: Option<f64>,
}

impl Ledbat {
    pub fn new(mss: u64) -> Self {
        Self::with_target(mss, TARGET)
    }

    pub fn with_target(mss: u64, target: Duration) -> Self {
        Self {
            mss,
            target_us: target.as_micros() as f64,
            cwnd: INIT_CWND_PACKETS * mss as f64,
            slow_start: true,
            base_history: VecDeque::with_capacity(BASE_HISTORY + 1),
            current_delays: VecDeque::with_capacity(CURRENT_FILTER + 1),
            recovery_start: Duration::ZERO,
            last_queuing_delay_us: None,
        }
    }

    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    /// Latest estimate of the queueing delay this flow sees.
    pub fn queuing_delay(&self) -> Option<Duration> {
        self.last_queuing_delay_us.map(|us| Duration::from_micros(us as u64))
    }

    fn update_base_delay(&mut self, now: Duration, owd_us: i64) {
        let bucket = now.as_secs() / BASE_HISTORY_BUCKET.as_secs();
        match self.base_history.back_mut() {
            Some((b, min)) if *b == bucket => *min = (*min).min(owd_us),
            _ => {
                self.base_history.push_back((bucket, owd_us));
                if self.base_history.len() > BASE_HISTORY {
                    self.base_history.pop_front();
                }
            }
        }
    }

    fn update_current_delay(&mut self, owd_us: i64) {
        self.current_delays.push_back(owd_us);
        if self.current_delays.len() > CURRENT_FILTER {
            self.current_delays.pop_front();
        }
    }

    fn base_delay(&self) -> Option<i64> {
        self.base_history.iter().map(|&(_, d)| d).min()
    }

    fn current_delay(&self) -> Option<i64> {
        self.current_delays.iter().copied().min()
    }
}

impl Controller for Ledbat {
    fn name(&self) -> &'static str {
        "ledbat"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        let before = self.cwnd;
        self.update_base_delay(ack.now, ack.one_way_delay_us);
        self.update_current_delay(ack.one_way_delay_us);
        let (Some(current), Some(base)) = (self.current_delay(), self.base_delay()) else {
            return;
        };
        let queuing_delay = (current - base).max(0) as f64;
        self.last_queuing_delay_us = Some(queuing_delay);
        let mss = self.mss as f64;
        let acked = ack.acked_bytes as f64;
        if self.slow_start && queuing_delay > SLOW_START_EXIT_FRACTION * self.target_us {
            self.slow_start = false;
        }
        if self.slow_start {
            self.cwnd += acked;
        } else {
            let off_target = (self.target_us - queuing_delay) / self.target_us;
            self.cwnd += GAIN * off_target * acked * mss / self.cwnd;
        }
        // Flight size before this ACK: what is still out plus what it just acknowledged.
        // The RFC's cap exists so that an unused window does not *grow*; applied literally it
        // also shrinks the window whenever flight dips for a moment (a sender stalled for a
        // few ms), and each following ACK clamps it further: the window collapses and LEDBAT
        // needs seconds to climb back at one packet per RTT. So it limits growth only.
        let flightsize = (ack.bytes_in_flight + ack.acked_bytes) as f64;
        let max_allowed = (flightsize + ALLOWED_INCREASE_PACKETS * mss).max(before);
        self.cwnd = self.cwnd.min(max_allowed).max(MIN_CWND_PACKETS * mss);
    }

    fn on_loss(&mut self, loss: &LossEvent) {
        if loss.sent_at < self.recovery_start {
            return;
        }
        self.recovery_start = loss.now;
        self.slow_start = false;
        let floor = MIN_CWND_PACKETS * self.mss as f64;
        self.cwnd = self.cwnd.min((self.cwnd / 2.0).max(floor));
    }

    fn cwnd(&self) -> u64 {
        self.cwnd as u64
    }

    fn pacing_rate(&self, srtt: Duration) -> f64 {
        window_pacing_rate(self.cwnd(), srtt, self.slow_start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1000;

    fn ack(now: Duration, owd_ms: f64, in_flight: u64) -> AckEvent {
        AckEvent {
            now,
            seq: 0,
            sent_at: now,
            rtt: Duration::from_millis(100),
            one_way_delay_us: (owd_ms * 1000.0) as i64 + 7_000_000, // arbitrary clock offset
            acked_bytes: MSS,
            bytes_in_flight: in_flight,
            next_seq: 0,
            delivery_rate: None,
            srtt: Duration::from_millis(100),
        }
    }

    fn in_avoidance(cwnd_packets: f64) -> Ledbat {
        let mut l = Ledbat::new(MSS);
        l.on_ack(&ack(Duration::ZERO, 20.0, 10 * MSS));
        l.slow_start = false;
        l.cwnd = cwnd_packets * MSS as f64;
        l
    }

    #[test]
    fn holds_at_target_delay() {
        let mut l = in_avoidance(50.0);
        // Fill the current-delay filter with on-target samples first.
        for i in 0..CURRENT_FILTER as u64 {
            l.on_ack(&ack(Duration::from_millis(i), 120.0, 50 * MSS));
        }
        let settled = l.cwnd();
        for i in 4..200 {
            l.on_ack(&ack(Duration::from_millis(i), 120.0, 50 * MSS));
        }
        assert_eq!(l.cwnd(), settled);
        assert_eq!(l.queuing_delay(), Some(Duration::from_millis(100)));
    }

    #[test]
    fn grows_at_most_one_packet_per_rtt_below_target() {
        let mut l = in_avoidance(50.0);
        // One window's worth of ACKs with no queueing delay.
        for i in 0..50 {
            l.on_ack(&ack(Duration::from_millis(i), 20.0, 50 * MSS));
        }
        let grown = l.cwnd() as f64 / MSS as f64 - 50.0;
        assert!(grown > 0.9 && grown <= 1.0 + 1e-9, "grew {grown} packets");
    }

    #[test]
    fn shrinks_above_target() {
        let mut l = in_avoidance(50.0);
        for i in 0..50 {
            l.on_ack(&ack(Duration::from_millis(i), 170.0, 50 * MSS));
        }
        // off_target = -0.5: about half a packet per RTT.
        let shrunk = 50.0 - l.cwnd() as f64 / MSS as f64;
        assert!(shrunk > 0.4 && shrunk < 0.6, "shrank {shrunk} packets");
    }

    #[test]
    fn does_not_grow_beyond_flight_size() {
        // Far below target but using only 5 packets of a 50-packet window: no growth.
        let mut l = in_avoidance(50.0);
        for i in 0..100 {
            l.on_ack(&ack(Duration::from_millis(i), 20.0, 5 * MSS));
        }
        assert_eq!(l.cwnd(), 50 * MSS);
    }

    #[test]
    fn a_dip_in_flight_does_not_shrink_the_window() {
        // At target (no push either way) while flight dips to 3 packets for a moment.
        let mut l = in_avoidance(50.0);
        for i in 0..20 {
            l.on_ack(&ack(Duration::from_millis(i), 120.0, 3 * MSS));
        }
        assert_eq!(l.cwnd(), 50 * MSS);
        // And with the window in use again it grows below target.
        for i in 20..200 {
            l.on_ack(&ack(Duration::from_millis(i), 20.0, 50 * MSS));
        }
        assert!(l.cwnd() > 50 * MSS);
    }

    #[test]
    fn base_delay_history_ages_out_after_ten_minutes() {
        let mut l = Ledbat::new(MSS);
        l.on_ack(&ack(Duration::ZERO, 10.0, 0));
        for minute in 1..=10u64 {
            l.on_ack(&ack(Duration::from_secs(minute * 60), 50.0, 0));
        }
        // Still remembered: ten buckets (minutes 1..=10); minute 0 just left.
        assert_eq!(l.base_delay().unwrap(), 50_000 + 7_000_000);
        let mut l = Ledbat::new(MSS);
        l.on_ack(&ack(Duration::ZERO, 10.0, 0));
        for minute in 1..=9u64 {
            l.on_ack(&ack(Duration::from_secs(minute * 60), 50.0, 0));
        }
        assert_eq!(l.base_delay().unwrap(), 10_000 + 7_000_000);
    }

    #[test]
    fn loss_halves_once_per_rtt_but_not_below_min() {
        let mut l = in_avoidance(40.0);
        let loss = |now: u64, sent: u64| LossEvent {
            now: Duration::from_millis(now),
            seq: 0,
            sent_at: Duration::from_millis(sent),
            bytes: MSS,
            bytes_in_flight: 0,
        };
        l.on_loss(&loss(1000, 900));
        assert_eq!(l.cwnd(), 20 * MSS);
        l.on_loss(&loss(1001, 950));
        assert_eq!(l.cwnd(), 20 * MSS);
        l.cwnd = 3.0 * MSS as f64;
        l.on_loss(&loss(2000, 1500));
        assert_eq!(l.cwnd(), 2 * MSS);
    }

    #[test]
    fn converges_to_target_queueing_delay() {
        // Fluid bottleneck: 1000 packets/s, 20 ms one-way base delay, 40-packet BDP,
        // a queue too large to drop. A window of w packets queues (w - 40) ms.
        let mut l = Ledbat::new(MSS);
        let mut now = Duration::ZERO;
        for _ in 0..60_000 {
            let w = l.cwnd() as f64 / MSS as f64;
            let queue_ms = (w - 40.0).max(0.0);
            now += Duration::from_micros(1000);
            l.on_ack(&ack(now, 20.0 + queue_ms, l.cwnd().saturating_sub(MSS)));
        }
        let q = l.queuing_delay().unwrap().as_secs_f64() * 1000.0;
        assert!((q - 100.0).abs() < 10.0, "queueing delay {q} ms");
    }
}
