//! The receiving side: acknowledge every DATA packet at once, discard the payload.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::wire::{Ack, Packet, MAX_DATAGRAM_BYTES};
use crate::net;
use crate::stats::Stats;

/// What the receiver remembers about one flow: enough to build an ACK's bitmap.
#[derive(Clone, Debug)]
pub struct ReceiverFlow {
    flow: u64,
    highest: Option<u64>,
    /// Bit i set = packet `highest - i` arrived.
    bitmap: u64,
}

impl ReceiverFlow {
    pub fn new(flow: u64) -> Self {
        Self { flow, highest: None, bitmap: 0 }
    }

    pub fn flow(&self) -> u64 {
        self.flow
    }

    /// Records DATA `seq` sent at `sender_us` and returns the ACK for it, stamped with the
    /// receiver clock `now_us`.
    pub fn on_data(&mut self, seq: u64, sender_us: u64, now_us: u64) -> Ack {
        match self.highest {
            None => {
                self.highest = Some(seq);
                self.bitmap = 1;
            }
            Some(h) if seq > h => {
                let shift = seq - h;
                self.bitmap = if shift >= 64 { 0 } else { self.bitmap << shift };
                self.bitmap |= 1;
                self.highest = Some(seq);
            }
            Some(h) => {
                let back = h - seq;
                if back < 64 {
                    self.bitmap |= 1 << back;
                }
            }
        }
        Ack {
            flow: self.flow,
            seq,
            echo_us: sender_us,
            receiver_us: now_us,
            highest: self.highest.expect("set above"),
            bitmap: self.bitmap,
        }
    }
}

/// Listens on `port` and serves any number of senders until the process is stopped.
pub fn run_receiver(port: u16, stats: Arc<Stats>) -> Result<(), String> {
    let sock = net::bind_udp(port).map_err(|e| format!("cannot listen on UDP port {port}: {e}"))?;
    serve(sock, stats)
}

/// The receiver of a sender-first scheme: the sender listens at `peer`, so this side repeats a
/// wake-up HELLO (flow 0) to it until the sender's own HELLO arrives, then serves it as
/// [`run_receiver`] does. Gives up after `connect_timeout` without an answer.
pub fn run_receiver_connecting(peer: SocketAddr, stats: Arc<Stats>, connect_timeout: Duration) -> Result<(), String> {
    let sock = UdpSocket::bind(net::unspecified_for(&peer)).map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    let give_up = Instant::now() + connect_timeout;
    let mut out = [0u8; 64];
    let len = Packet::Hello { flow: 0, sender_us: 0 }.encode(&mut out);
    loop {
        if Instant::now() >= give_up {
            return Err(format!(
                "no answer from a sender at {peer} after {:.1} s; is the sender running and reachable?",
                connect_timeout.as_secs_f64()
            ));
        }
        match sock.send_to(&out[..len], peer) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
            Err(e) => return Err(format!("cannot send to {peer}: {e}")),
        }
        let ready = net::wait(fd, false, Some(WAKE_INTERVAL)).map_err(|e| format!("poll failed: {e}"))?;
        if ready.readable {
            // An ICMP error (the sender's port not open yet) also wakes the poll; only a
            // datagram means the sender is there.
            let mut peek = [0u8; 16];
            match sock.peek_from(&mut peek) {
                Ok(_) => return serve(sock, stats),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => std::thread::sleep(WAKE_INTERVAL),
                Err(e) => return Err(format!("UDP receive failed: {e}")),
            }
        }
    }
}

/// A connecting receiver repeats its wake-up HELLO this often.
const WAKE_INTERVAL: Duration = Duration::from_millis(200);

fn serve(sock: UdpSocket, stats: Arc<Stats>) -> Result<(), String> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    // Bursts must queue at the bottleneck, not overflow this socket.
    let _ = net::set_buffer(fd, net::Buffer::Receive, 32 << 20);
    let _ = net::set_buffer(fd, net::Buffer::Send, 8 << 20);
    let start = Instant::now();
    let mut flows: HashMap<SocketAddr, ReceiverFlow> = HashMap::new();
    let mut buf = vec![0u8; MAX_DATAGRAM_BYTES + 64];
    let mut out = [0u8; 64];
    loop {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            // ICMP errors from an earlier peer that went away surface here; keep serving.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("UDP receive failed: {e}")),
        };
        let now_us = start.elapsed().as_micros() as u64;
        let reply = match Packet::decode(&buf[..n]) {
            Some(Packet::Hello { flow, sender_us }) => {
                flows.insert(from, ReceiverFlow::new(flow));
                Packet::HelloAck { flow, echo_us: sender_us }
            }
            Some(Packet::Data { flow, seq, sender_us }) => {
                stats.add_bytes(n as u64);
                let state = flows.entry(from).or_insert_with(|| ReceiverFlow::new(flow));
                if state.flow() != flow {
                    *state = ReceiverFlow::new(flow);
                }
                Packet::Ack(state.on_data(seq, sender_us, now_us))
            }
            // Anything else, such as a controller's CONTROL datagram (a stand-in for its
            // upstream's control packets: only its place in the queue mattered).
            _ => continue,
        };
        let len = reply.encode(&mut out);
        // A full socket buffer or an unreachable sender only costs this ACK.
        let _ = sock.send_to(&out[..len], from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_tracks_the_last_64_packets() {
        let mut r = ReceiverFlow::new(9);
        let a = r.on_data(0, 10, 20);
        assert_eq!((a.highest, a.bitmap, a.echo_us, a.receiver_us), (0, 0b1, 10, 20));
        let a = r.on_data(2, 0, 0);
        assert_eq!((a.highest, a.bitmap), (2, 0b101));
        // Late arrival of 1 fills the hole.
        let a = r.on_data(1, 0, 0);
        assert_eq!((a.seq, a.highest, a.bitmap), (1, 2, 0b111));
        // A jump of more than 64 starts a fresh bitmap.
        let a = r.on_data(100, 0, 0);
        assert_eq!((a.highest, a.bitmap), (100, 0b1));
        // Too old to fit: ignored in the bitmap, still acknowledged by seq.
        let a = r.on_data(30, 0, 0);
        assert_eq!((a.seq, a.bitmap), (30, 0b1));
    }
}
