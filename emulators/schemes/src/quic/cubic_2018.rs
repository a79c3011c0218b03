//! The congestion controller of `quic-2018`: Chromium 60's `TcpCubicSenderBytes` (the
//! `kCubicBytes` sender every `QuicConnection` starts with) as a quinn congestion controller,
//! with the defaults proto-quic 77961f1's `quic_server` runs it under (the toy client sends no
//! connection options, so none of the options' variants apply).
//!
//! * Window in bytes: 32 × 1460 at first (`kInitialCongestionWindow` × `kDefaultTCPMSS`), at
//!   least 2 × 1460 (`kDefaultMinimumCongestionWindow`), at most 2000 × 1460
//!   (`kDefaultMaxCongestionWindowPackets`).
//! * Slow start while the window is below the threshold: + 1460 bytes per acknowledged
//!   packet, whatever its size. `HybridSlowStart` ends it: per round (from the first RTT
//!   sample after the last round ended, until a packet sent at or after the round's start is
//!   acknowledged) the minimum of the first 8 latest-RTT samples is compared with the path's
//!   minimum RTT; above minimum + clamp(min/8, 4 ms, 16 ms) it exits (threshold = window),
//!   once the window is at least 16 packets.
//! * Congestion avoidance: `CubicBytes` with two emulated connections (no fix options): on
//!   a loss event the window × β = (1 + 0.7) / 2 = 0.85 and the last maximum is the window,
//!   or 0.85 × the window when it never reached the previous maximum; after each ack the
//!   target is origin − ⌊410·(K − t)³ / 2⁴⁰⌋ × 1460 with t = now + min RTT − epoch in 1/1024 s
//!   and K = ∛(2⁴⁰/410/1460 · (last max − window)), at most window + half the bytes acked
//!   since the last update, recomputed at most every 30 ms unless the window changed; the
//!   window follows the larger of it and a Reno-friendly estimate that grows by
//!   α·1460·acked / estimate with α = 3·2²·(1 − β)/(1 + β).
//! * Losses: one cutback per loss event (a loss of a packet sent before the last cutback is
//!   ignored, NewReno style); no growth until a packet sent after the cutback is
//!   acknowledged (recovery); no growth and a reset epoch while the sender is not window
//!   limited (`OnApplicationLimited`): `IsCwndLimited` of the bytes in flight before the ACK,
//!   i.e. more than 3 × 1460 bytes of the window unused (in slow start: half of it or more),
//!   whatever held the sender back, the pacer included. So when the window grows faster than
//!   the pacer lets the bytes in flight follow it (Cubic's convex growth on a long queue),
//!   each ACK restarts the Cubic epoch and the growth stalls, as upstream's does. A
//!   persistent congestion (quinn's stand-in for
//!   Chromium's retransmission timeout): threshold = window / 2, window = the minimum,
//!   Cubic and hybrid slow start reset.
//!
//! Packet numbers are replaced by send times (quinn tells a controller when acknowledged and
//! lost packets were sent, not their numbers); the latest RTT sample is the send-to-ack time
//! of the last packet of an ACK (Chromium subtracts the peer's ack delay). Not reproduced:
//! proportional rate reduction in recovery (here the window alone gates sending).
//!
//! On a sender, the controller is given a `SendGate`: it tells the gate its window, slow
//! start, recovery, smoothed RTT and the bytes in flight, and reports quinn a window above
//! 4 GiB, so that the gate, Chromium's window check and pacer, decides when packets leave
//! rather than quinn's own (`send_gate`). The bytes in flight before an ACK leave out the
//! datagram the gate holds. Without a gate (the receiver, the unit tests) quinn sends by
//! this window and its own pacer.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

use super::send_gate::{SendGate, SenderState};

