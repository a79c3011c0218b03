//! A port of Pantheon's 2017 `sprout`: keithw/alfalfa (branch sendonly) edcb255,
//! src/examples/sproutbt2 with Pantheon's sprout_mtu.patch. Sprout does not fit the
//! ACK-clocked [`crate::transport`]: its receiver infers the link's delivery rate from tick
//! counts and sends forecasts every 20 ms, and its sender's window comes from them. So it
//! keeps its own datagrams and loop; the math and the window are pure and unit-tested.
//!
//! * [`model`]: the rate belief (Poisson likelihood, Brownian motion) and the forecast model
//!   (upstream's `sprout.model`, computed here from the same math);
//! * [`law`]: inference per tick, the forecast's 5 % quantiles, the sender's window;
//! * [`endpoint`]: the real-time loop of `sproutbt2`.

pub mod endpoint;
pub mod law;
pub mod model;

pub use endpoint::{run_receiver, run_sender};

#[cfg(test)]
mod tests;
