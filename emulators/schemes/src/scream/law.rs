//! The pure state machines of Pantheon's scream in its two eras: the fake video encoder and
//! its RTP queue (upstream code/VideoEnc.cpp, code/RtpQueue.cpp), the sender's congestion
//! control (code/ScreamTx.cpp, one stream) and the receiver's ack state (code/ScreamRx.cpp),
//! at EricssonResearch/scream db32b00 ([`Era::Y2017`]) and c3370fd ([`Era::Y2018`]). What
//! changed between the two is a parameter ([`StreamConfig`], [`Era`]'s constants) or, where
//! upstream rewrote a function, a branch on the era. Times are microseconds on each side's own
//! clock, which Pantheon's client and server read in whole milliseconds (sourdough's
//! `timestamp_ms`), so every time given here is a multiple of 1000.

/// Bits of the ack vector (ScreamRx.h `kAckVectorBits`).
pub const ACK_VECTOR_BITS: u32 = 64;

// Encoder (VideoEnc.cpp).
/// Media bytes per RTP packet at most.
const MAX_RTP_MEDIA: i64 = 1200;
/// RTP header and payload framing added to every packet.
const RTP_OVERHEAD: i64 = 20;
/// A frame never carries less than this rate's worth of bytes.
const MIN_FRAME_RATE_BPS: f64 = 5000.0;

// ScreamTx.cpp / ScreamTx.h constants common to both eras.
const LOSS_BETA: f64 = 0.6;
const QUEUE_DELAY_TARGET_MIN: f64 = 0.1;
const QUEUE_DELAY_TARGET_MAX: f64 = 0.3;
const TIMESTAMP_RATE: f64 = 1000.0;
const MAX_TX_PACKETS: usize = 1000;
const BASE_OWD_HIST: usize = 50;
const QDELAY_NORM_HIST: usize = 200;
const QDELAY_NORM_HIST_SHORT: usize = 50;
const QDELAY_FRACTION_HIST: usize = 20;
const BYTES_IN_FLIGHT_HIST: usize = 5;
const RATE_RTP_HIST: usize = 21;
const RATE_UPDATE_HIST: usize = 4;
const RATE_ADJUST_INTERVAL_US: u64 = 200_000;
const MIN_PACING_BPS: f64 = 5000.0;
const INIT_MSS: i64 = 100;
const BYTES_IN_FLIGHT_HIST_INTERVAL_US: u64 = 1_000_000;
const QDELAY_FRACTION_HIST_INTERVAL_US: u64 = 50_000;
const RATE_UPDATE_INTERVAL_US: u64 = 50_000;
const REORDER_TIME_US: u64 = 20_000;
/// A packet may go regardless of the window when nothing was sent for this long.
const SEND_DEADLOCK_US: u64 = 200_000;
/// c3370fd: the window's up and down gains (ScreamTx.h `kGainUp`, `kGainDown`).
const GAIN_UP: f64 = 1.0;
const GAIN_DOWN: f64 = 2.0;
/// c3370fd: pacing runs at this multiple of cwnd/sRTT (`kPacketPacingHeadRoom`).
const PACING_HEADROOM: f64 = 1.5;
/// c3370fd: the window may exceed what was recently in flight by this factor.
const MAX_INFLIGHT_HEADROOM: f64 = 1.1;
/// c3370fd: the RTP queue is discarded at most this often (`kMinRtpQueueDiscardInterval_us`).
const MIN_RTP_QUEUE_DISCARD_INTERVAL_US: u64 = 1_000_000;
/// c3370fd: past target rates whose maximum is the inflection point (`kTargetBitrateHistSize`).
const TARGET_HIST: usize = 3;

/// Which upstream ScreamTx/ScreamRx/VideoEnc Pantheon built: db32b00 under its own 2017
/// src/scream, or c3370fd under StanfordSNR/scream f099118 (Pantheon 2018-2020).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Era {
    #[default]
    Y2017,
    Y2018,
}

impl Era {
    /// The window before any feedback: db32b00 starts at 5000 bytes, c3370fd at 2 × the
    /// initial 100-byte MSS.
    fn init_cwnd(self) -> i64 {
        match self {
            Era::Y2017 => 5000,
            Era::Y2018 => 2 * INIT_MSS,
        }
    }
    /// How often the base OWD history takes a new minimum (`estimateOwd`).
    fn base_owd_interval_us(self) -> u64 {
        match self {
            Era::Y2017 => 1_000_000,
            Era::Y2018 => 10_000_000,
        }
    }
    /// The decay of the remembered queue-delay trend per 50 ms (`queueDelayTrendMem`).
    fn trend_mem_decay(self) -> f64 {
        match self {
            Era::Y2017 => 0.99,
            Era::Y2018 => 0.98,
        }
    }
    /// The minimum window in MSS when the MSS is reset once a second.
    fn min_cwnd_mss_at_reset(self) -> i64 {
        match self {
            Era::Y2017 => 2,
            Era::Y2018 => 3,
        }
    }
    /// Shared bottleneck detection (it can raise the delay target): on in db32b00, off
    /// (`kEnableSbd = false`) in c3370fd.
    fn sbd(self) -> bool {
        self == Era::Y2017
    }
}

/// `registerNewStream`'s arguments as Pantheon's client passed them.
#[derive(Clone, Copy, Debug)]
pub struct StreamConfig {
    pub era: Era,
    pub min_bps: f64,
    /// The first target (db32b00 has no such argument and starts at the minimum).
    pub start_bps: f64,
    pub max_bps: f64,
    /// Most the target may rise per second (bit/s per s).
    pub ramp_up_speed: f64,
    /// The RTP queue is dropped when it holds more than this (s).
    pub max_rtp_queue_delay: f64,
    pub tx_queue_size_factor: f64,
    pub queue_delay_guard: f64,
    pub loss_event_rate_scale: f64,
}

impl StreamConfig {
    /// 2017 (pantheon 97c91c4 src/scream/ScreamClient.cc): `registerNewStream(q, ssrc, 1.0,
    /// 64e3, 5e6)` with db32b00's defaults. 2018 (StanfordSNR/scream f099118
    /// src/ScreamClient.cc): `registerNewStream(q, ssrc, 1.0f, 64e3f, 10e7f, 2e5f, 2.0f, 0.5f,
    /// 0.3f)`, which against c3370fd's signature (priority, min, start, max, rampUpSpeed,
    /// maxRtpQueueDelay, txQueueSizeFactor, ...) means a 100 Mbit/s start clamped to a
    /// 200 kbit/s maximum and a ramp-up of 2 bit/s per second; the last two take c3370fd's
    /// defaults (queue delay guard 0.1, loss scale 0.9).
    pub fn pantheon(era: Era) -> Self {
        match era {
            Era::Y2017 => StreamConfig {
                era,
                min_bps: 64e3,
                start_bps: 64e3,
                max_bps: 5e6,
                ramp_up_speed: 200_000.0,
                max_rtp_queue_delay: 2.0,
                tx_queue_size_factor: 1.0,
                queue_delay_guard: 0.3,
                loss_event_rate_scale: 0.8,
            },
            Era::Y2018 => StreamConfig {
                era,
                min_bps: 64e3,
                start_bps: 10e7,
                max_bps: 2e5,
                ramp_up_speed: 2.0,
                max_rtp_queue_delay: 0.5,
                tx_queue_size_factor: 0.3,
                queue_delay_guard: 0.1,
                loss_event_rate_scale: 0.9,
            },
        }
    }
}

/// The bit that upstream's `ackVector & (1 << k)` and `ackVector | (1 << k)` test or set:
/// `1 << k` is a 32-bit int there, so on x86 bit 31 is sign-extended into bits 31..63 when
/// widened to 64 bits and k >= 32 shifts by k mod 32.
pub fn int_bit(k: u32) -> u64 {
    match k {
        0..=30 => 1u64 << k,
        31 => 0xFFFF_FFFF_8000_0000,
        _ => 1u64 << (k % 32),
    }
}

