//! pcc as Pantheon ran it in 2017: PCC Allegro, the UDT-based sender of modong/pcc at commit
//! `1afc958` (`sender/app/cc.h` class `BBCC`, the monitor machinery in `sender/src/core.cpp`,
//! the receiver's reports in `receiver/src/core.cpp`), with Pantheon's `src/pcc_mtu.patch`
//! (StanfordSNR/pantheon `c3ff6bc`) that makes UDT's MSS 1464 bytes.
//!
//! Sending is paced only: one packet every `period = 1464·8 / rate` µs, rate in Mbit/s
//! (`BBCC::setRate`); the window (100 000 packets) never binds, loss and timeouts change
//! nothing directly (`onLoss`, `onTimeout`, `onACK` are empty). UDT spins to each slot and
//! never makes up a late one ([`UDT_PACER`]).
//!
//! Monitor intervals (MIs, `CUDT::start_monitor`, `CUDT::packData`), numbered 0..99 in a ring:
//!
//! * An MI is a count of packets. It starts when the packet before it leaves (the first
//!   one with the first packet): the controller's `onMonitorStart` may set a new rate, then
//!   `length = RTT·(1.5 + {0, 0.1, 0.2} at random)/period` packets if `RTT·1.1/period > 10`,
//!   else `max(10, 5000/period)`, truncated; RTT is UDT's smoothed RTT in µs (the
//!   receiver's EWMA, 7/8 old + 1/8 new, of one ACK/ACK2 sample per 10 ms ACK timer, starting
//!   at 100 ms, copied to the sender by each full ACK: about a round trip late, [`UdtRtt`]; the
//!   first sample comes from the ACK the receiver sends before any data, [`Ack2Clock`]).
//! * The receiver reports the MI number of every arriving packet, in batches of 20
//!   (`CUDT::processData`, the 0x7FFF control message). For each batch the sender adds one
//!   RTT sample (now − send time of the batch's last packet) to the MI of that last packet.
//! * For each reported packet of MI m, every MI from m−1 back towards the current (sending)
//!   MI that has sent all its packets and not yet ended ends, newest first, with: its
//!   packet count `t`, the unreported ones `l` (lost), `T` = time from its start to its last
//!   send (s), and — a quirk kept — the mean RTT of the batch's last packet's MI, not its own.
//!
//! The controller (`BBCC::onMonitorStart`, `BBCC::onMonitorEnds`), rates in Mbit/s:
//!
//! * Utility: `u = ((t−l)/T · (1 − σ(100(l/t − 0.05))) · (1 − σ(10(1 − rtt_prev/rtt))) − l/T)
//!   / rtt · 1000` with σ the logistic function, rtt in µs and rtt_prev the rtt of the
//!   previous MI to end; halved for MI 0 during start-up.
//! * Start-up: rate 1; each new MI doubles it. While MIs end in order with rising utility the
//!   best is remembered; the first that does not rise, or that ends out of order, ends
//!   start-up at the best MI's rate. Near 10 Mbit/s the 8 Mbit/s MI decides: the report that
//!   ends it mostly ends in the 16 Mbit/s MI, whose queue sets the RTT it is scored with, so
//!   how many of that MI's packets the report holds (set by the MI lengths, so by UDT's RTT at
//!   each MI's start) decides whether start-up ends at 4 or 8 Mbit/s
//!   (`experiments/pcc_2017_startup.py`).
//! * Decision: the next 4 MIs probe `rate·(1 ± k·0.01)` as two pairs, each pair's order random
//!   (k counts consecutive guesses, 1..5); the rate then stays at the 4th probe until all 4
//!   have ended. Each pair votes for the side whose higher rate had the higher utility; a
//!   tie guesses again, otherwise the rate moves by `(k/2 + 1)·0.01·rate` that way.
//! * Moving: at the end of the first MI started after a move, the step grows to `n·0.01·rate`
//!   (n = 2, 3, ...) in the same direction for as long as each such MI's utility beats the
//!   previous; the first that does not steps back once and guesses again. Before each
//!   step, a rate above 200 Mbit/s and 30 above the MI's sent rate `t·12/T/1000` is reset to it.
//!
//! Mapping onto the transport: our receiver acknowledges every packet at once, so a batch of 20
//! reports is the ACK of every 20th packet to arrive, and the receiver's RTT sample for an ACK2 is
//! the ACK2's own delay, dated by the first packet sent after it ([`UdtRtt`]). UDT retransmits lost
//! packets (each counted in the MI in which it is resent); our transport sends a new packet in that
//! slot instead, the same packet count and pacing on the wire. The random choices are glibc's
//! `rand()` ([`Rng`]), seeded with the clock as upstream's.
//!
//! ACK2 on the data path: UDT's receiver sends a full ACK when its 10 ms ACK timer has run out
//! and data arrived since (`CUDT::checkTimers`, `sendCtrl(2)`), but not while a loss holds its
//! ACK number (until the resend arrives) unless `RTT + 4·RTTVar` have passed since the last
//! ([`Ack2Clock`], [`Repairs`]), and the sender answers every
//! full ACK at once with an ACK2 (`CUDT::processCtrl` case 2: its 10 ms guard compares an
//! rdtsc cycle count with a µs time, so it always passes; `sendCtrl(6)`), a 16-byte header and
//! 4 bytes of padding (`CPacket::pack` case 6): a 48-byte IP packet on the sender's path, about
//! 85 a second on a 2 Mbit/s link (counted in a reference run's uplink log), each holding a
//! slot of a DropTail queue counted in packets.
//! The port sends a 20-byte control datagram ([`Controller::take_control_datagram`]) at each
//! full ACK as [`Ack2Clock`] dates them: the first data ACK or ACK2 arrival 10 ms or more after
//! the last full ACK (the receiver checks its timers at every packet, so an ACK2 often sends the
//! next full ACK, with the sample it brought), and one for the ACK the receiver sends right
//! after the handshake, before any data. UDT's other sender-side control packets (handshake,
//! keep-alive when idle 1 s, shutdown) are left out: none recurs while data flows. Each
//! 100 000-byte `UDT::send` of Pantheon's appclient ends in a short packet, 644 bytes on the
//! wire (every 71st, [`SendBuffer`]), and a resend has its lost block's size, as the port's do;
//! the transport declares a loss at the first later packet's ACK, as UDT's receiver reports a
//! gap in a NAK at the packet that shows it (`CUDT::processData`, `sendCtrl(3)`), and the
//! sender resends it next ([`NAK_AFTER`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use super::call_trace::CallTrace;
use super::{AckEvent, CatchUp, ConnectLaw, Controller, LossEvent, LossRule, Pacer};

/// UDT's send queue busy-waits to each packet's time (`CTimer::sleepto` spins on rdtsc:
/// `NO_BUSY_WAITING` is not defined) and schedules the next one interval after it actually
/// sent (`CUDT::packData`: `ts = entertime + m_ullInterval`), so time lost to a late wake-up
/// (preemption) is never made up.
pub const UDT_PACER: Pacer = Pacer { catch_up: CatchUp::Never, busy_wait: true, whole_ms_poll: false };

/// UDT 4's `CUDT::connect` (modong/pcc's and PCC-Uspace's `core.cpp`): a handshake request
/// at once and again every 250 ms, and a connection time-out 3 s after the first
/// (`ttl = 3000000`); a request queued behind 3 s of data never connects.
pub const UDT_CONNECT: ConnectLaw = ConnectLaw { repeat: Duration::from_millis(250), give_up: Duration::from_secs(3) };

/// UDT's receiver reports a gap at the first packet past it: a packet is lost once one sent
/// this many later has arrived.
pub const NAK_AFTER: u64 = 1;

/// UDT's MSS after Pantheon's patch: one IP packet, headers included.
pub const MSS_BYTES: u64 = 1464;
/// UDP payload of one data packet: the MSS less the IPv4 and UDP headers.
pub const PAYLOAD_BYTES: u64 = MSS_BYTES - 28;
/// UDT's data packet header.
pub const UDT_HEADER_BYTES: u64 = 16;
/// What Pantheon's UDT clients hand `UDT::send` each time (pcc's appclient, pcc_experimental's
/// pccclient).
pub const SEND_CALL_BYTES: i64 = 100_000;
pub const GRANULARITY: f64 = 0.01;
pub const NUMBER_OF_PROBE: usize = 4;
pub const MAX_CONTINUOUS_GUESS: u32 = 5;
/// MIs are numbered in a ring of this size.
pub const MAX_MONITOR_NUMBER: usize = 100;
/// Packets per receiver report.
pub const REPORT_BATCH: usize = 20;
/// UDT's initial RTT (10 × the 10 ms SYN interval), µs.
pub const INITIAL_RTT_US: i64 = 100_000;
/// UDT's ACK timer: one RTT sample per this interval.
pub const ACK_INTERVAL: Duration = Duration::from_millis(10);
/// UDP payload of UDT's ACK2: the 16-byte header and 4 bytes of padding.
pub const ACK2_PAYLOAD_BYTES: u64 = 20;
/// Names a directory where the port writes one line per MI start and end ([`CallTrace`]), in
/// the format of the lines a logging build of the reference prints (experiments/README: "the
/// start-up of pcc-2017, traced"), whose wrapper reads the same variable:
///
/// * `S now_us monitor starting_phase period_us rtt_us` at `onMonitorStart`'s entry (`rtt_us`:
///   UDT's smoothed RTT, which sets the MI's length);
/// * `E now_us end_monitor current total lost secs rtt_us utility current_rate starting_phase
///   period_us` in `onMonitorEnds`, once the utility is known and before the decision;
/// * `A now_us rtt_us` at each full ACK: the RTT it carries, which the sender takes (the
///   binary's receiver writes an `A` line, with the ACK's number before the RTT, when it sends
///   the ACK, to its own file).
///
/// The port's `now_us` counts from its transport's start, the binary's from the epoch.
pub const TRACE_ENV: &str = "PCC_2017_TRACE";
/// The rate before the first MI (cc.h: `current_rate = previous_rate = 1`).
pub const INITIAL_RATE_MBPS: f64 = 1.0;
/// The pacing period before the first MI starts, µs.
pub const INITIAL_PERIOD_US: f64 = 10_000.0;

