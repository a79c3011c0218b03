//! Pantheon's 2017 `vegas`: Linux's `net/ipv4/tcp_vegas.c` (4.x kernels, as in Ubuntu 16.04's
//! 4.4/4.8; read at torvalds/linux 09c434b8, whose logic is that of 4.4: only the
//! `pkts_acked` signature changed since) under iperf 2, ported onto the UDP transport for
//! hosts whose kernel lacks the module. The Linux TCP machinery around the module that
//! shapes its behaviour is modelled too: slow start, Reno, loss recovery, the idle restart
//! and the Linux receiver's delayed ACKs.
//!
//! The module (`tcp_vegas_pkts_acked`, `tcp_vegas_cong_avoid`), windows in packets,
//! times in integer microseconds:
//! * Every ACK that acknowledges new data gives one sample `vrtt = rtt + 1 µs` (the kernel's
//!   sample is the RTT of the most recently sent segment it acknowledges). BaseRTT is the
//!   minimum since the last `tcp_vegas_init`; minRTT and cntRTT are the minimum and the count
//!   of samples in the current round.
//! * A round ends on the first ACK that covers the packet that was next to be sent when the
//!   previous round ended (`after(ack, beg_snd_nxt)`). Then, if cntRTT <= 2, one Reno step
//!   (`tcp_reno_cong_avoid`); otherwise, with integer arithmetic,
//!   `target = cwnd * base / minRTT` and `diff = cwnd * (minRTT - base) / base`:
//!   in slow start, `diff > gamma` ends it with `cwnd = min(cwnd, target + 1)` and
//!   `ssthresh = min(ssthresh, cwnd)`, else one slow-start step; in congestion avoidance
//!   `diff > beta` takes one packet off (and lowers ssthresh to cwnd), `diff < alpha` adds one.
//!   cwnd >= 2, then `ssthresh = tcp_current_ssthresh` (at least 3/4 cwnd). The round's
//!   counters are wiped.
//! * Between round ends, slow start grows by the packets each ACK acknowledges
//!   (`tcp_slow_start`, cwnd doubles per round: not the paper's every-other-round); nothing
//!   else changes cwnd. alpha = 2, beta = 4, gamma = 1 (module defaults).
//! * `tcp_vegas_state`: outside the Open state Vegas is off and the kernel's own Reno and
//!   recovery act; returning to Open starts a fresh round (BaseRTT kept).
//!   `tcp_vegas_cwnd_event`: a send with nothing in flight (CA_EVENT_TX_START, also the very
//!   first data packet) or after an idle period (CA_EVENT_CWND_RESTART) re-initialises
//!   Vegas, BaseRTT included.
//!
//! The kernel around it (`tcp_cong.c`, `tcp_input.c`, `tcp_output.c` of 4.4):
//! * First window 10, ssthresh infinite; `tcp_slow_start` of 4.4 (`cwnd + acked`, capped at
//!   ssthresh + 1, the rest to `tcp_cong_avoid_ai`). The sender is a bulk iperf, so it is
//!   taken as always cwnd-limited. No pacing (no fq qdisc in 2017): ACK-clocked bursts.
//! * Loss (the transport's 3-packet reordering rule stands in for SACK/FACK's dupthresh 3):
//!   once per episode, `ssthresh = max(cwnd / 2, 2)` (`tcp_reno_ssthresh`) and cwnd =
//!   ssthresh at once (where PRR reaches it over the recovery round); no growth until a
//!   packet sent after the loss was detected is acknowledged, then Open again. A loss found
//!   by the timer is an RTO: cwnd 1, Reno slow start until the same point. The timeout is
//!   the kernel's RTO, `srtt + 200 ms` (its rttvar term is floored at `tcp_rto_min`).
//! * The receiver is Linux's (iperf's server): after 5 quick ACKs (`tcp_incr_quickack` with
//!   the first 10-segment receive window) it acknowledges every second full segment, or
//!   after 40 ms (`TCP_ATO_MIN`). Our receiver acknowledges every packet, so the port holds
//!   the first ACK of each pair and acts on the second (`LinuxDelayed`): the sample is the
//!   second packet's RTT, the ACK counts 2 packets, and the held packet stays in flight
//!   (the window shrinks by it), so the sender releases the kernel's 4-packet slow-start
//!   bursts. After a loss the receiver acknowledges at once (its out-of-order queue) through
//!   the recovery round and 16 quick ACKs more.
//!
//! Why this keeps ~100 packets queued on Pantheon's unbounded 10 Mbit/s, 28 ms link (see the
//! sim tests): with no pacing, slow start sends ACK-clocked trains of back-to-back packets,
//! and in each train only the head can find the queue empty. The ACK that ends a round is
//! for the first packet sent after the previous round ended, which is a train's head: its
//! sample is the round's last, and the rest of its train falls in the next round. So once
//! the trains fill the pipe (a head meets the previous train's tail), the smallest sample a
//! round holds is the packet right behind a head: BaseRTT plus one transmission time `tx`.
//! diff = cwnd * tx / BaseRTT passes gamma (diff >= 2 in integers) only when cwnd >= 2 BDP:
//! with a BDP of 48 packets the doubling reaches 160 first, and the cut to
//! `target + 1 = cwnd * BaseRTT / (BaseRTT + tx) + 1` keeps ~150-157 packets, ~105 of them
//! queued. Congestion avoidance then takes one packet per RTT (~180 ms at that queue), so
//! the queue stays near 100 packets for seconds and needs ~12 s to reach alpha..beta.
//! Delayed ACKs are not needed for this (their 4-packet bursts put the minimum 3 `tx` above
//! the base, which moves the exit from ~157 to ~151 packets). The exit is a knife edge: one round earlier (cwnd 80) diff = 80 * d / 57 ms, so a round
//! minimum d >= 1.43 ms above BaseRTT ends slow start there, with ~30 packets queued. Over
//! a Mahimahi link (deliveries on whole milliseconds, 1,2,3,4,6 ms in each 6) d is 1 or
//! 2 ms plus clock phase, and both outcomes occur from run to run.