/// glibc's `rand()` from its default state (seed 1): Pantheon's client never seeds it, so
/// every run of the upstream draws the same frame sizes. The additive feedback generator
/// r[i] = r[i-3] + r[i-31], initialised by the 16807 multiplicative congruential generator
/// and run 310 steps before the first output (glibc's TYPE_3 `random_r`).
pub struct GlibcRand {
    r: [u32; 34],
    i: usize,
}

impl GlibcRand {
    pub fn new(seed: u32) -> Self {
        let mut init = [0i64; 31];
        init[0] = i64::from(seed);
        for i in 1..31 {
            let v = 16807 * init[i - 1] % 2_147_483_647;
            init[i] = if v < 0 { v + 2_147_483_647 } else { v };
        }
        let mut r = [0u32; 34];
        for (i, v) in init.iter().enumerate() {
            r[i] = *v as u32;
        }
        r[31] = r[0];
        r[32] = r[1];
        r[33] = r[2];
        let mut g = GlibcRand { r, i: 34 };
        for _ in 34..344 {
            g.step();
        }
        g
    }

    fn step(&mut self) -> u32 {
        // A ring of the last 34 values: slot i % 34 holds r[i].
        let v = self.r[(self.i + 34 - 31) % 34].wrapping_add(self.r[(self.i + 34 - 3) % 34]);
        self.r[self.i % 34] = v;
        self.i += 1;
        v
    }

    /// The next value in 0..=RAND_MAX (2^31 - 1).
    pub fn rand(&mut self) -> u32 {
        self.step() >> 1
    }
}

pub const RAND_MAX: f64 = 2_147_483_647.0;

/// One RTP packet waiting in the sender's queue: its RTP size (media + 20) and number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtpPacket {
    pub size: i64,
    pub seq: u16,
}

/// The sender's RTP queue (RtpQueue.cpp): FIFO, with the size of the last frame pushed and
/// each packet's encoding time (c3370fd's ScreamTx reads the oldest one's age).
#[derive(Default)]
pub struct RtpQueue {
    packets: std::collections::VecDeque<(RtpPacket, u64)>,
    bytes: i64,
    last_frame_bytes: i64,
}

impl RtpQueue {
    pub fn push(&mut self, p: RtpPacket) {
        self.push_at(p, 0);
    }
    /// Queues `p`, encoded at `now` (µs).
    pub fn push_at(&mut self, p: RtpPacket, now: u64) {
        self.bytes += p.size;
        self.packets.push_back((p, now));
    }
    pub fn pop(&mut self) -> Option<RtpPacket> {
        let (p, _) = self.packets.pop_front()?;
        self.bytes -= p.size;
        Some(p)
    }
    pub fn next_size(&self) -> Option<i64> {
        self.packets.front().map(|p| p.0.size)
    }
    pub fn bytes(&self) -> i64 {
        self.bytes
    }
    pub fn len(&self) -> usize {
        self.packets.len()
    }
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }
    /// `getDelay`: the oldest packet's age in seconds, in upstream's single precision (the
    /// encoder stamps frames with `(float)` seconds).
    pub fn delay(&self, now: u64) -> f64 {
        self.packets.front().map_or(0.0, |&(_, at)| f64::from(now as f32 / 1e6 - (at / 1000) as f32 / 1000.0))
    }
    /// Drops everything (the size of the last frame stays, as upstream's `clear`).
    pub fn clear(&mut self) {
        self.packets.clear();
        self.bytes = 0;
    }
}

/// Pantheon's fake encoder (`VideoEnc(rtpQueue, 25, 0.1, false, false, 0)`): each frame holds
/// the target's worth of bytes for 1/25 s scaled by a random factor, cut into RTP packets of
/// up to 1200 media bytes, each 20 bytes bigger on the wire. db32b00: max(5000, target)/25/8
/// × U[0.9, 1.1]. c3370fd: the factor is 1 + r with r ← 0.8 r + U[-0.1, 0.1] (so it wanders),
/// and the RTP overhead of max(25, target/9600) packets/s × 160 bit is taken off the target
/// first, floored at 1000 bit/s.
pub struct Encoder {
    pub frame_rate: f64,
    pub jitter: f64,
    era: Era,
    target_bps: f64,
    next_seq: u16,
    rand: GlibcRand,
    /// c3370fd's running jitter (a file-scope `float`).
    rnd2: f32,
}

impl Encoder {
    pub fn new(frame_rate: f64, jitter: f64, rand: GlibcRand) -> Self {
        Self::for_era(Era::Y2017, frame_rate, jitter, rand)
    }

    pub fn for_era(era: Era, frame_rate: f64, jitter: f64, rand: GlibcRand) -> Self {
        Encoder { frame_rate, jitter, era, target_bps: 0.0, next_seq: 0, rand, rnd2: 0.0 }
    }

    /// The latest target given (bit/s).
    pub fn target(&self) -> f64 {
        self.target_bps
    }

    /// `setTargetBitrate`: the next frame follows the latest target given.
    pub fn set_target(&mut self, bps: f64) {
        self.target_bps = bps;
    }

    /// Encodes one frame into `queue`; returns its RTP bytes.
    pub fn encode(&mut self, queue: &mut RtpQueue) -> i64 {
        self.encode_at(queue, 0)
    }

    /// Encodes one frame at `now` (µs) into `queue`; returns its RTP bytes.
    pub fn encode_at(&mut self, queue: &mut RtpQueue, now: u64) -> i64 {
        let mut media = match self.era {
            Era::Y2017 => {
                let u = f64::from(self.rand.rand()) / RAND_MAX;
                let scale = 1.0 + self.jitter * 2.0 * (u - 0.5);
                (self.target_bps.max(MIN_FRAME_RATE_BPS) / self.frame_rate / 8.0 * scale) as i64
            }
            Era::Y2018 => {
                // Single precision as upstream: `(float)rand() / RAND_MAX` rounds RAND_MAX to 2^31.
                let u = self.rand.rand() as f32 / RAND_MAX as f32;
                let step = self.jitter as f32 * 2.0 * (u - 0.5);
                self.rnd2 = (0.8 * f64::from(self.rnd2) + f64::from(step)) as f32;
                let rnd = 1.0 + self.rnd2;
                let fps = self.frame_rate as f32;
                let target = self.target_bps as f32;
                let packets_per_s = fps.max(target / (MAX_RTP_MEDIA as f32 * 8.0));
                let overhead = packets_per_s * (RTP_OVERHEAD as f32 * 8.0);
                let bits = (target - overhead).max(1000.0);
                (f64::from(bits / fps) / 8.0 * f64::from(rnd)) as i64
            }
        };
        let mut frame = 0;
        while media > 0 {
            let chunk = media.min(MAX_RTP_MEDIA);
            media -= chunk;
            let size = chunk + RTP_OVERHEAD;
            queue.push_at(RtpPacket { size, seq: self.next_seq }, now);
            frame += size;
            self.next_seq = self.next_seq.wrapping_add(1);
        }
        queue.last_frame_bytes = frame;
        frame
    }
}

/// One RTP packet sent and not yet acked or declared lost.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    sent_us: u64,
    sent_ms: u32,
    size: i64,
    seq: u16,
    acked: bool,
    /// Counted as delivered once the highest acked number reached it.
    passed: bool,
}

/// Extends two 16-bit numbers so that one more than 20000 ahead of the other counts as wrapped.
fn extend(seq: u16, highest: u16) -> (u32, u32) {
    extend_by(seq, highest, 20000)
}

/// Extends two 16-bit numbers so that one more than `wrap` ahead of the other counts as wrapped.
fn extend_by(seq: u16, highest: u16, wrap: u32) -> (u32, u32) {
    let (mut s, mut h) = (u32::from(seq), u32::from(highest));
    if s < h && h - s > wrap {
        s += 65536;
    } else if s > h && s - h > wrap {
        h += 65536;
    }
    (s, h)
}

