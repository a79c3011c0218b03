//! Indigo as Pantheon ran it from 2018 to 2020: StanfordSNR/indigo at 2601c92 ("Add
//! 1-layer-32-unit RNN"; 463d89b, pinned later, only adds licence headers and leaves the
//! model files byte-identical), sender `dagger/run_sender.py PORT`, receiver
//! `env/run_receiver.py IP PORT`.
//!
//! The law as implemented (upstream `env/sender.py` `Sender`, `dagger/run_sender.py`
//! `Learner.sample_action`, `dagger/models.py` `DaggerLSTM`, `helpers/helpers.py`):
//! - Packets of 1436 bytes (the serialized `Data` protobuf with its 1400-byte filler; proto3
//!   leaves zero fields out, so the first is 1403 bytes and the others before the first ACK
//!   1417), sent whenever `next_seq - next_ack < cwnd`, counted in packets, where `next_ack`
//!   is one past the highest sequence number acknowledged (a packet overtaken by a later ACK
//!   no longer counts); no pacing. The window starts at 10 packets. If nothing happens for
//!   1 s while the window is full, one packet goes out anyway (`Sender.run`'s poll timeout).
//! - Every ACK updates, in milliseconds on a whole-millisecond clock (`curr_ts_ms`): the RTT
//!   of the acknowledged packet and the all-time minimum RTT; the EWMA (gain 1/8) of
//!   `rtt - min_rtt`; `delivered +=` the packet's size and the EWMA of the delivery rate
//!   `0.008 * (delivered - delivered_at_send) / max(1, now - delivered_time_at_send)`
//!   (Mbit/s); the EWMA of the send rate `0.008 * (sent_bytes - sent_bytes_at_send) /
//!   max(1, rtt)`. The `*_at_send` values are what the sender had when it sent the packet
//!   (upstream carries them in the datagram and the receiver echoes them).
//! - The first ACK starts a step; on the first ACK more than 10 ms after the step began, the
//!   state `[delay, delivery rate, send rate, cwnd]` is normalised (`/200, /200, /200,
//!   /5000`), the one-hot previous action (initially the last, `*2`) is appended, and the
//!   9 numbers go through the trained LSTM (one layer of 32 `BasicLSTMCell` units, forget bias
//!   1, the state carried from step to step) and a 32x5 linear layer; the action is the
//!   argmax of the softmax: `/2`, `-10`, `+0`, `+10` or `*2` applied to the window, which
//!   stays at least 2 packets. The three EWMAs then restart from the next ACK.
//! - The inference holds the single-threaded sender: for [`FIRST_INFERENCE`] at the first step
//!   and [`INFERENCE`] at the others, nothing is sent and ACKs wait, read when it ends and
//!   stamped then; the next step begins when it ends (upstream reads `curr_ts_ms()` after
//!   `sample_action`). The first one matters most: at 2/5/20 the link drains during it, and
//!   the steps after it decide which fixed window the policy settles on (traced on both
//!   sides: the upstream's 7.5 packets in every run, where the port without the stall settled
//!   on 10, 12 ms more queue).
//! - The weights are the upstream checkpoint `dagger/model/model` (Apache-2.0, Copyright 2018
//!   Francis Y. Yan, Jestin Ma), stored as `data/indigo-2601c92/weights.f32le` with its
//!   manifest `weights.json` and built into the binary; `reference.json` holds the model's
//!   outputs computed by TensorFlow from the checkpoint's own graph, which the tests match.
//!
//! Differences from the upstream program: losses are not reported to the law (upstream has
//! none either), ACKs of packets more than [`SNAPSHOT_HORIZON`] behind the highest
//! acknowledged one are ignored (upstream would still use them; a FIFO path never produces
//! them), the inference times are constants where upstream's vary from step to step, and the
//! TCP-like handshake is our transport's, so the receiver listens first.

use std::collections::VecDeque;
use std::sync::OnceLock;
use std::time::Duration;

use ndarray::{concatenate, s, Array1, Array2, ArrayView1, Axis};

use super::{AckEvent, Controller, LossEvent, LossRule};

