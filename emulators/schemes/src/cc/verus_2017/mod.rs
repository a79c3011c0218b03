//! Verus as Pantheon ran it in 2017: yzaki/verus 8ed2ac0 (src/verus_server.cpp, the sender;
//! src/verus.hpp, the parameters) with Pantheon's verus_mtu.patch (1414-byte UDP payloads).
//!
//! The law as implemented (times in ms; every packet is acknowledged and carries the window
//! `w` it was sent at, here kept per sequence number in `on_send`):
//!
//! * **Per ACK** (`receiver_thread`, `updateUponReceivingPacket`): delay = the packet's RTT;
//!   ACKs of an older slow-start session are ignored. wCrt (packets out) −1; the delay joins
//!   the epoch's list; dTBar = 0.875·dTBar + 0.125·delay; dMin = min delay. Outside a loss
//!   phase the profile point of `w` moves: P[w] = 0.875·P[w] + 0.125·delay (first: delay);
//!   inside one, wBar += 1/wBar and (with a fitted profile) dEst = min(dEst, profile(wBar)).
//!   An ACK of a packet sent at w ≤ wBar ends the loss phase. The loss timer is re-armed to
//!   clamp(5·delay, 150, 1000) ms.
//! * **Each 5 ms epoch** after slow start (`main`): dMax = the epoch's largest delay (none:
//!   max(dMaxLast, time since the last in-order ACK)); if dMaxLast/dMin > R = 6, dEst =
//!   max(dMin, dEst − 2) (at dMin: dMin += 10 when wCrt < 2, else nothing is sent this epoch);
//!   else if dMax rose, dEst = max(dMin, dEst − 1); else dEst += 2. wBar = max(1, w(dEst)),
//!   w(d) = the first w ≥ 2 whose fitted delay exceeds d, minus 1 (`calcDelayCurve`; before a
//!   fit, the raw points, lowering d by 2 after each pass until one exceeds it, and a fit
//!   landing mid-pass serves from the window reached; no w below 40000: slow start again).
//!   The epoch releases S = max(0, wBar + ⌊wCrt·(2−n)/(n−1)⌋) packets, n = ⌈dTBar/5⌉
//!   (n ≤ 1: max(0, wBar − wCrt)) (`calcSi`), sent back to back; dMaxLast = 0.2·dMaxLast +
//!   0.8·dMax.
//! * **Delay profile** (`delayProfile_thread`): at the end of slow start and 1 s after each
//!   fit is ready, a penalised cubic spline ([`profile::fit`], ALGLIB's spline1dfitpenalized,
//!   ρ = 2) through the points P[w], w below the cut a slow-start loss set; M = ⌊max w / N⌋
//!   basis functions, N from 15 down until max w / N ≥ 5 (N < 1: slow start again). As
//!   upstream, the fit runs in its own thread and the epochs go on with the previous profile
//!   until it is ready (with thousands of windows it takes seconds).
//! * **Loss** (`removeExpiredPacketsFromSeqQueue`, checked each epoch): a sequence gap is noted
//!   when a later packet is acknowledged; a gap still open 150 ms later is a loss. The first
//!   of a loss phase sets wBar = min(wBar, 0.7·w it was sent at) and dEst = profile(wBar) (raw
//!   point in slow start); in slow start with wBar > 20 it ends slow start (profile cut at
//!   max(100, w)), wCrt = 0. Each expired packet counts wCrt −1.
//! * **Timeout** (`TimeoutHandler`, 1 s at the start of each slow start): nothing acknowledged
//!   yet: slow start again; in slow start: it ends; otherwise a loss phase with wCrt = 0, dEst
//!   = dMin, every outstanding packet forgotten.
//! * **Slow start**: one packet first; each ACK wBar += 1 and releases max(0, wBar − wCrt)
//!   packets, wCrt counting packets sent (a release still unsent is released again by the
//!   next ACK: on a fast link the releases snowball, upstream to hundreds of thousands of
//!   packets in 0.3 s at 100 Mbit/s, its own log shows); it ends on a loss (above), a
//!   timeout, or a delay above 500 ms (wBar = 0.7·w, dEst = 0.75·6·dMin, a loss phase).
//! * **Full socket** (`sending_thread`): the socket keeps the kernel's default buffers (no
//!   `SO_SNDBUF`), so a large burst can meet a full one; a refused send drops the rest of the
//!   release and, in slow start, ends it (wBar = 0.49·w, dEst = 0.75·6·dMin, a loss phase),
//!   otherwise wBar = max(1, 0.7·wBar) and dEst = profile(wBar).
//!
//! Sends are unpaced bursts (the window is the release count). Upstream's ACKs have their
//! own thread beside the sending thread, so the transport reads the waiting ACKs before every
//! send ([`Controller::acks_between_sends`]), not after a batch of 32: how far a release has
//! been sent when the next ACK computes one sets the snowball's size. (Alternating ACKs and
//! sends one for one instead was measured and is worse: experiments/README.md.) The
//! transport's own loss detection is only bookkeeping here.