/// The sender's media stream (ScreamTx::Stream): target bitrate and measured rates.
pub struct Stream {
    cfg: StreamConfig,
    pub min_bps: f64,
    pub max_bps: f64,
    pub target_bps: f64,
    target_inflection_bps: f64,
    was_fast_start: bool,
    loss_event_flag: bool,
    queue_bits_avg: f64,
    last_adjust_us: u64,
    last_rate_update_us: u64,
    last_inflection_update_us: u64,
    acked_sent_us: u64,
    bytes_sent: i64,
    bytes_acked: i64,
    bytes_rtp: i64,
    pub rate_sent: f64,
    pub rate_acked: f64,
    pub rate_rtp: f64,
    rate_rtp_sum: f64,
    rate_rtp_sum_n: u32,
    rate_rtp_hist: [f64; RATE_RTP_HIST],
    rate_rtp_hist_at: usize,
    rate_rtp_median: f64,
    rtp_hist_short: [f64; RATE_UPDATE_HIST],
    acked_hist: [f64; RATE_UPDATE_HIST],
    sent_hist: [f64; RATE_UPDATE_HIST],
    hist_at: usize,
    init_us: u64,
    // c3370fd only.
    /// `targetRateScale`: the encoder is asked for this × the target, to make up for a coder
    /// that keeps missing it.
    target_rate_scale: f64,
    target_hist: [f64; TARGET_HIST],
    target_hist_at: usize,
    last_discard_us: u64,
    rtp_queue_discard: bool,
    repair_loss: bool,
    was_repair_loss: bool,
}

impl Stream {
    fn new(cfg: StreamConfig) -> Self {
        Stream {
            cfg,
            min_bps: cfg.min_bps,
            max_bps: cfg.max_bps,
            target_bps: cfg.start_bps.max(cfg.min_bps).min(cfg.max_bps),
            target_inflection_bps: 1.0,
            was_fast_start: false,
            loss_event_flag: false,
            queue_bits_avg: 0.0,
            last_adjust_us: 0,
            last_rate_update_us: 0,
            last_inflection_update_us: 0,
            acked_sent_us: 0,
            bytes_sent: 0,
            bytes_acked: 0,
            bytes_rtp: 0,
            rate_sent: 0.0,
            rate_acked: 0.0,
            rate_rtp: 0.0,
            rate_rtp_sum: 0.0,
            rate_rtp_sum_n: 0,
            rate_rtp_hist: [0.0; RATE_RTP_HIST],
            rate_rtp_hist_at: 0,
            rate_rtp_median: 0.0,
            rtp_hist_short: [0.0; RATE_UPDATE_HIST],
            acked_hist: [0.0; RATE_UPDATE_HIST],
            sent_hist: [0.0; RATE_UPDATE_HIST],
            hist_at: 0,
            init_us: 0,
            target_rate_scale: 1.0,
            target_hist: [0.0; TARGET_HIST],
            target_hist_at: 0,
            last_discard_us: 0,
            rtp_queue_discard: false,
            repair_loss: false,
            was_repair_loss: false,
        }
    }

    fn max_rate(&self) -> f64 {
        self.rate_sent.max(self.rate_acked)
    }

    /// c3370fd `updateTargetBitrateI`: the inflection point is the largest of the last three
    /// min(rate, target) values.
    fn update_inflection(&mut self, br: f64) {
        let v = br.min(self.target_bps);
        self.target_hist[self.target_hist_at] = v;
        self.target_hist_at = (self.target_hist_at + 1) % TARGET_HIST;
        self.target_inflection_bps = self.target_hist.iter().fold(v, |m, &x| m.max(x));
    }

    /// `Stream::updateRate`: rates over the last four ~50 ms intervals, and every 20 calls
    /// the mean of those stored as one of 21 values whose median bounds the target (db32b00;
    /// c3370fd instead moves the coder scale toward target / media rate by 5 %).
    fn update_rate(&mut self, now: u64) {
        if self.last_rate_update_us != 0 {
            let dt = (now - self.last_rate_update_us) as f64 / 1e6;
            self.sent_hist[self.hist_at] = self.bytes_sent as f64 * 8.0 / dt;
            self.acked_hist[self.hist_at] = self.bytes_acked as f64 * 8.0 / dt;
            self.rtp_hist_short[self.hist_at] = self.bytes_rtp as f64 * 8.0 / dt;
            if self.rate_rtp_hist[0] == 0.0 {
                self.rate_rtp_hist = [self.rtp_hist_short[self.hist_at]; RATE_RTP_HIST];
            }
            self.hist_at = (self.hist_at + 1) % RATE_UPDATE_HIST;
            let n = RATE_UPDATE_HIST as f64;
            self.rate_sent = self.sent_hist.iter().sum::<f64>() / n;
            self.rate_acked = self.acked_hist.iter().sum::<f64>() / n;
            self.rate_rtp = self.rtp_hist_short.iter().sum::<f64>() / n;
            if self.cfg.era == Era::Y2018 && self.rate_rtp > 0.0 {
                let scale = self.target_rate_scale * 0.95 + 0.05 * self.target_bps / self.rate_rtp;
                self.target_rate_scale = scale.clamp(0.8, 1.25);
            }
        }
        self.rate_rtp_sum += self.rate_rtp;
        self.rate_rtp_sum_n += 1;
        let per_second = (1_000_000 / RATE_UPDATE_INTERVAL_US) as u32;
        if self.rate_rtp_sum_n == per_second {
            self.rate_rtp_hist[self.rate_rtp_hist_at] = self.rate_rtp_sum / f64::from(per_second);
            self.rate_rtp_hist_at = (self.rate_rtp_hist_at + 1) % RATE_RTP_HIST;
            self.rate_rtp_sum = 0.0;
            self.rate_rtp_sum_n = 0;
            let mut sorted = self.rate_rtp_hist;
            sorted.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
            self.rate_rtp_median = sorted[RATE_RTP_HIST / 2];
        }
        self.bytes_sent = 0;
        self.bytes_acked = 0;
        self.bytes_rtp = 0;
        self.last_rate_update_us = now;
    }
}

/// The sender's congestion control (ScreamTx, one stream).
pub struct ScreamTx {
    era: Era,
    pub stream: Stream,
    in_flight: Vec<InFlight>,
    srtt_short_us: u64,
    srtt_us: u64,
    acked_owd: u32,
    base_owd: u32,
    base_owd_hist: [u32; BASE_OWD_HIST],
    base_owd_hist_at: usize,
    /// Queue delay in seconds (OWD above the base).
    pub queue_delay: f64,
    queue_delay_fraction_avg: f64,
    fraction_hist: [f64; QDELAY_FRACTION_HIST],
    fraction_hist_at: usize,
    pub queue_delay_trend: f64,
    pub queue_delay_target: f64,
    norm_hist: [f64; QDELAY_NORM_HIST],
    norm_hist_at: usize,
    sbd_var: f64,
    sbd_mean: f64,
    sbd_skew: f64,
    sbd_mean_short: f64,
    bytes_newly_acked: i64,
    pub mss: i64,
    pub cwnd: i64,
    cwnd_min: i64,
    inflight_hist_lo: [i64; BYTES_IN_FLIGHT_HIST],
    inflight_hist_hi: [i64; BYTES_IN_FLIGHT_HIST],
    inflight_hist_at: usize,
    inflight_max_lo: i64,
    inflight_max_hi: i64,
    acc_inflight_max: i64,
    n_acc_inflight_max: i64,
    rate_sent: f64,
    queue_delay_trend_mem: f64,
    loss_event: bool,
    was_loss_event: bool,
    loss_event_rate: f64,
    pub in_fast_start: bool,
    pub pacing_bps: f64,
    initialized: bool,
    last_srtt_update_us: u64,
    last_base_owd_add_us: u64,
    base_owd_reset_us: u64,
    last_fraction_hist_us: u64,
    last_inflight_hist_us: u64,
    last_congestion_us: u64,
    last_loss_event_us: u64,
    last_transmit_us: u64,
    next_transmit_us: u64,
    last_rate_update_us: u64,
    last_rtt_us: u64,
    // c3370fd only.
    /// Sum of the streams' max(sent, acked) rates, refreshed with them.
    max_rate: f64,
    last_cwnd_update_us: u64,
    /// The pacing interval (s), recomputed every 50 ms in `updateCwnd`.
    pace_interval: f64,
    pace_interval_us: u64,
    /// The RTP queue is emptied for 2 sRTT from here (`lastBaseDelayRefreshT_us`).
    last_base_delay_refresh_us: u64,
    queue_delay_min: f64,
    queue_delay_min_avg: f64,
}

