//! Congestion controllers for the UDP transport.
//!
//! A controller is a pure state machine: the transport feeds it one [`AckEvent`] per
//! acknowledgement and one [`LossEvent`] per packet declared lost, each stamped with the
//! time at which it happened, and asks it how many bytes may be in flight and how fast to
//! pace them. Nothing here reads a clock or touches a socket, so every controller is
//! unit-tested in virtual time (see each module's tests and `sim.rs`).

use std::collections::VecDeque;
use std::time::Duration;

pub mod call_trace;
pub mod copa;
pub mod copa_2017;
pub mod copa_2018;
pub mod generic_cc;
pub mod greg_saturator_2017;
pub mod indigo_2018;
pub mod koho_cc_2017;
pub mod ledbat;
pub mod ledbat_2017;
pub mod pcc_2017;
pub mod pcc_experimental_2018;
pub mod saturator;
pub mod saturator_2017;
pub mod taova_2018;
pub mod vegas;
pub mod vegas_2017;
pub mod verus_2017;
pub mod vivace_2018;

pub use copa::Copa;
pub use copa_2017::Copa2017;
pub use copa_2018::Copa2018;
pub use greg_saturator_2017::GregSaturator2017;
pub use indigo_2018::Indigo2018;
pub use koho_cc_2017::KohoCc2017;
pub use ledbat::Ledbat;
pub use ledbat_2017::Ledbat2017;
pub use pcc_2017::Pcc2017;
pub use pcc_experimental_2018::PccExperimental2018;
pub use saturator::Saturator;
pub use saturator_2017::Saturator2017;
pub use taova_2018::Taova2018;
pub use vegas::Vegas;
pub use vegas_2017::Vegas2017;
pub use verus_2017::Verus2017;
pub use vivace_2018::Vivace2018;

/// What the transport learned from one acknowledgement.
#[derive(Clone, Debug)]
pub struct AckEvent {
    /// When the ACK arrived (sender clock, time since the flow started).
    pub now: Duration,
    /// Sequence number of the data packet whose arrival triggered this ACK.
    pub seq: u64,
    /// When that packet was sent (sender clock).
    pub sent_at: Duration,
    /// Round-trip sample: `now - sent_at`, from the echoed send timestamp.
    pub rtt: Duration,
    /// Receiver clock at arrival minus sender clock at sending, in microseconds. The clocks
    /// are not synchronised, so only differences between samples mean anything (LEDBAT
    /// subtracts its base delay, which cancels the offset).
    pub one_way_delay_us: i64,
    /// Bytes newly known delivered by this ACK (its own packet plus any earlier ones whose
    /// ACKs were lost but that this ACK's bitmap covers).
    pub acked_bytes: u64,
    /// Bytes still in flight after this ACK and any losses it revealed.
    pub bytes_in_flight: u64,
    /// The next sequence number the sender will use; a controller that works once per
    /// round trip ends a round when an ACK's `seq` reaches the `next_seq` it noted.
    pub next_seq: u64,
    /// Delivery-rate sample in bytes/s (delivered bytes over the interval they took).
    pub delivery_rate: Option<f64>,
    /// The transport's smoothed RTT (RFC 6298) after this sample.
    pub srtt: Duration,
}

#[cfg(test)]
impl AckEvent {
    /// The ACK of packet `seq` alone (`bytes` of it), sent at `sent_at`, arriving at `now`
    /// with nothing else in flight; the RTT sample is also the smoothed RTT.
    pub(crate) fn lone(now: Duration, seq: u64, sent_at: Duration, bytes: u64) -> Self {
        AckEvent {
            now,
            seq,
            sent_at,
            rtt: now - sent_at,
            one_way_delay_us: 0,
            acked_bytes: bytes,
            bytes_in_flight: 0,
            next_seq: seq + 1,
            delivery_rate: None,
            srtt: now - sent_at,
        }
    }
}

/// How the upstream program's connecting side asked for its connection: the request
/// repeated every `repeat` until an answer, and given up after `give_up` (the program then
/// exits, and in a multi-flow run its flow never sends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectLaw {
    pub repeat: Duration,
    pub give_up: Duration,
}

/// A packet the transport gave up on (reordering threshold passed, or timed out).
#[derive(Clone, Debug)]
pub struct LossEvent {
    pub now: Duration,
    pub seq: u64,
    pub sent_at: Duration,
    pub bytes: u64,
    pub bytes_in_flight: u64,
}

/// When the transport declares an outstanding packet lost, besides the loss timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossRule {
    /// Once a packet sent this many later has arrived (TCP's duplicate-ACK threshold).
    Reorder(u64),
    /// Once a packet sent at least this long after it has been acknowledged (the 2017
    /// saturators of pantheon-stimuli: 20 ms).
    SentBefore(Duration),
}

/// How the pacer treats a send that leaves after its slot (the sender woke late).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CatchUp {
    /// Make up at most `max(2 packets, 500 µs)` of the lateness: a short burst, never a
    /// long one (the transport's own pacer).
    #[default]
    Bounded,
    /// Never: the next slot is one gap after the actual send, so lateness is lost for good
    /// (UDT's busy-waiting sender, `ts = entertime + m_ullInterval`).
    Never,
    /// All of it: the slots stay on their grid however late a send was, and a late sender
    /// sends back to back until it is on time again (UDT4's `m_ullTimeDiff`).
    Unbounded,
}

