//! A port of Pantheon's 2017 `scream`: Pantheon's own client and server (src/scream/ at
//! StanfordSNR/pantheon 97c91c4) over EricssonResearch/scream db32b00 (code/ScreamTx.cpp,
//! ScreamRx.cpp, RtpQueue.cpp, VideoEnc.cpp). Scream does not fit the ACK-clocked
//! [`crate::transport`]: its packets are the fake encoder's frames cut into RTP packets of
//! varying size, its receiver sends 18-byte feedback at most every 5 ms, and its client
//! releases at most one packet per event. So it keeps its own datagrams and loop.
//!
//! The law as implemented (sender, per event: a 40 ms frame tick, a feedback, the pacing timer):
//! * encoder: each frame holds max(5 kbit/s, target)/25/8 bytes × U[0.9, 1.1] (glibc's
//!   unseeded `rand()`), in RTP packets of ≤ 1200 + 20 bytes (VideoEnc::encode);
//! * target rate, every ≥ 200 ms at a frame (ScreamTx::Stream::updateTargetBitrate): from
//!   64 kbit/s, in fast start +min(200 kbit/s, target/2) per second while the RTP queue holds
//!   < 0.1 s of media; otherwise toward max(sent, acked rate)·(1 − 0.3·trend) less the
//!   queued bits, and ×0.95 while the RTP queue holds > 20 ms; ×0.8 on a loss event; the
//!   queue is dropped (target back to 64 kbit/s) when it holds > 2 s; capped at twice the
//!   measured media rate and in [64 kbit/s, 5 Mbit/s];
//! * window (ScreamTx::updateCwnd, per feedback): queue delay = OWD − 50 s-min OWD; in fast
//!   start cwnd += newly acked bytes while in flight > cwnd/1.5, until the delay trend
//!   (lag-1 autocorrelation of 20 × 50 ms samples of delay/target, × its average) ≥ 0.2;
//!   then cwnd += off·acked·mss/cwnd with off = (target − delay)/target (increase only when
//!   in flight > cwnd/1.25), target 100 ms (raised only by the shared-bottleneck detector);
//!   ×0.6 on loss (a packet 20 ms older than the newest acked one, once per sRTT); cwnd
//!   capped by the max bytes in flight over the last seconds (ScreamTx.cpp 1155-1161);
//! * sending (ScreamTx::isOkToTransmit/addTransmitted): a packet goes if in flight + size
//!   ≤ cwnd (+ mss while delay < target) or nothing went for 200 ms; pacing at cwnd/sRTT only
//!   while the averaged delay fraction > 0.1 and only intervals ≥ 1 ms arm the timer;
//! * receiver (ScreamRx, ScreamServer.cc): highest number, 64-bit ack vector, arrival time
//!   in ms; one feedback per packet unless the last was ≤ 5 ms ago, then a timer.
//!
//! * [`law`]: encoder, RTP queue, ScreamTx, ScreamRx (pure);
//! * [`app`]: the client's and server's event handlers (pure);
//! * [`endpoint`]: the real-time loops and the wire format.

pub mod app;
pub mod endpoint;
pub mod law;

pub use endpoint::{run_receiver, run_sender};

#[cfg(test)]
mod tests;
