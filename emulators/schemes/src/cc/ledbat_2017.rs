//! Pantheon's 2017 `ledbat`: the congestion control of bittorrent/libutp at commit 3110314
//! (`utp_internal.cpp`) as `ucat-static` ran it, a sender fed endless data on stdin
//! (Pantheon's `src/ledbat.py` of January 2017).
//!
//! The window `W` counts uTP payload bytes (1382 per packet: libutp's default UDP MTU for
//! IPv4, 1402 bytes after `UDP_IPV4_MTU`'s allowance for tunnels, less the 20-byte uTP
//! header; the MTU probe of a full packet succeeds on an Ethernet path, so the size never
//! changes). Each DATA packet is a 1402-byte UDP payload ([`Controller::payload_bytes`]).
//!
//! * Delay (`DelayHist`, `utp_process_incoming`): every ACK brings the one-way delay of a data
//!   packet; the base is the minimum over 13 one-minute buckets (all seeded with the first
//!   sample), the current queueing delay the minimum of the last 3 `sample - base` values
//!   (the three slots start at 0). If the current value exceeds the RTT of the newly acked
//!   packets, the base is raised by the excess (for later samples).
//! * Per ACK that acknowledges data (`apply_ccontrol`), with `d = min(current, rtt)`:
//!   `gain = 3000 · min(acked, W)/max(W, acked) · (100 ms − d)/100 ms` bytes, so at most
//!   3000 B per RTT at zero delay and unbounded below; a positive gain is dropped when the
//!   window has not been full in the last second; `W = max(10, trunc(W + gain))`.
//! * "Slow start" (on at the start and after a timeout): `ss = W + acked/W · 1382`, one packet
//!   per RTT; `W = max(ss, ledbat)`; it ends without updating W when `ss > ssthresh` or when
//!   `d > 0.9 · target` (then `ssthresh = W`). W starts at one packet; ssthresh at 1 MiB.
//! * Loss (`selective_ack` → `maybe_decay_win`): a packet three later ones overtook halves
//!   W (floor 10 bytes), at most once per 100 ms; slow start ends, `ssthresh = W`.
//! * Retransmission (`Scoreboard`): a lost packet stays in libutp's window until its
//!   retransmission (sent at once, outside the window) is acknowledged, and while it is
//!   missing the selective ACK (`send_ack`) reaches only 30 packets past it: later arrivals
//!   keep their place in the window until the hole fills, then are acknowledged together
//!   (one ACK, a burst of sends). The transport retransmits nothing, so the next packet sent
//!   stands in for the retransmission; if the stand-in is lost the hole stays open until the
//!   timeout (libutp resends a packet once before it).
//! * Window: `min(W, 1 MiB send buffer, 1 MiB receive window)` in whole packets, less the
//!   holes and held arrivals the scoreboard adds to what the transport has in flight; below
//!   one packet nothing is sent ([`Controller::window_closed`]) until an ACK or the timeout
//!   opens it.
//! * Timeout (`ack_packet`, `check_timeouts`): RTT and variance in integer ms with gains 1/8
//!   and 1/4, `rto = max(rtt + 4·var, 1000 ms)` (3000 ms before a sample); the timer restarts
//!   at `now + rto` whenever a packet is newly acked and is examined every 500 ms. When it
//!   fires, W becomes one packet and slow start restarts, every outstanding packet is given
//!   up (`loss_timeout` of zero for that instant; these losses do not halve W) and leaves
//!   the scoreboard, the timer doubles, and the fifth timeout in a row ends the connection
//!   as ucat does.
//! * No pacing: packets leave in ACK-clocked bursts.
//!
//! Not reproduced: the correction of the base from the reverse path's delay base
//! (`their_hist`, at most the reverse path's jitter), the clock-drift penalty (zero between
//! honest clocks), the limit of four resends per ACK, the "fast timeout" resends after a
//! timeout, the selective ACK's later discovery of a second hole more than 30 packets past
//! the first (ours reports it at once), and the receiver's one ACK per socket drain (ours
//! acknowledges every packet; the gain is per acked byte, so the per-RTT growth is the
//! same).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use super::{AckEvent, Controller, LossEvent};

