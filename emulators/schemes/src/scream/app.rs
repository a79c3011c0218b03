//! Pantheon's client and server programs (src/scream/ScreamClient.cc, ScreamServer.cc at
//! StanfordSNR/pantheon 97c91c4; src/ScreamClient.cc, ScreamServer.cc at StanfordSNR/scream
//! f099118 for 2018-2020, the same loops but for the stream's arguments, see
//! [`StreamConfig::pantheon`]) as event handlers over the laws in [`super::law`]; the driver
//! (real time in [`super::endpoint`], virtual time in the tests) owns the clocks and the
//! timers and calls them in upstream's order.
//!
//! Client: a 40 ms periodic frame timer, a one-shot transmit timer and the socket. A frame
//! tick sets the encoder to ScreamTx's target, encodes one frame and, unless the transmit
//! timer is armed, tries to send. Feedback goes to ScreamTx and likewise tries to send; so
//! does the transmit timer when it fires. Each try sends **at most one packet**, and only
//! a pacing interval of 1 ms or more arms the timer for a follow-up (the interval is armed
//! in whole milliseconds, and 0 ms leaves the timer off). Without pacing, the sender thus
//! releases one packet per frame tick and one per feedback.
//!
//! Server: every RTP packet updates ScreamRx; feedback goes out at once if more than 5 ms
//! passed since the last, else a one-shot timer is armed for the rest of the 5 ms in whole
//! ms (0 ms arms nothing: the feedback then waits for the next packet).

use super::law::{Encoder, Era, Feedback, GlibcRand, RtpPacket, RtpQueue, ScreamRx, ScreamTx, StreamConfig, Verdict};

/// Frames per second of Pantheon's fake encoder.
pub const FRAME_RATE: f64 = 25.0;
/// `(int)(1e3 / frameRate)`.
pub const FRAME_INTERVAL_MS: u64 = 40;
/// Frame size jitter (VideoEnc's `delta`).
pub const FRAME_JITTER: f64 = 0.1;
/// The client stops by itself after this long.
pub const CLIENT_RUN_MS: u64 = 75_000;
/// Pantheon's server paces feedback to one per 5 ms at most.
pub const FEEDBACK_INTERVAL_US: u64 = 5000;

pub struct Client {
    pub tx: ScreamTx,
    pub queue: RtpQueue,
    pub encoder: Encoder,
    tx_timer_armed: bool,
}

/// What a client handler asks of its driver.
#[derive(Default, Debug)]
pub struct ClientActions {
    /// Packets to send now, in order.
    pub send: Vec<RtpPacket>,
    /// Arm the transmit timer to fire this many ms from now.
    pub arm_tx_ms: Option<u64>,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    /// Pantheon's 2017 client.
    pub fn new() -> Self {
        Self::for_era(Era::Y2017)
    }

    pub fn for_era(era: Era) -> Self {
        Client {
            tx: ScreamTx::with_config(StreamConfig::pantheon(era)),
            queue: RtpQueue::default(),
            encoder: Encoder::for_era(era, FRAME_RATE, FRAME_JITTER, GlibcRand::new(1)),
            tx_timer_armed: false,
        }
    }

    pub fn tx_timer_armed(&self) -> bool {
        self.tx_timer_armed
    }

    /// `sendRtp`: at most one packet, and maybe the transmit timer.
    fn try_send(&mut self, now: u64, out: &mut ClientActions) {
        let wait = match self.tx.is_ok_to_transmit(now, &self.queue) {
            Verdict::Send => {
                let Some(packet) = self.queue.pop() else { return };
                out.send.push(packet);
                self.tx.add_transmitted(now, packet)
            }
            Verdict::Wait(s) => s,
            Verdict::Blocked => return,
        };
        if wait > 0.0 && !self.tx_timer_armed {
            let ms = (wait * 1000.0) as u64;
            if ms > 0 {
                self.tx_timer_armed = true;
                out.arm_tx_ms = Some(ms);
            }
        }
    }

    pub fn on_tx_timer(&mut self, now: u64) -> ClientActions {
        self.tx_timer_armed = false;
        let mut out = ClientActions::default();
        self.try_send(now, &mut out);
        out
    }

    /// `encodeVideoFrame` then a send try unless the transmit timer is armed.
    pub fn on_frame(&mut self, now: u64) -> ClientActions {
        self.encoder.set_target(self.tx.encoder_target());
        let bytes = self.encoder.encode_at(&mut self.queue, now);
        self.tx.new_media_frame(now, &mut self.queue, bytes);
        let mut out = ClientActions::default();
        if !self.tx_timer_armed {
            self.try_send(now, &mut out);
        }
        out
    }

    pub fn on_feedback(&mut self, now: u64, fb: Feedback) -> ClientActions {
        self.tx.incoming_feedback(now, fb.receive_ms, fb.highest_seq, fb.ack_vector);
        let mut out = ClientActions::default();
        if !self.tx_timer_armed {
            self.try_send(now, &mut out);
        }
        out
    }
}

#[derive(Default)]
pub struct Server {
    pub rx: ScreamRx,
    timer_armed: bool,
}

/// What a server handler asks of its driver.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct ServerActions {
    pub send: Option<Feedback>,
    /// Arm the feedback timer to fire this many ms from now.
    pub arm_ms: Option<u64>,
}

impl Server {
    pub fn for_era(era: Era) -> Self {
        Server { rx: ScreamRx::for_era(era), timer_armed: false }
    }

    /// `recvRtp`: `now` and `arrival` on the server's clock (µs, whole ms).
    pub fn on_packet(&mut self, now: u64, arrival: u64, seq: u16) -> ServerActions {
        self.rx.receive(arrival, seq);
        let mut out = ServerActions::default();
        if self.rx.has_pending() {
            let since = now.wrapping_sub(self.rx.last_feedback_us);
            if since > FEEDBACK_INTERVAL_US {
                out.send = self.rx.take_feedback(now);
            } else if !self.timer_armed {
                let ms = (FEEDBACK_INTERVAL_US - since) / 1000;
                if ms > 0 {
                    self.timer_armed = true;
                    out.arm_ms = Some(ms);
                }
            }
        }
        out
    }

    pub fn on_timer(&mut self, now: u64) -> ServerActions {
        self.timer_armed = false;
        ServerActions { send: self.rx.take_feedback(now), arm_ms: None }
    }
}
