//! TCP Vegas (Brakmo & Peterson, SIGCOMM 1994), the window rule over our UDP transport.
//!
//! Vegas compares the throughput it expects with an empty queue, `cwnd / BaseRTT`, with
//! the throughput it actually gets, `cwnd / RTT`. Their difference times BaseRTT is the
//! number of its own packets sitting in the bottleneck queue:
//! `diff = cwnd * (RTT - BaseRTT) / RTT` (packets). Once per round trip it adds a packet
//! when `diff < alpha`, removes one when `diff > beta`, and otherwise holds, so the
//! standing queue stays between alpha and beta packets.
//!
//! * BaseRTT is the minimum RTT ever seen (the paper's definition).
//! * RTT is the minimum sample of the last round: per-packet samples include pacing and
//!   scheduling jitter, and the minimum is the least noisy measure of the standing queue
//!   (Linux's tcp_vegas makes the same choice).
//! * Slow start doubles the window only every other round, so that the round in between
//!   measures a window that is not changing (the paper's modified slow start), and ends
//!   when `diff > gamma`. The test runs on every ACK with the minimum of the last three
//!   RTT samples and the flight that produced them, not once per round: a doubling window
//!   tested once per round overshoots by up to a window, and Vegas drains an overshoot at
//!   one packet per RTT, which would hide its low-delay character for seconds. On exit
//!   the window is cut to what fills the pipe plus alpha, `flight * BaseRTT / RTT + alpha`.
//! * On loss Vegas falls back to Reno's halving, at most once per round trip (losses of
//!   packets sent before the last reduction are ignored, the paper's §3.1 rule).
//! * alpha = 2, beta = 4, gamma = 1 packets are Linux's defaults; Pantheon's `vegas` ran
//!   the Linux module, so these keep the probe comparable. (The paper's experiments used
//!   alpha = 1, beta = 3; both are constructor arguments.)

use std::collections::VecDeque;
use std::time::Duration;

use super::{window_pacing_rate, AckEvent, Controller, LossEvent};

const INITIAL_CWND_PACKETS: f64 = 10.0;
const MIN_CWND_PACKETS: f64 = 2.0;
const RECENT_RTT_SAMPLES: usize = 3;

#[derive(Clone, Debug)]
pub struct Vegas {
    mss: u64,
    alpha: f64,
    beta: f64,
    gamma: f64,
    /// Congestion window in packets.
    cwnd: f64,
    slow_start: bool,
    /// Slow start grows only on every other round.
    grow_this_round: bool,
    base_rtt: Option<Duration>,
    round_min_rtt: Option<Duration>,
    /// The last few RTT samples, for the slow-start exit test.
    recent_rtts: VecDeque<Duration>,
    /// The round ends when a packet with at least this sequence number is acknowledged.
    round_end_seq: u64,
    /// Losses of packets sent before this time belong to an already-handled episode.
    recovery_start: Duration,
}

impl Vegas {
    pub fn new(mss: u64) -> Self {
        Self::with_thresholds(mss, 2.0, 4.0, 1.0)
    }

    pub fn with_thresholds(mss: u64, alpha: f64, beta: f64, gamma: f64) -> Self {
        assert!(alpha <= beta, "Vegas needs alpha <= beta");
        Self {
            mss,
            alpha,
            beta,
            gamma,
            cwnd: INITIAL_CWND_PACKETS,
            slow_start: true,
            grow_this_round: true,
            base_rtt: None,
            round_min_rtt: None,
            recent_rtts: VecDeque::with_capacity(RECENT_RTT_SAMPLES + 1),
            round_end_seq: 0,
            recovery_start: Duration::ZERO,
        }
    }

    pub fn cwnd_packets(&self) -> f64 {
        self.cwnd
    }

    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    /// Queued packets estimated from a round's RTT: `cwnd * (RTT - BaseRTT) / RTT`.
    pub fn queued_packets(&self, rtt: Duration) -> f64 {
        let base = self.base_rtt.unwrap_or(rtt).as_secs_f64();
        let rtt = rtt.as_secs_f64().max(1e-9);
        self.cwnd * (rtt - base).max(0.0) / rtt
    }

    fn check_slow_start_exit(&mut self, ack: &AckEvent) {
        let (Some(base), Some(&rtt)) = (self.base_rtt, self.recent_rtts.iter().min()) else { return };
        let rtt_s = rtt.as_secs_f64().max(1e-9);
        // The flight before this ACK is the window that produced these RTTs.
        let flight = (ack.bytes_in_flight + ack.acked_bytes) as f64 / self.mss as f64;
        let diff = flight * (rtt_s - base.as_secs_f64()).max(0.0) / rtt_s;
        if diff > self.gamma {
            let fitted = flight * base.as_secs_f64() / rtt_s + self.alpha;
            self.cwnd = fitted.min(self.cwnd).max(MIN_CWND_PACKETS);
            self.slow_start = false;
        }
    }

    fn end_round(&mut self, ack: &AckEvent) {
        let Some(rtt) = self.round_min_rtt.take() else { return };
        let diff = self.queued_packets(rtt);
        if self.slow_start {
            self.grow_this_round = !self.grow_this_round;
        } else if diff < self.alpha {
            self.cwnd += 1.0;
        } else if diff > self.beta {
            self.cwnd = (self.cwnd - 1.0).max(MIN_CWND_PACKETS);
        }
        self.round_end_seq = ack.next_seq;
    }
}