/// `kDefaultTCPMSS`: the unit of Chromium's window arithmetic.
pub(crate) const MSS: u64 = 1460;
/// `kInitialCongestionWindow` packets.
pub(crate) const INITIAL_WINDOW: u64 = 32 * MSS;
/// `kDefaultMinimumCongestionWindow`.
const MIN_WINDOW: u64 = 2 * MSS;
/// `kDefaultMaxCongestionWindowPackets` packets.
pub(crate) const MAX_WINDOW: u64 = 2000 * MSS;
/// `kMaxBurstBytes`: the unused window up to which the sender still counts as window limited.
const MAX_BURST: u64 = 3 * MSS;
/// `kBeta` for `kDefaultNumConnections` = 2 emulated connections.
const BETA: f32 = (2.0 - 1.0 + 0.7) / 2.0;
/// `kBetaLastMax` (not scaled to N connections without the BLMX option).
const BETA_LAST_MAX: f32 = 0.85;
/// Cubic's time unit is 1/1024 s; `kCubeScale` and `kCubeCongestionWindowScale` make C = 0.4.
const CUBE_SCALE: u32 = 40;
const CUBE_WINDOW_SCALE: i128 = 410;
const CUBE_FACTOR: u64 = (1u64 << CUBE_SCALE) / 410 / MSS;
/// `MaxCubicTimeInterval`.
const CUBIC_UPDATE_INTERVAL: Duration = Duration::from_millis(30);
/// The window reported to quinn when a `SendGate` decides instead: above 4 GiB, which turns
/// quinn's pacer off (`Pacer::delay`) and never blocks it.
const GATED_WINDOW: u64 = 1 << 33;
/// `kMinRetransmissionTimeMs`; the gate's retransmission timeout is the larger of it and two
/// RTTs (quinn does not expose the RTT variation of Chromium's srtt + 4 × rttvar).
pub(crate) const MIN_RTO: Duration = Duration::from_millis(200);
/// `HybridSlowStart`'s constants.
const HYSTART_LOW_WINDOW: u64 = 16;
const HYSTART_MIN_SAMPLES: u32 = 8;
const HYSTART_MIN_THRESHOLD: Duration = Duration::from_millis(4);
const HYSTART_MAX_THRESHOLD: Duration = Duration::from_millis(16);

/// The emulated connections' alpha: 3 N² (1 − β) / (1 + β).
fn alpha() -> f32 {
    3.0 * 2.0 * 2.0 * (1.0 - BETA) / (1.0 + BETA)
}

/// Chromium's `CubicBytes` (its default, unfixed arithmetic).
#[derive(Clone, Debug, Default)]
struct CubicBytes {
    epoch: Option<Instant>,
    last_update: Option<Instant>,
    last_window: u64,
    last_max_window: u64,
    acked_bytes: u64,
    estimated_tcp_window: u64,
    origin_window: u64,
    time_to_origin: i64,
    last_target: u64,
}

impl CubicBytes {
    fn reset(&mut self) {
        *self = Self::default();
    }

    fn on_application_limited(&mut self) {
        self.epoch = None;
    }

    fn window_after_loss(&mut self, window: u64) -> u64 {
        self.last_max_window =
            if window < self.last_max_window { (BETA_LAST_MAX * window as f32) as u64 } else { window };
        self.epoch = None;
        (window as f32 * BETA) as u64
    }

    fn window_after_ack(&mut self, acked: u64, window: u64, min_rtt: Duration, now: Instant) -> u64 {
        self.acked_bytes += acked;
        if self.last_window == window && self.last_update.is_some_and(|at| now - at <= CUBIC_UPDATE_INTERVAL) {
            return self.last_target.max(self.estimated_tcp_window);
        }
        self.last_window = window;
        self.last_update = Some(now);
        let epoch = match self.epoch {
            Some(epoch) => epoch,
            None => {
                self.epoch = Some(now);
                self.acked_bytes = acked;
                self.estimated_tcp_window = window;
                if self.last_max_window <= window {
                    self.time_to_origin = 0;
                    self.origin_window = window;
                } else {
                    self.time_to_origin = ((CUBE_FACTOR * (self.last_max_window - window)) as f64).cbrt() as i64;
                    self.origin_window = self.last_max_window;
                }
                now
            }
        };
        let elapsed = (((now + min_rtt - epoch).as_micros() as i64) << 10) / 1_000_000;
        let offset = i128::from(self.time_to_origin - elapsed);
        // An arithmetic shift (floor) of a signed cube: below the origin the delta is negative
        // and the target rises above the origin (the convex part).
        let delta = ((CUBE_WINDOW_SCALE * offset * offset * offset) >> CUBE_SCALE) * i128::from(MSS);
        let target = (i128::from(self.origin_window) - delta).max(0) as u64;
        let target = target.min(window + self.acked_bytes / 2);
        let estimated = self.estimated_tcp_window as f32;
        self.estimated_tcp_window = (estimated + self.acked_bytes as f32 * (alpha() * MSS as f32) / estimated) as u64;
        self.acked_bytes = 0;
        self.last_target = target;
        target.max(self.estimated_tcp_window)
    }
}

/// Chromium's `HybridSlowStart` (delay increase only), rounds delimited by send times.
#[derive(Clone, Debug, Default)]
struct HybridSlowStart {
    started: bool,
    found: bool,
    last_sent: Option<Instant>,
    round_end: Option<Instant>,
    samples: u32,
    round_min_rtt: Option<Duration>,
}

impl HybridSlowStart {
    fn on_sent(&mut self, now: Instant) {
        self.last_sent = Some(now);
    }

