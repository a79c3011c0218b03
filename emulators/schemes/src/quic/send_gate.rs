//! quic-2018's send gate: Chromium 60's decision whether a packet may leave now
//! (`QuicSentPacketManager::TimeUntilSend`: the Cubic sender's `CanSend`, then `PacingSender`),
//! taken where quinn hands a datagram to the socket (`PerPacketSocket::try_send`).
//!
//! quinn's own gate cannot stand in for it. Its pacer is a token bucket of at least 10
//! packets at 1.25 × window / srtt, in slow start too, so a sender that fell behind (the ACKs
//! of a stalled receiver arriving together) sends the difference at once, where Chromium's
//! pacer lets one packet per interval go (`pacing`). A quinn sender thus never finds its
//! window unused at the next ACK, and Cubic's epoch never restarts where the upstream's does.
//! So with a gate the controller (`cubic_2018`) reports quinn a window above 4 GiB, which turns
//! quinn's pacer off and never blocks it, and publishes here what the gate needs: its window,
//! slow start and recovery, the smoothed RTT and the retransmission timeout, and quinn's bytes
//! in flight.
//!
//! A datagram held by the gate is one quinn has built and counted in flight but which has not
//! left; the gate holds at most one (quinn waits on the socket before building another), and
//! the controller leaves it out of the bytes in flight before an ACK. Datagrams shorter than
//! `MIN_PACED` carry no stream data here (acknowledgements, the handshake's short packets):
//! Chromium neither paces them nor counts them against the window, nor does the gate.
//!
//! A packet held by the window waits for an ACK or, with none, one retransmission timeout,
//! after which one packet leaves anyway (Chromium's RTO sends regardless of the window), so a
//! path that lost everything in flight does not stall the connection.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::cubic_2018::{INITIAL_WINDOW, MIN_RTO, MSS};
use super::pacing::{PacingSender, UNPACED_BURST};

/// The shortest datagram the gate treats as stream data (a full quic-2018 packet is 1350).
pub(crate) const MIN_PACED: usize = 200;
/// Chromium's smoothed RTT before any sample (`kInitialRttMs`).
const INITIAL_RTT: Duration = Duration::from_millis(100);
/// `PacingRate`'s gains over window / srtt: slow start, and otherwise (recovery with PRR too).
const SLOW_START_GAIN: f64 = 2.0;
const GAIN: f64 = 1.25;

/// What the Cubic sender tells the gate after each event.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SenderState {
    pub(crate) window: u64,
    pub(crate) slow_start: bool,
    pub(crate) recovery: bool,
    pub(crate) srtt: Duration,
    pub(crate) rto: Duration,
}

#[derive(Debug)]
struct Gate {
    pacer: PacingSender,
    sender: SenderState,
    /// quinn's bytes in flight: as of the last ACK, plus what it built since, less losses.
    in_flight: u64,
    /// Bytes of the datagram the gate holds.
    held: Option<u64>,
    /// The last ACK or data packet sent: a packet held by the window leaves one
    /// retransmission timeout after it.
    last_event: Option<Instant>,
}

#[derive(Debug)]
pub(crate) struct SendGate(Mutex<Gate>);

impl SendGate {
    pub(crate) fn new() -> Self {
        Self(Mutex::new(Gate {
            pacer: PacingSender::new(),
            sender: SenderState {
                window: INITIAL_WINDOW,
                slow_start: true,
                recovery: false,
                srtt: Duration::ZERO,
                rto: MIN_RTO,
            },
            in_flight: 0,
            held: None,
            last_event: None,
        }))
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        // A panic elsewhere while holding the lock leaves plain numbers behind: keep going.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn publish(&self, sender: SenderState) {
        self.gate().sender = sender;
    }

    /// quinn built a datagram of `bytes` (the controller's `on_sent`).
    pub(crate) fn on_built(&self, bytes: u64) {
        self.gate().in_flight += bytes;
    }

    /// An ACK at `now` left quinn `in_flight` bytes in flight (`on_end_acks`).
    pub(crate) fn on_ack(&self, now: Instant, in_flight: u64) {
        let mut gate = self.gate();
        gate.in_flight = in_flight;
        gate.last_event = Some(now);
    }

    /// quinn declared `bytes` lost: a loss event for the pacer.
    pub(crate) fn on_loss(&self, bytes: u64) {
        let mut gate = self.gate();
        gate.in_flight = gate.in_flight.saturating_sub(bytes);
        gate.pacer.on_loss();
    }

    /// Bytes quinn counts in flight that have not left (the held datagram).
    pub(crate) fn held_bytes(&self) -> u64 {
        self.gate().held.unwrap_or(0)
    }

    /// May a datagram of `len` bytes leave at `now`? `Err(at)`: not before `at` (or an ACK),
    /// and it is held. `Ok`: it leaves, and is recorded as sent.
    pub(crate) fn admit(&self, now: Instant, len: usize) -> Result<(), Instant> {
        if len < MIN_PACED {
            return Ok(());
        }
        let mut gate = self.gate();
        let bytes = len as u64;
        gate.held = Some(bytes);
        let wait = gate.wait(now);
        if wait.is_ok() {
            gate.held = None;
            gate.sent(now, bytes);
        }
        wait
    }

    /// For the socket's poller: `Err(at)` while the held datagram (if any) may not leave
    /// before `at` (or an ACK).
    pub(crate) fn ready(&self, now: Instant) -> Result<(), Instant> {
        let mut gate = self.gate();
        if gate.held.is_none() {
            return Ok(());
        }
        gate.wait(now)
    }
}

