//! Virtual-time tests of the Sprout port. "Upstream" values were read from the
//! `sprout.model` that alfalfa edcb255 ships (src/examples/sprout.model, which its Receiver
//! writes with SPROUT_MODEL_OUT); the rest are computed by hand from the formulas.

use std::sync::Arc;

use super::law::{Connection, Forecast, Inference, RecvQueue, SendQueue, Window};
use super::model::{poisson_pdf, rate_grid, ForecastModel, Process, TICK_S};

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-300)
}

#[test]
fn the_rate_grid_is_upstreams() {
    let g = rate_grid();
    assert_eq!(g.len(), 257);
    assert_eq!(g.mid(0), 0.0);
    assert_eq!(g.mid(1), 1.5 * 3.90625);
    assert_eq!(g.mid(256), 256.5 * 3.90625);
    assert_eq!(g.bin(3.9), 0);
    assert_eq!(g.bin(3.90625), 1);
    assert_eq!(g.bin(-5.0), 0);
    assert_eq!(g.bin(5000.0), 256);
}

#[test]
fn poisson_matches_the_formula() {
    assert_eq!(poisson_pdf(0.0, 0), 1.0);
    assert_eq!(poisson_pdf(0.0, 3), 0.0);
    assert!(close(poisson_pdf(2.0, 0), (-2.0f64).exp(), 1e-15));
    assert!(close(poisson_pdf(2.0, 3), 8.0 / 6.0 * (-2.0f64).exp(), 1e-13));
    assert!(close(poisson_pdf(10.0, 10), 0.125_110_035_721_133_3, 1e-12));
}

#[test]
fn observing_counts_multiplies_the_poisson_likelihood() {
    // Uniform prior, 3 arrivals in a tick: posterior ∝ Poisson(λ·0.02; 3) over the bins.
    let mut p = Process::new();
    p.observe(TICK_S, 3);
    p.normalize();
    let g = rate_grid();
    let like: Vec<f64> = (0..g.len())
        .map(|i| {
            let m = g.mid(i) * 0.02;
            m * m * m / 6.0 * (-m).exp()
        })
        .collect();
    let total: f64 = like.iter().sum();
    for i in [0, 1, 10, 38, 100, 256] {
        assert!(close(p.pmf()[i], like[i] / total, 1e-10), "bin {i}");
    }
    // Most likely rate: the bin holding 3 / 0.02 = 150 packets/s.
    let argmax = (0..g.len()).max_by(|&a, &b| p.pmf()[a].total_cmp(&p.pmf()[b])).unwrap();
    assert_eq!(argmax, g.bin(150.0));
    // Zero arrivals make an outage the most likely rate.
    let mut q = Process::new();
    q.observe(TICK_S, 0);
    q.normalize();
    assert!(q.pmf()[0] > q.pmf()[1] && q.pmf()[1] > q.pmf()[2]);
    assert_eq!(q.lower_quantile(0.001), 0.0);
}

#[test]
fn brownian_motion_spreads_a_certain_rate_and_an_outage_escapes_at_one_per_second() {
    let g = rate_grid();
    let sigma = 200.0 * 0.02f64.sqrt();
    let mut p = Process::new();
    p.set_certain(g.mid(128));
    p.evolve(TICK_S);
    // Mass stays on the grid (±5σ lies inside it) and the bin keeps Φ(w/2σ) − Φ(−w/2σ),
    // up to the Gaussian table's 0.06-wide bins.
    let total: f64 = p.pmf().iter().sum();
    assert!(close(total, 1.0, 1e-6), "{total}");
    let phi = |x: f64| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
    let half = 3.90625 / 2.0 / sigma;
    assert!((p.pmf()[128] - (phi(half) - phi(-half))).abs() < 2e-3, "{}", p.pmf()[128]);
    assert!(close(p.pmf()[127], p.pmf()[129], 1e-2));
    // An outage is left with probability 1 − e^(−0.02) per tick; what stays diffuses like any
    // rate, and as upstream the half of it below 0 drops off the grid until normalisation:
    // bin 0 keeps e^(−0.02)·Φ(3.90625/σ).
    let mut o = Process::new();
    o.set_certain(0.0);
    o.evolve(TICK_S);
    let stay = (-0.02f64).exp() * phi(3.90625 / sigma);
    assert!(close(o.pmf()[0], stay, 1e-3), "{} vs {stay}", o.pmf()[0]);
    let escaped: f64 = o.pmf()[1..].iter().sum();
    let leave = (1.0 - (-0.02f64).exp()) * (1.0 - phi(3.90625 / sigma));
    assert!(close(escaped, leave, 1e-2), "{escaped} vs {leave}");
}