use std::time::Duration;

use super::{AckEvent, Controller, LossEvent};

const ALPHA: u32 = 2;
const BETA: u32 = 4;
const GAMMA: u32 = 1;
/// TCP_INIT_CWND.
const INITIAL_CWND: u32 = 10;
/// TCP_INFINITE_SSTHRESH.
const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;
/// The module's "no sample yet" for BaseRTT and minRTT.
const NO_RTT: u32 = 0x7fff_ffff;
const MIN_CWND: u32 = 2;
/// Quick ACKs at the start: the first receive window (10 segments) over two segments.
const INITIAL_QUICKACKS: u32 = 5;
/// Quick ACKs after the receiver saw a hole (TCP_MAX_QUICKACKS).
const LOSS_QUICKACKS: u32 = 16;
/// TCP_ATO_MIN: the longest a Linux receiver holds a lone full segment in bulk transfer.
const DELAYED_ACK_TIMEOUT: Duration = Duration::from_millis(40);
/// tcp_rto_min, and TCP_TIMEOUT_INIT before any sample.
const RTO_MIN: Duration = Duration::from_millis(200);
const RTO_INITIAL: Duration = Duration::from_secs(1);
const RTO_MAX: Duration = Duration::from_secs(120);
/// A window-only sender: pacing never binds.
const NO_PACING: f64 = 1e12;

/// How the modelled receiver acknowledges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckPolicy {
    /// Linux's delayed ACKs: every second segment (after the quick ACKs), or 40 ms.
    LinuxDelayed,
    /// Every packet, as our receiver does (for comparison).
    EveryPacket,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CaState {
    Open,
    /// Fast recovery (window reduced, no growth).
    Recovery,
    /// After a retransmission timeout: Reno slow start from one packet.
    Loss,
}