impl Gate {
    /// `TimeUntilSend` for the held datagram.
    fn wait(&mut self, now: Instant) -> Result<(), Instant> {
        let before = self.in_flight_before();
        if before >= self.sender.window {
            let timeout = self.last_event.unwrap_or(now) + self.sender.rto;
            return if now < timeout { Err(timeout) } else { Ok(()) };
        }
        match self.pacer.release_at(now, before == 0) {
            Some(at) => Err(at),
            None => Ok(()),
        }
    }

    /// The bytes in flight before the held datagram leaves: quinn counted it when built.
    fn in_flight_before(&self) -> u64 {
        self.in_flight.saturating_sub(self.held.unwrap_or(0))
    }

    /// `OnPacketSent` for a datagram of `bytes` leaving at `now`.
    fn sent(&mut self, now: Instant, bytes: u64) {
        self.last_event = Some(now);
        let before = self.in_flight.saturating_sub(bytes);
        let s = self.sender;
        let srtt = if s.srtt.is_zero() { INITIAL_RTT } else { s.srtt };
        let gain = if s.slow_start { SLOW_START_GAIN } else { GAIN };
        // One datagram's transfer time at the pacing rate gain × window / srtt.
        let interval = srtt.mul_f64(bytes as f64 / (gain * s.window.max(1) as f64));
        let refill = (before == 0 && !s.recovery).then(|| (s.window / MSS).min(u64::from(UNPACED_BURST)) as u32);
        self.pacer.on_sent(now, interval, refill);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(window_packets: u64, srtt_ms: u64) -> SenderState {
        SenderState {
            window: window_packets * MSS,
            slow_start: false,
            recovery: false,
            srtt: Duration::from_millis(srtt_ms),
            rto: Duration::from_millis(4 * srtt_ms),
        }
    }

    /// Builds and offers `n` 1350-byte datagrams at `now`; returns how many left.
    fn offer(gate: &SendGate, now: Instant, n: usize) -> usize {
        let mut left = 0;
        for _ in 0..n {
            if gate.held_bytes() == 0 {
                gate.on_built(1350);
            }
            if gate.admit(now, 1350).is_err() {
                break;
            }
            left += 1;
        }
        left
    }

    #[test]
    fn short_datagrams_pass_and_are_not_counted() {
        let gate = SendGate::new();
        gate.publish(state(4, 50));
        let now = Instant::now();
        // Chromium's `CanSend`: a packet may leave while the bytes in flight are below the
        // window, so 4 × 1460 B let five 1350-byte packets go.
        assert_eq!(offer(&gate, now, 10), 5);
        assert!(gate.admit(now, 60).is_ok(), "an acknowledgement is never held");
        assert_eq!(gate.held_bytes(), 1350, "the sixth data packet is still held");
    }

    #[test]
    fn the_window_holds_a_packet_until_an_ack_or_one_retransmission_timeout() {
        let gate = SendGate::new();
        gate.publish(state(4, 50));
        let t0 = Instant::now();
        assert_eq!(offer(&gate, t0, 10), 5);
        let at = gate.ready(t0).expect_err("held by the window");
        assert_eq!(at, t0 + Duration::from_millis(200));
        // An ACK of two packets: the held one and one more may go.
        gate.on_ack(t0 + Duration::from_millis(10), 4 * 1350);
        assert!(gate.ready(t0 + Duration::from_millis(10)).is_ok());
        // No ACK at all: one packet per timeout.
        let gate = SendGate::new();
        gate.publish(state(4, 50));
        assert_eq!(offer(&gate, t0, 10), 5);
        let late = t0 + Duration::from_millis(201);
        assert_eq!(offer(&gate, late, 10), 1, "one packet after the timeout");
        assert_eq!(gate.ready(late), Err(late + Duration::from_millis(200)));
    }

    #[test]
    fn a_compressed_ack_is_answered_at_the_pacing_rate_not_in_a_burst() {
        // 100 packets of window at 100 ms: 1350 B every 0.74 ms at 1.25 × window / srtt.
        let gate = SendGate::new();
        gate.publish(state(100, 100));
        let t0 = Instant::now();
        let mut now = t0;
        let mut sent = 0;
        while sent < 100 {
            sent += offer(&gate, now, 100 - sent);
            if let Err(at) = gate.ready(now) {
                now = at;
            }
        }
        // Twenty packets acknowledged at once after a stall: 20 of window free.
        let stall_end = now + Duration::from_millis(30);
        gate.on_ack(stall_end, 80 * 1350 + gate.held_bytes());
        let burst = offer(&gate, stall_end, 20);
        assert!(burst <= 3, "{burst} packets left at once; Chromium's pacer lets out a pair");
    }

    #[test]
    fn slow_start_paces_at_twice_the_rate() {
        let interval = |slow_start| {
            let gate = SendGate::new();
            // Intervals above the 1 ms granularity (1.4 and 2.2 ms), so none leave early.
            gate.publish(SenderState { slow_start, ..state(100, 300) });
            let t0 = Instant::now();
            // Spend the burst, then time the spacing of the next ten.
            let mut now = t0;
            let mut times = Vec::new();
            while times.len() < 30 {
                if offer(&gate, now, 1) == 1 {
                    times.push(now);
                } else if let Err(at) = gate.ready(now) {
                    now = at;
                }
            }
            (times[29] - times[19]).as_secs_f64() / 10.0
        };
        let (ss, ca) = (interval(true), interval(false));
        assert!((ca / ss - 1.6).abs() < 0.1, "{ss} s vs {ca} s a packet");
    }
}
