//! Virtual-time tests of the scream port: the pure laws, and the client and server event
//! handlers driven over a model of one bottleneck like the transport's `crate::sim` (a
//! DropTail queue drained at a fixed rate, then a fixed delay; feedback comes back after
//! the same delay).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::app::{Client, Server, FRAME_INTERVAL_MS};
use super::endpoint::{encode_rtcp, encode_rtp, RTP_HEADER_BYTES};
use super::law::{int_bit, Encoder, Era, Feedback, GlibcRand, RtpPacket, RtpQueue, ScreamRx, ScreamTx, Verdict};

/// IPv4 + UDP headers.
const HEADERS: u64 = 28;

#[test]
fn glibc_rand_matches_the_default_sequence() {
    let mut r = GlibcRand::new(1);
    let first: Vec<u32> = (0..5).map(|_| r.rand()).collect();
    assert_eq!(first, vec![1_804_289_383, 846_930_886, 1_681_692_777, 1_714_636_915, 1_957_747_793]);
}

#[test]
fn int_bits_follow_x86_int_shifts() {
    assert_eq!(int_bit(0), 1);
    assert_eq!(int_bit(30), 1 << 30);
    assert_eq!(int_bit(31), 0xFFFF_FFFF_8000_0000);
    assert_eq!(int_bit(33), 2);
}

#[test]
fn frames_follow_the_target_and_are_cut_into_rtp_packets() {
    let mut enc = Encoder::new(25.0, 0.1, GlibcRand::new(1));
    let mut q = RtpQueue::default();
    // Below 5 kbit/s a frame still holds 25 bytes of media (+ 20 of RTP overhead).
    enc.set_target(0.0);
    let b = enc.encode(&mut q);
    assert!((42..=48).contains(&b), "{b}");
    assert_eq!(q.len(), 1);
    q.clear();
    // 1 Mbit/s: 5000 ± 10 % media bytes, five packets, four of 1220.
    enc.set_target(1e6);
    let mut total = 0;
    for _ in 0..100 {
        let before = q.len();
        total += enc.encode(&mut q);
        let n = q.len() - before;
        assert!((4..=5).contains(&n));
    }
    let mean_media = (total - 20 * q.len() as i64) as f64 / 100.0;
    assert!((mean_media - 5000.0).abs() < 150.0, "{mean_media}");
    let sizes: Vec<i64> = std::iter::from_fn(|| q.pop().map(|p| p.size)).take(4).collect();
    assert_eq!(&sizes[..3], &[1220, 1220, 1220]);
}

#[test]
fn the_receiver_acks_the_highest_number_and_a_vector_of_earlier_ones() {
    let mut rx = ScreamRx::default();
    for seq in [0u16, 1, 2, 4] {
        rx.receive(1_000_000 + u64::from(seq) * 1000, seq);
    }
    let fb = rx.take_feedback(1_010_000).unwrap();
    // 4 arrived; of 3, 2, 1, 0 (bits 0..3) 3 is missing.
    assert_eq!(fb, Feedback { highest_seq: 4, ack_vector: 0b1110, receive_ms: 1004 });
    assert_eq!(rx.take_feedback(1_011_000), None, "nothing new, no feedback");
    rx.receive(1_012_000, 3);
    assert_eq!(rx.take_feedback(1_012_000).unwrap().ack_vector, 0b1111);
}

/// Sends `n` packets of 1220 bytes at `t`; at `t + rtt` acks all but the last `keep` with
/// queue delay `qdelay_ms` (OWD above a base of 20 ms), leaving those in flight.
fn exchange(tx: &mut ScreamTx, seq: &mut u16, t: u64, n: usize, keep: usize, rtt: u64, qdelay_ms: u32) {
    let mut q = RtpQueue::default();
    for _ in 0..n {
        q.push(RtpPacket { size: 1220, seq: *seq });
        let p = q.pop().unwrap();
        tx.add_transmitted(t, p);
        *seq = seq.wrapping_add(1);
    }
    let acked = n - keep;
    let last = seq.wrapping_sub(1 + keep as u16);
    let vector = if acked >= 2 { u64::MAX >> (64 - (acked - 1).min(63)) } else { 0 };
    tx.incoming_feedback(t + rtt, (t / 1000) as u32 + 20 + qdelay_ms, last, vector);
}

