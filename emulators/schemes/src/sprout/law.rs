//! Sprout's connection logic in virtual time (milliseconds, as upstream's frozen timestamps):
//! the receiver's inference over tick counts and its forecast (src/sprout/receiver.cc), the
//! mosh-style byte sequence numbers and throwaway window (src/network/network.cc), and the
//! sender's window from the forecast (src/network/sproutconn.cc).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use super::model::{ForecastModel, Process, NUM_TICKS, TICK_MS, TICK_S};

/// Bytes per forecast packet: the receiver counts len/1400 arrivals, the sender turns counts
/// into 1400-byte packets (Pantheon's sprout_mtu.patch: 1440 → 1400).
pub const FORECAST_PACKET_BYTES: i64 = 1400;
/// The sender aims to have delivered within 100 ms what it sends now.
pub const TARGET_DELAY_TICKS: usize = 5;
/// mosh's sequence numbers count bytes: payload plus 50 per datagram (network.cc new_packet).
pub const SEQ_OVERHEAD_BYTES: u64 = 50;
/// A packet not arrived when one sent 10 ms later has is given up (network.h REORDER_LIMIT).
pub const REORDER_LIMIT_MS: u64 = 10;

/// A forecast as carried on the wire (deliveryforecast.proto), byte-for-byte as protobuf-lite
/// serialises it: fields 1 and 2 always (they are set), 3 packed when non-empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Forecast {
    pub received_or_lost: u64,
    pub time: u64,
    /// Cumulative 1400-byte packets the link delivers with 95 % probability in 1..=8 ticks.
    pub counts: Vec<u32>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

impl Forecast {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0x08];
        put_varint(&mut out, self.received_or_lost);
        out.push(0x10);
        put_varint(&mut out, self.time);
        if !self.counts.is_empty() {
            let mut packed = Vec::new();
            for &c in &self.counts {
                put_varint(&mut packed, u64::from(c));
            }
            out.push(0x1a);
            put_varint(&mut out, packed.len() as u64);
            out.extend_from_slice(&packed);
        }
        out
    }

    /// Parses what [`encode`](Self::encode) writes (unknown or malformed input: None).
    pub fn decode(buf: &[u8]) -> Option<Forecast> {
        let mut f = Forecast::default();
        let mut at = 0;
        while at < buf.len() {
            match get_varint(buf, &mut at)? {
                0x08 => f.received_or_lost = get_varint(buf, &mut at)?,
                0x10 => f.time = get_varint(buf, &mut at)?,
                0x1a => {
                    let len = get_varint(buf, &mut at)? as usize;
                    let end = at.checked_add(len).filter(|&e| e <= buf.len())?;
                    while at < end {
                        f.counts.push(get_varint(&buf[..end], &mut at)? as u32);
                    }
                }
                _ => return None,
            }
        }
        Some(f)
    }
}

/// Bytes received or given up, in sequence-number units (receiver.cc RecvQueue).
#[derive(Clone, Debug, Default)]
pub struct RecvQueue {
    received: BinaryHeap<Reverse<(u64, u64)>>,
    throwaway_before: u64,
}

impl RecvQueue {
    pub fn recv(&mut self, seq: u64, throwaway_window: u16, len: u64) {
        self.received.push(Reverse((seq, len)));
        self.throwaway_before = self.throwaway_before.max(seq.wrapping_sub(u64::from(throwaway_window)));
    }

    /// Everything before the throwaway point counts (arrived or lost); after it, the payload
    /// bytes of what arrived (without the 50-byte sequence overhead, as upstream).
    pub fn packet_count(&mut self) -> u64 {
        while let Some(&Reverse((seq, _))) = self.received.peek() {
            if seq < self.throwaway_before {
                self.received.pop();
            } else {
                break;
            }
        }
        let buffered: u64 = self.received.iter().map(|Reverse((_, len))| len).sum();
        self.throwaway_before + buffered
    }
}

/// The receiver's side of Sprout: tick counts in, forecasts out (receiver.cc `Receiver`).
#[derive(Clone, Debug)]
pub struct Inference {
    process: Process,
    model: Arc<ForecastModel>,
    time: u64,
    score_time: u64,
    count_this_tick: f64,
    cached: Forecast,
    queue: RecvQueue,
}

