//! koho_cc as Pantheon ran it in 2017: the datagrump sender of greghill/koho_cc at commit
//! `f0f2e69` (`datagrump/controller.cc`, `datagrump/sender.cc`), with Pantheon's
//! `src/koho_cc_mtu.patch` (StanfordSNR/pantheon `97c91c4`) that cuts the dummy payload from
//! 1424 to 1388 bytes.
//!
//! The law (`Controller::ack_received`), evaluated on every ACK, with every timestamp in
//! whole milliseconds as the upstream's `timestamp_ms` gives them:
//!
//! * `skewed_owt = recv_ts - send_ts` (receiver clock minus sender clock, offset unknown)
//!   and `rtt = ack_arrival - send_ts`; both keep their flow minimum (from the first sample;
//!   upstream starts them at 99999 ms, which any real sample undercuts).
//! * `est_owt = (skewed_owt - min skewed_owt) + min_rtt / 2`: the queueing delay above
//!   the lowest one-way delay, on top of half the lowest RTT.
//! * If `est_owt > 1.45 · min_rtt / 2` the window shrinks by 0.25 packets, otherwise it
//!   grows by 0.25 packets, then it is clamped to [2, 100] packets. It starts at 16.
//!   In other words it backs off once the queue holds more than 0.225 · min RTT of delay,
//!   and moves up to a quarter of itself per round trip either way.
//!
//! Sending (`DatagrumpSender::window_is_open`, `loop`): the window, truncated to whole
//! datagrams, bounds the packets sent after the highest sequence number acknowledged so
//! far (a packet below it counts as gone, whether it arrived or not). No pacing: the
//! window is refilled back to back whenever an ACK opens it. Loss is no signal and no
//! packet is resent. When 50 ms pass with no ACK and no send (`timeout_ms`, the poll
//! timeout of the send loop), one extra datagram goes out regardless of the window; the
//! 50 ms then restart.
//!
//! Packet: a 48-byte header (six 64-bit fields) plus the 1388-byte dummy payload, 1436
//! bytes of UDP payload. The receiver (`datagrump/receiver.cc`) acknowledges every
//! datagram at once with its send timestamp and its own receive timestamp, as this
//! project's UDP receiver does.
//!
//! Mapping onto the transport: the in-flight count above is reproduced with the loss rule
//! `Reorder(1)` (every unacknowledged packet below the highest one acknowledged leaves the
//! flight) and a loss timeout long enough never to fire, so that only ACKs and the 50 ms
//! datagram move the window, as upstream. The extra datagram is a one-packet allowance
//! above the packets in flight, granted by the timer and used by the next send. The upstream
//! sender has no handshake, so neither has the port (`starts_without_handshake`): its first
//! 16 datagrams leave the moment it runs and meet the bottleneck's delivery schedule at the
//! phase the start gives them. That phase decides the minimum skewed one-way delay, and
//! with it whether the law settles at its floor on a slow link; after a handshake the first
//! datagram was clocked by the reply and always met the schedule like later ones.

use std::time::Duration;

use super::{AckEvent, Controller, LossEvent, LossRule};

/// UDP payload of one datagram: the six-field header plus Pantheon's 1388-byte payload.
pub const PAYLOAD_BYTES: u64 = 48 + 1388;
pub const INITIAL_WINDOW: f64 = 16.0;
pub const MIN_WINDOW: f64 = 2.0;
pub const MAX_WINDOW: f64 = 100.0;
/// Window change per ACK, in packets.
pub const STEP: f64 = 0.25;
/// The estimated one-way delay may exceed the estimated lowest one by this factor.
pub const DELAY_FACTOR: f64 = 1.45;
/// Silence after which one datagram is sent regardless of the window.
pub const IDLE_TIMEOUT: Duration = Duration::from_millis(50);
/// Upstream never times a packet out; this only keeps the transport's deadline finite.
const NO_LOSS_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// No pacing: a rate no link reaches, so the window alone gates sending.
const UNPACED_BYTES_PER_S: f64 = 1e15;

/// Whole milliseconds of a microsecond clock reading (floor, also below zero).
fn floor_ms(us: i64) -> i64 {
    us.div_euclid(1000)
}

