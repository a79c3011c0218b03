use std::time::Duration;

use super::*;
use crate::sim::{self, Link};

const REFERENCE: &str = include_str!("../../../data/indigo-2601c92/reference.json");

fn ms(v: f64) -> Duration {
    Duration::from_secs_f64(v / 1e3)
}

fn ack(now: Duration, seq: u64, sent_at: Duration) -> AckEvent {
    AckEvent::lone(now, seq, sent_at, PACKET_BYTES)
}

fn as_f64s(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// The model's probabilities, chosen actions and carried LSTM state match TensorFlow running
/// the upstream checkpoint's own graph, step by step, with the previous action fed back.
#[test]
fn model_matches_tensorflow_on_the_recorded_sequences() {
    let table: serde_json::Value = serde_json::from_str(REFERENCE).unwrap();
    let tol = table["tolerance_probs"].as_f64().unwrap();
    let mut checked = 0;
    for seq in table["sequences"].as_array().unwrap() {
        let mut policy = Policy::default();
        for step in seq["steps"].as_array().unwrap() {
            let raw = as_f64s(&step["state"]);
            let (action, probs) = policy.sample([raw[0], raw[1], raw[2], raw[3]]);
            for (p, want) in probs.iter().zip(as_f64s(&step["probs"])) {
                assert!((f64::from(*p) - want).abs() <= tol, "probs {probs:?} vs {want} at {raw:?}");
            }
            assert_eq!(action as u64, step["action"].as_u64().unwrap(), "action at {raw:?}");
            checked += 1;
        }
        for (name, got) in [("final_h", &policy.lstm_state().h), ("final_c", &policy.lstm_state().c)] {
            for (g, want) in got.iter().zip(as_f64s(&seq[name])) {
                assert!((f64::from(*g) - want).abs() <= tol, "{name}: {g} vs {want}");
            }
        }
    }
    assert!(checked >= 50, "only {checked} steps in the table");
}

#[test]
fn actions_change_the_window_and_keep_two_packets() {
    let mut c = Indigo2018::new(1472);
    assert_eq!(c.window(), 10.0);
    assert!(!c.window_closed());
    assert_eq!(c.payload_bytes(), Some(PACKET_BYTES));
    for (action, want) in
        [(4, 20.0), (3, 30.0), (1, 20.0), (0, 10.0), (2, 10.0), (0, 5.0), (0, 2.5), (0, 2.0), (1, 2.0)]
    {
        c.take_action(action);
        assert_eq!(c.window(), want, "action {action}");
    }
}

/// A step closes on the first ACK more than 10 whole ms after it began; its state holds the
/// EWMAs of that step's ACKs (restarted each step) and the window in packets.
#[test]
fn steps_close_after_ten_ms_with_the_step_s_ewmas() {
    let mut c = Indigo2018::new(1472);
    // Ten packets at 0 ms; ACKs come back one per ms from 40 ms (a 40 ms RTT for the first).
    for seq in 0..10 {
        c.on_send(ms(0.0), seq);
    }
    for seq in 0..10u64 {
        let now = ms(40.0 + seq as f64);
        c.on_ack(&ack(now, seq, ms(0.0)));
        // Each ACK opens room for one more packet, sent at once.
        c.on_send(now, 10 + seq);
    }
    // The first ACK began the step at 40 ms; 49 ms is only 9 ms later.
    assert_eq!(c.steps(), 0);
    c.on_ack(&ack(ms(50.0), 10, ms(40.0)));
    assert_eq!(c.steps(), 0, "10 ms is not more than 10 ms");
    c.on_ack(&ack(ms(51.9), 11, ms(41.0)));
    assert_eq!(c.steps(), 1);
    let state = c.last_state().unwrap();
    // RTTs 40..49 ms then 10 and 10 ms: min_rtt 10, so the last delay sample is 0.
    let mut delay = None;
    for rtt in (40..50).chain([10, 10]) {
        delay = ewma(delay, f64::from(rtt) - if rtt >= 40 { 40.0 } else { 10.0 });
    }
    assert!((state[0] - delay.unwrap()).abs() < 1e-9, "delay {state:?} vs {delay:?}");
    assert!(state[1] > 0.0 && state[2] > 0.0);
    assert_eq!(state[3], 10.0);
    // The EWMAs restart: the next step's state depends only on its own ACKs.
    assert!(c.delay_ewma.is_none() && c.send_rate_ewma.is_none() && c.delivery_rate_ewma.is_none());
}

/// The delivery and send rates are upstream's: bytes since the packet was sent over the
/// elapsed whole milliseconds, in Mbit/s.
#[test]
fn rates_are_bytes_per_ms_since_the_packet_was_sent() {
    let mut c = Indigo2018::new(1472);
    c.on_send(ms(0.0), 0);
    c.on_ack(&ack(ms(20.0), 0, ms(0.0)));
    // The first datagram is 1403 bytes (its five numeric fields are zero and left out).
    // delivered 1403 B since delivered = 0 at time 0: 0.008 * 1403 / 20.
    assert!((c.delivery_rate_ewma.unwrap() - 0.008 * 1403.0 / 20.0).abs() < 1e-12);
    // sent 1403 B since the packet's own send (0 before it) over a 20 ms RTT.
    assert!((c.send_rate_ewma.unwrap() - 0.008 * 1403.0 / 20.0).abs() < 1e-12);
    assert_eq!(c.delay_ewma, Some(0.0));
    c.on_send(ms(20.0), 1);
    c.on_send(ms(20.0), 2);
    // 30 ms is 10 ms after the step began at 20 ms: still the same step.
    c.on_ack(&ack(ms(30.0), 1, ms(20.0)));
    assert_eq!(c.steps(), 0);
    // Packet 1 (1436 bytes: every field set) saw delivered = 1403 at 20 ms; now 1403 + 1436
    // at 30 ms.
    let dr = 0.008 * 1436.0 / 10.0;
    let want = 0.875 * (0.008 * 1403.0 / 20.0) + 0.125 * dr;
    assert!((c.delivery_rate_ewma.unwrap() - want).abs() < 1e-12);
    // Packet 1 saw sent_bytes = 1403; now 1403 + 2 * 1436: 2 packets over a 10 ms RTT.
    let sr = 0.008 * 2.0 * 1436.0 / 10.0;
    let want = 0.875 * (0.008 * 1403.0 / 20.0) + 0.125 * sr;
    assert!((c.send_rate_ewma.unwrap() - want).abs() < 1e-12);
}

/// The window counts packets above the highest acknowledged one, so one ACK of the newest
/// packet reopens it; with the window full and no ACK for 1 s, one packet goes anyway.
#[test]
fn a_silent_full_window_lets_one_packet_out_each_second() {
    let mut c = Indigo2018::new(1472);
    for seq in 0..10 {
        c.on_send(ms(0.0), seq);
    }
    assert!(!c.window_open());
    assert_eq!(c.loss_rule(), LossRule::Reorder(1));
    assert_eq!(c.timer_deadline(), Some(ms(1000.0)));
    c.on_timer(ms(999.0));
    assert!(c.window_closed());
    c.on_timer(ms(1000.0));
    assert!(!c.window_closed());
    assert_eq!(c.timer_deadline(), None);
    c.on_send(ms(1000.0), 10);
    assert!(c.window_closed());
    assert_eq!(c.timer_deadline(), Some(ms(2000.0)));
    // Its ACK reopens the whole window: everything below it is no longer outstanding.
    c.on_ack(&ack(ms(1040.0), 10, ms(1000.0)));
    assert!(c.window_open());
    assert_eq!(c.timer_deadline(), None);
}

/// End to end on the reference bottleneck (12 Mbit/s, 20 ms, 100 packets): the trained policy
/// grows the window from 10 packets, fills the link and keeps a queue of a few ms once the
/// start-up overshoot (a few drops) is over.
#[test]
fn fills_most_of_a_link_with_a_short_queue() {
    let link = Link::reference();
    let o = sim::run(Box::new(Indigo2018::new(1472)), &link, Duration::from_secs(20));
    let p50 = o.delay_percentile_ms(50.0, Duration::from_secs(5));
    let p95 = o.delay_percentile_ms(95.0, Duration::from_secs(5));
    eprintln!(
        "indigo: utilization {:.3}, p50 {p50:.2} ms, p95 {p95:.2} ms, drops {}",
        o.utilization(),
        o.dropped_packets
    );
    assert!(o.utilization() > 0.8, "utilization {}", o.utilization());
    assert!(p95 < 20.0 + 40.0, "p95 {p95}");
}

/// Diagnostic (ignored): replays a trace of the upstream sender (`INDIGO_UPSTREAM_TRACE`, lines
/// `S seq send_ts bytes t_ms`, `A seq now_ms ack_bytes t_ms …`, `D [state] action cwnd …`) through the
/// port's law, sends and ACKs when the upstream logged them, and compares the decisions.
#[test]
#[ignore]
fn replay_upstream_trace() {
    let Ok(path) = std::env::var("INDIGO_UPSTREAM_TRACE") else { return };
    let text = std::fs::read_to_string(path).unwrap();
    let mut c = Indigo2018::new(1472);
    // The logged time, read just after the whole-ms stamp the law used: kept in that ms.
    let at = |p: &[&str]| {
        let (stamp, t): (f64, f64) = (p[2].parse().unwrap(), p[4].parse().unwrap());
        Duration::from_secs_f64(if t.floor() > stamp { stamp + 0.999 } else { t } / 1e3)
    };
    let (mut decisions, mut matched, mut shown) = (0, 0, 0);
    for line in text.lines() {
        let p: Vec<&str> = line.split_whitespace().collect();
        if let (Some(&("S" | "A")), Some(deadline)) = (p.first(), c.timer_deadline()) {
            if deadline <= at(&p) {
                c.on_timer(deadline);
            }
        }
        match p.first() {
            Some(&"S") => c.on_send(if p[1] == "0" { Duration::ZERO } else { at(&p) }, p[1].parse().unwrap()),
            Some(&"A") => c.on_ack(&ack(at(&p), p[1].parse().unwrap(), Duration::ZERO)),
            Some(&"D") => {
                decisions += 1;
                let inner = &line[line.find('[').unwrap() + 1..line.find(']').unwrap()];
                let want: Vec<f64> = inner.split(',').map(|v| v.trim().parse().unwrap()).collect();
                let rest: Vec<&str> = line[line.find(']').unwrap() + 1..].split_whitespace().collect();
                let want_cwnd: f64 = rest[1].parse().unwrap();
                let got = c.last_state().unwrap_or_default();
                let same = c.steps() == decisions
                    && got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-9 * w.abs().max(1.0))
                    && c.window() == want_cwnd;
                if same {
                    matched += 1;
                } else if shown < 5 {
                    shown += 1;
                    eprintln!(
                        "decision {decisions}: port steps {} state {got:?} cwnd {}; upstream {want:?} cwnd {want_cwnd}",
                        c.steps(),
                        c.window()
                    );
                }
            }
            _ => {}
        }
    }
    eprintln!("{matched} of {decisions} decisions the same");
}