    /// An acknowledgement of a packet sent at `sent` (slow start only): the round ends with
    /// the first packet sent at or after its start.
    fn on_acked(&mut self, sent: Instant) {
        if self.round_end.is_none_or(|end| end <= sent) {
            self.started = false;
        }
    }

    fn restart(&mut self) {
        self.started = false;
        self.found = false;
    }

    fn should_exit(&mut self, latest_rtt: Duration, min_rtt: Duration, window_packets: u64) -> bool {
        if !self.started {
            self.round_end = self.last_sent;
            self.round_min_rtt = None;
            self.samples = 0;
            self.started = true;
        }
        if self.found {
            return true;
        }
        self.samples += 1;
        if self.samples <= HYSTART_MIN_SAMPLES {
            self.round_min_rtt = Some(self.round_min_rtt.map_or(latest_rtt, |m| m.min(latest_rtt)));
        }
        if self.samples == HYSTART_MIN_SAMPLES {
            let threshold = (min_rtt / 8).clamp(HYSTART_MIN_THRESHOLD, HYSTART_MAX_THRESHOLD);
            if self.round_min_rtt.is_some_and(|m| m > min_rtt + threshold) {
                self.found = true;
            }
        }
        window_packets >= HYSTART_LOW_WINDOW && self.found
    }
}

/// `TcpCubicSenderBytes`; with a `SendGate`, the gate sends by its window and Chromium's
/// pacer, otherwise quinn does by its own (see the module doc).
#[derive(Clone, Debug)]
pub(crate) struct ChromiumCubic {
    gate: Option<Arc<SendGate>>,
    /// The smoothed RTT and the retransmission timeout the gate paces and waits by.
    srtt: Duration,
    rto: Duration,
    window: u64,
    threshold: u64,
    cubic: CubicBytes,
    hystart: HybridSlowStart,
    /// When the latest packet was sent (Chromium's largest sent packet number).
    last_sent: Option<Instant>,
    /// The latest send at the last cutback (`largest_sent_at_last_cutback_`).
    cutback: Option<Instant>,
    /// The latest send time among acknowledged packets (`largest_acked_packet_number_`).
    largest_acked: Option<Instant>,
    /// This ACK's latest-sent packet and its RTT sample, and the path's minimum RTT.
    ack_sample: Option<(Instant, Duration)>,
    min_rtt: Duration,
    /// This ACK's acknowledged packets (send time, bytes), handled once quinn reports the
    /// bytes in flight after it (`on_end_acks`): Chromium grows the window by the bytes in
    /// flight before the ACK (`prior_in_flight`).
    batch: Vec<(Instant, u64)>,
}

impl ChromiumCubic {
    pub(crate) fn new(gate: Option<Arc<SendGate>>) -> Self {
        Self {
            gate,
            srtt: Duration::ZERO,
            rto: MIN_RTO,
            window: INITIAL_WINDOW,
            threshold: MAX_WINDOW,
            cubic: CubicBytes::default(),
            hystart: HybridSlowStart::default(),
            last_sent: None,
            cutback: None,
            largest_acked: None,
            ack_sample: None,
            min_rtt: Duration::ZERO,
            batch: Vec::new(),
        }
    }

    fn in_slow_start(&self) -> bool {
        self.window < self.threshold
    }

    /// `IsCwndLimited`: the window, not the pacer or the application, held the sender back.
    fn is_cwnd_limited(&self, in_flight: u64) -> bool {
        if in_flight >= self.window {
            return true;
        }
        let slow_start_limited = self.in_slow_start() && in_flight > self.window / 2;
        slow_start_limited || self.window - in_flight <= MAX_BURST
    }

    fn in_recovery(&self) -> bool {
        matches!((self.largest_acked, self.cutback), (Some(acked), Some(cut)) if acked <= cut)
    }

    /// A packet sent at `sent` of `bytes` acknowledged at `now` (`OnPacketAcked`, growth by
    /// `MaybeIncreaseCwnd`); `app_limited`: the sender was not window limited.
    fn acked(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, min_rtt: Duration) {
        self.min_rtt = min_rtt;
        if self.ack_sample.is_none_or(|(latest, _)| sent >= latest) {
            self.ack_sample = Some((sent, now.saturating_duration_since(sent)));
        }
        self.largest_acked = Some(self.largest_acked.map_or(sent, |at| at.max(sent)));
        if self.in_recovery() {
            return;
        }
        if app_limited {
            self.cubic.on_application_limited();
            return;
        }
        if self.window >= MAX_WINDOW {
            return;
        }
        if self.in_slow_start() {
            self.window += MSS;
        } else {
            self.window = MAX_WINDOW.min(self.cubic.window_after_ack(bytes, self.window, self.min_rtt, now));
        }
    }

