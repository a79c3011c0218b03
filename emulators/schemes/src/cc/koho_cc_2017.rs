//! PORT IN PROGRESS: greghill/koho_cc datagrump sender. This placeholder holds a fixed window of 10 packets and is
//! replaced by the port before it lands.

use std::time::Duration;

use super::{AckEvent, Controller, LossEvent};

#[derive(Clone, Debug)]
pub struct KohoCc2017 {
    mss: u64,
}

impl KohoCc2017 {
    pub fn new(mss: u64) -> Self {
        Self { mss }
    }
}

impl Controller for KohoCc2017 {
    fn name(&self) -> &'static str {
        "koho_cc-2017"
    }
    fn on_ack(&mut self, _ack: &AckEvent) {}
    fn on_loss(&mut self, _loss: &LossEvent) {}
    fn cwnd(&self) -> u64 {
        10 * self.mss
    }
    fn pacing_rate(&self, srtt: Duration) -> f64 {
        super::window_pacing_rate(self.cwnd(), srtt, false)
    }
}