impl Inference {
    pub fn new(model: Arc<ForecastModel>) -> Self {
        Self {
            process: Process::new(),
            model,
            time: 0,
            score_time: u64::MAX,
            count_this_tick: 0.0,
            cached: Forecast::default(),
            queue: RecvQueue::default(),
        }
    }

    pub fn process(&self) -> &Process {
        &self.process
    }

    pub fn time(&self) -> u64 {
        self.time
    }

    /// Starts the tick clock at the first packet.
    pub fn warp_to(&mut self, now: u64) {
        self.time = now;
        self.score_time = now;
    }

    /// Runs every whole tick that ended before `now`: diffuse, then (unless the sender said it
    /// would be silent then and nothing came) observe the tick's count, rounded, at least 1
    /// when anything came.
    pub fn advance_to(&mut self, now: u64) {
        while self.time + TICK_MS < now {
            self.process.evolve(TICK_S);
            if self.time >= self.score_time || self.count_this_tick > 0.0 {
                let mut observed = (self.count_this_tick + 0.5) as u32;
                if self.count_this_tick > 0.0 && self.count_this_tick < 1.0 {
                    observed = 1;
                }
                self.process.observe(TICK_S, observed);
                self.count_this_tick = 0.0;
            }
            self.time += TICK_MS;
        }
    }

    /// A datagram of `len` payload bytes arrived; the sender promises its next one within
    /// `time_to_next` ms (0: right behind it).
    pub fn recv(&mut self, seq: u64, throwaway_window: u16, time_to_next: u16, len: u64) {
        self.count_this_tick += len as f64 / FORECAST_PACKET_BYTES as f64;
        self.queue.recv(seq, throwaway_window, len);
        self.score_time = self.score_time.max(self.time + u64::from(time_to_next));
    }

    /// The forecast at the current tick (computed once per tick).
    pub fn forecast(&mut self) -> Forecast {
        if self.cached.time != self.time {
            self.process.normalize();
            self.cached = Forecast {
                received_or_lost: self.queue.packet_count(),
                time: self.time,
                counts: self.model.forecast(&self.process),
            };
        }
        self.cached.clone()
    }
}

/// The throwaway window a datagram carries: how far back (in sequence bytes) the oldest
/// datagram sent within the last 10 ms lies (network.cc SendQueue).
#[derive(Clone, Debug, Default)]
pub struct SendQueue {
    sent: VecDeque<(u64, u64)>,
}

impl SendQueue {
    pub fn add(&mut self, seq: u64, now: u64) -> u16 {
        self.sent.push_back((seq, now));
        while self.sent.front().is_some_and(|&(_, t)| t < now.saturating_sub(REORDER_LIMIT_MS)) {
            self.sent.pop_front();
        }
        (seq - self.sent.front().expect("just pushed").0).min(65535) as u16
    }
}

/// The sender's window (sproutconn.cc): bytes it may send now so that, by the forecast, what
/// is queued drains within 100 ms.
#[derive(Clone, Debug)]
pub struct Window {
    remote_forecast_time: u64,
    queue_estimate: i64,
    tick: usize,
    operative: Forecast,
}

impl Window {
    /// Before any forecast arrives the operative one is the endpoint's own (something
    /// reasonable, as upstream says), received "at time 0".
    pub fn new(initial: Forecast) -> Self {
        Self { remote_forecast_time: 0, queue_estimate: 0, tick: 0, operative: initial }
    }

    pub fn queue_estimate(&self) -> i64 {
        self.queue_estimate
    }

    /// As ticks of the operative forecast pass, the queue drains by 1400 bytes times the
    /// forecast's count at each passed tick. The counts are cumulative and upstream
    /// subtracts them as they are, so this drains faster than the forecast says.
    fn update(&mut self, now: u64) {
        let last = self.operative.counts.len() as i64 - 1;
        let new_tick = (((now - self.remote_forecast_time) / TICK_MS) as i64).min(last);
        while (self.tick as i64) < new_tick {
            self.queue_estimate -= FORECAST_PACKET_BYTES * i64::from(self.operative.counts[self.tick]);
            if self.queue_estimate < 0 {
                self.queue_estimate = 0;
            }
            self.tick += 1;
        }
    }

