//! genericCC's send loop, shared by the controllers ported from venkatarun95/genericCC
//! `d0153f8` (copa-2018's `MarkovianCC`, taova-2018's `RemyCC`): `CTCP<T>::send_data` in
//! `ctcp.hh`, with times in ms as upstream keeps them.
//!
//! * The loop sends while `seq < largest_ack + 1 + W` and `last_send + intersend ≤ now`,
//!   each send moving `last_send` on by one gap. `largest_ack` is the highest acknowledged
//!   sequence number plus one (−1 before any ACK).
//! * After each pass `last_send = now` if the pacer lags by a gap or more or
//!   `seq ≥ largest_ack + W`; then it polls the socket for the rest of the gap in whole ms
//!   (`poll`'s int timeout; under 1 ms a busy loop of passes). So from `seq ≥ largest_ack + W`
//!   on the passes hold the pacer shut until an ACK, and a packet an ACK frees leaves a gap
//!   after the pass before that ACK.
//! * After 2 s without an ACK the loop restarts its controller (`init()`) and counts the
//!   window from the next sequence number.
//! * The polls are `UDPSocket::receivedata`'s `poll` with the double timeout truncated to an
//!   `int` in ms: a sleep of the whole ms, then a busy loop of passes through the rest, so a
//!   send leaves on time to the microsecond, not a timer's slack late. [`PACER`] has the
//!   transport wait the same way. taova-2018 takes it (sleeping to each deadline, it kept a
//!   shorter queue than upstream's: p95 9 ms short on 12/40/100/1 % Poisson); copa-2018 does not
//!   (with it, 8 of 10 rows passed, without it 10 of 10; not yet explained: experiments/README).
//!
//! Here the end-of-pass rule is applied when the next ACK or timer arrives, with the state the
//! pass ended in, and a send belongs to the pass the last ACK or timer began (upstream reads
//! the clock once per pass, sends, and only then applies the rule: applying it between a
//! wake-up and its send would cost a pacing gap per send on a real clock).

use std::time::Duration;

use super::{CatchUp, Pacer};

/// No ACK for this long restarts the controller (ms).
pub const IDLE_RESET_MS: f64 = 2000.0;
/// genericCC d0153f8's `packet_size`: the UDP payload of every datagram.
pub const DATAGRAM_BYTES: u64 = 1440;
/// The transport's own pacer is left open: upstream paces by its `last_send` rule only.
pub const UNPACED: f64 = 1e12;
/// How the loop waits: `poll` with the remaining time truncated to whole ms.
pub const PACER: Pacer = Pacer { catch_up: CatchUp::Bounded, busy_wait: false, whole_ms_poll: true };
/// `cwnd` while the loop's window test holds.
const OPEN_WINDOW: u64 = 1 << 40;

pub fn ms(t: Duration) -> f64 {
    t.as_secs_f64() * 1e3
}

pub fn at_ms(v: f64) -> Duration {
    Duration::from_nanos((v * 1e6).ceil().max(0.0) as u64)
}

/// The loop's state; the controller's window `W` and gap `intersend` (ms) are passed in.
#[derive(Clone, Debug)]
pub struct SendLoop {
    /// `_largest_ack`: highest acknowledged sequence number + 1 (−1 before any ACK).
    pub largest_ack: f64,
    pub next_seq: u64,
    pub last_send: f64,
    pub last_ack: f64,
    /// When the loop's last pass ran (ms); its end-of-pass rule is applied lazily.
    pass_time: f64,
    pacer_closed_until: Option<Duration>,
}

impl Default for SendLoop {
    fn default() -> Self {
        Self { largest_ack: -1.0, next_seq: 0, last_send: 0.0, last_ack: 0.0, pass_time: 0.0, pacer_closed_until: None }
    }
}

impl SendLoop {
    /// A new pass of the loop begins at `now`: first the passes since the last one end.
    /// While `seq ≥ largest_ack + W` every pass resets `last_send`, so it stands at the last
    /// poll before `now`: `now` itself when the gap is under 1 ms, else the last of the passes
    /// a whole-ms gap apart. (Below that bound the pacer timer sends at the gap's end, as
    /// upstream's polls do.)
    pub fn begin_pass(&mut self, now: f64, window: f64, intersend: f64) {
        if now <= self.pass_time {
            return;
        }
        let t = self.pass_time;
        if self.next_seq as f64 >= self.largest_ack + window {
            let step = intersend.min(1000.0).trunc();
            self.last_send = if step >= 1.0 { t + ((now - t) / step).floor() * step } else { now };
        } else if t - self.last_send >= intersend {
            self.last_send = t;
        }
        self.pass_time = now;
    }

    /// After an event: when the pacer next lets a packet go.
    pub fn check_pacer(&mut self, now: Duration, intersend: f64) {
        let open_at = at_ms(self.last_send + intersend);
        self.pacer_closed_until = (open_at > now).then_some(open_at);
    }

