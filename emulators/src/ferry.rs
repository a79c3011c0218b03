//! Mahimahi's timing, in virtual time: each shell direction is a process of its own.
//!
//! In Mahimahi every shell (`mm-delay`, `mm-loss`, `mm-link`) ferries each direction in a
//! separate single-threaded process that polls its input TUN device and reads an
//! integer-millisecond clock (the floor of the wall clock since one shared zero point). A
//! packet is stamped with the millisecond in which *that* process reads it, and whatever is due
//! is written out when the process next runs its loop: when the next packet arrives, or when
//! its poll timeout ends. The timeout is computed in whole milliseconds from the clock's
//! reading at the top of the loop and counted from the moment of the call, so it ends at the
//! due millisecond *plus the sub-millisecond phase at which the process last looped*, plus the
//! kernel's timer slack and wake-up latency. Each hop from one process's TUN write to the next
//! one's read takes a few tens of microseconds more.
//!
//! So in Mahimahi the phases of the processes within the millisecond wander (reset by each
//! arriving packet, advanced by each late timer), packets are re-floored at every hop, and the
//! one-way delay of a packet varies by up to a millisecond either way around the nominal one.
//! A sender sees it: ACKs arrive spread over the millisecond instead of on its boundary, so
//! rate samples over a round trip scatter by a few per cent, and a max-filtered bandwidth
//! estimate (Linux BBR's) lands above the link rate and keeps a standing queue. Measured
//! against a real Mahimahi build (`experiments/vs_mahimahi.py`), this model is what makes the
//! engine's BBR queue like Mahimahi's; [`crate::stage::Pipeline`] remains as the idealised
//! alternative where every stage acts exactly on the shared millisecond boundary.
//!
//! [`Ferries`] is pure: time (microseconds since the zero point) is passed in, the only
//! randomness is the timer lateness drawn from a seeded generator, and the stages inside are
//! the same pure stages the idealised pipeline uses.

use crate::packet::{Ms, Packet};
use crate::stage::{LinkObserver, Stage};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

/// How late a poll timeout wakes its process, in microseconds: Linux gives a normal task's
/// timers 50 µs of slack, and the wake-up itself takes some tens of microseconds more. Drawn
/// uniformly from this range for every timer wake-up.
pub const WAKE_LATE_US: (u64, u64) = (50, 100);

/// From one process writing a packet into a TUN device to the next process reading it
/// (kernel forwarding between namespaces plus the reader's wake-up), in microseconds.
pub const HOP_US: u64 = 40;

/// Microseconds between two loop passes of a process that still has input to read (Mahimahi
/// reads one packet per pass).
const PASS_US: u64 = 1;

/// Whose timing the engine reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// Mahimahi's: one process per shell direction, each with its own millisecond clock and
    /// poll loop ([`Ferries`]). The default.
    Mahimahi,
    /// Idealised: one clock, every stage acting exactly on the millisecond boundary, no
    /// process hops ([`crate::stage::Pipeline`]).
    Ideal,
}

impl Timing {
    pub fn parse(text: &str) -> Option<Timing> {
        match text {
            "mahimahi" => Some(Timing::Mahimahi),
            "ideal" => Some(Timing::Ideal),
            _ => None,
        }
    }
}

/// When a stage's process sets its poll timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakes {
    /// Only while the stage holds a packet (`mm-delay`, `mm-loss`).
    WhenHolding,
    /// At every delivery opportunity, busy or idle (`mm-link`'s wait time is always the time
    /// to the next opportunity).
    EveryOpportunity,
}

/// What a process's stage says about its next poll timeout, in whole milliseconds.
pub trait Timed: Stage {
    /// The millisecond the process's poll timeout is computed for, or `None` for no timeout.
    fn timeout_target(&self, wakes: Wakes) -> Option<Ms> {
        let _ = wakes;
        self.next_wake()
    }
}

struct Process {
    stage: Box<dyn Timed + Send>,
    wakes: Wakes,
    /// Packets written into this process's input TUN, with the time each becomes readable.
    inbox: VecDeque<(u64, Packet)>,
    /// When the poll timeout ends, if one is set.
    timer_us: Option<u64>,
}

impl Process {
    fn next_event(&self) -> Option<u64> {
        let arrival = self.inbox.front().map(|(ready, _)| *ready);
        match (arrival, self.timer_us) {
            (Some(a), Some(t)) => Some(a.min(t)),
            (a, t) => a.or(t),
        }
    }
}

/// One direction of a Mahimahi path as its chain of ferry processes, in the order a packet
/// crosses them.
pub struct Ferries {
    processes: Vec<Process>,
    rng: ChaCha8Rng,
    scratch: Vec<Packet>,
}

impl Ferries {
    /// `stages` in crossing order, each with how its process wakes; `seed` seeds the timer
    /// lateness.
    pub fn new(stages: Vec<(Box<dyn Timed + Send>, Wakes)>, seed: u64) -> Self {
        let processes = stages
            .into_iter()
            .map(|(stage, wakes)| Process { stage, wakes, inbox: VecDeque::new(), timer_us: None })
            .collect();
        Ferries { processes, rng: ChaCha8Rng::seed_from_u64(seed), scratch: Vec::new() }
    }

