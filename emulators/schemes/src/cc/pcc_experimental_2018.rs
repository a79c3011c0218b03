//! pcc_experimental as Pantheon ran it from 2018 to 2020: the UDT-based `pccclient send` /
//! `pccserver recv` of PCCproject/PCC-Uspace at commit `cd43e34` (StanfordSNR/pantheon
//! `23e738c`, `src/wrappers/pcc_experimental.py`). The law is `src/pcc/pcc_sender.cpp`
//! (`PccSender`) and `src/pcc/pcc_monitor_interval_queue.cpp` (`PccMonitorIntervalQueue`) as
//! built without `QUIC_PORT` (no Makefile defines it), driven by the rewritten UDT of
//! `src/core/core.cpp`. Rates are in bit/s, `Mbit` = 2^20 bits, times in integer µs.
//!
//! **Utility** (`CalculateUtility`, the non-`QUIC_PORT` one, i.e. the "version 2" utility with
//! an RTT gradient; the loss/RTT-ratio utility is only in the `QUIC_PORT` build): for an MI
//! with `n` packets, `S` bytes sent, `L` lost, `T = max(1 µs, last send − first send)`,
//! `x = 8S/T` and the RTT samples of its acknowledged packets in ACK order,
//! `infl = 2(Σ second half − Σ first half)/(Σ both)` over the first `2⌊k/2⌋` samples,
//! `p` = infl truncated to whole per cent and then to an even per cent, and
//! `u = (x/Mbit)^0.9 − (ℓ + 11330·S·p)·(x/Mbit)/n`, with `ℓ = n·(L/S)` if `L/S ≤ 0.03` else
//! `n·11.35·(L/S)`. The float → int truncations are x86's (NaN and overflow give `i32::MIN`),
//! as with no RTT sample at all. An MI whose first and last sends share a µs has no utility.
//!
//! **Monitor intervals** (`PccSender::OnPacketSent`, `PccMonitorIntervalQueue`): a new MI
//! starts with a send when no MI is "useful", or once `avg_rtt ≠ 0` and the send comes more
//! than `1.5·avg_rtt` after the current MI's first send (`ComputeMonitorDuration`: its
//! 10-packet floor divides bits by bit/s, i.e. is in seconds, and never binds). An MI is
//! useful once an RTT is known and fewer than 1 (4 while PROBING) useful MIs are queued. Every
//! ACK and loss is credited to the useful MIs holding its packet; an MI's utility is available
//! once all its bytes are acked or lost and its end time (start + duration) has passed; when
//! all useful MIs have one, the sender gets them in order and the queue drops everything up to
//! the last useful MI. `avg_rtt` is the 3/4 EWMA of the ACKs' RTT samples (`OnCongestionEvent`).
//!
//! **Modes** (`OnUtilityAvailable`): start at `10·1400·8 bit / 10 ms` = 11.2 Mbit/s.
//! STARTING doubles the rate while each useful MI's utility beats the last, else halves it and
//! enters PROBING; an ACK whose RTT sample exceeds `1.3×` the current MI's starting `avg_rtt`
//! also empties the queue, halves the rate and enters PROBING (`OnRttInflationInStarting`).
//! PROBING (`MaybeSetSendingRate`) sends 4 useful MIs at `rate·(1 ± 0.05)` in two pairs, each
//! pair's first direction drawn at random (`rand() % 2`), then the central rate; if both pairs
//! favour the same direction it moves to DECISION_MADE at `rate + Δ(pair 1)`, else probes again.
//! DECISION_MADE moves by `Δ(this MI, the last)` while Δ keeps its sign; when it flips, it
//! divides the rate by `1 ± min(rounds·0.02, 0.1)` (rounds stays 1 there: ±2 %) and probes.
//! The rate never drops below 2 Mbit at a decision.
//!
//! **Rate change** (`ComputeRateChange`): equal rates give +0.5 Mbit; otherwise the utility
//! gradient `g = Mbit·Δu/Δrate` (one-sample average), `Δ = g·Mbit` scaled by an amplifier `a`
//! (×(a+1) below 3, ×(2a−2) below 6, ×(4a−14) below 9, else ×(9a−50)); `a` grows by 0.5 (1
//! from 3) per same-sign step once a two-step swing buffer has drained, and resets with the
//! allowance on a sign change; `|Δ|` is capped at `(0.05 + 0.06·k)·rate`, `k` growing by one at
//! each capped step and shrinking by one otherwise (the growing maximum proportional change);
//! `|Δ| ≥ 0.5 Mbit`.
//!
//! **UDT** (`src/core/core.cpp` at `cd43e34`, rewritten for PCC, unlike the UDT 4 under
//! pcc-2017's Allegro, so none of [`super::pcc_2017`]'s ACK/ACK2/report modelling applies):
//! paced at one 1500-byte packet (`m_iMSS`, headers included) per `1500·8/rate` s
//! (`GetSendingInterval`); the receiver acknowledges every data packet at once
//! (`processData` → `SendAck`), the sender answers nothing (no ACK2, no NAK);
//! `ProcessAck` takes the packet's RTT, updates `RTT ← (7 RTT + r)/8` and
//! `RTTVar ← (7 RTTVar + |r − RTT|)/8` (from 100 ms and 50 ms) and hands the packet and `r` to
//! the sender; an ACK for a packet already declared lost is ignored; `checkTimers`, after
//! every incoming packet, declares lost each oldest packet out longer than
//! `2·RTT + 4·RTTVar`. UDT resends a lost packet as the next send (a new packet number, in
//! the MI then sending); our transport sends a new packet in that slot instead: the same count
//! and pacing on the wire, and the same size: UDT's send buffer cuts each 100 000-byte
//! `UDT::send` of pccclient into 68 blocks of 1456 bytes and one of 992 (every 69th packet is
//! short), and a resend is its lost block's size ([`SendBuffer`];
//! on the reference traces this gives 8 165 of 8 173 sends their size). A short packet takes a
//! whole pacing slot, as upstream's does. `rand()` is glibc's ([`Rng`], shared with pcc-2017),
//! seeded as `CUDT::connect` seeds it (the clock, or [`super::pcc_2017::SRAND_ENV`]) and past
//! the ISN's draw: given one seed, port and binary toss the same coins.
//!
//! **Precision.** The law computes in the binary's precision: `float` steps and utilities,
//! `double` rates multiplied by `float` factors or by `double` reciprocals (a probe and its
//! undoing do not give back the same rate, and two such "equal" rates give a gradient rather than
//! the minimum step, as upstream's do). Checked call by call: gdb traces of the reference
//! build's `PccSender` (`experiments/reference_traces.py`, test data in
//! `data/pcc-uspace-cd43e34`) replay in [`PccSender`] with every field bit for bit equal. The
//! port writes its own calls in the same format where [`TRACE_ENV`] names a directory.

use std::collections::VecDeque;
use std::time::Duration;

use super::call_trace::CallTrace;
use super::pcc_2017::{Coin, Rng, SendBuffer, SEND_CALL_BYTES, UDT_CONNECT, UDT_HEADER_BYTES};
use super::vivace_2018::trunc_i32 as x86_trunc;
use super::{AckEvent, CatchUp, ConnectLaw, Controller, LossEvent, LossRule, Pacer};