mod profile;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::Duration;

use super::{AckEvent, Controller, LossEvent};
pub use profile::{fit, FitError, Profile};

/// UDP payload of every data packet (verus.hpp MTU, as patched by Pantheon).
pub const PAYLOAD_BYTES: u64 = 1414;
const DECREASE: f64 = 0.7;
/// wBar's cut when a full socket ends slow start (`sending_thread`).
const SS_REFUSED_DECREASE: f64 = 0.49;
const CURVE_PERIOD: Duration = Duration::from_secs(1);
const EPOCH: Duration = Duration::from_millis(5);
const EPOCH_MS: f64 = 5.0;
const DELTA_DOWN: f64 = 1.0;
const DELTA_UP: f64 = 2.0;
const RATIO: f64 = 6.0;
const SS_EXIT_DELAY_MS: f64 = 500.0;
const SS_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_TIMEOUT_MS: f64 = 1000.0;
const MIN_TIMEOUT_MS: f64 = 150.0;
const MISSING_EXPIRY: Duration = Duration::from_millis(150);
/// Profile points are kept for windows below this.
pub const MAX_W: usize = 40_000;
/// Penalty constant of the profile fit.
pub const RHO: f64 = 2.0;
/// Initial N of the basis-count rule.
const BASIS_DIVISOR: f64 = 15.0;
/// Send records older than this are dropped (an ACK that late is ignored).
const SEND_RECORD_HORIZON: Duration = Duration::from_secs(5);

/// What the profile thread hands back.
type Fitted = Result<Profile, FitError>;

/// What was sent: verus's own sequence number (from 1 in each slow-start session), the window
/// it carried and the session.
#[derive(Clone, Copy, Debug)]
struct SentPacket {
    vseq: u64,
    w: i64,
    session: u32,
    at: Duration,
}

/// An average that takes its first sample whole (a negative value means "unset").
fn ewma(avg: f64, sample: f64, alpha: f64) -> f64 {
    if avg < 0.0 {
        sample
    } else {
        avg * alpha + (1.0 - alpha) * sample
    }
}

/// Number of basis functions for a profile whose largest window is `max_w`, with the divisor
/// `n` carried from fit to fit (it only decreases); None: no fit is possible (restart).
pub fn basis_count(max_w: usize, n: &mut f64) -> Option<usize> {
    while (max_w as f64) / *n < 5.0 {
        *n -= 1.0;
        if *n < 1.0 {
            return None;
        }
    }
    Some(((max_w as f64) / *n) as usize)
}

/// The first w ≥ `from` whose fitted delay exceeds `d`, minus one (`calcDelayCurve` with a fit,
/// which starts at w = 2).
pub fn window_for_delay(profile: &Profile, d: f64, from: usize) -> Option<usize> {
    (from..MAX_W).find(|&w| profile.delay_at(w as f64) > d).map(|w| w - 1)
}

pub struct Verus2017 {
    session: u32,
    pkt_seq: u64,
    sent: VecDeque<(u64, SentPacket)>,
    /// Outstanding packets by verus sequence: the window each was sent at.
    sending: BTreeMap<u64, i64>,
    /// Gaps: verus sequence -> (when the gap was noticed, window it was sent at).
    missing: BTreeMap<u64, (Duration, i64)>,
    seq_last: u64,
    last_ack_at: Duration,
    last_delay: f64,

