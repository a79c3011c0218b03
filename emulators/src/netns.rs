//! The two ends of an emulated path: a network namespace each, holding a point-to-point
//! TUN device whose other end is this process. Nothing is configured in the host namespace,
//! so any number of engines can run side by side with the same addresses.
//!
//! A namespace lives as long as something refers to it: this process's descriptors (the
//! namespace and the TUN device) and the processes running inside. When the engine exits
//! and its endpoints are gone, the kernel removes both namespaces and their devices.

use crate::error::{Error, Result};
use std::ffi::c_void;
use std::fs::File;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The receiver's side plays Mahimahi's "outside" (MAHIMAHI_BASE), the sender the inside.
pub const RECEIVER_ADDRESS: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 1);
pub const SENDER_ADDRESS: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 2);
pub const DEVICE: &str = "emu0";
pub const MTU: i32 = 1500;

/// The TCP socket buffers of Pantheon's hosts (Ubuntu's defaults, as a Pantheon report of 2019
/// prints them; the 2017 hosts ran Ubuntu too): on an unbounded queue they alone bound a kernel
/// TCP flow (Pantheon's 2017 default_tcp held about 2 s of queue at 10 Mbit/s), so they are
/// part of the scheme. Set per namespace (net.core.*mem_max are global in Linux and are left
/// alone; iperf 2 sets no buffer, so they do not apply).
pub const TCP_WMEM: &str = "4096 16384 4194304";
/// Ubuntu's receive buffer, for kernels that advertise a window of half the buffer
/// (`tcp_adv_win_scale` = 1, as Pantheon's 4.x kernels did).
pub const TCP_RMEM: &str = "4096 87380 6291456";
/// From Linux 6.6 the advertised window is the buffer times the measured payload-to-truesize
/// ratio instead (`tcp_adv_win_scale` is ignored), about two thirds on the engine's TUN path:
/// Ubuntu's 6 MiB then opens a 4 MiB window (default_tcp queued 2.9 s at 10 Mbit/s, 28 ms,
/// where Pantheon's hosts queued 2.0 s), and 4 MiB opens about the window they had (2.1 s).
pub const TCP_RMEM_SCALING_RATIO: &str = "4096 87380 4194304";

/// The receive buffer that gives this kernel Pantheon's hosts' receive window.
fn tcp_rmem() -> &'static str {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut numbers = release.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u32>().ok());
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    if version >= (6, 6) {
        TCP_RMEM_SCALING_RATIO
    } else {
        TCP_RMEM
    }
}

/// One end of the path.
pub struct Side {
    pub netns: OwnedFd,
    pub tun: OwnedFd,
    pub address: Ipv4Addr,
    pub peer: Ipv4Addr,
}

/// Fail early, with a message saying what to do, if this host cannot run the engine.
pub fn check_host() -> Result<()> {
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err(Error::environment(
            "no /dev/net/tun: this host has no TUN support (load the tun module, or give the container --device /dev/net/tun)",
        ));
    }
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::environment(
            "calibrate-link must run as root (it creates network namespaces and TUN devices: CAP_SYS_ADMIN and CAP_NET_ADMIN)",
        ));
    }
    Ok(())
}

/// Create a fresh network namespace holding a configured TUN device.
pub fn create_side(address: Ipv4Addr, peer: Ipv4Addr) -> Result<Side> {
    // Network namespaces belong to threads: do the work on a thread that exists only for it,
    // so the engine's main thread stays where it was.
    std::thread::spawn(move || build_side(address, peer))
        .join()
        .map_err(|_| Error::runtime("the namespace set-up thread panicked"))?
}

/// A fresh network namespace with the endpoints' settings (`tune_endpoint_namespace`), its
/// loopback up, and IP forwarding on if `forwarding` (Mahimahi's shells need it where they run).
pub fn create_namespace(forwarding: bool) -> Result<OwnedFd> {
    std::thread::spawn(move || -> Result<OwnedFd> {
        let (netns, _control) = enter_new_namespace()?;
        if forwarding {
            sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
        }
        Ok(netns.into())
    })
    .join()
    .map_err(|_| Error::runtime("the namespace set-up thread panicked"))?
}

/// Give the namespace `netns` (made by someone else, e.g. a Mahimahi shell) the settings an
/// endpoint's namespace gets here.
pub fn tune_namespace(netns: i32) -> Result<()> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                if unsafe { libc::setns(netns, libc::CLONE_NEWNET) } != 0 {
                    return Err(os_error("entering a network namespace"));
                }
                tune_endpoint_namespace()
            })
            .join()
            .map_err(|_| Error::runtime("the namespace set-up thread panicked"))?
    })
}