/// UDT's MSS (`m_iMSS`, default 1500): one IP packet, headers included; the pacing unit.
pub const MSS_BYTES: u64 = 1500;
/// UDP payload of a data packet: the MSS less the IPv4 and UDP headers.
pub const PAYLOAD_BYTES: u64 = MSS_BYTES - 28;
/// Bytes of one packet as the monitor intervals count them: the UDP payload less UDT's
/// 16-byte header (`m_iPayloadSize`).
pub const UDT_PAYLOAD_BYTES: i64 = (PAYLOAD_BYTES - UDT_HEADER_BYTES) as i64;
/// Bits per "megabit" in the law.
pub const MEGABIT: f64 = 1_048_576.0;
/// `PccSender(10000, 10, 10)` in `CUDT::CUDT`: 10 packets of 1400 bytes per 10 ms.
pub const INITIAL_RATE_BPS: f64 = 10.0 * 1400.0 * 8.0 * 1_000_000.0 / 10_000.0;
/// The utility's exponent (`kExponent`, a `float`).
const EXPONENT: f32 = 0.9;
pub const MIN_SENDING_RATE_BPS: f64 = 2.0 * MEGABIT;
pub const MIN_RATE_CHANGE_BPS: f64 = 524_288.0;
/// The rate steps are C++ `float`s, and so are `1 ± step`; the rate is a `double` multiplied by
/// that float or by the `double` `1.0 / (1 ± step)`, so a probe and its undoing leave the last
/// bits changed, as upstream's do (two "equal" rates then give a gradient, not the minimum step).
pub const PROBING_STEP: f32 = 0.05;
pub const DECISION_MADE_STEP: f32 = 0.02;
pub const MAX_DECISION_MADE_STEP: f32 = 0.10;
/// Useful MIs per probing round: two groups of two.
pub const PROBING_INTERVALS: usize = 4;
pub const RTT_TOLERANCE_STARTING: f32 = 0.3;
pub const INITIAL_MAX_PROPORTIONAL_CHANGE: f32 = 0.05;
pub const MAX_PROPORTIONAL_CHANGE_STEP: f32 = 0.06;
/// UDT's initial RTT and RTT variance (`CUDT::open`), µs.
pub const INITIAL_UDT_RTT_US: f64 = 100_000.0;
pub const INITIAL_UDT_RTTVAR_US: f64 = 50_000.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Starting,
    Probing,
    DecisionMade,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Increase,
    Decrease,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UtilityInfo {
    pub sending_rate: f64,
    pub utility: f32,
}

/// One monitor interval (`MonitorInterval`).
#[derive(Clone, Debug)]
pub struct MonitorInterval {
    pub sending_rate: f64,
    pub is_useful: bool,
    pub end_time: i64,
    pub first_sent: i64,
    pub last_sent: i64,
    pub first_packet: u64,
    pub last_packet: u64,
    pub bytes_sent: i64,
    pub bytes_acked: i64,
    pub bytes_lost: i64,
    pub rtt_on_start_us: i64,
    pub utility: f32,
    pub n_packets: i32,
    /// RTT samples of its acknowledged packets, in ACK order, µs.
    pub rtt_samples: Vec<i64>,
}

impl MonitorInterval {
    fn new(sending_rate: f64, is_useful: bool, rtt_us: i64, end_time: i64) -> Self {
        Self {
            sending_rate,
            is_useful,
            end_time,
            first_sent: 0,
            last_sent: 0,
            first_packet: 0,
            last_packet: 0,
            bytes_sent: 0,
            bytes_acked: 0,
            bytes_lost: 0,
            rtt_on_start_us: rtt_us,
            utility: 0.0,
            n_packets: 0,
            rtt_samples: Vec::new(),
        }
    }

    fn contains(&self, packet: u64) -> bool {
        packet >= self.first_packet && packet <= self.last_packet
    }

    fn utility_available(&self, now: i64) -> bool {
        now >= self.end_time && self.bytes_acked + self.bytes_lost == self.bytes_sent
    }
}

/// The utility of an MI (`CalculateUtility` without `QUIC_PORT`); None where its first and
/// last sends share a µs. Each step in the precision the binary computes it (its code, not
/// just the source's types: `pow(x, 0.9f)` is glibc's double `pow` of the float rate in Mbit,
/// `pow(penalty, 1)` folds to the float penalty, and the loss term is `(1.0f + loss) − 1.0` in
/// double), so that the gradients of nearly equal utilities come out as upstream's.
pub fn utility(mi: &MonitorInterval) -> Option<f32> {
    if mi.last_sent == mi.first_sent {
        return None;
    }
    let duration_us = (mi.last_sent - mi.first_sent).max(1);
    let secs = duration_us as f32 / 1_000_000.0;
    let bytes_lost = mi.bytes_lost as f32;
    let bytes_sent = mi.bytes_sent as f32;
    let rate_bps = bytes_sent * 8.0 / secs;
    let rate_mbit = rate_bps / MEGABIT as f32;
    let sending_factor = f64::from(rate_mbit).powf(f64::from(EXPONENT)) as f32;
    let half = mi.rtt_samples.len() / 2;
    let (mut first, mut second) = (0f32, 0f32);
    for i in 0..half {
        first += mi.rtt_samples[i] as f32;
        second += mi.rtt_samples[i + half] as f32;
    }
    let inflation = (2.0 * f64::from(second - first) / f64::from(first + second)) as f32;
    let percent = x86_trunc(f64::from(inflation * 100.0));
    let penalty = ((x86_trunc(f64::from(percent) / 100.0 * 100.0) / 2 * 2) as f64 / 100.0) as f32;
    let rtt_contribution = 11330.0 * bytes_sent * penalty;
    let loss_rate = bytes_lost / bytes_sent;
    let n = mi.n_packets as f32;
    let excess = f64::from(1.0 + loss_rate) - 1.0;
    let loss_contribution =
        if loss_rate <= 0.03 { f64::from(n) * excess } else { f64::from(n) * (11.35 * excess) } as f32;
    Some(sending_factor - (loss_contribution + rtt_contribution) * rate_mbit / n)
}

/// What one congestion event made of the queue.
enum QueueOutcome {
    Pending,
    Available(Vec<UtilityInfo>),
    Invalid,
}

/// `PccMonitorIntervalQueue`.
#[derive(Clone, Debug, Default)]
pub struct MonitorIntervalQueue {
    intervals: VecDeque<MonitorInterval>,
    num_useful: usize,
}

impl MonitorIntervalQueue {
    pub fn num_useful(&self) -> usize {
        self.num_useful
    }

    pub fn current(&self) -> Option<&MonitorInterval> {
        self.intervals.back()
    }

    pub fn len(&self) -> usize {
        self.intervals.len()
    }

    pub fn is_empty(&self) -> bool {
        self.intervals.is_empty()
    }

    fn enqueue(&mut self, mi: MonitorInterval) {
        self.num_useful += usize::from(mi.is_useful);
        self.intervals.push_back(mi);
    }

    fn on_packet_sent(&mut self, now: i64, packet: u64, bytes: i64) {
        let Some(mi) = self.intervals.back_mut() else { return };
        if mi.bytes_sent == 0 {
            mi.first_sent = now;
            mi.first_packet = packet;
        }
        mi.last_sent = now;
        mi.last_packet = packet;
        mi.bytes_sent += bytes;
        mi.n_packets += 1;
    }