/// What `is_ok_to_transmit` says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Send the head of the RTP queue now.
    Send,
    /// Ask again in this many seconds (pacing).
    Wait(f64),
    /// Nothing to send, or the window is full.
    Blocked,
}

impl ScreamTx {
    /// A db32b00 sender between these rates (Pantheon 2017: 64e3, 5e6).
    pub fn new(min_bps: f64, max_bps: f64) -> Self {
        let base = StreamConfig::pantheon(Era::Y2017);
        Self::with_config(StreamConfig { min_bps, start_bps: min_bps, max_bps, ..base })
    }

    /// The sender as Pantheon's client of `era` set it up.
    pub fn for_era(era: Era) -> Self {
        Self::with_config(StreamConfig::pantheon(era))
    }

    pub fn with_config(cfg: StreamConfig) -> Self {
        ScreamTx {
            era: cfg.era,
            stream: Stream::new(cfg),
            in_flight: Vec::new(),
            srtt_short_us: 0,
            srtt_us: 0,
            acked_owd: 0,
            base_owd: u32::MAX,
            base_owd_hist: [u32::MAX; BASE_OWD_HIST],
            base_owd_hist_at: 0,
            queue_delay: 0.0,
            queue_delay_fraction_avg: 0.0,
            fraction_hist: [0.0; QDELAY_FRACTION_HIST],
            fraction_hist_at: 0,
            queue_delay_trend: 0.0,
            queue_delay_target: QUEUE_DELAY_TARGET_MIN,
            norm_hist: [0.0; QDELAY_NORM_HIST],
            norm_hist_at: 0,
            sbd_var: 0.0,
            sbd_mean: 0.0,
            sbd_skew: 0.0,
            sbd_mean_short: 0.0,
            bytes_newly_acked: 0,
            mss: INIT_MSS,
            cwnd: cfg.era.init_cwnd(),
            cwnd_min: 2 * INIT_MSS,
            inflight_hist_lo: [0; BYTES_IN_FLIGHT_HIST],
            inflight_hist_hi: [0; BYTES_IN_FLIGHT_HIST],
            inflight_hist_at: 0,
            inflight_max_lo: 0,
            inflight_max_hi: 0,
            acc_inflight_max: 0,
            n_acc_inflight_max: 0,
            rate_sent: 0.0,
            queue_delay_trend_mem: 0.0,
            loss_event: false,
            was_loss_event: false,
            loss_event_rate: 0.0,
            in_fast_start: true,
            pacing_bps: 0.0,
            initialized: false,
            last_srtt_update_us: 0,
            last_base_owd_add_us: 0,
            base_owd_reset_us: 0,
            last_fraction_hist_us: 0,
            last_inflight_hist_us: 0,
            last_congestion_us: 0,
            last_loss_event_us: 0,
            last_transmit_us: 0,
            next_transmit_us: 0,
            last_rate_update_us: 0,
            last_rtt_us: 0,
            max_rate: 0.0,
            last_cwnd_update_us: 0,
            pace_interval: 0.0,
            pace_interval_us: 0,
            last_base_delay_refresh_us: 0,
            queue_delay_min: 1000.0,
            queue_delay_min_avg: 0.0,
        }
    }

    fn initialize(&mut self, now: u64) {
        self.initialized = true;
        self.last_srtt_update_us = now;
        self.last_base_owd_add_us = now;
        self.base_owd_reset_us = now;
        self.last_fraction_hist_us = now;
        self.last_loss_event_us = now;
        self.last_transmit_us = now;
        self.next_transmit_us = now;
        self.last_rate_update_us = now;
        self.last_rtt_us = now;
        self.last_base_delay_refresh_us = now + 1_000_000;
    }

    /// Smoothed RTT in seconds.
    pub fn srtt(&self) -> f64 {
        self.srtt_us as f64 / 1e6
    }

    pub fn bytes_in_flight(&self) -> i64 {
        self.in_flight.iter().map(|p| p.size).sum()
    }

    pub fn target_bitrate(&self) -> f64 {
        self.stream.target_bps
    }

    /// `getTargetBitrate` as the client hands it to the encoder. db32b00: the target. c3370fd:
    /// the target × the coder scale, or -1 once after a loss or an RTP queue discard (a
    /// key-frame request; Pantheon's client passes it on, so that frame is the minimum).
    pub fn encoder_target(&mut self) -> f64 {
        let s = &mut self.stream;
        if self.era == Era::Y2017 {
            return s.target_bps;
        }
        let refresh = std::mem::take(&mut s.rtp_queue_discard) || s.repair_loss;
        s.repair_loss = false;
        if refresh && !s.was_repair_loss {
            s.was_repair_loss = true;
            return -1.0;
        }
        s.was_repair_loss = false;
        s.target_rate_scale * s.target_bps
    }

    fn competing_flows(&self) -> bool {
        self.queue_delay_target > QUEUE_DELAY_TARGET_MIN
    }

    fn queue_delay_fraction(&self) -> f64 {
        self.queue_delay / self.queue_delay_target
    }

    /// `newMediaFrame`: adjust the target, count the frame's bytes, raise the MSS to the
    /// next packet's size.
    pub fn new_media_frame(&mut self, now: u64, queue: &mut RtpQueue, frame_bytes: i64) {
        if !self.initialized {
            self.initialize(now);
        }
        if self.era == Era::Y2017 {
            self.update_target_bitrate(now, queue);
        } else {
            self.update_target_bitrate_2018(now, queue);
            // c3370fd drops the frame (and the queue) for 2 sRTT from 1 s after the start,
            // to let the network queue drain for a fresh base OWD.
            if now.wrapping_sub(self.last_base_delay_refresh_us) < 2 * self.srtt_us {
                queue.clear();
                return;
            }
        }
        self.stream.bytes_rtp += frame_bytes;
        self.mss = self.mss.max(queue.next_size().unwrap_or(-1));
        self.cwnd_min = 2 * self.mss;
        if self.era == Era::Y2018 {
            self.cwnd = self.cwnd.max(self.cwnd_min);
        }
    }