    w_crt: i64,
    w_bar: f64,
    d_t_bar: f64,
    d_max_last: f64,
    d_est: f64,
    d_min: f64,
    delays_epoch: Vec<f64>,
    points: Vec<f64>,
    curve_stop: usize,

    slow_start: bool,
    exit_slow_start: bool,
    loss_phase: bool,
    profile: Option<Profile>,
    basis_divisor: f64,
    /// The fit running in its own thread, if one is.
    pending_fit: Option<Receiver<Fitted>>,

    credit: i64,
    next_epoch: Duration,
    timeout_at: Duration,
    next_fit: Option<Duration>,
    restarts: u32,
}

impl Verus2017 {
    /// `mss` is ignored: verus sends 1414-byte payloads.
    pub fn new(_mss: u64) -> Self {
        Self {
            session: 0,
            pkt_seq: 0,
            sent: VecDeque::new(),
            sending: BTreeMap::new(),
            missing: BTreeMap::new(),
            seq_last: 0,
            last_ack_at: Duration::ZERO,
            last_delay: 0.0,
            w_crt: 0,
            w_bar: 1.0,
            d_t_bar: 0.0,
            d_max_last: -10.0,
            d_est: 0.0,
            d_min: 1000.0,
            delays_epoch: Vec::new(),
            points: vec![-1.0; MAX_W],
            curve_stop: MAX_W,
            slow_start: true,
            exit_slow_start: false,
            loss_phase: false,
            profile: None,
            basis_divisor: BASIS_DIVISOR,
            pending_fit: None,
            credit: 1,
            next_epoch: Duration::ZERO,
            timeout_at: SS_TIMEOUT,
            next_fit: None,
            restarts: 0,
        }
    }

    pub fn w_bar(&self) -> f64 {
        self.w_bar
    }

    pub fn d_est(&self) -> f64 {
        self.d_est
    }

    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    pub fn profile(&self) -> Option<&Profile> {
        self.profile.as_ref()
    }

    fn end_slow_start(&mut self, now: Duration) {
        self.slow_start = false;
        // The profile thread fits as soon as slow start is over.
        self.next_fit = Some(now);
    }

    /// Slow start ends in a loss phase at window `w_bar`, dEst half the allowed maximum delay
    /// (0.75 R dMin), until ACKs of packets sent at `w_bar` or below come (an RTT above 500 ms,
    /// or a send refused by the socket).
    fn exit_slow_start_in_loss(&mut self, now: Duration, w_bar: f64) {
        self.w_bar = w_bar;
        self.d_est = 0.75 * self.d_min * RATIO;
        self.loss_phase = true;
        self.exit_slow_start = true;
        self.end_slow_start(now);
    }

    fn restart_slow_start(&mut self, now: Duration) {
        self.restarts += 1;
        self.d_est = 0.0;
        self.seq_last = 0;
        self.w_bar = 1.0;
        self.d_t_bar = 0.0;
        self.w_crt = 0;
        self.d_min = 1000.0;
        self.pkt_seq = 0;
        self.d_max_last = -10.0;
        self.slow_start = true;
        self.loss_phase = false;
        self.profile = None;
        self.basis_divisor = BASIS_DIVISOR;
        self.next_fit = None;
        // A fit still running belongs to the session that ends here.
        self.pending_fit = None;
        self.session += 1;
        self.sending.clear();
        self.missing.clear();
        self.delays_epoch.clear();
        self.points.iter_mut().for_each(|p| *p = -1.0);
        self.credit = 1;
        self.timeout_at = now + SS_TIMEOUT;
    }

    /// The profile's delay at window `w` (`calcDelayCurveInv`): the fit, or before one the raw
    /// point.
    fn delay_of_window(&self, w: f64) -> f64 {
        match &self.profile {
            Some(p) => p.delay_at(w),
            None => self.points[(w.max(0.0) as usize).min(MAX_W - 1)],
        }
    }