    fn on_congestion_event(
        &mut self,
        acked: Option<(u64, i64)>,
        lost: Option<(u64, i64)>,
        rtt_us: i64,
        now: i64,
    ) -> QueueOutcome {
        if self.num_useful == 0 {
            return QueueOutcome::Pending;
        }
        let mut available = 0;
        let mut invalid = false;
        for mi in self.intervals.iter_mut().filter(|mi| mi.is_useful) {
            if mi.utility_available(now) {
                available += 1;
                continue;
            }
            if let Some((packet, bytes)) = lost {
                if mi.contains(packet) {
                    mi.bytes_lost += bytes;
                }
            }
            if let Some((packet, bytes)) = acked {
                if mi.contains(packet) {
                    mi.bytes_acked += bytes;
                    mi.rtt_samples.push(rtt_us);
                }
            }
            if mi.utility_available(now) {
                match utility(mi) {
                    Some(u) => mi.utility = u,
                    None => {
                        invalid = true;
                        break;
                    }
                }
                available += 1;
            }
        }
        if self.num_useful > available && !invalid {
            return QueueOutcome::Pending;
        }
        if invalid {
            return QueueOutcome::Invalid;
        }
        let infos = self
            .intervals
            .iter()
            .filter(|mi| mi.is_useful)
            .map(|mi| UtilityInfo { sending_rate: mi.sending_rate, utility: mi.utility })
            .collect();
        QueueOutcome::Available(infos)
    }

    /// Drops MIs from the head until no useful one is left.
    fn pop_useful(&mut self) {
        while self.num_useful > 0 {
            let mi = self.intervals.pop_front().expect("a useful MI is queued");
            self.num_useful -= usize::from(mi.is_useful);
        }
    }

    fn clear(&mut self) {
        self.intervals.clear();
        self.num_useful = 0;
    }
}

/// `PccSender` (built without `QUIC_PORT`).
#[derive(Clone, Debug)]
pub struct PccSender {
    pub mode: Mode,
    pub sending_rate: f64,
    pub latest_utility: UtilityInfo,
    monitor_duration: i64,
    pub direction: Direction,
    pub rounds: usize,
    pub queue: MonitorIntervalQueue,
    avg_gradient: f32,
    gradient_samples: VecDeque<f32>,
    /// 3/4 EWMA of the ACKs' RTT samples, µs (0 until the first).
    pub avg_rtt: i64,
    swing_buffer: usize,
    rate_change_amplifier: f32,
    rate_change_proportion_allowance: usize,
    pub previous_change: f64,
}

/// The sender's fields a trace records, in the reference tracer's order
/// (`experiments/reference_traces.py`, `PCC_EXPERIMENTAL_FIELDS`).
pub const TRACE_FIELDS: [&str; 14] = [
    "mode",
    "sending_rate",
    "latest_utility.sending_rate",
    "latest_utility.utility",
    "monitor_duration",
    "direction",
    "rounds",
    "num_useful",
    "avg_gradient",
    "avg_rtt",
    "swing_buffer",
    "rate_change_amplifier",
    "rate_change_proportion_allowance",
    "previous_change",
];

impl Default for PccSender {
    fn default() -> Self {
        Self::new()
    }
}

impl PccSender {
    /// [`TRACE_FIELDS`], as numbers (enums as the binary's: STARTING 0, PROBING 1,
    /// DECISION_MADE 2; INCREASE 0, DECREASE 1).
    pub fn trace_fields(&self) -> [f64; 14] {
        [
            match self.mode {
                Mode::Starting => 0.0,
                Mode::Probing => 1.0,
                Mode::DecisionMade => 2.0,
            },
            self.sending_rate,
            self.latest_utility.sending_rate,
            f64::from(self.latest_utility.utility),
            self.monitor_duration as f64,
            if self.direction == Direction::Increase { 0.0 } else { 1.0 },
            self.rounds as f64,
            self.queue.num_useful() as f64,
            f64::from(self.avg_gradient),
            self.avg_rtt as f64,
            self.swing_buffer as f64,
            f64::from(self.rate_change_amplifier),
            self.rate_change_proportion_allowance as f64,
            self.previous_change,
        ]
    }

    pub fn new() -> Self {
        Self {
            mode: Mode::Starting,
            sending_rate: INITIAL_RATE_BPS,
            latest_utility: UtilityInfo::default(),
            monitor_duration: 0,
            direction: Direction::Increase,
            rounds: 1,
            queue: MonitorIntervalQueue::default(),
            avg_gradient: 0.0,
            gradient_samples: VecDeque::new(),
            avg_rtt: 0,
            swing_buffer: 0,
            rate_change_amplifier: 0.0,
            rate_change_proportion_allowance: 0,
            previous_change: 0.0,
        }
    }

    /// `PacingRate`: the current MI's rate, bit/s.
    pub fn pacing_rate_bps(&self) -> f64 {
        self.queue.current().map_or(self.sending_rate, |mi| mi.sending_rate)
    }

    /// `OnPacketSent`: packet number `packet` of `bytes` left at `now` (µs).
    pub fn on_packet_sent(&mut self, now: i64, packet: u64, bytes: i64, coin: &mut impl Coin) {
        let start = self.queue.num_useful() == 0
            || (self.avg_rtt != 0
                && self.queue.current().is_some_and(|mi| now - mi.first_sent > self.monitor_duration));
        if start {
            self.maybe_set_sending_rate(coin);
            self.monitor_duration = (1.5 * self.avg_rtt as f64).max(10.0 * 8.0 * 1400.0 / self.sending_rate) as i64;
            let useful = self.create_useful_interval();
            let mi = MonitorInterval::new(self.sending_rate, useful, self.avg_rtt, now + self.monitor_duration);
            self.queue.enqueue(mi);
        }
        self.queue.on_packet_sent(now, packet, bytes);
    }

    /// `OnCongestionEvent` with one acknowledged packet (`rtt_us` its RTT sample) or one lost
    /// one (`rtt_us` = 0, as UDT passes for losses).
    pub fn on_congestion_event(&mut self, now: i64, rtt_us: i64, acked: Option<(u64, i64)>, lost: Option<(u64, i64)>) {
        if rtt_us != 0 {
            self.avg_rtt =
                if self.avg_rtt == 0 { rtt_us } else { ((self.avg_rtt as f64 * 3.0 + rtt_us as f64) / 4.0) as i64 };
            if self.mode == Mode::Starting {
                if let Some(mi) = self.queue.current() {
                    let limit = ((1.0 + RTT_TOLERANCE_STARTING) * mi.rtt_on_start_us as f32) as i64;
                    if mi.rtt_on_start_us != 0 && rtt_us > limit {
                        self.queue.clear();
                        self.enter_probing();
                        return;
                    }
                }
            }
        }
        match self.queue.on_congestion_event(acked, lost, rtt_us, now) {
            QueueOutcome::Pending => {}
            QueueOutcome::Available(infos) => {
                self.on_utility_available(&infos);
                self.queue.pop_useful();
            }
            QueueOutcome::Invalid => self.queue.pop_useful(),
        }
    }

    fn create_useful_interval(&self) -> bool {
        if self.avg_rtt == 0 {
            return false;
        }
        let max_useful = if self.mode == Mode::Probing { PROBING_INTERVALS } else { 1 };
        self.queue.num_useful() < max_useful
    }

    fn maybe_set_sending_rate(&mut self, coin: &mut impl Coin) {
        let useful = self.queue.num_useful();
        if self.mode != Mode::Probing
            || (useful == PROBING_INTERVALS && !self.queue.current().is_some_and(|mi| mi.is_useful))
        {
            return;
        }
        if useful != 0 {
            // Back to the central rate.
            self.undo_probe();
            if useful == PROBING_INTERVALS {
                return;
            }
        }
        self.direction = if useful.is_multiple_of(2) {
            if coin.flip() {
                Direction::Increase
            } else {
                Direction::Decrease
            }
        } else {
            match self.direction {
                Direction::Increase => Direction::Decrease,
                Direction::Decrease => Direction::Increase,
            }
        };
        self.sending_rate *= match self.direction {
            Direction::Increase => f64::from(1.0 + PROBING_STEP),
            Direction::Decrease => f64::from(1.0 - PROBING_STEP),
        };
    }

