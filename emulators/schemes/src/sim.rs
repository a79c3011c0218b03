//! Virtual-time model of one bottleneck, to test each controller's character end to end
//! with the real transport logic ([`SenderCore`] and [`ReceiverFlow`]) and no sockets.
//!
//! The path: the sender's packets enter a DropTail queue of `queue_packets` drained at
//! `rate` (a 1500-byte IP packet, the default size, takes 1 ms at 12 Mbit/s; a controller
//! with its own `payload_bytes` or `next_payload_bytes` sends smaller ones), then take `one_way_delay`
//! to reach the receiver; ACKs come back after `one_way_delay` with no queue, the shape
//! of the emulator the calibration checks (12 Mbit/s, 20 ms, 100 packets). A controller's
//! control datagrams (`take_control_datagram`) share the data's queue, each taking one slot
//! and its own size's transmission time, and are counted apart.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use crate::cc::Controller;
use crate::transport::core::SenderCore;
use crate::transport::receiver::ReceiverFlow;
use crate::transport::wire::Ack;

pub const PAYLOAD: u64 = 1472;
/// IPv4 and UDP headers on top of a payload.
const HEADERS: u64 = 28;
const FLOW: u64 = 42;

pub struct Link {
    pub rate_bits_per_s: f64,
    pub one_way_delay: Duration,
    pub queue_packets: usize,
}

impl Link {
    /// The calibration's reference emulator.
    pub fn reference() -> Self {
        Link { rate_bits_per_s: 12e6, one_way_delay: Duration::from_millis(20), queue_packets: 100 }
    }
}

#[derive(Debug)]
pub struct Outcome {
    pub duration: Duration,
    pub delivered_packets: u64,
    /// IP bytes of the delivered packets.
    pub delivered_bytes: u64,
    pub dropped_packets: u64,
    /// (arrival time, one-way delay) of every delivered packet.
    pub delays: Vec<(Duration, Duration)>,
    /// Control datagrams that crossed the link, and those the full queue dropped.
    pub control_delivered: u64,
    pub control_dropped: u64,
    link_rate: f64,
}

impl Outcome {
    pub fn utilization(&self) -> f64 {
        let bits = self.delivered_bytes as f64 * 8.0;
        bits / (self.link_rate * self.duration.as_secs_f64())
    }

    /// Percentile (nearest rank) of one-way delay in ms over packets arriving after `from`.
    pub fn delay_percentile_ms(&self, p: f64, from: Duration) -> f64 {
        let mut v: Vec<f64> =
            self.delays.iter().filter(|(t, _)| *t >= from).map(|(_, d)| d.as_secs_f64() * 1e3).collect();
        assert!(!v.is_empty(), "no packets delivered after {from:?}");
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let idx = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
        v[idx]
    }
}

enum Event {
    Arrival { seq: u64, sent_us: u64, bytes: u64 },
    ControlArrival,
    AckBack(Ack),
}

/// The bottleneck's DropTail queue: when each queued packet leaves it.
struct Queue {
    departures: VecDeque<Duration>,
    limit: usize,
}

impl Queue {
    /// A packet taking `tx` to transmit enters at `now`: when it leaves, or None if dropped.
    fn enqueue(&mut self, now: Duration, tx: Duration) -> Option<Duration> {
        while self.departures.front().is_some_and(|&t| t <= now) {
            self.departures.pop_front();
        }
        if self.departures.len() >= self.limit {
            return None;
        }
        let leaves = self.departures.back().copied().unwrap_or(now).max(now) + tx;
        self.departures.push_back(leaves);
        Some(leaves)
    }
}

