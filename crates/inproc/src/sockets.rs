//! The socket under a connection, and its two ends.
//!
//! A program reuses both the descriptor and (through its allocator) the library's connection
//! object for its next connection: nginx gives a new connection the fd and the `SSL` of the one
//! it just closed. So whatever is remembered here is keyed by the socket itself, its inode (the
//! kernel gives no other socket that number while it is open), and checked against what the
//! fd names at the call; never by fd or connection object alone. That is what the kernel
//! backend does too: it reads the ends from the socket the call's syscall names, in the kernel.
//!
//! A program that reads and writes through a BIO of its own (curl does) has a connection whose
//! TLS library cannot name its socket (`SSL_get_fd` answers -1). The library also defines the C
//! library's read/write-family functions. Where it is preloaded (a program started under
//! tlsscope) they come first and see every descriptor the program reads or writes; while a
//! sniffed TLS call runs on a thread, the last one it used is kept, and remembered per
//! connection for calls that did no I/O (data already decrypted). In a process the library was
//! put into later, the program's calls were bound to the C library already: these wrappers are
//! never called there and such connections stay without a socket.

use std::cell::{Cell, RefCell};
use std::sync::atomic::AtomicUsize;

use crate::wrap::resolve;

/// Connections remembered per thread (by their object's address): a thread serves a few at a
/// time.
const REMEMBERED: usize = 16;

/// Sockets whose ends are remembered per thread.
const SOCKETS: usize = 64;

/// What is remembered of a connection's socket: the connection object, the fd and the inode of
/// the socket it named.
#[derive(Clone, Copy)]
struct Known {
    connection: usize,
    fd: i32,
    inode: u64,
}

const UNKNOWN: Known = Known {
    connection: 0,
    fd: -1,
    inode: 0,
};

thread_local! {
    /// Whether a sniffed TLS call is running on this thread.
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    /// The last descriptor read or written while watching; -1: none.
    static LAST_FD: Cell<i32> = const { Cell::new(-1) };
    /// Connections and their sockets learned so far.
    static BY_CONNECTION: Cell<[Known; REMEMBERED]> = const { Cell::new([UNKNOWN; REMEMBERED]) };
    /// The ends of sockets used lately, by inode: asked of the kernel once per socket.
    static ENDS: RefCell<[(u64, Ends); SOCKETS]> =
        const { RefCell::new([(0, Ends::UNKNOWN); SOCKETS]) };
}

/// A TCP socket's two ends, as a sniff record carries them (`inproc_abi::Record`'s fields).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ends {
    /// `AF_INET` or `AF_INET6`; 0: unknown.
    pub family: u16,
    pub local_port: u16,
    pub peer_port: u16,
    pub local_addr: [u8; 16],
    pub peer_addr: [u8; 16],
}

impl Ends {
    const UNKNOWN: Ends = Ends {
        family: 0,
        local_port: 0,
        peer_port: 0,
        local_addr: [0; 16],
        peer_addr: [0; 16],
    };
}

/// The inode of the socket `fd` names now; None when it names no socket.
fn socket_inode(fd: i32) -> Option<u64> {
    // SAFETY: an all-zero stat is valid; fstat writes at most the struct it is given, and a bad
    // fd is an error, not UB.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    (ok && st.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some(st.st_ino)
}

/// The ends of the socket `fd` names now (all unknown for a file that is not a TCP socket).
/// One `fstat` per call says which socket it is; its ends are asked of the kernel the first
/// time that socket is seen.
pub fn ends(fd: i32) -> Ends {
    let Some(inode) = socket_inode(fd) else {
        return Ends::UNKNOWN;
    };
    ENDS.try_with(|cache| {
        let mut cache = cache.borrow_mut();
        let entry = &mut cache[(inode % SOCKETS as u64) as usize];
        if entry.0 != inode || entry.1.family == 0 {
            *entry = (inode, ask_kernel(fd));
        }
        entry.1
    })
    .unwrap_or_else(|_| ask_kernel(fd))
}