    fn undo_probe(&mut self) {
        self.sending_rate *= match self.direction {
            Direction::Increase => 1.0 / f64::from(1.0 + PROBING_STEP),
            Direction::Decrease => 1.0 / f64::from(1.0 - PROBING_STEP),
        };
    }

    fn can_make_decision(infos: &[UtilityInfo]) -> bool {
        if infos.len() < PROBING_INTERVALS {
            return false;
        }
        let votes: Vec<bool> = infos[..PROBING_INTERVALS]
            .chunks(2)
            .map(|p| {
                if p[0].utility > p[1].utility {
                    p[0].sending_rate > p[1].sending_rate
                } else {
                    p[0].sending_rate < p[1].sending_rate
                }
            })
            .collect();
        votes.iter().all(|&v| v == votes[0])
    }

    fn enter_probing(&mut self) {
        match self.mode {
            Mode::Starting => self.sending_rate *= 0.5,
            Mode::DecisionMade => {
                let step = (self.rounds as f32 * DECISION_MADE_STEP).min(MAX_DECISION_MADE_STEP);
                self.sending_rate *= match self.direction {
                    Direction::Increase => 1.0 / f64::from(1.0 + step),
                    Direction::Decrease => 1.0 / f64::from(1.0 - step),
                };
            }
            Mode::Probing => {
                if self.queue.current().is_some_and(|mi| mi.is_useful) {
                    self.undo_probe();
                }
            }
        }
        if self.mode == Mode::Probing {
            self.rounds += 1;
        } else {
            self.mode = Mode::Probing;
            self.rounds = 1;
        }
    }

    fn update_average_gradient(&mut self, gradient: f32) {
        // One sample averaged (`kAvgGradientSampleSize`): the running sum swaps old for new.
        if self.gradient_samples.is_empty() {
            self.avg_gradient = gradient;
        } else if let Some(oldest) = self.gradient_samples.pop_front() {
            self.avg_gradient -= oldest;
            self.avg_gradient += gradient;
        }
        self.gradient_samples.push_back(gradient);
    }

    /// `ComputeRateChange`, bit/s.
    pub fn compute_rate_change(&mut self, a: UtilityInfo, b: UtilityInfo) -> f64 {
        if a.sending_rate == b.sending_rate {
            return MIN_RATE_CHANGE_BPS;
        }
        let gradient = MEGABIT as f32 * (a.utility - b.utility) / (a.sending_rate - b.sending_rate) as f32;
        self.update_average_gradient(gradient);
        let mut change = f64::from(self.avg_gradient * MEGABIT as f32);
        let positive = |x: f64| x > 0.0;
        if positive(change) != positive(self.previous_change) {
            self.rate_change_amplifier = 0.0;
            self.rate_change_proportion_allowance = 0;
            if self.swing_buffer < 2 {
                self.swing_buffer += 1;
            }
        }
        let amp = self.rate_change_amplifier;
        let factor = if amp < 3.0 {
            amp + 1.0
        } else if amp < 6.0 {
            2.0 * amp - 2.0
        } else if amp < 9.0 {
            4.0 * amp - 14.0
        } else {
            9.0 * amp - 50.0
        };
        change *= f64::from(factor);
        if positive(change) == positive(self.previous_change) {
            if self.swing_buffer == 0 {
                self.rate_change_amplifier += if self.rate_change_amplifier < 3.0 { 0.5 } else { 1.0 };
            }
            self.swing_buffer = self.swing_buffer.saturating_sub(1);
        }
        let max_ratio = INITIAL_MAX_PROPORTIONAL_CHANGE
            + self.rate_change_proportion_allowance as f32 * MAX_PROPORTIONAL_CHANGE_STEP;
        let ratio = (change as f32 / self.sending_rate as f32).abs();
        if ratio > max_ratio {
            self.rate_change_proportion_allowance += 1;
            let cap = f64::from(max_ratio) * self.sending_rate;
            change = if change < 0.0 { -cap } else { cap };
        } else {
            self.rate_change_proportion_allowance = self.rate_change_proportion_allowance.saturating_sub(1);
        }
        if positive(change) != positive(self.previous_change) {
            self.rate_change_amplifier = 0.0;
            self.rate_change_proportion_allowance = 0;
        }
        if change < 0.0 && change > -MIN_RATE_CHANGE_BPS {
            change = -MIN_RATE_CHANGE_BPS;
        } else if change > 0.0 && change < MIN_RATE_CHANGE_BPS {
            change = MIN_RATE_CHANGE_BPS;
        }
        change
    }

    /// `OnUtilityAvailable`.
    pub fn on_utility_available(&mut self, infos: &[UtilityInfo]) {
        match self.mode {
            Mode::Starting => {
                if infos[0].utility > self.latest_utility.utility {
                    self.sending_rate *= 2.0;
                    self.latest_utility = infos[0];
                    self.rounds += 1;
                } else {
                    self.enter_probing();
                }
            }
            Mode::Probing => {
                if Self::can_make_decision(infos) {
                    let (a, b) = (infos[0], infos[1]);
                    let a_wins = a.utility > b.utility;
                    let a_higher = a.sending_rate > b.sending_rate;
                    self.direction = if a_wins == a_higher { Direction::Increase } else { Direction::Decrease };
                    let (c, d) = (infos[PROBING_INTERVALS - 2], infos[PROBING_INTERVALS - 1]);
                    self.latest_utility = if c.utility > d.utility { c } else { d };
                    let mut change = self.compute_rate_change(a, b);
                    if self.sending_rate + change < MIN_SENDING_RATE_BPS {
                        change = MIN_SENDING_RATE_BPS - self.sending_rate;
                    }
                    self.previous_change = change;
                    self.sending_rate += change;
                    self.mode = Mode::DecisionMade;
                    self.rounds = 1;
                } else {
                    self.enter_probing();
                }
            }
            Mode::DecisionMade => {
                let mut change = self.compute_rate_change(infos[0], self.latest_utility);
                if self.sending_rate + change < MIN_SENDING_RATE_BPS {
                    change = MIN_SENDING_RATE_BPS - self.sending_rate;
                }
                if (change > 0.0) == (self.previous_change > 0.0) {
                    self.previous_change = change;
                    self.sending_rate += change;
                    self.latest_utility = infos[0];
                } else {
                    self.enter_probing();
                }
            }
        }
    }
}

/// A packet UDT's tracker still waits for.
#[derive(Clone, Copy, Debug)]
struct Outstanding {
    seq: u64,
    sent_us: i64,
    /// The block's bytes (UDT payload).
    bytes: i64,
    done: bool,
}

/// Names a directory where the controller writes its law's calls ([`CallTrace`]), in the
/// format of the reference tracer's (`experiments/reference_traces.py pcc_experimental`, which
/// reads the same variable in the reference wrapper): each call and the law's state at its
/// entry, the port's calls and the binary's line for line.
pub const TRACE_ENV: &str = "PCC_EXPERIMENTAL_TRACE";

/// Writes `call` and the law's state at its entry, as the reference tracer does.
fn trace_call(trace: &mut CallTrace, call: std::fmt::Arguments, law: &PccSender) {
    trace.write_line(|| {
        let state: Vec<String> = law.trace_fields().iter().map(|v| format!("{v:?}")).collect();
        format!("{call} | {}", state.join(" "))
    });
}