    /// An ACK of `seq` at `now` (ms).
    pub fn on_ack(&mut self, seq: u64, now: f64) {
        self.largest_ack = self.largest_ack.max(seq as f64 + 1.0);
        self.last_ack = now;
    }

    /// A send of `seq`, in the current pass.
    pub fn on_send(&mut self, seq: u64, intersend: f64) {
        self.last_send += intersend;
        self.next_seq = seq + 1;
    }

    /// Whether `now` (ms) is past the idle timeout; if so the window counts from the next
    /// sequence number and the caller restarts its controller.
    pub fn idle_restart(&mut self, now: f64) -> bool {
        if now - self.last_ack <= IDLE_RESET_MS {
            return false;
        }
        self.largest_ack = self.next_seq as f64 - 1.0;
        self.last_send = now;
        self.last_ack = now;
        true
    }

    /// Whether the loop's window test lets one more packet go.
    pub fn window_open(&self, window: f64) -> bool {
        (self.next_seq as f64) < self.largest_ack + 1.0 + window
    }

    /// The transport's cwnd: the loop's window test decides, whatever the transport still
    /// counts as in flight (packets below the highest ACK, those before a timeout).
    pub fn cwnd(&self, window: f64) -> u64 {
        if self.window_open(window) {
            OPEN_WINDOW
        } else {
            0
        }
    }

    pub fn window_closed(&self, window: f64) -> bool {
        self.pacer_closed_until.is_some() || !self.window_open(window)
    }

    /// The pacer's opening, unless from `seq ≥ largest_ack + W` on the loop's passes keep it
    /// shut until an ACK; else the idle timeout.
    pub fn timer_deadline(&self, window: f64) -> Duration {
        let idle = at_ms(self.last_ack + IDLE_RESET_MS) + Duration::from_micros(1);
        let pacer = self.pacer_closed_until.filter(|_| (self.next_seq as f64) < self.largest_ack + window);
        pacer.map_or(idle, |p| p.min(idle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wake-up late by 0.2 ms sends at once, and the next packet is due one gap after the
    /// previous one was, not one gap after the late send: lateness is not added to each gap.
    #[test]
    fn a_late_wake_up_does_not_stretch_the_next_gap() {
        let (window, gap) = (20.0, 0.5);
        let mut l = SendLoop::default();
        l.begin_pass(10.0, window, gap);
        l.last_send = 10.0;
        l.check_pacer(at_ms(10.0), gap);
        assert!(l.window_closed(window));
        assert_eq!(l.timer_deadline(window), at_ms(10.5));
        // The timer fires late, at 10.7 ms: the pacer is open and one packet goes.
        l.begin_pass(10.7, window, gap);
        l.check_pacer(at_ms(10.7), gap);
        assert!(!l.window_closed(window));
        l.on_send(0, gap);
        l.check_pacer(at_ms(10.7), gap);
        assert_eq!(l.timer_deadline(window), at_ms(11.0));
    }

    /// A pass that finds the pacer a whole gap behind resets it to the pass's time.
    #[test]
    fn a_pacer_lagging_a_gap_restarts_from_the_pass() {
        let (window, gap) = (20.0, 0.5);
        let mut l = SendLoop { last_send: 1.0, ..SendLoop::default() };
        l.begin_pass(5.0, window, gap);
        l.begin_pass(6.0, window, gap); // the pass at 5 ms ended 4 ms behind: last_send = 5
        assert_eq!(l.last_send, 5.0);
    }

    /// From `seq ≥ largest_ack + W` on the passes keep the pacer shut until an ACK, and 2 s
    /// without one restarts the window from the next sequence number.
    #[test]
    fn a_full_window_waits_for_an_ack_and_an_idle_loop_restarts() {
        let (window, gap) = (2.0, 0.5);
        let mut l = SendLoop::default();
        l.begin_pass(0.0, window, gap);
        // Before any ACK (largest_ack = -1) the window lets W packets go.
        for seq in 0..2 {
            assert!(l.window_open(window));
            l.on_send(seq, gap);
        }
        assert_eq!(l.cwnd(window), 0);
        l.check_pacer(at_ms(0.0), gap);
        assert_eq!(l.timer_deadline(window), at_ms(IDLE_RESET_MS) + Duration::from_micros(1));
        assert!(!l.idle_restart(IDLE_RESET_MS));
        assert!(l.idle_restart(IDLE_RESET_MS + 1.0));
        assert_eq!(l.largest_ack, 1.0);
        assert!(l.window_open(window));
        // An ACK of packet 0 moves the window on.
        let mut l = SendLoop { next_seq: 2, ..SendLoop::default() };
        l.on_ack(0, 5.0);
        assert_eq!((l.largest_ack, l.last_ack), (1.0, 5.0));
    }
}
