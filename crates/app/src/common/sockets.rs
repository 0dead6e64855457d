//! The endpoints of a process's TCP socket, from /proc: the fd's socket inode, then the line of
//! /proc/PID/net/tcp or tcp6 with that inode.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The inode of the socket `fd` names in process `pid` now: what tells one socket from the
/// next that gets the same fd. None when it names no socket (or is closed).
pub fn socket_inode(pid: u32, fd: i32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    link.to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// (local, peer) of the TCP socket with `inode` in process `pid`'s network namespace, while it
/// is open.
pub fn endpoints_of_inode(pid: u32, inode: u64) -> Option<(SocketAddr, SocketAddr)> {
    let inode = inode.to_string();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).ok()?;
        if let Some(found) = text.lines().skip(1).find_map(|l| parse_line(l, &inode)) {
            return Some(found);
        }
    }
    None
}

/// A /proc/net/tcp line: "sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...".
fn parse_line(line: &str, inode: &str) -> Option<(SocketAddr, SocketAddr)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(9) != Some(&inode) {
        return None;
    }
    Some((parse_addr(fields.get(1)?)?, parse_addr(fields.get(2)?)?))
}

/// "0100007F:01BB" (IPv4, the address as the kernel's 32-bit words in host order) or the
/// 32-hex-digit IPv6 form.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(
            u32::from_str_radix(ip, 16).ok()?.to_le_bytes(),
        )),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, word) in bytes.chunks_mut(4).enumerate() {
                let w = u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16).ok()?;
                word.copy_from_slice(&w.to_le_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_address_forms() {
        assert_eq!(parse_addr("0100007F:01BB"), "127.0.0.1:443".parse().ok());
        assert_eq!(
            parse_addr("00000000000000000000000001000000:1F90"),
            "[::1]:8080".parse().ok()
        );
    }

    #[test]
    fn finds_this_process_s_own_socket() {
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let pid = std::process::id();
        let inode = socket_inode(pid, client.as_raw_fd()).expect("a socket");
        let (local, peer) = endpoints_of_inode(pid, inode).expect("found");
        assert_eq!(local, client.local_addr().unwrap());
        assert_eq!(peer, listener.local_addr().unwrap());
    }
}
