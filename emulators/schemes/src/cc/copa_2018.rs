//! Copa as Pantheon ran it from 2018 to 2020: genericCC `d0153f8` (venkatarun95/genericCC),
//! the `sender` with `cctype=markovian delta_conf=do_ss:auto:0.5` under `MIN_RTT=1000000`
//! (Pantheon's `src/wrappers/copa.py`, StanfordSNR/pantheon 0b90d67, 2018-04-30, until
//! 99ce503 changed δ to 0.1 in March 2020).
//!
//! The law, as `MarkovianCC` (`markoviancc.cc`), `RTTWindow` (`rtt-window.cc`),
//! `ReduceOnLoss` (`estimators.cc`) and the send loop `CTCP<T>::send_data` (`ctcp.hh`)
//! implement it at that commit (times in ms, as upstream keeps them):
//!
//! * **RTT windows** (`RTTWindow::new_rtt_sample`): srtt with gain 1/16 (the first sample
//!   sets it); `min_rtt` = min over max(10 s, 20·min_rtt) (the minimum before this sample);
//!   `rtt` ("unjittered") = min over min(that, srtt/2); `is_copa_min`/`is_copa_max` =
//!   min/max over min(that, 4·srtt). Each window is a monotone deque whose horizon is set
//!   just before its sample goes in; the newest sample always survives.
//! * **Mode** (`update_delta`, `auto:`): default mode when `is_copa_min < min_rtt +
//!   0.1·(is_copa_max − min_rtt)` (strict: a perfectly constant RTT reads as competitive),
//!   else competitive. Default: δ = 0.5 (left as is within one RTT sample of the last
//!   loss-doubling). Competitive: on an ACK that revealed loss δ ×= 2 (the call passes an
//!   RTT of 0, so this holds on every such ACK); otherwise 1/δ += 1 once the last update
//!   is an RTT sample old; δ ≤ 0.5. `init` sets δ = 1 until the first ACK's update.
//! * **Target** (`update_intersend_time`, from the 20th ACK: the first two windows only
//!   measure): `target = rtt / ((rtt − min_rtt)·δ)`, unbounded at zero queueing.
//! * **Slow start** (`do_ss`): `W += 1` per ACK until `W ≥ target`, for good.
//! * **Velocity**: at the first ACK more than the latest RTT sample after the last
//!   boundary, if the net direction of the last round (`update_dir`, +1/−1 per ACK) has
//!   the sign of `prev_update_dir`, `v` doubles (the first boundary doubles too: both
//!   start at +1), else `v = 1` and `prev_update_dir` flips. Per ACK `v` halves if above
//!   `W·δ`, `v ≥ 1`, and `W ±= v/(δ·W)` toward the target; `W ≥ 2`.
//! * **Pacing**: `intersend = 0.5·rtt/W`, through genericCC's send loop ([`super::generic_cc`]):
//!   in effect at most `⌈W⌉` packets past the highest ACK, each ACK-clocked send delayed by
//!   up to one gap (with the first gap of 0, the whole `W + 1`).
//! * **Loss** (`onACK`): an ACK for an outstanding packet makes every older outstanding
//!   packet lost. Per lost packet and per ACK `ReduceOnLoss` counts; once more than 20
//!   are counted and 2 latest-RTTs have passed since the last verdict, a loss share over
//!   30 % cuts `W ×= 0.7` (`W ≥ 2`). Order per ACK: RTT sample, δ, window, losses, δ
//!   again if any, the cut.
//! * **Timeout** (the send loop's): `init()` (W = 10, slow start, δ = 1, windows cleared,
//!   the 19 measuring ACKs again).
//! * **Packets**: 1440-byte UDP payloads (`packet_size`, ctcp.hh), first window 10.
//!
//! Port decisions: upstream's handshake RTT paces only the very first packet (`init`'s
//! `_intersend_time = rtt/10`, which `onPktSent` replaces by 0 at once), so the first
//! window leaves as a burst a tenth of an RTT late; the port sends it at once (our
//! transport has no handshake).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

pub use super::generic_cc::DATAGRAM_BYTES;
use super::generic_cc::{ms, SendLoop, UNPACED};
use super::{AckEvent, Controller, LossEvent, LossRule};

