//! vivace as Pantheon ran it from 2018 to 2020: PCC Vivace's NSDI 2018 code, the UDT-based
//! sender `pcc-gradient/sender` of PCCproject/PCC-Uspace branch `NSDI-2018` (98ac946: class
//! `PCC` in `sender/app/pcc.h`, client `sender/app/gradient_descent_pcc_client.cpp`, the
//! monitor machinery in `sender/src/core.cpp`, the receiver's reports in
//! `receiver/src/core.cpp`), as built into the binaries of StanfordSNR/vivace 2baf862 that
//! Pantheon's `src/wrappers/vivace.py` runs.
//!
//! The binaries are not exactly that source: their DWARF puts `PCC` at the same members and
//! line numbers, and `libudt.so` line for line, but `pcc.h` has a packet-size parameter
//! (`kPacketSize`, 1400 bytes unless a third argument is given) that `onMonitorStart` writes
//! into the MSS at every MI, a `kLTEUtility` switch (off), a latency coefficient of 1 (the
//! source's client passes 0) and a latency weight of 900 (the source: 11330), and no debug
//! output. The port follows the binaries.
//!
//! Sending is paced only: one 1400-byte IP packet (UDP payload 1372) every
//! `1400·8 / rate` µs, rate in Mbit/s (`PCC::setRate`); the window never binds.
//!
//! Monitor intervals (MIs, `CUDT::start_monitor`, numbered in a ring of 500 from 1):
//!
//! * An MI is a count of packets, started when the packet before it leaves: the controller's
//!   `onMonitorStart` may set a new rate, then `length = P/period` packets if that is over 10,
//!   else 10, at most 3000, where `P` is the sender's RTT estimate in µs (300 000 while that
//!   is over 1 s, as it is, 10 s, until the first MI ends).
//! * The receiver reports every packet's MI and place in it (a 0x7FFF control message each).
//!   Each report is an RTT sample (now − the packet's send time) of that packet's MI `m`.
//!   A report ends every MI all sent and not yet ended from `m − 1` back (from `m` when the
//!   packet is `m`'s last), newest first, each with: its packet count, the unreported ones
//!   (lost), its sending time `T` (s), the mean RTT of `m`'s samples so far (which also
//!   becomes the sender's RTT estimate) and its own RTT slope: the least-squares slope of its
//!   samples' RTT over their send times (NaN with fewer than two).
//!
//! The controller (`PCC::onMonitorStart`, `onMonitorEnds`, `search`, `decide`, `utility`,
//! `setRate`), rates in Mbit/s:
//!
//! * Utility: `x^0.9 − (L + 900·t·d)·s/T` with `s = 1400·8/2^20`, `x = t·s/T`, `t` packets,
//!   loss rate `l`, `L = t·l` (`t·11.35·l` above 3 %) and `d` the RTT slope truncated to a
//!   multiple of 0.02 by 32-bit integer casts (so NaN and huge slopes read as −21 474 836.48,
//!   as the x86 conversion gives).
//! * Start: rate 0.8 → base 1.6, doubling once per MI that ends no worse than the one
//!   before; the first that is worse halves the base and starts probing. Loss and RTT slope
//!   count from the first MI: the source forgives the first 50 losses while starting (and
//!   reads slopes within ±0.2 as 0 then), but the binary's `onMonitorEnds` passes its
//!   arguments straight to `utility` (its line table jumps from the `timeout_immune_monitor`
//!   reset to the loss rate; `loss_ignore_count` is set to 50 and never read).
//! * Probing (`search`): 2 MIs (4 while no trend) at `base ± max(0.05·base, 0.5)` in
//!   random order per pair, then a reference MI at the base. When all probes ended, each
//!   pair votes for the side of its higher utility (probes' utilities recomputed with the
//!   overall loss rate when that is at most 1 %); a tie probes again.
//! * `decide`: gradient `(u₂ − u₁)/(r₂ − r₁)` of the mean utilities, times an amplifier
//!   `a` (×(a+1), ×(2a−2), ×(4a−14), ×(8a−50) for a < 3, < 6, < 9, beyond) that grows by 1
//!   (0.5 above 3) per step in the same direction and resets on a reversal; bounded to
//!   `(0.05 + 0.06·b)·base` with `b` counting consecutive bounded steps; at least ±0.5.
//!   A step of at most 10 % of the base is taken and probing starts again; a larger one
//!   moves (`MOVING`): one MI at `reference + change`, compared with the reference MI by
//!   `decide` again, continuing while the direction holds and the step stays over 10 %.
//! * Emergency: an MI losing over half its packets halves the base and probes again (once
//!   per MI started since). Floor `1.3·(1 − δ)`, cap 1024, δ = max(0.5/base, 0.05).
//!
//! Mapping onto the transport: our receiver acknowledges every packet, which is the report of
//! every packet. UDT retransmits lost packets (each counted in the MI in which it is resent);
//! our transport sends a new packet in that slot instead. The random choices are glibc's `rand()`
//! seeded with the clock, as upstream's (not checked draw for draw against the binary's). UDT's
//! ACK2 for each 10 ms full ACK goes on the data path as in [`super::pcc_2017`] (the sender's ACK2
//! guard always passes here too). Left out: `onTimeout` and the hibernate state it leads to (UDT's
//! expiry timer is set to 100 s by `setRTO`, past any run), the 1500-byte first packet (read
//! before the first MI sets the MSS), the handshake's packets (its second round trip: the port
//! connects in one; its timing, a request every 250 ms given up after 3 s, is kept) and UDT's
//! keep-alives.

use std::collections::VecDeque;
use std::time::Duration;

