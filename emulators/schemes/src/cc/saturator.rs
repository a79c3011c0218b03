//! Saturator: keeps the bottleneck queue full, in the sense of Pantheon's `saturator`.
//!
//! Rule: pace at `SATURATION_GAIN = 1.25` times the highest delivery rate measured over
//! the last `RATE_WINDOW_ROUNDS = 10` round trips. A sender that always offers 25 % more
//! than the path has just delivered keeps the bottleneck queue non-empty, so the queue
//! fills up to its limit and stays there (at DropTail the excess, about 20 % of the packets
//! sent, is dropped), and it follows a rate that rises because the queue drains into any
//! extra capacity, which raises the next delivery-rate sample.
//!
//! Start-up: with no measurement yet it sends `INITIAL_WINDOW_PACKETS` per handshake RTT,
//! and until the delivery rate stops growing it uses a gain of 2 (the rate doubles each
//! round); "stopped growing" means three rounds in a row without a 25 % increase of the
//! maximum delivery rate, which is when the bottleneck is known to be full.
//!
//! The window only guards against an unbounded backlog if ACKs stop altogether: four
//! times the pacing rate times the smoothed RTT (losses leave the flight when detected, so
//! the window never limits a flow that is still getting ACKs).
//! Loss is not a signal: filling the queue is the point.

use std::time::Duration;

use super::{AckEvent, Controller, LossEvent, WindowedFilter};

pub const SATURATION_GAIN: f64 = 1.25;
const STARTUP_GAIN: f64 = 2.0;
const RATE_WINDOW_ROUNDS: u32 = 10;
const INITIAL_WINDOW_PACKETS: f64 = 10.0;
const MIN_WINDOW_PACKETS: f64 = 16.0;
const FULL_PIPE_GROWTH: f64 = 1.25;
const FULL_PIPE_ROUNDS: u32 = 3;

#[derive(Clone, Debug)]
pub struct Saturator {
    mss: u64,
    max_rate: WindowedFilter,
    /// Highest delivery rate within the window, bytes/s.
    delivery_rate: Option<f64>,
    srtt: Option<Duration>,
    startup: bool,
    round: u32,
    round_end_seq: u64,
    full_pipe_rate: f64,
    rounds_without_growth: u32,
}

impl Saturator {
    pub fn new(mss: u64) -> Self {
        Self {
            mss,
            max_rate: WindowedFilter::max(),
            delivery_rate: None,
            srtt: None,
            startup: true,
            round: 0,
            round_end_seq: 0,
            full_pipe_rate: 0.0,
            rounds_without_growth: 0,
        }
    }

    pub fn in_startup(&self) -> bool {
        self.startup
    }

    pub fn delivery_rate(&self) -> Option<f64> {
        self.delivery_rate
    }

    fn end_round(&mut self) {
        self.round += 1;
        if !self.startup {
            return;
        }
        let Some(rate) = self.delivery_rate else { return };
        if rate >= self.full_pipe_rate * FULL_PIPE_GROWTH {
            self.full_pipe_rate = rate;
            self.rounds_without_growth = 0;
        } else {
            self.rounds_without_growth += 1;
            if self.rounds_without_growth >= FULL_PIPE_ROUNDS {
                self.startup = false;
            }
        }
    }
}

impl Controller for Saturator {
    fn name(&self) -> &'static str {
        "saturator"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        self.srtt = Some(ack.srtt);
        // The filter is indexed by round number so that its window is measured in RTTs.
        let round_time = Duration::from_secs(self.round as u64);
        if let Some(rate) = ack.delivery_rate {
            self.max_rate.update(round_time, rate);
        }
        self.delivery_rate = self.max_rate.get(round_time, Duration::from_secs(RATE_WINDOW_ROUNDS as u64));
        if ack.seq >= self.round_end_seq {
            self.round_end_seq = ack.next_seq;
            self.end_round();
        }
    }

    fn on_loss(&mut self, _loss: &LossEvent) {}

    fn cwnd(&self) -> u64 {
        let srtt = self.srtt.unwrap_or(Duration::from_millis(100));
        let by_rate = 4.0 * self.pacing_rate(srtt) * srtt.as_secs_f64();
        by_rate.max(MIN_WINDOW_PACKETS * self.mss as f64) as u64
    }

    fn pacing_rate(&self, srtt: Duration) -> f64 {
        let initial = INITIAL_WINDOW_PACKETS * self.mss as f64 / srtt.as_secs_f64().max(1e-4);
        match self.delivery_rate {
            None => initial,
            Some(rate) if self.startup => (STARTUP_GAIN * rate).max(initial),
            Some(rate) => SATURATION_GAIN * rate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1000;

    fn ack(seq: u64, next_seq: u64, rate: f64) -> AckEvent {
        AckEvent {
            now: Duration::from_millis(seq),
            seq,
            sent_at: Duration::ZERO,
            rtt: Duration::from_millis(100),
            one_way_delay_us: 0,
            acked_bytes: MSS,
            bytes_in_flight: 0,
            next_seq,
            delivery_rate: Some(rate),
            srtt: Duration::from_millis(100),
        }
    }

    #[test]
    fn paces_a_quarter_above_the_delivery_rate_once_the_pipe_is_full() {
        let mut s = Saturator::new(MSS);
        let srtt = Duration::from_millis(100);
        // Rates grow then plateau at 1 MB/s; one ACK per round keeps the test short.
        let rates = [100e3, 200e3, 400e3, 800e3, 1e6, 1e6, 1e6, 1e6, 1e6, 1e6];
        for (i, &r) in rates.iter().enumerate() {
            let seq = i as u64;
            s.on_ack(&ack(seq, seq + 1, r));
            if i < 4 {
                assert!(s.in_startup());
                assert!((s.pacing_rate(srtt) - 2.0 * r).abs() < 1.0);
            }
        }
        assert!(!s.in_startup());
        assert!((s.pacing_rate(srtt) - 1.25e6).abs() < 1.0);
        // Never window-limited while ACKs flow: the window covers 4 RTTs at that rate.
        assert!(s.cwnd() as f64 >= 4.0 * 1.25e6 * 0.1 - 1.0);
    }

    #[test]
    fn follows_a_rate_drop_after_the_window_of_rounds() {
        let mut s = Saturator::new(MSS);
        s.startup = false;
        for seq in 0..5 {
            s.on_ack(&ack(seq, seq + 1, 1e6));
        }
        for seq in 5..30 {
            s.on_ack(&ack(seq, seq + 1, 0.5e6));
        }
        assert!((s.delivery_rate().unwrap() - 0.5e6).abs() < 1.0);
    }

    #[test]
    fn ignores_loss() {
        let mut s = Saturator::new(MSS);
        s.on_ack(&ack(0, 1, 1e6));
        let before = s.pacing_rate(Duration::from_millis(100));
        s.on_loss(&LossEvent {
            now: Duration::from_millis(1),
            seq: 0,
            sent_at: Duration::ZERO,
            bytes: MSS,
            bytes_in_flight: 0,
        });
        assert_eq!(s.pacing_rate(Duration::from_millis(100)), before);
    }
}