/// An ACK the modelled receiver has not sent yet.
#[derive(Clone, Copy, Debug)]
struct HeldAck {
    at: Duration,
    seq: u64,
    rtt: Duration,
    packets: u32,
}

#[derive(Clone, Debug)]
pub struct Vegas2017 {
    mss: u64,
    ack_policy: AckPolicy,
    /// Congestion window and slow-start threshold, packets.
    cwnd: u32,
    ssthresh: u32,
    /// Reno's additive-increase credit (snd_cwnd_cnt).
    cwnd_cnt: u32,
    state: CaState,
    /// Recovery ends once a packet with at least this sequence number is acknowledged.
    recovery_point: u64,
    doing_vegas_now: bool,
    /// The round ends once this packet is acknowledged.
    beg_snd_nxt: u64,
    cnt_rtt: u32,
    min_rtt_us: u32,
    base_rtt_us: u32,
    quickacks_left: u32,
    held: Option<HeldAck>,
    /// Next sequence number to send (the kernel's snd_nxt in packets).
    snd_nxt: u64,
    /// Nothing in flight as the kernel counts it (held packets included).
    idle: bool,
    last_send: Option<Duration>,
    last_ack_at: Option<Duration>,
    srtt: Option<Duration>,
}

impl Vegas2017 {
    pub fn new(mss: u64) -> Self {
        Self::with_ack_policy(mss, AckPolicy::LinuxDelayed)
    }

    pub fn with_ack_policy(mss: u64, ack_policy: AckPolicy) -> Self {
        Self {
            mss: mss.max(1),
            ack_policy,
            cwnd: INITIAL_CWND,
            ssthresh: INFINITE_SSTHRESH,
            cwnd_cnt: 0,
            state: CaState::Open,
            recovery_point: 0,
            doing_vegas_now: true,
            beg_snd_nxt: 0,
            cnt_rtt: 0,
            min_rtt_us: NO_RTT,
            base_rtt_us: NO_RTT,
            quickacks_left: INITIAL_QUICKACKS,
            held: None,
            snd_nxt: 0,
            idle: true,
            last_send: None,
            last_ack_at: None,
            srtt: None,
        }
    }

    pub fn cwnd_packets(&self) -> u32 {
        self.cwnd
    }

    pub fn ssthresh_packets(&self) -> u32 {
        self.ssthresh
    }

    pub fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// BaseRTT in µs (None before a sample since the last re-initialisation).
    pub fn base_rtt_us(&self) -> Option<u32> {
        (self.base_rtt_us != NO_RTT).then_some(self.base_rtt_us)
    }

    fn rto(&self) -> Duration {
        self.srtt.map_or(RTO_INITIAL, |s| (s + RTO_MIN).min(RTO_MAX))
    }

    /// `tcp_vegas_init`: forget BaseRTT and start a fresh round.
    fn vegas_init(&mut self) {
        self.base_rtt_us = NO_RTT;
        self.vegas_enable();
    }

    /// `vegas_enable`: the next round starts with the next packet sent.
    fn vegas_enable(&mut self) {
        self.doing_vegas_now = true;
        self.beg_snd_nxt = self.snd_nxt;
        self.cnt_rtt = 0;
        self.min_rtt_us = NO_RTT;
    }

    /// `tcp_slow_start` of 4.4: returns the packets left over past ssthresh.
    fn slow_start(&mut self, acked: u32) -> u32 {
        let mut cwnd = self.cwnd.saturating_add(acked);
        if cwnd > self.ssthresh {
            cwnd = self.ssthresh + 1;
        }
        let left = acked - (cwnd - self.cwnd);
        self.cwnd = cwnd;
        left
    }