/// UDP payload of one upstream DATA packet: the protobuf `Data` message with its fields set
/// and a 1400-byte string payload.
pub const PACKET_BYTES: u64 = 1436;
/// Bytes a proto3 `Data` leaves out when a field is zero (its tag and value): the fixed32
/// fields `seq_num`, `send_ts`, `delivered_time`, and the fixed64 `sent_bytes`, `delivered`.
const FIXED32_FIELD_BYTES: u64 = 5;
const FIXED64_FIELD_BYTES: u64 = 9;
/// How long the upstream's TensorFlow session holds its sender at a step, neither sending
/// nor reading ACKs: the first `session.run` prepares the graph's kernels (36-45 ms, mean 39,
/// over 9 traced runs of the reference build: `run_sender.py` under TensorFlow 2.15's v1 API on
/// this 2-core host), the later ones run them (per run means 0.57-0.78 ms; the second and
/// third ~1 ms). Host-dependent: Pantheon's machines ran TensorFlow 1.14.
pub const FIRST_INFERENCE: Duration = Duration::from_millis(39);
pub const INFERENCE: Duration = Duration::from_micros(700);
/// Initial window (packets).
const INITIAL_CWND: f64 = 10.0;
/// Smallest window (packets).
const MIN_CWND: f64 = 2.0;
/// A step ends on the first ACK more than this many whole milliseconds after it began.
const STEP_MS: u64 = 10;
/// EWMA weight of the old value.
const EWMA_OLD: f64 = 0.875;
/// Silence after which one packet goes out beyond the window.
const IDLE_SEND: Duration = Duration::from_secs(1);
/// How far behind the highest acknowledged packet the per-packet records are kept.
pub const SNAPSHOT_HORIZON: u64 = 4096;
/// Window operations, in the order of the model's outputs.
pub const ACTIONS: [(char, f64); 5] = [('/', 2.0), ('-', 10.0), ('+', 0.0), ('+', 10.0), ('*', 2.0)];
const STATE_DIM: usize = 4;
const INPUT_DIM: usize = STATE_DIM + ACTIONS.len();
const LSTM_UNITS: usize = 32;

const WEIGHTS: &[u8] = include_bytes!("../../data/indigo-2601c92/weights.f32le");
const MANIFEST: &str = include_str!("../../data/indigo-2601c92/weights.json");

/// The trained network: one LSTM layer and a linear output layer.
pub struct Model {
    /// `[inputs; h]` (41) x the four gates i, j, f, o (128).
    kernel: Array2<f32>,
    bias: Array1<f32>,
    /// 32 x 5.
    out_weights: Array2<f32>,
    out_bias: Array1<f32>,
}

/// The LSTM's memory and output, carried from one step to the next.
#[derive(Clone, Debug, PartialEq)]
pub struct LstmState {
    pub c: Array1<f32>,
    pub h: Array1<f32>,
}

