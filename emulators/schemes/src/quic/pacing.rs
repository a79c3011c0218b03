//! Chromium's `PacingSender` (`net/quic/core/congestion_control/pacing_sender.cc`), as both
//! proto-quic eras ran it in front of their Cubic sender: the first `UNPACED_BURST` packets
//! leave at once; after that each send schedules the next one interval later (or, while
//! catching up after a delayed send, one interval after the previous ideal time), and a packet
//! whose ideal time is within the 1 ms alarm granularity leaves at once, so at a
//! sub-millisecond interval packets leave in pairs. Bursts beyond that never happen: a sender
//! that fell behind (an ACK compressed by a stalled peer) catches up one interval at a time.
//!
//! Chromium 60 (quic-2018) adds two rules that the callers pass in: a packet sent with nothing
//! in flight, outside recovery, refills the burst tokens to min(10, window in packets)
//! ("leaving quiescence"), and a loss event clears them. Its `TimeUntilSend` also lets a
//! packet leave at once with nothing in flight.

use std::time::{Duration, Instant};

/// `kInitialUnpacedBurst`.
pub(crate) const UNPACED_BURST: u32 = 10;
/// The pacing alarm's granularity (`kAlarmGranularity`).
pub(crate) const GRANULARITY: Duration = Duration::from_millis(1);

#[derive(Debug)]
pub(crate) struct PacingSender {
    burst_tokens: u32,
    ideal_next_send: Option<Instant>,
    last_delayed_send: Option<Instant>,
    last_send_delayed: bool,
}

impl PacingSender {
    pub(crate) fn new() -> Self {
        Self { burst_tokens: UNPACED_BURST, ideal_next_send: None, last_delayed_send: None, last_send_delayed: false }
    }

    /// When the next packet may leave (`None`: now), as `TimeUntilSend`; `quiescent`: nothing
    /// is in flight (Chromium 60 sends then at once; Chromium 54 had no such rule).
    pub(crate) fn release_at(&mut self, now: Instant, quiescent: bool) -> Option<Instant> {
        if self.burst_tokens > 0 || quiescent {
            return None;
        }
        match self.ideal_next_send {
            Some(at) if at > now + GRANULARITY => {
                self.last_send_delayed = true;
                Some(at)
            }
            _ => None,
        }
    }

    /// Records a packet sent at `now`, as `OnPacketSent`; `interval`: its transfer time at the
    /// pacing rate; `refill`: the burst tokens it gets for leaving quiescence (Chromium 60),
    /// if it does.
    pub(crate) fn on_sent(&mut self, now: Instant, interval: Duration, refill: Option<u32>) {
        if let Some(tokens) = refill {
            self.burst_tokens = tokens;
        }
        if self.burst_tokens > 0 {
            self.burst_tokens -= 1;
            self.last_send_delayed = false;
            self.last_delayed_send = None;
            self.ideal_next_send = None;
            return;
        }
        if self.last_send_delayed {
            let ideal = self.ideal_next_send.unwrap_or(now) + interval;
            self.ideal_next_send = Some(ideal);
            // Sent later than one interval after the previous delayed send: the sender had
            // nothing to send (application-limited), so it does not catch up.
            let app_limited = self.last_delayed_send.is_some_and(|at| now > at + interval);
            if ideal <= now && !app_limited {
                self.last_delayed_send = Some(now);
            } else {
                self.last_send_delayed = false;
                self.last_delayed_send = None;
            }
        } else {
            let earliest = now + interval;
            self.ideal_next_send = Some(self.ideal_next_send.map_or(earliest, |at| (at + interval).max(earliest)));
        }
    }

