//! A packet in flight through the emulated path.

/// Bytes of the TUN packet-information header that Mahimahi counts in every size
/// (its TUN devices are opened without IFF_NO_PI).
pub const TUN_HEADER: usize = 4;

/// One delivery opportunity carries this many bytes: a 1500-byte IP packet plus the header.
pub const OPPORTUNITY_BYTES: usize = 1504;

/// Milliseconds since the emulation's zero point (Mahimahi's "init timestamp").
pub type Ms = u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// The IP packet as read from the TUN device.
    pub data: Vec<u8>,
    /// When the packet reached the stage that holds it; each stage sets it to the packet's
    /// scheduled departure, so a late wake-up never shifts the schedule downstream.
    pub time: Ms,
    /// Real time the packet entered the emulated path, in microseconds since the zero point
    /// (for the Pantheon-format log's one-way delay).
    pub entered_us: u64,
    /// Connection number (1-based, in order of first appearance), for the Pantheon log.
    pub flow: u32,
}

impl Packet {
    pub fn new(data: Vec<u8>, time: Ms) -> Self {
        Packet { data, time, entered_us: time * 1000, flow: 0 }
    }

    /// Size as Mahimahi counts it: IP length plus the TUN header.
    pub fn size(&self) -> usize {
        self.data.len() + TUN_HEADER
    }
}