/// uTP payload bytes of a full packet (`get_packet_size`: UDP MTU 1402 − 20-byte header).
pub const PACKET_PAYLOAD: u64 = 1382;
/// UDP payload of a full packet.
pub const PACKET_BYTES: u64 = PACKET_PAYLOAD + 20;
/// `MAX_CWND_INCREASE_BYTES_PER_RTT`.
const GAIN_BYTES: f64 = 3000.0;
/// The context's default target delay, microseconds.
const TARGET_US: i64 = 100_000;
/// `CUR_DELAY_SIZE`.
const CUR_DELAY_SIZE: usize = 3;
/// `DELAY_BASE_HISTORY` buckets of one minute each.
const DELAY_BASE_HISTORY: usize = 13;
const DELAY_BASE_BUCKET_MS: u64 = 60_000;
/// `MAX_WINDOW_DECAY`: at most one halving per this many ms.
const MAX_WINDOW_DECAY_MS: i64 = 100;
/// `MIN_WINDOW_SIZE`, bytes.
const MIN_WINDOW: u64 = 10;
/// Default `opt_sndbuf` and `opt_rcvbuf` (the receiver advertises all of it).
const SOCKET_BUFFER: u64 = 1024 * 1024;
/// No growth unless the window was full within this many ms.
const WINDOW_FULL_HORIZON_MS: u64 = 1000;
const INITIAL_RTO_MS: u64 = 3000;
const MIN_RTO_MS: u64 = 1000;
/// `TIMEOUT_CHECK_INTERVAL`: the timer is examined this often.
const TIMEOUT_CHECK_MS: u64 = 500;
/// Consecutive timeouts after which the connection is reset.
const MAX_TIMEOUTS: u32 = 4;
/// Stands in for "never": libutp has no per-packet loss timer besides its RTO.
const NO_LOSS_TIMEOUT: Duration = Duration::from_secs(3600);
/// Unpaced: the window alone limits sending.
const UNPACED_RATE: f64 = 1e12;
/// Packets past the oldest missing one that a selective ACK can report (`send_ack`: 30 bits).
const SACK_REACH: u64 = 30;

/// libutp's `DelayHist` for one direction: base delay history and the last samples above it.
#[derive(Clone, Debug)]
struct DelayHist {
    base: i64,
    base_hist: [i64; DELAY_BASE_HISTORY],
    base_idx: usize,
    base_time_ms: u64,
    initialized: bool,
    cur: [i64; CUR_DELAY_SIZE],
    cur_idx: usize,
}

impl DelayHist {
    fn new() -> Self {
        Self {
            base: 0,
            base_hist: [0; DELAY_BASE_HISTORY],
            base_idx: 0,
            base_time_ms: 0,
            initialized: false,
            cur: [0; CUR_DELAY_SIZE],
            cur_idx: 0,
        }
    }

    fn add_sample(&mut self, sample: i64, now_ms: u64) {
        if !self.initialized {
            self.base_hist = [sample; DELAY_BASE_HISTORY];
            self.base = sample;
            self.initialized = true;
        }
        self.base_hist[self.base_idx] = self.base_hist[self.base_idx].min(sample);
        self.base = self.base.min(sample);
        self.cur[self.cur_idx] = sample - self.base;
        self.cur_idx = (self.cur_idx + 1) % CUR_DELAY_SIZE;
        if now_ms.saturating_sub(self.base_time_ms) > DELAY_BASE_BUCKET_MS {
            // A new bucket starts with this sample; the base is the minimum over all buckets.
            self.base_time_ms = now_ms;
            self.base_idx = (self.base_idx + 1) % DELAY_BASE_HISTORY;
            self.base_hist[self.base_idx] = sample;
            self.base = *self.base_hist.iter().min().expect("non-empty");
        }
    }

    /// Raises the base (and its history) by `offset`; samples already taken keep their value.
    fn shift(&mut self, offset: i64) {
        for b in &mut self.base_hist {
            *b += offset;
        }
        self.base += offset;
    }

    /// Minimum of the last three queueing-delay samples, microseconds.
    fn value(&self) -> i64 {
        *self.cur.iter().min().expect("non-empty")
    }
}

/// What libutp's sender knows that the transport does not model: lost packets stay in its
/// window until their retransmission is acknowledged (retransmitted at once, outside the
/// window, by `selective_ack`), and while one is missing a selective ACK reaches only
/// [`SACK_REACH`] packets past it, so later arrivals are acknowledged only when the hole
/// fills. The transport retransmits nothing, so the next packet sent after a loss stands in
/// for the retransmission: its ACK fills the hole; its loss leaves the hole open until the
/// timeout, as in libutp, which resends a packet only once before the timeout.
#[derive(Clone, Debug, Default)]
struct Scoreboard {
    /// Missing packets (libutp still counts them in flight) → their stand-in, once sent.
    holes: BTreeMap<u64, Option<u64>>,
    /// Outstanding stand-in → the hole it retransmits.
    stand_ins: HashMap<u64, u64>,
    /// Holes whose retransmission has not gone out yet.
    pending: VecDeque<u64>,
    /// Arrived beyond the selective ACK's reach: sequence number → when it was sent.
    uncredited: BTreeMap<u64, Duration>,
}

