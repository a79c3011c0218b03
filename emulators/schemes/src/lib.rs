//! Built-in scheme endpoints for the calibration service.
//!
//! Every scheme follows Pantheon's wrapper contract (`run_first`, `receiver PORT`,
//! `sender IP PORT` or the reverse): the sender runs at full throttle until it is
//! killed, the receiver discards what it gets. Three families live here:
//!
//! * [`tcp`]: the kernel's TCP with any congestion control it offers (`TCP_CONGESTION`);
//! * [`quic`]: QUIC bulk transfer over quinn with its Cubic, NewReno or BBR controller;
//! * [`transport`] + [`cc`]: our own small UDP transport with ports of the controllers of
//!   Pantheon's 2017 programs (saturators, koho_cc, Copa, libutp's LEDBAT, Linux Vegas) and
//!   our own Vegas, Copa, LEDBAT and saturator, the controllers being pure state machines
//!   behind [`cc::Controller`].
//!
//! [`registry`] says which schemes exist on this host, [`cli`] parses the command line.

pub mod cc;
pub mod cli;
pub mod net;
pub mod quic;
pub mod registry;
pub mod scream;
pub mod signals;
pub mod sprout;
pub mod stats;
pub mod tcp;
pub mod transport;

#[cfg(test)]
mod sim;

/// Entry point of the `calibrate-scheme` binary; returns the process exit status.
pub fn main(args: Vec<String>) -> i32 {
    cli::run(args)
}
