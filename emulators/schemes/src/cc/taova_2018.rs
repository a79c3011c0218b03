//! Taova as Pantheon ran it from 2018 to 2020: genericCC `d0153f8` (venkatarun95/genericCC),
//! the `sender` with no `cctype` (its default, RemyCC) and `if=RemyCC-2014-100x.dna`
//! (Pantheon's `src/wrappers/taova.py`; `MIN_RTT`, `offduration=1`, `onduration=1000000`,
//! `traffic_params=deterministic,num_cycles=1`: one long flow).
//!
//! The whisker tree is data of the upstream (GPLv2) and is not part of this project: it is
//! read at run time from the file named by [`DNA_ENV`] (`RemyCC-2014-100x.dna` of genericCC
//! d0153f8); without it the scheme is listed as unavailable.
//!
//! The law, as `RemyCC` (`remycc.cc`), `Rat` (`rat.cc`), `Memory` (`memory-default.cc`, the
//! `REMYTYPE_DEFAULT` of `configs.hh`), `WhiskerTree`/`Whisker`/`MemoryRange` and the send
//! loop `CTCP<T>::send_data` (`ctcp.hh`) implement it at that commit (times in ms):
//!
//! * **Memory** (`Memory::packets_received`), per ACK of a packet still outstanding, with its
//!   send time `s`, the ACK's arrival `r` and the receiver's timestamp `R`: the first ACK
//!   (after a start or restart) only records `s`, `r`, `R` and `min_rtt = r − s`, leaving
//!   all four signals at 0. Afterwards, if the packet is the one after the highest sequence
//!   number seen so far (`seq − 1 == largest`, with `largest` starting at 0), the EWMAs move
//!   with gain 1/8: `send_ewma` on `s − s_last`, `rec_ewma` on `R − R_last`, and
//!   `slow_rec_ewma` with gain 1/256 on `R − R_last`, and `s`, `r`, `R` become the last
//!   ones; on every ACK `min_rtt = min(min_rtt, r − s)` and `rtt_ratio = (r − s)/min_rtt`.
//! * **Lookup** (`WhiskerTree::whisker`): the first node, depth first in file order, whose
//!   domain holds the memory (every signal ≥ its lower bound and < its upper bound; a bound
//!   missing from the file is 0 below and 163840 above) and that is a leaf gives the action.
//! * **Action** (`Rat::packets_received`, `Whisker::window`): the rule's window is
//!   `clamp(trunc(W_rat·window_multiple + window_increment), 0, 10⁶)` on the rule's own
//!   integer window `W_rat` (0 at a start), and the sender's window becomes it; the pacing
//!   gap becomes the rule's `intersend`. (The link-rate scaling of `SCALE_SEND_RECEIVE_EWMA`
//!   never acts: with `train_length = 1` the loop measures no link rate.)
//! * **Start** (`RemyCC::init`): window 2, gap 0, memory cleared, `W_rat = 0`.
//! * **Send loop**: genericCC's ([`super::generic_cc`]), paced at the rule's `intersend`, and
//!   waiting as its `poll` with a whole-ms timeout does (`generic_cc::PACER`: a sleep of the
//!   whole ms, then a spin through the rest).
//! * **Loss**: no signal. An ACK of a packet not outstanding changes nothing but the loop's
//!   `largest_ack`.
//! * **Timeout**: after 2 s without an ACK, `init()` again (memory cleared, window 2) and
//!   the window counts from the next sequence number; the outstanding packets stay known, so
//!   their late ACKs still feed the memory.
//! * **Packets**: 1440-byte UDP payloads (`packet_size`, ctcp.hh).
//!
//! Port decisions: the first window leaves when the transport's handshake is answered, one
//! round trip after the start, as upstream's leaves after its `tcp_handshake` (RemyCC ignores
//! the handshake's RTT). The first ACK is recognised by a flag, where upstream
//! tests for a recorded send time of exactly 0 (which its clock never gives). A memory that
//! no rule holds makes upstream exit; the port keeps the last action. The receiver's
//! timestamp is the transport's `sent_at + one_way_delay` (the receiver's clock, offset by
//! a constant that every difference cancels).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prost::Message;

pub use super::generic_cc::DATAGRAM_BYTES;
use super::generic_cc::{ms, SendLoop, PACER, UNPACED};
use super::{AckEvent, Controller, LossEvent, LossRule, Pacer};

/// The environment variable naming the whisker tree file the scheme reads.
pub const DNA_ENV: &str = "CALIBRATE_REMY_DNA";
/// Where that file comes from (it is not distributed with this project).
pub const DNA_SOURCE: &str = "RemyCC-2014-100x.dna of venkatarun95/genericCC at commit d0153f8 \
     (GPLv2, not shipped here; Pantheon's taova used it)";
/// `RemyCC::init`'s window.
const START_WINDOW: f64 = 2.0;
/// Upper bound of a signal where the file gives none (`MAX_MEMORY`).
const MAX_SIGNAL: f64 = 163840.0;
const MAX_WINDOW: i64 = 1_000_000;
const EWMA_GAIN: f64 = 1.0 / 8.0;
const SLOW_EWMA_GAIN: f64 = 1.0 / 256.0;