#[derive(Clone, Debug)]
pub struct KohoCc2017 {
    /// Window in datagrams, fractional; the sender uses its integer part.
    window: f64,
    /// Lowest receiver-minus-sender timestamp difference seen, ms.
    min_skewed_owt_ms: Option<i64>,
    /// Lowest RTT seen, ms.
    min_rtt_ms: Option<i64>,
    /// Sequence number of the next datagram to send.
    next_seq: u64,
    /// One above the highest sequence number acknowledged.
    next_ack_expected: u64,
    /// Last ACK, send or timeout: the idle timer runs from here.
    last_activity: Option<Duration>,
    /// The idle timer fired and its datagram has not gone out yet.
    timeout_send_pending: bool,
}

impl KohoCc2017 {
    /// `mss` is ignored: the upstream sends its own fixed datagram size ([`PAYLOAD_BYTES`]).
    pub fn new(_mss: u64) -> Self {
        Self {
            window: INITIAL_WINDOW,
            min_skewed_owt_ms: None,
            min_rtt_ms: None,
            next_seq: 0,
            next_ack_expected: 0,
            last_activity: None,
            timeout_send_pending: false,
        }
    }

    /// The fractional window, in datagrams.
    pub fn window(&self) -> f64 {
        self.window
    }

    /// Datagrams sent after the highest one acknowledged.
    pub fn in_flight(&self) -> u64 {
        self.next_seq.saturating_sub(self.next_ack_expected)
    }

    /// Datagrams the send loop may keep in flight now.
    fn allowed_packets(&self) -> u64 {
        let window = self.window as u64;
        if self.timeout_send_pending {
            window.max(self.in_flight() + 1)
        } else {
            window
        }
    }
}

impl Controller for KohoCc2017 {
    fn name(&self) -> &'static str {
        "koho_cc-2017"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        self.next_ack_expected = self.next_ack_expected.max(ack.seq + 1);
        self.last_activity = Some(ack.now);

        // Each clock read in whole ms, as upstream's timestamps are, before differencing.
        let sent_us = ack.sent_at.as_micros() as i64;
        let received_us = sent_us + ack.one_way_delay_us;
        let skewed_owt = floor_ms(received_us) - floor_ms(sent_us);
        let rtt = floor_ms(ack.now.as_micros() as i64) - floor_ms(sent_us);
        let min_owt = *self.min_skewed_owt_ms.insert(self.min_skewed_owt_ms.map_or(skewed_owt, |m| m.min(skewed_owt)));
        let min_rtt = *self.min_rtt_ms.insert(self.min_rtt_ms.map_or(rtt, |m| m.min(rtt)));

