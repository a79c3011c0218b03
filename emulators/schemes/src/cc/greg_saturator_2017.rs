//! Pantheon's 2017 `greg_saturator`: pantheon-stimuli `greg_capacity_stimulus`
//! (StanfordLPNG/pantheon-stimuli at `ebd9026`, the commit Pantheon's submodule pointed at from
//! 2017-01-06; `6d8cc6b`, pinned from 2017-01-25, only adds an `#include <utility>`).
//!
//! The law, as `greg_capacity_stimulus/controller.cc` (`Controller::ack_received`,
//! `window_is_open`, `timeout_ms`) and the shared `src/sender.cc` run it. All times are whole
//! milliseconds since the first send, as the upstream `timestamp_ms`.
//!
//! * Window `W` in datagrams, starting at 2, never below [`MIN_WINDOW`] = 2, **no upper
//!   bound**; datagrams leave back to back while the sender's own outstanding list is shorter
//!   than `W`.
//! * Loss: on every ACK, outstanding datagrams sent more than 20 ms (strictly, in whole ms)
//!   before the acknowledged one are given up, exactly as the 2017 `saturator`
//!   ([`super::saturator_2017`]). Each give-up feeds 1 into two loss EWMAs (short gain 0.05,
//!   long gain 0.001); the acknowledged datagram, if still outstanding, feeds 0 into both.
//!   An ACK of a datagram already given up feeds nothing.
//! * RTT: every ACK (also of a given-up datagram) gives rtt = arrival ms − send ms; min RTT
//!   starts at 1000 ms, the RTT EWMA at 100 ms with gain 0.05.
//! * Then, with `t` the ACK's arrival and `c` the time of the last window change (0 at start):
//!   if `c + 20 < t` and short < 0.1 and long < 0.05: W += 2 if EWMA < min + 20, else W += 1
//!   if EWMA < min + 100 (each sets `c = t`). Afterwards, if `c + 200 < t` (so only when the
//!   first step changed nothing): W −= 1 if short > 0.3 and long > 0.25; *and independently*
//!   (the upstream `} if (`, not `else if`) W += 1 if short < 0.5, long < 0.1 and EWMA <
//!   min + 500, or else W −= 1 if EWMA > min + 1000; each change sets `c = t`. Last W = max(W, 2).
//! * Timeout: when 1.5 s pass with no ACK and no send (the upstream `poll` timeout of
//!   `timeout_ms` = 1500), one datagram is sent whatever the window (it joins the outstanding
//!   list); then the 1.5 s start again.
//! * No handshake: the first two datagrams leave the moment the sender runs, as the shared
//!   sourdough sender's did (`starts_without_handshake`, as [`super::saturator_2017`]).
//! * 1436-byte datagrams (48-byte header + 1388-byte payload), no pacing, no retransmission
//!   timeout ([`super::saturator_2017::NO_TIMEOUT`] for the transport's own).
//!
//! Unlike upstream, an ACK arriving while nothing is outstanding (a late ACK of a datagram
//! already given up) is harmless here; the upstream reads `front()` of the empty deque
//! there, which is undefined behaviour.

use std::time::Duration;

use super::saturator_2017::{Outstanding, DATAGRAM_BYTES, NO_TIMEOUT, REORDER_MS};
use super::{AckEvent, Controller, LossEvent, LossRule};

pub const MIN_WINDOW: u64 = 2;
pub const SHORT_LOSS_GAIN: f64 = 0.05;
pub const LONG_LOSS_GAIN: f64 = 0.001;
pub const RTT_GAIN: f64 = 0.05;
pub const IDLE_TIMEOUT: Duration = Duration::from_millis(1500);
const INITIAL_RTT_EWMA_MS: f64 = 100.0;
const INITIAL_MIN_RTT_MS: u64 = 1000;
const SHORT_STEP_MS: u64 = 20;
const LONG_STEP_MS: u64 = 200;

#[derive(Clone, Debug)]
pub struct GregSaturator2017 {
    out: Outstanding,
    window: u64,
    last_change_ms: u64,
    rtt_ewma_ms: f64,
    min_rtt_ms: u64,
    short_loss: f64,
    long_loss: f64,
    /// Last ACK or send: the upstream poll's 1.5 s starts from there.
    last_event: Option<Duration>,
    /// The idle timeout fired and its datagram has not left yet.
    timeout_send: bool,
}

