//! Pantheon's 2017 `saturator`: pantheon-stimuli `capacity_stimulus` (StanfordLPNG/pantheon-stimuli
//! at `ebd9026`, the commit Pantheon's submodule pointed at from 2017-01-06; `6d8cc6b`, pinned
//! from 2017-01-25, only adds an `#include` to the other program, and the program here is
//! the same since `0384984`).
//!
//! The law, as `capacity_stimulus/controller.cc` (`Controller::ack_received`,
//! `window_is_open`, `payload_size`, `timeout_ms`) and the shared `src/sender.cc` run it:
//!
//! * The sender keeps its own list of outstanding datagrams (sent, neither acknowledged nor
//!   given up) and sends, back to back with no pacing, while that list is shorter than the
//!   window. The window, in datagrams, starts at [`MIN_WINDOW`] = 20 and stays within
//!   [`MIN_WINDOW`, `MAX_WINDOW`] = [20, 200].
//! * On every ACK, first every outstanding datagram whose send time plus [`REORDER_MS`] = 20 ms
//!   is *strictly* below the send time of the acknowledged datagram is given up, each taking
//!   one off the window (not below 20); then, if the acknowledged datagram is still
//!   outstanding, it leaves the list and the window grows by one (not above 200). An ACK of a
//!   datagram already given up changes nothing. Times are whole milliseconds since the first
//!   send (the upstream `timestamp_ms`), so the 20 ms rule compares floored millisecond stamps.
//! * No timer and no idle timeout (`timer_period` 0, `timeout_ms` -1): if every outstanding
//!   datagram were lost the upstream sender would wait for ever, and so does this port (the
//!   transport's own loss timeout is set out of reach, [`NO_TIMEOUT`]).
//! * No handshake: the shared sourdough sender (`src/sender.cc`, the datagrump contest's) sends
//!   its first window the moment it runs, to a receiver that answers whatever arrives; so does
//!   the port (`starts_without_handshake`), and its first 20 datagrams meet the bottleneck at
//!   the phase the start gives them.
//! * Datagrams carry a 48-byte header (six 64-bit fields) and a 1388-byte payload: 1436 bytes
//!   of UDP payload ([`DATAGRAM_BYTES`]). The upstream receiver answers every datagram at once
//!   with a 48-byte ACK echoing the sequence number and send time; ours acks every packet
//!   too (50 bytes, with a bitmap the upstream did not have, see below).
//!
//! Differences that remain: our transport handles every ACK queued on the socket before it
//! sends again (upstream: one ACK, then refill), and an ACK arriving while nothing is
//! outstanding is harmless here (upstream reads `front()` of the empty list: undefined).
//!
//! The window is gated on the controller's own list, not on the transport's count: the
//! transport declares loss by `LossRule::SentBefore(20 ms)` on microsecond stamps and credits
//! packets whose own ACK was lost through the receiver's bitmap, so it can settle a packet a
//! moment earlier than the upstream sender would. `Outstanding::cwnd` converts the upstream
//! test "list shorter than the window" into the transport's bytes-in-flight terms, so the
//! sending decisions are the upstream's.

use std::collections::VecDeque;
use std::time::Duration;

use super::{AckEvent, Controller, LossEvent, LossRule};

/// UDP payload of one upstream datagram: a 48-byte header and a 1388-byte payload.
pub const DATAGRAM_BYTES: u64 = 48 + 1388;
/// A datagram sent more than this many ms before an acknowledged one is given up.
pub const REORDER_MS: u64 = 20;
pub const MIN_WINDOW: u64 = 20;
pub const MAX_WINDOW: u64 = 200;
/// The upstream programs have no retransmission timeout: the transport's loss timeout is
/// set beyond any run.
pub const NO_TIMEOUT: Duration = Duration::from_secs(86_400);

