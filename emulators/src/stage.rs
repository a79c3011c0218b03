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