use super::pcc_2017::{Ack2Clock, Coin, MiRanges, Rng, UDT_CONNECT, UDT_PACER};
use super::{AckEvent, ConnectLaw, Controller, LossEvent, Pacer};

/// The binary's packet size (`PCC::kPacketSize`): one IP packet, headers included.
pub const MSS_BYTES: u64 = 1400;
/// UDP payload of one data packet: the MSS less the IPv4 and UDP headers.
pub const PAYLOAD_BYTES: u64 = MSS_BYTES - 28;
/// MIs are numbered in a ring of this size (`MAX_MONITOR`).
pub const MAX_MONITOR: i32 = 500;
/// UDT's initial RTT estimate: 10 × the sender's 1 s SYN interval, µs.
pub const INITIAL_RTT_US: i64 = 10_000_000;
/// The pacing period before the first MI starts, µs (`PCC::PCC`).
pub const INITIAL_PERIOD_US: f64 = 10_000.0;
const MIN_RATE: f64 = 1.3;
const MIN_RATE_SLOW_START: f64 = 0.1;
const MAX_RATE: f64 = 1024.0;
const ALPHA: f64 = 1.0;
const EXPONENT: f64 = 0.9;
/// `kFactor` as the client sets it.
const FACTOR: f64 = 1.0;
/// `kLatencyCoefficient` as the binary's client sets it (the source's: 0).
const LATENCY_COEFFICIENT: f64 = 1.0;
/// The latency weight in the binary's `utility` (the source's: 11330).
const LATENCY_WEIGHT: f64 = 900.0;
const INITIAL_BOUNDARY: f64 = 0.05;
const BOUNDARY_INCREMENT: f64 = 0.06;

/// C++'s `int(x)` as x86-64 computes it (`cvttsd2si`): truncation, and `i32::MIN` for NaN
/// or anything out of range (pcc_experimental-2018's utility truncates the same way).
pub(crate) fn trunc_i32(x: f64) -> i32 {
    if x.is_nan() || x >= 2_147_483_648.0 || x <= -2_147_483_649.0 {
        i32::MIN
    } else {
        x as i32
    }
}

/// The RTT slope as `utility` reads it: truncated to a multiple of 0.02.
fn latency_penalty(latency_info: f64) -> f64 {
    let a = trunc_i32(latency_info * 100.0);
    let b = trunc_i32(a as f64 / 100.0 * 100.0);
    (b / 2 * 2) as f64 / 100.0
}

/// Vivace's utility of one MI (`PCC::utility`): `total` packets, `loss` lost, `secs` long,
/// `latency_info` its RTT slope.
pub fn utility(total: f64, loss: f64, secs: f64, latency_info: f64) -> f64 {
    let loss_rate = loss / total;
    let loss_contribution = if loss_rate <= 0.03 { total * loss_rate } else { total * 11.35 * loss_rate };
    let rtt_contribution = LATENCY_COEFFICIENT * LATENCY_WEIGHT * total * latency_penalty(latency_info);
    let scale = MSS_BYTES as f64 / 1024.0 / 1024.0 * 8.0 / secs;
    ALPHA * (total * scale).powf(EXPONENT) - (loss_contribution + rtt_contribution) * scale
}

/// `ConnectionState` (hibernation left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Start,
    Search,
    Recording,
    Moving,
}

/// One probe (`GuessStat`).
#[derive(Clone, Copy, Debug, Default)]
struct Probe {
    monitor: i32,
    rate: f64,
    utility: f64,
    ready: bool,
    up: bool,
    loss: f64,
    total: f64,
    latency_info: f64,
    time: f64,
}

/// One side of a move (`MoveStat`'s reference_* or target_*).
#[derive(Clone, Copy, Debug, Default)]
struct Side {
    rate: f64,
    utility: f64,
    monitor: i32,
    ready: bool,
    loss_rate: f64,
    loss: f64,
    total: f64,
}

/// One MI's results as `onMonitorEnds` gets them.
#[derive(Clone, Copy, Debug)]
pub struct MiEnd {
    pub total: u32,
    pub loss: i64,
    pub secs: f64,
    /// The newest MI started (ring number).
    pub current: i32,
    /// The MI that ended (ring number).
    pub monitor: i32,
    /// The mean RTT of the reporting packet's MI, µs (read only by the hibernate state).
    pub rtt_us: f64,
    pub latency_info: f64,
}

/// Vivace's decision logic (`PCC`), fed MI starts and ends; rates in Mbit/s.
#[derive(Clone, Debug)]
pub struct Vivace {
    pub state: State,
    pub base_rate: f64,
    /// The rate last set (`rate_`).
    pub rate: f64,
    /// The pacing period, µs of one [`MSS_BYTES`] packet.
    pub period_us: f64,
    monitor_in_start_phase: i32,
    last_utility: f64,
    number_of_probes: usize,
    probes: Vec<Probe>,
    guess_time: usize,
    reference: Side,
    target: Side,
    move_change: f64,
    prev_change: f64,
    amplifier: f64,
    boundary_amplifier: f64,
    probe_amplifier: i32,
    swing_buffer: f64,
    trend_count: i32,
    double_check: i32,
    last_stop_monitor: i32,
    /// The gradient `decide` last computed (`prev_gradiants_`, of which it uses the newest).
    pub last_gradient: f64,
}

impl Default for Vivace {
    fn default() -> Self {
        Self::new()
    }
}

impl Vivace {
    pub fn new() -> Self {
        Self {
            state: State::Start,
            base_rate: 0.6,
            rate: 0.8,
            period_us: INITIAL_PERIOD_US,
            monitor_in_start_phase: -1,
            last_utility: -100_000.0,
            number_of_probes: 4,
            probes: Vec::new(),
            guess_time: 0,
            reference: Side { monitor: -1, ..Side::default() },
            target: Side { monitor: -1, ..Side::default() },
            move_change: 0.0,
            prev_change: 0.0,
            amplifier: 0.0,
            boundary_amplifier: 0.0,
            probe_amplifier: 0,
            swing_buffer: 0.0,
            trend_count: 0,
            double_check: 1,
            last_stop_monitor: -1,
            last_gradient: 0.0,
        }
    }