#[test]
fn the_window_grows_below_the_delay_target_and_shrinks_above_it() {
    let mut tx = ScreamTx::new(64e3, 5e6);
    let mut seq = 0u16;
    // Settle the base OWD and sRTT with no queue delay.
    let mut t = 1_000_000;
    for _ in 0..40 {
        exchange(&mut tx, &mut seq, t, 2, 0, 40_000, 0);
        t += 50_000;
    }
    tx.in_fast_start = false;
    // With most of the window still in flight, an ack at low delay grows it ...
    let w0 = tx.cwnd;
    let n = (w0 / 1220 + 2) as usize;
    exchange(&mut tx, &mut seq, t, n, n - 2, 40_000, 10);
    assert!(tx.queue_delay > 0.009 && tx.queue_delay < 0.011);
    assert!(tx.cwnd > w0, "{} -> {}", w0, tx.cwnd);
    // ... and one well above the 100 ms target shrinks it.
    t += 100_000;
    let w1 = tx.cwnd;
    exchange(&mut tx, &mut seq, t, 4, 2, 40_000, 250);
    assert!(tx.queue_delay > 0.2);
    assert!(tx.cwnd < w1, "{} -> {}", w1, tx.cwnd);
}

#[test]
fn a_full_window_blocks_until_200_ms_pass_without_a_send() {
    let mut tx = ScreamTx::new(64e3, 5e6);
    let mut q = RtpQueue::default();
    for s in 0..10 {
        q.push(RtpPacket { size: 1220, seq: s });
    }
    let mut sent = 0;
    while tx.is_ok_to_transmit(1_000_000, &q) == Verdict::Send {
        let p = q.pop().unwrap();
        tx.add_transmitted(1_000_000, p);
        sent += 1;
    }
    // The first window is 5000 bytes (+ one mss while below the delay target).
    assert_eq!(sent, 5);
    assert_eq!(tx.is_ok_to_transmit(1_150_000, &q), Verdict::Blocked);
    assert_eq!(tx.is_ok_to_transmit(1_201_000, &q), Verdict::Send);
}

/// One bottleneck: `rate` bit/s for IP packets, `delay_ms` each way, `queue` packets.
struct Path {
    rate: f64,
    delay_us: u64,
    queue: Option<usize>,
    /// Drop packet number n (from 0) when n % k == k / 2: deterministic loss.
    drop_every: Option<u64>,
}

#[derive(Debug)]
struct Run {
    /// (arrival µs, one-way delay µs, IP bytes) of every delivered packet.
    arrivals: Vec<(u64, u64, u64)>,
    dropped: u64,
    feedbacks: u64,
    targets: Vec<(u64, f64)>,
    /// What each frame asked of the encoder (2018: target × coder scale, or -1).
    coder_targets: Vec<(u64, f64)>,
}

impl Run {
    fn mbps(&self, from_us: u64, to_us: u64) -> f64 {
        let bytes: u64 = self.arrivals.iter().filter(|a| a.0 >= from_us && a.0 < to_us).map(|a| a.2).sum();
        bytes as f64 * 8.0 / ((to_us - from_us) as f64)
    }
    fn p95_delay_ms(&self) -> f64 {
        let mut d: Vec<u64> = self.arrivals.iter().map(|a| a.1).collect();
        d.sort_unstable();
        d[(d.len() - 1) * 95 / 100] as f64 / 1000.0
    }
}