/// PCC-Uspace's UDT sender around [`PccSender`].
#[derive(Debug)]
pub struct PccExperimental2018 {
    law: PccSender,
    rng: Rng,
    /// UDT's `m_iRTT` and `m_iRTTVar`, µs.
    rtt_us: f64,
    rttvar_us: f64,
    outstanding: VecDeque<Outstanding>,
    blocks: SendBuffer,
    trace: CallTrace,
}

fn micros(t: Duration) -> i64 {
    t.as_micros() as i64
}

impl PccExperimental2018 {
    /// `mss` is ignored: upstream's packets are 1500-byte IP packets ([`PAYLOAD_BYTES`]).
    pub fn new(_mss: u64) -> Self {
        Self::with_seed(0x5eed_2018)
    }

    /// `seed` is `srand`'s in `CUDT::connect` (the law's coin tosses follow the ISN's draw).
    pub fn with_seed(seed: u64) -> Self {
        Self {
            law: PccSender::new(),
            rng: Rng::after_udt_connect(seed),
            rtt_us: INITIAL_UDT_RTT_US,
            rttvar_us: INITIAL_UDT_RTTVAR_US,
            outstanding: VecDeque::new(),
            blocks: SendBuffer::new(UDT_PAYLOAD_BYTES, SEND_CALL_BYTES),
            trace: CallTrace::new(TRACE_ENV, 1 << 16),
        }
    }

    pub fn law(&self) -> &PccSender {
        &self.law
    }

    /// Packet number of a sequence number (UDT's ids count from 1; 0 means "unknown").
    fn packet(seq: u64) -> u64 {
        seq + 1
    }

    /// `2·RTT + 4·RTTVar`, µs, truncated.
    fn loss_threshold_us(&self) -> i64 {
        (2.0 * self.rtt_us + 4.0 * self.rttvar_us) as i64
    }

    /// `checkTimers`: every oldest packet out longer than the threshold is lost.
    fn check_losses(&mut self, now: i64) {
        let threshold = self.loss_threshold_us();
        while let Some(p) = self.outstanding.front().copied() {
            if now - p.sent_us <= threshold {
                break;
            }
            self.outstanding.pop_front();
            self.blocks.on_lost(p.bytes);
            let lost = (Self::packet(p.seq), p.bytes);
            trace_call(&mut self.trace, format_args!("C {now} 0 - {}:0:{}", lost.0, lost.1), &self.law);
            self.law.on_congestion_event(now, 0, None, Some(lost));
            self.pop_done();
        }
    }

    fn pop_done(&mut self) {
        while self.outstanding.front().is_some_and(|p| p.done) {
            self.outstanding.pop_front();
        }
    }
}