/// What one ACK acknowledges in libutp's terms.
#[derive(Debug, Default)]
struct Credit {
    packets: u64,
    /// RTT samples of first transmissions newly acknowledged.
    rtt_samples: Vec<Duration>,
    min_rtt: Option<Duration>,
}

impl Scoreboard {
    /// Packets libutp counts in flight beyond the transport's count.
    fn extra_packets(&self) -> i64 {
        (self.uncredited.len() + self.holes.len()) as i64 - self.stand_ins.len() as i64
    }

    fn reach(&self) -> Option<u64> {
        self.holes.keys().next().map(|h| h + SACK_REACH)
    }

    /// True for a new hole (the window halves), false for a lost stand-in (no new loss in
    /// libutp: the retransmission is simply never acknowledged).
    fn on_loss(&mut self, seq: u64) -> bool {
        if self.stand_ins.remove(&seq).is_some() || self.holes.contains_key(&seq) {
            return false;
        }
        self.holes.insert(seq, None);
        self.pending.push_back(seq);
        true
    }

    fn on_send(&mut self, seq: u64) {
        if let Some(hole) = self.pending.pop_front() {
            self.holes.insert(hole, Some(seq));
            self.stand_ins.insert(seq, hole);
        }
    }

    /// The transport newly acknowledged `seq` (sent at `sent_at`, RTT `rtt`) and `others`
    /// packets its bitmap recovered.
    fn on_ack(&mut self, seq: u64, sent_at: Duration, now: Duration, rtt: Duration, others: u64) -> Credit {
        let mut credit = Credit { packets: others, ..Credit::default() };
        let filled = if let Some(hole) = self.stand_ins.remove(&seq) {
            self.holes.remove(&hole);
            true
        } else if self.holes.remove(&seq).is_some() {
            // The "lost" original arrived after all.
            self.pending.retain(|&h| h != seq);
            self.stand_ins.retain(|_, h| *h != seq);
            true
        } else {
            false
        };
        if filled {
            // A retransmission: no RTT sample, but its send time bounds the delay.
            credit.packets += 1;
            credit.min_rtt = Some(rtt);
            let reach = self.reach();
            let released: Vec<u64> = match reach {
                Some(r) => self.uncredited.range(..=r).map(|(&k, _)| k).collect(),
                None => self.uncredited.keys().copied().collect(),
            };
            for k in released {
                let sent = self.uncredited.remove(&k).expect("listed");
                let sample = now.saturating_sub(sent);
                credit.packets += 1;
                credit.rtt_samples.push(sample);
                credit.min_rtt = Some(credit.min_rtt.map_or(sample, |m| m.min(sample)));
            }
        } else if self.reach().is_none_or(|r| seq <= r) {
            credit.packets += 1;
            credit.rtt_samples.push(rtt);
            credit.min_rtt = Some(rtt);
        } else {
            self.uncredited.insert(seq, sent_at);
        }
        if credit.packets > 0 && credit.min_rtt.is_none() {
            credit.min_rtt = Some(rtt);
        }
        credit
    }

    /// A timeout: every outstanding packet is to be resent and leaves libutp's window.
    fn clear(&mut self) {
        *self = Self::default();
    }
}

#[derive(Clone, Debug)]
pub struct Ledbat2017 {
    /// `max_window`, uTP payload bytes.
    max_window: u64,
    slow_start: bool,
    ssthresh: u64,
    delay: DelayHist,
    /// When the window was last halved, ms since the flow started.
    last_decay_ms: i64,
    /// When the window was last found full, ms.
    last_maxed_out_ms: u64,
    /// Smoothed RTT and variance, integer ms (0: no sample yet).
    rtt_ms: u64,
    rtt_var_ms: u64,
    rto_ms: u64,
    /// The current (possibly doubled) timeout and when it expires.
    retransmit_timeout_ms: u64,
    rto_deadline: Option<Duration>,
    timeouts_in_row: u32,
    /// Set by a timeout until the next send: the transport gives up every outstanding packet.
    flushing: bool,
    /// The connection was reset after too many timeouts.
    dead: bool,
    /// Transport bytes in flight as last reported (plus sends since).
    in_flight: u64,
    board: Scoreboard,
}