/// `num_probe_pkts`: the first window; the law runs from ACK number `2·num_probe_pkts − 1`.
const PROBE_PACKETS: f64 = 10.0;
const MIN_WINDOW: f64 = 2.0;
/// `auto:0.5`.
const DEFAULT_DELTA: f64 = 0.5;

/// `ExtremeWindow`: min (or max) over samples newer than `now − max_time`.
#[derive(Clone, Debug)]
struct ExtremeWindow {
    find_min: bool,
    max_time: f64,
    vals: VecDeque<(f64, f64)>,
}

impl ExtremeWindow {
    fn new(find_min: bool) -> Self {
        Self { find_min, max_time: 10e3, vals: VecDeque::new() }
    }

    fn clear(&mut self) {
        self.max_time = 10e3;
        self.vals.clear();
    }

    fn new_sample(&mut self, val: f64, now: f64) {
        while let Some(&(_, v)) = self.vals.back() {
            if (self.find_min && v > val) || (!self.find_min && v < val) {
                self.vals.pop_back();
            } else {
                break;
            }
        }
        self.vals.push_back((now, val));
        while self.vals.len() > 1 && self.vals[0].0 < now - self.max_time {
            self.vals.pop_front();
        }
    }

    /// The extreme (the deque's front); upstream's initial value before any sample.
    fn get(&self) -> f64 {
        match self.vals.front() {
            Some(&(_, v)) => v,
            None if self.find_min => f64::MAX,
            None => f64::MIN_POSITIVE,
        }
    }
}

/// `RTTWindow`.
#[derive(Clone, Debug)]
struct RttWindow {
    srtt: f64,
    latest: f64,
    min_rtt: ExtremeWindow,
    unjittered: ExtremeWindow,
    copa_min: ExtremeWindow,
    copa_max: ExtremeWindow,
}

impl RttWindow {
    fn new() -> Self {
        Self {
            srtt: 0.0,
            latest: 0.0,
            min_rtt: ExtremeWindow::new(true),
            unjittered: ExtremeWindow::new(true),
            copa_min: ExtremeWindow::new(true),
            copa_max: ExtremeWindow::new(false),
        }
    }

    /// `clear` (which leaves `latest_rtt` alone).
    fn clear(&mut self) {
        self.srtt = 0.0;
        self.min_rtt.clear();
        self.unjittered.clear();
        self.copa_min.clear();
        self.copa_max.clear();
    }

    fn new_sample(&mut self, rtt: f64, now: f64) {
        if self.srtt == 0.0 {
            self.srtt = rtt;
        }
        self.srtt = rtt / 16.0 + (1.0 - 1.0 / 16.0) * self.srtt;
        self.latest = rtt;
        let max_time = 10e3_f64.max(20.0 * self.min_rtt.get());
        self.min_rtt.max_time = max_time;
        self.unjittered.max_time = max_time.min(self.srtt * 0.5);
        self.copa_min.max_time = max_time.min(self.srtt * 4.0);
        self.copa_max.max_time = max_time.min(self.srtt * 4.0);
        self.min_rtt.new_sample(rtt, now);
        self.unjittered.new_sample(rtt, now);
        self.copa_min.new_sample(rtt, now);
        self.copa_max.new_sample(rtt, now);
    }

    fn is_copa(&self) -> bool {
        let min = self.min_rtt.get();
        let threshold = min + 0.1 * (self.copa_max.get() - min);
        self.copa_min.get() < threshold
    }
}

/// `ReduceOnLoss`.
#[derive(Clone, Debug, Default)]
struct ReduceOnLoss {
    lost: u64,
    pkts: u64,
    prev_win_time: f64,
}