/// The IPv4 address of `device` in the namespace `netns`, or, with `device` None, the device
/// holding `address` there.
pub fn device_address(netns: i32, device: Option<&str>, address: Option<Ipv4Addr>) -> Result<(String, Ipv4Addr)> {
    let device = device.map(str::to_string);
    std::thread::scope(|scope| {
        scope
            .spawn(move || -> Result<(String, Ipv4Addr)> {
                if unsafe { libc::setns(netns, libc::CLONE_NEWNET) } != 0 {
                    return Err(os_error("entering a network namespace"));
                }
                let control = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
                if control < 0 {
                    return Err(os_error("socket"));
                }
                let control = unsafe { OwnedFd::from_raw_fd(control) };
                let names = match &device {
                    Some(name) => vec![name.clone()],
                    None => interface_names(),
                };
                for name in names {
                    let mut request = IfReq::new(&name);
                    if unsafe {
                        libc::ioctl(control.as_raw_fd(), SIOCGIFADDR, &mut request as *mut IfReq as *mut c_void)
                    } < 0
                    {
                        continue;
                    }
                    let found = Ipv4Addr::new(request.data[4], request.data[5], request.data[6], request.data[7]);
                    if address.is_none_or(|a| a == found) {
                        return Ok((name, found));
                    }
                }
                Err(Error::runtime(match (&device, address) {
                    (Some(name), _) => format!("device {name} has no IPv4 address"),
                    (None, Some(a)) => format!("no device holds {a}"),
                    (None, None) => "no device with an IPv4 address".to_string(),
                }))
            })
            .join()
            .map_err(|_| Error::runtime("the namespace inspection thread panicked"))?
    })
}

fn interface_names() -> Vec<String> {
    let mut names = Vec::new();
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return names;
        }
        let mut entry = list;
        while (*entry).if_index != 0 {
            names.push(std::ffi::CStr::from_ptr((*entry).if_name).to_string_lossy().into_owned());
            entry = entry.add(1);
        }
        libc::if_freenameindex(list);
    }
    names
}

/// Move this thread into a new network namespace, tuned, with its loopback up.
fn enter_new_namespace() -> Result<(File, OwnedFd)> {
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::environment(format!(
            "cannot create a network namespace ({e}): run as root, with CAP_SYS_ADMIN and CAP_NET_ADMIN"
        )));
    }
    let netns = File::open("/proc/thread-self/ns/net")
        .map_err(|e| Error::environment(format!("cannot open the new namespace: {e}")))?;
    tune_endpoint_namespace()?;
    let control = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if control < 0 {
        return Err(os_error("socket"));
    }
    let control = unsafe { OwnedFd::from_raw_fd(control) };
    set_up(control.as_raw_fd(), "lo")?;
    Ok((netns, control))
}

/// Settings of the namespace an endpoint runs in: Pantheon's hosts' TCP buffers, no IPv6 (its
/// router solicitations and MLD reports would be counted as traffic).
fn tune_endpoint_namespace() -> Result<()> {
    for path in ["/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"] {
        let _ = sysctl(path, "1");
    }
    sysctl("/proc/sys/net/ipv4/tcp_rmem", tcp_rmem())?;
    sysctl("/proc/sys/net/ipv4/tcp_wmem", TCP_WMEM)
}

fn build_side(address: Ipv4Addr, peer: Ipv4Addr) -> Result<Side> {
    let (netns, control) = enter_new_namespace()?;

    let tun = open_tun()?;
    let fd = control.as_raw_fd();
    let mut request = IfReq::new(DEVICE);
    request.set_int(MTU);
    ioctl(fd, SIOCSIFMTU, &mut request, "set the MTU")?;
    for (code, value, what) in [
        (SIOCSIFADDR, address, "set the address"),
        (SIOCSIFDSTADDR, peer, "set the peer address"),
        (SIOCSIFNETMASK, Ipv4Addr::BROADCAST, "set the netmask"),
    ] {
        let mut request = IfReq::new(DEVICE);
        request.set_address(value);
        ioctl(fd, code, &mut request, what)?;
    }
    set_up(fd, DEVICE)?;
    add_default_route(fd)?;
    Ok(Side { netns: netns.into(), tun, address, peer })
}

fn sysctl(path: &str, value: &str) -> Result<()> {
    File::options()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| Error::environment(format!("cannot set {path} in the emulator's namespace: {e}")))
}

