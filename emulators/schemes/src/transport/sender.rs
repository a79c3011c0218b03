//! The sending side in real time: handshake (unless the controller starts blind), then the
//! event loop around [`SenderCore`].

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::core::SenderCore;
use super::wire::{data_payload_bytes, Packet, CONTROL_MAX_BYTES, DATA_HEADER_BYTES, HELLO_BYTES, MAX_DATAGRAM_BYTES};
use crate::cc::{ConnectLaw, Controller, Pacer};
use crate::net;
use crate::stats::Stats;

/// HELLO is repeated this often until the receiver answers.
const HELLO_INTERVAL: Duration = Duration::from_millis(200);
/// SRTT assumed before the first ACK when there was no handshake to measure it: the loss
/// timer's first deadline is then RFC 6298's initial 1 s (SRTT plus four times half of it).
const BLIND_START_RTT: Duration = Duration::from_millis(333);
/// Packets sent back to back before the loop drains ACKs again, so a long burst of
/// pacing credit cannot starve ACK processing (one for a controller that reads its ACKs
/// before every send: `Controller::acks_between_sends`).
const MAX_SEND_BATCH: usize = 32;

/// A flow identifier that differs between runs, so a receiver can tell a restarted sender
/// from late packets of the previous one.
fn new_flow_id() -> u64 {
    let t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    t ^ ((std::process::id() as u64) << 32)
}