    /// A packet read from the input TUN device at `at_us` (after everything up to `at_us` was
    /// released).
    pub fn accept(
        &mut self,
        packet: Packet,
        at_us: u64,
        out: &mut Vec<(u64, Packet)>,
        observer: &mut dyn LinkObserver,
    ) {
        if self.processes.is_empty() {
            out.push((at_us, packet));
            return;
        }
        self.processes[0].inbox.push_back((at_us, packet));
        self.release(at_us, out, observer);
    }

    /// Run every process's loop passes up to `now_us`; what the last process writes goes to
    /// `out` with the time it was written.
    pub fn release(&mut self, now_us: u64, out: &mut Vec<(u64, Packet)>, observer: &mut dyn LinkObserver) {
        loop {
            let next = self.processes.iter().enumerate().filter_map(|(i, p)| p.next_event().map(|t| (t, i))).min();
            match next {
                Some((t, i)) if t <= now_us => self.pass(i, t, out, observer),
                _ => return,
            }
        }
    }

    /// One loop pass of process `i` at `t_us`: read one packet if one is waiting, write
    /// everything due by this millisecond, set the next timeout.
    fn pass(&mut self, i: usize, t_us: u64, out: &mut Vec<(u64, Packet)>, observer: &mut dyn LinkObserver) {
        let now = t_us / 1000;
        let process = &mut self.processes[i];
        if process.inbox.front().is_some_and(|(ready, _)| *ready <= t_us) {
            let (_, mut packet) = process.inbox.pop_front().expect("front exists");
            packet.time = now;
            process.stage.accept(packet, observer);
        }
        process.stage.release(now, &mut self.scratch, observer);
        let more_input = process.inbox.front().is_some_and(|(ready, _)| *ready <= t_us);
        process.timer_us = if more_input {
            Some(t_us + PASS_US)
        } else {
            process.stage.timeout_target(process.wakes).map(|target| {
                let wait_ms = target.saturating_sub(now);
                let late = if wait_ms == 0 { PASS_US } else { self.rng.gen_range(WAKE_LATE_US.0..=WAKE_LATE_US.1) };
                t_us + wait_ms * 1000 + late
            })
        };
        let written = std::mem::take(&mut self.scratch);
        match self.processes.get_mut(i + 1) {
            Some(next) => next.inbox.extend(written.into_iter().map(|p| (t_us + HOP_US, p))),
            None => out.extend(written.into_iter().map(|p| (t_us, p))),
        }
    }

    /// The earliest time a pass could write a packet out of the last process: the next event
    /// of the first process, in crossing order, that holds or awaits a packet. (Idle passes —
    /// a link waking at an opportunity with nothing to send — change no output and are run
    /// when time is next advanced.)
    pub fn next_wake_us(&self) -> Option<u64> {
        self.processes.iter().filter(|p| !p.inbox.is_empty() || p.stage.held() > 0).filter_map(|p| p.next_event()).min()
    }

    pub fn held(&self) -> usize {
        self.processes.iter().map(|p| p.inbox.len() + p.stage.held()).sum()
    }
}

impl Timed for crate::link::Link {
    fn timeout_target(&self, wakes: Wakes) -> Option<Ms> {
        match wakes {
            Wakes::EveryOpportunity => Some(self.next_opportunity()),
            Wakes::WhenHolding => self.next_wake(),
        }
    }
}
impl Timed for crate::delay::Delay {}
impl Timed for crate::loss::Loss {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delay::Delay;
    use crate::link::Link;
    use crate::loss::Loss;
    use crate::queue::QueueSpec;
    use crate::stage::Unobserved;
    use crate::trace::Trace;
    use std::sync::Arc;

    const LATE: std::ops::RangeInclusive<u64> = WAKE_LATE_US.0..=WAKE_LATE_US.1;

    fn link(trace: &str) -> (Box<dyn Timed + Send>, Wakes) {
        let trace = Arc::new(Trace::parse(trace, "t").unwrap());
        (Box::new(Link::new(trace, QueueSpec::Infinite, 0)), Wakes::EveryOpportunity)
    }

    fn delay(ms: Ms) -> (Box<dyn Timed + Send>, Wakes) {
        (Box::new(Delay::new(ms)), Wakes::WhenHolding)
    }

    fn send(ferries: &mut Ferries, at_us: u64, size: usize, out: &mut Vec<(u64, Packet)>) {
        ferries.release(at_us, out, &mut Unobserved);
        ferries.accept(Packet::new(vec![0; size], at_us / 1000), at_us, out, &mut Unobserved);
    }

    fn written(ferries: &mut Ferries, until_us: u64) -> Vec<u64> {
        let mut out = Vec::new();
        ferries.release(until_us, &mut out, &mut Unobserved);
        out.iter().map(|(t, _)| *t).collect()
    }