#[derive(Debug)]
enum Ev {
    TxTimer,
    Frame,
    Feedback(Feedback),
    Arrival { seq: u16, sent: u64, bytes: u64 },
    FbTimer,
}

/// Runs Pantheon's 2017 client and server over `path` for `secs` seconds of virtual time.
fn simulate(path: &Path, secs: u64) -> Run {
    simulate_era(path, secs, Era::Y2017)
}

/// Runs Pantheon's client and server of `era` over `path` for `secs` seconds of virtual
/// time; the server's clock runs 1 s ahead (it starts first).
fn simulate_era(path: &Path, secs: u64, era: Era) -> Run {
    let server_ahead: u64 = 1_000_000;
    let ms = |t: u64| t / 1000 * 1000;
    let mut client = Client::for_era(era);
    let mut server = Server::for_era(era);
    let mut heap: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut evs: std::collections::HashMap<u64, Ev> = std::collections::HashMap::new();
    let mut id = 0u64;
    evs.insert(id, Ev::Frame);
    heap.push(Reverse((FRAME_INTERVAL_MS * 1000, id)));
    let mut link_free = 0u64;
    let mut in_queue: std::collections::VecDeque<u64> = Default::default();
    let mut sent = 0u64;
    let mut run =
        Run { arrivals: Vec::new(), dropped: 0, feedbacks: 0, targets: Vec::new(), coder_targets: Vec::new() };
    let end = secs * 1_000_000;
    // Pop events; handlers' outputs are scheduled as new events.
    let mut pending: Vec<(u64, Ev)> = Vec::new();
    while let Some(Reverse((t, eid))) = heap.pop() {
        if t > end {
            break;
        }
        let ev = evs.remove(&eid).unwrap();
        let client_actions = match ev {
            Ev::TxTimer => Some(client.on_tx_timer(ms(t))),
            Ev::Frame => {
                pending.push((t + FRAME_INTERVAL_MS * 1000, Ev::Frame));
                run.targets.push((t, client.tx.target_bitrate()));
                let a = client.on_frame(ms(t));
                run.coder_targets.push((t, client.encoder.target()));
                Some(a)
            }
            Ev::Feedback(fb) => Some(client.on_feedback(ms(t), fb)),
            Ev::Arrival { seq, sent, bytes } => {
                run.arrivals.push((t, t - sent, bytes));
                let now = ms(t + server_ahead);
                let a = server.on_packet(now, now, seq);
                if let Some(fb) = a.send {
                    run.feedbacks += 1;
                    assert_eq!(encode_rtcp(fb).len(), 18);
                    pending.push((t + path.delay_us, Ev::Feedback(fb)));
                }
                if let Some(m) = a.arm_ms {
                    pending.push((t + m * 1000, Ev::FbTimer));
                }
                None
            }
            Ev::FbTimer => {
                let a = server.on_timer(ms(t + server_ahead));
                if let Some(fb) = a.send {
                    run.feedbacks += 1;
                    pending.push((t + path.delay_us, Ev::Feedback(fb)));
                }
                None
            }
        };
        if let Some(a) = client_actions {
            for p in a.send {
                let bytes = encode_rtp(p).len() as u64 + HEADERS;
                assert_eq!(bytes, p.size as u64 + RTP_HEADER_BYTES as u64 + HEADERS);
                while in_queue.front().is_some_and(|&d| d <= t) {
                    in_queue.pop_front();
                }
                sent += 1;
                if path.queue.is_some_and(|q| in_queue.len() >= q)
                    || path.drop_every.is_some_and(|k| (sent - 1) % k == k / 2)
                {
                    run.dropped += 1;
                    continue;
                }
                let start = link_free.max(t);
                link_free = start + (bytes as f64 * 8.0 / path.rate * 1e6) as u64;
                in_queue.push_back(link_free);
                pending.push((link_free + path.delay_us, Ev::Arrival { seq: p.seq, sent: t, bytes }));
            }
            if let Some(m) = a.arm_tx_ms {
                pending.push((t + m * 1000, Ev::TxTimer));
            }
        }
        for (t, e) in pending.drain(..) {
            id += 1;
            evs.insert(id, e);
            heap.push(Reverse((t, id)));
        }
    }
    run
}

