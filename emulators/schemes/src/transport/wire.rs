//! Packet formats of the UDP transport (all integers big-endian).
//!
//! ```text
//! every packet   magic u8 = 0xCA | kind u8 | flow u64
//! HELLO          ... | sender clock µs u64                      (sender -> receiver)
//! HELLO_ACK      ... | echoed sender clock µs u64               (receiver -> sender)
//! DATA           ... | seq u64 | sender clock µs u64 | padding  (sender -> receiver)
//! ACK            ... | seq u64 | echoed sender clock µs u64 | receiver clock µs u64
//!                    | highest seq u64 | received bitmap u64    (receiver -> sender)
//! CONTROL        ... | padding                                  (sender -> receiver)
//! ```
//! DATA is padded so that the IP packet is exactly [`IP_PACKET_BYTES`] = 1500 bytes, the
//! emulated link's MTU: the emulator's byte-based accounting (delivery opportunities are
//! 1500-byte slots) then sees full-size packets, as with TCP. An ACK is 50 bytes of UDP
//! payload. The bitmap (bit i set = packet `highest - i` arrived) lets a later ACK report
//! packets whose own ACK was lost, so ACK loss is not mistaken for data loss.
//!
//! CONTROL is a small datagram of a size the controller chooses (at least
//! [`CONTROL_MIN_BYTES`]) that stands in for an upstream program's own control packets on the
//! data path (UDT's ACK2, say); the receiver ignores it. See
//! [`crate::cc::Controller::take_control_datagram`].

use std::net::SocketAddr;

pub const MAGIC: u8 = 0xCA;
pub const IP_PACKET_BYTES: usize = 1500;
/// The largest DATA datagram a controller may ask for (its UDP payload; fragmented in IP).
pub const MAX_DATAGRAM_BYTES: usize = 9000;
const UDP_HEADER_BYTES: usize = 8;
const COMMON_HEADER: usize = 1 + 1 + 8;
pub const DATA_HEADER_BYTES: usize = COMMON_HEADER + 16;
pub const ACK_BYTES: usize = COMMON_HEADER + 40;
pub const HELLO_BYTES: usize = COMMON_HEADER + 8;
/// The smallest CONTROL datagram (its UDP payload): the common header.
pub const CONTROL_MIN_BYTES: usize = COMMON_HEADER;
/// The largest CONTROL datagram: one unfragmented IPv6 packet.
pub const CONTROL_MAX_BYTES: usize = 1452;

const KIND_HELLO: u8 = 1;
const KIND_HELLO_ACK: u8 = 2;
const KIND_DATA: u8 = 3;
const KIND_ACK: u8 = 4;
const KIND_CONTROL: u8 = 5;

/// UDP payload that makes a 1500-byte IP packet towards `peer` (IPv4: 1472, IPv6: 1452).
pub fn data_payload_bytes(peer: &SocketAddr) -> usize {
    let ip_header = match peer {
        SocketAddr::V4(_) => 20,
        SocketAddr::V6(v6) if v6.ip().to_ipv4_mapped().is_some() => 20,
        SocketAddr::V6(_) => 40,
    };
    IP_PACKET_BYTES - ip_header - UDP_HEADER_BYTES
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    pub flow: u64,
    pub seq: u64,
    pub echo_us: u64,
    pub receiver_us: u64,
    pub highest: u64,
    pub bitmap: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    Hello {
        flow: u64,
        sender_us: u64,
    },
    HelloAck {
        flow: u64,
        echo_us: u64,
    },
    Data {
        flow: u64,
        seq: u64,
        sender_us: u64,
    },
    Ack(Ack),
    /// A controller's control datagram, as long as the buffer it is encoded into.
    Control {
        flow: u64,
    },
}