/// The file's messages, declared from the field numbers of genericCC's `dna.proto`
/// (package `RemyBuffers`); fields the interpreter does not use are skipped.
pub mod dna {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WhiskerTree {
        #[prost(message, optional, tag = "1")]
        pub domain: Option<MemoryRange>,
        #[prost(message, repeated, tag = "2")]
        pub children: Vec<WhiskerTree>,
        #[prost(message, optional, tag = "3")]
        pub leaf: Option<Whisker>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct MemoryRange {
        #[prost(message, optional, tag = "11")]
        pub lower: Option<Memory>,
        #[prost(message, optional, tag = "12")]
        pub upper: Option<Memory>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Memory {
        #[prost(double, optional, tag = "21")]
        pub rec_send_ewma: Option<f64>,
        #[prost(double, optional, tag = "22")]
        pub rec_rec_ewma: Option<f64>,
        #[prost(double, optional, tag = "23")]
        pub rtt_ratio: Option<f64>,
        #[prost(double, optional, tag = "24")]
        pub slow_rec_rec_ewma: Option<f64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Whisker {
        #[prost(sint32, optional, tag = "31")]
        pub window_increment: Option<i32>,
        #[prost(double, optional, tag = "32")]
        pub window_multiple: Option<f64>,
        #[prost(double, optional, tag = "33")]
        pub intersend: Option<f64>,
        #[prost(message, optional, tag = "34")]
        pub domain: Option<MemoryRange>,
    }
}

/// The four congestion signals, in the file's order.
pub type Signals = [f64; 4];

/// One rule's action.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Action {
    pub window_increment: i32,
    pub window_multiple: f64,
    /// The pacing gap (ms).
    pub intersend: f64,
}

impl Action {
    /// `Whisker::window`: the new integer window from the previous one.
    pub fn window(&self, previous: u32) -> u32 {
        let w = f64::from(previous) * self.window_multiple + f64::from(self.window_increment);
        (w as i64).clamp(0, MAX_WINDOW) as u32
    }
}

#[derive(Clone, Debug)]
enum Node {
    Leaf(Action),
    Inner(Vec<WhiskerTree>),
}

/// A RemyCC rule tree: a domain of signals per node, an action per leaf.
#[derive(Clone, Debug)]
pub struct WhiskerTree {
    lower: Signals,
    upper: Signals,
    node: Node,
}

fn bounds(m: Option<&dna::Memory>, missing: f64) -> Signals {
    let get = |f: fn(&dna::Memory) -> Option<f64>| m.and_then(f).unwrap_or(missing);
    [get(|m| m.rec_send_ewma), get(|m| m.rec_rec_ewma), get(|m| m.rtt_ratio), get(|m| m.slow_rec_rec_ewma)]
}

impl WhiskerTree {
    /// Decodes a `RemyBuffers.WhiskerTree` protobuf.
    pub fn decode(bytes: &[u8]) -> Result<WhiskerTree, String> {
        let msg = dna::WhiskerTree::decode(bytes).map_err(|e| format!("not a RemyCC whisker tree: {e}"))?;
        Self::from_message(&msg)
    }

    fn from_message(msg: &dna::WhiskerTree) -> Result<WhiskerTree, String> {
        let domain = msg.domain.as_ref();
        let lower = bounds(domain.and_then(|d| d.lower.as_ref()), 0.0);
        let upper = bounds(domain.and_then(|d| d.upper.as_ref()), MAX_SIGNAL);
        let node = match &msg.leaf {
            Some(w) => Node::Leaf(Action {
                window_increment: w.window_increment.unwrap_or(0),
                window_multiple: w.window_multiple.unwrap_or(0.0),
                intersend: w.intersend.unwrap_or(0.0),
            }),
            None if msg.children.is_empty() => return Err("a node with neither a leaf nor children".into()),
            None => Node::Inner(msg.children.iter().map(Self::from_message).collect::<Result<_, _>>()?),
        };
        Ok(WhiskerTree { lower, upper, node })
    }

    /// The action of the first leaf, depth first, whose domain holds `m` (all its ancestors'
    /// domains holding it too).
    pub fn lookup(&self, m: &Signals) -> Option<Action> {
        let inside = (0..4).all(|i| m[i] >= self.lower[i] && m[i] < self.upper[i]);
        if !inside {
            return None;
        }
        match &self.node {
            Node::Leaf(a) => Some(*a),
            Node::Inner(children) => children.iter().find_map(|c| c.lookup(m)),
        }
    }

    pub fn leaves(&self) -> usize {
        match &self.node {
            Node::Leaf(_) => 1,
            Node::Inner(children) => children.iter().map(WhiskerTree::leaves).sum(),
        }
    }
}

/// Reads the tree from the file [`DNA_ENV`] names; the error says what to do.
pub fn load_dna() -> Result<WhiskerTree, String> {
    let path = std::env::var_os(DNA_ENV)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| format!("set {DNA_ENV} to the path of {DNA_SOURCE}"))?;
    let shown = std::path::Path::new(&path).display().to_string();
    let bytes =
        std::fs::read(&path).map_err(|e| format!("cannot read {DNA_ENV}={shown} ({e}); it must be {DNA_SOURCE}"))?;
    WhiskerTree::decode(&bytes).map_err(|e| format!("{DNA_ENV}={shown}: {e}; it must be {DNA_SOURCE}"))
}

/// [`load_dna`], once per process (the registry's availability and the controller agree).
pub fn dna_from_env() -> Result<Arc<WhiskerTree>, String> {
    static TREE: OnceLock<Result<Arc<WhiskerTree>, String>> = OnceLock::new();
    TREE.get_or_init(|| load_dna().map(Arc::new)).clone()
}

/// `Memory` (`memory-default.cc`): the signals and what they are computed from.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    /// `rec_send_ewma`, `rec_rec_ewma`, `rtt_ratio`, `slow_rec_rec_ewma`.
    pub signals: Signals,
    started: bool,
    last_sent: f64,
    last_receiver_ts: f64,
    min_rtt: f64,
    largest_seq: i64,
}

