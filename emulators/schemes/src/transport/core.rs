//! The sender's logic, pure: what may be sent when, what an ACK or a timer means.
//!
//! [`SenderCore`] owns the in-flight record, the RTT estimator, the pacer, the
//! delivery-rate estimator and the congestion controller. Times are passed in (time since
//! the flow started), so the same code runs under the real-time loop in `sender.rs` and
//! under the virtual-time link model in the tests.
//!
//! Accounting is retransmission-free: the payload is junk, so a lost packet is simply
//! recorded and reported to the controller, never resent.
//!
//! * Loss: by the controller's [`LossRule`], by default once a packet sent
//!   `REORDER_THRESHOLD` = 3 later has arrived (the receiver's bitmap says which did), or
//!   once it has been out for the loss timeout with no news (the controller's, else the RTT
//!   estimator's), which catches tail losses and outages.
//! * Delivery rate (used by the saturator): when packet P is acknowledged, the bytes
//!   delivered since P was sent divided by the longer of P's send interval and its ACK
//!   interval, the usual estimator that discounts ACK compression.
//! * Sizes: each packet has the controller's size ([`Controller::next_payload_bytes`]), and
//!   the window, the losses and the delivery rate count each packet's own bytes.
//! * Pacing: from the first send on, each send pushes the next permitted send time by
//!   `size / rate`, `size` the controller's full packet (a short packet takes a whole slot, as
//!   in UDT); a sender that woke late may catch up by at most `max(2 packets, 500 µs)` of
//!   credit, not at all, or all of it, as the controller's [`Pacer`] says.

use std::collections::VecDeque;
use std::time::Duration;

use super::rtt::RttEstimator;
use super::wire::{Ack, CONTROL_MAX_BYTES, CONTROL_MIN_BYTES, DATA_HEADER_BYTES};
use crate::cc::{AckEvent, CatchUp, Controller, LossEvent, LossRule, Pacer};

pub const REORDER_THRESHOLD: u64 = 3;
const MIN_BURST_CREDIT: Duration = Duration::from_micros(500);

#[derive(Clone, Debug)]
struct Sent {
    seq: u64,
    bytes: u64,
    sent_at: Duration,
    delivered: bool,
    lost: bool,
    /// Delivery-rate state when this packet was sent.
    delivered_at_send: u64,
    delivered_time_at_send: Duration,
    first_sent_time_at_send: Duration,
}

/// Counters for the end-of-run summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderCounts {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
}

pub struct SenderCore {
    cc: Box<dyn Controller>,
    flow: u64,
    packet_bytes: u64,
    next_seq: u64,
    flight: VecDeque<Sent>,
    bytes_in_flight: u64,
    largest_acked: Option<u64>,
    /// Send time of the most recently sent packet known delivered.
    newest_delivered_sent_at: Option<Duration>,
    rtt: RttEstimator,
    next_send_at: Duration,
    pacer: Pacer,
    delivered: u64,
    delivered_time: Duration,
    first_sent_time: Duration,
    counts: SenderCounts,
    control_sent: u64,
}

impl SenderCore {
    /// `packet_bytes` is the UDP payload of one full DATA packet (the pacing unit, and the
    /// window's least);
    /// `initial_rtt` is the handshake RTT (or the sender's assumption where there was none).
    pub fn new(cc: Box<dyn Controller>, flow: u64, packet_bytes: u64, initial_rtt: Duration) -> Self {
        Self {
            pacer: cc.pacer(),
            cc,
            flow,
            packet_bytes,
            next_seq: 0,
            flight: VecDeque::new(),
            bytes_in_flight: 0,
            largest_acked: None,
            newest_delivered_sent_at: None,
            rtt: RttEstimator::new(initial_rtt.max(Duration::from_micros(100))),
            next_send_at: Duration::ZERO,
            delivered: 0,
            delivered_time: Duration::ZERO,
            first_sent_time: Duration::ZERO,
            counts: SenderCounts::default(),
            control_sent: 0,
        }
    }