    /// `getkDelta`: the probes' relative spacing.
    fn k_delta(&self) -> f64 {
        (0.5 / self.base_rate).max(0.05)
    }

    /// `setRate` (not forced).
    fn set_rate(&mut self, mbps: f64) {
        let mut mbps = mbps;
        if self.state == State::Start {
            mbps = mbps.max(MIN_RATE_SLOW_START);
        } else if mbps < MIN_RATE * (1.0 - self.k_delta()) {
            mbps = MIN_RATE * (1.0 - self.k_delta());
        }
        mbps = mbps.min(MAX_RATE);
        self.rate = mbps;
        self.period_us = MSS_BYTES as f64 * 8.0 / mbps;
    }

    /// `search`: lay out the next probes, starting with MI `current`.
    fn search(&mut self, current: i32, coin: &mut impl Coin) {
        self.number_of_probes = if self.trend_count >= 1 { 2 } else { 4 };
        let spread = self.k_delta();
        for i in 0..self.number_of_probes / 2 {
            let mut dir = if coin.flip() { 1.0 } else { -1.0 };
            for j in 0..2 {
                let rate = if spread * self.base_rate > 0.1 {
                    (1.0 + dir * spread) * self.base_rate
                } else {
                    self.base_rate + dir * 0.1
                };
                self.probes.push(Probe {
                    monitor: (current + (i * 2 + j) as i32) % MAX_MONITOR,
                    rate,
                    up: dir > 0.0,
                    ..Probe::default()
                });
                dir = -dir;
            }
        }
    }

    /// `onMonitorStart`: MI `current` begins.
    pub fn on_monitor_start(&mut self, current: i32, coin: &mut impl Coin) {
        loop {
            let old = self.state;
            match self.state {
                State::Start => {
                    if self.monitor_in_start_phase != -1 {
                        return;
                    }
                    self.monitor_in_start_phase = current;
                    self.base_rate = self.rate * 2.0;
                    self.set_rate(self.base_rate);
                }
                State::Search => {
                    self.base_rate = self.base_rate.max(MIN_RATE);
                    self.state = State::Recording;
                    self.search(current, coin);
                    self.guess_time = 0;
                }
                State::Recording => {
                    if self.guess_time != self.number_of_probes {
                        self.set_rate(self.probes[self.guess_time].rate);
                        self.guess_time += 1;
                    } else {
                        self.set_rate(self.base_rate);
                        self.reference.monitor = current;
                        self.reference.rate = self.base_rate;
                    }
                }
                State::Moving => {
                    self.set_rate(self.target.rate);
                    self.base_rate = self.target.rate;
                    if self.target.monitor == -1 {
                        self.target.monitor = current;
                    }
                    if self.base_rate < MIN_RATE {
                        self.base_rate = MIN_RATE;
                        self.set_rate(self.base_rate);
                        self.amplifier = 0.0;
                        self.boundary_amplifier = 0.0;
                        self.state = State::Search;
                        self.probes.clear();
                        self.target.monitor = -1;
                    }
                }
            }
            if old == self.state {
                return;
            }
        }
    }

    /// `decide`: the rate change from utility `u1` at `r1` to `u2` at `r2`.
    pub fn decide(&mut self, u1: f64, u2: f64, r1: f64, r2: f64) -> f64 {
        let gradient = (u2 - u1) / (r2 - r1);
        self.last_gradient = gradient;
        let mut change = gradient * FACTOR;
        let reversed = change * self.prev_change < 0.0;
        if reversed {
            self.amplifier = 0.0;
            self.boundary_amplifier = 0.0;
            if self.swing_buffer < 2.0 {
                self.swing_buffer += 1.0;
            }
        }
        let a = self.amplifier;
        change *= if a < 3.0 {
            a + 1.0
        } else if a < 6.0 {
            a * 2.0 - 2.0
        } else if a < 9.0 {
            a * 4.0 - 14.0
        } else {
            a * 8.0 - 50.0
        };
        if reversed {
            self.trend_count = 0;
        } else if self.prev_change * change != 0.0 {
            self.trend_count += 1;
            if self.swing_buffer == 0.0 {
                self.amplifier += if self.amplifier > 3.0 { 0.5 } else { 1.0 };
            }
            if self.swing_buffer > 0.0 {
                self.swing_buffer -= 1.0;
            }
        }
        let ratio = BOUNDARY_INCREMENT * self.boundary_amplifier + INITIAL_BOUNDARY;
        if change.abs() / self.base_rate > ratio {
            change = change.abs() / change * self.base_rate * ratio;
            self.boundary_amplifier += 1.0;
        } else if self.boundary_amplifier >= 1.0 {
            self.boundary_amplifier -= 1.0;
        }
        if change * self.prev_change < 0.0 {
            self.amplifier = 0.0;
            self.boundary_amplifier = 0.0;
        }
        if change > 0.0 && change < 0.5 {
            change = 0.5;
        }
        if change < 0.0 && change > -0.5 {
            change = -0.5;
        }
        self.prev_change = change;
        change
    }

    /// Back to probing at the current base.
    fn research(&mut self) {
        self.target.monitor = -1;
        self.state = State::Search;
        self.reference.ready = false;
        self.target.ready = false;
        self.probes.clear();
    }