    /// `isOkToTransmit`.
    pub fn is_ok_to_transmit(&mut self, now: u64, queue: &RtpQueue) -> Verdict {
        if !self.initialized {
            self.initialize(now);
        }
        // c3370fd doubles the rate update interval while under 50 kbit/s are acked.
        let slow = self.era == Era::Y2018 && self.stream.rate_acked < 50_000.0;
        let rate_interval = if slow { 2 * RATE_UPDATE_INTERVAL_US } else { RATE_UPDATE_INTERVAL_US };
        if now.wrapping_sub(self.last_rate_update_us) > rate_interval {
            self.stream.update_rate(now);
            self.rate_sent = self.stream.rate_sent;
            self.max_rate = self.stream.max_rate();
            self.last_rate_update_us = now;
        }
        // db32b00 returns early on an empty queue or a pacing wait; c3370fd keeps the
        // bookkeeping below first and reports the wait only for a packet the window allows.
        let mut wait = 0.0;
        if self.era == Era::Y2017 {
            if queue.is_empty() {
                return Verdict::Blocked;
            }
            if self.next_transmit_us > now + 1000 {
                return Verdict::Wait((self.next_transmit_us - now) as f64 / 1e6);
            }
        } else if self.next_transmit_us > now {
            // In seconds, single precision as upstream's return value.
            wait = f64::from((self.next_transmit_us - now) as f32 / 1e6);
        }
        self.inflight_max_lo =
            if self.n_acc_inflight_max > 0 { self.acc_inflight_max / self.n_acc_inflight_max } else { 0 };
        let inflight = self.bytes_in_flight();
        self.inflight_max_hi = self.inflight_max_hi.max(inflight);
        if now.wrapping_sub(self.last_inflight_hist_us) > BYTES_IN_FLIGHT_HIST_INTERVAL_US {
            self.inflight_hist_lo[self.inflight_hist_at] = self.inflight_max_lo;
            self.inflight_hist_hi[self.inflight_hist_at] = self.inflight_max_hi;
            self.inflight_hist_at = (self.inflight_hist_at + 1) % BYTES_IN_FLIGHT_HIST;
            self.last_inflight_hist_us = now;
            self.acc_inflight_max = 0;
            self.n_acc_inflight_max = 0;
            self.inflight_max_hi = 0;
            self.mss = INIT_MSS;
            self.cwnd_min = self.era.min_cwnd_mss_at_reset() * self.mss;
            if self.era == Era::Y2018 {
                self.cwnd = self.cwnd.max(self.cwnd_min);
            }
        }
        let Some(next_size) = queue.next_size() else {
            return Verdict::Blocked;
        };
        // The extra MSS while the delay is under target: db32b00 also at equality.
        let below = match self.era {
            Era::Y2017 => self.queue_delay <= self.queue_delay_target,
            Era::Y2018 => self.queue_delay < self.queue_delay_target,
        };
        let window = if below { self.cwnd + self.mss } else { self.cwnd };
        let full = inflight + next_size > window;
        if full && now.wrapping_sub(self.last_transmit_us) <= SEND_DEADLOCK_US {
            Verdict::Blocked
        } else if wait > 0.0 {
            Verdict::Wait(wait)
        } else {
            Verdict::Send
        }
    }

    /// `addTransmitted`: records the packet; returns the pacing interval in seconds (0 when
    /// pacing is off: it is on only while the averaged queue delay is above 10 % of target).
    /// db32b00 computes it here from this packet's size, c3370fd every 50 ms in `updateCwnd`
    /// from the MSS.
    pub fn add_transmitted(&mut self, now: u64, packet: RtpPacket) -> f64 {
        if !self.initialized {
            self.initialize(now);
        }
        let rec = InFlight {
            sent_us: now,
            sent_ms: (now / 1000) as u32,
            size: packet.size,
            seq: packet.seq,
            acked: false,
            passed: false,
        };
        if self.in_flight.len() >= MAX_TX_PACKETS {
            self.in_flight[0] = rec;
        } else {
            self.in_flight.push(rec);
        }
        self.stream.bytes_sent += packet.size;
        self.last_transmit_us = now;
        if self.era == Era::Y2018 {
            // c3370fd paces at the interval `updateCwnd` last computed.
            self.mss = self.mss.max(packet.size);
            self.cwnd_min = 2 * self.mss;
            self.cwnd = self.cwnd.max(self.cwnd_min);
            self.next_transmit_us = now + self.pace_interval_us;
            return self.pace_interval;
        }
        self.pacing_bps = MIN_PACING_BPS.max(self.cwnd as f64 * 8.0 / self.srtt().max(0.001));
        let tp = packet.size as f64 * 8.0 / self.pacing_bps;
        let pace = if self.queue_delay_fraction_avg > 0.1 { tp.max(0.0) } else { 0.0 };
        self.mss = self.mss.max(packet.size);
        self.cwnd_min = 2 * self.mss;
        self.next_transmit_us = now + (pace * 1e6) as u64;
        pace
    }

    /// `incomingFeedback`: `timestamp` is the receiver's clock (ms) when it got
    /// `highest_seq`; `ack_vector` bit k says `highest_seq - k - 1` arrived.
    pub fn incoming_feedback(&mut self, now: u64, timestamp: u32, highest_seq: u16, ack_vector: u64) {
        if !self.initialized {
            self.initialize(now);
        }
        self.acc_inflight_max += self.bytes_in_flight();
        self.n_acc_inflight_max += 1;
        for i in 0..self.in_flight.len() {
            let p = self.in_flight[i];
            if self.era == Era::Y2017 {
                for k in 0..ACK_VECTOR_BITS {
                    if ack_vector & int_bit(k) != 0 && p.seq == highest_seq.wrapping_sub(k as u16 + 1) {
                        self.in_flight[i].acked = true;
                    }
                }
            } else {
                // c3370fd: k = highest - seq - 1 in 16 bits, k <= 64, bit `1 << k` of a 64-bit
                // value (x86 takes the shift count mod 64, so k = 64 reads bit 0).
                let k = highest_seq.wrapping_sub(p.seq).wrapping_sub(1);
                if u32::from(k) <= ACK_VECTOR_BITS && ack_vector & (1u64 << (k % 64)) != 0 {
                    self.in_flight[i].acked = true;
                }
            }
            if p.seq == highest_seq {
                self.in_flight[i].acked = true;
                self.acked_owd = timestamp.wrapping_sub(p.sent_ms);
                let rtt = now - p.sent_us;
                self.srtt_short_us = (7 * self.srtt_short_us + rtt) / 8;
                if now - self.last_srtt_update_us > self.srtt_short_us {
                    self.srtt_us = (7 * self.srtt_us + self.srtt_short_us) / 8;
                    self.last_srtt_update_us = now;
                }
                self.stream.acked_sent_us = p.sent_us;
            }
        }
        let srtt_us = self.srtt_us;
        let acked_sent_us = self.stream.acked_sent_us;
        let mut newly = 0;
        let mut loss = false;
        let mut dropped = false;
        let last_loss = self.last_loss_event_us;
        self.in_flight.retain_mut(|p| {
            let (s, h) = extend(p.seq, highest_seq);
            if s <= h && !p.passed {
                newly += p.size;
                p.passed = true;
            }
            if p.sent_us + REORDER_TIME_US < acked_sent_us && !p.acked {
                if now - last_loss > srtt_us {
                    loss = true;
                }
                dropped = true;
                false
            } else {
                !p.acked
            }
        });
        self.bytes_newly_acked += newly;
        self.stream.bytes_acked += newly;
        // c3370fd: a lost packet makes the next `getTargetBitrate` a key-frame request.
        self.stream.repair_loss |= dropped && self.era == Era::Y2018;
        if loss {
            self.loss_event = true;
        }
        if self.loss_event {
            self.last_loss_event_us = now;
            self.stream.loss_event_flag = true;
        }
        match self.era {
            Era::Y2017 => self.update_cwnd(now),
            Era::Y2018 => self.update_cwnd_2018(now),
        }
    }