        let est_lowest_owt = min_rtt as f64 / 2.0;
        let est_owt = (skewed_owt - min_owt) as f64 + est_lowest_owt;
        if est_owt > DELAY_FACTOR * est_lowest_owt {
            self.window -= STEP;
        } else {
            self.window += STEP;
        }
        self.window = self.window.clamp(MIN_WINDOW, MAX_WINDOW);
    }

    fn on_loss(&mut self, _loss: &LossEvent) {}

    fn on_send(&mut self, now: Duration, seq: u64) {
        self.next_seq = self.next_seq.max(seq + 1);
        self.last_activity = Some(now);
        self.timeout_send_pending = false;
    }

    fn cwnd(&self) -> u64 {
        self.allowed_packets() * PAYLOAD_BYTES
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        UNPACED_BYTES_PER_S
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(PAYLOAD_BYTES)
    }

    fn timer_deadline(&self) -> Option<Duration> {
        self.last_activity.map(|t| t + IDLE_TIMEOUT)
    }

    fn on_timer(&mut self, now: Duration) {
        self.timeout_send_pending = true;
        // The timer restarts whether or not the datagram can leave at once.
        self.last_activity = Some(now);
    }

    fn loss_rule(&self) -> LossRule {
        LossRule::Reorder(1)
    }

    fn loss_timeout(&self) -> Option<Duration> {
        Some(NO_LOSS_TIMEOUT)
    }

    fn starts_without_handshake(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{run, Link};

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// An ACK for `seq`, sent at `sent_ms`, arriving `rtt_ms` later, whose one-way delay
    /// reads `owt_ms` on the unsynchronised clocks (here: receiver clock 1000 ms ahead).
    fn ack(seq: u64, sent_ms: u64, rtt_ms: u64, owt_ms: u64) -> AckEvent {
        AckEvent {
            now: ms(sent_ms + rtt_ms),
            seq,
            sent_at: ms(sent_ms),
            rtt: ms(rtt_ms),
            one_way_delay_us: (1000 + owt_ms as i64) * 1000,
            acked_bytes: PAYLOAD_BYTES,
            bytes_in_flight: 0,
            next_seq: seq + 1,
            delivery_rate: None,
            srtt: ms(rtt_ms),
        }
    }

    fn send(k: &mut KohoCc2017, now_ms: u64, count: u64) {
        for _ in 0..count {
            let seq = k.next_seq;
            k.on_send(ms(now_ms), seq);
        }
    }

    #[test]
    fn starts_at_sixteen_unpaced_with_pantheons_datagram() {
        let k = KohoCc2017::new(1472);
        assert_eq!(k.cwnd(), 16 * 1436);
        assert_eq!(k.payload_bytes(), Some(1436));
        assert!(k.pacing_rate(ms(50)) >= 1e12);
        assert_eq!(k.timer_deadline(), None, "no timer before the first send");
        assert_eq!(k.loss_rule(), LossRule::Reorder(1));
    }

    #[test]
    fn grows_a_quarter_per_ack_below_the_threshold_and_shrinks_above() {
        // min RTT 40 ms: est lowest owt 20 ms, threshold 29 ms, i.e. 9 ms of queueing.
        let mut k = KohoCc2017::new(1472);
        k.on_ack(&ack(0, 0, 40, 20));
        assert_eq!(k.window(), 16.25);
        // 9 ms above the minimum: 29 ms is not above 29 ms.
        k.on_ack(&ack(1, 1, 49, 29));
        assert_eq!(k.window(), 16.5);
        // 10 ms above it: back off.
        k.on_ack(&ack(2, 2, 50, 30));
        assert_eq!(k.window(), 16.25);
        // The fractional window sends whole datagrams only.
        assert_eq!(k.cwnd(), 16 * PAYLOAD_BYTES);
        for i in 0..3 {
            k.on_ack(&ack(3 + i, 3 + i, 60, 40));
        }
        assert_eq!(k.window(), 15.5);
        assert_eq!(k.cwnd(), 15 * PAYLOAD_BYTES);
    }

    #[test]
    fn the_delay_that_counts_is_one_way_and_relative_to_its_minimum() {
        // A slow ACK path inflates the RTT but not the forward one-way delay: no back-off.
        let mut k = KohoCc2017::new(1472);
        k.on_ack(&ack(0, 0, 40, 20));
        for i in 1..=4 {
            k.on_ack(&ack(i, i, 90, 20));
        }
        assert_eq!(k.window(), 17.25);
        // A negative clock offset changes nothing: only differences to the minimum count.
        let mut k = KohoCc2017::new(1472);
        let mut a = ack(0, 0, 40, 20);
        a.one_way_delay_us = -5_000_000;
        k.on_ack(&a);
        let mut b = ack(1, 1, 60, 40);
        b.one_way_delay_us = -5_000_000 + 20_000;
        k.on_ack(&b);
        assert_eq!(k.window(), 16.0);
    }

    #[test]
    fn window_stays_within_two_and_one_hundred() {
        let mut k = KohoCc2017::new(1472);
        k.on_ack(&ack(0, 0, 40, 20));
        for i in 1..1000 {
            k.on_ack(&ack(i, i, 40, 20));
        }
        assert_eq!(k.window(), MAX_WINDOW);
        for i in 1000..2000 {
            k.on_ack(&ack(i, i, 200, 180));
        }
        assert_eq!(k.window(), MIN_WINDOW);
        assert_eq!(k.cwnd(), 2 * PAYLOAD_BYTES);
    }

    #[test]
    fn packets_below_the_highest_ack_leave_the_flight() {
        let mut k = KohoCc2017::new(1472);
        send(&mut k, 0, 16);
        assert_eq!(k.in_flight(), 16);
        // Packet 9 is acknowledged, 0..=8 never are: only 10..=15 are still in flight.
        k.on_ack(&ack(9, 0, 40, 20));
        assert_eq!(k.in_flight(), 6);
        // A late ACK of an older packet changes the window but not the flight.
        k.on_ack(&ack(3, 0, 45, 20));
        assert_eq!(k.in_flight(), 6);
        assert_eq!(k.window(), 16.5);
    }

    #[test]
    fn fifty_ms_of_silence_release_one_datagram_beyond_the_window() {
        let mut k = KohoCc2017::new(1472);
        send(&mut k, 0, 16);
        assert_eq!(k.timer_deadline(), Some(ms(50)));
        assert_eq!(k.cwnd(), 16 * PAYLOAD_BYTES, "full window");
        k.on_timer(ms(50));
        assert_eq!(k.cwnd(), 17 * PAYLOAD_BYTES, "one more datagram may go");
        send(&mut k, 50, 1);
        assert_eq!(k.in_flight(), 17);
        assert_eq!(k.cwnd(), 16 * PAYLOAD_BYTES, "and only one");
        assert_eq!(k.timer_deadline(), Some(ms(100)));
        // Any ACK restarts the 50 ms.
        k.on_ack(&ack(0, 0, 70, 35));
        assert_eq!(k.timer_deadline(), Some(ms(120)));
    }

    #[test]
    fn a_timer_whose_datagram_cannot_leave_does_not_spin() {
        let mut k = KohoCc2017::new(1472);
        send(&mut k, 0, 16);
        k.on_timer(ms(50));
        assert_eq!(k.timer_deadline(), Some(ms(100)));
    }

    fn unbounded_10mbps_28ms() -> Link {
        Link { rate_bits_per_s: 10e6, one_way_delay: ms(28), queue_packets: 100_000 }
    }

    #[test]
    fn keeps_a_short_queue_at_high_utilization_on_pantheons_known_emulator() {
        // Pantheon's 2017 koho_cc over mm-delay 28 + 10 Mbit/s, unbounded: 9.10 Mbit/s,
        // p95 one-way delay 58.6 ms. The law backs off above ~0.225 · 57 ms ≈ 13 ms of
        // queueing, and a quarter-packet per ACK moves the window up to a quarter per RTT,
        // so the queue swings around that level and never grows without bound.
        let o = run(Box::new(KohoCc2017::new(1472)), &unbounded_10mbps_28ms(), Duration::from_secs(30));
        let p50 = o.delay_percentile_ms(50.0, Duration::from_secs(5));
        let p95 = o.delay_percentile_ms(95.0, Duration::ZERO);
        eprintln!("koho_cc-2017: utilization {:.3}, p50 {p50:.1} ms, p95 {p95:.1} ms", o.utilization());
        assert!(o.utilization() >= 0.85, "utilization {}", o.utilization());
        assert_eq!(o.dropped_packets, 0);
        // 28 ms propagation + 1.2 ms transmission: the queue stays in the tens of ms.
        assert!((30.0..=60.0).contains(&p50), "median one-way delay {p50} ms");
        assert!((35.0..=75.0).contains(&p95), "p95 one-way delay {p95} ms");
    }

    #[test]
    fn the_hundred_packet_cap_bounds_throughput_on_a_long_path() {
        // 150 ms each way: 100 datagrams of 1464 IP bytes per 300 ms is 3.9 Mbit/s, far
        // below the 50 Mbit/s link, and the queue stays empty.
        let link = Link { rate_bits_per_s: 50e6, one_way_delay: ms(150), queue_packets: 100_000 };
        let o = run(Box::new(KohoCc2017::new(1472)), &link, Duration::from_secs(20));
        let mbps = o.utilization() * 50.0;
        let p95 = o.delay_percentile_ms(95.0, Duration::from_secs(5));
        eprintln!("koho_cc-2017 long path: {mbps:.2} Mbit/s, p95 {p95:.1} ms");
        assert!((3.3..=4.0).contains(&mbps), "throughput {mbps} Mbit/s");
        assert!(p95 < 155.0, "p95 {p95} ms");
    }

    #[test]
    fn loss_is_no_signal() {
        // A two-packet DropTail queue holds less delay than the threshold, so the window
        // climbs to its cap and the bursts overflow the queue; the flow carries on at
        // full rate, losses only leave the flight.
        let link = Link { rate_bits_per_s: 2e6, one_way_delay: ms(20), queue_packets: 2 };
        let o = run(Box::new(KohoCc2017::new(1472)), &link, Duration::from_secs(20));
        let drop_share = o.dropped_packets as f64 / (o.dropped_packets + o.delivered_packets) as f64;
        eprintln!("koho_cc-2017 two-packet queue: utilization {:.3}, drops {:.2}", o.utilization(), drop_share);
        assert!(o.utilization() >= 0.95, "utilization {}", o.utilization());
        assert!(drop_share > 0.5, "drop share {drop_share}");
    }
}