    /// The probes have all ended: vote, then step or move.
    fn conclude_probes(&mut self) {
        let n = self.number_of_probes;
        let overall_total: f64 = self.probes[..n].iter().map(|p| p.total).sum();
        let overall_loss: f64 = self.probes[..n].iter().map(|p| p.loss).sum();
        let overall_loss_rate = overall_loss / overall_total;
        if overall_loss_rate <= 0.01 {
            for p in &mut self.probes[..n] {
                p.utility = utility(p.total, overall_loss_rate * p.total, p.time, p.latency_info);
            }
        }
        let mut decision = 0i32;
        for pair in self.probes[..n].chunks(2) {
            let vote = |p: &Probe| if p.up { 1 } else { -1 };
            if pair[0].utility < pair[1].utility {
                decision += vote(&pair[1]);
            }
            if pair[0].utility > pair[1].utility {
                decision += vote(&pair[0]);
            }
        }
        let loss_up: f64 = self.probes[..n].iter().filter(|p| p.up).map(|p| p.loss).sum();
        let loss_down: f64 = self.probes[..n].iter().filter(|p| !p.up).map(|p| p.loss).sum();
        if loss_down - loss_up > 2.0 && decision > 0 && loss_up != 0.0 && overall_loss_rate >= 0.05 {
            if self.double_check > 0 {
                decision = 0;
                self.double_check -= 1;
            } else {
                self.double_check = 1;
                self.trend_count = 2;
            }
        } else {
            self.double_check = 1;
        }
        if decision != 0 {
            let (mut u_up, mut u_down, mut r_up, mut r_down) = (0.0, 0.0, 0.0, 0.0);
            for p in &self.probes[..n] {
                if p.up {
                    u_up += p.utility;
                    r_up = p.rate;
                } else {
                    u_down += p.utility;
                    r_down = p.rate;
                }
            }
            let pairs = (n / 2) as f64;
            let change = self.decide(u_down / pairs, u_up / pairs, r_down, r_up);
            if change / self.base_rate <= 0.1 {
                self.state = State::Search;
                self.base_rate += change;
                self.set_rate(self.base_rate);
            } else {
                self.state = State::Moving;
                self.target.rate = self.reference.rate + change;
                self.move_change = change;
                if self.probe_amplifier > 0 {
                    self.probe_amplifier -= 1;
                }
            }
        } else {
            self.trend_count = 2;
            self.prev_change = 0.0;
            self.state = State::Search;
            self.reference.ready = false;
            self.probe_amplifier += 1;
        }
        self.probes.clear();
    }

    /// A move's target MI and its reference have both ended.
    fn conclude_move(&mut self, current: i32) {
        let (r, t) = (self.reference, self.target);
        let overall_loss = r.loss + t.loss;
        // (sic: the target's lost packets stand in for its total)
        let overall_total = r.total + t.loss;
        let overall_loss_rate = overall_loss / overall_total;
        let change = self.decide(r.utility, t.utility, r.rate, t.rate);
        let second_guess = (r.rate - t.rate) * (r.loss_rate - t.loss_rate) < 0.0
            && ((r.loss - t.loss).abs() > 2.0 || overall_loss_rate >= 0.05);
        if second_guess {
            if self.double_check > 0 {
                self.double_check -= 1;
            }
            self.research();
            self.trend_count = 2;
            self.prev_change = 0.0;
        } else if change * self.move_change <= 0.0 {
            self.base_rate += change;
            self.set_rate(self.base_rate);
            self.research();
            self.number_of_probes = 4;
        } else if change / self.base_rate <= 0.1 {
            self.base_rate += change;
            self.set_rate(self.base_rate);
            self.research();
            self.trend_count = 2;
        } else {
            self.reference = Side { ready: true, ..self.target };
            self.target = Side {
                monitor: (current + 1) % MAX_MONITOR,
                ready: false,
                rate: self.reference.rate + change,
                ..self.target
            };
            self.move_change = change;
        }
    }

    /// `onMonitorEnds`.
    pub fn on_monitor_end(&mut self, end: &MiEnd) {
        let total = end.total as f64;
        let latency_info = end.latency_info;
        let loss = end.loss as f64;
        let loss_rate = loss / total;
        let u = utility(total, loss, end.secs, latency_info);
        let side = Side { rate: 0.0, utility: u, monitor: end.monitor, ready: true, loss_rate, loss, total };
        if end.monitor == self.reference.monitor {
            self.reference = Side { rate: self.reference.rate, ..side };
        }

        if loss / total > 0.5 {
            let mut stop = true;
            let wrapped = |c: i32| if c < end.monitor { c + 100 } else { c };
            let again = end.monitor == self.last_stop_monitor || end.monitor + 100 == self.last_stop_monitor;
            if self.last_stop_monitor == -1 || again {
                self.last_stop_monitor = wrapped(end.current);
            } else {
                stop = false;
            }
            if stop {
                self.state = State::Search;
                self.probes.clear();
                self.base_rate *= 0.5;
                self.target.monitor = -1;
                self.base_rate = self.base_rate.max(MIN_RATE);
                self.set_rate(self.base_rate);
            }
        } else {
            self.last_stop_monitor = -1;
        }

        loop {
            let old = self.state;
            match self.state {
                State::Start => {
                    if end.monitor == self.monitor_in_start_phase {
                        if self.last_utility > u {
                            self.base_rate /= 2.0;
                            self.state = State::Search;
                        }
                        self.monitor_in_start_phase = -1;
                        self.last_utility = u;
                    }
                }
                State::Search => {}
                State::Recording => {
                    let mut all_ready = true;
                    let n = self.number_of_probes.min(self.probes.len());
                    for p in &mut self.probes[..n] {
                        if p.monitor == end.monitor {
                            *p = Probe { utility: u, loss, total, time: end.secs, latency_info, ready: true, ..*p };
                        }
                        all_ready &= p.ready;
                    }
                    if all_ready && n == self.number_of_probes {
                        self.conclude_probes();
                    }
                }
                State::Moving => {
                    if end.monitor == self.target.monitor {
                        self.target = Side { rate: self.target.rate, ..side };
                    }
                    if self.reference.ready && self.target.ready {
                        self.conclude_move(end.current);
                    }
                }
            }
            if old == self.state {
                return;
            }
        }
    }
}

