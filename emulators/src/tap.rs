//! Taps at the two ends of a real Mahimahi path, for `--backend mahimahi`: a packet socket on
//! Mahimahi's innermost TUN device (where the sender's packets enter the shells and its ACKs
//! come out) and one on the outermost (where data comes out to the receiver and ACKs enter).
//! Every packet is seen entering and leaving, so its one-way delay and its loss are measured
//! as Pantheon's tunnels measure them, and written as the Pantheon-format logs the engine
//! writes for its own path.
//!
//! The shells NAT and route what they forward (addresses, ports, TTL and checksums change on
//! the way), so a packet is recognised at the far end by what they leave alone: protocol, IP
//! length and identification, and the transport bytes after the ports and outside the checksum
//! ([`Matcher`]).

use crate::error::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// What a packet socket saw: the packet was sent out of the device (by this namespace's
/// stack) or received from it (written into the TUN by the Mahimahi process behind it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Sent,
    Received,
}

/// A packet socket bound to one device in one network namespace.
pub struct Tap {
    fd: OwnedFd,
}

const SOCKET_BUFFER: i32 = 16 << 20;

impl Tap {
    /// Open a tap on `device` inside the network namespace `netns`.
    pub fn open(netns: RawFd, device: &str) -> Result<Tap> {
        let device = device.to_string();
        std::thread::scope(|scope| {
            scope
                .spawn(|| -> Result<Tap> {
                    if unsafe { libc::setns(netns, libc::CLONE_NEWNET) } != 0 {
                        return Err(os_error("entering the Mahimahi shell's namespace"));
                    }
                    let name = std::ffi::CString::new(device.as_str()).expect("device name");
                    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
                    if index == 0 {
                        return Err(os_error(&format!("finding device {device}")));
                    }
                    let protocol = (libc::ETH_P_ALL as u16).to_be() as i32;
                    let fd = unsafe {
                        libc::socket(
                            libc::AF_PACKET,
                            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                            protocol,
                        )
                    };
                    if fd < 0 {
                        return Err(os_error("opening a packet socket"));
                    }
                    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                    let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                    address.sll_family = libc::AF_PACKET as u16;
                    address.sll_protocol = protocol as u16;
                    address.sll_ifindex = index as i32;
                    let size = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
                    if unsafe { libc::bind(fd.as_raw_fd(), &address as *const _ as *const libc::sockaddr, size) } != 0 {
                        return Err(os_error(&format!("binding a packet socket to {device}")));
                    }
                    let one: i32 = 1;
                    for (option, value) in [(libc::SO_RCVBUFFORCE, SOCKET_BUFFER), (libc::SO_TIMESTAMPNS, one)] {
                        let v = &value as *const i32 as *const libc::c_void;
                        unsafe { libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, option, v, 4) };
                    }
                    Ok(Tap { fd })
                })
                .join()
                .map_err(|_| Error::runtime("the tap set-up thread panicked"))?
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The next packet, if one is waiting: its length in `buffer`, which way it went, and the
    /// kernel's wall-clock receive time in microseconds since the epoch.
    pub fn read(&self, buffer: &mut [u8]) -> Result<Option<(usize, Seen, u64)>> {
        let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut control = [0u8; 64];
        let mut iov = libc::iovec { iov_base: buffer.as_mut_ptr() as *mut libc::c_void, iov_len: buffer.len() };
        let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
        message.msg_name = &mut address as *mut _ as *mut libc::c_void;
        message.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        message.msg_controllen = control.len();
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut message, libc::MSG_TRUNC) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
                _ => Err(Error::runtime(format!("reading a tap on the Mahimahi path failed: {e}"))),
            };
        }
        let mut at_us = None;
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&message);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SO_TIMESTAMPNS {
                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::timespec);
                    at_us = Some(ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000);
                }
                cmsg = libc::CMSG_NXTHDR(&message, cmsg);
            }
        }
        let at_us = at_us.unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            now.as_micros() as u64
        });
        let seen = if address.sll_pkttype == libc::PACKET_OUTGOING { Seen::Sent } else { Seen::Received };
        Ok(Some(((n as usize).min(buffer.len()), seen, at_us)))
    }

    /// Packets the kernel dropped because this tap did not read them in time.
    pub fn drops(&self) -> u64 {
        let mut stats = [0u32; 2];
        let mut size = 8 as libc::socklen_t;
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                stats.as_mut_ptr() as *mut libc::c_void,
                &mut size,
            )
        };
        if r == 0 {
            u64::from(stats[1])
        } else {
            0
        }
    }
}