impl Memory {
    pub fn reset(&mut self) {
        *self = Memory::default();
    }

    /// One acknowledged packet: sent at `sent`, ACKed at `received`, stamped `receiver_ts`
    /// by the receiver (all ms).
    pub fn on_packet(&mut self, seq: u64, sent: f64, received: f64, receiver_ts: f64) {
        let rtt = received - sent;
        let seq = seq as i64;
        if !self.started {
            self.started = true;
            self.last_sent = sent;
            self.last_receiver_ts = receiver_ts;
            self.min_rtt = rtt;
        } else {
            if seq - 1 == self.largest_seq {
                let send_gap = sent - self.last_sent;
                let rec_gap = receiver_ts - self.last_receiver_ts;
                let [send, rec, _, slow] = &mut self.signals;
                *send = (1.0 - EWMA_GAIN) * *send + EWMA_GAIN * send_gap;
                *rec = (1.0 - EWMA_GAIN) * *rec + EWMA_GAIN * rec_gap;
                *slow = (1.0 - SLOW_EWMA_GAIN) * *slow + SLOW_EWMA_GAIN * rec_gap;
                self.last_sent = sent;
                self.last_receiver_ts = receiver_ts;
            }
            self.min_rtt = self.min_rtt.min(rtt);
            self.signals[2] = rtt / self.min_rtt;
        }
        self.largest_seq = self.largest_seq.max(seq);
    }
}

/// `RemyCC` with `Rat`'s rule state: the memory, the rule's integer window, and what the
/// sender uses (window and gap).
#[derive(Clone, Debug)]
pub struct RemyCc {
    tree: Arc<WhiskerTree>,
    pub memory: Memory,
    rule_window: u32,
    /// The sender's window (packets).
    pub window: f64,
    /// The sender's pacing gap (ms).
    pub intersend: f64,
    /// Outstanding packets: sequence number -> send time (ms); kept across restarts.
    outstanding: HashMap<u64, f64>,
}

impl RemyCc {
    pub fn new(tree: Arc<WhiskerTree>) -> Self {
        let mut c = Self {
            tree,
            memory: Memory::default(),
            rule_window: 0,
            window: START_WINDOW,
            intersend: 0.0,
            outstanding: HashMap::new(),
        };
        c.init();
        c
    }

    /// `RemyCC::init`.
    pub fn init(&mut self) {
        self.memory.reset();
        self.rule_window = 0;
        self.window = START_WINDOW;
        self.intersend = 0.0;
    }

    pub fn on_sent(&mut self, seq: u64, now: f64) {
        self.outstanding.insert(seq, now);
    }

    /// `RemyCC::onACK`; false for a packet not outstanding (nothing changes).
    pub fn on_ack(&mut self, seq: u64, now: f64, receiver_ts: f64) -> bool {
        let Some(sent) = self.outstanding.remove(&seq) else {
            return false;
        };
        self.memory.on_packet(seq, sent, now, receiver_ts);
        if let Some(action) = self.tree.lookup(&self.memory.signals) {
            self.rule_window = action.window(self.rule_window);
            self.window = f64::from(self.rule_window);
            self.intersend = action.intersend;
        }
        true
    }
}

#[derive(Clone, Debug)]
pub struct Taova2018 {
    cc: RemyCc,
    send: SendLoop,
}

impl Taova2018 {
    pub fn new(tree: Arc<WhiskerTree>) -> Self {
        Self { cc: RemyCc::new(tree), send: SendLoop::default() }
    }

    /// With the tree of [`DNA_ENV`].
    pub fn from_env() -> Result<Self, String> {
        dna_from_env().map(Self::new)
    }

    pub fn window(&self) -> f64 {
        self.cc.window
    }

    pub fn intersend(&self) -> f64 {
        self.cc.intersend
    }

    pub fn signals(&self) -> Signals {
        self.cc.memory.signals
    }
}

