//! Copa as Pantheon ran it in 2017: genericCC `5101b0a` (venkatarun95/genericCC), the
//! `sender` built with `cctype=markovian delta_conf=constant_delta:1` under `MIN_RTT=1000000`
//! (Pantheon's `src/copa.py`, StanfordSNR/pantheon 97c91c4).
//!
//! The law, as `MarkovianCC` (`markoviancc.cc`) and the send loop `CTCP<T>::send_data`
//! (`ctcp.hh`) implement it at that commit:
//!
//! * **RTT.** `onACK` feeds every ACK's sample into `rtt_acked`, a `PlainEwma` whose gain
//!   `alpha_rtt` is 1: the "average" is the latest single sample. `min_rtt` is the minimum
//!   over the flow (seeded with `MIN_RTT` = 10⁶ ms, so in effect the first sample).
//! * **Target** (`update_intersend_time`, on every ACK but the flow's first):
//!   `target = rtt / (rtt − min_rtt)`, infinite when the sample equals the minimum. The
//!   configured δ is parsed but never used: the target is that of δ = 1.
//! * **Slow start** (from the start): `W += 1` per ACK; it ends for good once `W ≥ target`.
//! * **Afterwards** `W += 1/W` when `W < target`, else `W −= 1/W`, then `W ≥ 2`. No
//!   velocity, no once-per-RTT logic: one step per ACK toward the latest sample's target.
//! * **Window.** The first window is `num_probe_pkts` = 2. The loop sends while
//!   `seq < largest_ack + 1 + W`, where `largest_ack` is the highest acknowledged sequence
//!   number plus one (−1 before any ACK): up to `W` packets before the first ACK, then
//!   fewer than `W + 1` packets sent after the highest acknowledged one. Packets below it
//!   that never came back stop counting; nothing else frees the window (no retransmission,
//!   no loss timeout).
//! * **Pacing.** A packet may also go only when `last_send + intersend ≤ now`, with
//!   `intersend = 0.5·rtt/W` on the same latest sample (0 until the second ACK); each
//!   send moves `last_send` on by one `intersend`, never back to `now` (the loop's reset
//!   fires only when `last_send` is more than ten gaps *ahead* of the clock). The pacer
//!   thus banks every idle gap: after the first round trip it lags the clock by at least
//!   an RTT (the window allows `W` per RTT, the pacer `2W`, so the lag only grows) and
//!   the window alone clocks the sends. The port keeps the rule anyway, as a gate in
//!   `cwnd` with its own timer, and leaves the transport's pacer open.
//! * **Loss** is no signal: nothing calls `onDupACK`, and `onTimeout` (which would only
//!   end slow start) needs the loop's poll to time out with `last_send` over 1 s behind
//!   the clock, which its timeout arithmetic allows only for gaps near 1 s (RTTs of
//!   seconds); the port leaves it out.
//!
//! Over a smooth bottleneck the law settles at one packet queued (`W = BDP + 1`, where
//! the target `W/(W − BDP)` equals `W`). But `min_rtt` is the flow's luckiest sample and
//! the target is taken from each single sample: where samples scatter a few ms above the
//! minimum with no queue at all (host scheduling, the emulator's timing), most targets
//! sit near `rtt / scatter`, 2 ms of scatter on a 56 ms path giving ~28 packets against
//! a 47-packet BDP, and the link stays partly empty. Over the engine's 10 Mbit/s, 28 ms
//! emulator the upstream build and this port both deliver 5–6 Mbit/s (Pantheon 2017:
//! 4.95). The tests below show both sides.
//!
//! Port decisions: upstream sends 1500-byte UDP payloads (`packet_size`, ctcp.hh), 1528-byte
//! IP datagrams that a 1500-byte MTU fragments into 1500 + 48 bytes; so does the port
//! ([`DATAGRAM_BYTES`]): at 2 Mbit/s the 48-byte tail waits for the link's next delivery
//! opportunity, 6 ms later, and that delays every datagram's ACK. The transport's loss rule is
//! `Reorder(1)` (a packet below the highest acknowledged one is gone, as upstream stops
//! counting it), and where upstream would wait forever for a window whose every packet
//! was lost, the port gives them up after [`STALL_TIMEOUT`].