    #[test]
    fn a_delay_process_stamps_the_millisecond_it_reads_and_wakes_at_its_own_phase() {
        let mut f = Ferries::new(vec![delay(20)], 1);
        let mut out = Vec::new();
        send(&mut f, 5_300, 100, &mut out);
        assert!(out.is_empty());
        // Due at ms 25; the poll timeout (20 ms) runs from 5.3 ms, plus the timer's lateness.
        assert!(written(&mut f, 25_340).is_empty());
        let t = written(&mut f, 26_000);
        assert_eq!(t.len(), 1);
        assert!(LATE.contains(&(t[0] - 25_300)), "written at {}", t[0]);
    }

    #[test]
    fn an_arriving_packet_wakes_the_process_and_everything_due_leaves_with_it() {
        let mut f = Ferries::new(vec![delay(20)], 1);
        let mut out = Vec::new();
        send(&mut f, 5_900, 100, &mut out); // due at 25 ms, timer near 25.95 ms
        send(&mut f, 25_100, 100, &mut out); // its arrival is a loop pass at 25.1 ms
        assert_eq!(out.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![25_100]);
        // The newcomer, read in ms 25, is due at 45.
        let t = written(&mut f, 46_000);
        assert_eq!(t.len(), 1);
        assert!(LATE.contains(&(t[0] - 45_100)));
    }

    #[test]
    fn an_idle_link_keeps_waking_at_every_opportunity_and_its_phase_drifts() {
        let mut f = Ferries::new(vec![link("1\n")], 7);
        // Idle since a pass at 0.5 ms: by 100 ms the timers' lateness has moved the phase on.
        let mut out = Vec::new();
        send(&mut f, 500, 100, &mut out);
        assert_eq!(written(&mut f, 2_000).len(), 1);
        let phase_before = f.processes[0].timer_us.unwrap() % 1000;
        assert!(written(&mut f, 100_000).is_empty());
        let phase_after = f.processes[0].timer_us.unwrap() % 1000;
        assert_ne!(phase_before, phase_after);
        // A packet read at 100.2 ms (ms 100) takes the opportunity at 101, written when the
        // link next loops: the timeout set at 100.2 ms ends at 101.2 ms plus lateness.
        send(&mut f, 100_200, 1500, &mut out);
        let t = written(&mut f, 102_000);
        assert_eq!(t.len(), 1);
        assert!(LATE.contains(&(t[0] - 101_200)), "written at {}", t[0]);
    }

    #[test]
    fn each_hop_re_stamps_the_packet_so_one_way_delay_varies_around_the_nominal() {
        // Data: link (12 Mbit/s) then delay 20 ms; a stream of one packet per ms, sent at
        // varying phases, as a paced sender does. An isolated packet resets every process's
        // phase and crosses in 21 ms plus lateness and hops; in a stream each process loops at
        // the phase of whatever woke it last, so a packet's one-way delay varies.
        let mut f = Ferries::new(vec![link("1\n"), delay(20)], 3);
        let mut out = Vec::new();
        let sent: Vec<u64> = (0..400u64).map(|k| 10_000 + k * 1_000 + (k * 379) % 1000).collect();
        for &at in &sent {
            send(&mut f, at, 1500, &mut out);
        }
        f.release(500_000, &mut out, &mut Unobserved);
        assert_eq!(out.len(), sent.len());
        let latency: Vec<u64> = out.iter().zip(&sent).map(|((w, _), at)| w - at).collect();
        let (lo, hi) = (latency.iter().min().unwrap(), latency.iter().max().unwrap());
        assert!(*lo >= 20_000 && *hi <= 23_000, "{lo}..{hi}");
        assert!(hi - lo >= 800, "{lo}..{hi}");
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let run = |seed| {
            let mut f = Ferries::new(
                vec![link("1\n"), (Box::new(Loss::new(0.0, 0)) as Box<dyn Timed + Send>, Wakes::WhenHolding), delay(5)],
                seed,
            );
            let mut out = Vec::new();
            for k in 0..50u64 {
                send(&mut f, 1_000 + k * 777, 1500, &mut out);
            }
            f.release(200_000, &mut out, &mut Unobserved);
            out.iter().map(|(t, _)| *t).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn next_wake_names_the_first_write_and_idle_passes_are_caught_up_lazily() {
        let mut f = Ferries::new(vec![link("1\n"), delay(10)], 5);
        assert_eq!(f.next_wake_us(), None);
        let mut out = Vec::new();
        send(&mut f, 3_400, 1500, &mut out);
        let first = f.next_wake_us().unwrap();
        assert!(LATE.contains(&(first - 4_400)));
        assert!(written(&mut f, first).is_empty()); // the link wrote it into the delay's TUN
                                                    // The delay process reads it HOP_US later, in ms 4: due at 14 ms, written at its phase.
        let read = f.next_wake_us().unwrap();
        assert_eq!(read, first + HOP_US);
        assert!(written(&mut f, read).is_empty());
        let write = f.next_wake_us().unwrap();
        assert!(LATE.contains(&(write - read - 10_000)), "{read} {write}");
        assert_eq!(written(&mut f, write), vec![write]);
        assert_eq!(f.held(), 0);
        assert_eq!(f.next_wake_us(), None);
    }
}