/// Pantheon's 2017 known emulator: 10 Mbit/s, 28 ms each way, unbounded queue.
fn emulator_a() -> Path {
    Path { rate: 10e6, delay_us: 28_000, queue: None, drop_every: None }
}

#[test]
fn over_pantheons_known_emulator_scream_ramps_slowly_and_keeps_delay_low() {
    let run = simulate(&emulator_a(), 30);
    // Pantheon 2017 (emulator A): 1.14 Mbit/s, p95 31.1 ms; the reference build here gave
    // about 1 Mbit/s over 20 s. App-limited far below the 10 Mbit/s link.
    let tput = run.mbps(0, 30_000_000);
    assert!(tput > 0.5 && tput < 2.5, "{tput}");
    let early = run.mbps(0, 2_000_000);
    let late = run.mbps(20_000_000, 30_000_000);
    assert!(early < 0.5 && late > early * 2.0, "slow ramp: {early} then {late}");
    let p95 = run.p95_delay_ms();
    assert!(p95 < 40.0, "{p95}");
    assert_eq!(run.dropped, 0);
    // Feedback at most every 5 ms (plus timer rounding): well under one per packet.
    assert!(run.feedbacks as f64 <= 30.0 * 1000.0 / 5.0);
    assert!((run.feedbacks as usize) < run.arrivals.len());
}

#[test]
fn the_encoder_follows_the_target_and_the_target_starts_at_64_kbps() {
    let run = simulate(&emulator_a(), 10);
    assert_eq!(run.targets[0].1, 64e3);
    // The target only grows at first, and by at most 10 % (fast start below 400 kbit/s)
    // per 200 ms adjustment.
    for w in run.targets.windows(2).take(40) {
        assert!(w[1].1 >= w[0].1 && w[1].1 <= w[0].1 * 1.1 + 1.0, "{:?}", w);
    }
    // Over a second the media rate the link carried is near the encoder's target then.
    let t = 8_000_000;
    let target = run.targets.iter().find(|x| x.0 >= t).unwrap().1;
    let carried = run.mbps(t - 1_000_000, t) * 1e6;
    assert!(carried > 0.5 * target && carried < 1.5 * target, "{carried} vs {target}");
}

/// The upstream C++ (ScreamTx/ScreamRx/RtpQueue/VideoEnc at db32b00 with Pantheon's client and
/// server handlers, glibc's rand) driven by this same virtual-time model delivered exactly
/// these counts over 30 s: the port follows it packet for packet.
#[test]
fn the_port_reproduces_the_upstream_run_in_the_same_model() {
    let run = simulate(&emulator_a(), 30);
    assert_eq!((run.arrivals.len(), run.feedbacks, run.dropped), (3079, 2629, 0));
    let lossy = Path { rate: 12e6, delay_us: 40_000, queue: Some(100), drop_every: Some(100) };
    let run = simulate(&lossy, 30);
    assert_eq!((run.arrivals.len(), run.feedbacks, run.dropped), (741, 741, 7));
}