    /// `tcp_cong_avoid_ai` with w = cwnd.
    fn cong_avoid_ai(&mut self, acked: u32) {
        let w = self.cwnd;
        if self.cwnd_cnt >= w {
            self.cwnd_cnt = 0;
            self.cwnd += 1;
        }
        self.cwnd_cnt += acked;
        if self.cwnd_cnt >= w {
            let delta = self.cwnd_cnt / w;
            self.cwnd_cnt -= delta * w;
            self.cwnd += delta;
        }
    }

    /// `tcp_reno_cong_avoid` (a bulk sender is always cwnd-limited).
    fn reno_cong_avoid(&mut self, mut acked: u32) {
        if self.in_slow_start() {
            acked = self.slow_start(acked);
            if acked == 0 {
                return;
            }
        }
        self.cong_avoid_ai(acked);
    }

    /// `tcp_current_ssthresh`.
    fn current_ssthresh(&self) -> u32 {
        if self.state == CaState::Recovery {
            self.ssthresh
        } else {
            self.ssthresh.max((self.cwnd >> 1) + (self.cwnd >> 2))
        }
    }

    /// `tcp_vegas_cong_avoid`; `highest` is the newest packet the ACK covers.
    fn vegas_cong_avoid(&mut self, highest: u64, acked: u32) {
        if !self.doing_vegas_now {
            self.reno_cong_avoid(acked);
            return;
        }
        if highest >= self.beg_snd_nxt {
            self.beg_snd_nxt = self.snd_nxt;
            if self.cnt_rtt <= 2 {
                // Too few samples to tell a real RTT from a delayed ACK's.
                self.reno_cong_avoid(acked);
            } else {
                let rtt = self.min_rtt_us;
                let base = self.base_rtt_us;
                let target = (u64::from(self.cwnd) * u64::from(base) / u64::from(rtt)) as u32;
                // The kernel's u32 arithmetic, wrap-around included.
                let diff = self.cwnd.wrapping_mul(rtt - base) / base;
                if diff > GAMMA && self.in_slow_start() {
                    self.cwnd = self.cwnd.min(target.saturating_add(1));
                    self.ssthresh = self.ssthresh.min(self.cwnd);
                } else if self.in_slow_start() {
                    self.slow_start(acked);
                } else if diff > BETA {
                    self.cwnd -= 1;
                    self.ssthresh = self.ssthresh.min(self.cwnd);
                } else if diff < ALPHA {
                    self.cwnd += 1;
                }
                self.cwnd = self.cwnd.max(MIN_CWND);
                self.ssthresh = self.current_ssthresh();
            }
            self.cnt_rtt = 0;
            self.min_rtt_us = NO_RTT;
        } else if self.in_slow_start() {
            self.slow_start(acked);
        }
    }

    /// One ACK as the kernel's `tcp_ack` sees it.
    fn kernel_ack(&mut self, highest: u64, packets: u32, rtt: Duration) {
        // tcp_vegas_pkts_acked.
        let vrtt = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX - 1).saturating_add(1);
        self.base_rtt_us = self.base_rtt_us.min(vrtt);
        self.min_rtt_us = self.min_rtt_us.min(vrtt);
        self.cnt_rtt += 1;
        // Recovery or RTO recovery ends once new data is acknowledged (tcp_fastretrans_alert).
        if self.state != CaState::Open && highest >= self.recovery_point {
            self.state = CaState::Open;
            self.vegas_enable();
        }
        // No growth while the window is being reduced (tcp_may_raise_cwnd).
        if self.state != CaState::Recovery {
            self.vegas_cong_avoid(highest, packets);
        }
    }

    fn release_held(&mut self, now: Duration) {
        if let Some(h) = self.held.take() {
            self.kernel_ack(h.seq, h.packets, h.rtt + now.saturating_sub(h.at));
        }
    }

    fn set_idle(&mut self, transport_in_flight: u64) {
        let held = self.held.map_or(0, |h| h.packets as u64 * self.mss);
        self.idle = transport_in_flight + held == 0;
    }
}

