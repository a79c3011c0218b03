//! Kernel TCP with a chosen congestion control: a full-throttle sender and a discarding
//! receiver, the same workload as Pantheon's iperf-based wrappers, and socket for socket like
//! them: iperf 2 (`iperf -Z CC -c …` and `iperf -Z CC -s`) sets no buffer and no other socket
//! option, and reads and writes 128 KiB at a time.
//!
//! * The congestion control is set per socket with `TCP_CONGESTION` before the connection
//!   exists (on the listener, whose accepted sockets inherit it, and on the sender's socket
//!   before `connect`), so no system-wide default is touched.
//! * Buffers are the kernel's, as iperf 2 leaves them: a socket starts with the namespace's
//!   `tcp_wmem`/`tcp_rmem` default and autotuning grows it with the congestion window up to
//!   their maximum. The engine's endpoint namespaces carry the values of Pantheon's hosts
//!   (Ubuntu's defaults: `tcp_wmem` 4096 16384 4194304, `tcp_rmem` 4096 87380 6291456;
//!   emulators/src/netns.rs): on an unbounded queue only these buffers bound a flow, so they
//!   decide how much queue Pantheon's default_tcp built (about 2 s at 10 Mbit/s).
//! * Why iperf 2's buffers (experiments/README.md, "Which senders the gap is about"): with forced
//!   64 MiB buffers, `TCP_NOTSENT_LOWAT` and 1 MiB reads and writes the engine carries these
//!   flows at 86 % of a 100 Mbit/s, 30-packet link where real Mahimahi carries them, and iperf
//!   2's, at 66–68 %; with iperf 2's buffers they lose as iperf 2's flows do.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::net;
use crate::stats::Stats;

/// Bytes per read and per write: iperf 2's default length (`-l`) for TCP.
const IO_CHUNK: usize = 128 << 10;
const CONNECT_RETRY_INTERVAL: Duration = Duration::from_millis(100);

fn set_congestion_control(fd: i32, cc: &str) -> Result<(), String> {
    net::setsockopt_bytes(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, cc.as_bytes()).map_err(|e| {
        format!(
            "cannot use TCP congestion control {cc:?}: {e} (is it in \
             /proc/sys/net/ipv4/tcp_available_congestion_control, and allowed for this user?)"
        )
    })
}

/// Listens on `port` and discards whatever any number of senders send.
pub fn run_receiver(cc: &str, port: u16, stats: Arc<Stats>) -> Result<(), String> {
    let listener = net::bind_tcp(port).map_err(|e| format!("cannot listen on TCP port {port}: {e}"))?;
    let fd = listener.as_raw_fd();
    set_congestion_control(fd, cc)?;
    serve(listener, stats)
}

fn serve(listener: TcpListener, stats: Arc<Stats>) -> Result<(), String> {
    loop {
        let (stream, _) = match listener.accept() {
            Ok(conn) => conn,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("accept failed: {e}")),
        };
        let stats = Arc::clone(&stats);
        std::thread::spawn(move || discard(stream, &stats));
    }
}

fn discard(mut stream: TcpStream, stats: &Stats) {
    let mut buf = vec![0u8; IO_CHUNK];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => stats.add_bytes(n as u64),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
    }
}

/// One connection attempt on a fresh socket, with the options set before `connect`, from
/// `*local_port` (0: any; set to the port used). Every try of one sender leaves from the same
/// port, so a refused try is the same connection as the one that succeeds (one 5-tuple, one
/// flow in the logs) rather than a flow of its own.
fn try_connect(
    peer: &SocketAddr,
    cc: &str,
    deadline: Instant,
    local_port: &mut u16,
) -> Result<TcpStream, std::io::Error> {
    let family = if peer.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain socket(2); the descriptor is owned by the TcpStream below or closed.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid socket that nothing else owns.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    set_congestion_control(fd, cc).map_err(std::io::Error::other)?;
    net::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    let mut local = net::unspecified_for(peer);
    local.set_port(*local_port);
    let (storage, len) = sockaddr(&local);
    // SAFETY: storage holds a valid sockaddr of length len.
    if unsafe { libc::bind(fd, &storage as *const _ as *const libc::sockaddr, len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    *local_port = stream.local_addr()?.port();

    let (storage, len) = sockaddr(peer);
    // SAFETY: storage holds a valid sockaddr of length len.
    let rc = unsafe { libc::connect(fd, &storage as *const _ as *const libc::sockaddr, len) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(err);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let ready = net::wait(fd, true, Some(left))?;
        if !ready.writable {
            return Err(std::io::Error::from(std::io::ErrorKind::TimedOut));
        }
        let so_error = net::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ERROR)?;
        if so_error != 0 {
            return Err(std::io::Error::from_raw_os_error(so_error));
        }
    }
    stream.set_nonblocking(false)?;
    Ok(stream)
}

fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// Connects to `peer` (retrying while the receiver is not up yet) and sends until killed.
pub fn run_sender(cc: &str, peer: SocketAddr, stats: Arc<Stats>, connect_timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + connect_timeout;
    let mut local_port = 0;
    let mut stream = loop {
        match try_connect(&peer, cc, deadline, &mut local_port) {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::Other => return Err(e.to_string()),
            Err(e) => {
                if Instant::now() + CONNECT_RETRY_INTERVAL >= deadline {
                    return Err(format!(
                        "cannot connect to a receiver at {peer} within {:.1} s (last error: {e}); \
                         is the receiver running and reachable?",
                        connect_timeout.as_secs_f64()
                    ));
                }
                std::thread::sleep(CONNECT_RETRY_INTERVAL);
            }
        }
    };
    // Non-zero filler so nothing on the path can compress the probe.
    let buf: Vec<u8> = (0..IO_CHUNK).map(|i| (i as u8).wrapping_mul(151).wrapping_add(7)).collect();
    loop {
        match stream.write(&buf) {
            Ok(n) => stats.add_bytes(n as u64),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("connection to {peer} lost: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_congestion_control_is_a_clear_error() {
        let err = run_receiver("no-such-cc", 0, Arc::new(Stats::new("x", "receiver", "chunks"))).unwrap_err();
        assert!(err.contains("no-such-cc"), "{err}");
    }

    #[test]
    fn every_try_to_connect_leaves_from_the_same_port() {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let peer: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut local_port = 0;
        let refused = try_connect(&peer, "reno", deadline, &mut local_port).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        let first = local_port;
        assert_ne!(first, 0);
        assert!(try_connect(&peer, "reno", deadline, &mut local_port).is_err());
        assert_eq!(local_port, first);
        let listener = TcpListener::bind(peer).unwrap();
        let stream = try_connect(&peer, "reno", deadline, &mut local_port).unwrap();
        assert_eq!(stream.local_addr().unwrap().port(), first);
        assert_eq!(listener.accept().unwrap().1.port(), first);
    }
}
