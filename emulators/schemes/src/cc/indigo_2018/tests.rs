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
    assert_eq!(c.cwnd(), 10 * PACKET_BYTES);
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
    // delivered 1436 B since delivered = 0 at time 0: 0.008 * 1436 / 20.
    assert!((c.delivery_rate_ewma.unwrap() - 0.008 * 1436.0 / 20.0).abs() < 1e-12);
    // sent 1436 B since the packet's own send (0 before it) over a 20 ms RTT.
    assert!((c.send_rate_ewma.unwrap() - 0.008 * 1436.0 / 20.0).abs() < 1e-12);
    assert_eq!(c.delay_ewma, Some(0.0));
    c.on_send(ms(20.0), 1);
    c.on_send(ms(20.0), 2);
    // 30 ms is 10 ms after the step began at 20 ms: still the same step.
    c.on_ack(&ack(ms(30.0), 1, ms(20.0)));
    assert_eq!(c.steps(), 0);
    // Packet 1 saw delivered = 1436 at 20 ms; now 2 * 1436 at 30 ms.
    let dr = 0.008 * 1436.0 / 10.0;
    let want = 0.875 * (0.008 * 1436.0 / 20.0) + 0.125 * dr;
    assert!((c.delivery_rate_ewma.unwrap() - want).abs() < 1e-12);
    // Packet 1 saw sent_bytes = 1436; now 3 * 1436: 2 packets over a 10 ms RTT.
    let sr = 0.008 * 2.0 * 1436.0 / 10.0;
    let want = 0.875 * (0.008 * 1436.0 / 20.0) + 0.125 * sr;
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
    assert_eq!(c.cwnd(), 10 * PACKET_BYTES);
    c.on_timer(ms(1000.0));
    assert_eq!(c.cwnd(), u64::MAX);
    assert_eq!(c.timer_deadline(), None);
    c.on_send(ms(1000.0), 10);
    assert_eq!(c.cwnd(), 10 * PACKET_BYTES);
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

/// Diagnostic (ignored): the upstream Python sender stops for its TensorFlow inference at every
/// step (median 1.5 ms, mean 1.7 ms measured with `run_sender.py --debug` on the shared host),
/// neither sending nor reading; ACKs that arrive meanwhile are handled afterwards, stamped late.
/// This wraps the port with such a stall to see how much of the difference it explains.
struct Stalled {
    inner: Indigo2018,
    latency: Duration,
    until: Option<Duration>,
    queued: Vec<AckEvent>,
}

impl Controller for Stalled {
    fn name(&self) -> &'static str {
        "indigo-2018-stalled"
    }
    fn on_ack(&mut self, ack: &AckEvent) {
        if self.until.is_some() {
            self.queued.push(ack.clone());
            return;
        }
        let before = self.inner.steps();
        self.inner.on_ack(ack);
        if self.inner.steps() > before {
            self.until = Some(ack.now + self.latency);
        }
    }
    fn on_loss(&mut self, loss: &LossEvent) {
        self.inner.on_loss(loss);
    }
    fn cwnd(&self) -> u64 {
        self.inner.cwnd()
    }
    fn window_closed(&self) -> bool {
        self.until.is_some()
    }
    fn pacing_rate(&self, srtt: Duration) -> f64 {
        self.inner.pacing_rate(srtt)
    }
    fn on_send(&mut self, now: Duration, seq: u64) {
        self.inner.on_send(now, seq);
    }
    fn payload_bytes(&self) -> Option<u64> {
        self.inner.payload_bytes()
    }
    fn timer_deadline(&self) -> Option<Duration> {
        self.until.or(self.inner.timer_deadline())
    }
    fn on_timer(&mut self, now: Duration) {
        if let Some(until) = self.until {
            if now >= until {
                self.until = None;
                for mut a in std::mem::take(&mut self.queued) {
                    a.now = now;
                    self.on_ack(&a);
                }
            }
            return;
        }
        self.inner.on_timer(now);
    }
    fn loss_rule(&self) -> LossRule {
        self.inner.loss_rule()
    }
    fn loss_timeout(&self) -> Option<Duration> {
        self.inner.loss_timeout()
    }
}

#[test]
#[ignore]
fn inference_stall_diagnostic() {
    let link = Link { rate_bits_per_s: 10e6, one_way_delay: Duration::from_millis(28), queue_packets: usize::MAX };
    // Measured here (10 Mbit/s, 28 ms, unbounded): 0 and 1 ms: 9.9 Mbit/s, p95 32.9 ms;
    // 1.7 ms: 9.6, 42.6 ms; 3 ms: 9.05, 32.2 ms. The stall alone does not explain the
    // upstream's 6.5-6.9 Mbit/s on the same path.
    for latency_us in [0u64, 1000, 1700, 3000] {
        let c = Stalled {
            inner: Indigo2018::new(1472),
            latency: Duration::from_micros(latency_us),
            until: None,
            queued: Vec::new(),
        };
        let o = sim::run(Box::new(c), &link, Duration::from_secs(20));
        let p95 = o.delay_percentile_ms(95.0, Duration::from_secs(2));
        eprintln!("stall {latency_us} us: tput {:.2} Mbit/s, p95 {p95:.1} ms", o.utilization() * 10.0);
        assert!(o.utilization() > 0.5);
    }
}