impl ReduceOnLoss {
    fn update(&mut self, loss: bool, now: f64, rtt: f64) -> bool {
        if loss {
            self.lost += 1;
        }
        self.pkts += 1;
        if now > self.prev_win_time + 2.0 * rtt && self.pkts > 20 {
            let rate = self.lost as f64 / self.pkts as f64;
            self.prev_win_time = now;
            self.lost = 0;
            self.pkts = 0;
            return rate > 0.3;
        }
        false
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Default,
    Competitive,
}

#[derive(Clone, Debug)]
pub struct Copa2018 {
    // MarkovianCC state.
    window: f64,
    delta: f64,
    mode: Mode,
    slow_start: bool,
    rtts: RttWindow,
    min_rtt: f64,
    /// Outstanding packets: sequence number -> send time (ms).
    unacked: BTreeMap<u64, f64>,
    acks: u64,
    last_update_time: f64,
    update_dir: i64,
    prev_update_dir: i64,
    velocity: f64,
    prev_delta_update_time: f64,
    prev_delta_update_time_loss: f64,
    reduce_on_loss: ReduceOnLoss,
    cur_intersend: f64,
    intersend: f64,
    send: SendLoop,
}

impl Copa2018 {
    /// `_mss` is the transport's packet: upstream's datagram has its own size.
    pub fn new(_mss: u64) -> Self {
        let mut c = Self {
            window: PROBE_PACKETS,
            delta: 1.0,
            mode: Mode::Default,
            slow_start: true,
            rtts: RttWindow::new(),
            min_rtt: f64::MAX,
            unacked: BTreeMap::new(),
            acks: 0,
            last_update_time: 0.0,
            update_dir: 1,
            prev_update_dir: 1,
            velocity: 1.0,
            prev_delta_update_time: 0.0,
            prev_delta_update_time_loss: 0.0,
            reduce_on_loss: ReduceOnLoss::default(),
            cur_intersend: 0.0,
            intersend: 0.0,
            send: SendLoop::default(),
        };
        c.init();
        c
    }

    /// `MarkovianCC::init` (no handshake RTT: the first gap is 0).
    fn init(&mut self) {
        self.intersend = 0.0;
        self.window = PROBE_PACKETS;
        self.min_rtt = f64::MAX;
        self.delta = 1.0;
        self.unacked.clear();
        self.rtts.clear();
        self.cur_intersend = 0.0;
        self.last_update_time = 0.0;
        self.update_dir = 1;
        self.prev_update_dir = 1;
        self.velocity = 1.0;
        self.acks = 0;
        self.mode = Mode::Default;
        self.prev_delta_update_time = 0.0;
        self.prev_delta_update_time_loss = 0.0;
        self.reduce_on_loss = ReduceOnLoss::default();
        self.slow_start = true;
    }

    pub fn window(&self) -> f64 {
        self.window
    }

    pub fn delta(&self) -> f64 {
        self.delta
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn velocity(&self) -> f64 {
        self.velocity
    }

    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    /// `update_delta`.
    fn update_delta(&mut self, pkt_lost: bool, cur_rtt: f64, now: f64) {
        self.mode = if self.rtts.is_copa() { Mode::Default } else { Mode::Competitive };
        match self.mode {
            Mode::Default => {
                if self.prev_delta_update_time == 0.0 || self.prev_delta_update_time_loss + cur_rtt < now {
                    self.delta = DEFAULT_DELTA;
                    self.prev_delta_update_time = now;
                }
            }
            Mode::Competitive => {
                if self.prev_delta_update_time == 0.0 {
                    self.delta = DEFAULT_DELTA;
                }
                if pkt_lost && self.prev_delta_update_time_loss + cur_rtt < now {
                    self.delta *= 2.0;
                    self.prev_delta_update_time_loss = now;
                } else if self.prev_delta_update_time + cur_rtt < now {
                    self.delta = 1.0 / (1.0 / self.delta + 1.0);
                    self.prev_delta_update_time = now;
                }
                self.delta = self.delta.min(DEFAULT_DELTA);
            }
        }
    }

    /// `update_intersend_time`.
    fn update_window(&mut self, now: f64) {
        if self.acks < 2 * PROBE_PACKETS as u64 - 1 {
            return;
        }
        let rtt = self.rtts.unjittered.get();
        let queueing = rtt - self.min_rtt;
        let target = if queueing == 0.0 { f64::MAX } else { rtt / (queueing * self.delta) };
        if self.slow_start {
            self.window += 1.0;
            if self.window >= target {
                self.slow_start = false;
            }
        } else {
            if self.last_update_time + self.rtts.latest < now {
                if self.prev_update_dir * self.update_dir > 0 {
                    if self.velocity < 0.006 {
                        self.velocity += 0.005;
                    } else {
                        self.velocity = self.velocity.trunc() * 2.0;
                    }
                } else {
                    self.velocity = 1.0;
                    self.prev_update_dir *= -1;
                }
                self.last_update_time = now;
                self.update_dir = 0;
            }
            if self.velocity > self.window * self.delta {
                self.velocity /= 2.0;
            }
            self.velocity = self.velocity.max(1.0);
            if self.window < target {
                self.update_dir += 1;
                self.window += self.velocity / (self.delta * self.window);
            } else {
                self.update_dir -= 1;
                self.window -= self.velocity / (self.delta * self.window);
            }
        }
        self.window = self.window.max(MIN_WINDOW);
        self.cur_intersend = 0.5 * rtt / self.window;
        self.intersend = self.cur_intersend;
    }
}

impl Controller for Copa2018 {
    fn name(&self) -> &'static str {
        "copa-2018"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        let now = ms(ack.now);
        self.send.begin_pass(now, self.window, self.intersend);
        let rtt = ms(ack.rtt);
        self.rtts.new_sample(rtt, now);
        self.min_rtt = self.rtts.min_rtt.get();
        self.update_delta(false, rtt, now);
        self.update_window(now);