    /// db32b00 `Stream::updateTargetBitrate`, called for each new frame, acting every 200 ms.
    fn update_target_bitrate(&mut self, now: u64, queue: &mut RtpQueue) {
        let competing = self.competing_flows();
        let trend = self.queue_delay_trend;
        let trend_mem = self.queue_delay_trend_mem;
        let in_fast_start = self.in_fast_start;
        let s = &mut self.stream;
        if s.init_us == 0 {
            s.init_us = now;
        }
        if s.last_adjust_us == 0 {
            s.last_adjust_us = now;
        }
        let br = s.max_rate();
        if s.loss_event_flag {
            s.loss_event_flag = false;
            if now - s.last_inflection_update_us > 5_000_000 {
                s.target_inflection_bps = s.target_bps;
                s.last_inflection_update_us = now;
            }
            s.target_bps = s.min_bps.max(s.target_bps * s.cfg.loss_event_rate_scale);
            s.last_adjust_us = now;
        } else {
            if now - s.last_adjust_us < RATE_ADJUST_INTERVAL_US {
                return;
            }
            let mut scl_i = (s.target_bps - s.target_inflection_bps) / s.target_inflection_bps * 4.0;
            scl_i = (scl_i * scl_i).clamp(0.2, 1.0);
            let queue_bits = ((queue.bytes() - queue.last_frame_bytes).max(0) * 8) as f64;
            s.queue_bits_avg = s.queue_bits_avg * 0.5 + queue_bits * 0.5;
            let mut ramp = s.cfg.ramp_up_speed.min(s.target_bps / 2.0);
            if competing {
                ramp *= 2.0;
            }
            let step_s = RATE_ADJUST_INTERVAL_US as f64 / 1e6;
            let queue_s = queue_bits / br.max(s.target_bps);
            if queue_s > s.cfg.max_rtp_queue_delay && now - s.init_us > (s.cfg.max_rtp_queue_delay * 1e6) as u64 {
                queue.clear();
                s.target_bps = s.min_bps;
                s.queue_bits_avg = 0.0;
            } else if in_fast_start && queue_s < 0.1 {
                s.target_bps += ramp * step_s * scl_i;
                s.was_fast_start = true;
            } else {
                if s.was_fast_start {
                    s.was_fast_start = false;
                    if now - s.last_inflection_update_us > 5_000_000 {
                        s.target_inflection_bps = br.min(s.target_bps);
                        s.last_inflection_update_us = now;
                    }
                }
                let mut scl = s.cfg.queue_delay_guard * trend;
                if competing {
                    scl *= 0.05;
                }
                let mut inc = br * (1.0 - scl) - s.cfg.tx_queue_size_factor * s.queue_bits_avg - s.target_bps;
                if queue_bits > 12000.0 && inc > 0.0 {
                    inc = 0.0;
                }
                if inc > 0.0 {
                    s.was_fast_start = true;
                    if !competing {
                        inc *= scl_i;
                        inc = inc.min(ramp * step_s);
                    }
                }
                s.target_bps += inc;
                let rtp_queue_delay = if br > 1e5 { queue_bits / br } else { 0.0 };
                if rtp_queue_delay > 0.02 {
                    if now - s.last_inflection_update_us > 5_000_000 {
                        s.target_inflection_bps = s.rate_acked.min(s.target_bps);
                        s.last_inflection_update_us = now;
                    }
                    s.target_bps *= 0.95;
                }
            }
            s.last_adjust_us = now;
        }
        if !competing {
            let limit = br.max(s.rate_rtp.max(s.rate_rtp_median)) * (2.0 - trend_mem);
            s.target_bps = s.target_bps.min(limit);
        }
        s.target_bps = s.target_bps.max(s.min_bps).min(s.max_bps);
    }

    /// c3370fd `Stream::updateTargetBitrate` (shared bottleneck detection is off there, so
    /// no competing-flow terms): on a loss event ×0.9; otherwise every 200 ms either drop an
    /// RTP queue whose oldest packet waited > 0.5 s (at most once a second), or in fast start
    /// with < 0.1 s of media queued add ramp·0.2 s·sclI, or move toward
    /// (1 + 0.05·min(1, 50k/target))·br·(1 − 0.1·trend) − 0.3·queued bits, an increase capped
    /// at ramp·0.2 s and none while > 12000 bits wait, a decrease only while the coder's rate
    /// is within [0.8, 2] × target; no increase once the target exceeds 1.5 × br.
    fn update_target_bitrate_2018(&mut self, now: u64, queue: &mut RtpQueue) {
        let trend = self.queue_delay_trend;
        let in_fast_start = self.in_fast_start;
        let s = &mut self.stream;
        let br = s.max_rate();
        if s.init_us == 0 {
            s.init_us = now;
            s.last_discard_us = now;
        }
        if s.last_adjust_us == 0 {
            s.last_adjust_us = now;
        }
        if s.loss_event_flag {
            s.loss_event_flag = false;
            if now - s.last_inflection_update_us > 2_000_000 {
                s.update_inflection(br);
                s.last_inflection_update_us = now;
            }
            s.target_bps = s.min_bps.max(s.target_bps * s.cfg.loss_event_rate_scale);
            s.last_adjust_us = now;
        } else {
            if now - s.last_adjust_us < RATE_ADJUST_INTERVAL_US {
                return;
            }
            let scl_i =
                ((s.target_bps - s.target_inflection_bps) / s.target_inflection_bps * 4.0).powi(2).clamp(0.2, 1.0);
            let queue_bits = ((queue.bytes() - queue.last_frame_bytes).max(0) * 8) as f64;
            s.queue_bits_avg = s.queue_bits_avg * 0.5 + queue_bits * 0.5;
            let ramp = s.cfg.ramp_up_speed.min(s.target_bps * 0.5);
            let step_s = RATE_ADJUST_INTERVAL_US as f64 / 1e6;
            if queue.delay(now) > s.cfg.max_rtp_queue_delay
                && now - s.last_discard_us > MIN_RTP_QUEUE_DISCARD_INTERVAL_US
            {
                queue.clear();
                s.rtp_queue_discard = true;
                s.last_discard_us = now;
                s.target_rate_scale = 1.0;
                s.queue_bits_avg = 0.0;
            } else if in_fast_start && queue_bits / br.max(s.target_bps) < 0.1 {
                // Priority 1: sqrt(priority) = 1.
                let mut inc = ramp * step_s * scl_i;
                if s.target_bps > br * 1.5 {
                    inc = 0.0;
                }
                s.target_bps += inc;
                s.was_fast_start = true;
            } else {
                if s.was_fast_start {
                    s.was_fast_start = false;
                    if now - s.last_inflection_update_us > 2_000_000 {
                        s.update_inflection(br);
                        s.last_inflection_update_us = now;
                    }
                }
                let scl = s.cfg.queue_delay_guard * trend;
                let inc_scale = 1.0 + 0.05 * (50_000.0 / s.target_bps).min(1.0);
                let mut inc =
                    inc_scale * br * (1.0 - scl) - s.cfg.tx_queue_size_factor * s.queue_bits_avg - s.target_bps;
                if queue_bits > 12000.0 && inc > 0.0 {
                    inc = 0.0;
                }
                if inc > 0.0 {
                    s.was_fast_start = true;
                    inc = (inc * scl_i).min(ramp * step_s);
                    if s.target_bps > br * 1.5 {
                        inc = 0.0;
                    }
                } else if s.rate_rtp < s.target_bps * 0.8 || s.rate_rtp > s.target_bps * 2.0 {
                    // The coder, not the network, is off the target: keep it.
                    inc = 0.0;
                }
                s.target_bps += inc;
            }
            s.last_adjust_us = now;
        }
        s.target_bps = s.target_bps.max(s.min_bps).min(s.max_bps);
    }

    fn estimate_owd(&mut self, now: u64) -> u32 {
        self.base_owd = self.base_owd.min(self.acked_owd);
        if now - self.last_base_owd_add_us >= self.era.base_owd_interval_us() {
            self.base_owd_hist[self.base_owd_hist_at] = self.base_owd;
            self.base_owd_hist_at = (self.base_owd_hist_at + 1) % BASE_OWD_HIST;
            self.last_base_owd_add_us = now;
            self.base_owd = u32::MAX;
        }
        self.acked_owd
    }

    fn base_owd(&self) -> u32 {
        self.base_owd_hist.iter().fold(self.base_owd, |m, &v| m.min(v))
    }

    fn max_inflight_hi(&self) -> i64 {
        if self.inflight_hist_hi[self.inflight_hist_at] == 0 {
            0
        } else {
            *self.inflight_hist_hi.iter().max().unwrap_or(&0)
        }
    }