/// Names the seed the PCC ports give [`Rng`] in place of the clock, as an unsigned 32-bit
/// integer (`srand` takes one). pcc-2017 and pcc_experimental-2018 then draw what modong/pcc's
/// `appclient` and PCC-Uspace's `pccclient` draw when their `srand` is given the same seed (their
/// reference wrappers do that when the variable is set): the same random choices on both sides.
/// vivace-2018's draws are seeded too, but not checked against its binary's.
pub const SRAND_ENV: &str = "PCC_SRAND";

/// The seed [`SRAND_ENV`] names, if set; an error saying what is wrong with it otherwise.
pub fn srand_from_env() -> Result<Option<u32>, String> {
    let Some(value) = std::env::var_os(SRAND_ENV) else { return Ok(None) };
    value.to_str().and_then(|v| v.trim().parse::<u32>().ok()).map(Some).ok_or_else(|| {
        format!("{SRAND_ENV}={value:?} is not a seed for srand: give an integer from 0 to 4294967295, or unset it")
    })
}

/// glibc's `rand()` (`random_r` of the default TYPE_3 state: an additive feedback generator over
/// 31 words, `srand` filling them with `16807·x mod (2^31 − 1)` from the seed and discarding the
/// first 310 outputs), so that a port seeded as its upstream was draws what the upstream drew.
#[derive(Clone, Debug)]
pub struct Rng {
    state: [u32; 31],
    front: usize,
    rear: usize,
}

impl Rng {
    /// `srand(seed)`: glibc takes an `unsigned int`, so only the low 32 bits count.
    pub fn new(seed: u64) -> Self {
        let seed = match seed as u32 {
            0 => 1,
            s => s,
        };
        let mut state = [0u32; 31];
        state[0] = seed;
        // `srandom_r`: the seed as an int32, Schrage's form of 16807·word mod (2^31 − 1) in long
        // arithmetic, stored back into an int32 and made non-negative there.
        let mut word = seed as i32;
        for slot in state.iter_mut().skip(1) {
            let (hi, lo) = (i64::from(word) / 127_773, i64::from(word) % 127_773);
            word = (16_807 * lo - 2_836 * hi) as i32;
            if word < 0 {
                word = word.wrapping_add(2_147_483_647);
            }
            *slot = word as u32;
        }
        let mut rng = Rng { state, front: 3, rear: 0 };
        for _ in 0..310 {
            rng.rand();
        }
        rng
    }

    /// One `rand()`: in 0..=RAND_MAX (2^31 − 1).
    pub fn rand(&mut self) -> u32 {
        self.state[self.front] = self.state[self.front].wrapping_add(self.state[self.rear]);
        let value = self.state[self.front] >> 1;
        self.front = (self.front + 1) % 31;
        self.rear = (self.rear + 1) % 31;
        value
    }

    /// `rand() % n`.
    pub fn below(&mut self, n: u64) -> u64 {
        u64::from(self.rand()) % n
    }

    /// The generator as a UDT sender's law finds it: `CUDT::connect` calls `srand(seed)` and
    /// draws the ISN with one `rand()`, and the law's draws are the ones after that, as upstream's.
    pub fn after_udt_connect(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        rng.rand();
        rng
    }
}

/// A coin toss, `rand() % 2 == 1` upstream: the PCC senders' random probe orders. Tests give
/// the tosses an upstream binary made.
pub trait Coin {
    fn flip(&mut self) -> bool;
}

impl Coin for Rng {
    fn flip(&mut self) -> bool {
        self.below(2) == 1
    }
}

/// UDT's receiver ACK timer as the sender sees it, and the ACK2s the sender owes for it: the
/// receiver checks its timers at every packet it gets (`CRcvQueue::worker`, after
/// `processData` and `processCtrl` alike) and sends a full ACK when its 10 ms ACK timer has run
/// out and data arrived since (`CUDT::checkTimers`, `sendCtrl(2)`); the sender answers each at
/// once with an ACK2 (`CUDT::processCtrl` case 2). Times are the sender's: a receiver event is
/// dated when a packet the receiver sent then would reach the sender, so with one of our ACKs per
/// packet a data packet's arrival is its ACK's, and a full ACK is the first such event
/// [`ACK_INTERVAL`] or more after the last one. An ACK2's arrival is such an event too
/// ([`UdtRtt::on_ack`] dates it), and right after the handshake the timer sends one ACK with no
/// data ([`Ack2Clock::connect`]).
///
/// While a loss holds the receiver's ACK number (the first sequence in its loss list, until
/// the resend arrives), a due timer sends no full ACK unless `RTT + 4·RTTVar` (the receiver's)
/// have passed since the last one (`sendCtrl(2)`: `ack == m_iRcvLastAck`); the timer restarts
/// either way. So a lossy, full queue carries few ACK2s: the reference build's uplink logs of
/// 3x 12/20/100 show 23–165 a second for its 3 flows in phases where the queue overflowed, where
/// the port, sending one every 10 ms, sent about 254. The sender tracks those losses as holes
/// ([`Ack2Clock::open_hole`]); a controller that opens none keeps a full ACK every 10 ms. A
/// packet shorter than UDT's payload size runs the timer out at once
/// ([`Ack2Clock::on_irregular_packet`]).
#[derive(Clone, Debug, Default)]
pub struct Ack2Clock {
    next_full_ack: Duration,
    due: u32,
    /// A data packet arrived since the last full ACK.
    unacked_data: bool,
    /// When the ACK2 answering the ACK sent with no data leaves, if it has not yet.
    connect_ack2_at: Option<Duration>,
    /// When the receiver last sent a full ACK.
    last_full_ack: Duration,
    /// The receiver's losses not yet repaired, by id (opened in order): its ACK number is the
    /// first's.
    holes: BTreeSet<u64>,
    opened: u64,
    /// The first hole when the last full ACK was sent.
    hole_at_last_ack: Option<u64>,
    /// The receiver's `RTT + 4·RTTVar`, after which it repeats an unchanged ACK.
    repeat_after: Duration,
    /// The packet being acknowledged is shorter than UDT's payload size: the receiver's ACK
    /// timer runs out at it.
    irregular: bool,
}

/// How long after the sender's first data packet the ACK the receiver sends with no data
/// reaches it: the receiver accepted the connection one reverse trip before the sender's
/// `connect` returned and the first packet left, and its ACK timer runs out 10 ms after
/// accepting (`CUDT::connect`: `m_ullNextACKTime = now + m_ullSYNInt`) with `m_iRcvLastAck`
/// not yet acknowledged. Measured in the reference build's logs, 16 runs on 28 and 20 ms paths:
/// 8.0–12.5 ms, mean 9.7 (experiments/README, "the start-up of pcc-2017, traced").
pub const CONNECT_ACK_AFTER_FIRST_SEND: Duration = Duration::from_millis(10);

impl Ack2Clock {
    /// A data packet's ACK arrived at `now`; true when it stands for a full ACK (an ACK2 is
    /// then owed).
    pub fn on_ack(&mut self, now: Duration) -> bool {
        let due = now >= self.next_full_ack || std::mem::take(&mut self.irregular);
        if !due || self.ack_held(now) {
            self.unacked_data = true;
            return false;
        }
        self.full_ack(now);
        true
    }

    /// The receiver's timer ran out at `at` while a loss holds the ACK number it last sent:
    /// true (and the timer restarts) unless it is time to repeat that ACK.
    fn ack_held(&mut self, at: Duration) -> bool {
        let first = self.holes.first().copied();
        let held = first.is_some() && first == self.hole_at_last_ack && at < self.last_full_ack + self.repeat_after;
        if held {
            self.next_full_ack = at + ACK_INTERVAL;
        }
        held
    }

    /// The next data packet to arrive is shorter than UDT's payload size (a call's last block,
    /// or its resend): the receiver takes it for the end of a message and its ACK timer runs
    /// out at once (`CUDT::processData`: `packet.getLength() != m_iPayloadSize`), so its
    /// [`Ack2Clock::on_ack`] is a full ACK unless a loss holds it.
    pub fn on_irregular_packet(&mut self) {
        self.irregular = true;
    }

    /// The receiver found a packet missing; returns the hole's id.
    pub fn open_hole(&mut self) -> u64 {
        self.opened += 1;
        self.holes.insert(self.opened);
        self.opened
    }

    /// The resend of hole `id` arrived.
    pub fn close_hole(&mut self, id: u64) {
        self.holes.remove(&id);
    }

    /// The receiver's RTT and RTT variation changed: it repeats an unchanged ACK after
    /// `RTT + 4·RTTVar`.
    pub fn set_repeat_after(&mut self, repeat_after: Duration) {
        self.repeat_after = repeat_after;
    }

    /// An ACK2 reached the receiver at `at`; true when the receiver sent a full ACK then (its
    /// timer had run out and data had arrived since the last): an ACK2 is owed for it too.
    pub fn on_ack2_arrival(&mut self, at: Duration) -> bool {
        if at < self.next_full_ack || !self.unacked_data || self.ack_held(at) {
            return false;
        }
        self.full_ack(at);
        true
    }