        let mut lost = false;
        let mut reduce = false;
        if self.unacked.contains_key(&ack.seq) {
            let older: Vec<u64> = self.unacked.range(..=ack.seq).map(|(&s, _)| s).collect();
            for s in older {
                if s < ack.seq {
                    lost = true;
                    reduce |= self.reduce_on_loss.update(true, now, self.rtts.latest);
                }
                self.unacked.remove(&s);
            }
        }
        if lost {
            self.update_delta(true, 0.0, now);
        }
        reduce |= self.reduce_on_loss.update(false, now, self.rtts.latest);
        if reduce {
            self.window = (self.window * 0.7).max(MIN_WINDOW);
            self.cur_intersend = 0.5 * self.rtts.unjittered.get() / self.window;
            self.intersend = self.cur_intersend;
        }
        self.acks += 1;
        self.send.on_ack(ack.seq, now);
        self.send.check_pacer(ack.now, self.intersend);
    }

    /// The transport's losses only free its own accounting: upstream finds its losses in
    /// `onACK` (above) and counts its window from the highest ACK.
    fn on_loss(&mut self, _loss: &LossEvent) {}

    /// A send belongs to the pass the last ACK or timer began ([`super::generic_cc`]).
    fn on_send(&mut self, now: Duration, seq: u64) {
        self.send.on_send(seq, self.intersend);
        self.unacked.insert(seq, ms(now));
        self.intersend = self.cur_intersend;
        self.send.check_pacer(now, self.intersend);
    }

    fn cwnd(&self) -> u64 {
        self.send.cwnd(self.window)
    }

    fn window_closed(&self) -> bool {
        self.send.window_closed(self.window)
    }

    // The transport's default wait (a sleep to each deadline), not genericCC's whole-ms poll
    // (`generic_cc::PACER`) that taova-2018 takes: with that poll copa-2018 passed 8 of 10
    // rows (100/5/300 tput -6.6 %), with this one 10 of 10 (experiments/README).
    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        UNPACED
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(DATAGRAM_BYTES)
    }

    fn timer_deadline(&self) -> Option<Duration> {
        Some(self.send.timer_deadline(self.window))
    }

    fn on_timer(&mut self, now: Duration) {
        let t = ms(now);
        self.send.begin_pass(t, self.window, self.intersend);
        if self.send.idle_restart(t) {
            self.init();
        }
        self.send.check_pacer(now, self.intersend);
    }