/// Upstream's datagrams leave out the numeric fields that are zero (proto3), so the packets
/// before the first ACK are short; the window counts packets, not bytes, so those ten short
/// packets do not make room for an eleventh.
#[test]
fn the_first_datagrams_are_short_and_the_window_counts_packets() {
    let mut c = Indigo2018::new(1472);
    let mut sizes = Vec::new();
    for seq in 0..10 {
        assert!(!c.window_closed(), "packet {seq}");
        sizes.push(c.next_payload_bytes().unwrap());
        c.on_send(ms(0.2), seq);
    }
    // seq_num, send_ts, sent_bytes, delivered_time and delivered all zero; then all but seq_num
    // and sent_bytes: upstream's 1403 and 1417 (its traced sizes).
    assert_eq!(sizes[0], 1403);
    assert!(sizes[1..].iter().all(|b| *b == 1417), "{sizes:?}");
    assert_eq!(c.sent_bytes, 1403 + 9 * 1417);
    assert!(c.window_closed(), "ten packets fill a ten-packet window, whatever their bytes");
    c.on_ack(&ack(ms(20.0), 0, ms(0.2)));
    assert!(!c.window_closed());
    assert_eq!(c.next_payload_bytes(), Some(PACKET_BYTES));
    assert_eq!(c.delivered, 1403);
}