    /// The receiver sends a full ACK at `at`: it acknowledges all data so far, restarts the
    /// timer, and the sender owes an ACK2 for it.
    fn full_ack(&mut self, at: Duration) {
        self.next_full_ack = at + ACK_INTERVAL;
        self.due += 1;
        self.unacked_data = false;
        self.last_full_ack = at;
        self.hole_at_last_ack = self.holes.first().copied();
    }

    /// The sender's first data packet left at `first_send`: the receiver's ACK with no data
    /// arrives [`CONNECT_ACK_AFTER_FIRST_SEND`] later, is answered by an ACK2 then, and starts
    /// the ACK timer. Returns when that ACK2 leaves.
    pub fn connect(&mut self, first_send: Duration) -> Duration {
        let at = first_send + CONNECT_ACK_AFTER_FIRST_SEND;
        self.next_full_ack = at + ACK_INTERVAL;
        self.connect_ack2_at = Some(at);
        at
    }

    /// The UDP payload of the next ACK2 owed at `now`, if any.
    pub fn take(&mut self, now: Duration) -> Option<u64> {
        if self.connect_ack2_at.is_some_and(|at| at <= now) {
            self.connect_ack2_at = None;
            self.due += 1;
        }
        (self.due > 0).then(|| {
            self.due -= 1;
            ACK2_PAYLOAD_BYTES
        })
    }
}

/// The losses UDT's receiver holds its ACK number on, as the sender sees them: each loss opens a
/// hole in the [`Ack2Clock`] until a resend of its block arrives. The receiver reports a gap
/// once, at the packet that shows it; a lost resend leaves no new gap, so the sender learns of
/// it only from the receiver's periodic NAK ([`NakTimer`]), which lists the receiver's whole
/// loss list: every hole still open, those whose resend is still on its way too, and the sender
/// resends each of them again (`CUDT::processCtrl` case 3 inserts every listed sequence into its
/// loss list). UDT's sender loss list is in sequence order (`CSndLossList`), so the listed
/// holes, older than any loss not yet resent, go first, oldest first, as in [`SendBuffer`]. A
/// second resend whose hole has closed meanwhile still goes (the sender drops only sequences
/// below the ACK number from its loss list; the port keeps every listed one).
#[derive(Clone, Debug, Default)]
pub struct Repairs {
    /// Holes whose block waits to be resent, oldest first.
    queued: VecDeque<u64>,
    /// Resends on their way: (sequence, hole).
    sent: Vec<(u64, u64)>,
    /// Every hole still open, with its block's size.
    open: BTreeMap<u64, i64>,
    /// The highest sequence acknowledged so far.
    highest_acked: u64,
}

impl Repairs {
    /// The packet `seq`, carrying a block of `bytes`, was declared lost; true when it was a
    /// resend (its block then waits for [`Repairs::on_nak`]).
    pub fn on_loss(&mut self, clock: &mut Ack2Clock, seq: u64, bytes: i64) -> bool {
        match self.sent.iter().position(|&(s, _)| s == seq) {
            Some(i) => {
                self.sent.swap_remove(i);
                true
            }
            None => {
                let hole = clock.open_hole();
                self.open.insert(hole, bytes);
                self.queued.push_back(hole);
                false
            }
        }
    }

    /// The receiver's periodic NAK reached the sender: every open hole not already waiting goes
    /// again (its resend lost or still on its way), before the other losses; returns their
    /// blocks' sizes, oldest first.
    pub fn on_nak(&mut self) -> Vec<i64> {
        let listed: Vec<(u64, i64)> =
            self.open.iter().filter(|(hole, _)| !self.queued.contains(hole)).map(|(&h, &b)| (h, b)).collect();
        for &(hole, _) in listed.iter().rev() {
            self.queued.push_front(hole);
        }
        listed.into_iter().map(|(_, bytes)| bytes).collect()
    }

    /// The packet `seq` left; `resend`: it carried a lost block.
    pub fn on_send(&mut self, seq: u64, resend: bool) {
        if let Some(hole) = resend.then(|| self.queued.pop_front()).flatten() {
            self.sent.push((seq, hole));
        }
    }

    /// The packet `seq` was acknowledged: a resend closes its hole, and so does one the
    /// transport would already have declared lost had it not arrived (its ACK was lost).
    pub fn on_ack(&mut self, clock: &mut Ack2Clock, seq: u64) {
        let settled = self.highest_acked;
        self.sent.retain(|&(s, hole)| {
            let arrived = s == seq || s + NAK_AFTER <= settled;
            if arrived {
                clock.close_hole(hole);
                self.open.remove(&hole);
            }
            !arrived
        });
        self.highest_acked = self.highest_acked.max(seq);
    }
}

/// The receiver's periodic NAK (`CUDT::checkTimers`): when its NAK timer has run out with
/// losses outstanding and the first of them is the one it found there the last time, it sends
/// its whole loss list again (`sendCtrl(3)`); the timer restarts either way. Every NAK sets the
/// interval to 4 × the receiver's RTT (it starts at 250 ms). The port checks the timer at each
/// data packet's ACK, as the receiver does at each packet.
#[derive(Clone, Debug)]
pub struct NakTimer {
    next_at: Duration,
    interval: Duration,
    /// The first hole at the last check.
    head_at_last: Option<u64>,
}

impl Default for NakTimer {
    fn default() -> Self {
        Self { next_at: Duration::MAX, interval: Self::MIN_INTERVAL, head_at_last: None }
    }
}

impl NakTimer {
    /// `m_ullMinNakInt`: the first interval.
    const MIN_INTERVAL: Duration = Duration::from_millis(250);

    /// The receiver accepted the connection at `at`.
    pub fn connect(&mut self, at: Duration) {
        self.next_at = at + self.interval;
    }

    /// The receiver sent a NAK; its RTT estimate is `rtt_us`.
    pub fn on_nak_sent(&mut self, rtt_us: i64) {
        self.interval = Duration::from_micros(4 * rtt_us.max(0) as u64);
    }

    /// A packet reached the receiver at `now`; true when its timer sent a periodic NAK.
    pub fn check(&mut self, clock: &Ack2Clock, now: Duration) -> bool {
        let head = clock.holes.first().copied();
        if head.is_none() || now <= self.next_at {
            return false;
        }
        let nak = head == self.head_at_last;
        self.head_at_last = head;
        self.next_at = now + self.interval;
        nak
    }
}

/// The sizes of the packets UDT's send buffer hands out (`CSndBuffer::addBuffer`): the
/// application's stream of `call_bytes` `UDT::send`s cut into blocks of `block_bytes` (UDT's
/// payload size), each call's last block short, and blocks declared lost resent before any
/// new one. Pantheon's UDT clients (pcc's appclient, pcc_experimental's pccclient) send
/// 100 000 bytes a call.
#[derive(Clone, Debug)]
pub struct SendBuffer {
    block_bytes: i64,
    call_bytes: i64,
    /// New blocks sent so far.
    blocks_sent: u64,
    /// The sizes of blocks declared lost and not yet resent, oldest first.
    resend: VecDeque<i64>,
}

impl SendBuffer {
    pub fn new(block_bytes: i64, call_bytes: i64) -> Self {
        assert!(
            0 < block_bytes && block_bytes <= call_bytes,
            "blocks of {block_bytes} bytes from calls of {call_bytes}"
        );
        Self { block_bytes, call_bytes, blocks_sent: 0, resend: VecDeque::new() }
    }

    /// Blocks per `UDT::send`, the last one short.
    pub fn blocks_per_call(&self) -> u64 {
        (self.call_bytes as u64).div_ceil(self.block_bytes as u64)
    }

    /// The last block of each `UDT::send`.
    pub fn tail_bytes(&self) -> i64 {
        self.call_bytes - (self.blocks_per_call() as i64 - 1) * self.block_bytes
    }

    /// The next packet's block is shorter than a full one.
    pub fn next_is_short(&self) -> bool {
        self.next_block_bytes() < self.block_bytes
    }

    /// UDT payload of the next packet: the oldest lost block's, else the stream's next block.
    pub fn next_block_bytes(&self) -> i64 {
        let per_call = self.blocks_per_call();
        match self.resend.front() {
            Some(&bytes) => bytes,
            None if self.blocks_sent % per_call == per_call - 1 => self.tail_bytes(),
            None => self.block_bytes,
        }
    }

    /// The next block left; returns its bytes.
    pub fn on_send(&mut self) -> i64 {
        let bytes = self.next_block_bytes();
        if self.resend.pop_front().is_none() {
            self.blocks_sent += 1;
        }
        bytes
    }

    /// A block of `bytes` was declared lost: it goes again before any new one.
    pub fn on_lost(&mut self, bytes: i64) {
        self.resend.push_back(bytes);
    }

    /// The receiver's periodic NAK listed resent blocks of these sizes again, oldest first: as
    /// older sequences in UDT's loss list than any lost block not yet resent, they go before
    /// them, in that order.
    pub fn on_listed_again(&mut self, sizes: &[i64]) {
        for &bytes in sizes.iter().rev() {
            self.resend.push_front(bytes);
        }
    }
}