impl LstmState {
    pub fn zero() -> Self {
        LstmState { c: Array1::zeros(LSTM_UNITS), h: Array1::zeros(LSTM_UNITS) }
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl Model {
    /// The built-in weights (parsed once).
    pub fn builtin() -> &'static Model {
        static MODEL: OnceLock<Model> = OnceLock::new();
        MODEL.get_or_init(|| Model::parse(MANIFEST, WEIGHTS).expect("built-in Indigo weights"))
    }

    fn parse(manifest: &str, bytes: &[u8]) -> Result<Model, String> {
        let floats: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let v: serde_json::Value = serde_json::from_str(manifest).map_err(|e| e.to_string())?;
        let tensors = v["tensors"].as_array().ok_or("manifest without tensors")?;
        let get = |suffix: &str, shape: &[usize]| -> Result<Vec<f32>, String> {
            let t = tensors
                .iter()
                .find(|t| t["name"].as_str().is_some_and(|n| n.ends_with(suffix)))
                .ok_or_else(|| format!("no tensor {suffix}"))?;
            let got: Vec<usize> =
                t["shape"].as_array().into_iter().flatten().filter_map(|d| d.as_u64()).map(|d| d as usize).collect();
            if got != shape {
                return Err(format!("{suffix}: shape {got:?}, expected {shape:?}"));
            }
            let offset = t["offset"].as_u64().ok_or("no offset")? as usize;
            let len: usize = shape.iter().product();
            floats.get(offset..offset + len).map(<[f32]>::to_vec).ok_or_else(|| format!("{suffix}: past the data"))
        };
        let gates = 4 * LSTM_UNITS;
        let matrix = |rows, cols, data| Array2::from_shape_vec((rows, cols), data).map_err(|e| e.to_string());
        Ok(Model {
            kernel: matrix(
                INPUT_DIM + LSTM_UNITS,
                gates,
                get("basic_lstm_cell/kernel", &[INPUT_DIM + LSTM_UNITS, gates])?,
            )?,
            bias: Array1::from(get("basic_lstm_cell/bias", &[gates])?),
            out_weights: matrix(
                LSTM_UNITS,
                ACTIONS.len(),
                get("fully_connected/weights", &[LSTM_UNITS, ACTIONS.len()])?,
            )?,
            out_bias: Array1::from(get("fully_connected/biases", &[ACTIONS.len()])?),
        })
    }

    /// One time step: advances `state` and returns the action probabilities.
    pub fn step(&self, input: &[f32; INPUT_DIM], state: &mut LstmState) -> [f32; ACTIONS.len()] {
        let x = ArrayView1::from(&input[..]);
        let xh = concatenate![Axis(0), x, state.h.view()];
        let z = xh.dot(&self.kernel) + &self.bias;
        let n = LSTM_UNITS;
        let (i, j, f, o) = (z.slice(s![0..n]), z.slice(s![n..2 * n]), z.slice(s![2 * n..3 * n]), z.slice(s![3 * n..]));
        let mut c = Array1::<f32>::zeros(n);
        let mut h = Array1::<f32>::zeros(n);
        for k in 0..n {
            c[k] = state.c[k] * sigmoid(f[k] + 1.0) + sigmoid(i[k]) * j[k].tanh();
            h[k] = c[k].tanh() * sigmoid(o[k]);
        }
        let scores = h.dot(&self.out_weights) + &self.out_bias;
        state.c = c;
        state.h = h;
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f32 = e.iter().sum();
        let mut probs = [0.0; ACTIONS.len()];
        for (p, v) in probs.iter_mut().zip(e) {
            *p = v / sum;
        }
        probs
    }
}

/// The policy of `run_sender.py`: normalised state plus the previous action in, argmax out.
pub struct Policy {
    model: &'static Model,
    state: LstmState,
    prev_action: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { model: Model::builtin(), state: LstmState::zero(), prev_action: ACTIONS.len() - 1 }
    }
}

impl Policy {
    /// The network input for a raw state `[delay ms, delivery Mbit/s, send Mbit/s, cwnd]`.
    pub fn input(&self, raw: [f64; STATE_DIM]) -> [f32; INPUT_DIM] {
        let norm = [raw[0] / 200.0, raw[1] / 200.0, raw[2] / 200.0, raw[3] / 5000.0];
        let mut input = [0.0f32; INPUT_DIM];
        for (k, v) in norm.iter().enumerate() {
            input[k] = *v as f32;
        }
        input[STATE_DIM + self.prev_action] = 1.0;
        input
    }

    /// Chooses the action for `raw` (the first of equal maxima, as numpy's argmax) and
    /// returns it with the probabilities.
    pub fn sample(&mut self, raw: [f64; STATE_DIM]) -> (usize, [f32; ACTIONS.len()]) {
        let input = self.input(raw);
        let probs = self.model.step(&input, &mut self.state);
        let mut best = 0;
        for (k, p) in probs.iter().enumerate() {
            if *p > probs[best] {
                best = k;
            }
        }
        self.prev_action = best;
        (best, probs)
    }

    pub fn lstm_state(&self) -> &LstmState {
        &self.state
    }
}

/// What the sender had when it sent one packet (upstream puts these in the datagram).
#[derive(Clone, Copy, Debug)]
struct Snapshot {
    seq: u64,
    /// The datagram's size (`ack_bytes` when it is acknowledged).
    bytes: u64,
    send_ms: u64,
    sent_bytes: u64,
    delivered: u64,
    delivered_time_ms: u64,
}

fn ewma(old: Option<f64>, sample: f64) -> Option<f64> {
    Some(old.map_or(sample, |o| EWMA_OLD * o + (1.0 - EWMA_OLD) * sample))
}