    /// A loss event (Chromium 60's `OnCongestionEvent` with losses): no burst in recovery.
    pub(crate) fn on_loss(&mut self) {
        self.burst_tokens = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chromium 54's interval at the initial window: 2 × 46 720 B per 57 ms, a 1350-byte packet
    /// every ~0.82 ms.
    const INTERVAL: Duration = Duration::from_nanos(823_630);

    #[test]
    fn bursts_ten_then_paces_pairs_within_the_granularity() {
        let t0 = Instant::now();
        let mut pacer = PacingSender::new();
        let mut now = t0;
        let mut times = Vec::new();
        for _ in 0..50 {
            if let Some(at) = pacer.release_at(now, false) {
                assert!(at > now);
                now = at;
            }
            pacer.on_sent(now, INTERVAL, None);
            times.push(now - t0);
        }
        assert!(times[..10].iter().all(|t| t.is_zero()), "{times:?}");
        let paced = &times[10..];
        let mean = (paced[paced.len() - 1] - paced[0]).as_secs_f64() / (paced.len() - 1) as f64;
        assert!((mean / INTERVAL.as_secs_f64() - 1.0).abs() < 0.05, "mean spacing {mean} s");
        for w in paced.windows(3) {
            assert!(w[2] > w[0], "more than two packets at once: {paced:?}");
            assert!(w[1] - w[0] <= GRANULARITY + INTERVAL, "{paced:?}");
        }
    }

    #[test]
    fn does_not_catch_up_after_an_idle_sender() {
        let interval = INTERVAL * 2;
        let t0 = Instant::now();
        let mut pacer = PacingSender::new();
        for _ in 0..=UNPACED_BURST {
            pacer.on_sent(t0, interval, None);
        }
        // Nothing to send for 50 ms, then two packets: the second is paced from the first.
        let later = t0 + Duration::from_millis(50);
        assert_eq!(pacer.release_at(later, false), None);
        pacer.on_sent(later, interval, None);
        let at = pacer.release_at(later, false).unwrap_or(later);
        pacer.on_sent(at, interval, None);
        let next = pacer.release_at(at, false).expect("paced again");
        assert!(next >= later + interval * 2 - Duration::from_micros(1), "{:?}", next - later);
    }

    #[test]
    fn a_sender_behind_catches_up_one_interval_at_a_time_not_in_a_burst() {
        // Packets wanted every interval, but none could leave for 20 intervals (a stall):
        // afterwards at most two leave per interval, never the 20 at once.
        let t0 = Instant::now();
        let mut pacer = PacingSender::new();
        for _ in 0..UNPACED_BURST {
            pacer.on_sent(t0, INTERVAL, None);
        }
        pacer.on_sent(t0, INTERVAL, None);
        let resume = t0 + INTERVAL * 20;
        let mut now = resume;
        let mut sent_by = Vec::new();
        for _ in 0..20 {
            if let Some(at) = pacer.release_at(now, false) {
                now = at;
            }
            pacer.on_sent(now, INTERVAL, None);
            sent_by.push(now);
        }
        let within_1ms = sent_by.iter().filter(|&&t| t <= resume + GRANULARITY).count();
        assert!(within_1ms <= 3, "{within_1ms} packets within 1 ms of the stall's end");
    }

    /// How many packets leave at `now` before the pacer delays one.
    fn at_once(pacer: &mut PacingSender, now: Instant) -> usize {
        let mut sent = 0;
        while sent < 100 && pacer.release_at(now, false).is_none() {
            pacer.on_sent(now, INTERVAL, None);
            sent += 1;
        }
        sent
    }

    #[test]
    fn quiescence_sends_at_once_and_refills_the_burst_and_a_loss_clears_it() {
        let t0 = Instant::now();
        let mut pacer = PacingSender::new();
        let first = at_once(&mut pacer, t0);
        assert_eq!(first, UNPACED_BURST as usize + 2, "the burst, then a pair within the granularity");
        assert!(pacer.release_at(t0, false).is_some());
        assert_eq!(pacer.release_at(t0, true), None, "nothing in flight: at once");
        let t1 = t0 + Duration::from_secs(1);
        pacer.on_sent(t1, INTERVAL, Some(4));
        assert_eq!(1 + at_once(&mut pacer, t1), 4 + 2, "a refill of 4, then a pair");
        let t2 = t1 + Duration::from_secs(1);
        pacer.on_sent(t2, INTERVAL, Some(10));
        pacer.on_loss();
        assert_eq!(at_once(&mut pacer, t2), 2, "a loss clears the tokens: a pair, not 9");
    }
}
