//! The one shape every network effect has (after Mahimahi's queue classes): accept a packet,
//! hand out the packets that are due, and say when to wake next. Time is passed in; stages
//! never read a clock, so they are tested in virtual time.

use crate::packet::{Ms, Packet};

/// Receives what a link does, for the Mahimahi-format log. Only [`crate::link::Link`]
/// reports; other stages have nothing Mahimahi would log.
pub trait LinkObserver {
    /// A delivery opportunity at `t` (every one, used or not).
    fn opportunity(&mut self, _t: Ms) {}
    /// A packet of `size` bytes arrived at `t`.
    fn arrival(&mut self, _t: Ms, _size: usize) {}
    /// A packet of `size` bytes departed at `t` after `delay` ms in the link.
    fn departure(&mut self, _t: Ms, _size: usize, _delay: Ms) {}
    /// The queue dropped `packets` packets totalling `bytes` at `t`.
    fn drop(&mut self, _t: Ms, _packets: usize, _bytes: usize) {}
}

/// An observer that records nothing.
pub struct Unobserved;
impl LinkObserver for Unobserved {}

pub trait Stage {
    /// Take a packet that reaches this stage at `packet.time`. Successive calls and
    /// [`Stage::release`] calls never go back in time.
    fn accept(&mut self, packet: Packet, observer: &mut dyn LinkObserver);
    /// Append to `out`, in departure order, every packet due at or before `now`; each one's
    /// `time` is its scheduled departure.
    fn release(&mut self, now: Ms, out: &mut Vec<Packet>, observer: &mut dyn LinkObserver);
    /// The earliest time `release` can hand out a packet, or `None` while nothing is held.
    fn next_wake(&self) -> Option<Ms>;
    /// Packets held (queued, in transit or waiting).
    fn held(&self) -> usize;
}

/// Stages in the order a packet crosses them (one direction of the path).
pub struct Pipeline {
    stages: Vec<Box<dyn Stage + Send>>,
    scratch: Vec<Packet>,
}

impl Pipeline {
    pub fn new(stages: Vec<Box<dyn Stage + Send>>) -> Self {
        Pipeline { stages, scratch: Vec::new() }
    }

    pub fn accept(&mut self, packet: Packet, observer: &mut dyn LinkObserver) {
        match self.stages.first_mut() {
            Some(first) => first.accept(packet, observer),
            None => self.scratch.push(packet),
        }
    }

    /// Move everything due at or before `now` through all stages; what leaves the last stage
    /// goes to `out`. A packet released by one stage enters the next at its departure time,
    /// in the same call, so a zero-delay chain adds nothing.
    pub fn release(&mut self, now: Ms, out: &mut Vec<Packet>, observer: &mut dyn LinkObserver) {
        let mut carried = std::mem::take(&mut self.scratch);
        for stage in self.stages.iter_mut() {
            for packet in carried.drain(..) {
                stage.accept(packet, observer);
            }
            stage.release(now, &mut carried, observer);
        }
        out.append(&mut carried);
        self.scratch = carried;
    }

    pub fn next_wake(&self) -> Option<Ms> {
        self.stages.iter().filter_map(|s| s.next_wake()).min()
    }

    pub fn held(&self) -> usize {
        self.stages.iter().map(|s| s.held()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delay::Delay;
    use crate::link::Link;
    use crate::loss::Loss;
    use crate::packet::Packet;
    use crate::queue::QueueSpec;
    use crate::trace::Trace;
    use std::sync::Arc;

    fn chain(data_direction: bool) -> Pipeline {
        let link: Box<dyn Stage + Send> =
            Box::new(Link::new(Arc::new(Trace::parse("1\n", "t").unwrap()), QueueSpec::Infinite, 0));
        let loss: Box<dyn Stage + Send> = Box::new(Loss::new(0.0, 1));
        let delay: Box<dyn Stage + Send> = Box::new(Delay::new(20));
        Pipeline::new(if data_direction { vec![link, loss, delay] } else { vec![delay, loss, link] })
    }

    fn times(pipeline: &mut Pipeline, now: Ms) -> Vec<Ms> {
        let mut out = Vec::new();
        pipeline.release(now, &mut out, &mut Unobserved);
        out.iter().map(|p| p.time).collect()
    }

    #[test]
    fn data_crosses_link_then_delay_at_scheduled_times_even_when_released_late() {
        let mut up = chain(true);
        up.accept(Packet::new(vec![0; 1500], 10), &mut Unobserved);
        up.accept(Packet::new(vec![0; 1500], 10), &mut Unobserved);
        assert_eq!(up.next_wake(), Some(11));
        assert!(times(&mut up, 30).is_empty());
        // Nobody looked between 30 and 45: the packets still leave at 11 + 20 and 12 + 20.
        assert_eq!(times(&mut up, 45), vec![31, 32]);
        assert_eq!(up.held(), 0);
    }

    #[test]
    fn acks_cross_delay_then_the_link() {
        let mut down = chain(false);
        down.accept(Packet::new(vec![0; 40], 10), &mut Unobserved);
        // Delayed until 30, it may not use the link's opportunity at 30: it leaves at 31.
        assert!(times(&mut down, 30).is_empty());
        assert_eq!(down.next_wake(), Some(31));
        assert_eq!(times(&mut down, 100), vec![31]);
    }
}
