//! The real-time loop of `sproutbt2` (src/examples/sproutbt2.cc) around [`Connection`]:
//! the server (our receiver) waits for the client, then every 20 ms sends an empty datagram
//! that carries its forecast; the client (our sender) sends what the window allows in
//! 1400-byte datagrams, the last of each burst promising silence for 50 ms, or one empty
//! datagram when 50 ms pass without sending. Each turn of the loop reads at most one
//! datagram and waits at most 10 ms; the clock is read once per turn, as upstream's frozen
//! timestamp.
//!
//! Wire format (upstream's mosh datagram, which on this branch is not encrypted:
//! `Session::encrypt` returns the nonce's last 8 bytes and the plaintext, crypto.cc:208-211):
//! ```text
//! seq|direction u64 | timestamp u16 | timestamp reply u16 | throwaway window u16
//! | time to next u16 | payload (forecast length u16, forecast, junk)
//! ```
//! 16 + payload bytes of UDP payload: 1418 for a full datagram without a forecast.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::law::{Connection, Header};
use super::model::ForecastModel;
use crate::net;
use crate::stats::Stats;

const DIRECTION_TO_CLIENT: u64 = 1 << 63;
const HEADER_BYTES: usize = 16;
/// Data per datagram (Pantheon's sprout_mtu.patch: min(1440, …) → 1400).
const MAX_DATA_BYTES: i64 = 1400;
const SERVER_FALLBACK_MS: u64 = 20;
const CLIENT_FALLBACK_MS: u64 = 50;
const MAX_WAIT_MS: u64 = 10;
const RECEIVE_MTU: usize = 2048;

/// Upstream's millisecond clock starts at 1000 on its first reading.
struct Clock(Instant);

impl Clock {
    fn now(&self) -> u64 {
        1000 + self.0.elapsed().as_millis() as u64
    }
}

fn encode(header: Header, to_client: bool, payload: &[u8], now: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    let dir = if to_client { DIRECTION_TO_CLIENT } else { 0 };
    out.extend_from_slice(&(header.seq | dir).to_be_bytes());
    let mut ts = (now % 65536) as u16;
    if ts == u16::MAX {
        ts = 0;
    }
    for v in [ts, u16::MAX, header.throwaway_window, header.time_to_next] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(payload);
    out
}

fn decode(buf: &[u8], want_to_client: bool) -> Option<(Header, &[u8])> {
    if buf.len() < HEADER_BYTES {
        return None;
    }
    let word = u64::from_be_bytes(buf[0..8].try_into().ok()?);
    if (word & DIRECTION_TO_CLIENT != 0) != want_to_client {
        return None;
    }
    let u16_at = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
    let header = Header { seq: word & !DIRECTION_TO_CLIENT, throwaway_window: u16_at(12), time_to_next: u16_at(14) };
    Some((header, &buf[HEADER_BYTES..]))
}

struct Endpoint {
    sock: UdpSocket,
    server: bool,
    peer: Option<SocketAddr>,
    conn: Connection,
    clock: Clock,
    stats: Arc<Stats>,
    buf: Vec<u8>,
}

impl Endpoint {
    fn send(&mut self, now: u64, data: usize, time_to_next: u16) {
        let (header, payload) = self.conn.send(now, data, time_to_next);
        if let Some(peer) = self.peer {
            let datagram = encode(header, self.server, &payload, now);
            // Like upstream, a failed send is only a lost datagram.
            if self.sock.send_to(&datagram, peer).is_ok() && !self.server {
                self.stats.add_bytes(datagram.len() as u64);
            }
        }
    }

    /// Waits up to `timeout` (None: forever) and takes in at most one datagram.
    fn wait_and_receive(&mut self, timeout: Option<Duration>) -> Result<u64, String> {
        let fd = self.sock.as_raw_fd();
        let ready = net::wait(fd, false, timeout).map_err(|e| format!("poll failed: {e}"))?;
        let now = self.clock.now();
        if ready.readable {
            match self.sock.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    if let Some((header, payload)) = decode(&self.buf[..n], !self.server) {
                        if self.server {
                            self.stats.add_bytes(n as u64);
                            self.peer = Some(from);
                        }
                        let payload = payload.to_vec();
                        self.conn.recv(now, header, &payload);
                    }
                }
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::Interrupted) => {}
                Err(e) => return Err(format!("UDP receive failed: {e}")),
            }
        }
        Ok(now)
    }

    fn run(mut self) -> Result<(), String> {
        let fallback = if self.server { SERVER_FALLBACK_MS } else { CLIENT_FALLBACK_MS };
        let mut now = self.clock.now();
        if self.server {
            while self.peer.is_none() {
                now = self.wait_and_receive(None)?;
            }
        }
        let mut next_transmission = now + fallback;
        loop {
            let mut to_send = if self.server { 0 } else { self.conn.window_size(now) };
            if to_send > 0 || next_transmission <= now {
                loop {
                    let size = to_send.min(MAX_DATA_BYTES);
                    to_send -= size;
                    let time_to_next = if to_send == 0 { fallback as u16 } else { 0 };
                    self.send(now, size as usize, time_to_next);
                    if to_send <= 0 {
                        break;
                    }
                }
                next_transmission = next_transmission.max(now + fallback);
            }
            let wait = next_transmission.saturating_sub(now).min(MAX_WAIT_MS);
            now = self.wait_and_receive(Some(Duration::from_millis(wait)))?;
        }
    }
}

fn endpoint(sock: UdpSocket, server: bool, peer: Option<SocketAddr>, stats: Arc<Stats>) -> Endpoint {
    let fd = sock.as_raw_fd();
    net::set_buffers(fd, 8 << 20);
    let clock = Clock(Instant::now());
    let conn = Connection::new(ForecastModel::shared(), clock.now());
    Endpoint { sock, server, peer, conn, clock, stats, buf: vec![0u8; RECEIVE_MTU] }
}

/// The receiver: upstream's server, here on the given port (upstream picks the first free
/// one in 60001..60999 and prints it).
pub fn run_receiver(port: u16, stats: Arc<Stats>) -> Result<(), String> {
    // The model first, as upstream loads it before binding.
    let _ = ForecastModel::shared();
    let sock = net::bind_udp(port).map_err(|e| format!("cannot listen on UDP port {port}: {e}"))?;
    println!("Listening on port: {port}");
    endpoint(sock, true, None, stats).run()
}

/// The sender: upstream's client, sending to `peer`.
pub fn run_sender(peer: SocketAddr, stats: Arc<Stats>) -> Result<(), String> {
    // The model first, as upstream loads it before binding.
    let _ = ForecastModel::shared();
    let sock = UdpSocket::bind(net::unspecified_for(&peer)).map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    endpoint(sock, false, Some(peer), stats).run()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagrams_have_upstreams_sizes_and_round_trip() {
        let header = Header { seq: 123_456, throwaway_window: 1452, time_to_next: 50 };
        let mut payload = vec![0u8, 0];
        payload.resize(1402, b'x');
        let wire = encode(header, false, &payload, 1234);
        assert_eq!(wire.len(), 1418); // + 28 bytes of UDP/IPv4: 1446-byte IP packets
        assert_eq!(decode(&wire, false), Some((header, &payload[..])));
        assert_eq!(decode(&wire, true), None, "a datagram in the wrong direction is refused");
        let back = encode(Header { seq: 0, throwaway_window: 0, time_to_next: 20 }, true, &[0, 0], 1234);
        assert_eq!(back.len(), 18);
        assert!(decode(&back, true).is_some());
    }
}