impl GregSaturator2017 {
    /// `mss` is ignored: the upstream program sends 1436-byte datagrams.
    pub fn new(_mss: u64) -> Self {
        Self {
            out: Outstanding::default(),
            window: MIN_WINDOW,
            last_change_ms: 0,
            rtt_ewma_ms: INITIAL_RTT_EWMA_MS,
            min_rtt_ms: INITIAL_MIN_RTT_MS,
            short_loss: 0.0,
            long_loss: 0.0,
            last_event: None,
            timeout_send: false,
        }
    }

    /// Current window in datagrams.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Datagrams the upstream sender would count as outstanding.
    pub fn outstanding(&self) -> u64 {
        self.out.len()
    }

    /// (short-term, long-term) loss EWMAs.
    pub fn loss_ewmas(&self) -> (f64, f64) {
        (self.short_loss, self.long_loss)
    }

    pub fn rtt_ewma_ms(&self) -> f64 {
        self.rtt_ewma_ms
    }

    fn loss_sample(&mut self, lost: f64) {
        self.short_loss = lost * SHORT_LOSS_GAIN + (1.0 - SHORT_LOSS_GAIN) * self.short_loss;
        self.long_loss = lost * LONG_LOSS_GAIN + (1.0 - LONG_LOSS_GAIN) * self.long_loss;
    }

    fn adjust_window(&mut self, now_ms: u64) {
        let (short, long, ewma) = (self.short_loss, self.long_loss, self.rtt_ewma_ms);
        let above_min = |ms: u64| (self.min_rtt_ms + ms) as f64;

        if self.last_change_ms + SHORT_STEP_MS < now_ms && short < 0.1 && long < 0.05 {
            if ewma < above_min(20) {
                self.window += 2;
                self.last_change_ms = now_ms;
            } else if ewma < above_min(100) {
                self.window += 1;
                self.last_change_ms = now_ms;
            }
        }

        if self.last_change_ms + LONG_STEP_MS < now_ms {
            if short > 0.3 && long > 0.25 {
                self.window = self.window.saturating_sub(1);
                self.last_change_ms = now_ms;
            }
            // Not an `else`: the upstream evaluates this whatever the test above did.
            if short < 0.5 && long < 0.1 {
                if ewma < above_min(500) {
                    self.window += 1;
                    self.last_change_ms = now_ms;
                }
            } else if ewma > above_min(1000) {
                self.window = self.window.saturating_sub(1);
                self.last_change_ms = now_ms;
            }
        }

        self.window = self.window.max(MIN_WINDOW);
    }
}

