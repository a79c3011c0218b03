//! Ports of Pantheon's `scream` in its two eras, one module: the law differences are
//! parameters ([`law::StreamConfig`]) or branches on [`law::Era`].
//!
//! * `scream-2017`: Pantheon's own client and server (src/scream/ at StanfordSNR/pantheon
//!   97c91c4) over EricssonResearch/scream db32b00 (code/ScreamTx.cpp, ScreamRx.cpp,
//!   RtpQueue.cpp, VideoEnc.cpp).
//! * `scream-2018`: what Pantheon ran from 2018 to 2020 (src/wrappers/scream.py at 23e738c):
//!   StanfordSNR/scream f099118 src/ScreamClient.cc, ScreamServer.cc (Pantheon's 2017 loops;
//!   Packet.cc and Timerfd.cc unchanged) over EricssonResearch/scream c3370fd.
//!
//! Scream does not fit the ACK-clocked [`crate::transport`]: its packets are the fake
//! encoder's frames cut into RTP packets of varying size, its receiver sends 18-byte
//! feedback at most every 5 ms, and its client releases at most one packet per event. So it
//! keeps its own datagrams and loop.
//!
//! The 2017 law as implemented (sender, per event: a 40 ms frame tick, a feedback, the pacing timer):
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
//! The 2018 law (c3370fd; what differs):
//! * stream (f099118 `registerNewStream(q, ssrc, 1.0f, 64e3f, 10e7f, 2e5f, 2.0f, 0.5f, 0.3f)`
//!   against c3370fd's (priority, min, start, max, rampUpSpeed, maxRtpQueueDelay,
//!   txQueueSizeFactor) signature): the target starts at, and never exceeds, 200 kbit/s; it
//!   may rise by 2 bit/s per second only, so it stays at 200 kbit/s unless losses (×0.9),
//!   a measured rate below it (Stream::updateTargetBitrate: toward (1 + 0.05·min(1,
//!   50k/target))·max(sent, acked)·(1 − 0.1·trend) − 0.3·queued bits, lowered only while the
//!   coder's rate is within [0.8, 2] × target) or the window law below 100 kbit/s bring it
//!   down; the RTP queue is dropped when its oldest packet waited > 0.5 s (once a second);
//! * encoder (VideoEnc::encode): the target × a coder scale in [0.8, 1.25] that tracks
//!   target / media rate, less 25 packets/s × 160 bit of RTP overhead, floored at 1 kbit/s,
//!   × 1 + r with r ← 0.8·r + U[−0.1, 0.1]; after a loss or a queue drop one frame is
//!   coded at the floor (getTargetBitrate returns −1, a key-frame request);
//! * window (ScreamTx::updateCwnd): starts at 200 bytes; fast start adds the newly acked
//!   bytes capped at 1.25 × max rate × time since the last update (2 MSS below 100 kbit/s);
//!   above the 100 ms target cwnd −= min(2·|off|·acked·mss/cwnd, cwnd/4); shared bottleneck
//!   detection off (the target stays 100 ms); validation allows 1.1 × the in-flight history
//!   weighted by the current trend; base OWD history every 10 s, reset when the smoothed
//!   minimum queue delay stays above 25 ms for 20 s; the RTP queue is emptied for 2 sRTT
//!   from 1 s after the start (ScreamTx::newMediaFrame);
//! * sending (ScreamTx::isOkToTransmit/addTransmitted): pacing at mss / (1.5·cwnd/sRTT),
//!   recomputed every 50 ms while the averaged delay fraction > 0.1; rates every 50 ms
//!   (100 ms below 50 kbit/s acked); the MSS resets to 100 bytes and the minimum window to
//!   3 MSS once a second;
//! * receiver (ScreamRx): the same feedback, 64-bit ack-vector shifts, and its first packet's
//!   predecessor counted as received.
//!
//! * [`law`]: encoder, RTP queue, ScreamTx, ScreamRx (pure);
//! * [`app`]: the client's and server's event handlers (pure);
//! * [`endpoint`]: the real-time loops and the wire format.

pub mod app;
pub mod endpoint;
pub mod law;

pub use endpoint::{run_receiver, run_sender};

use crate::registry::UdpCc;

/// The upstream era a registry scheme ports.
pub fn era_of(cc: UdpCc) -> law::Era {
    if cc == UdpCc::Scream2018 {
        law::Era::Y2018
    } else {
        law::Era::Y2017
    }
}

#[cfg(test)]
mod tests;
