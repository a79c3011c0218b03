//! The rate-limited link: a queue drained by a trace of delivery opportunities
//! (Mahimahi's `mm-link` service discipline: `src/frontend/link_queue.cc` in ravinet/mahimahi).

use crate::packet::{Ms, Packet, OPPORTUNITY_BYTES};
use crate::queue::{PacketQueue, QueueSpec};
use crate::stage::{LinkObserver, Stage};
use crate::trace::Trace;
use std::collections::VecDeque;
use std::sync::Arc;

pub struct Link {
    schedule: Arc<Trace>,
    /// Index of the next opportunity within the period, and the start of the current period.
    cursor: usize,
    base: Ms,
    queue: Box<dyn PacketQueue + Send>,
    /// The packet being sent and how many of its bytes are still to go.
    in_transit: Option<(Packet, usize)>,
    departed: VecDeque<Packet>,
    /// Everything up to this time has been emulated.
    emulated_until: Option<Ms>,
}

impl Link {
    /// A link whose schedule starts at `base` (opportunities at base + trace[i], then the
    /// trace repeats with period = its last value).
    pub fn new(schedule: Arc<Trace>, queue: QueueSpec, base: Ms) -> Self {
        Link {
            schedule,
            cursor: 0,
            base,
            queue: queue.build(),
            in_transit: None,
            departed: VecDeque::new(),
            emulated_until: None,
        }
    }

    /// The time of the next delivery opportunity not yet emulated.
    pub fn next_opportunity(&self) -> Ms {
        self.base + self.schedule.times[self.cursor]
    }

    /// Emulate every opportunity at or before `now` (Mahimahi's "rationalize"): each carries
    /// 1504 bytes, shared byte by byte by the packets in line; what nobody uses is lost.
    pub fn emulate_until(&mut self, now: Ms, observer: &mut dyn LinkObserver) {
        while self.next_opportunity() <= now {
            let t = self.next_opportunity();
            observer.opportunity(t);
            self.cursor += 1;
            if self.cursor == self.schedule.times.len() {
                self.cursor = 0;
                self.base += self.schedule.period();
            }
            let mut budget = OPPORTUNITY_BYTES;
            while budget > 0 {
                let (packet, left) = match self.in_transit.take() {
                    Some(current) => current,
                    None => match self.queue.dequeue() {
                        Some(packet) => {
                            let size = packet.size();
                            (packet, size)
                        }
                        None => break,
                    },
                };
                let sent = budget.min(left);
                budget -= sent;
                if left == sent {
                    let mut packet = packet;
                    observer.departure(t, packet.size(), t - packet.time);
                    packet.time = t;
                    self.departed.push_back(packet);
                } else {
                    self.in_transit = Some((packet, left - sent));
                }
            }
        }
        self.emulated_until = Some(self.emulated_until.map_or(now, |u| u.max(now)));
    }
}

impl Stage for Link {
    fn accept(&mut self, packet: Packet, observer: &mut dyn LinkObserver) {
        // Opportunities up to and including the arrival millisecond are used up first: a packet
        // can never leave in the millisecond it arrives.
        self.emulate_until(packet.time, observer);
        let (t, size) = (packet.time, packet.size());
        observer.arrival(t, size);
        let dropped = self.queue.enqueue(packet);
        if dropped.packets > 0 {
            observer.drop(t, dropped.packets, dropped.bytes);
        }
    }

    fn release(&mut self, now: Ms, out: &mut Vec<Packet>, observer: &mut dyn LinkObserver) {
        self.emulate_until(now, observer);
        out.extend(self.departed.drain(..));
    }

    fn next_wake(&self) -> Option<Ms> {
        // Idle opportunities need no wake-up: they are emulated (and logged) when time is
        // next advanced, before anything later happens.
        if self.in_transit.is_none() && self.queue.is_empty() && self.departed.is_empty() {
            return None;
        }
        if !self.departed.is_empty() {
            return self.emulated_until;
        }
        Some(self.next_opportunity())
    }