    /// `calcDelayCurve`: the window for delay `d`; None when the fitted profile never
    /// exceeds it.
    ///
    /// Without a fit it scans the raw points, lowering the delay by 2 after each pass over
    /// every window until a point exceeds it (unset points are -1, so this ends once d < -1).
    /// Upstream's main loop runs this scan while the profile thread fits, and asks at every
    /// window whether the fit has landed (`haveSpline`): from the window the scan has reached
    /// it goes on with the fitted curve. When slow start ends on a delay above 500 ms on a long
    /// path, dEst (4.5 dMin) lies above every raw point, so the first epoch is still scanning
    /// when the fit lands and its window is wherever the scan then was, often thousands of
    /// packets released at once (upstream's own logs on 6 Mbit/s, 150 ms: first windows 2802,
    /// 10 244, 15 744 and 27 677 where the next epoch, with the fit, gave 793, 803, 811 and
    /// 710); when the fit landed before the epoch began, the fit's own window. The port scans the same way, polling its fit
    /// thread at every window, so the same race between the two runs in real time.
    fn window_of_delay(&mut self, now: Duration, d: f64) -> Option<f64> {
        let mut d = d;
        loop {
            for w in 2..MAX_W {
                if self.profile.is_none() && self.pending_fit.is_some() {
                    self.collect_fit(now, false);
                    if self.slow_start {
                        // The fit failed and slow start began again.
                        return None;
                    }
                }
                if let Some(p) = &self.profile {
                    return window_for_delay(p, d, w).map(|w| w as f64);
                }
                if self.points[w] > d {
                    return Some((w - 1) as f64);
                }
            }
            d -= DELTA_UP;
        }
    }