/// UDT's smoothed RTT as the sender knows it (`m_iRTT`, copied from each full ACK's RTT field
/// in the sender's `CUDT::processCtrl` case 2): the receiver's 7/8 EWMA (from
/// [`INITIAL_RTT_US`]) of ACK→ACK2 round trips, one per ACK2 that reaches it (the receiver's
/// case 6). So the sender learns a round trip only about a round trip after it ended: the
/// ACK2 must cross the data path, and the estimate come back in the next full ACK.
///
/// The port sees neither side's clock: an ACK2 sent at `t` reaches the receiver just ahead of
/// the first data packet sent at or after `t` (the same queue), so the sample is dated by that
/// packet's ACK. The ACK2 arrived that packet's lead, `sent_at − t`, before it did, but not
/// before the packet ahead of it (the previous ACK) and, on an idle path, no later than the
/// path's minimum RTT after it left: a 52-byte ACK2 does not spend the data packet's own time
/// on the link, which at 2 Mbit/s is 5.9 ms. The sample is that arrival less `t`. There the
/// receiver may send a full ACK at once, carrying the new estimate
/// ([`Ack2Clock::on_ack2_arrival`]); otherwise the sender copies it at the next full ACK.
#[derive(Clone, Debug)]
pub struct UdtRtt {
    /// What the sender uses, µs.
    sender_us: i64,
    /// The receiver's estimate, µs.
    receiver_us: i64,
    /// The receiver's RTT variation (`m_iRTTVar`: half the initial RTT, then a 3/4 EWMA of
    /// each sample's distance from the estimate), µs.
    receiver_var_us: i64,
    /// Send times of the ACK2s still on their way to the receiver.
    ack2_in_flight: std::collections::VecDeque<Duration>,
    /// When the last data packet's ACK arrived.
    last_ack: Duration,
    /// The lowest data packet RTT seen: the path's round trip with an empty queue.
    min_rtt: Duration,
}

impl Default for UdtRtt {
    fn default() -> Self {
        Self {
            sender_us: INITIAL_RTT_US,
            receiver_us: INITIAL_RTT_US,
            receiver_var_us: INITIAL_RTT_US >> 1,
            ack2_in_flight: Default::default(),
            last_ack: Duration::ZERO,
            min_rtt: Duration::MAX,
        }
    }
}

impl UdtRtt {
    /// UDT's ACK window (`CACKWindow`, 1024 entries): an ACK2 whose ACK fell out of it gives
    /// no sample.
    const ACK_WINDOW: usize = 1024;

    /// The sender's estimate, µs.
    pub fn us(&self) -> i64 {
        self.sender_us
    }

    /// The ACK of the packet sent at `sent_at` arrived, `rtt` after it left: the receiver
    /// takes the samples of the ACK2s that arrived ahead of that packet, and `clock` says which
    /// of its events sent a full ACK (the sender copies the receiver's estimate from each and
    /// answers with an ACK2). Returns the full ACKs.
    pub fn on_ack(&mut self, clock: &mut Ack2Clock, now: Duration, sent_at: Duration, rtt: Duration) -> u32 {
        let mut full_acks = 0;
        let mut answered = Vec::new();
        clock.set_repeat_after(self.receiver_repeat_after());
        self.min_rtt = self.min_rtt.min(rtt);
        while let Some(&left) = self.ack2_in_flight.front().filter(|&&t| t <= sent_at) {
            self.ack2_in_flight.pop_front();
            let arrived = (now - (sent_at - left)).min(left + self.min_rtt).max(self.last_ack);
            let sample = (arrived - left).as_micros() as i64;
            self.receiver_var_us = (self.receiver_var_us * 3 + (sample - self.receiver_us).abs()) >> 2;
            self.receiver_us = (self.receiver_us * 7 + sample) >> 3;
            clock.set_repeat_after(self.receiver_repeat_after());
            if clock.on_ack2_arrival(arrived) {
                self.sender_us = self.receiver_us;
                answered.push(arrived);
                full_acks += 1;
            }
        }
        if clock.on_ack(now) {
            self.sender_us = self.receiver_us;
            answered.push(now);
            full_acks += 1;
        }
        self.last_ack = now;
        for left in answered {
            self.send_ack2(left);
        }
        full_acks
    }

    /// How long the receiver waits to repeat an unchanged ACK: `RTT + 4·RTTVar`.
    fn receiver_repeat_after(&self) -> Duration {
        Duration::from_micros((self.receiver_us + 4 * self.receiver_var_us).max(0) as u64)
    }

    /// An ACK2 leaves at `left`.
    pub fn send_ack2(&mut self, left: Duration) {
        self.ack2_in_flight.push_back(left);
        if self.ack2_in_flight.len() > Self::ACK_WINDOW {
            self.ack2_in_flight.pop_front();
        }
    }
}

/// Which MI each packet was sent in: (first sequence number, MI) of the most recent `cap`
/// MIs, oldest first.
#[derive(Clone, Debug)]
pub struct MiRanges<T> {
    ranges: std::collections::VecDeque<(u64, T)>,
    cap: usize,
}

impl<T: Copy> MiRanges<T> {
    pub fn new(cap: usize) -> Self {
        Self { ranges: std::collections::VecDeque::new(), cap }
    }

    /// MI `mi` starts with packet `first_seq`.
    pub fn push(&mut self, first_seq: u64, mi: T) {
        self.ranges.push_back((first_seq, mi));
        while self.ranges.len() > self.cap {
            self.ranges.pop_front();
        }
    }

    /// The MI of packet `seq` and `seq`'s place in it (0 for its first packet).
    pub fn of(&self, seq: u64) -> Option<(T, u64)> {
        let idx = self.ranges.partition_point(|&(first, _)| first <= seq);
        (idx > 0).then(|| {
            let (first, mi) = self.ranges[idx - 1];
            (mi, seq - first)
        })
    }
}

/// The logistic function σ(x) = 1/(1 + e^−x).
fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Allegro's utility of one MI (cc.h:303): `total` packets, `lost` of them lost, `secs` long,
/// `rtt_us` its mean RTT and `prev_rtt_us` that of the MI before.
pub fn utility(total: f64, lost: f64, secs: f64, rtt_us: f64, prev_rtt_us: f64) -> f64 {
    let loss_penalty = 1.0 - sigmoid(100.0 * (lost / total - 0.05));
    let rtt_penalty = 1.0 - sigmoid(10.0 * (1.0 - prev_rtt_us / rtt_us));
    ((total - lost) / secs * loss_penalty * rtt_penalty - lost / secs) / rtt_us * 1000.0
}

/// Allegro's decision logic (`BBCC`), fed MI starts and ends; rates in Mbit/s.
#[derive(Clone, Debug)]
pub struct Allegro {
    pub starting_phase: bool,
    start_rate: [f64; MAX_MONITOR_NUMBER],
    start_previous_monitor: i32,
    start_previous_utility: f64,
    previous_rtt: f64,
    make_guess: bool,
    guess_time: usize,
    continuous_guess_count: u32,
    recording_guess_result: bool,
    recorded_number: usize,
    rate_bucket: [f64; NUMBER_OF_PROBE],
    monitor_bucket: [i32; NUMBER_OF_PROBE],
    utility_bucket: [f64; NUMBER_OF_PROBE],
    moving_phase_initial: bool,
    moving_phase: bool,
    target_monitor: i32,
    change_direction: f64,
    change_intense: u32,
    pub current_rate: f64,
    previous_rate: f64,
    previous_utility: f64,
    /// The rate the sender paces at (what `setRate` was last given), Mbit/s.
    pub send_rate: Option<f64>,
    /// The utility of the MI that ended last.
    pub last_utility: f64,
}

impl Default for Allegro {
    fn default() -> Self {
        Self::new()
    }
}

impl Allegro {
    pub fn new() -> Self {
        Self {
            starting_phase: true,
            start_rate: [0.0; MAX_MONITOR_NUMBER],
            start_previous_monitor: -1,
            start_previous_utility: -10_000.0,
            previous_rtt: 0.0,
            make_guess: false,
            guess_time: 0,
            continuous_guess_count: 0,
            recording_guess_result: false,
            recorded_number: 0,
            rate_bucket: [0.0; NUMBER_OF_PROBE],
            monitor_bucket: [0; NUMBER_OF_PROBE],
            utility_bucket: [0.0; NUMBER_OF_PROBE],
            moving_phase_initial: false,
            moving_phase: false,
            target_monitor: 0,
            change_direction: 0.0,
            change_intense: 1,
            current_rate: INITIAL_RATE_MBPS,
            previous_rate: INITIAL_RATE_MBPS,
            previous_utility: 0.0,
            send_rate: None,
            last_utility: 0.0,
        }
    }

    fn set_rate(&mut self, mbps: f64) {
        self.send_rate = Some(mbps);
    }

    /// `onMonitorStart` (cc.h:200-285): MI `monitor` begins.
    pub fn on_monitor_start(&mut self, monitor: i32, rng: &mut Rng) {
        if self.starting_phase {
            let rate = self.previous_rate * 2.0;
            self.start_rate[monitor as usize] = rate;
            self.previous_rate = rate;
            self.set_rate(rate);
            return;
        }
        if self.make_guess {
            if self.guess_time == 0 && self.continuous_guess_count == MAX_CONTINUOUS_GUESS {
                self.continuous_guess_count = 0;
            }
            if self.guess_time == 0 {
                self.recording_guess_result = true;
                self.continuous_guess_count += 1;
                let step = self.continuous_guess_count as f64 * GRANULARITY * self.current_rate;
                for pair in (0..NUMBER_OF_PROBE).step_by(2) {
                    let dir = (rng.below(2) * 2) as f64 - 1.0;
                    self.rate_bucket[pair] = self.current_rate + dir * step;
                    self.rate_bucket[pair + 1] = self.current_rate - dir * step;
                }
                for (i, m) in self.monitor_bucket.iter_mut().enumerate() {
                    *m = (monitor + i as i32) % MAX_MONITOR_NUMBER as i32;
                }
            }
            self.set_rate(self.rate_bucket[self.guess_time]);
            self.guess_time += 1;
            if self.guess_time == NUMBER_OF_PROBE {
                self.make_guess = false;
                self.guess_time = 0;
            }
        }
        // (cc.h:260-283, the `continous_send` branch, never runs: nothing sets it.)
    }

    /// Back to guessing at `rate` after the rate outran what the MI sent (cc.h:436-456).
    fn resync(&mut self, rate: f64) {
        self.current_rate = rate;
        self.make_guess = true;
        self.moving_phase = false;
        self.moving_phase_initial = false;
        self.change_direction = 0.0;
        self.change_intense = 1;
        self.guess_time = 0;
        self.continuous_guess_count = 0;
        self.recording_guess_result = false;
        self.recorded_number = 0;
        self.set_rate(rate);
    }