use std::time::Duration;

use super::{AckEvent, Controller, LossEvent, LossRule};

/// genericCC's `packet_size`: the UDP payload of every datagram, fragmented in IP.
pub const DATAGRAM_BYTES: u64 = 1500;
/// `num_probe_pkts`: the first window; the law runs from ACK number `num_probe_pkts`.
const PROBE_PACKETS: u64 = 2;
/// Lower bound on the window outside slow start.
const MIN_WINDOW: f64 = 2.0;
/// `MIN_RTT` from Pantheon's wrapper (ms): the seed of the minimum.
const SEED_MIN_RTT_MS: f64 = 1_000_000.0;
/// Upstream's intersend time is in ms; `last_send` is reset only when this many gaps ahead.
const HOPELESS_GAPS: f64 = 10.0;
/// Not upstream: how long an unacknowledged packet counts before the port gives it up.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The transport's own pacer is left open: upstream paces by its `last_send` rule only.
const UNPACED: f64 = 1e12;

#[derive(Clone, Debug)]
pub struct Copa2017 {
    /// UDP payload of one datagram: the window's unit in bytes.
    mss: u64,
    /// `_the_window`, packets.
    window: f64,
    slow_start: bool,
    /// Latest RTT sample and the flow's minimum, ms.
    rtt_ms: f64,
    min_rtt_ms: f64,
    /// `num_pkts_acked`.
    acks: u64,
    /// `_intersend_time`, ms.
    intersend_ms: f64,
    /// The send loop's `_last_send_time`, ms since the flow started.
    last_send_ms: f64,
    /// When the pacer next lets a packet go, if it is holding one back now.
    pacer_closed_until: Option<Duration>,
}

fn ms(t: Duration) -> f64 {
    t.as_secs_f64() * 1e3
}

impl Copa2017 {
    /// `_mss` is the transport's packet: upstream's datagram has its own size.
    pub fn new(_mss: u64) -> Self {
        Self {
            mss: DATAGRAM_BYTES,
            window: PROBE_PACKETS as f64,
            slow_start: true,
            rtt_ms: 0.0,
            min_rtt_ms: SEED_MIN_RTT_MS,
            acks: 0,
            intersend_ms: 0.0,
            last_send_ms: 0.0,
            pacer_closed_until: None,
        }
    }

    /// The window in packets (`_the_window`).
    pub fn window(&self) -> f64 {
        self.window
    }

    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    /// Packets the loop lets out past the highest acknowledged one.
    fn packet_limit(&self) -> f64 {
        if self.acks == 0 {
            self.window
        } else {
            self.window + 1.0
        }
    }

    /// `target = rtt / (rtt − min_rtt)` on the latest sample.
    fn target(&self) -> f64 {
        let queueing = self.rtt_ms - self.min_rtt_ms;
        if queueing == 0.0 {
            f64::MAX
        } else {
            self.rtt_ms / queueing
        }
    }

    /// `update_intersend_time`: the per-ACK window step and the new gap.
    fn step(&mut self) {
        let target = self.target();
        if self.slow_start {
            self.window += 1.0;
            if self.window >= target {
                self.slow_start = false;
            }
        } else {
            if self.window < target {
                self.window += 1.0 / self.window;
            } else {
                self.window -= 1.0 / self.window;
            }
            self.window = self.window.max(MIN_WINDOW);
        }
        self.intersend_ms = 0.5 * self.rtt_ms / self.window;
    }

    /// Whether the loop's pacing test `last_send + intersend ≤ now` holds back a packet.
    /// (Rounded up to the nanosecond, so the timer set for that instant finds it open.)
    fn check_pacer(&mut self, now: Duration) {
        let open_at = Duration::from_nanos(((self.last_send_ms + self.intersend_ms) * 1e6).ceil().max(0.0) as u64);
        self.pacer_closed_until = (open_at > now).then_some(open_at);
    }
}