    fn fit_profile(&mut self, now: Duration) {
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        let mut max_w = 1;
        for w in 1..MAX_W {
            if self.points[w] >= 0.0 {
                if w < self.curve_stop {
                    xs.push(w as f64);
                    ys.push(self.points[w]);
                    max_w = w;
                } else {
                    self.points[w] = -1.0;
                }
            }
        }
        self.curve_stop = MAX_W;
        let Some(m) = basis_count(max_w, &mut self.basis_divisor) else {
            self.restart_slow_start(now);
            return;
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let fitted = fit(&xs, &ys, m, RHO);
            // The controller may have dropped the receiver (a restart): nobody waits then.
            let _ = tx.send(fitted);
        });
        self.pending_fit = Some(rx);
        self.next_fit = None;
    }

    /// Installs the fit started by [`Self::fit_profile`] once it is ready (`block`: waits
    /// for it); a failed fit restarts slow start, as an ALGLIB exception did upstream.
    fn collect_fit(&mut self, now: Duration, block: bool) {
        let Some(rx) = &self.pending_fit else { return };
        let fitted = if block {
            rx.recv().ok()
        } else {
            match rx.try_recv() {
                Ok(f) => Some(f),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => None,
            }
        };
        self.pending_fit = None;
        match fitted {
            Some(Ok(p)) => {
                self.profile = Some(p);
                self.next_fit = Some(now + CURVE_PERIOD);
            }
            _ => self.restart_slow_start(now),
        }
    }

    fn record_delay(&mut self, delay: f64, w: i64) {
        if self.w_crt > 0 {
            self.w_crt -= 1;
        }
        self.delays_epoch.push(delay);
        self.d_t_bar = ewma(self.d_t_bar, delay, 0.875);
        if delay < self.d_min {
            self.d_min = delay;
        }
        if !self.loss_phase {
            if let Some(p) = usize::try_from(w).ok().filter(|&w| w < MAX_W).map(|w| &mut self.points[w]) {
                *p = ewma(*p, delay, 0.875);
            }
        } else {
            self.w_bar += 1.0 / self.w_bar;
            if self.profile.is_some() {
                self.d_est = self.d_est.min(self.delay_of_window(self.w_bar));
            }
        }
    }

    /// Gaps noticed 150 ms ago or more are losses (`removeExpiredPacketsFromSeqQueue`).
    fn expire_missing(&mut self, now: Duration) {
        let mut first = true;
        while let Some((&vseq, &(noticed, w))) = self.missing.iter().next() {
            if now.saturating_sub(noticed) < MISSING_EXPIRY {
                break;
            }
            if first {
                first = false;
                if !self.loss_phase {
                    self.loss_phase = true;
                    self.w_bar = self.w_bar.min(DECREASE * w as f64);
                    self.d_est = if self.slow_start {
                        self.points[(self.w_bar.max(0.0) as usize).min(MAX_W - 1)]
                    } else {
                        self.delay_of_window(self.w_bar)
                    };
                }
                if self.slow_start && self.w_bar as i64 > 20 {
                    self.curve_stop = (w.max(100) as usize).min(MAX_W);
                    self.end_slow_start(now);
                    self.w_crt = 0;
                    if let Some((&last, _)) = self.sending.iter().next_back() {
                        self.seq_last = last;
                    }
                    self.missing.clear();
                }
            }
            self.missing.remove(&vseq);
            self.sending.remove(&vseq);
            if self.w_crt > 0 {
                self.w_crt -= 1;
            }
        }
    }

    /// One 5 ms epoch of the main loop.
    fn epoch(&mut self, now: Duration) {
        if !self.missing.is_empty() {
            self.expire_missing(now);
        }
        if self.slow_start {
            return;
        }
        let mut hold = false;
        let d_max = if self.delays_epoch.is_empty() {
            let since_ack = now.saturating_sub(self.last_ack_at).as_secs_f64() * 1e3;
            self.d_max_last.max(since_ack)
        } else {
            let m = self.delays_epoch.iter().copied().fold(f64::MIN, f64::max);
            self.delays_epoch.clear();
            m
        };
        if self.d_max_last == -10.0 {
            self.d_max_last = d_max;
        }
        let rise = d_max - self.d_max_last;
        if self.d_max_last / self.d_min > RATIO {
            if !self.exit_slow_start {
                self.d_est = self.d_min.max(self.d_est - DELTA_UP);
                if self.d_est == self.d_min && self.w_crt < 2 {
                    self.d_min += 10.0;
                } else if self.d_est == self.d_min {
                    hold = true;
                }
            }
        } else if rise > 0.0001 {
            self.d_est = self.d_min.max(self.d_est - DELTA_DOWN);
        } else {
            self.d_est += DELTA_UP;
        }
        let Some(w) = self.window_of_delay(now, self.d_est) else {
            if !self.slow_start {
                self.restart_slow_start(now);
            }
            return;
        };
        self.w_bar = w.max(1.0);
        let s = self.epoch_release();
        self.d_max_last = ewma(self.d_max_last, d_max, 0.2);
        if !hold {
            self.credit += s;
        }
    }

    /// `calcSi`: packets to release this epoch.
    fn epoch_release(&self) -> i64 {
        let n = (self.d_t_bar / EPOCH_MS).ceil() as i64;
        let s = if n > 1 {
            // Integer division, as upstream's long long arithmetic.
            self.w_bar + (self.w_crt * (2 - n) / (n - 1)) as f64
        } else {
            self.w_bar - self.w_crt as f64
        };
        s.max(0.0) as i64
    }

    fn on_timeout(&mut self, now: Duration) {
        if self.seq_last == 0 {
            self.restart_slow_start(now);
            return;
        }
        if self.slow_start {
            self.end_slow_start(now);
        } else {
            self.loss_phase = true;
            self.w_crt = 0;
            self.d_est = self.d_min;
            if let Some((&last, _)) = self.sending.iter().next_back() {
                self.seq_last = last;
            }
            self.sending.clear();
            self.missing.clear();
        }
        self.arm_timeout(now);
    }

    fn arm_timeout(&mut self, now: Duration) {
        let ms = (5.0 * self.last_delay).clamp(MIN_TIMEOUT_MS, MAX_TIMEOUT_MS) as u64;
        self.timeout_at = now + Duration::from_millis(ms);
    }

    fn lookup(&self, seq: u64) -> Option<SentPacket> {
        let base = self.sent.front()?.0;
        let idx = usize::try_from(seq.checked_sub(base)?).ok()?;
        self.sent.get(idx).map(|&(_, p)| p)
    }
}