    /// `onMonitorEnds` (cc.h:287-526): MI `end_monitor` ended while `current` is the
    /// newest MI started.
    pub fn on_monitor_end(&mut self, total: f64, lost: f64, secs: f64, current: i32, end_monitor: i32, rtt_us: f64) {
        let t = total;
        let l = lost.max(0.0);
        if self.previous_rtt == 0.0 {
            self.previous_rtt = rtt_us;
        }
        let mut u = utility(t, l, secs, rtt_us, self.previous_rtt);
        self.previous_rtt = rtt_us;
        if end_monitor == 0 && self.starting_phase {
            u /= 2.0;
        }
        self.last_utility = u;

        if self.starting_phase {
            if end_monitor - 1 > self.start_previous_monitor {
                // An MI ended before the one after the best: leave start-up at the best.
                self.starting_phase = false;
                self.make_guess = true;
                let best = self.start_previous_monitor.max(0) as usize;
                let rate = self.start_rate[best];
                self.set_rate(rate);
                self.current_rate = rate;
                return;
            }
            if self.start_previous_utility < u {
                self.start_previous_utility = u;
                self.start_previous_monitor = end_monitor;
                return;
            }
            self.starting_phase = false;
            self.make_guess = true;
            // start_previous_monitor is -1 only before any MI ended in order; upstream then
            // reads start_rate_array[-1] (undefined); the first slot stands in.
            let best = self.start_previous_monitor.max(0) as usize;
            let rate = self.start_rate[best];
            self.set_rate(rate);
            self.current_rate = rate;
            self.previous_rate = rate;
            return;
        }

        if self.recording_guess_result {
            for (i, &m) in self.monitor_bucket.iter().enumerate() {
                if end_monitor == m {
                    self.recorded_number += 1;
                    self.utility_bucket[i] = u;
                }
            }
            if self.recorded_number == NUMBER_OF_PROBE {
                self.recorded_number = 0;
                let mut decision = 0i32;
                for pair in (0..NUMBER_OF_PROBE).step_by(2) {
                    let (ua, ub) = (self.utility_bucket[pair], self.utility_bucket[pair + 1]);
                    let (ra, rb) = (self.rate_bucket[pair], self.rate_bucket[pair + 1]);
                    if (ua > ub && ra > rb) || (ua < ub && ra < rb) {
                        decision += 1;
                    } else {
                        decision -= 1;
                    }
                }
                self.recording_guess_result = false;
                if decision == 0 {
                    self.make_guess = true;
                } else {
                    self.change_direction = if decision > 0 { 1.0 } else { -1.0 };
                    self.moving_phase_initial = true;
                    self.change_intense = 1;
                    let amount = (self.continuous_guess_count / 2 + 1) as f64
                        * self.change_intense as f64
                        * self.change_direction
                        * GRANULARITY
                        * self.current_rate;
                    self.previous_utility = 0.0;
                    self.continuous_guess_count = 0;
                    self.previous_rate = self.current_rate;
                    self.current_rate += amount;
                    self.target_monitor = (current + 1) % MAX_MONITOR_NUMBER as i32;
                    self.set_rate(self.current_rate);
                }
            }
        }

        let sent_mbps = t * 12.0 / secs / 1000.0;
        if self.moving_phase_initial && end_monitor == self.target_monitor {
            if self.current_rate > sent_mbps + 30.0 && self.current_rate > 200.0 {
                self.resync(sent_mbps);
                return;
            }
            self.target_monitor = (current + 1) % MAX_MONITOR_NUMBER as i32;
            self.previous_rate = self.current_rate;
            self.previous_utility = u;
            self.change_intense += 1;
            let amount = self.change_intense as f64 * GRANULARITY * self.current_rate * self.change_direction;
            self.current_rate += amount;
            self.set_rate(self.current_rate);
            self.moving_phase_initial = false;
            self.moving_phase = true;
        }

        if self.moving_phase && end_monitor == self.target_monitor {
            if self.current_rate > sent_mbps + 30.0 && self.current_rate > 200.0 {
                self.resync(sent_mbps);
                return;
            }
            let amount_of = |s: &Self| s.change_intense as f64 * GRANULARITY * s.current_rate * s.change_direction;
            if u > self.previous_utility {
                self.target_monitor = (current + 1) % MAX_MONITOR_NUMBER as i32;
                self.change_intense += 1;
                self.previous_utility = u;
                self.previous_rate = self.current_rate;
                self.current_rate += amount_of(self);
            } else {
                self.moving_phase = false;
                self.make_guess = true;
                self.previous_utility = u;
                self.previous_rate = self.current_rate;
                self.current_rate -= amount_of(self);
            }
            self.set_rate(self.current_rate);
        }
    }
}

/// One MI's bookkeeping (core.h's per-monitor arrays).
#[derive(Clone, Copy, Debug, Default)]
struct Monitor {
    /// 0 unused, 1 sending, 2 all sent, 3 ended.
    state: u8,
    total: u32,
    /// Packets of it reported by the receiver.
    reported: u32,
    start: Duration,
    end_transmission: Duration,
    rtt_sum_us: f64,
    rtt_count: u32,
}

/// The UDT sender's monitor machinery plus Allegro.
#[derive(Debug)]
pub struct Pcc2017 {
    law: Allegro,
    rng: Rng,
    period_us: f64,
    monitors: [Monitor; MAX_MONITOR_NUMBER],
    current_monitor: i32,
    monitor_ttl: u32,
    /// MIs all sent and not yet ended.
    left_monitor: u32,
    ranges: MiRanges<i32>,
    /// MI numbers of the packets that arrived since the last report.
    batch: Vec<i32>,
    rtt: UdtRtt,
    ack2: Ack2Clock,
    repairs: Repairs,
    nak: NakTimer,
    ended: u64,
    blocks: SendBuffer,
    /// Sequence numbers of the short packets not yet acknowledged, oldest first.
    short_sent: VecDeque<u64>,
    trace: CallTrace,
}

impl Pcc2017 {
    /// `mss` is ignored: upstream's packets are 1464-byte IP packets ([`PAYLOAD_BYTES`]).
    pub fn new(_mss: u64) -> Self {
        Self::with_seed(0x5eed_2017)
    }

    /// `seed` is `srand`'s in `CUDT::connect` (the law draws each MI's `rand_dir`s and
    /// `rand_factor` after the ISN's draw).
    pub fn with_seed(seed: u64) -> Self {
        Self {
            law: Allegro::new(),
            rng: Rng::after_udt_connect(seed),
            period_us: INITIAL_PERIOD_US,
            monitors: [Monitor::default(); MAX_MONITOR_NUMBER],
            current_monitor: -1,
            monitor_ttl: 0,
            left_monitor: 0,
            ranges: MiRanges::new(MAX_MONITOR_NUMBER),
            batch: Vec::with_capacity(REPORT_BATCH),
            rtt: UdtRtt::default(),
            ack2: Ack2Clock::default(),
            repairs: Repairs::default(),
            nak: NakTimer::default(),
            ended: 0,
            blocks: SendBuffer::new((PAYLOAD_BYTES - UDT_HEADER_BYTES) as i64, SEND_CALL_BYTES),
            short_sent: VecDeque::new(),
            trace: CallTrace::new(TRACE_ENV, 0),
        }
    }

    pub fn law(&self) -> &Allegro {
        &self.law
    }

    /// The pacing rate, Mbit/s of 1464-byte packets.
    pub fn rate_mbps(&self) -> f64 {
        MSS_BYTES as f64 * 8.0 / self.period_us
    }

    /// MIs ended so far.
    pub fn monitors_ended(&self) -> u64 {
        self.ended
    }

    fn apply_rate(&mut self) {
        if let Some(mbps) = self.law.send_rate {
            self.period_us = MSS_BYTES as f64 * 8.0 / mbps;
        }
    }

    /// `CUDT::start_monitor`: the next MI begins at `now` with the next packet.
    fn start_monitor(&mut self, now: Duration, next_seq: u64) {
        self.current_monitor = (self.current_monitor + 1) % MAX_MONITOR_NUMBER as i32;
        let id = self.current_monitor;
        let (starting, period, rtt) = (self.law.starting_phase as u8, self.period_us, self.rtt.us());
        self.trace.write_line(|| format!("S {} {id} {starting} {period} {rtt}", now.as_micros()));
        self.law.on_monitor_start(id, &mut self.rng);
        self.apply_rate();
        let rand_factor = self.rng.below(3) as f64 / 10.0;
        let rtt = self.rtt.us() as f64;
        let length = if rtt * 1.1 / self.period_us > 10.0 {
            (rtt * (1.5 + rand_factor) / self.period_us) as u32
        } else {
            (5000.0 / self.period_us).max(10.0) as u32
        };
        self.monitor_ttl = length;
        self.monitors[id as usize] = Monitor {
            state: 1,
            total: length,
            reported: 0,
            start: now,
            end_transmission: now,
            rtt_sum_us: 0.0,
            rtt_count: 0,
        };
        self.ranges.push(next_seq, id);
    }