/// At a step the sender stops for its inference: nothing is sent, ACKs wait and are read
/// when it ends, stamped then; the next step counts from the end of the inference.
#[test]
fn an_inference_holds_the_sender_and_the_next_step_counts_from_its_end() {
    let mut c = Indigo2018::new(1472);
    for seq in 0..10 {
        c.on_send(ms(0.0), seq);
    }
    c.on_ack(&ack(ms(20.0), 0, ms(0.0)));
    c.on_send(ms(20.0), 10);
    c.on_ack(&ack(ms(31.4), 1, ms(0.0)));
    assert_eq!(c.steps(), 1);
    // The first inference: FIRST_INFERENCE, neither sending nor reading.
    let done = ms(31.4) + FIRST_INFERENCE;
    assert!(c.window_closed());
    assert_eq!(c.timer_deadline(), Some(done));
    assert_eq!(c.step_start_ms, Some(70));
    let seen_delay = c.delay_ewma;
    c.on_ack(&ack(ms(40.0), 2, ms(0.0)));
    assert_eq!(c.delay_ewma, seen_delay, "an ACK during the inference waits");
    c.on_timer(done - ms(0.1));
    assert!(c.window_closed());
    c.on_timer(done);
    assert!(!c.window_closed());
    // Read at 70.4 ms: RTT 70 whole ms against the minimum 20.
    assert_eq!(c.delay_ewma, Some(50.0));
    // The next step needs an ACK more than 10 ms after 70: 80 is not, 81 is; and the second
    // inference is INFERENCE long.
    c.on_send(done, 11);
    c.on_ack(&ack(ms(80.9), 10, ms(20.0)));
    assert_eq!(c.steps(), 1);
    c.on_ack(&ack(ms(81.0), 11, done));
    assert_eq!(c.steps(), 2);
    assert_eq!(c.timer_deadline(), Some(ms(81.0) + INFERENCE));
}