impl Default for Ledbat2017 {
    fn default() -> Self {
        Self {
            max_window: PACKET_PAYLOAD,
            slow_start: true,
            ssthresh: SOCKET_BUFFER,
            delay: DelayHist::new(),
            last_decay_ms: -MAX_WINDOW_DECAY_MS,
            last_maxed_out_ms: 0,
            rtt_ms: 0,
            rtt_var_ms: 800,
            rto_ms: INITIAL_RTO_MS,
            retransmit_timeout_ms: INITIAL_RTO_MS,
            rto_deadline: None,
            timeouts_in_row: 0,
            flushing: false,
            dead: false,
            in_flight: 0,
            board: Scoreboard::default(),
        }
    }
}

fn ms_of(t: Duration) -> u64 {
    t.as_millis() as u64
}

impl Ledbat2017 {
    /// libutp chooses its own packet size, so `mss` is not used.
    pub fn new(_mss: u64) -> Self {
        Self::default()
    }

    /// The congestion window `max_window` in uTP payload bytes.
    pub fn window_bytes(&self) -> u64 {
        self.max_window
    }

    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    /// The retransmission timeout before back-off.
    pub fn rto(&self) -> Duration {
        Duration::from_millis(self.rto_ms)
    }

    /// Whole packets the window allows in flight.
    fn window_packets(&self) -> u64 {
        self.max_window.min(SOCKET_BUFFER) / PACKET_PAYLOAD
    }

    fn update_rtt(&mut self, sample: Duration) {
        let ertt = ms_of(sample);
        if self.rtt_ms == 0 {
            self.rtt_ms = ertt;
            self.rtt_var_ms = ertt / 2;
        } else {
            let delta = self.rtt_ms as i64 - ertt as i64;
            let var = self.rtt_var_ms as i64;
            self.rtt_var_ms = (var + (delta.abs() - var) / 4).max(0) as u64;
            self.rtt_ms = self.rtt_ms - self.rtt_ms / 8 + ertt / 8;
        }
        self.rto_ms = (self.rtt_ms + 4 * self.rtt_var_ms).max(MIN_RTO_MS);
    }

    fn maybe_decay(&mut self, now_ms: u64) {
        let now_ms = now_ms as i64;
        if now_ms - self.last_decay_ms >= MAX_WINDOW_DECAY_MS {
            self.max_window = (self.max_window / 2).max(MIN_WINDOW);
            self.last_decay_ms = now_ms;
            self.slow_start = false;
            self.ssthresh = self.max_window;
        }
    }

    fn apply_ccontrol(&mut self, acked: u64, min_rtt_us: i64, now_ms: u64) {
        let our_delay = self.delay.value().min(min_rtt_us).max(0);
        let w = self.max_window as f64;
        let a = acked as f64;
        let window_factor = a.min(w) / w.max(a);
        let delay_factor = (TARGET_US - our_delay) as f64 / TARGET_US as f64;
        let mut gain = GAIN_BYTES * window_factor * delay_factor;
        if gain > 0.0 && now_ms.saturating_sub(self.last_maxed_out_ms) > WINDOW_FULL_HORIZON_MS {
            gain = 0.0;
        }
        let ledbat = if w + gain < MIN_WINDOW as f64 { MIN_WINDOW } else { (w + gain) as u64 };
        if self.slow_start {
            let ss = (w + window_factor * PACKET_PAYLOAD as f64) as u64;
            if ss > self.ssthresh {
                self.slow_start = false;
            } else if our_delay as f64 > TARGET_US as f64 * 0.9 {
                self.slow_start = false;
                self.ssthresh = self.max_window;
            } else {
                self.max_window = ss.max(ledbat);
            }
        } else {
            self.max_window = ledbat;
        }
        self.max_window = self.max_window.clamp(MIN_WINDOW, SOCKET_BUFFER);
    }

    /// The sender is backlogged: the window counts as full whenever one more packet would
    /// not fit (libutp's `is_full`).
    fn note_if_full(&mut self, now: Duration) {
        if self.in_flight + PACKET_BYTES > self.cwnd() {
            self.last_maxed_out_ms = ms_of(now);
        }
    }
}