fn os_error(what: &str) -> Error {
    Error::environment(format!("{what} failed: {}", std::io::Error::last_os_error()))
}

const TUNSETIFF: libc::c_ulong = 0x400454ca;
const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
const SIOCSIFFLAGS: libc::c_ulong = 0x8914;
const SIOCGIFADDR: libc::c_ulong = 0x8915;
const SIOCSIFADDR: libc::c_ulong = 0x8916;
const SIOCSIFDSTADDR: libc::c_ulong = 0x8918;
const SIOCSIFNETMASK: libc::c_ulong = 0x891c;
const SIOCSIFMTU: libc::c_ulong = 0x8922;
const SIOCADDRT: libc::c_ulong = 0x890b;

/// `struct ifreq`: a name and a 24-byte union (address, flags or MTU).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> Self {
        let mut request = IfReq { name: [0; libc::IFNAMSIZ], data: [0; 24] };
        request.name[..name.len()].copy_from_slice(name.as_bytes());
        request
    }
    fn set_int(&mut self, value: i32) {
        self.data[..4].copy_from_slice(&value.to_ne_bytes());
    }
    fn set_short(&mut self, value: i16) {
        self.data[..2].copy_from_slice(&value.to_ne_bytes());
    }
    fn short(&self) -> i16 {
        i16::from_ne_bytes([self.data[0], self.data[1]])
    }
    fn set_address(&mut self, address: Ipv4Addr) {
        self.data[..16].copy_from_slice(&sockaddr(address));
    }
}

/// `struct sockaddr_in` as the 16 bytes of a `struct sockaddr`.
fn sockaddr(address: Ipv4Addr) -> [u8; 16] {
    let mut raw = [0u8; 16];
    raw[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
    raw[4..8].copy_from_slice(&address.octets());
    raw
}

fn ioctl<T>(fd: i32, code: libc::c_ulong, argument: &mut T, what: &str) -> Result<()> {
    if unsafe { libc::ioctl(fd, code, argument as *mut T as *mut c_void) } < 0 {
        return Err(os_error(&format!("{what} ({DEVICE})")));
    }
    Ok(())
}

fn set_up(fd: i32, name: &str) -> Result<()> {
    let mut request = IfReq::new(name);
    ioctl(fd, SIOCGIFFLAGS, &mut request, "read interface flags")?;
    request.set_short(request.short() | (libc::IFF_UP | libc::IFF_RUNNING) as i16);
    ioctl(fd, SIOCSIFFLAGS, &mut request, "bring the interface up")
}

fn open_tun() -> Result<OwnedFd> {
    let fd = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if fd < 0 {
        return Err(os_error("opening /dev/net/tun"));
    }
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut request = IfReq::new(DEVICE);
    // No packet-information header: sizes still count it, as Mahimahi does (see packet.rs).
    request.set_short((libc::IFF_TUN | libc::IFF_NO_PI) as i16);
    ioctl(fd.as_raw_fd(), TUNSETIFF, &mut request, "create the TUN device")?;
    Ok(fd)
}

/// `struct rtentry` (x86-64 and other LP64 Linux layouts).
#[repr(C)]
struct RtEntry {
    pad1: libc::c_ulong,
    dst: [u8; 16],
    gateway: [u8; 16],
    genmask: [u8; 16],
    flags: libc::c_ushort,
    pad2: libc::c_short,
    pad3: libc::c_ulong,
    pad4: *mut c_void,
    metric: libc::c_short,
    dev: *mut libc::c_char,
    mtu: libc::c_ulong,
    window: libc::c_ulong,
    irtt: libc::c_ushort,
}

/// Everything not addressed to this side goes to the other one, as in a Mahimahi shell.
fn add_default_route(fd: i32) -> Result<()> {
    let mut device = *b"emu0\0";
    let mut route = RtEntry {
        pad1: 0,
        dst: sockaddr(Ipv4Addr::UNSPECIFIED),
        gateway: sockaddr(Ipv4Addr::UNSPECIFIED),
        genmask: sockaddr(Ipv4Addr::UNSPECIFIED),
        flags: libc::RTF_UP,
        pad2: 0,
        pad3: 0,
        pad4: std::ptr::null_mut(),
        metric: 0,
        dev: device.as_mut_ptr() as *mut libc::c_char,
        mtu: 0,
        window: 0,
        irtt: 0,
    };
    ioctl(fd, SIOCADDRT, &mut route, "add the default route")
}