    /// A forecast arrived at `now`; the sender's next sequence number is `next_seq`.
    pub fn on_forecast(&mut self, now: u64, forecast: Forecast, next_seq: u64) {
        self.queue_estimate = next_seq.wrapping_sub(forecast.received_or_lost) as i32 as i64;
        self.operative = forecast;
        self.remote_forecast_time = now;
        self.tick = 0;
        self.update(now);
    }

    /// A datagram with `payload` bytes (forecast header and data) left at `now`.
    pub fn on_sent(&mut self, now: u64, payload: u64) {
        self.queue_estimate += payload as i64;
        self.update(now);
    }

    pub fn window_size(&mut self, now: u64) -> i64 {
        self.update(now);
        let last = self.operative.counts.len() - 1;
        let target = (self.tick + TARGET_DELAY_TICKS).min(last);
        let counts = &self.operative.counts;
        let deliverable = FORECAST_PACKET_BYTES * (i64::from(counts[target]) - i64::from(counts[self.tick]));
        (deliverable - self.queue_estimate).max(0)
    }
}

/// The datagram header fields besides the payload (network.cc `Packet`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub seq: u64,
    pub throwaway_window: u16,
    pub time_to_next: u16,
}

/// One side of a Sprout connection (sproutconn.cc over network.cc): both sides infer the
/// path towards them and forecast it, both keep a window; the client sends data by it.
#[derive(Clone, Debug)]
pub struct Connection {
    inference: Inference,
    initialized: bool,
    send_queue: SendQueue,
    next_seq: u64,
    window: Window,
    local_forecast_time: u64,
    last_outgoing_ended_flight: bool,
}

impl Connection {
    pub fn new(model: Arc<ForecastModel>, now: u64) -> Self {
        let mut inference = Inference::new(model);
        inference.advance_to(now);
        let initial = inference.forecast();
        Self {
            inference,
            initialized: false,
            send_queue: SendQueue::default(),
            next_seq: 0,
            window: Window::new(initial),
            local_forecast_time: 0,
            last_outgoing_ended_flight: true,
        }
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub fn window(&self) -> &Window {
        &self.window
    }

    pub fn window_size(&mut self, now: u64) -> i64 {
        self.window.window_size(now)
    }

    /// Builds the payload (2-byte forecast length, forecast, `data` bytes of junk) and header
    /// of the next datagram sent at `now`. The first datagram after one that ended a flight
    /// carries this side's forecast if it changed since the last one sent.
    pub fn send(&mut self, now: u64, data: usize, time_to_next: u16) -> (Header, Vec<u8>) {
        let mut forecast = Vec::new();
        if self.last_outgoing_ended_flight {
            self.inference.advance_to(now);
            let fc = self.inference.forecast();
            if fc.time != self.local_forecast_time {
                forecast = fc.encode();
                self.local_forecast_time = fc.time;
            }
        }
        self.last_outgoing_ended_flight = time_to_next > 0;
        let mut payload = Vec::with_capacity(2 + forecast.len() + data);
        payload.extend_from_slice(&(forecast.len() as u16).to_le_bytes());
        payload.extend_from_slice(&forecast);
        payload.resize(2 + forecast.len() + data, b'x');
        let throwaway_window = self.send_queue.add(self.next_seq, now);
        let header = Header { seq: self.next_seq, throwaway_window, time_to_next };
        self.next_seq += payload.len() as u64 + SEQ_OVERHEAD_BYTES;
        self.window.on_sent(now, payload.len() as u64);
        (header, payload)
    }

    /// A datagram arrived at `now`.
    pub fn recv(&mut self, now: u64, header: Header, payload: &[u8]) {
        if !self.initialized {
            self.inference.warp_to(now);
            self.initialized = true;
        }
        self.inference.advance_to(now);
        self.inference.recv(header.seq, header.throwaway_window, header.time_to_next, payload.len() as u64);
        if payload.len() < 2 {
            return;
        }
        let fc_len = u16::from_le_bytes([payload[0], payload[1]]) as usize;
        if fc_len > 0 && payload.len() >= 2 + fc_len {
            if let Some(fc) = Forecast::decode(&payload[2..2 + fc_len]) {
                if fc.counts.len() == NUM_TICKS {
                    self.window.on_forecast(now, fc, self.next_seq);
                }
            }
        }
    }
}
