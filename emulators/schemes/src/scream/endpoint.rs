//! The real-time loops of Pantheon's `ScreamClient` (our sender) and `ScreamServer` (our
//! receiver) around [`super::app`]: one wait on the socket bounded by the next timer, then,
//! in upstream's order, the transmit timer, the frame timer and at most one datagram. Both
//! clocks count whole milliseconds from the program's start, as sourdough's `timestamp_ms`.
//!
//! Wire format (Pantheon's src/scream/Packet.cc; the same file in StanfordSNR/scream f099118
//! src/Packet.cc; big-endian):
//! ```text
//! RTP  (client → server): ssrc u32 | seq u16 | RTP-size bytes of filler   (6 + ≤ 1220 bytes)
//! RTCP (server → client): ssrc u32 | highest seq u16 | ack vector u64 | receive time (ms) u32
//! ```

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::app::{Client, ClientActions, Server, CLIENT_RUN_MS, FRAME_INTERVAL_MS};
use super::law::{Era, Feedback, RtpPacket};
use crate::net;
use crate::stats::Stats;

/// Pantheon's client's stream id.
pub const SSRC: u32 = 10;
pub const RTP_HEADER_BYTES: usize = 6;
pub const RTCP_BYTES: usize = 18;
const RECEIVE_MTU: usize = 65536;

pub fn encode_rtp(p: RtpPacket) -> Vec<u8> {
    let mut out = Vec::with_capacity(RTP_HEADER_BYTES + p.size as usize);
    out.extend_from_slice(&SSRC.to_be_bytes());
    out.extend_from_slice(&p.seq.to_be_bytes());
    out.resize(RTP_HEADER_BYTES + p.size as usize, b'x');
    out
}

/// The sequence number of an RTP datagram.
pub fn decode_rtp(buf: &[u8]) -> Option<u16> {
    (buf.len() >= RTP_HEADER_BYTES).then(|| u16::from_be_bytes([buf[4], buf[5]]))
}

pub fn encode_rtcp(fb: Feedback) -> Vec<u8> {
    let mut out = Vec::with_capacity(RTCP_BYTES);
    out.extend_from_slice(&SSRC.to_be_bytes());
    out.extend_from_slice(&fb.highest_seq.to_be_bytes());
    out.extend_from_slice(&fb.ack_vector.to_be_bytes());
    out.extend_from_slice(&fb.receive_ms.to_be_bytes());
    out
}

pub fn decode_rtcp(buf: &[u8]) -> Option<Feedback> {
    if buf.len() < RTCP_BYTES {
        return None;
    }
    Some(Feedback {
        highest_seq: u16::from_be_bytes([buf[4], buf[5]]),
        ack_vector: u64::from_be_bytes(buf[6..14].try_into().ok()?),
        receive_ms: u32::from_be_bytes(buf[14..18].try_into().ok()?),
    })
}

/// Whole milliseconds since the start, in µs.
struct Clock(Instant);

impl Clock {
    fn now_us(&self) -> u64 {
        self.0.elapsed().as_millis() as u64 * 1000
    }
}

fn recv_one(sock: &UdpSocket, buf: &mut [u8]) -> Result<Option<(usize, SocketAddr)>, String> {
    match sock.recv_from(buf) {
        Ok(r) => Ok(Some(r)),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::Interrupted
                    | std::io::ErrorKind::WouldBlock
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(format!("UDP receive failed: {e}")),
    }
}

fn prepare(sock: &UdpSocket) -> Result<(), String> {
    let fd = sock.as_raw_fd();
    net::set_buffers(fd, 8 << 20);
    sock.set_nonblocking(true).map_err(|e| format!("cannot make the socket non-blocking: {e}"))
}