impl Controller for Vegas2017 {
    fn name(&self) -> &'static str {
        "vegas-2017"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        self.srtt = Some(ack.srtt);
        self.last_ack_at = Some(ack.now);
        if ack.acked_bytes == 0 {
            return;
        }
        let packets = ack.acked_bytes.div_ceil(self.mss).min(u64::from(u32::MAX)) as u32;
        let pair =
            self.ack_policy == AckPolicy::LinuxDelayed && self.state == CaState::Open && self.quickacks_left == 0;
        match self.held.take() {
            Some(h) => {
                // The second segment: one ACK for both, timed by the later one.
                self.kernel_ack(ack.seq.max(h.seq), packets + h.packets, ack.rtt);
            }
            None if pair && packets == 1 => {
                self.held = Some(HeldAck { at: ack.now, seq: ack.seq, rtt: ack.rtt, packets });
            }
            None => {
                self.quickacks_left = self.quickacks_left.saturating_sub(1);
                self.kernel_ack(ack.seq, packets, ack.rtt);
            }
        }
        self.set_idle(ack.bytes_in_flight);
    }

    fn on_loss(&mut self, loss: &LossEvent) {
        // The receiver acknowledges at once once it sees a hole.
        self.release_held(loss.now);
        self.quickacks_left = self.quickacks_left.max(LOSS_QUICKACKS);
        self.set_idle(loss.bytes_in_flight);
        if loss.seq < self.recovery_point {
            return; // this episode's window cut is done
        }
        let by_timer = self.last_ack_at != Some(loss.now);
        self.ssthresh = (self.cwnd >> 1).max(MIN_CWND);
        self.cwnd_cnt = 0;
        self.recovery_point = self.snd_nxt;
        self.doing_vegas_now = false;
        if by_timer {
            self.state = CaState::Loss;
            self.cwnd = 1;
        } else {
            self.state = CaState::Recovery;
            self.cwnd = self.ssthresh;
        }
    }

    fn on_send(&mut self, now: Duration, seq: u64) {
        if self.idle {
            if let Some(last) = self.last_send {
                // tcp_cwnd_restart: after an idle RTO, restart from at most the first window.
                let mut idle = now.saturating_sub(last);
                let rto = self.rto();
                if idle > rto {
                    self.vegas_init();
                    self.ssthresh = self.current_ssthresh();
                    let restart = self.cwnd.min(INITIAL_CWND);
                    let mut cwnd = self.cwnd;
                    while idle > rto && cwnd > restart {
                        idle -= rto;
                        cwnd >>= 1;
                    }
                    self.cwnd = cwnd.max(restart);
                }
            }
            // CA_EVENT_TX_START: the round starts with this packet.
            self.snd_nxt = seq;
            self.vegas_init();
            self.idle = false;
        }
        self.snd_nxt = self.snd_nxt.max(seq + 1);
        self.last_send = Some(now);
    }

    fn cwnd(&self) -> u64 {
        // A packet whose ACK the receiver still holds is in flight for the kernel.
        let held = self.held.map_or(0, |h| u64::from(h.packets) * self.mss);
        (u64::from(self.cwnd) * self.mss).saturating_sub(held)
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        NO_PACING
    }

    fn timer_deadline(&self) -> Option<Duration> {
        self.held.map(|h| h.at + DELAYED_ACK_TIMEOUT)
    }

    fn on_timer(&mut self, now: Duration) {
        if self.held.is_some_and(|h| h.at + DELAYED_ACK_TIMEOUT <= now) {
            self.release_held(now);
        }
    }

    fn loss_timeout(&self) -> Option<Duration> {
        Some(self.rto())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{run, Link, PAYLOAD};

    const MSS: u64 = 1000;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn ack(now: Duration, seq: u64, rtt: Duration, next_seq: u64) -> AckEvent {
        AckEvent {
            now,
            seq,
            sent_at: now.saturating_sub(rtt),
            rtt,
            one_way_delay_us: 0,
            acked_bytes: MSS,
            bytes_in_flight: MSS,
            next_seq,
            delivery_rate: None,
            srtt: rtt,
        }
    }

    /// Sends `n` packets from `first` at `now`.
    fn send(v: &mut Vegas2017, now: Duration, first: u64, n: u64) {
        for s in first..first + n {
            v.on_send(now, s);
        }
    }

    fn every_packet() -> Vegas2017 {
        Vegas2017::with_ack_policy(MSS, AckPolicy::EveryPacket)
    }

    /// Drives whole rounds of an ACK-every-packet receiver: each round sends a full window
    /// and acknowledges all of it with the given RTT (in ms), with the first ACK at 1 ms more.
    fn rounds(v: &mut Vegas2017, rtts: &[u64]) -> u64 {
        let mut seq = 0;
        let mut t = 0;
        send(v, ms(t), 0, v.cwnd_packets() as u64);
        let mut sent = v.cwnd_packets() as u64;
        for &r in rtts {
            t += r + 10;
            let end = sent;
            while seq < end {
                let rtt = if seq == end - 1 { r + 1 } else { r };
                v.on_ack(&ack(ms(t), seq, ms(rtt), sent));
                seq += 1;
                let allowed = v.cwnd() / MSS;
                let in_flight = sent - seq;
                if allowed > in_flight {
                    send(v, ms(t), sent, allowed - in_flight);
                    sent += allowed - in_flight;
                }
            }
        }
        sent
    }

    #[test]
    fn slow_start_doubles_every_round_while_diff_stays_small() {
        let mut v = every_packet();
        // The first round, and two more at base RTT: no queue, so slow start goes on.
        rounds(&mut v, &[50, 50, 50]);
        assert!(v.in_slow_start());
        assert_eq!(v.cwnd_packets(), 80, "10 -> 20 -> 40 -> 80");
    }

    #[test]
    fn slow_start_ends_at_the_actual_rate_when_diff_exceeds_gamma() {
        let mut v = every_packet();
        // Rounds of 10, 20 at 50 ms, then a round of 40 whose minimum is 60 ms.
        rounds(&mut v, &[50, 50, 60]);
        // That round ends on the first ACK of the next one: cwnd had grown to 80, and
        // diff = 80 * 10000 / 50001 = 15 > 1 -> cwnd = min(80, 80 * 50001 / 60001 + 1) = 67.
        rounds_tail(&mut v);
        assert!(!v.in_slow_start());
        assert_eq!(v.cwnd_packets(), 67);
        assert_eq!(v.ssthresh_packets(), 67);
    }

    /// One more ACK, for the packet that starts the next round.
    fn rounds_tail(v: &mut Vegas2017) {
        let next = v.beg_snd_nxt;
        v.on_ack(&ack(ms(10_000), next, ms(60), next + 100));
    }

    fn in_avoidance(cwnd: u32) -> Vegas2017 {
        let mut v = every_packet();
        v.cwnd = cwnd;
        v.ssthresh = cwnd;
        v.base_rtt_us = 50_001;
        v.idle = false;
        v
    }

    /// One round: `n` ACKs with RTT `rtt_us`, then the ACK (same RTT) that ends it.
    fn one_round(v: &mut Vegas2017, n: u64, rtt_us: u64) {
        let start = v.snd_nxt;
        send(v, ms(1), start, n + 1);
        v.beg_snd_nxt = start + n;
        for s in start..=start + n {
            v.on_ack(&ack(ms(100), s, Duration::from_micros(rtt_us), start + n + 1));
        }
    }

    #[test]
    fn avoidance_moves_one_packet_per_round_toward_alpha_beta() {
        // diff = 20 * (rtt - 50001) / 50001 with vrtt = rtt + 1.
        let mut v = in_avoidance(20);
        one_round(&mut v, 10, 65_000); // diff = 5 > beta
        assert_eq!(v.cwnd_packets(), 19);
        one_round(&mut v, 10, 58_000); // diff = 19 * 8000 / 50001 = 3: hold
        assert_eq!(v.cwnd_packets(), 19);
        one_round(&mut v, 10, 52_000); // diff = 0 < alpha
        assert_eq!(v.cwnd_packets(), 20);
        assert!(!v.in_slow_start(), "ssthresh follows cwnd up: {}", v.ssthresh_packets());
    }

    #[test]
    fn rounds_with_two_samples_fall_back_to_reno() {
        let mut v = in_avoidance(20);
        // Two samples in the round: Reno's additive increase credits the round-ending ACK only.
        one_round(&mut v, 1, 80_000);
        assert_eq!(v.cwnd_packets(), 20, "no Vegas decrease despite diff = 11");
        assert_eq!(v.cwnd_cnt, 1);
    }

    #[test]
    fn loss_halves_once_per_episode_and_keeps_base_rtt() {
        let mut v = in_avoidance(40);
        send(&mut v, ms(1), 0, 40);
        v.on_ack(&ack(ms(60), 0, ms(50), 40));
        let loss = |seq| LossEvent { now: ms(60), seq, sent_at: ms(1), bytes: MSS, bytes_in_flight: 30 * MSS };
        v.on_loss(&loss(1));
        v.on_loss(&loss(2));
        assert_eq!(v.cwnd_packets(), 20);
        assert_eq!(v.ssthresh_packets(), 20);
        assert!(!v.doing_vegas_now);
        // Acknowledging older packets does not end recovery or grow the window.
        v.on_ack(&ack(ms(61), 5, ms(50), 40));
        assert_eq!(v.cwnd_packets(), 20);
        // A packet sent after the loss was found ends it; Vegas restarts its rounds.
        send(&mut v, ms(62), 40, 1);
        v.on_ack(&ack(ms(112), 40, ms(50), 41));
        assert!(v.doing_vegas_now);
        assert_eq!(v.base_rtt_us(), Some(50_001));
    }

    #[test]
    fn silence_is_a_timeout_that_restarts_from_one_packet() {
        let mut v = in_avoidance(40);
        send(&mut v, ms(1), 0, 40);
        v.on_ack(&ack(ms(60), 0, ms(50), 40));
        let rto = v.loss_timeout().unwrap();
        assert_eq!(rto, ms(250), "srtt + tcp_rto_min");
        v.on_loss(&LossEvent { now: ms(300), seq: 1, sent_at: ms(1), bytes: MSS, bytes_in_flight: 0 });
        assert_eq!(v.cwnd_packets(), 1);
        assert_eq!(v.ssthresh_packets(), 20);
    }

    #[test]
    fn sending_with_nothing_in_flight_forgets_base_rtt() {
        let mut v = every_packet();
        send(&mut v, ms(0), 0, 1);
        let mut a = ack(ms(50), 0, ms(50), 1);
        a.bytes_in_flight = 0;
        v.on_ack(&a);
        assert_eq!(v.base_rtt_us(), Some(50_001));
        send(&mut v, ms(51), 1, 1);
        assert_eq!(v.base_rtt_us(), None, "CA_EVENT_TX_START re-initialises Vegas");
        assert_eq!(v.beg_snd_nxt, 1);
    }

    #[test]
    fn linux_receiver_acks_every_second_segment_after_the_quick_acks() {
        let mut v = Vegas2017::new(MSS);
        send(&mut v, ms(0), 0, 10);
        for s in 0..5 {
            v.on_ack(&ack(ms(50), s, ms(50), 10));
        }
        assert_eq!(v.cwnd_packets(), 15, "five quick ACKs, one packet each");
        v.on_ack(&ack(ms(51), 5, ms(51), 15));
        assert_eq!(v.cwnd_packets(), 15, "the first of a pair is held");
        assert_eq!(v.cwnd(), 14 * MSS, "and its packet stays in flight");
        assert_eq!(v.timer_deadline(), Some(ms(91)));
        v.on_ack(&ack(ms(52), 6, ms(52), 15));
        assert_eq!(v.cwnd_packets(), 17, "one ACK for two segments");
        assert_eq!(v.cwnd(), 17 * MSS);
        // A lone segment is acknowledged by the delayed-ACK timer.
        v.on_ack(&ack(ms(53), 7, ms(53), 15));
        v.on_timer(ms(93));
        assert_eq!(v.cwnd_packets(), 18);
        assert_eq!(v.timer_deadline(), None);
    }

    /// Pantheon's emulator A: 10 Mbit/s each way, 28 ms each way, unbounded queue.
    fn emulator_a() -> Link {
        Link { rate_bits_per_s: 10e6, one_way_delay: ms(28), queue_packets: 100_000 }
    }

    fn p(o: &crate::sim::Outcome, q: f64, from: u64) -> f64 {
        o.delay_percentile_ms(q, Duration::from_secs(from))
    }

    #[test]
    fn on_pantheons_unbounded_link_slow_start_overshoots_and_drains_slowly() {
        // Pantheon 2017 (emulator A): 9.27 Mbit/s, p95 146 ms; D: 9.30, 139.9 ms.
        let o = run(Box::new(Vegas2017::new(PAYLOAD)), &emulator_a(), Duration::from_secs(30));
        let tput = o.utilization() * 10.0;
        eprintln!(
            "vegas-2017 (Linux delayed ACKs): {tput:.2} Mbit/s, p50 {:.1}, p95 {:.1} ms, p50 after 25 s {:.1} ms",
            p(&o, 50.0, 0),
            p(&o, 95.0, 0),
            p(&o, 50.0, 25)
        );
        assert!(tput > 9.0, "throughput {tput}");
        // ~100 packets (1.2 ms each) of queue above 28 ms at the 95th percentile.
        let p95 = p(&o, 95.0, 0);
        assert!((125.0..=170.0).contains(&p95), "p95 {p95} ms");
        // Vegas does converge: alpha..beta packets by the end.
        let end = p(&o, 50.0, 25) - 29.2;
        assert!(end < 8.0 * 1.2, "queue at the end {end} ms");
    }

    #[test]
    fn the_overshoot_does_not_need_delayed_acks() {
        let o = run(
            Box::new(Vegas2017::with_ack_policy(PAYLOAD, AckPolicy::EveryPacket)),
            &emulator_a(),
            Duration::from_secs(30),
        );
        let p95 = p(&o, 95.0, 0);
        eprintln!("vegas-2017 (ACK every packet): {:.2} Mbit/s, p95 {p95:.1} ms", o.utilization() * 10.0);
        assert!((125.0..=170.0).contains(&p95), "p95 {p95} ms");
    }

    #[test]
    fn the_ack_that_ends_a_round_is_its_last_sample() {
        let mut v = every_packet();
        v.base_rtt_us = 50_001;
        v.idle = false;
        v.cwnd = 100;
        send(&mut v, ms(0), 0, 12);
        v.beg_snd_nxt = 10;
        // Packets 0..=9 queued (52 ms); 10 found the queue empty.
        for s in 0..10 {
            v.on_ack(&ack(ms(60), s, ms(52), 12));
        }
        assert_eq!(v.cnt_rtt, 10);
        v.on_ack(&ack(ms(61), 10, ms(50), 12));
        // The 50 ms sample entered the round it ended: minRTT = BaseRTT, diff = 0, slow
        // start goes on (110 -> 111), and the next round starts with no sample.
        assert!(v.in_slow_start());
        assert_eq!(v.cwnd_packets(), 111);
        assert_eq!((v.cnt_rtt, v.min_rtt_us), (0, NO_RTT));
        assert_eq!(v.beg_snd_nxt, 12);
    }
}