    fn held(&self) -> usize {
        self.queue.len() + usize::from(self.in_transit.is_some()) + self.departed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Unobserved;

    fn link(trace: &str, queue: QueueSpec) -> Link {
        Link::new(Arc::new(Trace::parse(trace, "t").unwrap()), queue, 0)
    }

    /// Records the log events, as Mahimahi's link log would show them.
    #[derive(Default)]
    struct Events(Vec<String>);
    impl LinkObserver for Events {
        fn opportunity(&mut self, t: Ms) {
            self.0.push(format!("{t} #"));
        }
        fn arrival(&mut self, t: Ms, size: usize) {
            self.0.push(format!("{t} + {size}"));
        }
        fn departure(&mut self, t: Ms, size: usize, delay: Ms) {
            self.0.push(format!("{t} - {size} {delay}"));
        }
        fn drop(&mut self, t: Ms, packets: usize, bytes: usize) {
            self.0.push(format!("{t} d {packets} {bytes}"));
        }
    }

    fn opportunities(link: &mut Link, until: Ms) -> Vec<Ms> {
        let mut events = Events::default();
        link.emulate_until(until, &mut events);
        events.0.iter().map(|e| e.trim_end_matches(" #").parse().unwrap()).collect()
    }

    fn send(link: &mut Link, t: Ms, ip_len: usize, events: &mut dyn LinkObserver) {
        link.accept(Packet::new(vec![0; ip_len], t), events);
    }

    fn departures(link: &mut Link, now: Ms) -> Vec<(Ms, usize)> {
        let mut out = Vec::new();
        link.release(now, &mut out, &mut Unobserved);
        out.iter().map(|p| (p.time, p.data.len())).collect()
    }

    #[test]
    fn trace_1_gives_a_one_millisecond_minimum_delay() {
        let mut link = link("1\n", QueueSpec::Infinite);
        let mut events = Events::default();
        link.emulate_until(9, &mut events);
        send(&mut link, 10, 1500, &mut events);
        assert_eq!(departures(&mut link, 10), vec![]);
        assert_eq!(link.next_wake(), Some(11));
        assert_eq!(departures(&mut link, 11), vec![(11, 1500)]);
    }

    #[test]
    fn trace_0_10_doubles_the_opportunity_at_each_wrap() {
        let mut link = link("0\n10\n", QueueSpec::Infinite);
        assert_eq!(opportunities(&mut link, 30), vec![0, 10, 10, 20, 20, 30, 30]);
    }

    #[test]
    fn trace_5_5_10_schedule() {
        // Mahimahi with base 34 logs 39, 39, 44, 49, 49, 54 (the trace wraps with period 10).
        let mut link = Link::new(Arc::new(Trace::parse("5\n5\n10\n", "t").unwrap()), QueueSpec::Infinite, 34);
        assert_eq!(opportunities(&mut link, 54), vec![39, 39, 44, 49, 49, 54]);
    }

    #[test]
    fn several_opportunities_in_one_millisecond_leave_as_one_burst() {
        let mut link = link("1\n1\n1\n1\n", QueueSpec::Infinite);
        let mut events = Events::default();
        for _ in 0..6 {
            send(&mut link, 0, 1500, &mut events);
        }
        assert_eq!(departures(&mut link, 1), vec![(1, 1500); 4]);
        assert_eq!(departures(&mut link, 2), vec![(2, 1500); 2]);
    }

    #[test]
    fn seven_small_packets_share_one_opportunity() {
        let mut link = link("1\n", QueueSpec::Infinite);
        let mut events = Events::default();
        for _ in 0..7 {
            send(&mut link, 0, 40, &mut events); // 44 bytes each, 308 in all
        }
        assert_eq!(departures(&mut link, 1), vec![(1, 40); 7]);
    }

    #[test]
    fn a_packet_spanning_two_opportunities_departs_at_the_second() {
        let mut link = link("1\n", QueueSpec::Infinite);
        let mut events = Events::default();
        send(&mut link, 0, 1000, &mut events); // 1004 bytes: leaves at 1, 500 bytes of it left
        send(&mut link, 0, 1500, &mut events); // 1504 bytes: 500 at ms 1, 1004 at ms 2
        send(&mut link, 0, 1000, &mut events); // 500 at ms 2, the rest at ms 3
        let mut out = Vec::new();
        link.release(3, &mut out, &mut events);
        let times: Vec<(Ms, usize)> = out.iter().map(|p| (p.time, p.data.len())).collect();
        assert_eq!(times, vec![(1, 1000), (2, 1500), (3, 1000)]);
        let log: Vec<&str> = events.0.iter().map(String::as_str).collect();
        assert_eq!(&log[3..], &["1 #", "1 - 1004 1", "2 #", "2 - 1504 2", "3 #", "3 - 1004 3"]);
    }

    #[test]
    fn unused_bytes_of_an_opportunity_are_lost() {
        let mut link = link("10\n", QueueSpec::Infinite);
        let mut events = Events::default();
        send(&mut link, 0, 100, &mut events);
        assert_eq!(departures(&mut link, 10), vec![(10, 100)]);
        send(&mut link, 11, 100, &mut events); // arrives after: waits for the next opportunity
        assert_eq!(departures(&mut link, 19), vec![]);
        assert_eq!(departures(&mut link, 20), vec![(20, 100)]);
    }

    #[test]
    fn a_packet_cannot_use_an_opportunity_in_its_arrival_millisecond() {
        let mut link = link("1\n", QueueSpec::Infinite);
        let mut events = Events::default();
        send(&mut link, 5, 100, &mut events); // opportunity 5 is burned before the enqueue
        assert_eq!(departures(&mut link, 5), vec![]);
        assert_eq!(departures(&mut link, 6), vec![(6, 100)]);
        assert_eq!(&events.0[..6], &["1 #", "2 #", "3 #", "4 #", "5 #", "5 + 104"]);
    }

    #[test]
    fn droptail_does_not_count_the_packet_in_transit() {
        // One opportunity per 10 ms, room for 2 waiting packets.
        let mut link = link("10\n", QueueSpec::DropTail { packets: 2, bytes: 0 });
        let mut events = Events::default();
        send(&mut link, 0, 100, &mut events); // X: 104 bytes
        send(&mut link, 0, 1500, &mut events); // B: 1504 bytes
                                               // At 10, X leaves and B sends 1400 bytes: B is in transit, out of the queue.
        assert_eq!(departures(&mut link, 10), vec![(10, 100)]);
        send(&mut link, 11, 1500, &mut events); // C
        send(&mut link, 11, 1500, &mut events); // D: accepted, B on the wire does not count
        assert!(!events.0.iter().any(|e| e.contains(" d ")), "{:?}", events.0);
        send(&mut link, 12, 1500, &mut events); // E: the queue holds C and D
        assert_eq!(events.0.last().unwrap(), "12 d 1 1504");
        assert_eq!(departures(&mut link, 20), vec![(20, 1500)]); // B's last 104 bytes
        assert_eq!(link.held(), 2); // C in transit, D queued
    }

    #[test]
    fn droptail_admission_matches_mahimahi() {
        let mut link = link("1000\n", QueueSpec::DropTail { packets: 3, bytes: 0 });
        let mut events = Events::default();
        for t in 0..5 {
            send(&mut link, t, 1500, &mut events);
        }
        let drops = events.0.iter().filter(|e| e.contains(" d ")).count();
        assert_eq!(drops, 2);
        assert_eq!(link.held(), 3);
    }

    #[test]
    fn late_release_keeps_the_schedule() {
        let mut link = link("1\n", QueueSpec::Infinite);
        let mut events = Events::default();
        for _ in 0..3 {
            send(&mut link, 0, 1500, &mut events);
        }
        // Nobody looked until t = 7: the departures still carry their own opportunity times.
        assert_eq!(departures(&mut link, 7), vec![(1, 1500), (2, 1500), (3, 1500)]);
    }
}