fn put(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

fn get(buf: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

impl Packet {
    /// Writes the packet into `buf` and returns its length. DATA and CONTROL fill the whole
    /// buffer (the caller sizes it: DATA with [`data_payload_bytes`]); the padding is left as
    /// it was.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        buf[0] = MAGIC;
        match *self {
            Packet::Hello { flow, sender_us } => {
                buf[1] = KIND_HELLO;
                put(buf, 2, flow);
                put(buf, 10, sender_us);
                HELLO_BYTES
            }
            Packet::HelloAck { flow, echo_us } => {
                buf[1] = KIND_HELLO_ACK;
                put(buf, 2, flow);
                put(buf, 10, echo_us);
                HELLO_BYTES
            }
            Packet::Data { flow, seq, sender_us } => {
                assert!(buf.len() >= DATA_HEADER_BYTES, "DATA buffer too small");
                buf[1] = KIND_DATA;
                put(buf, 2, flow);
                put(buf, 10, seq);
                put(buf, 18, sender_us);
                buf.len()
            }
            Packet::Ack(a) => {
                buf[1] = KIND_ACK;
                put(buf, 2, a.flow);
                put(buf, 10, a.seq);
                put(buf, 18, a.echo_us);
                put(buf, 26, a.receiver_us);
                put(buf, 34, a.highest);
                put(buf, 42, a.bitmap);
                ACK_BYTES
            }
            Packet::Control { flow } => {
                assert!(buf.len() >= CONTROL_MIN_BYTES, "CONTROL buffer too small");
                buf[1] = KIND_CONTROL;
                put(buf, 2, flow);
                buf.len()
            }
        }
    }

    /// Parses a datagram; anything that is not ours (wrong magic, kind or length) is None.
    pub fn decode(buf: &[u8]) -> Option<Packet> {
        if buf.len() < COMMON_HEADER || buf[0] != MAGIC {
            return None;
        }
        let flow = get(buf, 2);
        match buf[1] {
            KIND_HELLO if buf.len() >= HELLO_BYTES => Some(Packet::Hello { flow, sender_us: get(buf, 10) }),
            KIND_HELLO_ACK if buf.len() >= HELLO_BYTES => Some(Packet::HelloAck { flow, echo_us: get(buf, 10) }),
            KIND_DATA if buf.len() >= DATA_HEADER_BYTES => {
                Some(Packet::Data { flow, seq: get(buf, 10), sender_us: get(buf, 18) })
            }
            KIND_ACK if buf.len() >= ACK_BYTES => Some(Packet::Ack(Ack {
                flow,
                seq: get(buf, 10),
                echo_us: get(buf, 18),
                receiver_us: get(buf, 26),
                highest: get(buf, 34),
                bitmap: get(buf, 42),
            })),
            KIND_CONTROL => Some(Packet::Control { flow }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_packets_make_1500_byte_ip_packets() {
        let v4: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let v6: SocketAddr = "[fd00::1]:5000".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:5000".parse().unwrap();
        assert_eq!(data_payload_bytes(&v4) + 20 + 8, 1500);
        assert_eq!(data_payload_bytes(&v6) + 40 + 8, 1500);
        assert_eq!(data_payload_bytes(&mapped), 1472);
    }

    #[test]
    fn round_trips_every_kind() {
        let mut buf = vec![0u8; 1472];
        let packets = [
            Packet::Hello { flow: 7, sender_us: 11 },
            Packet::HelloAck { flow: 7, echo_us: 11 },
            Packet::Data { flow: 7, seq: 1 << 40, sender_us: 99 },
            Packet::Ack(Ack { flow: 7, seq: 5, echo_us: 6, receiver_us: 8, highest: 9, bitmap: 0b1011 }),
        ];
        for p in packets {
            let n = p.encode(&mut buf);
            assert_eq!(Packet::decode(&buf[..n]), Some(p));
        }
        assert_eq!(Packet::Data { flow: 1, seq: 2, sender_us: 3 }.encode(&mut buf), 1472);
        let mut small = [0u8; 20];
        assert_eq!(Packet::Control { flow: 7 }.encode(&mut small), 20);
        assert_eq!(Packet::decode(&small), Some(Packet::Control { flow: 7 }));
        assert_eq!(Packet::Control { flow: 7 }.encode(&mut small[..CONTROL_MIN_BYTES]), 10);
        assert_eq!(
            Packet::Ack(Ack { flow: 0, seq: 0, echo_us: 0, receiver_us: 0, highest: 0, bitmap: 1 }).encode(&mut buf),
            50
        );
    }

    #[test]
    fn rejects_foreign_and_truncated_datagrams() {
        assert_eq!(Packet::decode(b"hello world, not ours"), None);
        let mut buf = [0u8; 64];
        let n =
            Packet::Ack(Ack { flow: 1, seq: 1, echo_us: 1, receiver_us: 1, highest: 1, bitmap: 1 }).encode(&mut buf);
        assert_eq!(Packet::decode(&buf[..n - 1]), None);
    }
}