#[test]
fn the_forecast_model_matches_upstreams_sprout_model() {
    let model = ForecastModel::shared();
    let iv = model.intervals();
    assert_eq!(iv.len(), 8);
    let widths: Vec<usize> = iv.iter().map(|t| t[0].len()).collect();
    assert_eq!(widths, [30, 59, 88, 117, 146, 175, 204, 233]);
    assert!(iv.iter().all(|t| t.len() == 257));
    // (ticks − 1, component, count) → value in upstream's sprout.model.
    let upstream = [
        (0, 0, 0, 1.0),
        (0, 1, 0, 0.8894184115759556),
        (0, 1, 1, 0.1042287201065573),
        (0, 100, 5, 0.09676291574455982),
        (3, 50, 10, 0.04005797830067313),
        (7, 0, 0, 0.5207317875425049),
        (7, 0, 1, 0.17393989533057578),
        (7, 100, 40, 0.0008864993408357032),
        (7, 255, 150, 0.02737576833487218),
    ];
    for (t, c, k, want) in upstream {
        assert!(close(iv[t][c][k], want, 1e-9), "interval {t} component {c} count {k}: {} vs {want}", iv[t][c][k]);
    }
}

/// The whole model against the upstream file, where SPROUT_MODEL_IN names it (the reference
/// build's src/examples/sprout.model); skipped otherwise.
#[test]
fn the_whole_model_matches_the_upstream_file_when_given() {
    let Ok(path) = std::env::var("SPROUT_MODEL_IN") else { return };
    let bytes = std::fs::read(&path).expect("SPROUT_MODEL_IN readable");
    let upstream = parse_model(&bytes);
    let ours = ForecastModel::shared();
    let mut worst: f64 = 0.0;
    for (t, comps) in upstream.iter().enumerate() {
        for (c, row) in comps.iter().enumerate() {
            assert_eq!(row.len(), ours.intervals()[t][c].len());
            for (k, &want) in row.iter().enumerate() {
                worst = worst.max((ours.intervals()[t][c][k] - want).abs());
            }
        }
    }
    eprintln!("largest |difference| from {path}: {worst:e}");
    assert!(worst < 1e-9, "{worst}");
}

fn varint(b: &[u8], at: &mut usize) -> u64 {
    let (mut v, mut s) = (0u64, 0);
    loop {
        let c = b[*at];
        *at += 1;
        v |= u64::from(c & 0x7f) << s;
        s += 7;
        if c < 0x80 {
            return v;
        }
    }
}

/// Length-delimited fields of one protobuf message (the model uses no others but doubles).
fn fields(b: &[u8]) -> Vec<(u64, u64, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let key = varint(b, &mut at);
        let (field, wire) = (key >> 3, key & 7);
        let len = match wire {
            2 => varint(b, &mut at) as usize,
            1 => 8,
            _ => panic!("wire type {wire}"),
        };
        out.push((field, wire, &b[at..at + len]));
        at += len;
    }
    out
}