impl Controller for Taova2018 {
    fn name(&self) -> &'static str {
        "taova-2018"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        let now = ms(ack.now);
        self.send.begin_pass(now, self.cc.window, self.cc.intersend);
        let receiver_ts = ms(ack.sent_at) + ack.one_way_delay_us as f64 / 1e3;
        self.cc.on_ack(ack.seq, now, receiver_ts);
        self.send.on_ack(ack.seq, now);
        self.send.check_pacer(ack.now, self.cc.intersend);
    }

    /// Loss is no signal to RemyCC; the window counts from the highest ACK.
    fn on_loss(&mut self, _loss: &LossEvent) {}

    /// A send belongs to the pass the last ACK or timer began ([`super::generic_cc`]).
    fn on_send(&mut self, now: Duration, seq: u64) {
        self.send.on_send(seq, self.cc.intersend);
        self.cc.on_sent(seq, ms(now));
        self.send.check_pacer(now, self.cc.intersend);
    }

    fn cwnd(&self) -> u64 {
        self.send.cwnd(self.cc.window)
    }

    fn window_closed(&self) -> bool {
        self.send.window_closed(self.cc.window)
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        UNPACED
    }

    fn pacer(&self) -> Pacer {
        PACER
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(DATAGRAM_BYTES)
    }

    fn timer_deadline(&self) -> Option<Duration> {
        Some(self.send.timer_deadline(self.cc.window))
    }

    fn on_timer(&mut self, now: Duration) {
        let t = ms(now);
        self.send.begin_pass(t, self.cc.window, self.cc.intersend);
        if self.send.idle_restart(t) {
            self.cc.init();
        }
        self.send.check_pacer(now, self.cc.intersend);
    }

    fn loss_rule(&self) -> LossRule {
        LossRule::Reorder(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{self, Link};

    fn mem(m: Signals) -> dna::Memory {
        dna::Memory {
            rec_send_ewma: Some(m[0]),
            rec_rec_ewma: Some(m[1]),
            rtt_ratio: Some(m[2]),
            slow_rec_rec_ewma: Some(m[3]),
        }
    }

    fn range(lo: Signals, hi: Signals) -> Option<dna::MemoryRange> {
        Some(dna::MemoryRange { lower: Some(mem(lo)), upper: Some(mem(hi)) })
    }

    fn leaf(lo: Signals, hi: Signals, inc: i32, mult: f64, gap: f64) -> dna::WhiskerTree {
        dna::WhiskerTree {
            domain: range(lo, hi),
            children: vec![],
            leaf: Some(dna::Whisker {
                window_increment: Some(inc),
                window_multiple: Some(mult),
                intersend: Some(gap),
                domain: range(lo, hi),
            }),
        }
    }

    const M: f64 = MAX_SIGNAL;

    /// A small tree of our own: the root has no bounds in the file (all of memory); its
    /// children split on rtt_ratio at 1.5, the upper one again on rec_ewma at 2 ms.
    fn small_tree_bytes() -> Vec<u8> {
        let high = dna::WhiskerTree {
            domain: range([0.0, 0.0, 1.5, 0.0], [M, M, M, M]),
            children: vec![
                leaf([0.0, 0.0, 1.5, 0.0], [M, 2.0, M, M], 1, 0.5, 2.0),
                leaf([0.0, 2.0, 1.5, 0.0], [M, M, M, M], 0, 0.25, 5.0),
            ],
            leaf: None,
        };
        let root = dna::WhiskerTree {
            domain: Some(dna::MemoryRange { lower: None, upper: None }),
            children: vec![leaf([0.0; 4], [M, M, 1.5, M], 10, 1.0, 0.5), high],
            leaf: None,
        };
        root.encode_to_vec()
    }

    fn small_tree() -> Arc<WhiskerTree> {
        Arc::new(WhiskerTree::decode(&small_tree_bytes()).unwrap())
    }

    #[test]
    fn it_waits_as_generic_cc_polls() {
        assert_eq!(Taova2018::new(small_tree()).pacer(), PACER);
    }

    #[test]
    fn lookup_descends_to_the_first_leaf_whose_domain_holds_the_memory() {
        let t = small_tree();
        assert_eq!(t.leaves(), 3);
        let act = |m: Signals| t.lookup(&m).map(|a| (a.window_increment, a.window_multiple, a.intersend));
        assert_eq!(act([0.0; 4]), Some((10, 1.0, 0.5)));
        // Upper bounds are exclusive, lower bounds inclusive.
        assert_eq!(act([0.0, 0.0, 1.4999, 0.0]), Some((10, 1.0, 0.5)));
        assert_eq!(act([0.0, 0.0, 1.5, 0.0]), Some((1, 0.5, 2.0)));
        assert_eq!(act([0.0, 1.99, 3.0, 0.0]), Some((1, 0.5, 2.0)));
        assert_eq!(act([0.0, 2.0, 3.0, 0.0]), Some((0, 0.25, 5.0)));
        // Outside the root (a bound missing from the file is 163840 above).
        assert_eq!(act([M, 0.0, 1.0, 0.0]), None);
        assert_eq!(act([0.0, 0.0, -1.0, 0.0]), None);
    }

    #[test]
    fn the_rule_window_is_truncated_and_clamped() {
        let a = Action { window_increment: 3, window_multiple: 0.6198, intersend: 1.0 };
        assert_eq!(a.window(0), 3);
        assert_eq!(a.window(10), 9); // 6.198 + 3
        let b = Action { window_increment: 0, window_multiple: 0.5, intersend: 1.0 };
        assert_eq!(b.window(1), 0);
        let c = Action { window_increment: 1000, window_multiple: 1.0, intersend: 1.0 };
        assert_eq!(c.window(999_500), 1_000_000);
        let d = Action { window_increment: -5, window_multiple: 0.0, intersend: 1.0 };
        assert_eq!(d.window(7), 0);
    }

    #[test]
    fn garbage_is_refused() {
        assert!(WhiskerTree::decode(&[0xff, 0xff, 0xff]).is_err());
        // A node with neither leaf nor children.
        let empty = dna::WhiskerTree { domain: None, children: vec![], leaf: None }.encode_to_vec();
        assert!(WhiskerTree::decode(&empty).is_err());
    }

    #[test]
    fn memory_first_ack_only_records_then_ewmas_follow_in_order_packets() {
        let mut m = Memory::default();
        m.on_packet(0, 0.5, 50.5, 1000.0);
        assert_eq!(m.signals, [0.0; 4]);
        // Next in order: gaps 2 ms (send) and 3 ms (receive); RTT 60 ms over a 50 ms min.
        m.on_packet(1, 2.5, 62.5, 1003.0);
        assert_eq!(m.signals[0], 2.0 / 8.0);
        assert_eq!(m.signals[1], 3.0 / 8.0);
        assert_eq!(m.signals[2], 1.2);
        assert_eq!(m.signals[3], 3.0 / 256.0);
        // Out of order (3 before 2): only the RTT ratio moves, and 3 becomes the highest.
        m.on_packet(3, 6.5, 56.5, 1010.0);
        assert_eq!(m.signals[0], 2.0 / 8.0);
        assert_eq!(m.signals[2], 1.0);
        m.on_packet(2, 4.5, 104.5, 1012.0);
        assert_eq!(m.signals[0], 2.0 / 8.0);
        assert_eq!(m.signals[2], 2.0);
        // 4 follows 3: the gaps are taken from packet 1 (the last in-order one).
        m.on_packet(4, 8.5, 58.5, 1013.0);
        assert_eq!(m.signals[0], 7.0 / 8.0 * 0.25 + 6.0 / 8.0);
        assert_eq!(m.signals[1], 7.0 / 8.0 * 0.375 + 10.0 / 8.0);
        m.reset();
        assert_eq!(m.signals, [0.0; 4]);
        m.on_packet(9, 100.0, 130.0, 0.0);
        assert_eq!(m.signals, [0.0; 4]);
    }

    #[test]
    fn each_ack_applies_the_rule_to_the_rules_own_window() {
        let mut cc = RemyCc::new(small_tree());
        assert_eq!((cc.window, cc.intersend), (2.0, 0.0));
        cc.on_sent(0, 0.0);
        cc.on_sent(1, 0.0);
        // The first ACK: memory all 0 -> leaf (10 + 1.0 W) on W_rat = 0.
        assert!(cc.on_ack(0, 50.0, 0.0));
        assert_eq!((cc.window, cc.intersend), (10.0, 0.5));
        // Unknown ACKs change nothing.
        assert!(!cc.on_ack(0, 51.0, 0.0));
        assert!(!cc.on_ack(7, 51.0, 0.0));
        assert_eq!(cc.window, 10.0);
        // RTT 100 ms on a 50 ms minimum, receive gap 1 ms: (1 + 0.5 W) -> 6.
        assert!(cc.on_ack(1, 100.0, 1.0));
        assert_eq!(cc.memory.signals[2], 2.0);
        assert_eq!((cc.window, cc.intersend), (6.0, 2.0));
        // A restart clears the memory and the rule's window.
        cc.init();
        assert_eq!((cc.window, cc.intersend), (2.0, 0.0));
        cc.on_sent(2, 200.0);
        assert!(cc.on_ack(2, 400.0, 0.0));
        assert_eq!(cc.window, 10.0);
    }

    fn at(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1e3)
    }

    fn ack(c: &mut Taova2018, now_ms: f64, seq: u64, rtt_ms: f64) {
        c.on_ack(&AckEvent {
            now: at(now_ms),
            seq,
            sent_at: at((now_ms - rtt_ms).max(0.0)),
            rtt: at(rtt_ms),
            one_way_delay_us: (rtt_ms * 500.0) as i64,
            acked_bytes: DATAGRAM_BYTES,
            bytes_in_flight: 0,
            next_seq: 0,
            delivery_rate: None,
            srtt: at(rtt_ms),
        });
    }

    #[test]
    fn two_packets_first_then_the_rules_window_and_gap() {
        let mut c = Taova2018::new(small_tree());
        assert_eq!(c.payload_bytes(), Some(1440));
        for seq in 0..2 {
            assert!(!c.window_closed(), "packet {seq}");
            c.on_send(Duration::ZERO, seq);
        }
        assert!(c.window_closed());
        ack(&mut c, 50.0, 0, 50.0);
        // Window 10 past the highest ACK (+1), gap 0.5 ms after the loop's last pass (the
        // ACK's arrival: the closed window kept the loop busy).
        assert_eq!((c.window(), c.intersend()), (10.0, 0.5));
        assert!(c.window_closed());
        let open = c.timer_deadline().unwrap();
        assert!((ms(open) - 50.5).abs() < 1e-6, "{open:?}");
        c.on_timer(open);
        assert!(!c.window_closed());
        c.on_send(open, 2);
        assert!(c.window_closed());
        assert!((ms(c.timer_deadline().unwrap()) - 51.0).abs() < 1e-6);
    }

    #[test]
    fn two_seconds_without_an_ack_restart_the_controller() {
        let mut c = Taova2018::new(small_tree());
        c.on_send(Duration::ZERO, 0);
        c.on_send(Duration::ZERO, 1);
        ack(&mut c, 50.0, 0, 50.0);
        for s in 2..14 {
            c.on_send(at(50.0 + (s as f64)), s);
        }
        assert!(c.window_closed());
        c.on_timer(at(1050.0));
        assert_eq!(c.window(), 10.0);
        c.on_timer(at(2050.5));
        assert_eq!((c.window(), c.intersend()), (2.0, 0.0));
        assert!(!c.window_closed());
        // A late ACK of a packet sent before the restart still counts (first ACK: records).
        ack(&mut c, 2060.0, 5, 2005.0);
        assert_eq!(c.signals(), [0.0; 4]);
        assert_eq!(c.window(), 10.0);
    }

    /// With the small tree the rule holds the RTT ratio near 1.5 (the only rule that shrinks
    /// the window lies above it): a standing queue of about half the base RTT.
    #[test]
    fn small_tree_holds_a_queue_near_its_rtt_ratio_split() {
        let link = Link::reference();
        let o = sim::run(Box::new(Taova2018::new(small_tree())), &link, Duration::from_secs(20));
        let p50 = o.delay_percentile_ms(50.0, Duration::from_secs(5));
        eprintln!("utilization {:.3}, p50 {p50:.2} ms", o.utilization());
        assert!(o.utilization() > 0.5, "utilization {}", o.utilization());
        assert!(p50 > 25.0 && p50 < 60.0, "p50 {p50}");
    }

    /// Lookups and a short ACK sequence of the real RemyCC-2014-100x.dna, recorded with
    /// genericCC d0153f8's own `WhiskerTree`/`RemyCC` code; runs only where the file is given.
    #[test]
    fn the_real_dna_matches_upstreams_lookups() {
        let Some(path) = std::env::var_os(DNA_ENV) else {
            eprintln!("skipped: {DNA_ENV} is not set (it names {DNA_SOURCE})");
            return;
        };
        let tree = Arc::new(WhiskerTree::decode(&std::fs::read(path).expect("readable dna")).expect("a dna"));
        for &(m, inc, mult, gap) in REAL_LOOKUPS {
            let a = tree.lookup(&m).unwrap_or_else(|| panic!("no rule for {m:?}"));
            assert_eq!((a.window_increment, a.window_multiple, a.intersend), (inc, mult, gap), "{m:?}");
        }
        let mut cc = RemyCc::new(tree);
        for &(op, t, seq, r, window, gap) in REAL_SCRIPT {
            if op == 'S' {
                cc.on_sent(seq, t);
            } else {
                cc.on_ack(seq, t, r);
                assert_eq!((cc.window, cc.intersend), (window, gap), "ACK of {seq} at {t}");
            }
        }
        // Its character on the reference link (printed only: the tree is not ours to pin).
        let tree = Arc::new(load_dna().expect("the dna"));
        let o = sim::run(Box::new(Taova2018::new(tree)), &Link::reference(), Duration::from_secs(20));
        let p50 = o.delay_percentile_ms(50.0, Duration::from_secs(5));
        let p95 = o.delay_percentile_ms(95.0, Duration::from_secs(5));
        eprintln!(
            "real dna: utilization {:.3}, p50 {p50:.1} ms, p95 {p95:.1} ms, {} dropped",
            o.utilization(),
            o.dropped_packets
        );
        assert!(o.utilization() > 0.5, "utilization {}", o.utilization());
    }

    /// (memory, window_increment, window_multiple, intersend) from upstream's lookup.
    const REAL_LOOKUPS: &[(Signals, i32, f64, f64)] = &[
        ([0.0, 0.0, 0.0, 0.0], 60, 0.01, 0.29200000000000004),
        ([0.1, 0.12, 1.0, 0.1], 165, 0.92, 0.11120000000000001),
        ([0.05, 0.05, 1.005, 0.05], 173, 0.9800000000000001, 0.045000000000000005),
        ([0.2, 0.25, 1.1, 0.3], 182, 0.75, 0.0913),
        ([0.5, 0.6, 1.3, 0.4], 240, 0.41000000000000003, 0.3241),
        ([1.0, 1.2, 1.5, 1.0], 91, 0.79, 1.7898),
        ([2.0, 2.5, 2.0, 2.0], 39, 0.49000000000000005, 3.5894000000000004),
        ([0.3, 0.9, 1.05, 0.5], 161, 0.21980000000000002, 19.9968),
        ([5.0, 4.0, 3.0, 3.0], 33, 0.060000000000000005, 4.7964),
        ([0.0, 0.0, 1.0, 0.0], 173, 0.9800000000000001, 0.045000000000000005),
        ([10.0, 12.0, 1.2, 9.0], 35, 0.19, 2.8363),
        ([0.08, 0.1, 1.2, 0.09], 212, 0.9, 0.40440000000000004),
        ([0.285, 0.2987, 0.99, 0.2946], 95, 0.81, 0.2987),
        ([0.2853, 0.2987, 1.0, 0.2946], 68, 0.2197, 0.404),
        ([0.7, 0.3, 1.01, 0.31], 231, 0.92, 0.2787),
        ([0.15, 0.17, 1.4, 0.2], 212, 0.9, 0.40440000000000004),
        ([3.3, 1.1, 1.7, 0.6], 39, 0.1, 2.2429),
        ([0.9, 0.9, 1.9, 0.9], 119, 0.48000000000000004, 2.5696000000000003),
        ([0.4857, 0.2263, 1.9764, 0.1087], 240, 0.41000000000000003, 0.3241),
        ([0.8038, 0.5485, 1.087, 0.7612], 256, 0.05, 0.2112),
        ([0.0562, 0.6505, 1.1048, 0.1361], 68, 0.2197, 0.404),
        ([0.6368, 1.2403, 1.1857, 0.3349], 217, 0.45, 2.8163),
        ([0.9411, 1.4216, 1.8657, 0.595], 119, 0.48000000000000004, 2.5696000000000003),
        ([1.4644, 0.0699, 2.2877, 0.4344], 240, 0.41000000000000003, 0.3241),
        ([0.2164, 0.1767, 1.4627, 1.2242], 235, 0.0897, 0.5642),
        ([0.2711, 0.8724, 1.9584, 0.5586], 3, 0.6198, 3.7896),
        ([0.8216, 0.0942, 1.0894, 0.3089], 231, 0.92, 0.2787),
        ([1.0206, 0.6414, 1.4712, 0.8783], 233, 0.08, 0.5316000000000001),
        ([0.6798, 0.4497, 2.1916, 1.0485], 233, 0.08, 0.5316000000000001),
        ([0.3661, 0.8616, 1.7878, 1.3127], 119, 0.48000000000000004, 2.5696000000000003),
        ([1.0942, 0.4319, 2.4703, 0.1771], 240, 0.41000000000000003, 0.3241),
        ([0.6272, 1.1357, 1.228, 0.7334], 91, 0.79, 1.7898),
    ];
    /// ('S', time, seq, _, _, _) a send; ('A', time, seq, receiver timestamp, window, gap) an
    /// ACK and upstream's window and gap after it.
    const REAL_SCRIPT: &[(char, f64, u64, f64, f64, f64)] = &[
        ('S', 0.01, 0, 0.0, 0.0, 0.0),
        ('S', 0.911, 1, 0.0, 0.0, 0.0),
        ('S', 1.7269999999999999, 2, 0.0, 0.0, 0.0),
        ('S', 2.3089999999999997, 3, 0.0, 0.0, 0.0),
        ('S', 3.1439999999999997, 4, 0.0, 0.0, 0.0),
        ('S', 3.8549999999999995, 5, 0.0, 0.0, 0.0),
        ('S', 5.004999999999999, 6, 0.0, 0.0, 0.0),
        ('S', 5.902999999999999, 7, 0.0, 0.0, 0.0),
        ('S', 6.833999999999999, 8, 0.0, 0.0, 0.0),
        ('S', 8.027999999999999, 9, 0.0, 0.0, 0.0),
        ('S', 8.584, 10, 0.0, 0.0, 0.0),
        ('S', 9.485999999999999, 11, 0.0, 0.0, 0.0),
        ('S', 10.201999999999998, 12, 0.0, 0.0, 0.0),
        ('S', 10.606999999999998, 13, 0.0, 0.0, 0.0),
        ('S', 11.597999999999997, 14, 0.0, 0.0, 0.0),
        ('S', 12.120999999999997, 15, 0.0, 0.0, 0.0),
        ('S', 13.204999999999997, 16, 0.0, 0.0, 0.0),
        ('S', 13.908999999999997, 17, 0.0, 0.0, 0.0),
        ('S', 15.003999999999998, 18, 0.0, 0.0, 0.0),
        ('S', 16.081999999999997, 19, 0.0, 0.0, 0.0),
        ('S', 16.755999999999997, 20, 0.0, 0.0, 0.0),
        ('S', 17.851999999999997, 21, 0.0, 0.0, 0.0),
        ('S', 18.287999999999997, 22, 0.0, 0.0, 0.0),
        ('S', 18.796999999999997, 23, 0.0, 0.0, 0.0),
        ('S', 19.532999999999998, 24, 0.0, 0.0, 0.0),
        ('S', 20.069, 25, 0.0, 0.0, 0.0),
        ('S', 20.746, 26, 0.0, 0.0, 0.0),
        ('S', 21.555999999999997, 27, 0.0, 0.0, 0.0),
        ('S', 22.476999999999997, 28, 0.0, 0.0, 0.0),
        ('S', 23.333, 29, 0.0, 0.0, 0.0),
        ('S', 23.682, 30, 0.0, 0.0, 0.0),
        ('S', 24.683999999999997, 31, 0.0, 0.0, 0.0),
        ('S', 25.701999999999998, 32, 0.0, 0.0, 0.0),
        ('S', 26.360999999999997, 33, 0.0, 0.0, 0.0),
        ('S', 27.231999999999996, 34, 0.0, 0.0, 0.0),
        ('S', 27.592999999999996, 35, 0.0, 0.0, 0.0),
        ('S', 28.038999999999998, 36, 0.0, 0.0, 0.0),
        ('S', 28.386, 37, 0.0, 0.0, 0.0),
        ('S', 28.822, 38, 0.0, 0.0, 0.0),
        ('S', 29.448999999999998, 39, 0.0, 0.0, 0.0),
        ('S', 30.535999999999998, 40, 0.0, 0.0, 0.0),
        ('S', 30.97, 41, 0.0, 0.0, 0.0),
        ('S', 31.583, 42, 0.0, 0.0, 0.0),
        ('S', 31.994, 43, 0.0, 0.0, 0.0),
        ('S', 33.188, 44, 0.0, 0.0, 0.0),
        ('S', 33.923, 45, 0.0, 0.0, 0.0),
        ('S', 34.315000000000005, 46, 0.0, 0.0, 0.0),
        ('S', 34.853, 47, 0.0, 0.0, 0.0),
        ('S', 35.298, 48, 0.0, 0.0, 0.0),
        ('S', 36.454, 49, 0.0, 0.0, 0.0),
        ('S', 36.886, 50, 0.0, 0.0, 0.0),
        ('S', 37.21, 51, 0.0, 0.0, 0.0),
        ('S', 38.391, 52, 0.0, 0.0, 0.0),
        ('S', 39.318, 53, 0.0, 0.0, 0.0),
        ('S', 39.948, 54, 0.0, 0.0, 0.0),
        ('S', 40.943, 55, 0.0, 0.0, 0.0),
        ('S', 41.943999999999996, 56, 0.0, 0.0, 0.0),
        ('S', 42.44499999999999, 57, 0.0, 0.0, 0.0),
        ('S', 43.63099999999999, 58, 0.0, 0.0, 0.0),
        ('S', 44.65599999999999, 59, 0.0, 0.0, 0.0),
        ('A', 56.02960362852372, 0, 1028.0198018142619, 60.0, 0.29200000000000004),
        ('A', 57.49328543310641, 1, 1029.2021427165532, 179.0, 27.5772),
        ('A', 58.56473890591544, 2, 1030.1458694529576, 298.0, 27.5772),
        ('A', 59.256647683136826, 3, 1030.7828238415684, 417.0, 27.5772),
        ('A', 60.23394760214124, 4, 1031.6889738010707, 614.0, 0.2787),
        ('A', 61.274983890256266, 5, 1032.5649919451282, 795.0, 0.2787),
        ('A', 62.44204916870983, 6, 1033.723524584355, 962.0, 0.2787),
        ('A', 63.33333471379861, 7, 1034.6181673568992, 1116.0, 0.2787),
        ('A', 64.75756442726383, 8, 1035.7957822136318, 1257.0, 0.2787),
        ('A', 66.23896239330486, 9, 1037.1334811966524, 441.0, 3.7295000000000003),
        ('A', 66.77689572122335, 10, 1037.6804478606116, 261.0, 3.7295000000000003),
        ('A', 67.6972814640278, 11, 1038.591640732014, 222.0, 3.7295000000000003),
        ('A', 68.68602418945326, 12, 1039.4440120947265, 213.0, 3.7295000000000003),
        ('A', 69.23647720966565, 13, 1039.9217386048329, 211.0, 3.7295000000000003),
        ('A', 70.46267011100933, 14, 1041.0303350555046, 211.0, 3.7295000000000003),
        ('A', 71.31647485156661, 15, 1041.7187374257833, 211.0, 3.7295000000000003),
        ('A', 72.44529065060007, 16, 1042.8251453253001, 211.0, 3.7295000000000003),
        ('A', 73.58371995457202, 17, 1043.746359977286, 211.0, 3.7295000000000003),
        ('A', 75.01363991891787, 18, 1045.008819959459, 211.0, 3.7295000000000003),
        ('A', 76.02121053225694, 19, 1046.0516052661285, 211.0, 3.7295000000000003),
        ('A', 76.93538558266582, 20, 1046.8456927913328, 211.0, 3.7295000000000003),
        ('A', 78.53086560198199, 21, 1048.191432800991, 211.0, 3.7295000000000003),
        ('A', 78.77610886424517, 22, 1048.5320544321225, 211.0, 3.7295000000000003),
        ('A', 80.62756175186612, 24, 1050.080280875933, 211.0, 3.7295000000000003),
        ('A', 81.07104680169253, 25, 1050.5700234008461, 211.0, 3.7295000000000003),
        ('A', 82.13062678644737, 26, 1051.4383133932236, 211.0, 3.7295000000000003),
        ('A', 83.43254896276255, 27, 1052.4942744813814, 211.0, 3.7295000000000003),
        ('A', 84.3347457165354, 28, 1053.4058728582677, 211.0, 3.7295000000000003),
        ('A', 85.47110004122474, 29, 1054.4020500206123, 211.0, 3.7295000000000003),
        ('A', 86.13176650502898, 30, 1054.9068832525145, 211.0, 3.7295000000000003),
        ('A', 87.32125659206724, 31, 1056.0026282960337, 211.0, 3.7295000000000003),
        ('A', 88.29818945344563, 32, 1057.0000947267229, 211.0, 3.7295000000000003),
        ('A', 89.01276854685517, 33, 1057.6868842734277, 211.0, 3.7295000000000003),
        ('A', 90.06312391080934, 34, 1058.6475619554046, 211.0, 3.7295000000000003),
        ('A', 90.69738159272308, 35, 1059.1451907963617, 211.0, 3.7295000000000003),
        ('A', 91.40902682611618, 36, 1059.7240134130582, 211.0, 3.7295000000000003),
        ('A', 91.78611664095068, 37, 1060.0860583204753, 211.0, 3.7295000000000003),
        ('A', 92.47273218401129, 38, 1060.6473660920055, 211.0, 3.7295000000000003),
        ('A', 93.26175044333307, 39, 1061.3553752216667, 211.0, 3.7295000000000003),
        ('A', 95.29612887827854, 41, 1063.1330644391394, 211.0, 3.7295000000000003),
        ('A', 94.84303449389424, 40, 1062.6895172469472, 211.0, 3.7295000000000003),
        ('A', 96.16508171976415, 42, 1063.8740408598821, 211.0, 3.7295000000000003),
        ('A', 97.0184684632423, 43, 1064.506234231621, 211.0, 3.7295000000000003),
        ('A', 98.22099472957997, 44, 1065.70449736479, 211.0, 3.7295000000000003),
        ('A', 98.96594233077809, 45, 1066.4444711653891, 211.0, 3.7295000000000003),
        ('A', 99.6863179191215, 46, 1067.0006589595607, 211.0, 3.7295000000000003),
        ('A', 100.66742768906079, 47, 1067.7602138445304, 311.0, 2.8163),
        ('A', 100.90954786052262, 48, 1068.1037739302612, 233.0, 3.7295000000000003),
        ('A', 102.51812869752106, 49, 1069.4860643487605, 321.0, 2.8163),
        ('A', 103.15758621294106, 50, 1070.0217931064706, 361.0, 2.8163),
        ('A', 103.67405472046914, 51, 1070.4420273602345, 379.0, 2.8163),
        ('A', 105.22266251514483, 52, 1071.8068312575724, 387.0, 2.8163),
        ('A', 106.04855759861468, 53, 1072.6832787993073, 391.0, 2.8163),
        ('A', 106.83152101726716, 54, 1073.3897605086336, 392.0, 2.8163),
        ('A', 108.20929619874644, 55, 1074.5761480993733, 393.0, 2.8163),
        ('A', 109.30883249752387, 56, 1075.6264162487619, 393.0, 2.8163),
        ('A', 110.2507556233868, 57, 1076.3478778116933, 393.0, 2.8163),
        ('A', 111.65731439937332, 58, 1077.6441571996868, 393.0, 2.8163),
        ('A', 112.86516647166268, 59, 1078.7605832358313, 393.0, 2.8163),
    ];
}
