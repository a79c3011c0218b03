//! Round-trip time estimation (RFC 6298: SRTT/RTTVAR with gains 1/8 and 1/4).

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct RttEstimator {
    srtt: Duration,
    rttvar: Duration,
    min_rtt: Duration,
    has_sample: bool,
}

/// The least the loss timer waits past SRTT: Linux's `TCP_RTO_MIN`. A margin proportional to
/// SRTT turns the host's stalls into losses: packets whose ACKs are on their way while the
/// receiver is held off the CPU are declared lost, and a loss-based sender halves its window
/// for them (experiments/README.md, "Spurious losses").
const MIN_MARGIN: Duration = Duration::from_millis(200);
/// The ceiling keeps a long outage from stalling detection forever.
const MAX_TIMEOUT: Duration = Duration::from_secs(10);

impl RttEstimator {
    /// `initial` seeds SRTT before the first sample (the handshake RTT when known).
    pub fn new(initial: Duration) -> Self {
        Self { srtt: initial, rttvar: initial / 2, min_rtt: initial, has_sample: false }
    }

    pub fn update(&mut self, sample: Duration) {
        if !self.has_sample {
            self.srtt = sample;
            self.rttvar = sample / 2;
            self.min_rtt = sample;
            self.has_sample = true;
            return;
        }
        let diff = self.srtt.abs_diff(sample);
        self.rttvar = (self.rttvar * 3 + diff) / 4;
        self.srtt = (self.srtt * 7 + sample) / 8;
        self.min_rtt = self.min_rtt.min(sample);
    }

    pub fn srtt(&self) -> Duration {
        self.srtt
    }

    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    pub fn min_rtt(&self) -> Duration {
        self.min_rtt
    }

    /// How long an unacknowledged packet may stay out before it counts as lost:
    /// `SRTT + max(4 RTTVAR, 200 ms)`, as Linux bounds its RTO. No exponential back-off:
    /// nothing is retransmitted, and a probe that stops sending would stop measuring.
    pub fn loss_timeout(&self) -> Duration {
        let margin = (self.rttvar * 4).max(MIN_MARGIN);
        (self.srtt + margin).min(MAX_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn follows_rfc6298() {
        let mut r = RttEstimator::new(ms(333));
        r.update(ms(100));
        assert_eq!((r.srtt(), r.rttvar()), (ms(100), ms(50)));
        r.update(ms(200));
        // RTTVAR = 3/4 * 50 + 1/4 * 100 = 62.5; SRTT = 7/8 * 100 + 1/8 * 200 = 112.5.
        assert_eq!(r.rttvar(), Duration::from_micros(62_500));
        assert_eq!(r.srtt(), Duration::from_micros(112_500));
        assert_eq!(r.min_rtt(), ms(100));
        assert_eq!(r.loss_timeout(), Duration::from_micros(112_500 + 250_000));
    }

    #[test]
    fn timeout_is_bounded() {
        let mut r = RttEstimator::new(ms(1));
        r.update(ms(1));
        for _ in 0..50 {
            r.update(ms(1));
        }
        assert_eq!(r.loss_timeout(), ms(1) + MIN_MARGIN);
    }

    #[test]
    fn a_steady_path_waits_200_ms_past_its_rtt() {
        // 140 ms without variation: a stall of the host shorter than 200 ms is no loss.
        let mut r = RttEstimator::new(ms(140));
        for _ in 0..100 {
            r.update(ms(140));
        }
        assert_eq!(r.loss_timeout(), ms(340));
    }
}