impl Controller for Ledbat2017 {
    fn name(&self) -> &'static str {
        "ledbat-2017"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        self.in_flight = ack.bytes_in_flight;
        let now_ms = ms_of(ack.now);
        // Every ACK carries a delay sample, whether or not it acknowledges anything new.
        self.delay.add_sample(ack.one_way_delay_us, now_ms);
        if ack.acked_bytes > 0 {
            let packets = ack.acked_bytes.div_ceil(PACKET_BYTES);
            let credit = self.board.on_ack(ack.seq, ack.sent_at, ack.now, ack.rtt, packets - 1);
            if credit.packets > 0 {
                let min_rtt_us = credit.min_rtt.unwrap_or(ack.rtt).as_micros() as i64;
                let value = self.delay.value();
                if value > min_rtt_us {
                    self.delay.shift(value - min_rtt_us);
                }
                self.apply_ccontrol(credit.packets * PACKET_PAYLOAD, min_rtt_us, now_ms);
                for sample in credit.rtt_samples {
                    self.update_rtt(sample);
                }
                self.retransmit_timeout_ms = self.rto_ms;
                self.rto_deadline = Some(ack.now + Duration::from_millis(self.rto_ms));
                self.timeouts_in_row = 0;
            }
        }
        self.note_if_full(ack.now);
    }

    fn on_loss(&mut self, loss: &LossEvent) {
        self.in_flight = loss.bytes_in_flight;
        if !self.flushing && self.board.on_loss(loss.seq) {
            self.maybe_decay(ms_of(loss.now));
        }
    }

    fn cwnd(&self) -> u64 {
        if self.dead {
            return 0;
        }
        let mut packets = self.window_packets() as i64 - self.board.extra_packets();
        if !self.board.pending.is_empty() {
            // A retransmission goes out whatever the window.
            packets = packets.max((self.in_flight / PACKET_BYTES) as i64 + 1);
        }
        packets.max(0) as u64 * PACKET_BYTES
    }

    fn window_closed(&self) -> bool {
        self.cwnd() == 0
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        UNPACED_RATE
    }

    fn on_send(&mut self, now: Duration, seq: u64) {
        self.flushing = false;
        self.board.on_send(seq);
        if self.rto_deadline.is_none() {
            self.retransmit_timeout_ms = self.rto_ms;
            self.rto_deadline = Some(now + Duration::from_millis(self.rto_ms));
        }
        self.in_flight += PACKET_BYTES;
        self.note_if_full(now);
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(PACKET_BYTES)
    }

    /// The first timeout check (every 500 ms) at or after the RTO deadline.
    fn timer_deadline(&self) -> Option<Duration> {
        if self.dead {
            return None;
        }
        let deadline = ms_of(self.rto_deadline?).max(1);
        Some(Duration::from_millis(deadline.div_ceil(TIMEOUT_CHECK_MS) * TIMEOUT_CHECK_MS))
    }

    fn on_timer(&mut self, now: Duration) {
        let Some(deadline) = self.timer_deadline() else {
            return;
        };
        if now < deadline {
            return;
        }
        if self.timeouts_in_row >= MAX_TIMEOUTS {
            self.dead = true;
            return;
        }
        self.retransmit_timeout_ms *= 2;
        self.rto_deadline = Some(now + Duration::from_millis(self.retransmit_timeout_ms));
        // A backlogged sender always has packets queued, so this is never libutp's idle
        // case: the window restarts from one packet.
        self.max_window = PACKET_PAYLOAD;
        self.slow_start = true;
        self.timeouts_in_row += 1;
        self.flushing = true;
        self.in_flight = 0;
        self.board.clear();
    }

    fn loss_timeout(&self) -> Option<Duration> {
        Some(if self.flushing { Duration::ZERO } else { NO_LOSS_TIMEOUT })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{run, Link};

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// An ACK for `packets` packets at `now` whose data saw `queue_ms` of queueing (over a
    /// 28 ms path with an arbitrary clock offset), RTT 56 ms plus the queue.
    fn ack(now: Duration, packets: u64, queue_ms: u64, in_flight: u64) -> AckEvent {
        let rtt = ms(56 + queue_ms);
        AckEvent {
            now,
            seq: 0,
            sent_at: now.saturating_sub(rtt),
            rtt,
            one_way_delay_us: 5_000_000 + (28 + queue_ms as i64) * 1000,
            acked_bytes: packets * PACKET_BYTES,
            bytes_in_flight: in_flight,
            next_seq: 0,
            delivery_rate: None,
            srtt: rtt,
        }
    }

    fn loss(now: Duration) -> LossEvent {
        let seq = now.as_millis() as u64;
        LossEvent { now, seq, sent_at: now, bytes: PACKET_BYTES, bytes_in_flight: 0 }
    }

    /// A controller past slow start with window `w` payload bytes, delay base learned.
    fn steady(w: u64) -> Ledbat2017 {
        let mut c = Ledbat2017::new(0);
        c.on_ack(&ack(ms(1), 1, 0, 0));
        c.slow_start = false;
        c.max_window = w;
        c
    }

    /// Acks one full window, one packet per ACK, at `queue_ms` of queueing, keeping the
    /// window full.
    fn one_rtt(c: &mut Ledbat2017, start: Duration, queue_ms: u64) -> Duration {
        let n = c.window_packets().max(1);
        let mut now = start;
        for _ in 0..n {
            now += ms(1);
            c.on_ack(&ack(now, 1, queue_ms, c.cwnd()));
        }
        now
    }

    #[test]
    fn packets_are_libutps_size_and_unpaced() {
        let c = Ledbat2017::new(1472);
        assert_eq!(c.payload_bytes(), Some(1402));
        assert_eq!(c.window_bytes(), 1382, "the first window is one packet");
        assert_eq!(c.cwnd(), 1402);
        assert!(c.pacing_rate(ms(50)) > 1e9);
    }

    #[test]
    fn gains_3000_bytes_per_rtt_at_zero_delay() {
        let mut c = steady(100 * PACKET_PAYLOAD);
        let before = c.window_bytes();
        one_rtt(&mut c, ms(10), 0);
        let grown = c.window_bytes() - before;
        // Integer truncation of each per-ACK step costs up to one byte per ACK.
        assert!((2850..=3000).contains(&grown), "grew {grown} B in one RTT");
    }

    #[test]
    fn gain_scales_with_distance_to_the_100_ms_target() {
        let mut c = steady(100 * PACKET_PAYLOAD);
        let w0 = c.window_bytes();
        // Three samples at 50 ms, so the min-of-3 filter sees 50 ms.
        let t = one_rtt(&mut c, ms(10), 50);
        let half = c.window_bytes() - w0;
        assert!((1300..=1600).contains(&half), "grew {half} B at half the target");
        let w1 = c.window_bytes();
        let t = one_rtt(&mut c, t, 100);
        assert!(c.window_bytes().abs_diff(w1) <= 110, "at target the window holds");
        let w2 = c.window_bytes();
        one_rtt(&mut c, t, 200);
        let shrink = w2 - c.window_bytes();
        assert!((2900..=3200).contains(&shrink), "shrank {shrink} B at twice the target");
    }

    #[test]
    fn current_delay_is_the_minimum_of_the_last_three_samples() {
        let mut c = steady(100 * PACKET_PAYLOAD);
        for (i, q) in [150, 150, 20].into_iter().enumerate() {
            c.on_ack(&ack(ms(10 + i as u64), 1, q, c.cwnd()));
        }
        assert_eq!(c.delay.value(), 20_000);
        for (i, q) in [150, 150].into_iter().enumerate() {
            c.on_ack(&ack(ms(20 + i as u64), 1, q, c.cwnd()));
        }
        assert_eq!(c.delay.value(), 20_000, "20 ms is still among the last three");
        c.on_ack(&ack(ms(30), 1, 150, c.cwnd()));
        assert_eq!(c.delay.value(), 150_000);
    }

    #[test]
    fn no_growth_unless_the_window_was_full_within_a_second() {
        let mut c = steady(100 * PACKET_PAYLOAD);
        let w = c.window_bytes();
        // ACKs that leave the window far from full, for more than a second.
        for i in 0..20 {
            c.on_ack(&ack(ms(100 * i + 10), 1, 0, 0));
        }
        let grown_while_full_recently = c.window_bytes() - w;
        assert!(grown_while_full_recently > 0);
        let w = c.window_bytes();
        c.on_ack(&ack(ms(3000), 1, 0, 0));
        assert_eq!(c.window_bytes(), w, "idle window does not grow");
        // Shrinking still applies.
        for i in 0..3 {
            c.on_ack(&ack(ms(3001 + i), 1, 300, 0));
        }
        assert!(c.window_bytes() < w);
    }

    #[test]
    fn slow_start_adds_at_least_a_packet_per_rtt_and_ends_near_target() {
        let mut c = Ledbat2017::new(0);
        let mut t = ms(0);
        c.on_send(t, 0);
        // Far below target the LEDBAT gain (3000 B per window acked) exceeds one packet per
        // RTT (these rounds ack whole packets only, a little under one window).
        for _ in 0..5 {
            t = one_rtt(&mut c, t + ms(50), 0);
        }
        assert!(c.in_slow_start());
        assert!(c.window_bytes() >= 1382 + 5 * 2000, "window {}", c.window_bytes());
        // At 80 ms the LEDBAT gain (600 B) is below the slow-start packet per RTT.
        let w = c.window_bytes();
        t = one_rtt(&mut c, t + ms(50), 80);
        assert!(c.window_bytes() - w >= 1300, "slow start grew {} B", c.window_bytes() - w);
        // Above 90 ms slow start ends and ssthresh remembers the window.
        one_rtt(&mut c, t + ms(50), 95);
        assert!(!c.in_slow_start());
        assert!(c.ssthresh < SOCKET_BUFFER);
    }

    #[test]
    fn loss_halves_at_most_once_per_100_ms() {
        let mut c = steady(200 * PACKET_PAYLOAD);
        c.on_loss(&loss(ms(1000)));
        assert_eq!(c.window_bytes(), 100 * PACKET_PAYLOAD);
        c.on_loss(&loss(ms(1050)));
        c.on_loss(&loss(ms(1099)));
        assert_eq!(c.window_bytes(), 100 * PACKET_PAYLOAD, "within 100 ms of the last halving");
        c.on_loss(&loss(ms(1100)));
        assert_eq!(c.window_bytes(), 50 * PACKET_PAYLOAD);
        assert!(!c.in_slow_start());
    }

    fn ack_seq(now: Duration, seq: u64, in_flight: u64) -> AckEvent {
        AckEvent { seq, ..ack(now, 1, 0, in_flight) }
    }

    #[test]
    fn a_hole_holds_arrivals_past_the_selective_acks_reach_until_its_retransmission() {
        let mut c = steady(100 * PACKET_PAYLOAD);
        for seq in 0..100 {
            c.on_send(ms(2), seq);
        }
        let full = c.cwnd();
        // Packet 10 is lost: W halves, and the next packet sent (100) retransmits it, even
        // though the halved window is full.
        c.on_loss(&LossEvent { now: ms(60), seq: 10, sent_at: ms(2), bytes: PACKET_BYTES, bytes_in_flight: 0 });
        assert_eq!(c.window_bytes(), 50 * PACKET_PAYLOAD);
        c.in_flight = 99 * PACKET_BYTES;
        assert_eq!(c.cwnd(), 100 * PACKET_BYTES, "room for the retransmission only");
        c.on_send(ms(60), 100);
        assert!(c.in_flight >= c.cwnd(), "100 in flight against a window of 50");
        // 11..=40 are within reach of the selective ACK; 41..99 are not.
        for seq in (11..100).filter(|&s| s != 10) {
            c.on_ack(&ack_seq(ms(60 + seq), seq, (100 - seq) * PACKET_BYTES));
        }
        assert_eq!(c.board.uncredited.len(), 59);
        assert!(c.window_closed(), "arrivals past the reach keep their place in the window");
        // The retransmission's ACK releases them all at once.
        let w = c.window_bytes();
        c.on_ack(&ack_seq(ms(170), 100, 0));
        assert!(c.board.uncredited.is_empty() && c.board.holes.is_empty());
        assert!(c.window_bytes() > w);
        assert!(c.cwnd() >= 50 * PACKET_BYTES && c.cwnd() < full);
    }

    #[test]
    fn a_lost_retransmission_leaves_the_hole_open_until_the_timeout() {
        let mut c = steady(40 * PACKET_PAYLOAD);
        for seq in 0..40 {
            c.on_send(ms(2), seq);
        }
        c.on_loss(&LossEvent { now: ms(60), seq: 0, sent_at: ms(2), bytes: PACKET_BYTES, bytes_in_flight: 0 });
        c.on_send(ms(60), 40);
        let w = c.window_bytes();
        // The stand-in is lost too: no second halving, the hole stays.
        c.on_loss(&LossEvent { now: ms(300), seq: 40, sent_at: ms(60), bytes: PACKET_BYTES, bytes_in_flight: 0 });
        assert_eq!(c.window_bytes(), w);
        for seq in 1..40 {
            c.on_ack(&ack_seq(ms(60 + seq), seq, 0));
        }
        // The hole and the 9 arrivals past its reach (31..=39) still occupy the window.
        assert_eq!(c.board.extra_packets(), 10);
        assert_eq!(c.cwnd(), (c.window_packets() - 10) * PACKET_BYTES);
        let deadline = c.timer_deadline().unwrap();
        c.on_timer(deadline);
        assert_eq!(c.board.extra_packets(), 0);
        assert_eq!(c.cwnd(), PACKET_BYTES);
    }

    #[test]
    fn a_window_below_one_packet_sends_nothing_until_the_timeout() {
        let mut c = steady(1000);
        c.on_send(ms(2), 1);
        assert!(c.window_closed());
        assert_eq!(c.cwnd(), 0);
        // One RTT sample of 56 ms: rto = max(56 + 4·28, 1000) ms, counted from the last
        // newly acked packet and examined on the 500 ms grid.
        c.on_ack(&ack(ms(1200), 1, 0, 0));
        assert_eq!(c.rto(), ms(1000));
        assert_eq!(c.timer_deadline(), Some(ms(2500)));
        c.on_timer(ms(2500));
        assert!(!c.window_closed());
        assert_eq!(c.window_bytes(), PACKET_PAYLOAD);
        assert!(c.in_slow_start());
        // The timer doubles until an ACK acknowledges something.
        assert_eq!(c.timer_deadline(), Some(ms(4500)));
    }

    #[test]
    fn a_timeout_gives_up_outstanding_packets_without_halving() {
        let mut c = steady(50 * PACKET_PAYLOAD);
        c.on_send(ms(2), 1);
        let deadline = c.timer_deadline().unwrap();
        assert_eq!(c.loss_timeout(), Some(NO_LOSS_TIMEOUT));
        c.on_timer(deadline);
        assert_eq!(c.loss_timeout(), Some(Duration::ZERO), "everything outstanding is given up");
        c.on_loss(&loss(deadline));
        c.on_loss(&loss(deadline));
        assert_eq!(c.window_bytes(), PACKET_PAYLOAD, "timeout losses do not halve");
        c.on_send(deadline, 2);
        assert_eq!(c.loss_timeout(), Some(NO_LOSS_TIMEOUT));
    }

    #[test]
    fn rto_follows_rtt_and_variance_with_a_one_second_floor() {
        let mut c = Ledbat2017::new(0);
        assert_eq!(c.rto(), ms(3000));
        c.on_ack(&ack(ms(100), 1, 0, 0));
        assert_eq!(c.rto(), ms(1000));
        let mut t = ms(100);
        // RTTs of 56 ms and 1556 ms alternate: the variance lifts the RTO above the floor.
        for i in 0..40 {
            t += ms(10);
            c.on_ack(&ack(t, 1, if i % 2 == 0 { 1500 } else { 0 }, 0));
        }
        assert!(c.rto() > ms(2000), "rto {:?}", c.rto());
    }

    #[test]
    fn five_timeouts_in_a_row_reset_the_connection() {
        let mut c = Ledbat2017::new(0);
        c.on_send(ms(0), 0);
        for _ in 0..5 {
            let d = c.timer_deadline().unwrap();
            c.on_timer(d);
        }
        assert!(c.window_closed());
        assert_eq!(c.timer_deadline(), None);
    }

    #[test]
    fn settles_at_the_100_ms_target_on_pantheons_unbounded_10_mbps_emulator() {
        // Pantheon 2017 over mm-delay 28 + 10 Mbit/s with an unbounded queue: 9.05 Mbit/s,
        // p95 one-way delay 128 ms (28 ms + the 100 ms target).
        let link = Link { rate_bits_per_s: 10e6, one_way_delay: ms(28), queue_packets: 100_000 };
        let o = run(Box::new(Ledbat2017::new(1472)), &link, Duration::from_secs(30));
        let p95 = o.delay_percentile_ms(95.0, Duration::ZERO);
        let p50_late = o.delay_percentile_ms(50.0, Duration::from_secs(20));
        eprintln!("ledbat-2017: utilization {:.3}, p95 {p95:.1} ms, late p50 {p50_late:.1} ms", o.utilization());
        assert!(o.utilization() >= 0.9, "utilization {}", o.utilization());
        assert!((118.0..=135.0).contains(&p95), "p95 {p95} ms");
        assert!((115.0..=135.0).contains(&p50_late), "late median {p50_late} ms");
        assert_eq!(o.dropped_packets, 0);
    }

    #[test]
    fn a_short_droptail_queue_costs_throughput() {
        // 20 packets (23 ms) of buffer: losses halve the window long before the 100 ms
        // target is reached, each hole holds the window until its retransmission is
        // acknowledged, and a lost retransmission waits for the 1 s timeout. libutp's
        // ucat-static over this emulator: about 75 % of the link (7.5 Mbit/s).
        let link = Link { rate_bits_per_s: 10e6, one_way_delay: ms(28), queue_packets: 20 };
        let o = run(Box::new(Ledbat2017::new(1472)), &link, Duration::from_secs(30));
        eprintln!("ledbat-2017 (20 packets): utilization {:.3}, drops {}", o.utilization(), o.dropped_packets);
        assert!(o.dropped_packets > 0);
        assert!((0.6..0.9).contains(&o.utilization()), "utilization {}", o.utilization());
        assert!(o.delay_percentile_ms(95.0, Duration::ZERO) < 28.0 + 25.0);
    }
}