/// Per-second trajectory over emulator A, or with `SCREAM_LOSSY` set over 12 Mbit/s, 40 ms,
/// every 100th packet dropped (for comparison with a harness around the upstream C++).
#[test]
#[ignore]
fn print_trajectory() {
    let path = if std::env::var_os("SCREAM_LOSSY").is_some() {
        Path { rate: 12e6, delay_us: 40_000, queue: Some(100), drop_every: Some(100) }
    } else {
        emulator_a()
    };
    let run = simulate(&path, 30);
    for s in 0..30u64 {
        let t = run.targets.iter().find(|x| x.0 >= s * 1_000_000).unwrap().1;
        eprintln!("{s:2}s {:.3} Mbit/s target {:.0}", run.mbps(s * 1_000_000, (s + 1) * 1_000_000), t);
    }
    eprintln!(
        "p95 {} feedbacks {} packets {} dropped {}",
        run.p95_delay_ms(),
        run.feedbacks,
        run.arrivals.len(),
        run.dropped
    );
    eprintln!("tput 0-20 {:.3} 0-30 {:.3}", run.mbps(0, 20_000_000), run.mbps(0, 30_000_000));
}

// Pantheon's 2018-2020 scream (StanfordSNR/scream f099118 over EricssonResearch/scream c3370fd).

#[test]
fn the_2018_stream_starts_and_stays_at_its_200_kbps_cap() {
    let tx = ScreamTx::for_era(Era::Y2018);
    // 100 Mbit/s start clamped to the 200 kbit/s maximum Pantheon's arguments set.
    assert_eq!(tx.target_bitrate(), 2e5);
    assert_eq!(tx.cwnd, 200);
    let run = simulate_era(&emulator_a(), 10, Era::Y2018);
    assert!(run.targets.iter().all(|t| t.1 <= 2e5 && t.1 >= 64e3));
}

#[test]
fn the_2018_encoder_takes_off_rtp_overhead_and_its_jitter_wanders() {
    let mut enc = Encoder::for_era(Era::Y2018, 25.0, 0.1, GlibcRand::new(1));
    let mut q = RtpQueue::default();
    enc.set_target(2e5);
    let mut media = Vec::new();
    for i in 0..500 {
        let b = enc.encode_at(&mut q, i * 40_000);
        // About 1000 bytes a frame: one packet, two when the wandering jitter passes +22 %.
        assert!((1..=2).contains(&q.len()));
        media.push((b - 20) as f64);
        q.clear();
    }
    // (200000 − 25 packets/s × 160 bit) / 25 / 8 = 980 media bytes on average.
    let mean = media.iter().sum::<f64>() / media.len() as f64;
    assert!((mean - 980.0).abs() < 30.0, "{mean}");
    // r ← 0.8 r + U[−0.1, 0.1]: successive frames are positively correlated.
    let d: Vec<f64> = media.iter().map(|m| m - mean).collect();
    let lag1 = d.windows(2).map(|w| w[0] * w[1]).sum::<f64>() / d.iter().map(|x| x * x).sum::<f64>();
    assert!(lag1 > 0.6, "{lag1}");
    // A key-frame request (-1) gives the 1 kbit/s floor: 5 media bytes.
    enc.set_target(-1.0);
    let b = enc.encode_at(&mut q, 0);
    assert!((24..=26).contains(&b), "{b}");
}

#[test]
fn the_2018_receiver_counts_the_first_packets_predecessor_and_uses_64_bit_shifts() {
    let mut rx = ScreamRx::for_era(Era::Y2018);
    rx.receive(1_000_000, 0);
    assert_eq!(rx.take_feedback(1_000_000).unwrap(), Feedback { highest_seq: 0, ack_vector: 1, receive_ms: 1000 });
    // A hole of 40: bit 39 of a 64-bit shift (the 2017 int shift would set bit 7).
    rx.receive(1_001_000, 40);
    assert_eq!(rx.take_feedback(1_001_000).unwrap().ack_vector, (1 << 40) | (1 << 39));
}

