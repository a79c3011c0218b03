//! A small UDP transport for probing: sequence numbers, per-packet ACKs that echo the
//! send timestamp and carry a receive bitmap, RTT estimation, pacing, a congestion window
//! and loss detection, with the congestion controller plugged in through
//! [`crate::cc::Controller`].
//!
//! * [`wire`]: packet formats (DATA makes 1500-byte IP packets, ACKs are 50 bytes, CONTROL
//!   datagrams are a controller's stand-ins for its upstream's control packets on the data path);
//! * [`rtt`]: RFC 6298 RTT estimation;
//! * [`core`]: the sender's pure logic (window, pacing, loss, delivery rate);
//! * [`sender`] / [`receiver`]: the real-time loops around it.
//!
//! The receiver listens (receiver-first, like Pantheon's receiver-first wrappers); the
//! sender repeats a HELLO until the receiver answers, so either side may start first
//! within the connect timeout. For a sender-first scheme (verus-2017) the sender listens
//! instead ([`run_sender_listening`]) and the receiver repeats a wake-up HELLO to it
//! ([`run_receiver_connecting`]); the handshake after that is the same. A controller whose
//! upstream sent data with no handshake at all (the 2017 programs on the datagrump contest's
//! sourdough sender: koho_cc, saturator, greg_saturator) skips it
//! (`Controller::starts_without_handshake`): the receiver takes DATA from a flow it has not
//! met, and must already be listening, as Pantheon's receiver-first wrappers guarantee.

pub mod core;
pub mod receiver;
pub mod rtt;
pub mod sender;
pub mod wire;

pub use receiver::{run_receiver, run_receiver_connecting};
pub use sender::{run_sender, run_sender_listening};