impl Controller for Verus2017 {
    fn name(&self) -> &'static str {
        "verus-2017"
    }

    fn on_send(&mut self, now: Duration, seq: u64) {
        self.pkt_seq += 1;
        let p = SentPacket { vseq: self.pkt_seq, w: self.w_bar as i64, session: self.session, at: now };
        self.sent.push_back((seq, p));
        while self.sent.front().is_some_and(|(_, p)| now.saturating_sub(p.at) > SEND_RECORD_HORIZON) {
            self.sent.pop_front();
        }
        self.sending.insert(p.vseq, p.w);
        self.w_crt += 1;
        self.credit -= 1;
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        let now = ack.now;
        // A fit is in use from the moment it is ready (`haveSpline`), by the ACKs too: in a loss
        // phase each one lowers dEst to the new profile's delay at wBar.
        self.collect_fit(now, false);
        let Some(p) = self.lookup(ack.seq) else { return };
        if p.session < self.session {
            return;
        }
        let delay = ack.rtt.as_secs_f64() * 1e3;
        self.last_delay = delay;
        if self.slow_start && delay > SS_EXIT_DELAY_MS {
            self.exit_slow_start_in_loss(now, DECREASE * p.w as f64);
        }
        self.arm_timeout(now);
        if self.loss_phase && (p.w as f64) <= self.w_bar {
            self.delays_epoch.clear();
            self.loss_phase = false;
            self.exit_slow_start = false;
        }
        let seq = p.vseq;
        if seq == self.seq_last + 1 {
            self.record_delay(delay, p.w);
        } else if seq < self.seq_last {
            if self.missing.remove(&seq).is_some() {
                self.record_delay(delay, p.w);
            }
        } else {
            for gap in self.seq_last + 1..seq {
                let w = self.sending.get(&gap).copied().unwrap_or(self.w_bar as i64);
                self.missing.insert(gap, (now, w));
            }
            self.record_delay(delay, p.w);
        }
        if seq > self.seq_last && p.session == self.session {
            self.seq_last = seq;
            self.last_ack_at = now;
        }
        self.sending.remove(&seq);
        if self.slow_start {
            self.w_bar += 1.0;
            // `tempS += fmax(0, wBar - wCrt)`: wCrt counts packets sent, so a release not yet
            // sent when the next ACK comes is released again; when ACKs come faster than the
            // sends drain the releases (a fast link), the releases snowball, as upstream's did.
            self.credit += (self.w_bar - self.w_crt as f64).max(0.0) as i64;
        }
    }

    fn on_loss(&mut self, _loss: &LossEvent) {}

    fn kernel_socket_buffers(&self) -> bool {
        true
    }

    fn acks_between_sends(&self) -> bool {
        // `receiver_thread` handles each ACK as it arrives while `sending_thread` works
        // through a release: the slow-start release an ACK computes sees every send before it.
        true
    }

    fn on_send_refused(&mut self, now: Duration) {
        // The refused packet is not sent and the rest of this release is dropped.
        self.credit = self.credit.min(0);
        if self.slow_start {
            self.exit_slow_start_in_loss(now, SS_REFUSED_DECREASE * (self.w_bar as i64) as f64);
        } else {
            self.w_bar = (DECREASE * self.w_bar).max(1.0);
            self.d_est = self.delay_of_window(self.w_bar);
        }
    }

    fn cwnd(&self) -> u64 {
        if self.credit > 0 {
            u64::MAX / 4
        } else {
            0
        }
    }

    fn window_closed(&self) -> bool {
        self.credit <= 0
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        // Unpaced: released packets leave back to back.
        1e12
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(PAYLOAD_BYTES)
    }

    fn timer_deadline(&self) -> Option<Duration> {
        let mut t = self.next_epoch.min(self.timeout_at);
        if let Some(f) = self.next_fit {
            t = t.min(f);
        }
        Some(t)
    }

    fn on_timer(&mut self, now: Duration) {
        if self.timeout_at <= now {
            self.on_timeout(now);
        }
        self.collect_fit(now, false);
        if self.next_fit.is_some_and(|f| f <= now) && !self.slow_start {
            self.fit_profile(now);
        }
        if self.next_epoch <= now {
            self.epoch(now);
            self.next_epoch = now + EPOCH;
        }
    }
}