/// How the sender waits for its next pacing slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pacer {
    pub catch_up: CatchUp,
    /// Spin on the clock (and the socket) instead of sleeping until the slot, as a sender
    /// that busy-waits does: it wakes on time unless preempted, and keeps a core busy.
    pub busy_wait: bool,
    /// Wait as a loop that polls its socket with a whole-millisecond timeout does (genericCC's
    /// `poll(int)`, the timeout truncated): sleep the whole milliseconds to the next wake-up,
    /// then spin through the sub-millisecond rest, so it wakes on time to the microsecond and
    /// keeps a core busy only while a wait under 1 ms is left (always, at gaps under 1 ms).
    pub whole_ms_poll: bool,
}

/// The one interface between the transport and a congestion-control algorithm.
///
/// Besides ACKs and losses a controller may watch its own sends (`on_send`), ask to be woken
/// without an ACK (`timer_deadline`/`on_timer`: an idle or retransmission timeout of the
/// upstream program), and choose how the transport detects loss (`loss_rule`,
/// `loss_timeout`), how large its packets are (`payload_bytes`, `next_payload_bytes`), how its sends are paced
/// (`pacer`) and how often ACKs are read between sends (`acks_between_sends`): the ports of
/// Pantheon's programs differ in exactly these.
pub trait Controller: Send {
    /// Scheme-facing name, for logs.
    fn name(&self) -> &'static str;
    fn on_ack(&mut self, ack: &AckEvent);
    fn on_loss(&mut self, loss: &LossEvent);
    /// Bytes allowed in flight.
    fn cwnd(&self) -> u64;
    /// True while the upstream program sends nothing at all: its window is below one packet
    /// (by default the transport still lets one packet out), full as it counts it, or the
    /// program is busy elsewhere. An ACK or a timer must reopen it.
    fn window_closed(&self) -> bool {
        false
    }
    /// Pacing rate in bytes per second given the transport's smoothed RTT.
    fn pacing_rate(&self, srtt: Duration) -> f64;
    /// How the transport paces this controller's sends (read once, when the flow starts): by
    /// default sleeping, with a bounded catch-up.
    fn pacer(&self) -> Pacer {
        Pacer::default()
    }
    /// A DATA packet with sequence number `seq` left at `now`.
    fn on_send(&mut self, _now: Duration, _seq: u64) {}
    /// UDP payload of one DATA packet where the upstream program used its own size; None
    /// fills the 1500-byte IP packet.
    fn payload_bytes(&self) -> Option<u64> {
        None
    }
    /// UDP payload of the next DATA packet, at most [`Self::payload_bytes`]: an upstream
    /// program whose writes to its transport do not fill whole packets sends a short packet
    /// at the end of each (UDT's send buffer cuts every `UDT::send` into MSS-sized blocks).
    /// Asked before each send; the packet sent is the next `on_send`. The pacer still spaces
    /// packets, not bytes, by the full size, as UDT's does. Default: all full-size.
    fn next_payload_bytes(&self) -> Option<u64> {
        self.payload_bytes()
    }
    /// When the controller must be woken without an ACK, if ever.
    fn timer_deadline(&self) -> Option<Duration> {
        None
    }
    /// `timer_deadline` has passed (called at `now`).
    fn on_timer(&mut self, _now: Duration) {}
    /// How the transport detects loss before the timeout.
    fn loss_rule(&self) -> LossRule {
        LossRule::Reorder(crate::transport::core::REORDER_THRESHOLD)
    }
    /// How long a packet may stay unacknowledged before it is lost; None: the transport's
    /// RFC 6298 timeout.
    fn loss_timeout(&self) -> Option<Duration> {
        None
    }
    /// Whether the sending socket keeps the kernel's default buffers (`net.core.wmem_default`,
    /// 212 992 bytes on a stock Linux), as an upstream program that never set `SO_SNDBUF` did,
    /// instead of the transport's 8 MB: a burst that outruns the interface then meets a full
    /// socket, as the upstream's did. Default: the transport's buffers.
    fn kernel_socket_buffers(&self) -> bool {
        false
    }
    /// Whether the transport reads the ACKs waiting on the socket before every send, instead of
    /// after a batch of 32 sends: an upstream program whose ACKs are handled by their own thread,
    /// concurrently with a sending thread (verus), reacts to an ACK a send after it arrives,
    /// not a batch later. Default: batches.
    fn acks_between_sends(&self) -> bool {
        false
    }
    /// Whether the upstream program sent its first datagrams the moment it ran, with no
    /// handshake (the datagrump contest's sourdough sender, under koho_cc and both 2017
    /// saturators: their first window at once). The transport then skips its own handshake
    /// too, so the first datagram meets the bottleneck at whatever phase the program's start
    /// gives it, as the upstream's did, rather than clocked by the handshake's reply like
    /// every later packet. That phase sets a minimum one-way delay that a delay-based law
    /// keeps for the whole run (experiments/README.md, "koho_cc's first datagram"). Default:
    /// handshake first.
    fn starts_without_handshake(&self) -> bool {
        false
    }
    /// The upstream program's own handshake timing, where it set how long a connection may
    /// take (UDT: `pcc_2017::UDT_CONNECT`). Default: the transport's (HELLO every 200 ms, given up
    /// after the connect timeout, `CALIBRATE_SCHEME_CONNECT_TIMEOUT`).
    fn connect_law(&self) -> Option<ConnectLaw> {
        None
    }
    /// The local socket refused a DATA packet at `now` (its send buffer is full: EAGAIN or
    /// ENOBUFS). The transport tries again once there is room; a controller whose upstream
    /// program dropped the packet and reacted (verus: a loss) does so here. Default: nothing.
    fn on_send_refused(&mut self, _now: Duration) {}
    /// A control datagram the upstream program's sender puts on the data path besides its
    /// data (UDT answers each full ACK with a 20-byte ACK2): its UDP payload in bytes, or None
    /// when none is due. The transport asks after every ACK and timer, at `now`, until None,
    /// and sends each at once (unpaced, not counted as data; the receiver ignores it), so it
    /// takes its place in the bottleneck queue as the upstream's did. Default: never.
    fn take_control_datagram(&mut self, _now: Duration) -> Option<u64> {
        None
    }
}