impl Controller for GregSaturator2017 {
    fn name(&self) -> &'static str {
        "greg_saturator-2017"
    }

    fn on_send(&mut self, now: Duration, seq: u64) {
        self.out.on_send(now, seq);
        self.last_event = Some(now);
        self.timeout_send = false;
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        self.last_event = Some(self.last_event.map_or(ack.now, |t| t.max(ack.now)));
        let sent_ms = self.out.ms(ack.sent_at);
        let now_ms = self.out.ms(ack.now);

        for _ in 0..self.out.give_up_older_than(sent_ms) {
            self.loss_sample(1.0);
        }
        if self.out.acknowledge(ack.seq) {
            self.loss_sample(0.0);
        }

        let rtt_ms = now_ms.saturating_sub(sent_ms);
        self.min_rtt_ms = self.min_rtt_ms.min(rtt_ms);
        self.rtt_ewma_ms = rtt_ms as f64 * RTT_GAIN + (1.0 - RTT_GAIN) * self.rtt_ewma_ms;

        self.adjust_window(now_ms);
        self.out.sync(ack.bytes_in_flight);
    }

    fn on_loss(&mut self, loss: &LossEvent) {
        // Losses that count are the controller's own give-ups (in `on_ack`).
        self.out.sync(loss.bytes_in_flight);
    }

    fn cwnd(&self) -> u64 {
        self.out.cwnd(self.window, u64::from(self.timeout_send))
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        f64::MAX
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(DATAGRAM_BYTES)
    }

    fn timer_deadline(&self) -> Option<Duration> {
        if self.timeout_send {
            return None;
        }
        self.last_event.map(|t| t + IDLE_TIMEOUT)
    }

    fn on_timer(&mut self, now: Duration) {
        self.timeout_send = true;
        self.last_event = Some(now);
    }

    fn loss_rule(&self) -> LossRule {
        LossRule::SentBefore(Duration::from_millis(REORDER_MS))
    }

    fn loss_timeout(&self) -> Option<Duration> {
        Some(NO_TIMEOUT)
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

    fn ack(seq: u64, sent: Duration, now: Duration) -> AckEvent {
        AckEvent {
            now,
            seq,
            sent_at: sent,
            rtt: now - sent,
            one_way_delay_us: 0,
            acked_bytes: DATAGRAM_BYTES,
            bytes_in_flight: 0,
            next_seq: 0,
            delivery_rate: None,
            srtt: now - sent,
        }
    }

    #[test]
    fn starts_with_two_datagrams_and_its_own_packet_size() {
        let g = GregSaturator2017::new(1500);
        assert_eq!(g.window(), 2);
        assert_eq!(g.cwnd(), 2 * DATAGRAM_BYTES);
        assert_eq!(g.payload_bytes(), Some(1436));
        assert_eq!(g.pacing_rate(ms(50)), f64::MAX);
        assert_eq!(g.timer_deadline(), None, "no timer before the first send");
    }

    #[test]
    fn grows_two_per_twenty_ms_near_min_rtt_then_one_then_one_per_two_hundred_ms() {
        let mut g = GregSaturator2017::new(1500);
        // Seed the RTT EWMA at the path's 50 ms.
        g.rtt_ewma_ms = 50.0;
        let mut seq = 0;
        let mut send_ack = |g: &mut GregSaturator2017, sent: u64, now: u64| {
            g.on_send(ms(sent), seq);
            g.on_ack(&ack(seq, ms(sent), ms(now)));
            seq += 1;
        };
        send_ack(&mut g, 0, 50);
        assert_eq!(g.window(), 4, "+2: EWMA {} below min + 20", g.rtt_ewma_ms());
        // Not more than 20 ms after the change: nothing.
        send_ack(&mut g, 20, 70);
        assert_eq!(g.window(), 4);
        send_ack(&mut g, 21, 71);
        assert_eq!(g.window(), 6);
        // An EWMA between min + 20 and min + 100: +1.
        g.rtt_ewma_ms = 120.0;
        send_ack(&mut g, 22, 92);
        assert_eq!(g.window(), 7);
        // Above min + 100 the 20 ms step stops; more than 200 ms after the last change the
        // long step adds one.
        g.rtt_ewma_ms = 300.0;
        send_ack(&mut g, 150, 200);
        assert_eq!(g.window(), 7);
        send_ack(&mut g, 242, 292);
        assert_eq!(g.window(), 7, "200 ms since the last change have not passed");
        send_ack(&mut g, 243, 293);
        assert_eq!(g.window(), 8);
        // Above min + 500 nothing grows it (and with no loss nothing shrinks it).
        g.rtt_ewma_ms = 700.0;
        send_ack(&mut g, 550, 600);
        assert_eq!(g.window(), 8);
    }

    #[test]
    fn give_ups_feed_the_loss_ewmas_and_stop_growth() {
        let mut g = GregSaturator2017::new(1500);
        for i in 0..10 {
            g.on_send(ms(i), i);
        }
        g.on_send(ms(40), 10);
        g.on_ack(&ack(10, ms(40), ms(250)));
        // Ten losses then one delivery.
        let mut short = 0.0;
        let mut long = 0.0;
        for _ in 0..10 {
            short = 0.05 + 0.95 * short;
            long = 0.001 + 0.999 * long;
        }
        short *= 0.95;
        long *= 0.999;
        let (s, l) = g.loss_ewmas();
        assert!((s - short).abs() < 1e-12 && (l - long).abs() < 1e-12, "{s} {l}");
        assert!(s > 0.1);
        assert_eq!(g.outstanding(), 0);
        // Short-term loss above 0.1 blocks the 20 ms step; long-term below 0.1 and an RTT EWMA
        // below min + 500 let the 200 ms step add one.
        assert_eq!(g.window(), 3);
        // A late ACK of a given-up datagram feeds no loss sample.
        g.on_ack(&ack(3, ms(3), ms(255)));
        assert_eq!(g.loss_ewmas(), (s, l));
    }

    #[test]
    fn heavy_loss_shrinks_the_window_through_both_long_step_branches() {
        let mut g = GregSaturator2017::new(1500);
        g.window = 10;
        g.short_loss = 0.9;
        g.long_loss = 0.9;
        g.rtt_ewma_ms = 2000.0;
        g.min_rtt_ms = 50;
        g.on_send(ms(0), 0);
        g.on_ack(&ack(0, ms(0), ms(300)));
        // short > 0.3 and long > 0.25: −1; and, independently, EWMA > min + 1000: −1.
        assert_eq!(g.window(), 8);
        // Never below two.
        g.window = 2;
        g.on_send(ms(400), 1);
        g.on_ack(&ack(1, ms(400), ms(600)));
        assert_eq!(g.window(), 2);
    }

    #[test]
    fn idle_timeout_sends_one_datagram_past_the_window() {
        let mut g = GregSaturator2017::new(1500);
        g.on_send(ms(0), 0);
        g.on_send(ms(0), 1);
        let mut in_flight = 2 * DATAGRAM_BYTES;
        assert!(in_flight >= g.cwnd(), "window of two is full");
        assert_eq!(g.timer_deadline(), Some(ms(1500)));
        g.on_timer(ms(1500));
        assert!(in_flight < g.cwnd(), "the timeout opens one slot");
        g.on_send(ms(1500), 2);
        in_flight += DATAGRAM_BYTES;
        assert!(in_flight >= g.cwnd(), "and only one");
        assert_eq!(g.timer_deadline(), Some(ms(3000)));
        // Its ACK gives the two older ones up and empties the list.
        g.on_ack(&ack(2, ms(1500), ms(1550)));
        assert_eq!(g.outstanding(), 0);
        assert_eq!(g.timer_deadline(), Some(ms(3050)));
    }

    #[test]
    fn keeps_the_link_busy_behind_a_tiny_droptail_queue() {
        // Heavy loss at a 2-packet queue: the loss EWMAs stop growth and the 200 ms step
        // shrinks the window, but ACKs keep coming and the link stays busy.
        let link = Link { rate_bits_per_s: 1e6, one_way_delay: ms(28), queue_packets: 2 };
        let o = run(Box::new(GregSaturator2017::new(1472)), &link, Duration::from_secs(20));
        eprintln!(
            "greg_saturator-2017 (1 Mbit/s, 2-packet queue): utilization {:.3}, drops {}",
            o.utilization(),
            o.dropped_packets
        );
        assert!(o.utilization() > 0.5, "utilization {}", o.utilization());
    }

    #[test]
    fn queue_keeps_growing_on_an_unbounded_link() {
        // Pantheon's 2017 known emulator: 10 Mbit/s, 28 ms each way, unbounded queue.
        let link = Link { rate_bits_per_s: 10e6, one_way_delay: ms(28), queue_packets: 1_000_000 };
        let o = run(Box::new(GregSaturator2017::new(1472)), &link, Duration::from_secs(30));
        // Median one-way delay of the packets arriving in second `at`.
        let delay_at = |at: u64| {
            let window = Duration::from_secs(at)..Duration::from_secs(at + 1);
            let mut v: Vec<f64> =
                o.delays.iter().filter(|(t, _)| window.contains(t)).map(|(_, d)| d.as_secs_f64() * 1e3).collect();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        let p95 = o.delay_percentile_ms(95.0, Duration::ZERO);
        eprintln!(
            "greg_saturator-2017: utilization {:.3}, delay at 2 s {:.1}, 5 s {:.1}, 15 s {:.1}, 29 s {:.1}, p95 {p95:.1} ms",
            o.utilization(),
            delay_at(2),
            delay_at(5),
            delay_at(15),
            delay_at(29)
        );
        assert!(o.utilization() > 0.95, "utilization {}", o.utilization());
        assert_eq!(o.dropped_packets, 0);
        // No cap: past min + 100 ms it still adds a datagram every ~200 ms, so the queue
        // keeps growing (Pantheon's 30 s run: p95 290 ms).
        assert!(delay_at(29) > delay_at(15) + 40.0);
        assert!(delay_at(15) > delay_at(5) + 40.0);
        assert!((230.0..=350.0).contains(&p95), "p95 {p95}");
    }
}