pub struct Indigo2018 {
    policy: Policy,
    /// Window in packets.
    cwnd: f64,
    next_seq: u64,
    next_ack: u64,
    /// The upstream clock starts at the first packet sent.
    epoch: Option<Duration>,
    sent_bytes: u64,
    delivered: u64,
    delivered_time_ms: u64,
    min_rtt: f64,
    delay_ewma: Option<f64>,
    delivery_rate_ewma: Option<f64>,
    send_rate_ewma: Option<f64>,
    step_start_ms: Option<u64>,
    snapshots: VecDeque<Snapshot>,
    /// Last ACK or send: the poll timeout counts from there.
    last_event: Duration,
    /// The idle timeout fired: one packet may go regardless of the window.
    forced_send: bool,
    /// The inference of the latest step holds the sender until then; the sequence numbers of
    /// ACKs arriving meanwhile wait in `held` (upstream's socket buffer), read when it ends.
    stalled_until: Option<Duration>,
    held: Vec<u64>,
    steps: u64,
    /// The raw state of the latest decision.
    last_state: Option<[f64; STATE_DIM]>,
}

impl Indigo2018 {
    /// `mss` is ignored: the upstream sends 1436-byte datagrams.
    pub fn new(_mss: u64) -> Self {
        Indigo2018 {
            policy: Policy::default(),
            cwnd: INITIAL_CWND,
            next_seq: 0,
            next_ack: 0,
            epoch: None,
            sent_bytes: 0,
            delivered: 0,
            delivered_time_ms: 0,
            min_rtt: f64::INFINITY,
            delay_ewma: None,
            delivery_rate_ewma: None,
            send_rate_ewma: None,
            step_start_ms: None,
            snapshots: VecDeque::new(),
            last_event: Duration::ZERO,
            forced_send: false,
            stalled_until: None,
            held: Vec::new(),
            steps: 0,
            last_state: None,
        }
    }

    /// Window in packets.
    pub fn window(&self) -> f64 {
        self.cwnd
    }

    /// Decisions taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The raw state `[delay ms, delivery Mbit/s, send Mbit/s, cwnd]` of the latest decision.
    pub fn last_state(&self) -> Option<[f64; STATE_DIM]> {
        self.last_state
    }

    fn ms(&self, t: Duration) -> u64 {
        t.saturating_sub(self.epoch.unwrap_or_default()).as_millis() as u64
    }

    fn window_open(&self) -> bool {
        ((self.next_seq - self.next_ack) as f64) < self.cwnd
    }

    fn take_action(&mut self, action: usize) {
        let (op, val) = ACTIONS[action];
        self.cwnd = match op {
            '/' => self.cwnd / val,
            '-' => self.cwnd - val,
            '*' => self.cwnd * val,
            _ => self.cwnd + val,
        }
        .max(MIN_CWND);
    }

    fn snapshot(&self, seq: u64) -> Option<Snapshot> {
        let base = self.snapshots.front()?.seq;
        let s = self.snapshots.get(usize::try_from(seq.checked_sub(base)?).ok()?)?;
        (s.seq == seq).then_some(*s)
    }

    /// The serialized `Data` of packet `seq` sent at `send_ms`: proto3 leaves zero fields out.
    fn datagram_bytes(&self, seq: u64, send_ms: u64) -> u64 {
        let zero32 = [seq, send_ms, self.delivered_time_ms].iter().filter(|v| **v == 0).count() as u64;
        let zero64 = [self.sent_bytes, self.delivered].iter().filter(|v| **v == 0).count() as u64;
        PACKET_BYTES - zero32 * FIXED32_FIELD_BYTES - zero64 * FIXED64_FIELD_BYTES
    }