fn parse_model(b: &[u8]) -> Vec<Vec<Vec<f64>>> {
    fields(b)
        .into_iter()
        .map(|(_, _, interval)| {
            fields(interval)
                .into_iter()
                .map(|(_, _, comp)| {
                    fields(comp)
                        .into_iter()
                        .flat_map(|(_, _, v)| v.chunks(8).map(|d| f64::from_le_bytes(d.try_into().unwrap())))
                        .collect()
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_forecast_is_the_five_percent_quantile_of_cumulative_deliveries() {
    let model = ForecastModel::shared();
    let g = rate_grid();
    // A certain rate of 501.95 packets/s: one tick holds Poisson(10.04) arrivals, and its
    // 5 % quantile is the smallest k with P(N ≤ k) ≥ 0.05.
    let mut p = Process::new();
    p.set_certain(g.mid(128));
    let lambda = g.mid(128) * 0.02;
    let mut cdf = 0.0;
    let k = (0..).find(|&k| {
        cdf += poisson_pdf(lambda, k);
        cdf >= 0.05
    });
    let counts = model.forecast(&p);
    assert_eq!(Some(counts[0]), k);
    assert_eq!(counts[0], 5);
    // Cumulative, so non-decreasing, and below the mean 10.04 per tick (a lower quantile).
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    assert!(counts.iter().enumerate().all(|(t, &c)| f64::from(c) < lambda * (t + 1) as f64));
    // Certain outage: nothing is forecast (the belief may leave 0 only at 1/s).
    p.set_certain(0.0);
    assert_eq!(model.forecast(&p), vec![0; 8]);
}

#[test]
fn the_receiver_observes_rounded_tick_counts_except_during_announced_silence() {
    let model = ForecastModel::shared();
    let mut r = Inference::new(Arc::clone(&model));
    r.warp_to(1000);
    // Five 1402-byte payloads in the first tick: 5.007 packets, observed as 5.
    for i in 0..5 {
        r.recv(i * 1452, 0, 0, 1402);
    }
    r.advance_to(1021);
    assert_eq!(r.time(), 1020);
    let mut want = Process::new();
    want.evolve(TICK_S);
    want.observe(TICK_S, 5);
    want.normalize();
    let mut got = r.process().clone();
    got.normalize();
    for i in 0..257 {
        assert!(close(got.pmf()[i], want.pmf()[i], 1e-12), "bin {i}");
    }
    // The last datagram promises 50 ms of silence: the empty ticks before 1020 + 50 are not
    // evidence (only diffusion), the one after is observed as 0 arrivals.
    r.recv(5 * 1452, 0, 50, 2);
    r.advance_to(1061);
    want.evolve(TICK_S);
    want.observe(TICK_S, 1); // 2/1400 of a packet counts as one
    want.evolve(TICK_S);
    r.advance_to(1101);
    want.evolve(TICK_S); // the tick from 1060 still lies before 1070
    want.evolve(TICK_S);
    want.observe(TICK_S, 0);
    want.normalize();
    let mut got = r.process().clone();
    got.normalize();
    for i in 0..257 {
        assert!(close(got.pmf()[i], want.pmf()[i], 1e-12), "bin {i}");
    }
}

#[test]
fn received_or_lost_counts_bytes_before_the_throwaway_point() {
    let mut q = RecvQueue::default();
    q.recv(0, 0, 1402);
    // A window of 0 says everything before this datagram is settled.
    q.recv(1452, 0, 1402);
    assert_eq!(q.packet_count(), 1452 + 1402);
    // 4356 arrives saying everything before 4356 − 2904 = 1452 is settled; 2904 never came
    // but is not yet given up.
    q.recv(4356, 2904, 1402);
    assert_eq!(q.packet_count(), 1452 + 1402 + 1402);
    let mut s = SendQueue::default();
    assert_eq!(s.add(0, 1000), 0);
    assert_eq!(s.add(1452, 1005), 1452);
    assert_eq!(s.add(2904, 1011), 1452); // the first left more than 10 ms ago
}

#[test]
fn forecasts_serialise_as_protobuf() {
    let f = Forecast { received_or_lost: 300, time: 1020, counts: vec![1, 2, 3, 4, 5, 6, 7, 200] };
    let b = f.encode();
    assert_eq!(&b[..7], &[0x08, 0xac, 0x02, 0x10, 0xfc, 0x07, 0x1a]);
    assert_eq!(b[7], 9); // eight counts, the last two bytes long
    assert_eq!(Forecast::decode(&b), Some(f));
    let empty = Forecast::default();
    assert_eq!(empty.encode(), vec![0x08, 0, 0x10, 0]);
}

#[test]
fn the_window_sends_the_forecast_100_ms_ahead_less_the_queue() {
    let initial = Forecast { received_or_lost: 0, time: 980, counts: vec![0; 8] };
    let mut w = Window::new(initial);
    // Own forecast "received at 0": the last tick, nothing beyond it.
    assert_eq!(w.window_size(1050), 0);
    let fc = Forecast { received_or_lost: 10_000, time: 2000, counts: vec![2, 4, 6, 8, 10, 12, 14, 16] };
    w.on_forecast(2000, fc, 14_000);
    assert_eq!(w.queue_estimate(), 4000);
    // 1400 · (counts[5] − counts[0]) − 4000.
    assert_eq!(w.window_size(2000), 1400 * 10 - 4000);
    w.on_sent(2000, 1402);
    assert_eq!(w.window_size(2005), 1400 * 10 - 4000 - 1402);
    // One tick later the queue drains by 1400 · counts[0] and the horizon moves on.
    assert_eq!(w.window_size(2020), 1400 * (14 - 4) - (5402 - 2800));
    // Two more ticks: counts[1] and counts[2] come off (cumulative, as upstream); floored at 0.
    assert_eq!(w.window_size(2060), 1400 * (16 - 8));
    assert_eq!(w.queue_estimate(), 0);
    // Past the last tick: the horizon is clamped, nothing more to send.
    assert_eq!(w.window_size(2200), 0);
}

/// Sender and receiver over a 5 Mbit/s, 20 ms one-way link in virtual time: Sprout fills
/// most of the link without building a standing queue.
#[test]
fn over_a_steady_link_sprout_uses_the_link_and_keeps_delay_low() {
    let model = ForecastModel::shared();
    let (mut snd, mut rcv) = (Connection::new(Arc::clone(&model), 1000), Connection::new(model, 1000));
    let per_packet_ms = 1500.0 * 8.0 / 5e6 * 1000.0; // 2.4 ms per full datagram
    let mut link_free = 0.0f64;
    let mut to_rcv: Vec<(f64, super::law::Header, Vec<u8>, f64)> = Vec::new();
    let mut to_snd: Vec<(f64, super::law::Header, Vec<u8>)> = Vec::new();
    let (mut delivered, mut delays) = (0usize, Vec::new());
    let (mut snd_next, mut rcv_next) = (1050u64, 0u64);
    let mut attached = false;
    for now in 1000u64..11_000 {
        let t = now as f64;
        to_rcv.sort_by(|a, b| a.0.total_cmp(&b.0));
        while to_rcv.first().is_some_and(|p| p.0 <= t) {
            let (_, h, payload, sent) = to_rcv.remove(0);
            rcv.recv(now, h, &payload);
            if !attached {
                attached = true;
                rcv_next = now + 20;
            }
            if now > 4000 {
                delivered += payload.len();
                delays.push(t - sent);
            }
        }
        while to_snd.first().is_some_and(|p| p.0 <= t) {
            let (_, h, payload) = to_snd.remove(0);
            snd.recv(now, h, &payload);
        }
        let mut bytes = snd.window_size(now);
        if bytes > 0 || snd_next <= now {
            loop {
                let size = bytes.min(1400);
                bytes -= size;
                let (h, payload) = snd.send(now, size as usize, if bytes == 0 { 50 } else { 0 });
                let wire_ms = (payload.len() + 44) as f64 * 8.0 / 5e6 * 1000.0;
                link_free = link_free.max(t) + wire_ms;
                to_rcv.push((link_free + 20.0, h, payload, t));
                if bytes <= 0 {
                    break;
                }
            }
            snd_next = snd_next.max(now + 50);
        }
        if attached && rcv_next <= now {
            let (h, payload) = rcv.send(now, 0, 20);
            to_snd.push((t + 20.0, h, payload));
            rcv_next = rcv_next.max(now + 20);
        }
    }
    let mbps = delivered as f64 * 8.0 / 7.0 / 1e6;
    delays.sort_by(f64::total_cmp);
    let p95 = delays[delays.len() * 95 / 100];
    assert!(mbps > 0.5 * 5.0 * 1400.0 / 1446.0 && mbps <= 5.0, "{mbps} Mbit/s");
    assert!(p95 < 20.0 + 100.0 + 3.0 * per_packet_ms, "p95 one-way delay {p95} ms");
}