/// The pantheon-stimuli sender's own record of outstanding datagrams, shared by both 2017
/// saturators, and the bridge from its window test to the transport's byte window.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outstanding {
    /// Microsecond clock of the first send: the upstream millisecond clock starts there.
    epoch_us: Option<u64>,
    /// (sequence number, send time in whole ms), in send order.
    list: VecDeque<(u64, u64)>,
    /// Bytes the transport counts in flight, as of its latest event.
    transport_in_flight: u64,
}

impl Outstanding {
    /// Whole milliseconds since the first send.
    pub(crate) fn ms(&self, t: Duration) -> u64 {
        let us = t.as_micros() as u64;
        us.saturating_sub(self.epoch_us.unwrap_or(us)) / 1000
    }

    pub(crate) fn len(&self) -> u64 {
        self.list.len() as u64
    }

    pub(crate) fn on_send(&mut self, now: Duration, seq: u64) {
        self.epoch_us.get_or_insert(now.as_micros() as u64);
        let sent_ms = self.ms(now);
        self.list.push_back((seq, sent_ms));
        self.transport_in_flight += DATAGRAM_BYTES;
    }

    /// Gives up every datagram sent more than [`REORDER_MS`] before `acked_sent_ms`, oldest
    /// first; returns how many.
    pub(crate) fn give_up_older_than(&mut self, acked_sent_ms: u64) -> u64 {
        let mut n = 0;
        while self.list.front().is_some_and(|&(_, sent)| sent + REORDER_MS < acked_sent_ms) {
            self.list.pop_front();
            n += 1;
        }
        n
    }

