//! Fixed propagation delay (Mahimahi's `mm-delay`): a FIFO with no rate or size limit.

use crate::packet::{Ms, Packet};
use crate::stage::{LinkObserver, Stage};
use std::collections::VecDeque;

pub struct Delay {
    delay: Ms,
    waiting: VecDeque<Packet>,
}

impl Delay {
    pub fn new(delay: Ms) -> Self {
        Delay { delay, waiting: VecDeque::new() }
    }
}

impl Stage for Delay {
    fn accept(&mut self, mut packet: Packet, _observer: &mut dyn LinkObserver) {
        packet.time += self.delay;
        self.waiting.push_back(packet);
    }

    fn release(&mut self, now: Ms, out: &mut Vec<Packet>, _observer: &mut dyn LinkObserver) {
        while self.waiting.front().is_some_and(|p| p.time <= now) {
            out.push(self.waiting.pop_front().expect("front exists"));
        }
    }

    fn next_wake(&self) -> Option<Ms> {
        self.waiting.front().map(|p| p.time)
    }

    fn held(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Unobserved;

    #[test]
    fn releases_each_packet_exactly_delay_later() {
        let mut delay = Delay::new(20);
        delay.accept(Packet::new(vec![1], 3), &mut Unobserved);
        delay.accept(Packet::new(vec![2], 5), &mut Unobserved);
        let mut out = Vec::new();
        delay.release(22, &mut out, &mut Unobserved);
        assert!(out.is_empty());
        assert_eq!(delay.next_wake(), Some(23));
        delay.release(30, &mut out, &mut Unobserved);
        assert_eq!(out.iter().map(|p| p.time).collect::<Vec<_>>(), vec![23, 25]);
    }
}