/// One MI's bookkeeping (core.h's per-monitor arrays).
#[derive(Clone, Debug, Default)]
struct Monitor {
    total: u32,
    reported: u32,
    start: Duration,
    end_transmission: Duration,
    rtt_sum_us: f64,
    rtt_count: u32,
    /// (send time, RTT) in µs of each reported packet, for the RTT slope.
    trace: Vec<(f64, f64)>,
}

impl Monitor {
    /// The least-squares slope of RTT over send time (`latency_info`); NaN with fewer than
    /// two distinct send times, as upstream's 0/0.
    fn rtt_slope(&self) -> f64 {
        let n = self.trace.len() as f64;
        let mx = self.trace.iter().map(|s| s.0).sum::<f64>() / n;
        let my = self.trace.iter().map(|s| s.1).sum::<f64>() / n;
        let num: f64 = self.trace.iter().map(|s| (s.0 - mx) * (s.1 - my)).sum();
        let den: f64 = self.trace.iter().map(|s| (s.0 - mx) * (s.0 - mx)).sum();
        num / den
    }
}

/// The UDT sender's monitor machinery plus Vivace.
#[derive(Clone, Debug)]
pub struct Vivace2018 {
    law: Vivace,
    rng: Rng,
    /// The recent MIs by absolute number (the first is 1), oldest first.
    monitors: VecDeque<(u64, Monitor)>,
    current: u64,
    monitor_ttl: u32,
    /// MIs all sent and not yet ended, oldest first.
    pending: VecDeque<u64>,
    ranges: MiRanges<u64>,
    /// The sender's RTT estimate (`m_iRTT`), µs.
    rtt_us: i64,
    ack2: Ack2Clock,
    ended: u64,
}

impl Vivace2018 {
    /// `mss` is ignored: upstream's packets are 1400-byte IP packets ([`PAYLOAD_BYTES`]).
    pub fn new(_mss: u64) -> Self {
        Self::with_seed(0x5eed_2018)
    }

    pub fn with_seed(seed: u64) -> Self {
        Self {
            law: Vivace::new(),
            rng: Rng::new(seed),
            monitors: VecDeque::new(),
            current: 0,
            monitor_ttl: 0,
            pending: VecDeque::new(),
            ranges: MiRanges::new(MAX_MONITOR as usize),
            rtt_us: INITIAL_RTT_US,
            ack2: Ack2Clock::default(),
            ended: 0,
        }
    }

    pub fn law(&self) -> &Vivace {
        &self.law
    }

    /// MIs ended so far.
    pub fn monitors_ended(&self) -> u64 {
        self.ended
    }

    fn ring(mi: u64) -> i32 {
        (mi % MAX_MONITOR as u64) as i32
    }

    fn monitor_mut(&mut self, mi: u64) -> Option<&mut Monitor> {
        let front = self.monitors.front()?.0;
        let idx = mi.checked_sub(front)? as usize;
        self.monitors.get_mut(idx).map(|m| &mut m.1)
    }

    /// `CUDT::start_monitor`: the next MI begins at `now` with packet `next_seq`.
    fn start_monitor(&mut self, now: Duration, next_seq: u64) {
        self.current += 1;
        self.law.on_monitor_start(Self::ring(self.current), &mut self.rng);
        let period = self.law.period_us;
        let mut send_period = self.rtt_us;
        if send_period > 1_000_000 {
            send_period = 300_000;
        }
        let ratio = send_period as f64 / period;
        let length = if ratio > 10.0 { (ratio as u32).min(3000) } else { 10 };
        self.monitor_ttl = length;
        self.monitors.push_back((
            self.current,
            Monitor { total: length, start: now, end_transmission: now, ..Monitor::default() },
        ));
        while self.monitors.len() > MAX_MONITOR as usize {
            self.monitors.pop_front();
        }
        self.ranges.push(next_seq, self.current);
    }
}