    /// A receiver report of the packets in `batch`, the last one sent at `last_sent`.
    fn on_report(&mut self, now: Duration, last_sent: Duration) {
        let Some(&last) = self.batch.last() else { return };
        let mon = last as usize;
        self.monitors[mon].rtt_count += 1;
        self.monitors[mon].rtt_sum_us += now.saturating_sub(last_sent).as_micros() as f64;
        let batch = std::mem::take(&mut self.batch);
        for &m in &batch {
            self.monitors[m as usize].reported += 1;
            if self.left_monitor == 0 {
                continue;
            }
            let ring = MAX_MONITOR_NUMBER as i32;
            let mut tmp = (m + ring - 1) % ring;
            while tmp != self.current_monitor {
                let mi = self.monitors[tmp as usize];
                if mi.state == 2 {
                    self.monitors[tmp as usize].state = 3;
                    self.left_monitor -= 1;
                    self.ended += 1;
                    let secs = mi.end_transmission.saturating_sub(mi.start).as_secs_f64();
                    let rtt = self.monitors[mon].rtt_sum_us / self.monitors[mon].rtt_count as f64;
                    let (rate, starting, period) =
                        (self.law.current_rate, self.law.starting_phase as u8, self.period_us);
                    let lost = mi.total as i64 - mi.reported as i64;
                    self.law.on_monitor_end(mi.total as f64, lost as f64, secs, self.current_monitor, tmp, rtt);
                    let (current, u) = (self.current_monitor, self.law.last_utility);
                    self.trace.write_line(|| {
                        format!(
                            "E {} {tmp} {current} {} {lost} {secs} {rtt} {u} {rate} {starting} {period}",
                            now.as_micros(),
                            mi.total
                        )
                    });
                    self.apply_rate();
                    if self.left_monitor == 0 {
                        break;
                    }
                }
                tmp = (tmp + ring - 1) % ring;
            }
        }
        self.batch = batch;
        self.batch.clear();
    }
}

