//! Plaintext as a pcapng file of synthetic TCP streams between the real endpoints, so packet
//! tools decode the application protocol as if it had never been encrypted. Each connection
//! starts with a three-way handshake; what one program wrote is a segment from its address to
//! its peer's, what it read one the other way. Bytes cut by --max-bytes leave a gap in the
//! sequence numbers (the tools say "previous segment not captured").

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};

/// pcapng link type: raw IPv4/IPv6 packets.
const LINKTYPE_RAW: u16 = 101;
/// Largest TCP payload per synthetic segment (keeps the IP length field in range).
const MAX_SEGMENT: usize = 65_000;

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;

/// One TCP connection's state: the program whose view it records, and each side's next
/// sequence number.
struct Stream {
    pid: u32,
    local_seq: u32,
    peer_seq: u32,
}

/// Writes the pcapng file as calls arrive.
pub struct PcapWriter<W: Write> {
    out: W,
    streams: HashMap<(SocketAddr, SocketAddr), Stream>,
    /// Calls left out: their endpoints were not known, or the connection was already
    /// recorded from the other program's side.
    pub skipped_calls: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the section header and the one interface.
    pub fn new(mut out: W) -> io::Result<PcapWriter<W>> {
        // Section header block: byte-order magic, version 1.0, unknown section length.
        let mut shb = Vec::new();
        shb.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
        shb.extend_from_slice(&1u16.to_le_bytes());
        shb.extend_from_slice(&0u16.to_le_bytes());
        shb.extend_from_slice(&(-1i64).to_le_bytes());
        block(&mut out, 0x0A0D_0D0A, &shb)?;
        // Interface description block: raw IP, no snap length limit; timestamps in us.
        let mut idb = Vec::new();
        idb.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
        idb.extend_from_slice(&0u16.to_le_bytes());
        idb.extend_from_slice(&0u32.to_le_bytes());
        block(&mut out, 1, &idb)?;
        Ok(PcapWriter {
            out,
            streams: HashMap::new(),
            skipped_calls: 0,
        })
    }

