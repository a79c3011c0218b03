//! Socket plumbing shared by the endpoints: argument parsing helpers, listening on both
//! address families, buffer sizes, and waiting with sub-millisecond timeouts.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// How long a connecting side keeps trying before it gives up on the peer.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Overrides [`DEFAULT_CONNECT_TIMEOUT`], in seconds (used by tests and slow setups).
pub const CONNECT_TIMEOUT_ENV: &str = "CALIBRATE_SCHEME_CONNECT_TIMEOUT";

pub fn connect_timeout() -> Duration {
    std::env::var(CONNECT_TIMEOUT_ENV)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(DEFAULT_CONNECT_TIMEOUT)
}

pub fn parse_port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("invalid port {text:?}: expected an integer in 1..=65535")),
    }
}

pub fn parse_ip(text: &str) -> Result<IpAddr, String> {
    text.parse::<IpAddr>().map_err(|_| format!("invalid IP address {text:?}: expected e.g. 10.0.0.2 or fd00::2"))
}

/// The unspecified address of the peer's family, for binding the connecting side.
pub fn unspecified_for(peer: &SocketAddr) -> SocketAddr {
    match peer {
        SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        SocketAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    }
}

/// The listening side does not know the peer's family: bind `[::]` (dual-stack on Linux
/// unless `bindv6only` is set) and fall back to `0.0.0.0` where IPv6 is disabled, as it
/// often is inside network namespaces.
pub fn listen_addrs(port: u16) -> [SocketAddr; 2] {
    [SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port), SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)]
}

pub fn bind_udp(port: u16) -> io::Result<UdpSocket> {
    let [v6, v4] = listen_addrs(port);
    UdpSocket::bind(v6).or_else(|_| UdpSocket::bind(v4))
}

pub fn bind_tcp(port: u16) -> io::Result<TcpListener> {
    let [v6, v4] = listen_addrs(port);
    TcpListener::bind(v6).or_else(|_| TcpListener::bind(v4))
}

pub fn setsockopt_int(fd: i32, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: passes a pointer to a live i32 and its size, as setsockopt(2) requires.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub fn setsockopt_bytes(fd: i32, level: i32, name: i32, value: &[u8]) -> io::Result<()> {
    // SAFETY: passes a live byte slice and its length.
    let rc = unsafe {
        libc::setsockopt(fd, level, name, value.as_ptr() as *const libc::c_void, value.len() as libc::socklen_t)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub fn getsockopt_int(fd: i32, level: i32, name: i32) -> io::Result<i32> {
    let mut value: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: value and len are live and sized for an int option.
    let rc = unsafe { libc::getsockopt(fd, level, name, &mut value as *mut i32 as *mut libc::c_void, &mut len) };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Which buffer to size.
#[derive(Clone, Copy, Debug)]
pub enum Buffer {
    Send,
    Receive,
}

/// Sets a socket buffer to `bytes`. `net.core.{r,w}mem_max` are global and small in a
/// fresh namespace, so as root the *FORCE variants bypass them; otherwise the plain option
/// is used and the kernel caps it. Returns the size the kernel reports afterwards.
pub fn set_buffer(fd: i32, which: Buffer, bytes: usize) -> io::Result<usize> {
    let bytes = bytes.min(i32::MAX as usize / 2) as i32;
    let (force, plain) = match which {
        Buffer::Send => (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        Buffer::Receive => (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
    };
    if setsockopt_int(fd, libc::SOL_SOCKET, force, bytes).is_err() {
        setsockopt_int(fd, libc::SOL_SOCKET, plain, bytes)?;
    }
    getsockopt_int(fd, libc::SOL_SOCKET, plain).map(|v| v as usize)
}

/// Sets both socket buffers to `bytes` ([`set_buffer`]), best effort: a datagram endpoint
/// whose bursts must queue at the bottleneck, not overflow its own socket.
pub fn set_buffers(fd: i32, bytes: usize) {
    let _ = set_buffer(fd, Buffer::Send, bytes);
    let _ = set_buffer(fd, Buffer::Receive, bytes);
}

/// Whether the kernel may fragment a datagram larger than the path's MTU. Forbidden, a DATA
/// packet either leaves as one 1500-byte IP packet or the send fails with EMSGSIZE (which the
/// sender reports) instead of silently splitting; allowed is Linux's default
/// (`IP_PMTUDISC_WANT`), what a UDP program that never set the option got on its host.
pub fn set_fragmentation(sock: &UdpSocket, peer: &SocketAddr, allowed: bool) -> io::Result<()> {
    let fd = sock.as_raw_fd();
    match (peer, allowed) {
        (SocketAddr::V4(_), false) => setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO),
        (SocketAddr::V4(_), true) => {
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_WANT)
        }
        (SocketAddr::V6(_), false) => {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_DO)
        }
        (SocketAddr::V6(_), true) => {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_WANT)
        }
    }
}

/// Readiness reported by [`wait`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Ready {
    pub readable: bool,
    pub writable: bool,
}

/// Waits until `fd` is readable (or writable, if asked) or `timeout` passes. Uses ppoll
/// because the pacer needs waits far shorter than poll's millisecond granularity.
pub fn wait(fd: i32, want_write: bool, timeout: Option<Duration>) -> io::Result<Ready> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN | if want_write { libc::POLLOUT } else { 0 }, revents: 0 };
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: one live pollfd, a timespec that outlives the call or null, no signal mask.
    let rc = unsafe { libc::ppoll(&mut pfd, 1, ts_ptr, std::ptr::null()) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(Ready::default());
        }
        return Err(err);
    }
    Ok(Ready {
        readable: pfd.revents & (libc::POLLIN | libc::POLLERR) != 0,
        writable: pfd.revents & libc::POLLOUT != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ports_and_addresses() {
        assert_eq!(parse_port("5000"), Ok(5000));
        assert!(parse_port("0").is_err());
        assert!(parse_port("70000").is_err());
        assert!(parse_port("x").is_err());
        assert!(parse_ip("10.0.0.2").is_ok());
        assert!(parse_ip("fd00::2").is_ok());
        assert!(parse_ip("example.org").is_err());
    }

    #[test]
    fn wait_times_out_without_traffic() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let ready = wait(sock.as_raw_fd(), false, Some(Duration::from_micros(300))).unwrap();
        assert!(!ready.readable);
    }
}