    fn loss_rule(&self) -> LossRule {
        LossRule::Reorder(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{self, Link, PAYLOAD};

    fn at(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1e3)
    }

    fn ack(c: &mut Copa2018, now_ms: f64, seq: u64, rtt_ms: f64) {
        c.on_ack(&AckEvent {
            now: at(now_ms),
            seq,
            sent_at: at((now_ms - rtt_ms).max(0.0)),
            rtt: at(rtt_ms),
            one_way_delay_us: 0,
            acked_bytes: PAYLOAD,
            bytes_in_flight: 0,
            next_seq: 0,
            delivery_rate: None,
            srtt: at(rtt_ms),
        });
    }

    /// Sends `seq` at `now_ms` and ACKs it `rtt_ms` later: one round of the loop per packet.
    fn send_and_ack(c: &mut Copa2018, now_ms: f64, seq: u64, rtt_ms: f64) {
        c.on_send(at(now_ms - rtt_ms), seq);
        ack(c, now_ms, seq, rtt_ms);
    }

    #[test]
    fn first_window_is_ten_packets_and_the_first_two_rounds_only_measure() {
        let mut c = Copa2018::new(PAYLOAD);
        assert_eq!(c.payload_bytes(), Some(1440));
        for seq in 0..10 {
            assert!(!c.window_closed(), "packet {seq}");
            c.on_send(Duration::ZERO, seq);
        }
        // Before any ACK the loop allows W packets; afterwards W + 1 past the highest ACK.
        assert!(c.window_closed());
        for seq in 0..19 {
            ack(&mut c, 50.0 + seq as f64, seq, 50.0);
            assert_eq!(c.window(), 10.0);
        }
        // The 20th ACK runs slow start: +1.
        ack(&mut c, 70.0, 19, 50.0);
        assert_eq!(c.window(), 11.0);
        assert!(c.in_slow_start());
    }

    #[test]
    fn a_queue_that_empties_within_four_srtts_means_default_mode() {
        let mut c = Copa2018::new(PAYLOAD);
        // A perfectly constant RTT reads as competitive (the test is strict).
        ack(&mut c, 100.0, 0, 50.0);
        assert_eq!(c.mode(), Mode::Competitive);
        // A spread whose minimum is the flow's minimum: default, delta = 0.5.
        ack(&mut c, 101.0, 1, 100.0);
        assert_eq!(c.mode(), Mode::Default);
        assert_eq!(c.delta(), 0.5);
        // 4 srtt (~ 4 x 53 ms) of samples that stay 30 ms above the minimum: competitive.
        let mut t = 102.0;
        while t < 450.0 {
            ack(&mut c, t, 2, 80.0);
            t += 1.0;
        }
        assert_eq!(c.mode(), Mode::Competitive);
        // One sample back near the minimum switches back at once.
        ack(&mut c, t, 2, 51.0);
        assert_eq!(c.mode(), Mode::Default);
        assert_eq!(c.delta(), 0.5);
    }

    #[test]
    fn competitive_delta_grows_one_over_delta_per_rtt_and_doubles_on_loss() {
        let mut c = Copa2018::new(PAYLOAD);
        // Constant 50 ms: competitive from the first ACK (delta 0.5, then 1/3 at once: the
        // last update is "at 0", more than one RTT sample ago).
        let mut seq = 0;
        send_and_ack(&mut c, 100.0, seq, 50.0);
        assert_eq!(c.mode(), Mode::Competitive);
        assert!((c.delta() - 1.0 / 3.0).abs() < 1e-12);
        // Then one step per RTT sample of time: 1/4 after 50+ ms, 1/5 after another.
        let mut t = 100.0;
        for expected in [3.0, 4.0, 5.0] {
            while t < 100.0 + (expected - 2.0) * 50.0 {
                t += 1.0;
                seq += 1;
                send_and_ack(&mut c, t, seq, 50.0);
            }
            assert!((1.0 / c.delta() - expected).abs() < 1e-9, "1/delta {} at {t}", 1.0 / c.delta());
        }
        // An ACK that reveals a loss doubles it (1/5 -> 2/5), capped at 0.5.
        c.on_send(at(t - 49.0), seq + 1);
        c.on_send(at(t - 48.0), seq + 2);
        ack(&mut c, t + 2.0, seq + 2, 50.0);
        assert!((c.delta() - 0.4).abs() < 1e-9, "delta {}", c.delta());
        c.on_send(at(t - 47.0), seq + 3);
        c.on_send(at(t - 46.0), seq + 4);
        ack(&mut c, t + 4.0, seq + 4, 50.0);
        assert_eq!(c.delta(), 0.5);
    }

    /// Past slow start with RTTmin 50 ms and W = 11.
    fn past_slow_start() -> (Copa2018, f64, u64) {
        let mut c = Copa2018::new(PAYLOAD);
        for seq in 0..19 {
            send_and_ack(&mut c, 60.0 + seq as f64, seq, 50.0);
        }
        // 100 ms standing RTT on a 50 ms minimum: target 100/(50 x 0.5) = 4 < 11.
        send_and_ack(&mut c, 200.0, 19, 100.0);
        assert!(!c.in_slow_start());
        assert_eq!(c.mode(), Mode::Default);
        assert_eq!(c.window(), 11.0);
        (c, 200.0, 20)
    }

    #[test]
    fn velocity_doubles_each_round_the_direction_holds_and_resets_when_it_turns() {
        let (mut c, mut t, mut seq) = past_slow_start();
        // Samples at the minimum: no queueing, unbounded target, every ACK goes up.
        let mut seen = Vec::new();
        let end = t + 160.0;
        while t < end {
            t += 1.0;
            send_and_ack(&mut c, t, seq, 50.0);
            seq += 1;
            if seen.last() != Some(&c.velocity()) {
                seen.push(c.velocity());
            }
        }
        // The first round boundary doubles as well (both directions start at +1).
        assert_eq!(seen, vec![2.0, 4.0, 8.0, 16.0], "window {}", c.window());
        // A standing queue far above the target: the round's net direction turns down, and
        // at the next boundary (one latest sample, 150 ms, on) the velocity starts over.
        let w = c.window();
        let mut reset_at = None;
        let end = t + 400.0;
        while t < end {
            t += 1.0;
            send_and_ack(&mut c, t, seq, 150.0);
            seq += 1;
            if reset_at.is_none() && c.velocity() == 1.0 {
                reset_at = Some(t);
            }
        }
        assert!(reset_at.is_some(), "velocity {}", c.velocity());
        assert!(c.window() < w);
    }

    #[test]
    fn velocity_is_capped_at_window_times_delta() {
        let (mut c, mut t, mut seq) = past_slow_start();
        c.window = 3.0;
        // v would be 2 > W delta = 1.5: halved to 1.
        t += 1.0;
        send_and_ack(&mut c, t, seq, 50.0);
        seq += 1;
        assert_eq!(c.velocity(), 1.0);
        let _ = seq;
    }

    #[test]
    fn heavy_loss_over_two_rtts_cuts_the_window_by_0_7() {
        let (mut c, mut t, mut seq) = past_slow_start();
        c.window = 40.0;
        // Every other packet lost: 50 % of > 20 counted over 2 latest RTTs. (Between
        // verdicts the window grows, by at most one packet per ACK.)
        let mut cut = false;
        for _ in 0..40 {
            let before = c.window();
            t += 5.0;
            c.on_send(at(t - 51.0), seq);
            send_and_ack(&mut c, t, seq + 1, 50.0);
            seq += 2;
            if c.window() < 0.75 * before {
                cut = true;
                break;
            }
        }
        assert!(cut, "window {}", c.window());
    }

    #[test]
    fn pacer_gap_is_half_the_standing_rtt_over_the_window() {
        let (mut c, t, seq) = past_slow_start();
        let gap = 0.5 * c.rtts.unjittered.get() / c.window();
        assert!((c.intersend - gap).abs() < 1e-12);
        // A send moves last_send on by one gap; caught up with the clock, the next waits.
        c.send.last_send = t;
        c.on_send(at(t), seq);
        assert!(c.window_closed());
        let open = c.timer_deadline().expect("timer");
        assert!((ms(open) - (t + 2.0 * gap)).abs() < 1e-3);
        c.on_timer(open);
        assert!(!c.window_closed());
    }

    #[test]
    fn two_seconds_without_an_ack_restart_the_controller() {
        let (mut c, t, seq) = past_slow_start();
        for s in seq..seq + 12 {
            c.on_send(at(t), s);
        }
        assert!(c.window_closed());
        c.on_timer(at(t + 1000.0));
        assert!(!c.in_slow_start());
        c.on_timer(at(t + 2000.5));
        assert!(c.in_slow_start());
        assert_eq!(c.window(), 10.0);
        assert_eq!(c.delta(), 1.0);
        assert!(!c.window_closed());
    }

    /// On a smooth bottleneck the default mode keeps about 1/delta = 2 packets queued and
    /// fills the link.
    #[test]
    fn smooth_link_keeps_a_short_queue_and_fills_the_link() {
        let link = Link::reference();
        let o = sim::run(Box::new(Copa2018::new(PAYLOAD)), &link, Duration::from_secs(20));
        let p50 = o.delay_percentile_ms(50.0, Duration::from_secs(5));
        let p95 = o.delay_percentile_ms(95.0, Duration::from_secs(5));
        eprintln!("smooth: utilization {:.3}, p50 {p50:.2} ms, p95 {p95:.2} ms", o.utilization());
        assert!(o.utilization() > 0.85, "utilization {}", o.utilization());
        assert!(p95 < 21.0 + 15.0, "p95 {p95}");
        assert_eq!(o.dropped_packets, 0);
    }
}