/// The receiver: Pantheon's `ScreamServer PORT` of `era`.
pub fn run_receiver(port: u16, stats: Arc<Stats>, era: Era) -> Result<(), String> {
    let sock = net::bind_udp(port).map_err(|e| format!("cannot listen on UDP port {port}: {e}"))?;
    prepare(&sock)?;
    println!("Listening on port: {port}");
    let clock = Clock(Instant::now());
    let mut server = Server::for_era(era);
    let mut peer: Option<SocketAddr> = None;
    let mut timer: Option<Instant> = None;
    let mut buf = vec![0u8; RECEIVE_MTU];
    loop {
        let timeout = timer.map(|t| t.saturating_duration_since(Instant::now()));
        let ready = net::wait(sock.as_raw_fd(), false, timeout).map_err(|e| format!("poll failed: {e}"))?;
        let mut actions = Vec::new();
        if timer.is_some_and(|t| Instant::now() >= t) {
            timer = None;
            actions.push(server.on_timer(clock.now_us()));
        }
        if ready.readable {
            if let Some((n, from)) = recv_one(&sock, &mut buf)? {
                let now = clock.now_us();
                if peer.is_none() {
                    peer = Some(from);
                }
                if Some(from) == peer {
                    if let Some(seq) = decode_rtp(&buf[..n]) {
                        stats.add_bytes(n as u64);
                        actions.push(server.on_packet(now, now, seq));
                    }
                }
            }
        }
        for a in actions {
            if let Some(ms) = a.arm_ms {
                timer = Some(Instant::now() + Duration::from_millis(ms));
            }
            if let (Some(fb), Some(to)) = (a.send, peer) {
                // Like upstream, a failed send is only a lost datagram.
                let _ = sock.send_to(&encode_rtcp(fb), to);
            }
        }
    }
}

/// The sender: Pantheon's `ScreamClient IP PORT` of `era`; it stops by itself after 75 s.
pub fn run_sender(peer: SocketAddr, stats: Arc<Stats>, era: Era) -> Result<(), String> {
    let sock = UdpSocket::bind(net::unspecified_for(&peer)).map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    sock.connect(peer).map_err(|e| format!("cannot connect to {peer}: {e}"))?;
    prepare(&sock)?;
    let start = Instant::now();
    let clock = Clock(start);
    let mut client = Client::for_era(era);
    let frame = Duration::from_millis(FRAME_INTERVAL_MS);
    let mut next_frame = start + frame;
    let mut tx_timer: Option<Instant> = None;
    let mut buf = vec![0u8; RECEIVE_MTU];
    let send = |actions: ClientActions, tx_timer: &mut Option<Instant>| {
        for p in actions.send {
            let d = encode_rtp(p);
            if sock.send(&d).is_ok() {
                stats.add_bytes(d.len() as u64);
            }
        }
        if let Some(ms) = actions.arm_tx_ms {
            *tx_timer = Some(Instant::now() + Duration::from_millis(ms));
        }
    };
    while clock.now_us() / 1000 <= CLIENT_RUN_MS {
        let wake = tx_timer.map_or(next_frame, |t| t.min(next_frame));
        let timeout = wake.saturating_duration_since(Instant::now());
        let ready = net::wait(sock.as_raw_fd(), false, Some(timeout)).map_err(|e| format!("poll failed: {e}"))?;
        if tx_timer.is_some_and(|t| Instant::now() >= t) {
            tx_timer = None;
            let a = client.on_tx_timer(clock.now_us());
            send(a, &mut tx_timer);
        }
        let now = Instant::now();
        if now >= next_frame {
            // A periodic timer: missed ticks collapse into one.
            while next_frame <= now {
                next_frame += frame;
            }
            let a = client.on_frame(clock.now_us());
            send(a, &mut tx_timer);
        }
        if ready.readable {
            if let Some((n, _)) = recv_one(&sock, &mut buf)? {
                if let Some(fb) = decode_rtcp(&buf[..n]) {
                    let a = client.on_feedback(clock.now_us(), fb);
                    send(a, &mut tx_timer);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagrams_have_pantheons_layout() {
        let d = encode_rtp(RtpPacket { size: 1220, seq: 513 });
        assert_eq!(d.len(), 1226);
        assert_eq!(&d[..6], &[0, 0, 0, 10, 2, 1]);
        assert_eq!(decode_rtp(&d), Some(513));
        let fb = Feedback { highest_seq: 77, ack_vector: 0x0123_4567_89ab_cdef, receive_ms: 123_456 };
        let w = encode_rtcp(fb);
        assert_eq!(w.len(), 18);
        assert_eq!(decode_rtcp(&w), Some(fb));
        assert_eq!(decode_rtcp(&w[..17]), None);
    }
}