pub fn run(cc: Box<dyn Controller>, link: &Link, duration: Duration) -> Outcome {
    let payload = cc.payload_bytes().unwrap_or(PAYLOAD);
    let d = link.one_way_delay;
    let mut core = SenderCore::new(cc, FLOW, payload, 2 * d);
    let mut receiver = ReceiverFlow::new(FLOW);
    let mut events: BinaryHeap<Reverse<(Duration, u64)>> = BinaryHeap::new();
    let mut payloads: std::collections::HashMap<u64, Event> = std::collections::HashMap::new();
    let mut event_id = 0u64;
    let mut queue = Queue { departures: VecDeque::new(), limit: link.queue_packets };
    let tx_of = |bytes: usize| Duration::from_secs_f64((bytes as u64 + HEADERS) as f64 * 8.0 / link.rate_bits_per_s);
    let mut out = Outcome {
        duration,
        delivered_packets: 0,
        delivered_bytes: 0,
        dropped_packets: 0,
        delays: Vec::new(),
        control_delivered: 0,
        control_dropped: 0,
        link_rate: link.rate_bits_per_s,
    };
    let mut now = Duration::ZERO;
    while now < duration {
        // Control datagrams the last ACK or timer made due leave at once.
        while let Some(bytes) = core.take_control(now) {
            match queue.enqueue(now, tx_of(bytes)) {
                Some(leaves) => {
                    payloads.insert(event_id, Event::ControlArrival);
                    events.push(Reverse((leaves + d, event_id)));
                    event_id += 1;
                }
                None => out.control_dropped += 1,
            }
        }
        let next_event = events.peek().map(|Reverse((t, _))| *t);
        let next_wake = core.next_wakeup().map(|t| t.max(now));
        let sender_first = match (next_wake, next_event) {
            (Some(w), Some(e)) => w <= e,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if sender_first {
            now = next_wake.expect("checked");
            core.on_timer(now);
            if core.send_allowed_at().is_some_and(|at| at <= now) {
                let seq = core.next_seq();
                let bytes = core.next_packet_bytes();
                core.on_send(now);
                let Some(leaves) = queue.enqueue(now, tx_of(bytes as usize)) else {
                    out.dropped_packets += 1;
                    continue;
                };
                payloads
                    .insert(event_id, Event::Arrival { seq, sent_us: now.as_micros() as u64, bytes: bytes + HEADERS });
                events.push(Reverse((leaves + d, event_id)));
                event_id += 1;
            }
        } else {
            let Reverse((t, id)) = events.pop().expect("peeked");
            now = t;
            match payloads.remove(&id).expect("scheduled") {
                Event::Arrival { seq, sent_us, bytes } => {
                    out.delivered_packets += 1;
                    out.delivered_bytes += bytes;
                    out.delays.push((now, now - Duration::from_micros(sent_us)));
                    let ack = receiver.on_data(seq, sent_us, now.as_micros() as u64);
                    payloads.insert(event_id, Event::AckBack(ack));
                    events.push(Reverse((now + d, event_id)));
                    event_id += 1;
                }
                Event::ControlArrival => out.control_delivered += 1,
                Event::AckBack(ack) => core.on_ack(now, &ack),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::{Copa, Ledbat, Saturator, Vegas};

    const RUN: Duration = Duration::from_secs(20);
    const STEADY: Duration = Duration::from_secs(10);

    fn report(name: &str, o: &Outcome) {
        eprintln!(
            "{name}: utilization {:.3}, p50 {:.1} ms, p95 {:.1} ms (whole run), drops {}",
            o.utilization(),
            o.delay_percentile_ms(50.0, Duration::ZERO),
            o.delay_percentile_ms(95.0, Duration::ZERO),
            o.dropped_packets
        );
    }

    #[test]
    fn vegas_keeps_alpha_to_beta_packets_queued() {
        let o = run(Box::new(Vegas::new(PAYLOAD)), &Link::reference(), RUN);
        report("vegas", &o);
        assert!(o.utilization() >= 0.85, "utilization {}", o.utilization());
        assert!(o.delay_percentile_ms(95.0, Duration::ZERO) < 60.0);
        // One packet is 1 ms at 12 Mbit/s: the queue in packets is the delay above 21 ms
        // (20 ms propagation + 1 ms transmission).
        let queue = o.delay_percentile_ms(50.0, STEADY) - 21.0;
        assert!((1.0..=5.0).contains(&queue), "median standing queue {queue} packets");
    }

    #[test]
    fn copa_keeps_delay_low_at_high_utilization() {
        let o = run(Box::new(Copa::new(PAYLOAD)), &Link::reference(), RUN);
        report("copa", &o);
        assert!(o.utilization() >= 0.6, "utilization {}", o.utilization());
        assert!(o.delay_percentile_ms(95.0, Duration::ZERO) < 60.0);
        // 1/delta = 2 packets of standing queue at equilibrium; allow the oscillation.
        let queue = o.delay_percentile_ms(50.0, STEADY) - 21.0;
        assert!(queue < 10.0, "median standing queue {queue} packets");
    }

    #[test]
    fn ledbat_converges_to_its_target_queueing_delay() {
        // A queue far deeper than the target, so only the controller limits the delay.
        let link = Link { queue_packets: 1000, ..Link::reference() };
        let o = run(Box::new(Ledbat::new(PAYLOAD)), &link, Duration::from_secs(40));
        report("ledbat (deep queue)", &o);
        let queueing = o.delay_percentile_ms(50.0, Duration::from_secs(30)) - 21.0;
        assert!((85.0..=110.0).contains(&queueing), "queueing delay {queueing} ms");
        assert!(o.utilization() >= 0.9);
    }

    #[test]
    fn ledbat_on_the_reference_link_stays_near_target() {
        let o = run(Box::new(Ledbat::new(PAYLOAD)), &Link::reference(), RUN);
        report("ledbat", &o);
        let queueing = o.delay_percentile_ms(50.0, STEADY) - 21.0;
        assert!((50.0..=101.0).contains(&queueing), "queueing delay {queueing} ms");
        assert!(o.utilization() >= 0.85);
    }

    /// Paced at `load` times a 2 Mbit/s link with no window, and one 20-byte control
    /// datagram after every `every`-th ACK (none when `every` is 0).
    struct Flood {
        load: f64,
        every: u64,
        acks: u64,
        due: u64,
        asked: std::sync::Arc<std::sync::atomic::AtomicU64>,
    }

    impl Controller for Flood {
        fn name(&self) -> &'static str {
            "flood"
        }
        fn on_ack(&mut self, _ack: &crate::cc::AckEvent) {
            self.acks += 1;
            if self.every > 0 && self.acks.is_multiple_of(self.every) {
                self.due += 1;
            }
        }
        fn on_loss(&mut self, _loss: &crate::cc::LossEvent) {}
        fn cwnd(&self) -> u64 {
            u64::MAX / 4
        }
        fn pacing_rate(&self, _srtt: Duration) -> f64 {
            self.load * 2e6 / 8.0 * PAYLOAD as f64 / (PAYLOAD + HEADERS) as f64
        }
        fn take_control_datagram(&mut self, _now: Duration) -> Option<u64> {
            (self.due > 0).then(|| {
                self.due -= 1;
                self.asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                20
            })
        }
    }

    fn flood(load: f64, every: u64) -> (Outcome, u64) {
        let link = Link { rate_bits_per_s: 2e6, one_way_delay: Duration::from_millis(5), queue_packets: 20 };
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let cc = Flood { load, every, acks: 0, due: 0, asked: asked.clone() };
        (run(Box::new(cc), &link, Duration::from_secs(5)), asked.load(std::sync::atomic::Ordering::Relaxed))
    }

    #[test]
    fn control_datagrams_cross_the_link_and_are_counted() {
        let (plain, asked) = flood(0.9, 0);
        assert_eq!((asked, plain.control_delivered, plain.control_dropped), (0, 0, 0));
        // Below the link rate the queue has room: every one asked for crosses, and their
        // 48-byte wire time costs the data almost nothing.
        let (light, asked) = flood(0.9, 2);
        assert!(asked > 300, "{asked}");
        assert_eq!(light.control_dropped, 0);
        assert!(
            light.control_delivered + 2 >= asked,
            "{} of {asked} (the last still in flight)",
            light.control_delivered
        );
        assert!((light.utilization() - plain.utilization()).abs() < 0.02);
        assert_eq!(light.dropped_packets, 0);
        // Overdriven, the full queue drops some; each is counted once, delivered or dropped.
        let (heavy, asked) = flood(2.0, 2);
        assert!(heavy.control_dropped > 0);
        assert!(heavy.control_delivered + heavy.control_dropped + 2 >= asked);
        assert!(heavy.control_delivered + heavy.control_dropped <= asked);
    }

    #[test]
    fn a_control_datagram_holds_a_queue_slot_for_its_own_wire_time() {
        let ms = Duration::from_millis;
        let mut q = Queue { departures: VecDeque::new(), limit: 3 };
        assert_eq!(q.enqueue(ms(0), ms(6)), Some(ms(6)));
        assert_eq!(q.enqueue(ms(0), Duration::from_micros(200)), Some(Duration::from_micros(6200)));
        assert_eq!(q.enqueue(ms(1), ms(6)), Some(Duration::from_micros(12_200)));
        // Three packets queued, one of them small: the fourth is dropped.
        assert_eq!(q.enqueue(ms(2), ms(6)), None);
        // Once the first leaves there is room again.
        assert_eq!(q.enqueue(ms(6), ms(6)), Some(Duration::from_micros(18_200)));
    }

    #[test]
    fn saturator_fills_the_queue() {
        let o = run(Box::new(Saturator::new(PAYLOAD)), &Link::reference(), RUN);
        report("saturator", &o);
        assert!(o.utilization() >= 0.95, "utilization {}", o.utilization());
        assert!(o.delay_percentile_ms(95.0, Duration::ZERO) >= 100.0);
        assert!(o.delay_percentile_ms(50.0, STEADY) >= 110.0, "queue not kept full");
        assert!(o.dropped_packets > 0);
    }
}