    fn max_inflight_lo(&self) -> i64 {
        if self.inflight_hist_lo[self.inflight_hist_at] == 0 {
            0
        } else {
            *self.inflight_hist_lo.iter().max().unwrap_or(&0)
        }
    }

    /// `computeQueueDelayTrend`: lag-1 autocorrelation of the last 20 queue-delay fractions
    /// times their running average, in [0, 1].
    fn compute_trend(&mut self) {
        self.queue_delay_trend = 0.0;
        let n = QDELAY_FRACTION_HIST;
        let ordered: Vec<f64> = (0..n).map(|i| self.fraction_hist[(self.fraction_hist_at + i) % n]).collect();
        let avg = ordered.iter().sum::<f64>() / n as f64;
        let (mut prev, mut a0, mut a1) = (0.0, 0.0, 0.0);
        for v in ordered {
            let x = v - avg;
            a0 += x * x;
            a1 += x * prev;
            prev = x;
        }
        if a0 > 0.0 {
            self.queue_delay_trend = (a1 / a0 * self.queue_delay_fraction_avg).clamp(0.0, 1.0);
        }
    }

    /// `computeSbd`: mean, short mean and variance of the normalised queue delays; the
    /// skew accumulates across calls (upstream never resets it).
    fn compute_sbd(&mut self) {
        let n = QDELAY_NORM_HIST;
        self.sbd_mean = 0.0;
        self.sbd_mean_short = 0.0;
        self.sbd_var = 0.0;
        for i in 0..n {
            let v = self.norm_hist[(self.norm_hist_at + i) % n];
            self.sbd_mean += v;
            if i >= n - QDELAY_NORM_HIST_SHORT {
                self.sbd_mean_short += v;
            }
        }
        self.sbd_mean /= n as f64;
        self.sbd_mean_short /= QDELAY_NORM_HIST_SHORT as f64;
        let mut skew_sum = 0.0;
        for i in 0..n {
            let d = self.norm_hist[(self.norm_hist_at + i) % n] - self.sbd_mean;
            self.sbd_var += d * d;
            skew_sum += d * d * d;
        }
        self.sbd_var /= n as f64;
        self.sbd_skew = (self.sbd_skew + skew_sum) / n as f64;
    }

    /// Stores the queue-delay fraction `n` times in the 20-sample history and recomputes the
    /// trend and its slowly decaying memory.
    fn push_fraction_hist(&mut self, n: usize) {
        for _ in 0..n {
            self.fraction_hist[self.fraction_hist_at] = self.queue_delay_fraction();
            self.fraction_hist_at = (self.fraction_hist_at + 1) % QDELAY_FRACTION_HIST;
        }
        self.compute_trend();
        self.queue_delay_trend_mem =
            (self.queue_delay_trend_mem * self.era.trend_mem_decay()).max(self.queue_delay_trend);
    }

    /// The window's loss response (×0.6, fast start ends); without a loss, once per sRTT, the
    /// loss event rate's update.
    fn cwnd_loss_step(&mut self, now: u64) -> bool {
        if self.loss_event {
            self.cwnd = self.cwnd_min.max((LOSS_BETA * self.cwnd as f64) as i64);
            self.loss_event = false;
            self.last_congestion_us = now;
            self.in_fast_start = false;
            self.was_loss_event = true;
            return true;
        }
        if (now - self.last_rtt_us) as f64 > self.srtt() * 1e6 {
            self.loss_event_rate =
                if self.was_loss_event { 0.99 * self.loss_event_rate + 0.01 } else { self.loss_event_rate * 0.99 };
            self.was_loss_event = false;
            self.last_rtt_us = now;
        }
        false
    }

    /// Congestion window validation: not far above what was recently in flight, the max of
    /// the high and low in-flight histories weighted by `weight` (a delay trend) × `headroom`;
    /// at sRTT < 10 ms at least 1.5 × that; at least the minimum. Then fast start resumes
    /// after 5 s with a trend ≤ 0.2.
    fn finish_cwnd(&mut self, now: u64, inflight: i64, weight: f64, headroom: f64) {
        let hi = self.inflight_max_hi.max(self.max_inflight_hi());
        let lo = inflight.max(self.max_inflight_lo());
        let max_inflight = (hi as f64 * (1.0 - weight) + lo as f64 * weight) * headroom;
        if max_inflight > 5000.0 {
            self.cwnd = self.cwnd.min(max_inflight as i64);
        }
        if self.srtt() < 0.01 && self.queue_delay_trend < 0.1 {
            let floor = ((self.rate_sent * 0.01 / 8.0) as i64).max((max_inflight * 1.5) as i64);
            self.cwnd = self.cwnd.max(floor);
        }
        self.cwnd = self.cwnd.max(self.cwnd_min);
        if self.queue_delay_trend > 0.2 {
            self.last_congestion_us = now;
        } else if now.wrapping_sub(self.last_congestion_us) > 5_000_000 && !self.in_fast_start {
            self.in_fast_start = true;
            self.last_congestion_us = now;
        }
        self.bytes_newly_acked = 0;
    }

    /// db32b00 `updateCwnd`.
    fn update_cwnd(&mut self, now: u64) {
        let owd = self.estimate_owd(now);
        self.queue_delay = f64::from(owd.wrapping_sub(self.base_owd())) / TIMESTAMP_RATE;
        if self.queue_delay > (2.0 * self.srtt()).max(0.2) && now - self.base_owd_reset_us > 10_000_000 {
            self.base_owd_hist = [u32::MAX; BASE_OWD_HIST];
            self.base_owd = u32::MAX;
            self.base_owd_reset_us = now;
        }
        self.queue_delay_fraction_avg = 0.9 * self.queue_delay_fraction_avg + 0.1 * self.queue_delay_fraction();
        if now - self.last_fraction_hist_us > QDELAY_FRACTION_HIST_INTERVAL_US {
            self.push_fraction_hist(1);
            if self.era.sbd() {
                self.update_delay_target();
            }
            self.last_fraction_hist_us = now;
        }
        let off_target = (self.queue_delay_target - self.queue_delay) / self.queue_delay_target;
        let inflight = self.bytes_in_flight();
        if !self.cwnd_loss_step(now) {
            let acked = self.bytes_newly_acked as f64;
            if self.in_fast_start {
                if self.queue_delay_trend < 0.2 {
                    if inflight as f64 * 1.5 > self.cwnd as f64 {
                        self.cwnd += self.bytes_newly_acked;
                    }
                } else {
                    self.in_fast_start = false;
                }
            } else if off_target > 0.0 {
                if inflight as f64 * 1.25 > self.cwnd as f64 {
                    let inc = off_target * acked * self.mss as f64 / self.cwnd as f64;
                    self.cwnd += (inc + 0.5) as i64;
                }
            } else {
                self.cwnd += (off_target * acked * self.mss as f64 / self.cwnd as f64) as i64;
                self.last_congestion_us = now;
            }
        }
        let weight = self.queue_delay_trend_mem;
        self.finish_cwnd(now, inflight, weight, 1.0);
    }

    /// Shared bottleneck detection (db32b00): the normalised queue delay's history may raise
    /// the delay target toward 0.3 s.
    fn update_delay_target(&mut self) {
        self.norm_hist[self.norm_hist_at] = self.queue_delay / QUEUE_DELAY_TARGET_MIN;
        self.norm_hist_at = (self.norm_hist_at + 1) % QDELAY_NORM_HIST;
        self.compute_sbd();
        let oh = QUEUE_DELAY_TARGET_MIN * (self.sbd_mean_short + self.sbd_var.sqrt());
        if self.loss_event_rate > 0.002 && self.sbd_mean_short > 0.5 && self.sbd_var < 0.2 {
            self.queue_delay_target = QUEUE_DELAY_TARGET_MAX.min(oh * 1.5);
        } else if self.sbd_var < 0.2 && self.sbd_skew < 0.05 {
            self.queue_delay_target = QUEUE_DELAY_TARGET_MIN.max(QUEUE_DELAY_TARGET_MAX.min(oh));
        } else if oh < self.queue_delay_target {
            self.queue_delay_target = QUEUE_DELAY_TARGET_MIN.max((self.queue_delay_target * 0.99).max(oh));
        } else {
            self.queue_delay_target = QUEUE_DELAY_TARGET_MIN.max(self.queue_delay_target * 0.999);
        }
    }