    /// A packet of this ACK acknowledged (quinn's `on_ack`): handled at `on_end_acks`.
    fn queue_ack(&mut self, sent: Instant, bytes: u64, min_rtt: Duration) {
        self.min_rtt = min_rtt;
        self.batch.push((sent, bytes));
    }

    pub(crate) fn slow_start_threshold(&self) -> u64 {
        self.threshold
    }

    /// A loss of a packet sent at `sent` (`OnPacketLost`), or a persistent congestion (quinn's
    /// stand-in for Chromium's retransmission timeout).
    fn lost(&mut self, sent: Instant, is_persistent_congestion: bool) {
        if is_persistent_congestion {
            self.cutback = None;
            self.hystart.restart();
            self.cubic.reset();
            self.threshold = self.window / 2;
            self.window = MIN_WINDOW;
            return;
        }
        if self.cutback.is_some_and(|cut| sent <= cut) {
            return;
        }
        self.window = self.cubic.window_after_loss(self.window).max(MIN_WINDOW);
        self.threshold = self.window;
        self.cutback = self.last_sent.max(Some(sent));
    }

    /// Tells the gate, if any, the sender's state after an event.
    fn publish(&self) {
        if let Some(gate) = &self.gate {
            gate.publish(SenderState {
                window: self.window,
                slow_start: self.in_slow_start(),
                recovery: self.in_recovery(),
                srtt: self.srtt,
                rto: self.rto,
            });
        }
    }
}

impl Controller for ChromiumCubic {
    fn on_sent(&mut self, now: Instant, bytes: u64, _last_packet_number: u64) {
        self.last_sent = Some(now);
        self.hystart.on_sent(now);
        if let Some(gate) = &self.gate {
            gate.on_built(bytes);
        }
    }

    fn on_ack(&mut self, _now: Instant, sent: Instant, bytes: u64, _app_limited: bool, rtt: &RttEstimator) {
        self.srtt = rtt.get();
        self.rto = MIN_RTO.max(2 * rtt.conservative());
        self.queue_ack(sent, bytes, rtt.min());
    }

    fn on_end_acks(&mut self, now: Instant, in_flight: u64, _app_limited: bool, _largest: Option<u64>) {
        // A datagram the gate holds is in quinn's count but has not left.
        let held = self.gate.as_ref().map_or(0, |gate| gate.held_bytes());
        let prior_in_flight =
            (in_flight + self.batch.iter().map(|&(_, bytes)| bytes).sum::<u64>()).saturating_sub(held);
        if let Some(gate) = &self.gate {
            gate.on_ack(now, in_flight);
        }
        // Taken and given back emptied, so the next ACK's packets reuse its allocation.
        let mut batch = std::mem::take(&mut self.batch);
        for &(sent, bytes) in &batch {
            let app_limited = !self.is_cwnd_limited(prior_in_flight);
            self.acked(now, sent, bytes, app_limited, self.min_rtt);
        }
        batch.clear();
        self.batch = batch;
        if let Some((sent, latest_rtt)) = self.ack_sample.take() {
            if self.in_slow_start() && self.hystart.should_exit(latest_rtt, self.min_rtt, self.window / MSS) {
                self.threshold = self.window;
            }
            if self.in_slow_start() {
                self.hystart.on_acked(sent);
            }
        }
        self.publish();
    }

    fn on_congestion_event(&mut self, _now: Instant, sent: Instant, is_persistent_congestion: bool, lost: u64) {
        self.lost(sent, is_persistent_congestion);
        if let Some(gate) = &self.gate {
            gate.on_loss(lost);
        }
        self.publish();
    }

    fn on_mtu_update(&mut self, _new_mtu: u16) {}

    fn window(&self) -> u64 {
        if self.gate.is_some() {
            GATED_WINDOW
        } else {
            self.window
        }
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut metrics = ControllerMetrics::default();
        metrics.congestion_window = self.window;
        metrics.ssthresh = Some(self.slow_start_threshold());
        metrics
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        INITIAL_WINDOW
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// Builds a [`ChromiumCubic`] per connection, all sending through `gate` if given (a
/// sender's endpoint serves one connection, as Pantheon's `quic_server` serves its client).
#[derive(Debug, Default)]
pub(crate) struct ChromiumCubicConfig {
    pub(crate) gate: Option<Arc<SendGate>>,
}

impl ControllerFactory for ChromiumCubicConfig {
    fn build(self: Arc<Self>, _now: Instant, _current_mtu: u16) -> Box<dyn Controller> {
        Box::new(ChromiumCubic::new(self.gate.clone()))
    }
}

#[cfg(test)]
mod tests;