/// `getsockname` and `getpeername` of `fd`.
fn ask_kernel(fd: i32) -> Ends {
    let name = |f: unsafe extern "C" fn(i32, *mut libc::sockaddr, *mut libc::socklen_t) -> i32| {
        // SAFETY: an all-zero sockaddr_storage is valid; the call writes at most `len` bytes.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: as above; a bad fd is an error, not UB.
        let ok = unsafe {
            f(
                fd,
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        } == 0;
        ok.then_some(ss)
    };
    let (Some(local), Some(peer)) = (name(libc::getsockname), name(libc::getpeername)) else {
        return Ends::UNKNOWN;
    };
    match (split(&local), split(&peer)) {
        (Some((local_port, local_addr)), Some((peer_port, peer_addr))) => Ends {
            family: local.ss_family,
            local_port,
            peer_port,
            local_addr,
            peer_addr,
        },
        _ => Ends::UNKNOWN,
    }
}

/// An IPv4 or IPv6 address's port (host order) and address bytes (IPv4 in the first four).
fn split(ss: &libc::sockaddr_storage) -> Option<(u16, [u8; 16])> {
    let mut addr = [0; 16];
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: an AF_INET sockaddr_storage holds a sockaddr_in.
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            addr[..4].copy_from_slice(&sin.sin_addr.s_addr.to_ne_bytes());
            Some((u16::from_be(sin.sin_port), addr))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 sockaddr_storage holds a sockaddr_in6.
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some((u16::from_be(sin6.sin6_port), sin6.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

/// Starts watching the descriptors this thread uses, for the sniffed call about to run.
#[inline(always)]
pub fn watch() {
    let _ = WATCHING.try_with(|w| w.set(true));
    let _ = LAST_FD.try_with(|l| l.set(-1));
}

/// Stops watching; the last descriptor the call used, or -1.
#[inline(always)]
pub fn unwatch() -> i32 {
    let _ = WATCHING.try_with(|w| w.set(false));
    LAST_FD.try_with(Cell::get).unwrap_or(-1)
}

/// The socket of `connection`: `seen` (what its call used, remembered), else what an earlier
/// call of it used on this thread if the fd still names that socket, else -1.
pub fn of_connection(connection: usize, seen: i32) -> i32 {
    let slot = (connection >> 4) % REMEMBERED;
    BY_CONNECTION
        .try_with(|cell| {
            let mut known = cell.get();
            if seen >= 0 {
                if let Some(inode) = socket_inode(seen) {
                    known[slot] = Known {
                        connection,
                        fd: seen,
                        inode,
                    };
                    cell.set(known);
                }
                return seen;
            }
            match known[slot] {
                k if k.connection == connection && socket_inode(k.fd) == Some(k.inode) => k.fd,
                _ => -1,
            }
        })
        .unwrap_or(seen)
}

/// Notes descriptor `fd` if a sniffed call is running on this thread.
#[inline(always)]
fn saw(fd: usize) {
    let _ = WATCHING.try_with(|w| {
        if w.get() {
            let _ = LAST_FD.try_with(|l| l.set(fd as i32));
        }
    });
}

/// Defines each named C library function: note the descriptor (its first argument), then call
/// the real one with the caller's registers.
macro_rules! io_wrappers {
    ($($name:ident),+ $(,)?) => {$(
        #[no_mangle]
        /// # Safety
        /// Called as the C library's function of this name, with its arguments.
        pub unsafe extern "C" fn $name(
            a: usize, b: usize, c: usize, d: usize, e: usize, f: usize,
        ) -> isize {
            static REAL: AtomicUsize = AtomicUsize::new(0);
            saw(a);
            let name = const {
                match std::ffi::CStr::from_bytes_with_nul(
                    concat!(stringify!($name), "\0").as_bytes(),
                ) {
                    Ok(n) => n,
                    Err(_) => panic!("a symbol name has no NUL inside"),
                }
            };
            let Some(real) = resolve(name, &REAL) else {
                return crate::wrap::unresolved();
            };
            type Real = unsafe extern "C" fn(usize, usize, usize, usize, usize, usize) -> isize;
            // SAFETY: `real` is the C library's function of this name; the caller's registers
            // are passed on unchanged (see the crate's doc).
            unsafe { std::mem::transmute::<usize, Real>(real)(a, b, c, d, e, f) }
        }
    )+};
}

io_wrappers!(read, write, recv, send, recvfrom, sendto, readv, writev, recvmsg, sendmsg);

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

    /// A loopback connection to `listener`.
    fn connect(listener: &std::net::TcpListener) -> std::net::TcpStream {
        std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap()
    }

    /// Makes `fd` name `socket`'s socket, as a program's next connection gets the fd of the one
    /// it closed (atomically: no other thread of the test can take the number in between).
    fn reuse(fd: i32, socket: &std::net::TcpStream) {
        // SAFETY: dup2 closes what `fd` named (a socket this test owns) and makes it a copy of
        // another socket of the test's; no memory is involved.
        assert_eq!(unsafe { libc::dup2(socket.as_raw_fd(), fd) }, fd);
    }

    #[test]
    fn a_connection_keeps_the_socket_its_last_io_used_while_the_fd_names_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (a, b) = (connect(&listener), connect(&listener));
        let (fa, fb) = (a.as_raw_fd(), b.as_raw_fd());
        assert_eq!(of_connection(0x1000, -1), -1);
        assert_eq!(of_connection(0x1000, fa), fa);
        // A later call that did no I/O.
        assert_eq!(of_connection(0x1000, -1), fa);
        // Another connection in the same place of the table replaces it.
        assert_eq!(of_connection(0x1000 + (REMEMBERED << 4), fb), fb);
        assert_eq!(of_connection(0x1000, -1), -1);
        // The fd closed and given to another socket: not the connection's any more.
        assert_eq!(of_connection(0x2000, fb), fb);
        let c = connect(&listener);
        reuse(fb, &c);
        assert_eq!(of_connection(0x2000, -1), -1);
    }

    #[test]
    fn a_reused_fd_shows_its_new_socket_s_ends() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server_port = listener.local_addr().unwrap().port();
        let ports = |e: Ends| (e.local_port, e.peer_port);
        let first = connect(&listener);
        let first_port = first.local_addr().unwrap().port();
        let fd = first.into_raw_fd();
        assert_eq!(ports(ends(fd)), (first_port, server_port));
        assert_eq!(i32::from(ends(fd).family), libc::AF_INET);
        let second = connect(&listener);
        reuse(fd, &second);
        assert_eq!(
            ports(ends(fd)),
            (second.local_addr().unwrap().port(), server_port)
        );
        // SAFETY: fd is the test's own descriptor (from into_raw_fd), closed once, here.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
        // Not a socket: unknown.
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(ends(file.as_raw_fd()), Ends::default());
    }

    #[test]
    fn only_descriptors_used_while_watching_count() {
        saw(3);
        watch();
        assert_eq!(LAST_FD.with(Cell::get), -1);
        saw(5);
        assert_eq!(unwatch(), 5);
        saw(6);
        assert_eq!(LAST_FD.with(Cell::get), 5);
    }
}
