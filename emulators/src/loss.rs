//! Independent random loss (Mahimahi's `mm-loss`), but seeded so that runs are reproducible.

use crate::packet::{Ms, Packet};
use crate::stage::{LinkObserver, Stage};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

pub struct Loss {
    probability: f64,
    rng: ChaCha8Rng,
    passed: VecDeque<Packet>,
    pub dropped: u64,
}

impl Loss {
    /// Drops each packet with `probability`, drawing from a generator seeded with `seed`.
    pub fn new(probability: f64, seed: u64) -> Self {
        Loss { probability, rng: ChaCha8Rng::seed_from_u64(seed), passed: VecDeque::new(), dropped: 0 }
    }
}

impl Stage for Loss {
    fn accept(&mut self, packet: Packet, _observer: &mut dyn LinkObserver) {
        if self.probability > 0.0 && self.rng.gen_bool(self.probability) {
            self.dropped += 1;
        } else {
            self.passed.push_back(packet);
        }
    }

    fn release(&mut self, _now: Ms, out: &mut Vec<Packet>, _observer: &mut dyn LinkObserver) {
        out.extend(self.passed.drain(..));
    }

    fn next_wake(&self) -> Option<Ms> {
        self.passed.front().map(|p| p.time)
    }

    fn held(&self) -> usize {
        self.passed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Unobserved;

    fn survivors(probability: f64, seed: u64, n: u64) -> Vec<Ms> {
        let mut loss = Loss::new(probability, seed);
        for t in 0..n {
            loss.accept(Packet::new(vec![0; 100], t), &mut Unobserved);
        }
        let mut out = Vec::new();
        loss.release(n, &mut out, &mut Unobserved);
        out.iter().map(|p| p.time).collect()
    }

    #[test]
    fn drops_the_configured_fraction_reproducibly() {
        let kept = survivors(0.05, 7, 100_000);
        let rate = 1.0 - kept.len() as f64 / 100_000.0;
        assert!((rate - 0.05).abs() < 0.003, "loss rate {rate}");
        assert_eq!(kept, survivors(0.05, 7, 100_000));
        assert_ne!(kept, survivors(0.05, 8, 100_000));
    }

    #[test]
    fn extremes() {
        assert_eq!(survivors(0.0, 1, 1000).len(), 1000);
        assert_eq!(survivors(1.0, 1, 1000).len(), 0);
    }
}