#[test]
fn the_2018_rtp_queue_is_dropped_when_its_head_waited_half_a_second() {
    let mut tx = ScreamTx::for_era(Era::Y2018);
    let mut q = RtpQueue::default();
    // Frames pile up with nothing acked and nothing sent.
    let mut enc = Encoder::for_era(Era::Y2018, 25.0, 0.1, GlibcRand::new(1));
    let mut cleared_at = None;
    for i in 1..=60u64 {
        let now = i * 40_000;
        enc.set_target(tx.encoder_target());
        let b = enc.encode_at(&mut q, now);
        tx.new_media_frame(now, &mut q, b);
        if q.is_empty() && cleared_at.is_none() && now > 200_000 {
            cleared_at = Some(now);
        }
    }
    // Not within a second of the first frame (40 ms), then at the next 200 ms adjustment.
    let at = cleared_at.expect("the queue was dropped");
    assert_eq!(at, 1_240_000);
}

#[test]
fn over_pantheons_known_emulator_scream_2018_sends_its_capped_rate_with_low_delay() {
    let run = simulate_era(&emulator_a(), 30, Era::Y2018);
    // About 200 kbit/s of RTP (+ 6 + 28 bytes per packet on the wire), far below 10 Mbit/s.
    let tput = run.mbps(5_000_000, 30_000_000);
    assert!(tput > 0.16 && tput < 0.24, "{tput}");
    let p95 = run.p95_delay_ms();
    assert!(p95 < 40.0, "{p95}");
    assert_eq!(run.dropped, 0);
    assert!((run.feedbacks as usize) <= run.arrivals.len());
}

#[test]
fn under_loss_scream_2018_lowers_its_target_and_requests_key_frames() {
    let lossy = Path { rate: 12e6, delay_us: 40_000, queue: Some(100), drop_every: Some(100) };
    let run = simulate_era(&lossy, 30, Era::Y2018);
    assert!(run.dropped > 0);
    // A loss event scales the target by 0.9, and the 2 bit/s-per-second ramp cannot win it back.
    let last = run.targets.last().unwrap().1;
    assert!(last < 2e5 * 0.95, "{last}");
    assert!(run.coder_targets.iter().any(|t| t.1 == -1.0), "a key-frame request after a loss");
}

/// The upstream C++ at c3370fd (ScreamTx/ScreamRx/RtpQueue/VideoEnc with StanfordSNR/scream
/// f099118's client and server handlers, glibc's rand) driven by this same virtual-time model
/// delivered exactly these counts over 30 s, with the same per-second rates: the 2018 port
/// follows it packet for packet.
#[test]
fn the_2018_port_reproduces_the_upstream_run_in_the_same_model() {
    let run = simulate_era(&emulator_a(), 30, Era::Y2018);
    assert_eq!((run.arrivals.len(), run.feedbacks, run.dropped), (768, 768, 0));
    let lossy = Path { rate: 12e6, delay_us: 40_000, queue: Some(100), drop_every: Some(100) };
    let run = simulate_era(&lossy, 30, Era::Y2018);
    assert_eq!((run.arrivals.len(), run.feedbacks, run.dropped), (745, 745, 8));
}

/// Per-second trajectory of the 2018 port (`SCREAM_LOSSY` as above), for comparison with
/// a harness around the upstream C++.
#[test]
#[ignore]
fn print_trajectory_2018() {
    let path = if std::env::var_os("SCREAM_LOSSY").is_some() {
        Path { rate: 12e6, delay_us: 40_000, queue: Some(100), drop_every: Some(100) }
    } else {
        emulator_a()
    };
    let run = simulate_era(&path, 30, Era::Y2018);
    for s in 0..30u64 {
        let t = run.coder_targets.iter().find(|x| x.0 >= s * 1_000_000).unwrap().1;
        eprintln!("{s:2}s {:.3} Mbit/s target {:.0}", run.mbps(s * 1_000_000, (s + 1) * 1_000_000), t);
    }
    eprintln!("dropped {}", run.dropped);
    eprintln!("p95 {:.3} feedbacks {} packets {}", run.p95_delay_ms(), run.feedbacks, run.arrivals.len());
    eprintln!("tput 0-20 {:.3} 0-30 {:.3}", run.mbps(0, 20_000_000), run.mbps(0, 30_000_000));
}