    /// `Sender.recv` and `update_state` for the ACK of `seq` read at `now`.
    fn read_ack(&mut self, now: Duration, seq: u64) {
        self.last_event = now;
        self.next_ack = self.next_ack.max(seq + 1);
        let snap = self.snapshot(seq);
        let horizon = self.next_ack.saturating_sub(SNAPSHOT_HORIZON);
        while self.snapshots.front().is_some_and(|s| s.seq < horizon) {
            self.snapshots.pop_front();
        }
        let Some(snap) = snap else { return };
        let now_ms = self.ms(now);

        let rtt = now_ms.saturating_sub(snap.send_ms) as f64;
        self.min_rtt = self.min_rtt.min(rtt);
        self.delay_ewma = ewma(self.delay_ewma, rtt - self.min_rtt);

        self.delivered += snap.bytes;
        self.delivered_time_ms = now_ms;
        let delivery_rate = 0.008 * (self.delivered - snap.delivered) as f64
            / now_ms.saturating_sub(snap.delivered_time_ms).max(1) as f64;
        self.delivery_rate_ewma = ewma(self.delivery_rate_ewma, delivery_rate);

        let send_rate = 0.008 * (self.sent_bytes - snap.sent_bytes) as f64 / rtt.max(1.0);
        self.send_rate_ewma = ewma(self.send_rate_ewma, send_rate);

        let start = *self.step_start_ms.get_or_insert(now_ms);
        if now_ms.saturating_sub(start) > STEP_MS {
            let state = [
                self.delay_ewma.unwrap_or(0.0),
                self.delivery_rate_ewma.unwrap_or(0.0),
                self.send_rate_ewma.unwrap_or(0.0),
                self.cwnd,
            ];
            self.last_state = Some(state);
            let (action, _) = self.policy.sample(state);
            self.take_action(action);
            let inference = if self.steps == 0 { FIRST_INFERENCE } else { INFERENCE };
            self.steps += 1;
            self.delay_ewma = None;
            self.delivery_rate_ewma = None;
            self.send_rate_ewma = None;
            // Upstream reads its clock for the next step after the inference.
            let done = now + inference;
            self.step_start_ms = Some(self.ms(done));
            self.stalled_until = Some(done);
        }
    }
}

impl Controller for Indigo2018 {
    fn name(&self) -> &'static str {
        "indigo-2018"
    }

    fn on_send(&mut self, now: Duration, seq: u64) {
        let epoch = *self.epoch.get_or_insert(now);
        let send_ms = now.saturating_sub(epoch).as_millis() as u64;
        let bytes = self.datagram_bytes(seq, send_ms);
        self.snapshots.push_back(Snapshot {
            seq,
            bytes,
            send_ms,
            sent_bytes: self.sent_bytes,
            delivered: self.delivered,
            delivered_time_ms: self.delivered_time_ms,
        });
        self.sent_bytes += bytes;
        self.next_seq = self.next_seq.max(seq + 1);
        self.forced_send = false;
        self.last_event = now;
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        if self.stalled_until.is_some() {
            self.held.push(ack.seq);
        } else {
            self.read_ack(ack.now, ack.seq);
        }
    }

    fn on_loss(&mut self, _loss: &LossEvent) {}

    /// The window counts packets (`seq_num - next_ack < cwnd`), whatever their sizes, so the
    /// law keeps it: see [`Controller::window_closed`].
    fn cwnd(&self) -> u64 {
        u64::MAX
    }

    /// Nothing is sent while an inference holds the sender, nor while the window is full
    /// (but for the idle timeout's one packet).
    fn window_closed(&self) -> bool {
        self.stalled_until.is_some() || !(self.window_open() || self.forced_send)
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        1e12
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(PACKET_BYTES)
    }

    /// The next datagram's size; its `send_ts` is taken as zero while every packet so far
    /// went in the clock's first millisecond (the initial window, before any ACK).
    fn next_payload_bytes(&self) -> Option<u64> {
        // Send times only grow, so the latest one says whether all were in the first ms.
        let first_ms = self.delivered == 0 && self.snapshots.back().is_none_or(|s| s.send_ms == 0);
        Some(self.datagram_bytes(self.next_seq, if first_ms { 0 } else { 1 }))
    }

    fn timer_deadline(&self) -> Option<Duration> {
        self.stalled_until.or_else(|| {
            (self.epoch.is_some() && !self.window_open() && !self.forced_send).then(|| self.last_event + IDLE_SEND)
        })
    }

    fn on_timer(&mut self, now: Duration) {
        if let Some(until) = self.stalled_until {
            if now >= until {
                // The loop reads what queued meanwhile, each ACK stamped when it is read.
                self.stalled_until = None;
                for seq in std::mem::take(&mut self.held) {
                    self.read_ack(now, seq);
                }
            }
            return;
        }
        if !self.window_open() && now >= self.last_event + IDLE_SEND {
            self.forced_send = true;
        }
    }

    /// A packet counts as outstanding only while no later one has been acknowledged.
    fn loss_rule(&self) -> LossRule {
        LossRule::Reorder(1)
    }

    /// Upstream never times packets out; only the idle send above reopens a stuck window.
    fn loss_timeout(&self) -> Option<Duration> {
        Some(Duration::from_secs(24 * 3600))
    }
}

#[cfg(test)]
mod tests;