impl Controller for Vivace2018 {
    fn name(&self) -> &'static str {
        "vivace-2018"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        self.ack2.on_ack(ack.now);
        let Some((m, place)) = self.ranges.of(ack.seq) else { return };
        let sample = ack.now.saturating_sub(ack.sent_at).as_micros() as f64;
        let sent_us = ack.sent_at.as_micros() as f64;
        let Some(mi) = self.monitor_mut(m) else { return };
        mi.rtt_count += 1;
        mi.rtt_sum_us += sample;
        if sample != 0.0 {
            mi.trace.push((sent_us, sample));
        }
        mi.reported += 1;
        let last = u64::from(mi.total) == place + 1;
        let rtt = mi.rtt_sum_us / mi.rtt_count as f64;
        let newest = if last { m } else { m - 1 };
        while let Some(pos) = self.pending.iter().rposition(|&p| p <= newest) {
            let tmp = self.pending.remove(pos).unwrap_or_default();
            self.rtt_us = rtt as i64;
            let current = Self::ring(self.current);
            let Some(mon) = self.monitor_mut(tmp) else { continue };
            let end = MiEnd {
                total: mon.total,
                loss: i64::from(mon.total) - i64::from(mon.reported),
                secs: mon.end_transmission.saturating_sub(mon.start).as_micros() as f64 / 1e6,
                current,
                monitor: Self::ring(tmp),
                rtt_us: rtt,
                latency_info: mon.rtt_slope(),
            };
            self.ended += 1;
            self.law.on_monitor_end(&end);
        }
    }

    fn on_loss(&mut self, _loss: &LossEvent) {}

    fn on_send(&mut self, now: Duration, seq: u64) {
        if self.monitor_ttl == 0 {
            self.start_monitor(now, seq);
        }
        self.monitor_ttl -= 1;
        if self.monitor_ttl == 0 {
            let current = self.current;
            if let Some(mi) = self.monitor_mut(current) {
                mi.end_transmission = now;
            }
            self.pending.push_back(current);
            self.start_monitor(now, seq + 1);
        }
    }

    fn cwnd(&self) -> u64 {
        // UDT's window of 100 000 packets never binds.
        u64::MAX / 4
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        PAYLOAD_BYTES as f64 / (self.law.period_us * 1e-6)
    }

    /// UDT's handshake: a flow that cannot connect in 3 s exits, as the upstream's did.
    fn connect_law(&self) -> Option<ConnectLaw> {
        Some(UDT_CONNECT)
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(PAYLOAD_BYTES)
    }

    fn pacer(&self) -> Pacer {
        // The same UDT send queue as pcc-2017's (`CUDT::packData`, `CTimer::sleepto`).
        UDT_PACER
    }

    fn take_control_datagram(&mut self, now: Duration) -> Option<u64> {
        self.ack2.take(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{run, Link};

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn utility_matches_hand_computed_values() {
        // 100 packets in 0.1 s, no loss, flat RTT: x = 100 · 1400·8/2^20 / 0.1 = 10.681152 Mbit/s.
        let x: f64 = 100.0 * 1400.0 * 8.0 / 1048576.0 / 0.1;
        assert!((utility(100.0, 0.0, 0.1, 0.0) - x.powf(0.9)).abs() < 1e-12);
        // 2 % loss (at most 3 %): L = t·l = 2 packets.
        let s = 1400.0 * 8.0 / 1048576.0 / 0.1;
        let u = utility(100.0, 2.0, 0.1, 0.0);
        assert!((u - (x.powf(0.9) - 2.0 * s)).abs() < 1e-12, "{u}");
        // 10 % loss: L = t · 11.35 · l = 113.5 packets.
        let u = utility(100.0, 10.0, 0.1, 0.0);
        assert!((u - (x.powf(0.9) - 113.5 * s)).abs() < 1e-9, "{u}");
        // RTT slope 0.0512 reads as 0.04 (a multiple of 0.02): 900 · 100 · 0.04 packets.
        let u = utility(100.0, 0.0, 0.1, 0.0512);
        assert!((u - (x.powf(0.9) - 3600.0 * s)).abs() < 1e-9, "{u}");
        // A negative slope is a bonus: -0.03 reads as -0.02.
        let u = utility(100.0, 0.0, 0.1, -0.03);
        assert!((u - (x.powf(0.9) + 1800.0 * s)).abs() < 1e-9, "{u}");
    }

    #[test]
    fn an_undefined_slope_reads_as_the_x86_integer_indefinite() {
        assert_eq!(latency_penalty(f64::NAN), -21_474_836.48);
        assert_eq!(latency_penalty(1e10), -21_474_836.48);
        assert_eq!(latency_penalty(0.019), 0.0);
        assert_eq!(latency_penalty(-0.039), -0.02);
        // An MI with one sample has no slope; one with two has one.
        let mut m = Monitor::default();
        m.trace.push((1000.0, 20_000.0));
        assert!(m.rtt_slope().is_nan());
        m.trace.push((2000.0, 20_100.0));
        assert!((m.rtt_slope() - 0.1).abs() < 1e-12);
    }

    #[test]
    fn start_doubles_per_start_mi_and_halves_on_the_first_worse_one() {
        let mut law = Vivace::new();
        let mut rng = Rng::new(1);
        law.on_monitor_start(1, &mut rng);
        assert_eq!(law.rate, 1.6);
        assert!((law.period_us - 7000.0).abs() < 1e-9);
        // MI 2 starts while MI 1 (the start MI) is out: no change.
        law.on_monitor_start(2, &mut rng);
        assert_eq!(law.rate, 1.6);
        let end = |mi: i32, total: u32, secs: f64| MiEnd {
            total,
            loss: 0,
            secs,
            current: mi + 1,
            monitor: mi,
            rtt_us: 50_000.0,
            latency_info: 0.0,
        };
        law.on_monitor_end(&end(1, 40, 0.28));
        law.on_monitor_start(3, &mut rng);
        assert_eq!(law.rate, 3.2);
        // MI 2 was not the start MI: ignored.
        law.on_monitor_end(&end(2, 40, 0.28));
        law.on_monitor_start(4, &mut rng);
        assert_eq!(law.rate, 3.2);
        // MI 3 has a lower utility than MI 1 (same packets over a longer time): halve the base
        // and probe around it.
        law.on_monitor_end(&end(3, 40, 0.56));
        assert_eq!(law.state, State::Search);
        assert_eq!(law.base_rate, 1.6);
        law.on_monitor_start(5, &mut rng);
        assert_eq!(law.state, State::Recording);
        // No trend yet: 4 probes at 1.6 · (1 ± 0.5/1.6), the first now.
        assert_eq!(law.probes.len(), 4);
        for pair in law.probes.chunks(2) {
            let mut r = [pair[0].rate, pair[1].rate];
            r.sort_by(|a, b| a.partial_cmp(b).unwrap());
            assert!((r[0] - 1.1).abs() < 1e-12 && (r[1] - 2.1).abs() < 1e-12, "{r:?}");
        }
        assert_eq!(law.rate, law.probes[0].rate);
        assert_eq!(law.probes.iter().map(|p| p.monitor).collect::<Vec<_>>(), [5, 6, 7, 8]);
    }

    #[test]
    fn decide_amplifies_bounds_and_floors_the_step() {
        let mut law = Vivace::new();
        law.base_rate = 10.0;
        // Gradient 0.2, no previous step: ×1, raised to the 0.5 floor.
        assert_eq!(law.decide(0.0, 0.2, 9.0, 10.0), 0.5);
        assert_eq!(law.amplifier, 0.0);
        // Same direction: still ×1 (0.3, floored), then the amplifier grows to 1.
        assert_eq!(law.decide(0.0, 0.3, 9.0, 10.0), 0.5);
        assert_eq!(law.amplifier, 1.0);
        // ×2 = 0.6 is over the bound 0.05·base = 0.5: bounded, and the bound widens.
        assert!((law.decide(0.0, 0.3, 9.0, 10.0) - 0.5).abs() < 1e-12);
        // ×3 = 30 is bounded to (0.05 + 0.06·1)·base = 1.1.
        assert!((law.decide(0.0, 10.0, 9.0, 10.0) - 1.1).abs() < 1e-12);
        assert_eq!(law.amplifier, 3.0);
        // A reversal resets the amplifier: ×1, and -0.3 is floored to -0.5.
        assert_eq!(law.decide(0.0, -0.3, 9.0, 10.0), -0.5);
        assert_eq!(law.amplifier, 0.0);
    }

    /// Runs the law's probing once: probes end with utilities favouring `up`.
    fn probe_round(law: &mut Vivace, rng: &mut Rng, first: i32, up: bool) -> i32 {
        law.on_monitor_start(first, rng);
        let n = law.number_of_probes as i32;
        for mi in first + 1..first + n + 1 {
            law.on_monitor_start(mi, rng);
        }
        let probes = law.probes.clone();
        for p in &probes {
            // More packets at the better side.
            let better = p.up == up;
            law.on_monitor_end(&MiEnd {
                total: if better { 120 } else { 100 },
                loss: 0,
                secs: 0.1,
                current: first + n,
                monitor: p.monitor,
                rtt_us: 50_000.0,
                latency_info: 0.0,
            });
        }
        first + n + 1
    }

    #[test]
    fn probes_vote_and_a_large_gradient_moves() {
        let mut law = Vivace::new();
        let mut rng = Rng::new(4);
        law.state = State::Search;
        law.base_rate = 10.0;
        let next = probe_round(&mut law, &mut rng, 1, true);
        // The up side's utility is higher: a bounded step of 5 % of 10 is not over 10 %,
        // so the base steps up by 0.5 and probing resumes.
        assert_eq!(law.state, State::Search);
        assert!((law.base_rate - 10.5).abs() < 1e-12, "{}", law.base_rate);
        // A second step up (4 probes again: the first step set no trend) is amplified (×1 now,
        // the gradient about 1.5) and bounded to (0.05 + 0.06)·10.5 = 1.155, over 10 % of the
        // base: move, the next MI at the reference rate + 1.155.
        let next = probe_round(&mut law, &mut rng, next, true);
        assert_eq!(law.state, State::Moving);
        law.on_monitor_start(next, &mut rng);
        assert!((law.rate - (10.5 + 1.155)).abs() < 1e-9, "{}", law.rate);
        assert_eq!(law.base_rate, law.rate);
        assert_eq!(law.target.monitor, next);
        // Having moved in one direction, the next probing uses 2 probes.
        assert!(law.trend_count >= 1);
    }

    #[test]
    fn heavy_loss_halves_the_base() {
        let mut law = Vivace::new();
        let mut rng = Rng::new(2);
        law.state = State::Search;
        law.base_rate = 20.0;
        law.on_monitor_start(1, &mut rng);
        law.on_monitor_end(&MiEnd {
            total: 100,
            loss: 60,
            secs: 0.1,
            current: 2,
            monitor: 1,
            rtt_us: 50_000.0,
            latency_info: 0.0,
        });
        assert_eq!(law.base_rate, 10.0);
        assert_eq!(law.state, State::Search);
        assert_eq!(law.rate, 10.0);
    }

    #[test]
    fn first_mis_are_300_ms_then_one_rtt() {
        let mut v = Vivace2018::with_seed(1);
        assert_eq!(v.payload_bytes(), Some(1372));
        v.on_send(ms(0), 0);
        // 1.6 Mbit/s: 7000 µs a packet; 300 000 / 7000 = 42 packets.
        assert_eq!(v.monitors[0].1.total, 42);
        assert!((v.pacing_rate(ms(0)) - 1372.0 / 7000e-6).abs() < 1e-6);
        for seq in 1..42 {
            v.on_send(ms(7 * seq), seq);
        }
        // MI 1 all sent, MI 2 started; its last packet's report ends MI 1 and sets the
        // RTT estimate to the mean of MI 1's samples (40 ms).
        assert_eq!(v.current, 2);
        for seq in 0..42 {
            let sent = ms(7 * seq);
            v.on_ack(&ack(sent + ms(40), seq, sent));
        }
        assert_eq!(v.monitors_ended(), 1);
        assert_eq!(v.rtt_us, 40_000);
        // MI 3's length uses it: the law now sends at 3.2 Mbit/s, 3500 µs a packet: 11 packets.
        for seq in 42..84 {
            v.on_send(ms(300 + seq), seq);
        }
        assert_eq!(v.current, 3);
        assert_eq!(v.monitors.back().unwrap().1.total, 11);
    }

    fn ack(now: Duration, seq: u64, sent_at: Duration) -> AckEvent {
        AckEvent::lone(now, seq, sent_at, PAYLOAD_BYTES)
    }

    #[test]
    fn a_report_ends_older_mis_newest_first_and_the_lost_ones_count() {
        let mut v = Vivace2018::with_seed(3);
        // MI 1: packets 0..42; MI 2 starts with 42.
        for seq in 0..52 {
            v.on_send(ms(7 * seq), seq);
        }
        // Packets 0..30 of MI 1 arrive; the rest of MI 1 is lost. Nothing ends yet.
        for seq in 0..30 {
            let sent = ms(7 * seq);
            v.on_ack(&ack(sent + ms(40), seq, sent));
        }
        assert_eq!(v.monitors_ended(), 0);
        // MI 2's first packet ends MI 1 with 12 lost.
        v.on_ack(&ack(ms(7 * 42 + 40), 42, ms(7 * 42)));
        assert_eq!(v.monitors_ended(), 1);
        assert_eq!(v.monitors[0].1.reported, 30);
    }

    #[test]
    fn fills_a_link_without_a_standing_queue() {
        let link = Link { rate_bits_per_s: 12e6, one_way_delay: ms(20), queue_packets: 100 };
        let out = run(Box::new(Vivace2018::with_seed(5)), &link, Duration::from_secs(30));
        let u = out.utilization();
        assert!(u > 0.8, "utilization {u}");
        let p95 = out.delay_percentile_ms(95.0, Duration::from_secs(10));
        assert!(p95 < 20.0 + 60.0, "p95 {p95}");
    }

    #[test]
    fn ack2s_cross_the_data_path() {
        let link = Link { rate_bits_per_s: 2e6, one_way_delay: ms(5), queue_packets: 20 };
        let out = run(Box::new(Vivace2018::with_seed(5)), &link, Duration::from_secs(20));
        let per_s = (out.control_delivered + out.control_dropped) as f64 / 20.0;
        assert!((40.0..=100.0).contains(&per_s), "{per_s} ACK2/s");
    }

    /// The binary's probe orders, one per pair as the trace gives them.
    impl Coin for VecDeque<bool> {
        fn flip(&mut self) -> bool {
            self.pop_front().expect("the trace gives every pair's order")
        }
    }

    /// Feeds a trace of the binary's calls to the law; the first mismatches, as text.
    fn replay(trace: &str) -> Vec<String> {
        const FIELDS: [&str; 19] = [
            "state",
            "base_rate",
            "rate",
            "amplifier",
            "boundary_amplifier",
            "probe_amplifier",
            "trend_count",
            "swing_buffer",
            "prev_change",
            "number_of_probes",
            "guess_time",
            "monitor_in_start_phase",
            "double_check",
            "last_stop_monitor",
            "last_utility",
            "reference.rate",
            "reference.monitor",
            "target.rate",
            "target.monitor",
        ];
        let mut law = Vivace::new();
        let mut orders = VecDeque::new();
        let mut mismatches = Vec::new();
        for (n, line) in trace.lines().enumerate().filter(|(_, l)| !l.starts_with('#')) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let num = |i: usize| -> f64 { f[i].parse().unwrap() };
            let after = if f[0] == "S" {
                orders.extend(f[2].chars().filter(|&c| c != '-').map(|c| c == '1'));
                law.on_monitor_start(num(1) as i32, &mut orders);
                3
            } else {
                law.on_monitor_end(&MiEnd {
                    total: num(1) as u32,
                    loss: num(2) as i64,
                    secs: num(3),
                    current: num(4) as i32,
                    monitor: num(5) as i32,
                    rtt_us: num(6),
                    latency_info: num(7),
                });
                8
            };
            let state = match law.state {
                State::Start => 0.0,
                State::Search => 1.0,
                State::Recording => 2.0,
                State::Moving => 3.0,
            };
            let ours = [
                state,
                law.base_rate,
                law.rate,
                law.amplifier,
                law.boundary_amplifier,
                f64::from(law.probe_amplifier),
                f64::from(law.trend_count),
                law.swing_buffer,
                law.prev_change,
                law.number_of_probes as f64,
                law.guess_time as f64,
                f64::from(law.monitor_in_start_phase),
                f64::from(law.double_check),
                f64::from(law.last_stop_monitor),
                law.last_utility,
                law.reference.rate,
                f64::from(law.reference.monitor),
                law.target.rate,
                f64::from(law.target.monitor),
            ];
            for (i, (name, ours)) in FIELDS.iter().zip(ours).enumerate() {
                let theirs = num(after + i);
                // The binary keeps utilities in x87 long doubles, the port in f64.
                if (ours - theirs).abs() > 1e-9 * theirs.abs().max(1.0) {
                    mismatches.push(format!("line {}: {name} {ours} (binary {theirs})", n + 1));
                }
            }
            if mismatches.len() >= 10 {
                break;
            }
        }
        mismatches
    }

    #[test]
    fn the_law_replays_the_binarys_monitor_trace() {
        for (row, trace) in [
            (
                "12/40/100/1% Poisson",
                include_str!("../../data/vivace-2baf862/monitor-trace-12-40-100-1pct-poisson.txt"),
            ),
            ("24/50/60/0.5%", include_str!("../../data/vivace-2baf862/monitor-trace-24-50-60-0.5pct.txt")),
            ("6/150/inf Poisson", include_str!("../../data/vivace-2baf862/monitor-trace-6-150-inf-poisson.txt")),
        ] {
            assert!(trace.lines().filter(|l| !l.starts_with('#')).count() > 100, "{row}: a short trace");
            let mismatches = replay(trace);
            assert!(mismatches.is_empty(), "{row}:\n{}", mismatches.join("\n"));
        }
    }
}