impl Controller for PccExperimental2018 {
    fn name(&self) -> &'static str {
        "pcc_experimental-2018"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        let now = micros(ack.now);
        let sample = micros(ack.rtt);
        self.rtt_us = (7.0 * self.rtt_us + sample as f64) / 8.0;
        self.rttvar_us = (7.0 * self.rttvar_us + (sample as f64 - self.rtt_us).abs()) / 8.0;
        let first = self.outstanding.front().map(|p| p.seq);
        if let Some(idx) = first.and_then(|f| ack.seq.checked_sub(f)).map(|i| i as usize) {
            if let Some(p) = self.outstanding.get_mut(idx).filter(|p| !p.done && p.seq == ack.seq) {
                p.done = true;
                let acked = (Self::packet(ack.seq), p.bytes);
                self.pop_done();
                trace_call(&mut self.trace, format_args!("C {now} {sample} {}:{}:0 -", acked.0, acked.1), &self.law);
                self.law.on_congestion_event(now, sample, Some(acked), None);
            }
        }
        self.check_losses(now);
    }

    /// Losses are the tracker's own (`check_losses`); the transport's only keep its books.
    fn on_loss(&mut self, _loss: &LossEvent) {}

    fn on_send(&mut self, now: Duration, seq: u64) {
        let now = micros(now);
        let bytes = self.blocks.on_send();
        self.outstanding.push_back(Outstanding { seq, sent_us: now, bytes, done: false });
        trace_call(&mut self.trace, format_args!("P {now} {} {bytes}", Self::packet(seq)), &self.law);
        self.law.on_packet_sent(now, Self::packet(seq), bytes, &mut self.rng);
    }

    fn cwnd(&self) -> u64 {
        // The tracker's 100 000-packet limit never binds.
        u64::MAX / 4
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        // One MSS per MSS·8/rate seconds, in bytes of UDP payload per second.
        PAYLOAD_BYTES as f64 * self.law.pacing_rate_bps() / (MSS_BYTES as f64 * 8.0)
    }

    /// UDT's handshake: a flow that cannot connect in 3 s exits, as the upstream's did.
    fn connect_law(&self) -> Option<ConnectLaw> {
        Some(UDT_CONNECT)
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(PAYLOAD_BYTES)
    }

    /// The next block with UDT's header: the oldest lost one, else the stream's next.
    fn next_payload_bytes(&self) -> Option<u64> {
        Some(self.blocks.next_block_bytes() as u64 + UDT_HEADER_BYTES)
    }

    fn pacer(&self) -> Pacer {
        // The rewritten UDT's `CUDT::packData` banks lateness in `m_ullTimeDiff` and sends
        // early until it is spent; its send queue busy-waits as the older UDT's.
        Pacer { catch_up: CatchUp::Unbounded, busy_wait: true, whole_ms_poll: false }
    }

    fn timer_deadline(&self) -> Option<Duration> {
        let p = self.outstanding.front()?;
        Some(Duration::from_micros((p.sent_us + self.loss_threshold_us() + 1) as u64))
    }

    fn on_timer(&mut self, now: Duration) {
        self.check_losses(micros(now));
    }

    /// Only the timeout declares loss upstream.
    fn loss_rule(&self) -> LossRule {
        LossRule::Reorder(1 << 40)
    }

    fn loss_timeout(&self) -> Option<Duration> {
        Some(Duration::from_micros((self.loss_threshold_us() + 1) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{run, Link};

    const MS: i64 = 1000;

    /// A path for the law alone: each packet paced at the law's rate and acknowledged
    /// `rtt(sent time)` later, or reported lost where `lose(packet)` says so.
    struct Path {
        now: i64,
        next_send: i64,
        next_packet: u64,
        /// (event time, packet, rtt sample; 0 = lost)
        pending: VecDeque<(i64, u64, i64)>,
        rng: Rng,
    }

    impl Path {
        fn new() -> Self {
            Self { now: 0, next_send: 0, next_packet: 1, pending: VecDeque::new(), rng: Rng::new(1) }
        }

        fn run(&mut self, law: &mut PccSender, until: i64, rtt: impl Fn(i64) -> i64, lose: impl Fn(u64) -> bool) {
            loop {
                let ack_at = self.pending.front().map(|e| e.0);
                if ack_at.is_some_and(|t| t <= self.next_send) {
                    let (t, packet, sample) = self.pending.pop_front().unwrap();
                    if t > until {
                        self.pending.push_front((t, packet, sample));
                        break;
                    }
                    self.now = t;
                    if sample == 0 {
                        law.on_congestion_event(t, 0, None, Some((packet, UDT_PAYLOAD_BYTES)));
                    } else {
                        law.on_congestion_event(t, sample, Some((packet, UDT_PAYLOAD_BYTES)), None);
                    }
                } else {
                    if self.next_send > until {
                        break;
                    }
                    self.now = self.next_send;
                    let packet = self.next_packet;
                    self.next_packet += 1;
                    law.on_packet_sent(self.now, packet, UDT_PAYLOAD_BYTES, &mut self.rng);
                    let r = rtt(self.now);
                    let event = if lose(packet) { (self.now + 2 * r, packet, 0) } else { (self.now + r, packet, r) };
                    let at = self.pending.partition_point(|e| e.0 <= event.0);
                    self.pending.insert(at, event);
                    let period_us = MSS_BYTES as f64 * 8.0 * 1e6 / law.pacing_rate_bps();
                    self.next_send = self.now + period_us.max(1.0) as i64;
                }
            }
        }
    }

    fn mi(n: i32, lost: i32, duration_us: i64, rtts: &[i64]) -> MonitorInterval {
        let mut m = MonitorInterval::new(10.0 * MEGABIT, true, 50 * MS, duration_us);
        m.first_sent = 0;
        m.last_sent = duration_us;
        m.n_packets = n;
        m.bytes_sent = n as i64 * UDT_PAYLOAD_BYTES;
        m.bytes_lost = lost as i64 * UDT_PAYLOAD_BYTES;
        m.bytes_acked = m.bytes_sent - m.bytes_lost;
        m.rtt_samples = rtts.to_vec();
        m
    }

    /// The `rand()`s PCC-Uspace cd43e34's pccclient drew at `pcc_sender.cpp:642` (its probe
    /// directions, `rand() % 2 == 1` for INCREASE), read under gdb at the call's return with
    /// `srand` given 12345 (experiments/README: "one seed, both sides").
    #[test]
    fn seeded_as_the_binary_the_port_draws_its_probe_directions() {
        let binary = [858300821, 357768173, 455528251, 133005921, 116285904, 591987137, 102557902, 689413528];
        let mut p = PccExperimental2018::with_seed(12345);
        assert_eq!(binary.map(|_| p.rng.rand()), binary);
    }

    #[test]
    fn utility_is_rate_to_the_0_9_less_loss_and_rtt_gradient_terms() {
        // 100 packets of 1456 bytes in 0.1 s: x = 11.648 Mbit/s of 10^6, 11.1084 of 2^20.
        let x: f64 = 100.0 * 1456.0 * 8.0 / 0.1 / MEGABIT;
        let flat = utility(&mi(100, 0, 100_000, &[50_000; 100])).unwrap();
        assert!((f64::from(flat) - x.powf(0.9)).abs() < 1e-4, "{flat}");
        // 2 % loss (<= 3 %): n·L/S·x/n = 0.02·x below the flat utility.
        let u = utility(&mi(100, 2, 100_000, &[50_000; 98])).unwrap();
        assert!((f64::from(u) - (x.powf(0.9) - 0.02 * x)).abs() < 1e-3, "{u}");
        // 5 % loss: 11.35·0.05·x below.
        let u = utility(&mi(100, 5, 100_000, &[50_000; 95])).unwrap();
        assert!((f64::from(u) - (x.powf(0.9) - 11.35 * 0.05 * x)).abs() < 1e-3, "{u}");
        // RTT 1 % up from the first half to the second: truncated to an even per cent, 0.
        let mut rtts = vec![50_000; 50];
        rtts.extend([50_500; 50]);
        let u = utility(&mi(100, 0, 100_000, &rtts)).unwrap();
        assert_eq!(u, flat);
        // 3 % up: 2 % counts, 11330·S·0.02·x/n = 11330·1456·0.02·x below.
        let mut rtts = vec![50_000; 50];
        rtts.extend([51_530; 50]);
        let u = utility(&mi(100, 0, 100_000, &rtts)).unwrap();
        let expect = x.powf(0.9) - 11330.0 * 1456.0 * 0.02 * x;
        assert!((f64::from(u) / expect - 1.0).abs() < 1e-5, "{u} vs {expect}");
        // Falling RTT rewards as much: -3 % gives -2 %.
        let mut rtts = vec![51_530; 50];
        rtts.extend([50_000; 50]);
        let u = utility(&mi(100, 0, 100_000, &rtts)).unwrap();
        assert!(f64::from(u) > 1e5, "{u}");
        // No RTT sample at all: 0/0, which x86 truncates to i32::MIN: an enormous reward.
        let u = utility(&mi(100, 100, 100_000, &[])).unwrap();
        assert!(u > 1e12, "{u}");
        // First and last send in the same µs: no utility.
        assert_eq!(utility(&mi(100, 0, 0, &[50_000; 100])), None);
    }

    #[test]
    fn start_up_doubles_per_useful_interval_while_utility_rises() {
        let mut law = PccSender::new();
        let mut path = Path::new();
        assert_eq!(law.pacing_rate_bps(), 11_200_000.0);
        let mut rates = vec![law.sending_rate];
        let mut t = 0;
        while t < 700 * MS {
            t += MS;
            path.run(&mut law, t, |_| 50 * MS, |_| false);
            if law.sending_rate != *rates.last().unwrap() {
                rates.push(law.sending_rate);
            }
        }
        assert_eq!(law.mode, Mode::Starting);
        assert!(rates.len() >= 4, "{rates:?}");
        for w in rates.windows(2) {
            assert_eq!(w[1], 2.0 * w[0], "{rates:?}");
        }
        // No MI is useful before the first RTT sample; after it, one at a time.
        assert_eq!(law.avg_rtt, 50 * MS);
        assert!(law.queue.num_useful() <= 1);
    }

    #[test]
    fn start_up_ends_at_half_rate_on_rtt_inflation() {
        let mut law = PccSender::new();
        let mut path = Path::new();
        path.run(&mut law, 400 * MS, |_| 40 * MS, |_| false);
        assert_eq!(law.mode, Mode::Starting);
        // From now on every packet sees 1.5x the RTT: its ACK ends start-up at once.
        let mut before = law.sending_rate;
        let mut t = 400 * MS;
        while law.mode == Mode::Starting && t < 600 * MS {
            before = law.sending_rate;
            t += MS / 10;
            path.run(&mut law, t, |t| if t >= 400 * MS { 60 * MS } else { 40 * MS }, |_| false);
        }
        assert_eq!(law.mode, Mode::Probing);
        assert!(t > 460 * MS, "the first ACK of a packet sent after 400 ms");
        // Half the rate is the central one; the first probe may already have left.
        let ratio = law.sending_rate / (before / 2.0);
        assert!([0.95, 1.0, 1.05].iter().any(|r| (ratio - r).abs() < 1e-12), "{ratio}");
        assert!(law.queue.len() <= 1, "the queue was emptied");
    }

    #[test]
    fn start_up_ends_at_half_rate_when_utility_falls() {
        let mut law = PccSender::new();
        let mut path = Path::new();
        path.run(&mut law, 300 * MS, |_| 40 * MS, |_| false);
        assert_eq!(law.mode, Mode::Starting);
        // 10 % loss from here: the next utility falls, and the doubled rate is halved.
        path.run(&mut law, 1000 * MS, |_| 40 * MS, |p| p % 10 == 0);
        assert_ne!(law.mode, Mode::Starting);
    }

    #[test]
    fn probing_sends_two_randomly_ordered_pairs_then_the_central_rate() {
        let mut law = PccSender::new();
        law.mode = Mode::Probing;
        law.avg_rtt = 20 * MS;
        let r = 10.0 * MEGABIT;
        law.sending_rate = r;
        let mut rng = Rng::new(9);
        // A send every 1 ms: MIs of 1.5 x 20 ms each.
        for (i, t) in (0..200).map(|k| k * MS).enumerate() {
            law.on_packet_sent(t, i as u64 + 1, UDT_PAYLOAD_BYTES, &mut rng);
        }
        let mis: Vec<&MonitorInterval> = law.queue.intervals.iter().collect();
        assert!(mis.len() >= 6);
        let useful: Vec<f64> = mis.iter().filter(|m| m.is_useful).map(|m| m.sending_rate / r).collect();
        assert_eq!(useful.len(), 4);
        for pair in useful.chunks(2) {
            let mut p = [pair[0], pair[1]];
            p.sort_by(|a, b| a.partial_cmp(b).unwrap());
            // 1 ± 0.05 in `float`: 0.949999988…, 1.049999952…
            assert!((p[0] - 0.95).abs() < 1e-7 && (p[1] - 1.05).abs() < 1e-7, "{useful:?}");
        }
        assert!(mis[..4].iter().all(|m| m.is_useful));
        for m in &mis[4..] {
            assert!(!m.is_useful);
            assert!((m.sending_rate / r - 1.0).abs() < 1e-12);
        }
    }

    fn info(rate: f64, utility: f32) -> UtilityInfo {
        UtilityInfo { sending_rate: rate, utility }
    }

    #[test]
    fn a_consistent_probe_moves_by_the_capped_gradient() {
        let r = 10.0 * MEGABIT;
        let mut law = PccSender::new();
        law.mode = Mode::Probing;
        law.sending_rate = r;
        // Both pairs favour the higher rate: gradient 1 per Mbit -> 1 Mbit, capped at 5 %.
        law.on_utility_available(&[
            info(1.05 * r, 10.0),
            info(0.95 * r, 9.0),
            info(0.95 * r, 9.0),
            info(1.05 * r, 10.5),
        ]);
        assert_eq!(law.mode, Mode::DecisionMade);
        assert_eq!(law.direction, Direction::Increase);
        assert!((law.sending_rate / r - 1.05).abs() < 1e-6, "{}", law.sending_rate / r);
        assert_eq!(law.latest_utility, info(1.05 * r, 10.5));
        // Pairs that disagree: probe again from the same rate.
        let mut law = PccSender::new();
        law.mode = Mode::Probing;
        law.sending_rate = r;
        law.on_utility_available(&[
            info(1.05 * r, 10.0),
            info(0.95 * r, 9.0),
            info(0.95 * r, 10.0),
            info(1.05 * r, 9.0),
        ]);
        assert_eq!(law.mode, Mode::Probing);
        assert_eq!(law.rounds, 2);
    }

    #[test]
    fn the_maximum_proportional_change_grows_while_steps_are_capped() {
        let r = 10.0 * MEGABIT;
        let mut law = PccSender::new();
        law.mode = Mode::DecisionMade;
        law.sending_rate = r;
        law.previous_change = 1.0;
        // A steep positive gradient every time: each step is capped, the cap growing by 6 %.
        let mut ratios = Vec::new();
        for _ in 0..4 {
            let c = law.compute_rate_change(info(1.01 * r, 100.0), info(r, 0.0));
            law.previous_change = c;
            ratios.push(c / r);
        }
        for (got, want) in ratios.iter().zip([0.05, 0.11, 0.17, 0.23]) {
            assert!((got - want).abs() < 1e-6, "{ratios:?}");
        }
        // A reversal starts again from 5 %.
        let c = law.compute_rate_change(info(1.01 * r, -100.0), info(r, 0.0));
        assert!((c / r + 0.05).abs() < 1e-6, "{}", c / r);
        // A tiny gradient still moves 0.5 Mbit; equal rates move +0.5 Mbit.
        law.previous_change = c;
        let c = law.compute_rate_change(info(1.01 * r, -1e-6), info(r, 0.0));
        assert_eq!(c, -MIN_RATE_CHANGE_BPS);
        assert_eq!(law.compute_rate_change(info(r, 5.0), info(r, 1.0)), MIN_RATE_CHANGE_BPS);
    }

    #[test]
    fn the_amplifier_grows_the_uncapped_step_after_the_swing_buffer_drains() {
        let r = 100.0 * MEGABIT;
        let mut law = PccSender::new();
        law.sending_rate = r;
        law.previous_change = -1.0;
        // Gradient 1 per Mbit -> 1 Mbit (1 % of the rate, under every cap).
        let g = |law: &mut PccSender| {
            let c = law.compute_rate_change(info(1.1 * r, 10.0), info(r, 0.0));
            law.previous_change = c;
            c / MEGABIT
        };
        // A sign change fills the swing buffer by one; the next same-sign step drains it; from
        // the one after, the amplifier grows by 0.5 per step, each growth felt at the next
        // step: x1, x1, x1, x1.5, x2, x2.5, x3, x3.5, then x4 (a = 3: 2a - 2).
        let steps: Vec<f64> = (0..9).map(|_| g(&mut law)).collect();
        for (got, want) in steps.iter().zip([1.0, 1.0, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]) {
            assert!((got - want).abs() < 1e-3, "{steps:?}");
        }
    }

    #[test]
    fn a_reversed_decision_steps_back_two_per_cent_and_probes() {
        let r = 10.0 * MEGABIT;
        let mut law = PccSender::new();
        law.mode = Mode::DecisionMade;
        law.direction = Direction::Increase;
        law.sending_rate = r;
        law.previous_change = 0.5 * MEGABIT;
        law.latest_utility = info(0.95 * r, 10.0);
        // Higher rate, lower utility: the change turns negative.
        law.on_utility_available(&[info(r, 9.0)]);
        assert_eq!(law.mode, Mode::Probing);
        assert!((law.sending_rate / r - 1.0 / 1.02).abs() < 1e-7, "{}", law.sending_rate / r);
        // Still rising: keep going the same way.
        let mut law = PccSender::new();
        law.mode = Mode::DecisionMade;
        law.sending_rate = r;
        law.previous_change = 0.5 * MEGABIT;
        law.latest_utility = info(0.95 * r, 9.0);
        law.on_utility_available(&[info(r, 10.0)]);
        assert_eq!(law.mode, Mode::DecisionMade);
        assert!(law.sending_rate > r);
        assert_eq!(law.latest_utility, info(r, 10.0));
    }

    fn ack(now_ms: u64, seq: u64, rtt_ms: u64) -> AckEvent {
        let ms = Duration::from_millis;
        AckEvent::lone(ms(now_ms), seq, ms(now_ms - rtt_ms), PAYLOAD_BYTES)
    }

    #[test]
    fn udt_declares_loss_after_twice_rtt_plus_four_rttvar() {
        let ms = Duration::from_millis;
        let mut p = PccExperimental2018::with_seed(1);
        assert_eq!(p.payload_bytes(), Some(1472));
        p.on_send(ms(0), 0);
        p.on_send(ms(1), 1);
        // 100 ms and 50 ms to start with: 400 ms.
        assert_eq!(p.timer_deadline(), Some(Duration::from_micros(400_001)));
        p.on_ack(&ack(20, 0, 20));
        // RTT (7·100 + 20)/8 = 90 ms, RTTVar (7·50 + 70)/8 = 52.5 ms: 390 ms after packet 1.
        assert_eq!(p.timer_deadline(), Some(Duration::from_micros(1_000 + 390_001)));
        p.on_timer(Duration::from_micros(391_001));
        assert!(p.outstanding.is_empty());
        assert_eq!(p.timer_deadline(), None);
        // Its late ACK changes the RTT but is no news to the law.
        let queued: i64 = p.law.queue.intervals.iter().map(|m| m.bytes_acked + m.bytes_lost).sum();
        p.on_ack(&ack(500, 1, 499));
        let after: i64 = p.law.queue.intervals.iter().map(|m| m.bytes_acked + m.bytes_lost).sum();
        assert_eq!(queued, after);
        assert!(p.rtt_us > 90_000.0);
    }

    #[test]
    fn pacing_is_one_1500_byte_packet_per_period() {
        let p = PccExperimental2018::with_seed(1);
        // 11.2 Mbit/s of 1500-byte packets: 933.3 packets/s of 1472 payload bytes.
        let pps = p.pacing_rate(Duration::ZERO) / PAYLOAD_BYTES as f64;
        assert!((pps - 11_200_000.0 / 12_000.0).abs() < 1e-6, "{pps}");
    }

    #[test]
    fn settles_near_the_link_rate_with_a_short_queue() {
        let ms = Duration::from_millis;
        let link = Link { rate_bits_per_s: 12e6, one_way_delay: ms(20), queue_packets: 100 };
        let out = run(Box::new(PccExperimental2018::with_seed(5)), &link, Duration::from_secs(30));
        let u = out.utilization();
        let p95 = out.delay_percentile_ms(95.0, Duration::from_secs(10));
        eprintln!("utilization {u} p95 {p95}");
        assert!(u > 0.8, "utilization {u}");
        assert!(p95 < 20.0 + 100.0, "p95 {p95}");
    }

    /// Tosses that reproduce the binary's probe directions: the direction it held after the
    /// call being replayed.
    struct Oracle(bool);

    impl Coin for Oracle {
        fn flip(&mut self) -> bool {
            self.0
        }
    }

    /// Feeds a trace of the binary's `OnPacketSent` and `OnCongestionEvent` calls to the
    /// law; the first mismatches of its state before each call, as text.
    fn replay(trace: &str) -> Vec<String> {
        // Each call with the binary's state at its entry (the lines give only what changed).
        let mut state = [f64::NAN; 14];
        let calls: Vec<(usize, Vec<&str>, [f64; 14])> = trace
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.starts_with('#'))
            .map(|(n, l)| {
                let (call, changed) = l.split_once(" | ").expect("CALL | STATE");
                for field in changed.split_whitespace() {
                    let (i, v) = field.split_once('=').expect("INDEX=VALUE");
                    state[i.parse::<usize>().unwrap()] = v.parse().unwrap();
                }
                (n + 1, call.split_whitespace().collect(), state)
            })
            .collect();
        let packets = |field: &str| -> Vec<(u64, i64)> {
            if field == "-" {
                return Vec::new();
            }
            field
                .split(',')
                .map(|e| {
                    let v: Vec<i64> = e.split(':').map(|x| x.parse().unwrap()).collect();
                    (v[0] as u64, v[1] + v[2])
                })
                .collect()
        };
        let mut law = PccSender::new();
        let mut mismatches = Vec::new();
        for (k, (line, call, theirs)) in calls.iter().enumerate() {
            let ours = law.trace_fields();
            for ((name, ours), theirs) in TRACE_FIELDS.iter().zip(ours).zip(theirs) {
                if ours != *theirs {
                    mismatches.push(format!("line {line}, before {}: {name} {ours} (binary {theirs})", call.join(" ")));
                }
            }
            if mismatches.len() >= 10 {
                break;
            }
            let num = |i: usize| -> i64 { call[i].parse().unwrap() };
            if call[0] == "P" {
                let up = calls.get(k + 1).is_none_or(|next| next.2[5] == 0.0);
                law.on_packet_sent(num(1), num(2) as u64, num(3), &mut Oracle(up));
            } else {
                // Our transport reports losses one packet at a time, UDT a range at once.
                for lost in packets(call[4]) {
                    law.on_congestion_event(num(1), 0, None, Some(lost));
                }
                for acked in packets(call[3]) {
                    law.on_congestion_event(num(1), num(2), Some(acked), None);
                }
            }
        }
        mismatches
    }

    #[test]
    fn each_send_call_ends_in_a_short_block_and_lost_blocks_go_first() {
        let mut buffer = SendBuffer::new(UDT_PAYLOAD_BYTES, SEND_CALL_BYTES);
        assert_eq!((buffer.blocks_per_call(), buffer.tail_bytes()), (69, 992));
        let sizes: Vec<i64> = (0..138).map(|_| buffer.on_send()).collect();
        assert!(sizes.iter().enumerate().all(|(i, &b)| b == if i % 69 == 68 { 992 } else { 1456 }), "{sizes:?}");
        // A lost tail and a lost full block go again, in that order, before the stream goes on.
        buffer.on_lost(992);
        buffer.on_lost(1456);
        assert_eq!([buffer.on_send(), buffer.on_send(), buffer.on_send()], [992, 1456, 1456]);
        // The controller puts UDT's header on each and tells the law the block's bytes.
        let ms = Duration::from_millis;
        let mut p = PccExperimental2018::with_seed(1);
        for seq in 0..69 {
            assert_eq!(p.next_payload_bytes(), Some(if seq == 68 { 1008 } else { 1472 }));
            p.on_send(ms(seq), seq);
        }
        assert_eq!(p.law.queue.intervals.iter().map(|m| m.bytes_sent).sum::<i64>(), 68 * 1456 + 992);
    }

    /// The binary's own sends: their sizes follow [`SendBuffer`], given the losses it declared.
    #[test]
    fn the_send_buffer_gives_the_binarys_packet_sizes() {
        for (row, trace, misses) in [
            ("2/5/20", include_str!("../../data/pcc-uspace-cd43e34/sender-trace-2-5-20.txt"), 8),
            (
                "12/40/100/1% Poisson",
                include_str!("../../data/pcc-uspace-cd43e34/sender-trace-12-40-100-1pct-poisson.txt"),
                0,
            ),
        ] {
            let mut buffer = SendBuffer::new(UDT_PAYLOAD_BYTES, SEND_CALL_BYTES);
            let (mut sends, mut wrong, mut tails) = (0, 0, 0);
            for call in trace.lines().filter(|l| !l.starts_with('#')) {
                let fields: Vec<&str> = call.split_whitespace().collect();
                match fields[0] {
                    "P" => {
                        let theirs: i64 = fields[3].parse().unwrap();
                        sends += 1;
                        tails += usize::from(theirs == buffer.tail_bytes());
                        wrong += usize::from(buffer.on_send() != theirs);
                    }
                    _ if fields[4] != "-" => {
                        for lost in fields[4].split(',') {
                            buffer.on_lost(lost.rsplit(':').next().unwrap().parse().unwrap());
                        }
                    }
                    _ => {}
                }
            }
            assert!(sends > 4000 && tails > 50, "{row}: {sends} sends, {tails} tails");
            // 2/5/20 loses a third of its packets; 8 of 4125 sizes come 2 sends late there.
            assert_eq!(wrong, misses, "{row}: {wrong} of {sends} sizes differ");
        }
    }

    #[test]
    fn the_law_replays_the_binarys_trace() {
        for (row, trace) in [
            ("2/5/20", include_str!("../../data/pcc-uspace-cd43e34/sender-trace-2-5-20.txt")),
            (
                "12/40/100/1% Poisson",
                include_str!("../../data/pcc-uspace-cd43e34/sender-trace-12-40-100-1pct-poisson.txt"),
            ),
        ] {
            assert!(trace.lines().filter(|l| !l.starts_with('#')).count() > 1000, "{row}: a short trace");
            let mismatches = replay(trace);
            assert!(mismatches.is_empty(), "{row}:\n{}", mismatches.join("\n"));
        }
    }
}