    pub fn flow(&self) -> u64 {
        self.flow
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub fn bytes_in_flight(&self) -> u64 {
        self.bytes_in_flight
    }

    pub fn counts(&self) -> SenderCounts {
        self.counts
    }

    /// CONTROL datagrams handed out by [`Self::take_control`].
    pub fn control_sent(&self) -> u64 {
        self.control_sent
    }

    /// The next control datagram the controller wants sent now (its UDP payload, clamped to
    /// the CONTROL limits), if any; call until None after each ACK and timer.
    pub fn take_control(&mut self, now: Duration) -> Option<usize> {
        let bytes = self.cc.take_control_datagram(now)?;
        self.control_sent += 1;
        Some((bytes as usize).clamp(CONTROL_MIN_BYTES, CONTROL_MAX_BYTES))
    }

    /// The local socket refused the next DATA packet at `now` (its send buffer is full).
    pub fn on_send_refused(&mut self, now: Duration) {
        self.cc.on_send_refused(now);
    }

    pub fn controller(&self) -> &dyn Controller {
        self.cc.as_ref()
    }

    pub fn srtt(&self) -> Duration {
        self.rtt.srtt()
    }

    fn pacing_rate(&self) -> f64 {
        self.cc.pacing_rate(self.rtt.srtt()).max(1.0)
    }

    /// How the controller wants its sends paced (read once, when the flow starts).
    pub fn pacer(&self) -> Pacer {
        self.pacer
    }

    /// When the next packet may go: None while the window is full or the controller has
    /// closed it (an ACK or a timer will open it), otherwise the pacer's time (possibly
    /// already past).
    pub fn send_allowed_at(&self) -> Option<Duration> {
        if self.cc.window_closed() || self.bytes_in_flight >= self.cc.cwnd().max(self.packet_bytes) {
            return None;
        }
        Some(self.next_send_at)
    }

    /// UDP payload of the next DATA packet: the controller's, between the DATA header and a
    /// full packet.
    pub fn next_packet_bytes(&self) -> u64 {
        self.cc.next_payload_bytes().map_or(self.packet_bytes, |b| b.clamp(DATA_HEADER_BYTES as u64, self.packet_bytes))
    }

    /// Records a packet of [`Self::next_packet_bytes`] sent at `now` and returns its sequence
    /// number.
    pub fn on_send(&mut self, now: Duration) -> u64 {
        let seq = self.next_seq;
        let bytes = self.next_packet_bytes();
        self.next_seq += 1;
        if self.flight.is_empty() && self.bytes_in_flight == 0 {
            // Nothing in flight: the delivery-rate interval restarts here, not at the
            // last ACK long ago.
            self.delivered_time = now;
            self.first_sent_time = now;
        }
        self.flight.push_back(Sent {
            seq,
            bytes,
            sent_at: now,
            delivered: false,
            lost: false,
            delivered_at_send: self.delivered,
            delivered_time_at_send: self.delivered_time,
            first_sent_time_at_send: self.first_sent_time,
        });
        self.bytes_in_flight += bytes;
        self.counts.sent += 1;
        self.cc.on_send(now, seq);
        let rate = self.pacing_rate();
        let gap = Duration::from_secs_f64(self.packet_bytes as f64 / rate);
        let credit = match self.pacer.catch_up {
            CatchUp::Bounded => (gap * 2).max(MIN_BURST_CREDIT),
            CatchUp::Never => Duration::ZERO,
            CatchUp::Unbounded => Duration::MAX,
        };
        // The grid starts at the first send: nothing was late before it (the handshake's round
        // trip is no lateness to make up; UDT's `m_ullTargetTime` starts at 0 likewise).
        let slot = if seq == 0 { now } else { self.next_send_at.max(now.saturating_sub(credit)) };
        self.next_send_at = slot + gap;
        seq
    }

    fn index(&self, seq: u64) -> Option<usize> {
        let base = self.flight.front()?.seq;
        if seq < base || seq >= self.next_seq {
            return None;
        }
        let idx = (seq - base) as usize;
        (idx < self.flight.len()).then_some(idx)
    }

    /// Marks `seq` delivered; returns its bytes if that is news.
    fn mark_delivered(&mut self, seq: u64) -> Option<u64> {
        let idx = self.index(seq)?;
        let p = &mut self.flight[idx];
        if p.delivered {
            return None;
        }
        p.delivered = true;
        let bytes = p.bytes;
        if !p.lost {
            self.bytes_in_flight -= bytes;
        }
        self.delivered += bytes;
        self.counts.delivered += 1;
        Some(bytes)
    }

    fn declare_lost(&mut self, idx: usize, now: Duration) {
        let p = &mut self.flight[idx];
        p.lost = true;
        self.bytes_in_flight -= p.bytes;
        self.counts.lost += 1;
        let event =
            LossEvent { now, seq: p.seq, sent_at: p.sent_at, bytes: p.bytes, bytes_in_flight: self.bytes_in_flight };
        self.cc.on_loss(&event);
    }

    /// Declares lost every outstanding packet, oldest first, as long as `older` holds.
    fn declare_lost_while(&mut self, now: Duration, older: impl Fn(&Sent) -> bool) {
        let mut idx = 0;
        while idx < self.flight.len() && older(&self.flight[idx]) {
            if !self.flight[idx].delivered && !self.flight[idx].lost {
                self.declare_lost(idx, now);
            }
            idx += 1;
        }
    }

    fn pop_settled(&mut self) {
        while self.flight.front().is_some_and(|p| p.delivered || p.lost) {
            self.flight.pop_front();
        }
    }

    /// Processes one ACK that arrived at `now`.
    pub fn on_ack(&mut self, now: Duration, ack: &Ack) {
        if ack.flow != self.flow || ack.seq >= self.next_seq {
            return;
        }
        let sent_at = Duration::from_micros(ack.echo_us);
        if sent_at > now {
            return;
        }
        let rtt = now - sent_at;
        self.rtt.update(rtt);

        // The acknowledged packet and everything the bitmap reports.
        let mut newly = 0u64;
        let mut newest: Option<u64> = None;
        let mut consider = |core: &mut Self, seq: u64| {
            if let Some(bytes) = core.mark_delivered(seq) {
                newly += bytes;
                newest = Some(newest.map_or(seq, |n: u64| n.max(seq)));
            }
        };
        consider(self, ack.seq);
        for i in 0..64u64 {
            if ack.bitmap & (1 << i) != 0 && ack.highest >= i {
                consider(self, ack.highest - i);
            }
        }

        let mut delivery_rate = None;
        if let Some(seq) = newest {
            let p = &self.flight[self.index(seq).expect("just marked")];
            let send_elapsed = p.sent_at.saturating_sub(p.first_sent_time_at_send);
            let ack_elapsed = now.saturating_sub(p.delivered_time_at_send);
            let interval = send_elapsed.max(ack_elapsed);
            let bytes = self.delivered - p.delivered_at_send;
            if !interval.is_zero() {
                delivery_rate = Some(bytes as f64 / interval.as_secs_f64());
            }
            self.first_sent_time = p.sent_at;
            self.delivered_time = now;
        }

        if newest.is_some() {
            let sent = self.newest_delivered_sent_at.map_or(sent_at, |s| s.max(sent_at));
            self.newest_delivered_sent_at = Some(sent);
        }
        let highest = ack.highest.min(self.next_seq.saturating_sub(1));
        self.largest_acked = Some(self.largest_acked.map_or(highest, |l| l.max(highest)));

        let event = AckEvent {
            now,
            seq: ack.seq,
            sent_at,
            rtt,
            one_way_delay_us: ack.receiver_us as i64 - ack.echo_us as i64,
            acked_bytes: newly,
            bytes_in_flight: self.bytes_in_flight,
            next_seq: self.next_seq,
            delivery_rate,
            srtt: self.rtt.srtt(),
        };
        self.cc.on_ack(&event);

        match self.cc.loss_rule() {
            // Packets `threshold` or more below the highest arrival that did not arrive.
            LossRule::Reorder(threshold) => {
                if let Some(largest) = self.largest_acked {
                    self.declare_lost_while(now, |p| p.seq + threshold <= largest);
                }
            }
            // Packets sent `gap` or more before the newest packet known delivered.
            LossRule::SentBefore(gap) => {
                if let Some(newest) = self.newest_delivered_sent_at {
                    self.declare_lost_while(now, |p| p.sent_at + gap <= newest);
                }
            }
        }
        self.pop_settled();
    }

    fn loss_timeout(&self) -> Duration {
        self.cc.loss_timeout().unwrap_or_else(|| self.rtt.loss_timeout())
    }

    /// Declares lost every packet that has been out longer than the loss timeout, and wakes
    /// the controller if its own timer is due.
    pub fn on_timer(&mut self, now: Duration) {
        if self.cc.timer_deadline().is_some_and(|t| t <= now) {
            self.cc.on_timer(now);
        }
        let timeout = self.loss_timeout();
        let mut idx = 0;
        while idx < self.flight.len() {
            let p = &self.flight[idx];
            if !p.delivered && !p.lost {
                if p.sent_at + timeout > now {
                    break;
                }
                self.declare_lost(idx, now);
            }
            idx += 1;
        }
        self.pop_settled();
    }

    /// When the oldest outstanding packet times out, if any is outstanding.
    pub fn loss_deadline(&self) -> Option<Duration> {
        let p = self.flight.iter().find(|p| !p.delivered && !p.lost)?;
        Some(p.sent_at + self.loss_timeout())
    }

    /// The next time the sender needs to act without an ACK: a pacing slot, a loss timeout
    /// or the controller's own timer.
    pub fn next_wakeup(&self) -> Option<Duration> {
        [self.send_allowed_at(), self.loss_deadline(), self.cc.timer_deadline()].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::Controller;
    use std::sync::{Arc, Mutex};

    /// A controller with a fixed window that records what it is told.
    #[derive(Clone, Default)]
    struct Probe {
        log: Arc<Mutex<Vec<String>>>,
        rates: Arc<Mutex<Vec<f64>>>,
        pacer: Pacer,
        /// Sizes of the next packets (then full-size ones).
        sizes: Arc<Mutex<VecDeque<u64>>>,
    }

    impl Controller for Probe {
        fn name(&self) -> &'static str {
            "probe"
        }
        fn on_ack(&mut self, ack: &AckEvent) {
            self.log.lock().unwrap().push(format!("ack {} +{}", ack.seq, ack.acked_bytes));
            if let Some(r) = ack.delivery_rate {
                self.rates.lock().unwrap().push(r);
            }
        }
        fn cwnd(&self) -> u64 {
            10 * 1000
        }
        fn pacing_rate(&self, _srtt: Duration) -> f64 {
            1_000_000.0 // one 1000-byte packet per ms
        }
        fn pacer(&self) -> Pacer {
            self.pacer
        }
        fn next_payload_bytes(&self) -> Option<u64> {
            self.sizes.lock().unwrap().front().copied()
        }
        fn on_send(&mut self, _now: Duration, _seq: u64) {
            self.sizes.lock().unwrap().pop_front();
        }
        fn on_loss(&mut self, loss: &LossEvent) {
            self.log.lock().unwrap().push(format!("loss {} {}", loss.seq, loss.bytes));
        }
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn ack(seq: u64, sent_ms: u64, highest: u64, bitmap: u64) -> Ack {
        Ack { flow: 1, seq, echo_us: sent_ms * 1000, receiver_us: 0, highest, bitmap }
    }

    fn core() -> (SenderCore, Probe) {
        let probe = Probe::default();
        (SenderCore::new(Box::new(probe.clone()), 1, 1000, ms(100)), probe)
    }

    #[test]
    fn window_and_pacing_gate_sending() {
        let (mut c, _) = core();
        assert_eq!(c.send_allowed_at(), Some(Duration::ZERO));
        for i in 0..10 {
            c.on_send(ms(i));
        }
        // Pacing: one packet per ms.
        assert_eq!(c.bytes_in_flight(), 10_000);
        assert_eq!(c.send_allowed_at(), None, "window of 10 packets is full");
        c.on_ack(ms(100), &ack(0, 0, 0, 1));
        assert_eq!(c.bytes_in_flight(), 9_000);
        assert_eq!(c.send_allowed_at(), Some(ms(10)));
    }

    #[test]
    fn each_packet_counts_its_own_bytes_and_takes_a_whole_slot() {
        let (mut c, probe) = core();
        // A short packet between full ones, and one asking for less than a header.
        probe.sizes.lock().unwrap().extend([1000, 400, 1000, 3]);
        let sizes: Vec<u64> = (0..5).map(|i| (c.next_packet_bytes(), c.on_send(ms(i))).0).collect();
        assert_eq!(sizes, [1000, 400, 1000, DATA_HEADER_BYTES as u64, 1000]);
        assert_eq!(c.bytes_in_flight(), 3400 + DATA_HEADER_BYTES as u64);
        // Slots stay 1 ms apart: the pacer spaces packets by the full size.
        assert_eq!(c.send_allowed_at(), Some(ms(5)));
        // Packet 1 (400 bytes) is acknowledged; 0 is then lost by the reorder rule once 3 is.
        c.on_ack(ms(100), &ack(1, 1, 1, 0b1));
        c.on_ack(ms(103), &ack(3, 3, 3, 0b1));
        let log = probe.log.lock().unwrap().clone();
        assert_eq!(log, ["ack 1 +400", &format!("ack 3 +{DATA_HEADER_BYTES}"), "loss 0 1000"]);
        assert_eq!(c.bytes_in_flight(), 2000);
    }

    #[test]
    fn a_late_send_is_made_up_only_where_the_pacer_allows() {
        // Slots every 1 ms; the second send leaves 5 ms late.
        let next_slot = |catch_up| {
            let pacer = Pacer { catch_up, busy_wait: true, whole_ms_poll: false };
            let mut c = SenderCore::new(Box::new(Probe { pacer, ..Probe::default() }), 1, 1000, ms(100));
            assert_eq!(c.pacer(), pacer);
            c.on_send(ms(0));
            c.on_send(ms(6));
            c.send_allowed_at()
        };
        assert_eq!(next_slot(CatchUp::Bounded), Some(ms(5)), "2 packets of credit: the next slot is already due");
        assert_eq!(next_slot(CatchUp::Never), Some(ms(7)), "one gap after the actual send");
        assert_eq!(next_slot(CatchUp::Unbounded), Some(ms(2)), "the grid, however late");
        // The first send, however long after the flow started (a handshake over a long path),
        // starts the grid: no burst to make up the wait.
        for catch_up in [CatchUp::Bounded, CatchUp::Never, CatchUp::Unbounded] {
            let pacer = Pacer { catch_up, busy_wait: true, whole_ms_poll: false };
            let mut c = SenderCore::new(Box::new(Probe { pacer, ..Probe::default() }), 1, 1000, ms(100));
            c.on_send(ms(300));
            assert_eq!(c.send_allowed_at(), Some(ms(301)), "{catch_up:?}");
        }
    }

    #[test]
    fn bitmap_recovers_lost_acks_and_gaps_become_losses() {
        let (mut c, probe) = core();
        for i in 0..8 {
            c.on_send(ms(i));
        }
        // Packets 0..=5 arrived except 2; only the ACK for 5 made it back.
        let bitmap = 0b11_0111; // 5,4,3,_,1,0 relative to highest 5 (bit i = 5 - i)
        c.on_ack(ms(105), &ack(5, 5, 5, bitmap));
        let log = probe.log.lock().unwrap().clone();
        assert_eq!(log, vec!["ack 5 +5000".to_string(), "loss 2 1000".to_string()]);
        assert_eq!(c.counts(), SenderCounts { sent: 8, delivered: 5, lost: 1 });
        assert_eq!(c.bytes_in_flight(), 2000);
    }

    #[test]
    fn reordering_below_threshold_is_not_loss() {
        let (mut c, probe) = core();
        for i in 0..4 {
            c.on_send(ms(i));
        }
        // 1 and 2 arrive before 0.
        c.on_ack(ms(101), &ack(1, 1, 1, 0b1));
        c.on_ack(ms(102), &ack(2, 2, 2, 0b11));
        c.on_ack(ms(103), &ack(0, 0, 2, 0b111));
        assert!(probe.log.lock().unwrap().iter().all(|l| !l.starts_with("loss")));
        assert_eq!(c.counts().delivered, 3);
    }

    #[test]
    fn silence_times_packets_out() {
        let (mut c, probe) = core();
        c.on_send(ms(0));
        c.on_send(ms(1));
        let deadline = c.loss_deadline().unwrap();
        assert!(deadline > ms(100), "timeout is above the RTT: {deadline:?}");
        c.on_timer(deadline);
        assert_eq!(probe.log.lock().unwrap().as_slice(), ["loss 0 1000"]);
        c.on_timer(deadline + ms(1));
        assert_eq!(c.counts().lost, 2);
        assert_eq!(c.bytes_in_flight(), 0);
        assert_eq!(c.loss_deadline(), None);
    }

    /// Asks for control datagrams of the given sizes, one per call.
    struct Chatty(Vec<u64>);

    impl Controller for Chatty {
        fn name(&self) -> &'static str {
            "chatty"
        }
        fn on_ack(&mut self, _ack: &AckEvent) {}
        fn on_loss(&mut self, _loss: &LossEvent) {}
        fn cwnd(&self) -> u64 {
            10_000
        }
        fn pacing_rate(&self, _srtt: Duration) -> f64 {
            1e6
        }
        fn take_control_datagram(&mut self, _now: Duration) -> Option<u64> {
            self.0.pop()
        }
    }

    #[test]
    fn control_datagrams_are_clamped_and_counted() {
        let (mut c, _) = core();
        assert_eq!(c.take_control(ms(0)), None, "by default a controller sends none");
        let mut c = SenderCore::new(Box::new(Chatty(vec![100_000, 3, 20])), 1, 1000, ms(100));
        assert_eq!(c.take_control(ms(0)), Some(20));
        assert_eq!(c.take_control(ms(0)), Some(CONTROL_MIN_BYTES));
        assert_eq!(c.take_control(ms(0)), Some(CONTROL_MAX_BYTES));
        assert_eq!(c.take_control(ms(0)), None);
        assert_eq!(c.control_sent(), 3);
        // Not data: nothing in flight, no sequence number used.
        assert_eq!((c.bytes_in_flight(), c.next_seq(), c.counts().sent), (0, 0, 0));
    }

    #[test]
    fn delivery_rate_matches_a_steady_bottleneck() {
        // Send every ms, deliver every 2 ms (500 packets/s = 500 kB/s), 50 ms base RTT.
        let (mut c, probe) = core();
        let mut next_ack = 0u64;
        for t in 0..400u64 {
            let now = ms(t);
            if c.send_allowed_at().is_some_and(|a| a <= now) {
                c.on_send(now);
            }
            // Packet k reaches the receiver at 2k + 25 ms and its ACK returns 25 ms later.
            while next_ack < c.next_seq() && 2 * next_ack + 50 <= t {
                c.on_ack(now, &ack(next_ack, next_ack, next_ack, 1));
                next_ack += 1;
            }
        }
        let rates = probe.rates.lock().unwrap();
        let last = *rates.last().unwrap();
        assert!((last - 500_000.0).abs() / 500_000.0 < 0.1, "rate {last}");
    }
}
