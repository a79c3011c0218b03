//! Copa (Arun & Balakrishnan, NSDI 2018), default mode, over our UDP transport.
//!
//! Copa steers its sending rate towards a target that falls as queueing delay grows:
//! `target = 1 / (delta * dq)` packets per second, where `dq = RTTstanding - RTTmin` is
//! the queueing delay. With `delta = 0.5` (the paper's default) a lone flow settles with
//! about `1/delta = 2` packets of its own in the queue, whatever the link rate.
//!
//! * `RTTmin` is the minimum RTT over the last 10 s (long enough to see an empty queue,
//!   short enough to follow a route change); `RTTstanding` is the minimum over the last
//!   `srtt / 2`, which filters ACK and pacing jitter out of the current delay.
//! * The current rate is `cwnd / RTTstanding`. On every ACK the window moves by
//!   `v / (delta * cwnd)` packets, up if the current rate is at most the target and down
//!   otherwise: about `v / delta` packets per round trip.
//! * Velocity `v` starts at 1; once per round trip Copa compares the window with the one a
//!   round earlier, and once the direction has stayed the same for three rounds `v` doubles
//!   every round, so large corrections take logarithmically many RTTs. A change of
//!   direction resets `v` to 1.
//! * Start-up doubles the window every round trip until the current rate exceeds the
//!   target, then switches to the rule above.
//! * Packets are paced at `2 * cwnd / RTTstanding`, as in the paper.
//! * Loss is not a congestion signal in default mode, so `on_loss` does nothing.
//!
//! Not implemented: the competitive mode (switching delta by AIMD when the queue never
//! drains because of buffer-filling cross traffic). A single flow over an emulator has no
//! such competitor, and the default-mode probe is what the calibration needs. Pantheon's
//! `copa` ran genericCC with `delta_conf=do_ss:auto:0.1` (mode switching); say so when
//! comparing.

use std::time::Duration;

use super::{AckEvent, Controller, LossEvent, WindowedFilter};

pub const DEFAULT_DELTA: f64 = 0.5;
const RTT_MIN_WINDOW: Duration = Duration::from_secs(10);
const INITIAL_CWND_PACKETS: f64 = 10.0;
const MIN_CWND_PACKETS: f64 = 2.0;
/// Rounds in the same direction before the velocity starts doubling.
const ROUNDS_BEFORE_SPEEDUP: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Up,
    Down,
}

#[derive(Clone, Debug)]
pub struct Copa {
    mss: u64,
    delta: f64,
    cwnd: f64,
    velocity: f64,
    direction: Option<Direction>,
    same_direction_rounds: u32,
    slow_start: bool,
    round_end_seq: u64,
    round_start_cwnd: f64,
    rtt_min: WindowedFilter,
    rtt_standing: WindowedFilter,
    /// Latest filtered values, kept for pacing and inspection (seconds).
    last_rtt_min: Option<f64>,
    last_rtt_standing: Option<f64>,
}

impl Copa {
    pub fn new(mss: u64) -> Self {
        Self::with_delta(mss, DEFAULT_DELTA)
    }

    pub fn with_delta(mss: u64, delta: f64) -> Self {
        assert!(delta > 0.0, "Copa needs delta > 0");
        Self {
            mss,
            delta,
            cwnd: INITIAL_CWND_PACKETS,
            velocity: 1.0,
            direction: None,
            same_direction_rounds: 0,
            slow_start: true,
            round_end_seq: 0,
            round_start_cwnd: INITIAL_CWND_PACKETS,
            rtt_min: WindowedFilter::min(),
            rtt_standing: WindowedFilter::min(),
            last_rtt_min: None,
            last_rtt_standing: None,
        }
    }

    pub fn cwnd_packets(&self) -> f64 {
        self.cwnd
    }

    pub fn velocity(&self) -> f64 {
        self.velocity
    }

    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    /// Queueing delay `dq = RTTstanding - RTTmin` in seconds.
    pub fn queueing_delay(&self) -> Option<f64> {
        Some((self.last_rtt_standing? - self.last_rtt_min?).max(0.0))
    }

    /// Target rate `1 / (delta * dq)` in packets per second (infinite with no queue).
    pub fn target_rate(&self) -> Option<f64> {
        let dq = self.queueing_delay()?;
        Some(if dq <= 0.0 { f64::INFINITY } else { 1.0 / (self.delta * dq) })
    }

    /// Current rate `cwnd / RTTstanding` in packets per second.
    pub fn current_rate(&self) -> Option<f64> {
        Some(self.cwnd / self.last_rtt_standing?.max(1e-6))
    }

    fn end_round(&mut self, next_seq: u64) {
        let direction = if self.cwnd > self.round_start_cwnd { Direction::Up } else { Direction::Down };
        if !self.slow_start {
            if self.direction == Some(direction) {
                self.same_direction_rounds += 1;
                if self.same_direction_rounds >= ROUNDS_BEFORE_SPEEDUP {
                    self.velocity *= 2.0;
                }
            } else {
                self.velocity = 1.0;
                self.same_direction_rounds = 0;
            }
            self.direction = Some(direction);
        }
        self.round_end_seq = next_seq;
        self.round_start_cwnd = self.cwnd;
    }
}