fn os_error(what: &str) -> Error {
    Error::environment(format!("{what} failed: {}", std::io::Error::last_os_error()))
}

/// What identifies an IP packet on both sides of Mahimahi's NAT and routing: a hash of the
/// protocol, the IP length and identification, and the transport bytes after the ports,
/// without the checksum (TCP: sequence, acknowledgement, flags, window, options and payload;
/// UDP: the payload; ICMP echo: sequence and payload). `None` for what is not IPv4.
pub fn identity(packet: &[u8]) -> Option<u64> {
    if packet.len() < 20 || packet[0] >> 4 != 4 {
        return None;
    }
    let header = usize::from(packet[0] & 0x0f) * 4;
    let protocol = packet[9];
    let transport = packet.get(header..).unwrap_or(&[]);
    let mut hash = Fnv::default();
    hash.write(&[protocol]);
    hash.write(&packet[2..6]); // total length, identification
    let (from, skip) = match protocol {
        6 => (4, Some(16..18)), // TCP: after the ports; checksum at 16
        17 => (8, None),        // UDP: the payload
        1 => (6, None),         // ICMP: after type, code, checksum and the identifier NAT may rewrite
        _ => (0, None),
    };
    let end = transport.len().min(from + 64);
    for (i, byte) in transport.iter().enumerate().take(end).skip(from) {
        if skip.as_ref().is_some_and(|s| s.contains(&i)) {
            continue;
        }
        hash.write(&[*byte]);
    }
    Some(hash.0)
}

/// 64-bit FNV-1a.
struct Fnv(u64);
impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}
impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }
}

/// Packets seen entering one end of the path, waiting to be seen leaving the other (pure).
#[derive(Default)]
pub struct Matcher {
    waiting: HashMap<u64, VecDeque<(u64, u32)>>,
    count: usize,
}

impl Matcher {
    /// A packet with `identity` entered at `at_us`, in flow `flow`.
    pub fn entered(&mut self, identity: u64, at_us: u64, flow: u32) {
        self.waiting.entry(identity).or_default().push_back((at_us, flow));
        self.count += 1;
    }

    /// A packet with `identity` left at `at_us`: its entry time and flow, if it was seen
    /// entering (the earliest such entry: a copy made on the way would leave later).
    pub fn left(&mut self, identity: u64) -> Option<(u64, u32)> {
        let queue = self.waiting.get_mut(&identity)?;
        let entry = queue.pop_front();
        if queue.is_empty() {
            self.waiting.remove(&identity);
        }
        if entry.is_some() {
            self.count -= 1;
        }
        entry
    }

    /// Packets that entered and have not left (lost, or still on the way).
    pub fn waiting(&self) -> usize {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(src: [u8; 4], dst: [u8; 4], sport: u16, id: u16, seq: u32, ttl: u8, checksum: u16) -> Vec<u8> {
        let mut p = vec![0u8; 60];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&60u16.to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[8] = ttl;
        p[9] = 6;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&5201u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[36..38].copy_from_slice(&checksum.to_be_bytes());
        p[40..].fill(7);
        p
    }

    #[test]
    fn identity_survives_nat_and_routing_but_tells_packets_apart() {
        let inside = tcp([100, 64, 0, 4], [100, 64, 0, 1], 40000, 17, 1000, 64, 0xabcd);
        let outside = tcp([100, 64, 0, 2], [100, 64, 0, 1], 40001, 17, 1000, 62, 0x1234);
        assert_eq!(identity(&inside), identity(&outside));
        assert_ne!(identity(&inside), identity(&tcp([100, 64, 0, 4], [100, 64, 0, 1], 40000, 18, 1000, 64, 0)));
        assert_ne!(identity(&inside), identity(&tcp([100, 64, 0, 4], [100, 64, 0, 1], 40000, 17, 2448, 64, 0)));
        assert_eq!(identity(&[0x60; 40]), None);
    }

    #[test]
    fn matcher_pairs_entries_and_exits_first_in_first_out() {
        let mut m = Matcher::default();
        m.entered(1, 100, 1);
        m.entered(1, 150, 1);
        m.entered(2, 120, 2);
        assert_eq!(m.left(1), Some((100, 1)));
        assert_eq!(m.left(3), None);
        assert_eq!(m.waiting(), 2);
        assert_eq!(m.left(1), Some((150, 1)));
        assert_eq!(m.left(1), None);
        assert_eq!(m.waiting(), 1);
    }
}