impl Controller for Pcc2017 {
    fn name(&self) -> &'static str {
        "pcc-2017"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        // A resend that arrives moves the receiver's ACK number on.
        self.repairs.on_ack(&mut self.ack2, ack.seq);
        while self.short_sent.front().is_some_and(|&s| s < ack.seq) {
            self.short_sent.pop_front();
        }
        if self.short_sent.front() == Some(&ack.seq) {
            self.short_sent.pop_front();
            self.ack2.on_irregular_packet();
        }
        // The receiver's NAK timer: every resent hole still open goes again once the NAK lists it.
        if self.nak.check(&self.ack2, ack.now) {
            self.nak.on_nak_sent(self.rtt.receiver_us);
            self.blocks.on_listed_again(&self.repairs.on_nak());
        }
        // UDT's ACK timer: one full ACK per 10 ms (fewer while a loss holds the ACK number),
        // answered with an ACK2, whose arrival gives the receiver the RTT sample for its 7/8 EWMA.
        if self.rtt.on_ack(&mut self.ack2, ack.now, ack.sent_at, ack.rtt) > 0 {
            let (now, rtt) = (ack.now.as_micros(), self.rtt.us());
            self.trace.write_line(|| format!("A {now} {rtt}"));
        }
        let Some((m, _)) = self.ranges.of(ack.seq) else { return };
        self.batch.push(m);
        if self.batch.len() == REPORT_BATCH {
            self.on_report(ack.now, ack.sent_at);
        }
    }

    /// UDT resends the lost block next, at its own size (the MIs count it as a new packet).
    fn on_loss(&mut self, loss: &LossEvent) {
        let bytes = loss.bytes.saturating_sub(UDT_HEADER_BYTES) as i64;
        if !self.repairs.on_loss(&mut self.ack2, loss.seq, bytes) {
            // The receiver's NAK at the gap restarts its NAK interval.
            self.nak.on_nak_sent(self.rtt.receiver_us);
            self.blocks.on_lost(bytes);
        }
    }

    fn on_send(&mut self, now: Duration, seq: u64) {
        if self.current_monitor < 0 {
            // The first packet: the receiver's ACK with no data is on its way.
            let left = self.ack2.connect(now);
            self.rtt.send_ack2(left);
            self.nak.connect(now);
        }
        self.repairs.on_send(seq, !self.blocks.resend.is_empty());
        if self.blocks.next_is_short() {
            self.short_sent.push_back(seq);
        }
        self.blocks.on_send();
        if self.monitor_ttl == 0 {
            self.start_monitor(now, seq);
        }
        self.monitor_ttl -= 1;
        if self.monitor_ttl == 0 {
            let id = self.current_monitor as usize;
            self.monitors[id].end_transmission = now;
            self.monitors[id].state = 2;
            self.left_monitor += 1;
            self.start_monitor(now, seq + 1);
        }
    }

    fn cwnd(&self) -> u64 {
        // UDT's window of 100 000 packets never binds.
        u64::MAX / 4
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        PAYLOAD_BYTES as f64 / (self.period_us * 1e-6)
    }

    /// UDT's handshake: a flow that cannot connect in 3 s exits, as the upstream's did.
    fn connect_law(&self) -> Option<ConnectLaw> {
        Some(UDT_CONNECT)
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(PAYLOAD_BYTES)
    }

    fn next_payload_bytes(&self) -> Option<u64> {
        Some(self.blocks.next_block_bytes() as u64 + UDT_HEADER_BYTES)
    }

    fn pacer(&self) -> Pacer {
        UDT_PACER
    }

    fn loss_rule(&self) -> LossRule {
        LossRule::Reorder(NAK_AFTER)
    }

    fn take_control_datagram(&mut self, now: Duration) -> Option<u64> {
        self.ack2.take(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{run, Link};

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Each seed's first six `rand()`s after `srand(seed)`, from glibc 2.36 (Debian 12's libc.so.6
    /// through Python's ctypes): 0 acts as 1, and a seed past 2^31 is negative as srandom_r's int32.
    #[test]
    fn the_generator_draws_what_glibcs_rand_draws() {
        let glibc: [(u64, [u32; 6]); 5] = [
            (0, [1804289383, 846930886, 1681692777, 1714636915, 1957747793, 424238335]),
            (1, [1804289383, 846930886, 1681692777, 1714636915, 1957747793, 424238335]),
            (12345, [383100999, 858300821, 357768173, 455528251, 133005921, 116285904]),
            (3_000_000_000, [2058147116, 854483408, 922419988, 286396165, 2068523933, 1172167191]),
            (4_294_967_295, [254925627, 1205188300, 366127624, 1401405153, 76053476, 1604170158]),
        ];
        for (seed, draws) in glibc {
            let mut rng = Rng::new(seed);
            assert_eq!(draws.map(|_| rng.rand()), draws, "srand({seed})");
        }
        // Only the low 32 bits of a seed reach srand's unsigned int.
        assert_eq!(Rng::new((1 << 32) + 12345).rand(), 383100999);
    }

    /// modong/pcc 1afc958's appclient (sender/src's UDT 4 and app/cc.h), `srand` given 12345 by
    /// its reference wrapper: its `rand()`s were the socket id's, the ISN's, then these, read by a
    /// return uprobe on libc's `rand` (experiments/README: "one seed, both sides").
    #[test]
    fn seeded_as_the_binary_the_port_draws_what_appclient_drew() {
        let binary = [858300821, 357768173, 455528251, 133005921, 116285904, 591987137];
        let mut p = Pcc2017::with_seed(12345);
        assert_eq!(binary.map(|_| p.rng.rand()), binary);
    }

    #[test]
    fn utility_matches_hand_computed_values() {
        // No loss, no RTT change: (t/T · (1 - σ(-5)) · (1 - σ(0))) / rtt · 1000.
        // t = 100, T = 0.1 s, rtt = 50 000 µs: 1000 · 0.993307 · 0.5 / 50 000 · 1000 = 9.933071.
        let u = utility(100.0, 0.0, 0.1, 50_000.0, 50_000.0);
        assert!((u - 9.933_071).abs() < 1e-5, "{u}");
        // 5 % loss: σ(0) = 0.5 on the loss term; (95/0.1 · 0.5 · 0.5 - 5/0.1)/50 000 · 1000
        // = (237.5 - 50)/50 = 3.75.
        let u = utility(100.0, 5.0, 0.1, 50_000.0, 50_000.0);
        assert!((u - 3.75).abs() < 1e-9, "{u}");
        // RTT grew 10 %: 1 - σ(10 · (1 - 1/1.1)) = 1 - σ(0.909091) = 0.287186;
        // 1000 · 0.993307 · 0.287186 / 55 000 · 1000 = 5.186615.
        let u = utility(100.0, 0.0, 0.1, 55_000.0, 50_000.0);
        assert!((u - 5.186_615).abs() < 1e-5, "{u}");
        // 20 % loss all but zeroes the first term: (80/0.1 · 3.06e-7 · 0.5 - 200)/50 000 · 1000.
        let u = utility(100.0, 20.0, 0.1, 50_000.0, 50_000.0);
        assert!((u - (-4.0 + 800.0 * sigmoid(-15.0) * 0.5 / 50.0)).abs() < 1e-9, "{u}");
    }

    #[test]
    fn pacing_period_is_the_mss_over_the_rate() {
        let mut p = Pcc2017::with_seed(1);
        assert_eq!(p.payload_bytes(), Some(1436));
        // The first packet starts MI 0, which doubles the rate from 1 to 2 Mbit/s.
        p.on_send(ms(0), 0);
        assert_eq!(p.law().send_rate, Some(2.0));
        assert!((p.period_us - 5856.0).abs() < 1e-9);
        assert!((p.pacing_rate(ms(0)) - 1436.0 / 5856e-6).abs() < 1e-6);
        // 100 ms initial RTT: 100 000 · 1.1 / 5856 > 10, so 100 000 · (1.5..1.7) / 5856 packets.
        let len = p.monitors[0].total;
        assert!([25, 27, 29].contains(&len), "{len}");
    }

    #[test]
    fn each_appclient_send_ends_in_a_644_byte_packet_and_a_lost_one_goes_again_at_its_size() {
        let mut p = Pcc2017::with_seed(1);
        let sizes: Vec<u64> = (0..72)
            .map(|seq| {
                let b = p.next_payload_bytes().unwrap();
                p.on_send(ms(seq), seq);
                b
            })
            .collect();
        // 70 blocks of 1420 bytes and one of 600, each with UDT's 16-byte header; 28 more on
        // the wire.
        assert!(sizes.iter().enumerate().all(|(i, &b)| b == if i == 70 { 616 } else { 1436 }), "{sizes:?}");
        p.on_loss(&LossEvent { now: ms(100), seq: 70, sent_at: ms(70), bytes: 616, bytes_in_flight: 0 });
        assert_eq!(p.next_payload_bytes(), Some(616));
        p.on_send(ms(100), 72);
        assert_eq!(p.next_payload_bytes(), Some(1436));
    }

    #[test]
    fn the_sender_learns_a_round_trip_a_round_trip_late() {
        let mut rtt = UdtRtt::default();
        let mut clock = Ack2Clock::default();
        // A full ACK at 300 ms (its packet left at 0): the receiver still has its initial
        // 100 ms, and the ACK2 answering it leaves now.
        assert_eq!(rtt.on_ack(&mut clock, ms(300), ms(0), ms(300)), 1);
        assert_eq!(rtt.us(), 100_000);
        // Packets sent before the ACK2 left bring no sample (and are not yet acknowledged).
        assert_eq!(rtt.on_ack(&mut clock, ms(305), ms(5), ms(300)), 0);
        assert_eq!(rtt.receiver_us, 100_000);
        // The first packet sent after it (at 302) carries it to the receiver: a 300 ms sample
        // there. The ACK2 arrived 2 ms ahead of that packet, when the ACK timer (due at 310) had
        // run out and data was unacknowledged: the receiver sent a full ACK at once, with the
        // new estimate; the packet's own ACK, 2 ms later, is not a full one.
        assert_eq!(rtt.on_ack(&mut clock, ms(602), ms(302), ms(300)), 1);
        assert_eq!(rtt.receiver_us, 125_000);
        assert_eq!(rtt.us(), 125_000);
        assert_eq!((clock.take(ms(602)), clock.take(ms(602)), clock.take(ms(602))), (Some(20), Some(20), None));
    }

    #[test]
    fn an_ack2s_sample_is_its_own_delay_not_the_data_packets_behind_it() {
        // The first packet's round trip, 20 ms on an idle path, is the path's minimum; its ACK is
        // a full one, answered by an ACK2 leaving at 20.
        let mut rtt = UdtRtt::default();
        let mut clock = Ack2Clock::default();
        assert_eq!(rtt.on_ack(&mut clock, ms(20), ms(0), ms(20)), 1);
        // The packet sent at 26 carries the ACK2 and comes back at 56, 30 ms: it waited behind
        // a backlog in which the 52-byte ACK2 spent no packet time. The ACK2 reached the
        // receiver no later than the path's minimum after it left: a 20 ms sample.
        rtt.on_ack(&mut clock, ms(56), ms(26), ms(30));
        assert_eq!(rtt.receiver_us, (7 * INITIAL_RTT_US + 20_000) >> 3);
        // Nor earlier than the packet ahead of it, acknowledged at 48: a 28 ms sample.
        let mut rtt = UdtRtt::default();
        let mut clock = Ack2Clock::default();
        rtt.on_ack(&mut clock, ms(20), ms(0), ms(20));
        rtt.on_ack(&mut clock, ms(48), ms(19), ms(29));
        rtt.on_ack(&mut clock, ms(56), ms(26), ms(30));
        assert_eq!(rtt.receiver_us, (7 * INITIAL_RTT_US + 28_000) >> 3);
    }

    #[test]
    fn a_loss_holds_the_receivers_ack_until_its_resend_arrives() {
        let mut clock = Ack2Clock::default();
        clock.set_repeat_after(ms(150));
        assert!(clock.on_ack(ms(10)));
        let hole = clock.open_hole();
        assert!(clock.on_ack(ms(20)), "the ACK number moved on to the hole: a full ACK");
        // It stays there: the timer runs out every 10 ms and sends nothing...
        for t in [30, 40, 100] {
            assert!(!clock.on_ack(ms(t)), "{t} ms");
        }
        assert!(!clock.on_ack2_arrival(ms(120)), "nor does an ACK2's arrival");
        assert!(!clock.on_ack(ms(169)));
        // ...until RTT + 4·RTTVar after the last full ACK, which it repeats.
        assert!(clock.on_ack(ms(185)));
        assert!(!clock.on_ack(ms(195)));
        // The resend arrives: the ACK number moves on, and every due timer sends again.
        clock.close_hole(hole);
        assert!(clock.on_ack(ms(205)));
        assert!(clock.on_ack(ms(215)));
        assert_eq!(clock.due, 5);
    }

    #[test]
    fn a_short_packet_runs_the_receivers_ack_timer_out_unless_a_loss_holds_it() {
        let mut clock = Ack2Clock::default();
        assert!(clock.on_ack(ms(10)));
        assert!(!clock.on_ack(ms(12)));
        clock.on_irregular_packet();
        assert!(clock.on_ack(ms(14)), "a short packet: a full ACK 4 ms after the last");
        assert!(!clock.on_ack(ms(20)), "the timer restarted at it");
        assert!(clock.on_ack(ms(24)));
        clock.set_repeat_after(ms(100));
        clock.open_hole();
        assert!(clock.on_ack(ms(34)), "the ACK number moved on to the hole");
        clock.on_irregular_packet();
        assert!(!clock.on_ack(ms(36)), "held: the ACK number has not moved");
        assert!(!clock.on_ack(ms(44)));
    }

    #[test]
    fn the_appclients_short_packets_are_the_ones_the_receiver_acks_at_once() {
        let mut pcc = Pcc2017::with_seed(1);
        let per_call = pcc.blocks.blocks_per_call();
        for seq in 0..2 * per_call {
            pcc.on_send(ms(seq), seq);
        }
        assert_eq!(pcc.short_sent, [per_call - 1, 2 * per_call - 1]);
        // UDT's receiver reports a gap at the first packet past it.
        assert_eq!(pcc.loss_rule(), LossRule::Reorder(1));
    }

    #[test]
    fn a_lost_resend_goes_before_the_losses_found_since() {
        let mut clock = Ack2Clock::default();
        let mut repairs = Repairs::default();
        let mut blocks = SendBuffer::new(1000, 10_000);
        assert!(!repairs.on_loss(&mut clock, 5, 600));
        blocks.on_lost(600);
        repairs.on_send(9, true);
        assert_eq!(blocks.on_send(), 600);
        assert!(!repairs.on_loss(&mut clock, 8, 1000));
        blocks.on_lost(1000);
        // The resend of 5's block is lost, and 8's resend leaves. The periodic NAK lists both
        // holes (8's resend has not arrived yet): UDT's loss list being in sequence order, both
        // go again, 5's block first, before 11's, found since; its hole, the receiver's ACK
        // number, closes first.
        assert!(repairs.on_loss(&mut clock, 9, 600));
        repairs.on_send(10, true);
        assert_eq!(blocks.on_send(), 1000);
        assert!(!repairs.on_loss(&mut clock, 11, 1000));
        blocks.on_lost(1000);
        let listed = repairs.on_nak();
        assert_eq!(listed, [600, 1000]);
        blocks.on_listed_again(&listed);
        assert_eq!(blocks.next_block_bytes(), 600);
        repairs.on_send(12, true);
        repairs.on_ack(&mut clock, 12);
        assert_eq!(clock.holes.iter().copied().collect::<Vec<_>>(), [2, 3]);
        // 8's first resend arrives: its hole closes; its second resend still goes (the port
        // keeps every listed block), and a NAK now lists nothing new.
        repairs.on_ack(&mut clock, 10);
        assert_eq!(clock.holes.iter().copied().collect::<Vec<_>>(), [3]);
        assert!(repairs.on_nak().is_empty(), "3 waits already; 2 has closed");
        repairs.on_send(13, true);
        repairs.on_send(14, true);
        repairs.on_ack(&mut clock, 14);
        assert!(clock.holes.is_empty());
    }

    #[test]
    fn the_receiver_repeats_its_naks_while_its_first_loss_stays() {
        let mut clock = Ack2Clock::default();
        let mut nak = NakTimer::default();
        nak.connect(ms(0));
        assert!(!nak.check(&clock, ms(300)), "no loss, no NAK");
        let first = clock.open_hole();
        nak.on_nak_sent(20_000);
        assert!(!nak.check(&clock, ms(301)), "a new first loss: the timer restarts");
        assert!(!nak.check(&clock, ms(380)), "4 × 20 ms not yet passed");
        assert!(nak.check(&clock, ms(382)), "the same first loss");
        clock.close_hole(first);
        clock.open_hole();
        assert!(!nak.check(&clock, ms(470)), "the first loss moved on");
        assert!(nak.check(&clock, ms(551)));
    }

    #[test]
    fn a_resend_closes_its_hole_and_a_lost_resend_keeps_it_open() {
        let mut clock = Ack2Clock::default();
        let mut repairs = Repairs::default();
        repairs.on_loss(&mut clock, 5, 1000);
        repairs.on_send(9, false);
        repairs.on_send(10, true);
        // The resend is lost too: the same hole waits for the next one, after the periodic NAK.
        repairs.on_loss(&mut clock, 10, 1000);
        repairs.on_send(12, true);
        repairs.on_nak();
        repairs.on_send(14, true);
        repairs.on_ack(&mut clock, 13);
        assert_eq!(clock.holes.len(), 1);
        repairs.on_ack(&mut clock, 14);
        assert!(clock.holes.is_empty());
        // A resend whose own ACK was lost: closed at the first ACK after one past it had come
        // (the transport would have declared it lost then, had it not arrived).
        repairs.on_loss(&mut clock, 20, 1000);
        repairs.on_send(30, true);
        repairs.on_ack(&mut clock, 33);
        assert_eq!(clock.holes.len(), 1);
        repairs.on_ack(&mut clock, 34);
        assert!(clock.holes.is_empty());
    }

    #[test]
    fn an_ack2_that_arrives_before_the_ack_timer_runs_out_waits_for_the_next_full_ack() {
        let mut rtt = UdtRtt::default();
        let mut clock = Ack2Clock::default();
        // A 5 ms path: a full ACK at 10 ms, its ACK2 leaves then, the timer runs to 20 ms.
        assert_eq!(rtt.on_ack(&mut clock, ms(10), ms(5), ms(5)), 1);
        // The packet sent at 11 carries the ACK2, which arrived at 15: a 5 ms sample at the
        // receiver, whose timer still runs; the sender keeps 100 ms.
        assert_eq!(rtt.on_ack(&mut clock, ms(16), ms(11), ms(5)), 0);
        assert_eq!(rtt.receiver_us, (100_000 * 7 + 5_000) >> 3);
        assert_eq!(rtt.us(), 100_000);
        // The next full ACK brings it.
        assert_eq!(rtt.on_ack(&mut clock, ms(21), ms(16), ms(5)), 1);
        assert_eq!(rtt.us(), (100_000 * 7 + 5_000) >> 3);
    }

    #[test]
    fn the_receiver_acknowledges_the_connection_before_any_data() {
        // The first packet leaves at 50 ms; the ACK sent with no data reaches the sender 10 ms
        // later, is answered by an ACK2 then, and starts the receiver's ACK timer.
        let mut p = Pcc2017::with_seed(1);
        p.on_send(ms(50), 0);
        assert_eq!(p.take_control_datagram(ms(59)), None);
        assert_eq!(p.take_control_datagram(ms(60)), Some(ACK2_PAYLOAD_BYTES));
        assert_eq!(p.take_control_datagram(ms(60)), None);
        // The next packet sent after the ACK2 left carries it: its round trip is the sample.
        p.on_send(ms(62), 1);
        p.on_ack(&AckEvent::lone(ms(110), 0, ms(50), PAYLOAD_BYTES));
        assert_eq!(p.rtt.receiver_us, INITIAL_RTT_US);
        p.on_ack(&AckEvent::lone(ms(122), 1, ms(62), PAYLOAD_BYTES));
        assert_eq!(p.rtt.receiver_us, (INITIAL_RTT_US * 7 + 60_000) >> 3);
    }

    #[test]
    fn short_rtt_gives_the_floor_length() {
        let mut p = Pcc2017::with_seed(1);
        p.rtt.sender_us = 1000;
        p.on_send(ms(0), 0);
        // 1000 · 1.1 / 5856 < 10: max(10, 5000/5856) = 10 packets.
        assert_eq!(p.monitors[0].total, 10);
    }

    /// Feeds MI ends to the law with a given utility shape.
    fn end(law: &mut Allegro, lost: f64, current: i32, mi: i32) {
        law.on_monitor_end(100.0, lost, 0.1, current, mi, 50_000.0);
    }

    #[test]
    fn start_up_doubles_then_falls_back_to_the_best_mi() {
        let mut law = Allegro::new();
        let mut rng = Rng::new(3);
        for mi in 0..4 {
            law.on_monitor_start(mi, &mut rng);
        }
        assert_eq!(law.send_rate, Some(16.0));
        // MI 0 (halved), 1 rise; MI 2 loses 10 %: start-up ends at MI 1's 4 Mbit/s.
        end(&mut law, 0.0, 3, 0);
        end(&mut law, 0.0, 3, 1);
        assert!(law.starting_phase);
        end(&mut law, 10.0, 3, 2);
        assert!(!law.starting_phase);
        assert_eq!(law.current_rate, 4.0);
        assert_eq!(law.send_rate, Some(4.0));
    }

    #[test]
    fn guesses_in_pairs_and_moves_with_accelerating_steps() {
        let mut law = Allegro::new();
        let mut rng = Rng::new(7);
        law.on_monitor_start(0, &mut rng);
        law.on_monitor_start(1, &mut rng);
        end(&mut law, 0.0, 1, 0);
        end(&mut law, 10.0, 1, 1);
        assert_eq!(law.current_rate, 2.0);
        // The next 4 MIs probe 2 · (1 ± 0.01); the 4th rate stays afterwards.
        for mi in 2..6 {
            law.on_monitor_start(mi, &mut rng);
        }
        let probes = law.rate_bucket;
        for pair in [0, 2] {
            let mut p = [probes[pair], probes[pair + 1]];
            p.sort_by(|a, b| a.partial_cmp(b).unwrap());
            assert!((p[0] - 1.98).abs() < 1e-12 && (p[1] - 2.02).abs() < 1e-12, "{probes:?}");
        }
        law.on_monitor_start(6, &mut rng);
        assert_eq!(law.send_rate, Some(probes[3]));
        // The higher rate has the higher utility in both pairs (lower loss): move up by
        // (1/2 + 1) · 0.01 · 2 = 0.02.
        for (i, mi) in (2..6).enumerate() {
            let lost = if probes[i] > 2.0 { 0.0 } else { 1.0 };
            end(&mut law, lost, 6, mi);
        }
        assert!((law.current_rate - 2.02).abs() < 1e-12);
        // MI 7 is the target: its end steps by 2 · 0.01 · rate, then 3 ·, while utility rises.
        law.on_monitor_start(7, &mut rng);
        end(&mut law, 3.0, 7, 7);
        assert!((law.current_rate - 2.02 * 1.02).abs() < 1e-12);
        law.on_monitor_start(8, &mut rng);
        end(&mut law, 2.0, 8, 8);
        let r = 2.02 * 1.02 * 1.03;
        assert!((law.current_rate - r).abs() < 1e-12);
        // Utility falls: one step back (3 · 0.01 of the current rate), then guess again.
        law.on_monitor_start(9, &mut rng);
        end(&mut law, 4.0, 9, 9);
        assert!((law.current_rate - r * 0.97).abs() < 1e-12);
        law.on_monitor_start(10, &mut rng);
        assert!(law.rate_bucket.iter().all(|&b| (b - law.current_rate).abs() > 1e-9));
    }

    #[test]
    fn a_tied_vote_guesses_again_with_a_larger_step() {
        let mut law = Allegro::new();
        let mut rng = Rng::new(11);
        law.on_monitor_start(0, &mut rng);
        law.on_monitor_start(1, &mut rng);
        end(&mut law, 0.0, 1, 0);
        end(&mut law, 10.0, 1, 1);
        for mi in 2..6 {
            law.on_monitor_start(mi, &mut rng);
        }
        let probes = law.rate_bucket;
        // First pair votes up, second down.
        for (i, mi) in (2..6).enumerate() {
            let higher = probes[i] > 2.0;
            let lost = if (i < 2) == higher { 0.0 } else { 1.0 };
            end(&mut law, lost, 5, mi);
        }
        assert_eq!(law.current_rate, 2.0);
        law.on_monitor_start(6, &mut rng);
        let mut p = [law.rate_bucket[0], law.rate_bucket[1]];
        p.sort_by(|a, b| a.partial_cmp(b).unwrap());
        assert!((p[0] - 1.96).abs() < 1e-12 && (p[1] - 2.04).abs() < 1e-12, "{p:?}");
    }

    fn ack_at(now_ms: u64, seq: u64) -> AckEvent {
        AckEvent {
            now: ms(now_ms),
            seq,
            sent_at: ms(now_ms.saturating_sub(20)),
            rtt: ms(20),
            one_way_delay_us: 10_000,
            acked_bytes: PAYLOAD_BYTES,
            bytes_in_flight: 0,
            next_seq: seq + 1,
            delivery_rate: None,
            srtt: ms(20),
        }
    }

    #[test]
    fn an_ack2_answers_each_10_ms_ack() {
        let mut p = Pcc2017::with_seed(1);
        assert_eq!(p.take_control_datagram(ms(0)), None);
        // ACKs every 4 ms: the first, then the first 10 ms or more after the last ACK2.
        let mut ack2_at = Vec::new();
        for (i, t) in (0..=40).step_by(4).enumerate() {
            p.on_ack(&ack_at(t, i as u64));
            while let Some(bytes) = p.take_control_datagram(ms(t)) {
                assert_eq!(bytes, 20, "16-byte UDT header + 4 bytes of padding");
                ack2_at.push(t);
            }
        }
        assert_eq!(ack2_at, [0, 12, 24, 36]);
    }

    #[test]
    fn ack2s_cross_the_data_path() {
        // Pantheon's 2/5/20 row: about one ACK2 per 10-16 ms, delivered on the data link.
        let link = Link { rate_bits_per_s: 2e6, one_way_delay: ms(5), queue_packets: 20 };
        let out = run(Box::new(Pcc2017::with_seed(5)), &link, Duration::from_secs(20));
        let per_s = (out.control_delivered + out.control_dropped) as f64 / 20.0;
        assert!((60.0..=100.0).contains(&per_s), "{per_s} ACK2/s");
        assert!(out.control_delivered > 0);
    }

    #[test]
    fn converges_near_the_link_rate() {
        let link = Link { rate_bits_per_s: 12e6, one_way_delay: ms(20), queue_packets: 100 };
        let out = run(Box::new(Pcc2017::with_seed(5)), &link, Duration::from_secs(30));
        let u = out.utilization();
        assert!(u > 0.85, "utilization {u}");
        let p95 = out.delay_percentile_ms(95.0, Duration::from_secs(10));
        assert!(p95 < 20.0 + 100.0 * 1.0 + 5.0, "p95 {p95}");
    }
}