/// Pacing gain of a window-based controller in slow start, and afterwards: Linux's
/// internal TCP pacing ratios (net.ipv4.tcp_pacing_ss_ratio = 200 %, tcp_pacing_ca_ratio = 120 %).
pub const PACING_GAIN_SLOW_START: f64 = 2.0;
pub const PACING_GAIN: f64 = 1.2;

/// Pacing for window-based (ACK-clocked) controllers: spread the window over one smoothed
/// RTT, times a gain above 1 so the pacer never becomes the bottleneck (the window is the
/// limit; pacing only removes the line-rate bursts a host would otherwise put into the queue).
pub fn window_pacing_rate(cwnd_bytes: u64, srtt: Duration, slow_start: bool) -> f64 {
    let gain = if slow_start { PACING_GAIN_SLOW_START } else { PACING_GAIN };
    let secs = srtt.as_secs_f64().max(1e-4);
    gain * cwnd_bytes as f64 / secs
}

/// Minimum (or maximum) of samples over a sliding time window, O(1) amortised: a
/// monotone deque keeps only samples that can still become the extreme.
#[derive(Clone, Debug)]
pub struct WindowedFilter {
    samples: VecDeque<(Duration, f64)>,
    keep_max: bool,
}

impl WindowedFilter {
    pub fn min() -> Self {
        Self { samples: VecDeque::new(), keep_max: false }
    }

    pub fn max() -> Self {
        Self { samples: VecDeque::new(), keep_max: true }
    }

    fn dominated(&self, old: f64, new: f64) -> bool {
        if self.keep_max {
            old <= new
        } else {
            old >= new
        }
    }

    /// Adds a sample taken at `now`; samples must come in time order.
    pub fn update(&mut self, now: Duration, value: f64) {
        while let Some(&(_, v)) = self.samples.back() {
            if self.dominated(v, value) {
                self.samples.pop_back();
            } else {
                break;
            }
        }
        self.samples.push_back((now, value));
    }

    /// The extreme over samples taken within `window` before `now` (the newest sample is
    /// always kept, so a filter that has seen anything never goes empty).
    pub fn get(&mut self, now: Duration, window: Duration) -> Option<f64> {
        let horizon = now.saturating_sub(window);
        while self.samples.len() > 1 && self.samples[0].0 < horizon {
            self.samples.pop_front();
        }
        self.samples.front().map(|&(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn windowed_min_forgets_old_samples() {
        let mut f = WindowedFilter::min();
        f.update(ms(0), 10.0);
        f.update(ms(5), 30.0);
        f.update(ms(8), 20.0);
        assert_eq!(f.get(ms(8), ms(100)), Some(10.0));
        assert_eq!(f.get(ms(20), ms(14)), Some(20.0));
        // Even past the window the newest sample survives.
        assert_eq!(f.get(ms(1000), ms(1)), Some(20.0));
    }

    #[test]
    fn windowed_max_tracks_maximum() {
        let mut f = WindowedFilter::max();
        for (t, v) in [(0, 1.0), (1, 5.0), (2, 3.0), (3, 4.0)] {
            f.update(ms(t), v);
        }
        assert_eq!(f.get(ms(3), ms(10)), Some(5.0));
        assert_eq!(f.get(ms(4), ms(2)), Some(4.0));
    }

    #[test]
    fn window_pacing_spreads_cwnd_over_srtt() {
        let r = window_pacing_rate(15_000, ms(100), false);
        assert!((r - 1.2 * 150_000.0).abs() < 1e-6);
        let r = window_pacing_rate(15_000, ms(100), true);
        assert!((r - 2.0 * 150_000.0).abs() < 1e-6);
    }
}