impl Controller for Copa {
    fn name(&self) -> &'static str {
        "copa"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        let rtt = ack.rtt.as_secs_f64();
        self.rtt_min.update(ack.now, rtt);
        self.rtt_standing.update(ack.now, rtt);
        self.last_rtt_min = self.rtt_min.get(ack.now, RTT_MIN_WINDOW);
        self.last_rtt_standing = self.rtt_standing.get(ack.now, ack.srtt / 2);
        let (Some(target), Some(current)) = (self.target_rate(), self.current_rate()) else {
            return;
        };
        let acked_packets = ack.acked_bytes as f64 / self.mss as f64;
        let below_target = current <= target;
        if self.slow_start {
            if below_target {
                self.cwnd += acked_packets;
            } else {
                self.slow_start = false;
            }
        }
        if !self.slow_start {
            let step = self.velocity * acked_packets / (self.delta * self.cwnd);
            if below_target {
                self.cwnd += step;
            } else {
                self.cwnd = (self.cwnd - step).max(MIN_CWND_PACKETS);
            }
        }
        if ack.seq >= self.round_end_seq {
            self.end_round(ack.next_seq);
        }
    }

    fn on_loss(&mut self, _loss: &LossEvent) {}

    fn cwnd(&self) -> u64 {
        (self.cwnd * self.mss as f64) as u64
    }

    fn pacing_rate(&self, srtt: Duration) -> f64 {
        let standing = self.last_rtt_standing.unwrap_or(srtt.as_secs_f64()).max(1e-4);
        2.0 * self.cwnd() as f64 / standing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1000;

    fn ack_at(now: Duration, seq: u64, next_seq: u64, rtt: Duration) -> AckEvent {
        AckEvent {
            now,
            seq,
            sent_at: now - rtt,
            rtt,
            one_way_delay_us: 0,
            acked_bytes: MSS,
            bytes_in_flight: 0,
            next_seq,
            delivery_rate: None,
            srtt: rtt,
        }
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn target_rate_is_one_over_delta_dq() {
        let mut c = Copa::new(MSS);
        c.on_ack(&ack_at(ms(1000), 0, 1, ms(100)));
        // 200 ms later the standing RTT (min over srtt/2 = 55 ms) is 110 ms.
        c.on_ack(&ack_at(ms(1200), 1, 2, ms(110)));
        let dq = c.queueing_delay().unwrap();
        assert!((dq - 0.010).abs() < 1e-9, "dq {dq}");
        let target = c.target_rate().unwrap();
        assert!((target - 1.0 / (0.5 * 0.010)).abs() < 1e-6, "target {target}");
    }

    #[test]
    fn moves_towards_target_rate() {
        let mut c = Copa::new(MSS);
        c.slow_start = false;
        c.on_ack(&ack_at(ms(1000), 0, 100, ms(100)));
        // Target 200 packets/s at dq = 10 ms. cwnd 10 at 110 ms is 91 packets/s: grow.
        c.cwnd = 10.0;
        c.on_ack(&ack_at(ms(1200), 1, 100, ms(110)));
        assert!(c.cwnd_packets() > 10.0);
        // cwnd 40 at 110 ms is 364 packets/s, above target: shrink by v/(delta*cwnd).
        c.cwnd = 40.0;
        c.on_ack(&ack_at(ms(1300), 2, 100, ms(110)));
        assert!((c.cwnd_packets() - (40.0 - 1.0 / (0.5 * 40.0))).abs() < 1e-9);
    }

    #[test]
    fn velocity_doubles_after_three_rounds_in_one_direction_and_resets() {
        let mut c = Copa::new(MSS);
        c.slow_start = false;
        let mut now = ms(1000);
        let mut seq = 0;
        // No queue: the target is infinite, so every ACK grows the window.
        let mut velocities = Vec::new();
        for _round in 0..6 {
            for _ in 0..10 {
                c.on_ack(&ack_at(now, seq, seq + 10, ms(100)));
                seq += 1;
                now += ms(10);
            }
            velocities.push(c.velocity());
        }
        assert_eq!(&velocities[..3], &[1.0, 1.0, 1.0]);
        assert!(velocities[5] > velocities[4] && velocities[4] > 1.0, "{velocities:?}");
        // A deep queue reverses the direction: velocity back to 1.
        // (The standing RTT forgets the 100 ms samples after srtt/2 = 200 ms, 20 ACKs.)
        for _ in 0..40 {
            c.on_ack(&ack_at(now, seq, seq + 10, ms(400)));
            seq += 1;
            now += ms(10);
        }
        assert_eq!(c.velocity(), 1.0);
    }

    #[test]
    fn slow_start_ends_when_rate_exceeds_target() {
        let mut c = Copa::new(MSS);
        for i in 0..10 {
            c.on_ack(&ack_at(ms(1000 + i), i, 10, ms(100)));
        }
        assert!(c.in_slow_start());
        assert!(c.cwnd_packets() >= 19.0);
        // 50 ms of queueing: target 40 packets/s, far below 20 packets per 150 ms.
        for i in 10..20 {
            c.on_ack(&ack_at(ms(1200 + i * 10), i, 20, ms(150)));
        }
        assert!(!c.in_slow_start());
    }

    #[test]
    fn loss_is_not_a_signal_in_default_mode() {
        let mut c = Copa::new(MSS);
        let before = c.cwnd();
        c.on_loss(&LossEvent { now: ms(5), seq: 1, sent_at: ms(1), bytes: MSS, bytes_in_flight: 0 });
        assert_eq!(c.cwnd(), before);
    }
}