impl Controller for Copa2017 {
    fn name(&self) -> &'static str {
        "copa-2017"
    }

    fn on_ack(&mut self, ack: &AckEvent) {
        let sample = ms(ack.rtt);
        self.rtt_ms = sample;
        self.min_rtt_ms = self.min_rtt_ms.min(sample);
        if self.acks + 1 >= PROBE_PACKETS {
            self.step();
        }
        self.acks += 1;
        self.check_pacer(ack.now);
    }

    fn on_loss(&mut self, _loss: &LossEvent) {}

    fn on_send(&mut self, now: Duration, _seq: u64) {
        let now_ms = ms(now);
        // A zero gap with `last_send` ahead divides to +inf, as upstream's does.
        let ahead = (self.last_send_ms - now_ms) / self.intersend_ms;
        if ahead > HOPELESS_GAPS {
            self.last_send_ms = now_ms;
        } else {
            self.last_send_ms += self.intersend_ms;
        }
        self.check_pacer(now);
    }

    fn cwnd(&self) -> u64 {
        // A closed pacer holds everything back (the transport still lets one packet go
        // when none is in flight, which upstream's zero first gap allows anyway).
        if self.pacer_closed_until.is_some() {
            return 0;
        }
        (self.packet_limit() * self.mss as f64).ceil() as u64
    }

    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        UNPACED
    }

    fn payload_bytes(&self) -> Option<u64> {
        Some(DATAGRAM_BYTES)
    }

    fn timer_deadline(&self) -> Option<Duration> {
        self.pacer_closed_until
    }

    fn on_timer(&mut self, now: Duration) {
        self.check_pacer(now);
    }

    fn loss_rule(&self) -> LossRule {
        LossRule::Reorder(1)
    }

    fn loss_timeout(&self) -> Option<Duration> {
        Some(STALL_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{self, Link, PAYLOAD};
    use crate::transport::core::SenderCore;
    use crate::transport::receiver::ReceiverFlow;
    use crate::transport::wire::{Ack, ACK_BYTES};
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, VecDeque};

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1e3)
    }

    fn ack_at(now_ms: f64, rtt_ms: f64) -> AckEvent {
        AckEvent {
            now: ms(now_ms),
            seq: 0,
            sent_at: ms((now_ms - rtt_ms).max(0.0)),
            rtt: ms(rtt_ms),
            one_way_delay_us: 0,
            acked_bytes: PAYLOAD,
            bytes_in_flight: 0,
            next_seq: 0,
            delivery_rate: None,
            srtt: ms(rtt_ms),
        }
    }

    /// A controller past slow start with the minimum RTT set to `min_rtt` ms.
    fn settled(min_rtt: f64, window: f64) -> Copa2017 {
        let mut c = Copa2017::new(PAYLOAD);
        c.on_ack(&ack_at(100.0, min_rtt));
        c.on_ack(&ack_at(101.0, 2.0 * min_rtt));
        assert!(!c.in_slow_start());
        c.window = window;
        c
    }

    #[test]
    fn first_window_is_two_packets_then_one_more_past_the_highest_ack() {
        let mut c = Copa2017::new(PAYLOAD);
        assert_eq!(c.cwnd(), 2 * DATAGRAM_BYTES);
        // The first ACK only measures; the window is unchanged but counts from the ACK.
        c.on_ack(&ack_at(60.0, 56.0));
        assert_eq!(c.window(), 2.0);
        assert_eq!(c.cwnd(), 3 * DATAGRAM_BYTES);
        // The second runs slow start: +1.
        c.on_ack(&ack_at(61.0, 56.0));
        assert_eq!(c.window(), 3.0);
        assert_eq!(c.cwnd(), 4 * DATAGRAM_BYTES);
    }

    #[test]
    fn slow_start_adds_one_per_ack_until_the_window_reaches_the_target() {
        let mut c = Copa2017::new(PAYLOAD);
        c.on_ack(&ack_at(50.0, 50.0));
        // Samples at the minimum: the target is unbounded, slow start goes on.
        for i in 0..20 {
            c.on_ack(&ack_at(51.0 + i as f64, 50.0));
        }
        assert_eq!(c.window(), 22.0);
        assert!(c.in_slow_start());
        // 60 ms against 50: target 6 < 23, so this step (+1) is the last of slow start.
        c.on_ack(&ack_at(80.0, 60.0));
        assert_eq!(c.window(), 23.0);
        assert!(!c.in_slow_start());
        // A sample back at the minimum does not restart it.
        c.on_ack(&ack_at(81.0, 50.0));
        assert!(!c.in_slow_start());
        assert!((c.window() - (23.0 + 1.0 / 23.0)).abs() < 1e-12);
    }

    #[test]
    fn each_ack_moves_the_window_one_over_w_toward_the_latest_samples_target() {
        let mut c = settled(50.0, 20.0);
        // 52 ms: target 52/2 = 26 > 20, up by 1/20.
        c.on_ack(&ack_at(200.0, 52.0));
        assert!((c.window() - 20.05).abs() < 1e-12);
        // 55 ms: target 11 < W, down by 1/W: only the latest sample counts.
        let w = c.window();
        c.on_ack(&ack_at(201.0, 55.0));
        assert!((c.window() - (w - 1.0 / w)).abs() < 1e-12);
        // The configured delta (1) is the only one: 5 ms of queue means 11 packets, whatever
        // the window, and the window never goes below 2.
        let mut c = settled(50.0, 2.2);
        for i in 0..10 {
            c.on_ack(&ack_at(300.0 + i as f64, 1000.0));
        }
        assert_eq!(c.window(), 2.0);
    }

    #[test]
    fn loss_is_no_signal() {
        let mut c = settled(50.0, 30.0);
        c.on_loss(&LossEvent { now: ms(300.0), seq: 5, sent_at: ms(240.0), bytes: PAYLOAD, bytes_in_flight: 0 });
        assert_eq!(c.window(), 30.0);
        assert_eq!(c.loss_rule(), LossRule::Reorder(1));
    }

    #[test]
    fn pacer_gap_is_half_an_rtt_over_the_window_and_banks_idle_time() {
        let mut c = settled(50.0, 9.0);
        // 60 ms sample: target 6, W 9 -> 9 - 1/9; gap = 30 ms / W.
        c.on_ack(&ack_at(1000.0, 60.0));
        let gap = 0.5 * 60.0 / c.window();
        assert!((c.intersend_ms - gap).abs() < 1e-12);
        // last_send is far behind the clock (0 ms at t = 1 s): every send moves it by one
        // gap only, so a whole window goes at once.
        for seq in 0..10 {
            assert!(c.timer_deadline().is_none());
            assert!(c.cwnd() > 0);
            c.on_send(ms(1000.0), seq);
        }
        assert!((c.last_send_ms - 10.0 * gap).abs() < 1e-9);
        // A pacer caught up with the clock holds the next packet back for one gap.
        let mut c = settled(50.0, 9.0);
        c.on_ack(&ack_at(0.5, 60.0));
        c.last_send_ms = 0.5;
        c.on_send(ms(0.5), 0);
        assert_eq!(c.cwnd(), 0);
        let open = c.timer_deadline().expect("pacer closed");
        assert!((open.as_secs_f64() * 1e3 - (0.5 + 2.0 * gap)).abs() < 1e-3);
        c.on_timer(open);
        assert!(c.timer_deadline().is_none());
        assert!(c.cwnd() > 0);
    }

    /// Over a smooth bottleneck (no jitter) the law settles at `W = BDP + 1`: full link,
    /// about one packet queued.
    #[test]
    fn smooth_link_settles_at_one_packet_queued() {
        let link = Link::reference();
        let o = sim::run(Box::new(Copa2017::new(PAYLOAD)), &link, Duration::from_secs(20));
        let p50 = o.delay_percentile_ms(50.0, Duration::from_secs(5));
        eprintln!("smooth: utilization {:.3}, p50 {p50:.2} ms", o.utilization());
        assert!(o.utilization() > 0.9, "utilization {}", o.utilization());
        // 20 ms propagation + 1 ms transmission; the queue in packets is the rest (1 ms each).
        let queue = p50 - 21.0;
        assert!((0.0..=3.0).contains(&queue), "median queue {queue} packets");
        assert_eq!(o.dropped_packets, 0);
    }

    /// Mahimahi's `mm-link` over `10mbps_trace` (delivery opportunities at 1, 2, 3, 4 and
    /// 6 ms of every 6 ms, 1504 bytes each, a packet may span opportunities) in both
    /// directions, inside `mm-delay 28`, unbounded queues: Pantheon's 2017 emulator. Both
    /// shells keep time in whole milliseconds of their own clocks (`timestamp()`), whose
    /// tick phases differ: a packet read during link millisecond `m` waits for an
    /// opportunity after `m`, and one read during delay millisecond `m` leaves at `m + 28`.
    struct TraceLink {
        /// (token, bytes, link millisecond it arrived in).
        queue: VecDeque<(u64, u64, u64)>,
        head_left: u64,
        next_opportunity: u64,
        phase: Duration,
    }

    const OFFSETS_MS: [u64; 5] = [1, 2, 3, 4, 6];
    const OPPORTUNITY_BYTES: u64 = 1504;

    fn shell_ms(t: Duration, phase: Duration) -> u64 {
        (t.saturating_sub(phase).as_micros() / 1000) as u64
    }

    impl TraceLink {
        fn new(phase: Duration) -> Self {
            Self { queue: VecDeque::new(), head_left: 0, next_opportunity: 0, phase }
        }

        fn opportunity_ms(k: u64) -> u64 {
            k / 5 * 6 + OFFSETS_MS[(k % 5) as usize]
        }

        fn push(&mut self, token: u64, bytes: u64, now: Duration) {
            self.queue.push_back((token, bytes, shell_ms(now, self.phase)));
        }

        /// The next opportunity with something to deliver (those at which the queue was
        /// empty are skipped).
        fn next_event(&mut self) -> Option<Duration> {
            let (_, _, arrived) = *self.queue.front()?;
            while Self::opportunity_ms(self.next_opportunity) <= arrived {
                self.next_opportunity += 1;
            }
            Some(self.phase + Duration::from_millis(Self::opportunity_ms(self.next_opportunity)))
        }

        /// Uses the next opportunity: the tokens of the packets it completes.
        fn deliver(&mut self) -> Vec<u64> {
            let at = Self::opportunity_ms(self.next_opportunity);
            self.next_opportunity += 1;
            let mut budget = OPPORTUNITY_BYTES;
            let mut done = Vec::new();
            while let Some(&(token, bytes, arrived)) = self.queue.front() {
                if arrived >= at || budget == 0 {
                    break;
                }
                if self.head_left == 0 {
                    self.head_left = bytes;
                }
                let take = budget.min(self.head_left);
                budget -= take;
                self.head_left -= take;
                if self.head_left == 0 {
                    self.queue.pop_front();
                    done.push(token);
                }
            }
            done
        }
    }

    /// Runs a controller over the trace link for `secs`: (Mbit/s of IP bytes delivered
    /// after `from`, one-way delays in ms after `from`).
    fn run_mahimahi(cc: Box<dyn Controller>, secs: u64, from: Duration, jitter: Duration) -> (f64, Vec<f64>) {
        const DELAY_MS: u64 = 28;
        const HEADERS: u64 = 28;
        let link_phase = Duration::from_micros(300);
        let delay_phase = Duration::from_micros(700);
        let delayed = |t: Duration| delay_phase + Duration::from_millis(shell_ms(t, delay_phase) + DELAY_MS);
        let payload = cc.payload_bytes().unwrap_or(PAYLOAD);
        let mut core = SenderCore::new(cc, 1, payload, Duration::from_millis(60));
        let mut receiver = ReceiverFlow::new(1);
        let (mut up, mut down) = (TraceLink::new(link_phase), TraceLink::new(link_phase));
        // Packets in mm-delay: (due, token); tokens index `sent` and `acks`.
        let mut to_receiver: BinaryHeap<Reverse<(Duration, u64)>> = BinaryHeap::new();
        let mut to_link: BinaryHeap<Reverse<(Duration, u64)>> = BinaryHeap::new();
        // ACKs out of the downlink, waiting for the sender to be scheduled.
        let mut to_sender: VecDeque<(Duration, u64)> = VecDeque::new();
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut wakeup_delay = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            jitter.mul_f64((rng >> 11) as f64 / (1u64 << 53) as f64)
        };
        let mut sent: Vec<(u64, Duration)> = Vec::new();
        let mut acks: Vec<Ack> = Vec::new();
        let mut delays = Vec::new();
        let mut bytes = 0u64;
        let end = Duration::from_secs(secs);
        let mut now = Duration::ZERO;
        while now < end {
            let candidates = [
                core.next_wakeup().map(|t| t.max(now)),
                up.next_event(),
                down.next_event(),
                to_receiver.peek().map(|r| r.0 .0),
                to_link.peek().map(|r| r.0 .0),
                to_sender.front().map(|a| a.0),
            ];
            let (which, at) = candidates
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.map(|t| (i, t)))
                .min_by_key(|&(i, t)| (t, i))
                .expect("something is always pending");
            now = at;
            match which {
                0 => {
                    core.on_timer(now);
                    while core.send_allowed_at().is_some_and(|t| t <= now) {
                        let seq = core.next_seq();
                        core.on_send(now);
                        up.push(sent.len() as u64, payload + HEADERS, now);
                        sent.push((seq, now));
                    }
                }
                1 => {
                    for token in up.deliver() {
                        to_receiver.push(Reverse((delayed(now), token)));
                    }
                }
                // The sender sits inside mm-link: an ACK out of the downlink is home, and is
                // read once the sender runs.
                2 => {
                    for token in down.deliver() {
                        let at = (now + wakeup_delay()).max(to_sender.back().map_or(now, |a| a.0));
                        to_sender.push_back((at, token));
                    }
                }
                5 => {
                    let (_, token) = to_sender.pop_front().expect("peeked");
                    core.on_ack(now, &acks[token as usize]);
                }
                3 => {
                    let Reverse((_, token)) = to_receiver.pop().expect("peeked");
                    let (seq, sent_at) = sent[token as usize];
                    if now >= from {
                        delays.push((now - sent_at).as_secs_f64() * 1e3);
                        bytes += payload + HEADERS;
                    }
                    let ack = receiver.on_data(seq, sent_at.as_micros() as u64, now.as_micros() as u64);
                    to_link.push(Reverse((delayed(now), acks.len() as u64)));
                    acks.push(ack);
                }
                _ => {
                    let Reverse((_, token)) = to_link.pop().expect("peeked");
                    down.push(token, ACK_BYTES as u64 + HEADERS, now);
                }
            }
        }
        let mbps = bytes as f64 * 8.0 / (end - from).as_secs_f64() / 1e6;
        (mbps, delays)
    }

    fn percentile(v: &mut [f64], p: f64) -> f64 {
        v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        v[((p / 100.0) * (v.len() - 1) as f64).round() as usize]
    }

    /// Where samples scatter above the flow's minimum, the latest one's target sits near
    /// `rtt / scatter`, under the BDP: the link is left partly empty. The scatter here is
    /// the sender's wakeup after an ACK leaves the link (uniform up to `jitter`); with none,
    /// the window fills the link (Pantheon 2017: 4.95 Mbit/s of 10, p95 33.0 ms).
    #[test]
    fn rtt_scatter_leaves_the_mahimahi_link_partly_empty() {
        let from = Duration::from_secs(5);
        let outcome = |jitter_us: u64| {
            let jitter = Duration::from_micros(jitter_us);
            let (mbps, mut delays) = run_mahimahi(Box::new(Copa2017::new(PAYLOAD)), 30, from, jitter);
            let p95 = percentile(&mut delays, 95.0);
            eprintln!("mahimahi 10 Mbit/s 28 ms, wakeup jitter {jitter_us} us: {mbps:.2} Mbit/s, p95 {p95:.1} ms");
            (mbps, p95)
        };
        let (full, _) = outcome(0);
        assert!(full > 9.5, "no scatter: {full} Mbit/s");
        let (some, p95) = outcome(2000);
        assert!((4.0..=7.5).contains(&some), "2 ms scatter: {some} Mbit/s");
        assert!(p95 < 33.0, "p95 {p95} ms");
        let (more, _) = outcome(4000);
        assert!(more < some, "4 ms scatter: {more} Mbit/s");
    }
}