    /// Removes `seq` if it is still outstanding; false for an ACK of a datagram already
    /// given up (or acknowledged).
    pub(crate) fn acknowledge(&mut self, seq: u64) -> bool {
        match self.list.binary_search_by_key(&seq, |&(s, _)| s) {
            Ok(i) => {
                self.list.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// The transport's bytes in flight after an ACK or a loss it reported.
    pub(crate) fn sync(&mut self, transport_bytes_in_flight: u64) {
        self.transport_in_flight = transport_bytes_in_flight;
    }

    /// Byte window for the transport that lets it send exactly while the upstream test
    /// `outstanding < window` holds, plus `extra` datagrams beyond it.
    pub(crate) fn cwnd(&self, window: u64, extra: u64) -> u64 {
        self.transport_in_flight + (window.saturating_sub(self.len()) + extra) * DATAGRAM_BYTES
    }
}

#[derive(Clone, Debug)]
pub struct Saturator2017 {
    window: u64,
    out: Outstanding,
}

impl Saturator2017 {
    /// `mss` is ignored: the upstream program sends 1436-byte datagrams.
    pub fn new(_mss: u64) -> Self {
        Self { window: MIN_WINDOW, out: Outstanding::default() }
    }

    /// Current window in datagrams.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Datagrams the upstream sender would count as outstanding.
    pub fn outstanding(&self) -> u64 {
        self.out.len()
    }
}

impl Controller for Saturator2017 {
    fn name(&self) -> &'static str {
        "saturator-2017"
    }

    fn on_send(&mut self, now: Duration, seq: u64) {
        self.out.on_send(now, seq);
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        let acked_sent_ms = self.out.ms(ack.sent_at);
        let given_up = self.out.give_up_older_than(acked_sent_ms);
        self.window = self.window.saturating_sub(given_up).max(MIN_WINDOW);
        if self.out.acknowledge(ack.seq) {
            self.window = (self.window + 1).min(MAX_WINDOW);
        }
        self.out.sync(ack.bytes_in_flight);
    }

    fn on_loss(&mut self, loss: &LossEvent) {
        // The window reacts to the controller's own give-ups (in `on_ack`); the transport's
        // verdict only moves its byte count.
        self.out.sync(loss.bytes_in_flight);
    }

    fn cwnd(&self) -> u64 {
        self.out.cwnd(self.window, 0)
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        // Window-only: datagrams leave back to back as the window opens.
        f64::MAX
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(DATAGRAM_BYTES)
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

    /// An ACK as the transport reports it; `in_flight` is the transport's byte count.
    fn ack(seq: u64, sent: Duration, now: Duration, in_flight: u64) -> AckEvent {
        AckEvent {
            now,
            seq,
            sent_at: sent,
            rtt: now - sent,
            one_way_delay_us: 0,
            acked_bytes: DATAGRAM_BYTES,
            bytes_in_flight: in_flight,
            next_seq: 0,
            delivery_rate: None,
            srtt: now - sent,
        }
    }

    /// Sends while the transport would (its test is `in_flight >= cwnd`), all at `now`;
    /// records each send time in `sent` (indexed by sequence number).
    fn fill(s: &mut Saturator2017, now: Duration, sent: &mut Vec<Duration>, in_flight: &mut u64) -> u64 {
        let mut n = 0;
        while *in_flight < s.cwnd() {
            s.on_send(now, sent.len() as u64);
            sent.push(now);
            *in_flight += DATAGRAM_BYTES;
            n += 1;
        }
        n
    }

    #[test]
    fn starts_at_twenty_and_grows_by_one_per_ack_up_to_two_hundred() {
        let mut s = Saturator2017::new(1500);
        let (mut sent, mut fl) = (Vec::new(), 0);
        assert_eq!(fill(&mut s, ms(0), &mut sent, &mut fl), 20, "first burst is the initial window");
        assert_eq!(s.payload_bytes(), Some(1436));
        assert_eq!(s.timer_deadline(), None);
        // Acknowledge everything in order, one ACK per 0.2 ms, refilling after each ACK (the
        // first 20 go out together, so no ACK ever reports a packet sent 20 ms later).
        let mut t = Duration::from_millis(50);
        for next_ack in 0..1000 {
            fl -= DATAGRAM_BYTES;
            let grows = s.window() < MAX_WINDOW;
            s.on_ack(&ack(next_ack, sent[next_ack as usize], t, fl));
            // One ACK frees one slot and adds one: two datagrams go out, until the cap.
            let n = fill(&mut s, t, &mut sent, &mut fl);
            assert_eq!(n, if grows { 2 } else { 1 }, "ack {next_ack}");
            t += Duration::from_micros(200);
        }
        assert_eq!(s.window(), MAX_WINDOW);
        assert_eq!(s.outstanding(), MAX_WINDOW);
        assert_eq!(fl, MAX_WINDOW * DATAGRAM_BYTES);
    }

    #[test]
    fn older_unacked_datagrams_are_given_up_after_twenty_ms_strictly() {
        let mut s = Saturator2017::new(1500);
        // 0 at 0 ms, 1 at 10 ms, 2 at 20 ms, 3 at 21 ms (.5 ms into the ms), 4 at 30 ms.
        for (seq, t) in [(0, 0u64), (1, 10_000), (2, 20_000), (3, 21_500), (4, 30_000)] {
            s.on_send(Duration::from_micros(t), seq);
        }
        s.window = 30;
        // 2 was sent 20 ms after 0: not enough (the upstream test is `sent + 20 < acked`).
        s.on_ack(&ack(2, ms(20), ms(80), 0));
        assert_eq!((s.outstanding(), s.window()), (4, 31));
        // 3 (21 ms) gives 0 up, not 1; then 3 itself is acknowledged.
        s.on_ack(&ack(3, Duration::from_micros(21_500), ms(81), 0));
        assert_eq!((s.outstanding(), s.window()), (2, 31));
        // A late ACK of 0, already given up, changes nothing.
        s.on_ack(&ack(0, ms(0), ms(82), 0));
        assert_eq!((s.outstanding(), s.window()), (2, 31));
    }

    #[test]
    fn losses_count_before_the_ack_at_the_bounds() {
        // At the cap, a give-up and an ACK in one event leave the window at the cap.
        let mut s = Saturator2017::new(1500);
        s.on_send(ms(0), 0);
        s.on_send(ms(30), 1);
        s.window = MAX_WINDOW;
        s.on_ack(&ack(1, ms(30), ms(90), 0));
        assert_eq!(s.window(), MAX_WINDOW);
        // At the floor, the same event grows the window by one.
        let mut s = Saturator2017::new(1500);
        s.on_send(ms(0), 0);
        s.on_send(ms(30), 1);
        s.on_ack(&ack(1, ms(30), ms(90), 0));
        assert_eq!(s.window(), MIN_WINDOW + 1);
        // Many give-ups never take it below the floor.
        let mut s = Saturator2017::new(1500);
        for i in 0..50 {
            s.on_send(ms(i), i);
        }
        s.on_send(ms(100), 50);
        s.window = 40;
        s.on_ack(&ack(50, ms(100), ms(160), 0));
        assert_eq!(s.window(), MIN_WINDOW + 1);
    }

    #[test]
    fn gating_follows_its_own_list_not_the_transport_count() {
        let mut s = Saturator2017::new(1500);
        let (mut sent, mut fl) = (Vec::new(), 0);
        fill(&mut s, ms(0), &mut sent, &mut fl);
        // The transport settles two packets early (its rule on µs stamps): the byte window
        // moves with it, so no extra datagram goes out.
        fl -= 2 * DATAGRAM_BYTES;
        s.on_loss(&LossEvent { now: ms(60), seq: 0, sent_at: ms(0), bytes: DATAGRAM_BYTES, bytes_in_flight: fl });
        assert!(fl >= s.cwnd(), "window still closed: {fl} < {}", s.cwnd());
    }

    /// Pantheon's 2017 known emulator: 10 Mbit/s, 28 ms each way, unbounded queue.
    fn pantheon_emulator() -> Link {
        Link { rate_bits_per_s: 10e6, one_way_delay: ms(28), queue_packets: 1_000_000 }
    }

    #[test]
    fn keeps_two_hundred_datagrams_in_flight_on_an_unbounded_queue() {
        let o = run(Box::new(Saturator2017::new(1472)), &pantheon_emulator(), Duration::from_secs(20));
        let p95 = o.delay_percentile_ms(95.0, Duration::ZERO);
        let p50 = o.delay_percentile_ms(50.0, Duration::from_secs(5));
        eprintln!("saturator-2017: utilization {:.3}, p50 {p50:.1} ms, p95 {p95:.1} ms", o.utilization());
        assert!(o.utilization() > 0.97, "utilization {}", o.utilization());
        assert_eq!(o.dropped_packets, 0);
        // 200 datagrams of 1464 IP bytes at 10 Mbit/s: a 234 ms round of data, of which
        // 56 ms is the path, so ~180 ms of queue on top of 28 ms (Pantheon's 2017 run: p95 211 ms).
        let tx_ms = 1464.0 * 8.0 / 10e6 * 1e3;
        let expected = 200.0 * tx_ms - 28.0;
        assert!((p50 - expected).abs() < 5.0, "steady delay {p50} ms, expected {expected}");
        assert!((180.0..=230.0).contains(&p95), "p95 {p95}");
    }

    #[test]
    fn on_a_short_droptail_queue_it_keeps_sending_and_the_window_stays_low() {
        let link = Link { rate_bits_per_s: 10e6, one_way_delay: ms(28), queue_packets: 20 };
        let o = run(Box::new(Saturator2017::new(1472)), &link, Duration::from_secs(20));
        let p95 = o.delay_percentile_ms(95.0, Duration::ZERO);
        eprintln!(
            "saturator-2017 (20-packet queue): utilization {:.3}, p95 {p95:.1} ms, drops {}",
            o.utilization(),
            o.dropped_packets
        );
        assert!(o.dropped_packets > 0);
        assert!(o.utilization() > 0.9, "utilization {}", o.utilization());
        // The queue bounds the delay: 28 ms + 20 datagrams of 1.17 ms.
        assert!(p95 < 28.0 + 21.0 * 1.2, "p95 {p95}");
    }
}