/// Sends HELLO every `law.repeat` until HELLO_ACK arrives; returns the handshake RTT, or gives
/// up after `law.give_up`.
fn handshake(
    sock: &UdpSocket,
    flow: u64,
    start: Instant,
    law: ConnectLaw,
    peer: &SocketAddr,
) -> Result<Duration, String> {
    let fd = sock.as_raw_fd();
    let mut buf = [0u8; 64];
    let timeout = law.give_up;
    let give_up = Instant::now() + timeout;
    loop {
        let now = Instant::now();
        if now >= give_up {
            return Err(format!(
                "no answer from a receiver at {peer} after {:.1} s; is the receiver running and reachable?",
                timeout.as_secs_f64()
            ));
        }
        let sent_us = start.elapsed().as_micros() as u64;
        let n = Packet::Hello { flow, sender_us: sent_us }.encode(&mut buf);
        debug_assert_eq!(n, HELLO_BYTES);
        match sock.send(&buf[..n]) {
            Ok(_) => {}
            // The receiver's port is not open yet (ICMP port unreachable): retry.
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(format!("cannot send to {peer}: {e}")),
        }
        let next_hello = (now + law.repeat).min(give_up);
        loop {
            let left = next_hello.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let ready = net::wait(fd, false, Some(left)).map_err(|e| format!("poll failed: {e}"))?;
            if !ready.readable {
                continue;
            }
            match sock.recv(&mut buf) {
                Ok(len) => {
                    if let Some(Packet::HelloAck { flow: f, echo_us }) = Packet::decode(&buf[..len]) {
                        if f == flow {
                            let now_us = start.elapsed().as_micros() as u64;
                            return Ok(Duration::from_micros(now_us.saturating_sub(echo_us)));
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::ConnectionRefused || e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("receive from {peer} failed: {e}")),
            }
        }
    }
}

/// Connects to the receiver at `peer` and sends at the controller's pace until killed.
pub fn run_sender(
    peer: SocketAddr,
    cc: Box<dyn Controller>,
    stats: Arc<Stats>,
    connect_timeout: Duration,
) -> Result<(), String> {
    let sock = UdpSocket::bind(net::unspecified_for(&peer)).map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    send_to_peer(sock, peer, cc, stats, connect_timeout)
}

/// The sender of a sender-first scheme: listens on `port` until a receiver's wake-up HELLO
/// arrives (see `receiver::run_receiver_connecting`), then sends to that receiver exactly as
/// [`run_sender`] does (handshake included).
pub fn run_sender_listening(port: u16, cc: Box<dyn Controller>, stats: Arc<Stats>) -> Result<(), String> {
    let sock = net::bind_udp(port).map_err(|e| format!("cannot listen on UDP port {port}: {e}"))?;
    let mut buf = [0u8; 64];
    let peer = loop {
        match sock.recv_from(&mut buf) {
            Ok((len, from)) if matches!(Packet::decode(&buf[..len]), Some(Packet::Hello { .. })) => break from,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionRefused || e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("UDP receive failed: {e}")),
        }
    };
    // The receiver is there now; the handshake only needs the usual slack.
    send_to_peer(sock, peer, cc, stats, net::connect_timeout())
}

fn send_to_peer(
    sock: UdpSocket,
    peer: SocketAddr,
    cc: Box<dyn Controller>,
    stats: Arc<Stats>,
    connect_timeout: Duration,
) -> Result<(), String> {
    sock.connect(peer).map_err(|e| format!("cannot reach {peer}: {e}"))?;
    sock.set_nonblocking(true).map_err(|e| format!("cannot make the socket non-blocking: {e}"))?;
    let fd = sock.as_raw_fd();
    if !cc.kernel_socket_buffers() {
        net::set_buffers(fd, 8 << 20);
    }

    let start = Instant::now();
    let flow = new_flow_id();
    // The receiver takes DATA from a flow it has not met, so a controller whose upstream
    // started blind sends at once (the scripted runs start the receiver first).
    let initial_rtt = if cc.starts_without_handshake() {
        BLIND_START_RTT
    } else {
        let law = cc.connect_law().unwrap_or(ConnectLaw { repeat: HELLO_INTERVAL, give_up: connect_timeout });
        handshake(&sock, flow, start, law, &peer)?
    };

    // The controller's own datagram size where its upstream program had one (never below the
    // DATA header); by default what fills one 1500-byte IP packet. A datagram larger than that
    // leaves in IP fragments, as the upstream's did on Pantheon's 1500-byte hosts (genericCC:
    // 1500 + 48 bytes); every other one may not be fragmented, so that a path that cannot carry
    // 1500-byte packets is reported rather than silently split.
    let fill = data_payload_bytes(&peer);
    let payload = cc.payload_bytes().map_or(fill, |b| (b as usize).clamp(DATA_HEADER_BYTES, MAX_DATAGRAM_BYTES));
    net::set_fragmentation(&sock, &peer, payload > fill).map_err(|e| format!("cannot set don't-fragment: {e}"))?;
    let mut core = SenderCore::new(cc, flow, payload as u64, initial_rtt);
    let Pacer { busy_wait, whole_ms_poll, .. } = core.pacer();
    let send_batch = if core.controller().acks_between_sends() { 1 } else { MAX_SEND_BATCH };
    // Non-zero filler: nothing on the path should be able to compress the probe.
    let mut data: Vec<u8> = (0..payload).map(|i| (i as u8).wrapping_mul(151).wrapping_add(7)).collect();
    let mut rbuf = [0u8; 256];
    let mut control = [0u8; CONTROL_MAX_BYTES];
    let clock = || start.elapsed();

    loop {
        // 1. Everything the receiver has said so far.
        loop {
            match sock.recv(&mut rbuf) {
                Ok(len) => {
                    if let Some(Packet::Ack(ack)) = Packet::decode(&rbuf[..len]) {
                        core.on_ack(clock(), &ack);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                // The receiver went away for a moment (ICMP); keep probing.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("receive from {peer} failed: {e}")),
            }
        }
        core.on_timer(clock());
        while let Some(n) = core.take_control(clock()) {
            let len = Packet::Control { flow }.encode(&mut control[..n]);
            // Like an ACK, a control datagram the local queue cannot take is only lost.
            match sock.send(&control[..len]) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(format!("send to {peer} failed: {e}")),
            }
        }

        // 2. As many packets as the window and the pacer allow.
        let mut blocked = false;
        for _ in 0..send_batch {
            let now = clock();
            match core.send_allowed_at() {
                Some(at) if at <= now => {}
                _ => break,
            }
            let size = core.next_packet_bytes() as usize;
            let n = Packet::Data { flow, seq: core.next_seq(), sender_us: now.as_micros() as u64 }
                .encode(&mut data[..size]);
            match sock.send(&data[..n]) {
                Ok(_) => {
                    core.on_send(now);
                    stats.add_bytes(n as u64);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS) => {
                    core.on_send_refused(now);
                    blocked = true;
                    break;
                }
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => break,
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    return Err(format!(
                        "the path to {peer} cannot carry {}-byte IP packets (MTU below 1500?): {e}",
                        super::wire::IP_PACKET_BYTES
                    ));
                }
                Err(e) => return Err(format!("send to {peer} failed: {e}")),
            }
        }
        stats.set_lost(core.counts().lost);

        // 3. Sleep until an ACK, a pacing slot or a loss timeout.
        let now = clock();
        let wakeup = core.next_wakeup();
        let mut timeout = wakeup.map(|t| t.saturating_sub(now));
        if blocked {
            // The local queue is full; POLLOUT wakes us, but never sleep long on it.
            timeout = Some(timeout.map_or(Duration::from_millis(1), |t| t.min(Duration::from_millis(1))));
        }
        if timeout != Some(Duration::ZERO) {
            match wakeup {
                // A busy-waiting upstream spins to its slot; an ACK still ends the wait.
                Some(at) if busy_wait && !blocked && core.send_allowed_at() == Some(at) => spin_until(fd, at, clock)?,
                // A loop polling in whole ms sleeps those, then spins the rest (its `poll(int)`).
                Some(at) if whole_ms_poll && !blocked => poll_whole_ms_then_spin(fd, at, clock)?,
                _ => {
                    net::wait(fd, blocked, timeout).map_err(|e| format!("poll failed: {e}"))?;
                }
            }
        }
    }
}

/// Waits as genericCC's `poll(fd, 1, (int) ms)` loop does until `clock()` reaches `at` or the
/// socket has something to read: a sleep of the whole milliseconds left, then a spin.
fn poll_whole_ms_then_spin(fd: i32, at: Duration, clock: impl Fn() -> Duration) -> Result<(), String> {
    let whole = Duration::from_millis(at.saturating_sub(clock()).as_millis() as u64);
    if !whole.is_zero() && net::wait(fd, false, Some(whole)).map_err(|e| format!("poll failed: {e}"))?.readable {
        return Ok(());
    }
    spin_until(fd, at, clock)
}

/// Spins until `clock()` reaches `at` or the socket has something to read.
fn spin_until(fd: i32, at: Duration, clock: impl Fn() -> Duration) -> Result<(), String> {
    while clock() < at {
        if net::wait(fd, false, Some(Duration::ZERO)).map_err(|e| format!("poll failed: {e}"))?.readable {
            break;
        }
        std::hint::spin_loop();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::{AckEvent, LossEvent};
    use crate::transport::receiver::ReceiverFlow;
    use std::sync::Mutex;

    /// Records its sends ('S') and ACKs ('A'); its sixth send takes 300 ms (time for an ACK
    /// to arrive), and it has 200 packets to send.
    struct Recorder {
        events: Arc<Mutex<Vec<char>>>,
        acks_between_sends: bool,
        starts_without_handshake: bool,
    }

    impl Recorder {
        fn sent(&self) -> usize {
            self.events.lock().unwrap().iter().filter(|&&e| e == 'S').count()
        }
    }

    impl Controller for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn on_ack(&mut self, _ack: &AckEvent) {
            self.events.lock().unwrap().push('A');
        }
        fn on_loss(&mut self, _loss: &LossEvent) {}
        fn cwnd(&self) -> u64 {
            if self.sent() < 200 {
                u64::MAX / 4
            } else {
                0
            }
        }
        fn window_closed(&self) -> bool {
            self.sent() >= 200
        }
        fn pacing_rate(&self, _srtt: Duration) -> f64 {
            1e12
        }
        fn on_send(&mut self, _now: Duration, _seq: u64) {
            self.events.lock().unwrap().push('S');
            if self.sent() == 6 {
                std::thread::sleep(Duration::from_millis(300));
            }
        }
        fn acks_between_sends(&self) -> bool {
            self.acks_between_sends
        }
        fn starts_without_handshake(&self) -> bool {
            self.starts_without_handshake
        }
    }

    /// The events of a sender whose sixth packet is acknowledged while it is still sending it.
    fn events_with_an_ack_during_the_sixth_send(acks_between_sends: bool) -> String {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let peer = receiver.local_addr().unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let cc = Box::new(Recorder { events: events.clone(), acks_between_sends, starts_without_handshake: false });
        let stats = Arc::new(Stats::new("recorder", "sender", "bytes"));
        // The sender runs until the process ends; after its 200 packets it only waits.
        std::thread::spawn(move || run_sender(peer, cc, stats, Duration::from_secs(5)));
        let mut buf = [0u8; MAX_DATAGRAM_BYTES];
        loop {
            let (n, from) = receiver.recv_from(&mut buf).unwrap();
            match Packet::decode(&buf[..n]) {
                Some(Packet::Hello { flow, sender_us }) => {
                    let len = Packet::HelloAck { flow, echo_us: sender_us }.encode(&mut buf);
                    receiver.send_to(&buf[..len], from).unwrap();
                }
                // The sixth packet, answered while its sender still sleeps.
                Some(Packet::Data { flow, seq: seq @ 5, sender_us }) => {
                    let len = Packet::Ack(ReceiverFlow::new(flow).on_data(seq, sender_us, 0)).encode(&mut buf);
                    receiver.send_to(&buf[..len], from).unwrap();
                    break;
                }
                _ => {}
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !events.lock().unwrap().contains(&'A') {
            assert!(Instant::now() < deadline, "no ACK taken: {:?}", events.lock().unwrap());
            std::thread::sleep(Duration::from_millis(1));
        }
        let log: String = events.lock().unwrap().iter().collect();
        log
    }

    #[test]
    fn a_controller_that_asks_reads_its_acks_before_every_send() {
        // Upstream verus's ACK thread takes an ACK as it comes, whatever the sender is doing.
        let log = events_with_an_ack_during_the_sixth_send(true);
        assert!(log.starts_with("SSSSSSA"), "{log}");
        // By default the ACK waits for the end of a batch of 32 sends.
        let log = events_with_an_ack_during_the_sixth_send(false);
        assert!(log.starts_with(&format!("{}A", "S".repeat(MAX_SEND_BATCH))), "{log}");
    }

    /// The datagrams a peer receives first from a sender with this controller, which never
    /// gets an answer.
    fn first_datagrams(starts_without_handshake: bool, count: usize) -> Vec<Packet> {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let peer = receiver.local_addr().unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let cc = Box::new(Recorder { events, acks_between_sends: false, starts_without_handshake });
        let stats = Arc::new(Stats::new("recorder", "sender", "bytes"));
        std::thread::spawn(move || run_sender(peer, cc, stats, Duration::from_secs(5)));
        let mut buf = [0u8; MAX_DATAGRAM_BYTES];
        (0..count)
            .map(|_| {
                let (n, _) = receiver.recv_from(&mut buf).expect("the sender sent nothing within 5 s");
                Packet::decode(&buf[..n]).expect("a datagram of the wire format")
            })
            .collect()
    }

    #[test]
    fn a_controller_whose_upstream_started_blind_sends_data_before_any_answer() {
        // datagrump's sender (koho_cc-2017): DATA from the first datagram, in sequence, with
        // no answer from the peer at all.
        let seqs: Vec<u64> = first_datagrams(true, 16)
            .into_iter()
            .map(|p| match p {
                Packet::Data { seq, .. } => seq,
                other => panic!("expected DATA only, got {other:?}"),
            })
            .collect();
        assert_eq!(seqs, (0..16).collect::<Vec<u64>>());
        // By default nothing but HELLO until the receiver answers.
        assert!(first_datagrams(false, 2).iter().all(|p| matches!(p, Packet::Hello { .. })));
    }

    /// A UDT port behind a peer that never answers: HELLO every 250 ms, and after 3 s the
    /// sender gives up as CUDT::connect did, however long the connect timeout it was given.
    #[test]
    fn a_udt_port_gives_up_its_handshake_after_three_seconds() {
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
        silent.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let peer = silent.local_addr().unwrap();
        let cc = Box::new(crate::cc::PccExperimental2018::new(1500));
        let stats = Arc::new(Stats::new("pcc_experimental-2018", "sender", "bytes"));
        let sender = std::thread::spawn(move || run_sender(peer, cc, stats, Duration::from_secs(60)));
        let mut hellos = 0;
        let mut buf = [0u8; MAX_DATAGRAM_BYTES];
        while !sender.is_finished() {
            if let Ok(n) = silent.recv(&mut buf) {
                assert!(matches!(Packet::decode(&buf[..n]), Some(Packet::Hello { .. })));
                hellos += 1;
            }
        }
        let err = sender.join().unwrap().unwrap_err();
        assert!(err.contains("after 3.0 s"), "{err}");
        // 3 s of requests 250 ms apart, the first at once: 12 (13 when the last lands on the
        // deadline); a late wake-up can only make fewer.
        assert!((9..=13).contains(&hellos), "{hellos} HELLOs");
    }

    #[test]
    fn a_spin_ends_at_its_slot_or_when_a_datagram_arrives() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let start = Instant::now();
        let clock = || start.elapsed();
        spin_until(sock.as_raw_fd(), Duration::from_millis(2), clock).unwrap();
        assert!(clock() >= Duration::from_millis(2));
        // A datagram waiting ends the spin long before its slot.
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.send_to(b"ack", sock.local_addr().unwrap()).unwrap();
        let slot = clock() + Duration::from_secs(60);
        spin_until(sock.as_raw_fd(), slot, clock).unwrap();
        assert!(clock() < slot);
    }

    /// genericCC's wait: never before its deadline (a sleep of whole ms would wake early on
    /// a 2.7 ms wait: the rest is spun), and a datagram ends it, in the sleep or in the spin.
    #[test]
    fn a_whole_ms_poll_wakes_at_its_deadline_or_when_a_datagram_arrives() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let start = Instant::now();
        let clock = || start.elapsed();
        for wait_us in [2700, 400] {
            let at = clock() + Duration::from_micros(wait_us);
            poll_whole_ms_then_spin(sock.as_raw_fd(), at, clock).unwrap();
            assert!(clock() >= at, "woke before a {wait_us} µs deadline");
        }
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.send_to(b"ack", sock.local_addr().unwrap()).unwrap();
        let at = clock() + Duration::from_secs(60);
        poll_whole_ms_then_spin(sock.as_raw_fd(), at, clock).unwrap();
        assert!(clock() < at);
    }
}