    /// Adds one call of process `pid` on the connection `local` -> `peer` at `time_us`
    /// (microseconds since the Unix epoch): `sent` is what the program wrote (else read);
    /// `gap` bytes after `data` were not captured.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        pid: u32,
        local: SocketAddr,
        peer: SocketAddr,
        time_us: u64,
        sent: bool,
        data: &[u8],
        gap: u64,
    ) -> io::Result<()> {
        // One program's view per connection, under the client-to-server order of the pair.
        let key = if local <= peer {
            (local, peer)
        } else {
            (peer, local)
        };
        if let std::collections::hash_map::Entry::Vacant(slot) = self.streams.entry(key) {
            slot.insert(Stream {
                pid,
                local_seq: 1_000,
                peer_seq: 500_000,
            });
            self.handshake(local, peer, time_us)?;
        }
        let stream = self.streams.get_mut(&key).expect("inserted");
        if stream.pid != pid {
            self.skipped_calls += 1;
            return Ok(());
        }
        let (from, to, seq, ack) = if sent {
            (local, peer, stream.local_seq, stream.peer_seq)
        } else {
            (peer, local, stream.peer_seq, stream.local_seq)
        };
        let mut offset = 0u32;
        let mut packets = Vec::new();
        for chunk in data.chunks(MAX_SEGMENT) {
            packets.push(packet(
                from,
                to,
                seq.wrapping_add(offset),
                ack,
                PSH_ACK,
                chunk,
            ));
            offset = offset.wrapping_add(chunk.len() as u32);
        }
        let advance = offset.wrapping_add(gap as u32);
        if sent {
            stream.local_seq = stream.local_seq.wrapping_add(advance);
        } else {
            stream.peer_seq = stream.peer_seq.wrapping_add(advance);
        }
        for p in packets {
            self.enhanced_packet(time_us, &p)?;
        }
        Ok(())
    }

    /// SYN, SYN-ACK, ACK, the side with the higher port taken as the client (an ephemeral
    /// port); the sequence numbers continue into the stream's data.
    fn handshake(&mut self, local: SocketAddr, peer: SocketAddr, time_us: u64) -> io::Result<()> {
        let packets = if local.port() >= peer.port() {
            [
                packet(local, peer, 999, 0, SYN, &[]),
                packet(peer, local, 499_999, 1_000, SYN | ACK, &[]),
                packet(local, peer, 1_000, 500_000, ACK, &[]),
            ]
        } else {
            [
                packet(peer, local, 499_999, 0, SYN, &[]),
                packet(local, peer, 999, 500_000, SYN | ACK, &[]),
                packet(peer, local, 500_000, 1_000, ACK, &[]),
            ]
        };
        for p in packets {
            self.enhanced_packet(time_us, &p)?;
        }
        Ok(())
    }

    fn enhanced_packet(&mut self, time_us: u64, packet: &[u8]) -> io::Result<()> {
        let mut epb = Vec::with_capacity(20 + packet.len() + 3);
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&((time_us >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(time_us as u32).to_le_bytes());
        epb.extend_from_slice(&(packet.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(packet.len() as u32).to_le_bytes());
        epb.extend_from_slice(packet);
        block(&mut self.out, 6, &epb)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A block: type, total length, body padded to 4 bytes, total length again.
fn block(out: &mut impl Write, kind: u32, body: &[u8]) -> io::Result<()> {
    let padded = body.len().div_ceil(4) * 4;
    let total = (12 + padded) as u32;
    out.write_all(&kind.to_le_bytes())?;
    out.write_all(&total.to_le_bytes())?;
    out.write_all(body)?;
    out.write_all(&[0u8; 3][..padded - body.len()])?;
    out.write_all(&total.to_le_bytes())
}

/// An IPv4 or IPv6 packet with a TCP segment (checksums filled in).
fn packet(
    from: SocketAddr,
    to: SocketAddr,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut tcp = Vec::with_capacity(20 + payload.len());
    tcp.extend_from_slice(&from.port().to_be_bytes());
    tcp.extend_from_slice(&to.port().to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&ack.to_be_bytes());
    tcp.push(5 << 4);
    tcp.push(flags);
    tcp.extend_from_slice(&65_535u16.to_be_bytes());
    tcp.extend_from_slice(&[0, 0, 0, 0]);
    tcp.extend_from_slice(payload);
    let mut pseudo = Vec::with_capacity(40);
    let mut ip = Vec::with_capacity(40);
    match (from.ip(), to.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&[0, 6]);
            pseudo.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
            ip.extend_from_slice(&[0x45, 0]);
            ip.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
            ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
            ip.extend_from_slice(&s.octets());
            ip.extend_from_slice(&d.octets());
            let sum = checksum(&ip);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            let (s, d) = (v6(s), v6(d));
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&(tcp.len() as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 6]);
            ip.extend_from_slice(&[0x60, 0, 0, 0]);
            ip.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
            ip.extend_from_slice(&[6, 64]);
            ip.extend_from_slice(&s.octets());
            ip.extend_from_slice(&d.octets());
        }
    }
    pseudo.extend_from_slice(&tcp);
    let sum = checksum(&pseudo);
    tcp[16..18].copy_from_slice(&sum.to_be_bytes());
    ip.extend_from_slice(&tcp);
    ip
}

/// The Internet checksum (RFC 1071).
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_a_known_ipv4_header() {
        // RFC 1071-style example header with its checksum field zeroed: 0xb861.
        let header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&header), 0xb861);
    }

    #[test]
    fn blocks_are_padded_and_framed() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let a: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:443".parse().unwrap();
        w.add(7, a, b, 1, true, b"GET / HTTP/1.1\r\n\r\n", 0)
            .unwrap();
        // The other program's view of the same connection is left out.
        w.add(8, b, a, 2, false, b"GET / HTTP/1.1\r\n\r\n", 0)
            .unwrap();
        assert_eq!(w.skipped_calls, 1);
        let bytes = w.out;
        // SHB (28) + IDB (20) + 3 handshake packets + 1 data packet, each a 4-byte multiple.
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(&bytes[..4], &0x0A0D_0D0Au32.to_le_bytes());
        let data_packet: usize = 20 + 20 + 18;
        let expected = 28 + 20 + 3 * (32 + 40) + (32 + data_packet.div_ceil(4) * 4);
        assert_eq!(bytes.len(), expected);
    }
}