impl Controller for Vegas {
    fn name(&self) -> &'static str {
        "vegas"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        let first = self.base_rtt.is_none();
        self.base_rtt = Some(self.base_rtt.map_or(ack.rtt, |b| b.min(ack.rtt)));
        self.round_min_rtt = Some(self.round_min_rtt.map_or(ack.rtt, |r| r.min(ack.rtt)));
        if first {
            // The first round runs until everything sent so far is acknowledged.
            self.round_end_seq = ack.next_seq;
        }
        self.recent_rtts.push_back(ack.rtt);
        if self.recent_rtts.len() > RECENT_RTT_SAMPLES {
            self.recent_rtts.pop_front();
        }
        if self.slow_start {
            self.check_slow_start_exit(ack);
        }
        if self.slow_start && self.grow_this_round {
            self.cwnd += ack.acked_bytes as f64 / self.mss as f64;
        }
        if !first && ack.seq >= self.round_end_seq {
            self.end_round(ack);
        }
    }

    fn on_loss(&mut self, loss: &LossEvent) {
        if loss.sent_at < self.recovery_start {
            return;
        }
        self.recovery_start = loss.now;
        self.cwnd = (self.cwnd / 2.0).max(MIN_CWND_PACKETS);
        self.slow_start = false;
    }

    fn cwnd(&self) -> u64 {
        (self.cwnd * self.mss as f64) as u64
    }

    fn pacing_rate(&self, srtt: Duration) -> f64 {
        window_pacing_rate(self.cwnd(), srtt, self.slow_start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1000;

    fn ack(now_ms: u64, seq: u64, next_seq: u64, rtt_ms: u64) -> AckEvent {
        AckEvent {
            now: Duration::from_millis(now_ms),
            seq,
            sent_at: Duration::from_millis(now_ms - rtt_ms),
            rtt: Duration::from_millis(rtt_ms),
            one_way_delay_us: 0,
            acked_bytes: MSS,
            bytes_in_flight: 19 * MSS,
            next_seq,
            delivery_rate: None,
            srtt: Duration::from_millis(rtt_ms),
        }
    }

    /// Puts a Vegas instance in congestion avoidance with BaseRTT = 100 ms and `cwnd`.
    fn in_avoidance(cwnd: f64) -> Vegas {
        let mut v = Vegas::new(MSS);
        v.on_ack(&ack(100, 0, 1, 100));
        v.round_min_rtt = None;
        v.slow_start = false;
        v.cwnd = cwnd;
        v
    }

    /// One full round whose minimum RTT is `rtt_ms`; returns the window afterwards.
    fn round(v: &mut Vegas, start_seq: u64, now_ms: u64, rtt_ms: u64) -> f64 {
        v.round_end_seq = start_seq;
        v.on_ack(&ack(now_ms, start_seq, start_seq + 20, rtt_ms));
        v.cwnd_packets()
    }

    #[test]
    fn grows_when_fewer_than_alpha_packets_queued() {
        // cwnd 20, RTT 105 vs base 100: diff = 20 * 5/105 = 0.95 < alpha = 2.
        let mut v = in_avoidance(20.0);
        assert_eq!(round(&mut v, 10, 1000, 105), 21.0);
    }

    #[test]
    fn holds_between_alpha_and_beta() {
        // diff = 20 * 15/115 = 2.6 packets: inside [2, 4].
        let mut v = in_avoidance(20.0);
        assert_eq!(round(&mut v, 10, 1000, 115), 20.0);
    }

    #[test]
    fn shrinks_when_more_than_beta_packets_queued() {
        // diff = 20 * 40/140 = 5.7 > beta = 4.
        let mut v = in_avoidance(20.0);
        assert_eq!(round(&mut v, 10, 1000, 140), 19.0);
    }

    #[test]
    fn converges_to_a_queue_between_alpha_and_beta() {
        // A fluid bottleneck of 100 packets/s and 100 ms base RTT: BDP = 10 packets, and a
        // window of w packets sees RTT = max(base, w / rate).
        let mut v = in_avoidance(4.0);
        let mut now = 1000;
        for r in 0..200u64 {
            let rtt_ms = ((v.cwnd_packets() / 100.0 * 1000.0) as u64).max(100);
            now += rtt_ms;
            round(&mut v, 10 + r * 20, now, rtt_ms);
        }
        let queued = v.cwnd_packets() - 10.0;
        assert!((2.0..=4.0 + 1.0).contains(&queued), "queue {queued} packets");
    }

    #[test]
    fn slow_start_grows_every_other_round_and_exits_on_gamma() {
        let mut v = Vegas::new(MSS);
        // Round 1 (growing): ten ACKs, no queue.
        for i in 0..10 {
            v.on_ack(&ack(100 + i, i, 10, 100));
        }
        let after_growth = v.cwnd_packets();
        assert!(after_growth >= 19.0, "slow start should double: {after_growth}");
        // Round 2 (holding): window unchanged.
        for i in 10..30 {
            v.on_ack(&ack(200 + i, i, 30, 100));
        }
        assert!(v.cwnd_packets() <= after_growth + 1.0);
        assert!(v.in_slow_start());
        // A round with a queue of several packets ends slow start.
        for i in 30..=51 {
            v.on_ack(&ack(400 + i, i, 51, 160));
        }
        assert!(!v.in_slow_start());
    }

    #[test]
    fn loss_halves_once_per_round_trip() {
        let mut v = in_avoidance(40.0);
        let loss = |now, sent| LossEvent {
            now: Duration::from_millis(now),
            seq: 0,
            sent_at: Duration::from_millis(sent),
            bytes: MSS,
            bytes_in_flight: 0,
        };
        v.on_loss(&loss(1000, 900));
        assert_eq!(v.cwnd_packets(), 20.0);
        // Same episode: a packet sent before the reduction.
        v.on_loss(&loss(1010, 950));
        assert_eq!(v.cwnd_packets(), 20.0);
        // New episode.
        v.on_loss(&loss(1200, 1100));
        assert_eq!(v.cwnd_packets(), 10.0);
    }
}