    /// c3370fd `updateCwnd`: the acked bytes that may grow the window are capped at
    /// 1.25 × the max rate × the time since the last update (2 MSS below 100 kbit/s); fast
    /// start grows by them while in flight × 1.5 + acked > cwnd; otherwise below the target
    /// cwnd += off·acked·mss/cwnd (while in flight × 1.2 + acked > cwnd), above it cwnd −=
    /// min(2·|off|·acked·mss/cwnd, cwnd/4), which below 100 kbit/s also lowers the target by
    /// that fraction. Every 50 ms the pacing interval becomes mss / (1.5 × cwnd/sRTT) while
    /// the averaged delay fraction > 0.1 (else 0), and the fraction history takes one sample
    /// per 50 ms elapsed. The base OWD is reset when the smoothed minimum queue delay stays
    /// above a quarter of the target for 20 s.
    fn update_cwnd_2018(&mut self, now: u64) {
        let dt = if self.last_cwnd_update_us == 0 {
            self.last_cwnd_update_us = now;
            0.001
        } else {
            (now - self.last_cwnd_update_us) as f64 / 1e6
        };
        let acked = self.bytes_newly_acked as f64;
        let acked_limited =
            if self.max_rate > 1e5 { acked.min(1.25 * self.max_rate * dt / 8.0) } else { 2.0 * self.mss as f64 };
        let owd = self.estimate_owd(now);
        self.queue_delay = f64::from(owd.wrapping_sub(self.base_owd())) / TIMESTAMP_RATE;
        self.queue_delay_min = self.queue_delay_min.min(self.queue_delay);
        if self.queue_delay_min_avg > 0.25 * self.queue_delay_target && now - self.base_owd_reset_us > 20_000_000 {
            self.queue_delay_min_avg = 0.0;
            self.queue_delay = 0.0;
            self.base_owd_hist = [u32::MAX; BASE_OWD_HIST];
            self.base_owd = u32::MAX;
            self.base_owd_reset_us = now;
        }
        self.queue_delay_fraction_avg = 0.9 * self.queue_delay_fraction_avg + 0.1 * self.queue_delay_fraction();
        if now - self.last_fraction_hist_us > QDELAY_FRACTION_HIST_INTERVAL_US {
            self.pace_interval = 0.0;
            if self.queue_delay_fraction_avg > 0.1 {
                let pacing_bps = PACING_HEADROOM * MIN_PACING_BPS.max(self.cwnd as f64 * 8.0 / self.srtt().max(0.001));
                // Single precision as upstream's `paceInterval`.
                self.pace_interval = f64::from((self.mss as f64 * 8.0 / pacing_bps).max(0.0) as f32);
            }
            self.pace_interval_us = (self.pace_interval as f32 * 1e6) as u64;
            self.queue_delay_min_avg = if self.queue_delay_min < self.queue_delay_min_avg {
                self.queue_delay_min
            } else {
                0.001 * self.queue_delay_min + 0.999 * self.queue_delay_min_avg
            };
            self.queue_delay_min = 1000.0;
            let n = ((now - self.last_fraction_hist_us) / QDELAY_FRACTION_HIST_INTERVAL_US) as usize;
            self.push_fraction_hist(n);
            self.last_fraction_hist_us = now;
        }
        let off_target = (self.queue_delay_target - self.queue_delay) / self.queue_delay_target;
        let inflight = self.bytes_in_flight();
        if !self.cwnd_loss_step(now) {
            let mss = self.mss as f64;
            if self.in_fast_start {
                if self.queue_delay_trend < 0.2 {
                    if inflight as f64 * 1.5 + acked > self.cwnd as f64 {
                        self.cwnd = (self.cwnd as f64 + acked_limited) as i64;
                    }
                } else {
                    self.in_fast_start = false;
                }
            } else if off_target > 0.0 {
                if inflight as f64 * 1.2 + acked > self.cwnd as f64 {
                    let inc = GAIN_UP * off_target * acked_limited * mss / self.cwnd as f64;
                    self.cwnd += (inc + 0.5) as i64;
                }
            } else {
                let delta = -(GAIN_DOWN * off_target * acked * mss / self.cwnd as f64);
                let delta = (delta as i64).min(self.cwnd / 4);
                self.cwnd -= delta;
                if self.max_rate < 1e5 {
                    let factor = 1.0 - delta as f64 / self.cwnd as f64;
                    let s = &mut self.stream;
                    s.target_bps = (s.target_bps * factor).min(s.max_bps).max(s.min_bps);
                }
                self.last_congestion_us = now;
            }
        }
        let weight = self.queue_delay_trend;
        self.finish_cwnd(now, inflight, weight, MAX_INFLIGHT_HEADROOM);
        self.last_cwnd_update_us = now;
    }
}

/// The receiver's state for the one stream (ScreamRx::Stream).
#[derive(Default)]
pub struct ScreamRx {
    era: Era,
    /// c3370fd: the first packet counts its predecessor as the previous highest.
    first_received: bool,
    highest_seq: u16,
    receive_ms: u32,
    ack_vector: u64,
    pending: bool,
    /// When the last feedback went out (µs, receiver's clock).
    pub last_feedback_us: u64,
}

/// One feedback message's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feedback {
    pub highest_seq: u16,
    pub ack_vector: u64,
    /// Receiver's clock (ms) when the last RTP packet arrived.
    pub receive_ms: u32,
}

impl ScreamRx {
    pub fn for_era(era: Era) -> Self {
        ScreamRx { era, ..Default::default() }
    }

    /// `receive`: the ack vector shifts in the previous highest number; an older packet
    /// sets its bit. db32b00 sets bits with a 32-bit `1 << k` ([`int_bit`]) and treats
    /// numbers 20000 apart as wrapped; c3370fd uses a 64-bit shift, 1000 apart, and on the
    /// first packet takes its predecessor as the previous highest (so that one is acked).
    pub fn receive(&mut self, arrival_us: u64, seq: u16) {
        let (wrap, bit): (u32, fn(u32) -> u64) = match self.era {
            Era::Y2017 => (20000, int_bit),
            Era::Y2018 => (1000, |k| 1u64 << k),
        };
        if self.era == Era::Y2018 && !self.first_received {
            self.first_received = true;
            self.highest_seq = seq.wrapping_sub(1);
        }
        let (s, h) = extend_by(seq, self.highest_seq, wrap);
        if s >= h {
            let diff = (s - h) as u16;
            if diff != 0 {
                if u32::from(diff) >= ACK_VECTOR_BITS {
                    self.ack_vector = 0;
                } else {
                    self.ack_vector = (self.ack_vector << diff) | bit(u32::from(diff) - 1);
                }
            }
            self.highest_seq = seq;
        } else {
            let diff = (h - s) as u16;
            if u32::from(diff) < ACK_VECTOR_BITS {
                self.ack_vector |= bit(u32::from(diff) - 1);
            }
        }
        self.receive_ms = (arrival_us as f64 / TIMESTAMP_RATE) as u32;
        self.pending = true;
    }

    pub fn has_pending(&self) -> bool {
        self.pending
    }

    /// `getFeedback`: the pending feedback, if any, stamped as sent at `now`.
    pub fn take_feedback(&mut self, now: u64) -> Option<Feedback> {
        if !self.pending {
            return None;
        }
        self.pending = false;
        self.last_feedback_us = now;
        Some(Feedback { highest_seq: self.highest_seq, ack_vector: self.ack_vector, receive_ms: self.receive_ms })
    }
}
