//! The socket under a connection whose TLS library cannot name it: a program that reads and
//! writes through a BIO of its own (curl does), for which `SSL_get_fd` answers -1.
//!
//! The library also defines the C library's read/write-family functions. Where it is preloaded
//! (a program started under tlsscope) they come first and see every descriptor the program
//! reads or writes; while a sniffed TLS call runs on a thread, the last one it used is kept, and
//! remembered per connection for calls that did no I/O (data already decrypted). In a process
//! the library was put into later, the program's calls were bound to the C library already:
//! these wrappers are never called there and such connections stay without a socket.

use std::cell::Cell;
use std::sync::atomic::AtomicUsize;

use crate::wrap::resolve;

/// Connections remembered per thread (by their object's address): a thread serves a few at a
/// time.
const REMEMBERED: usize = 16;

thread_local! {
    /// Whether a sniffed TLS call is running on this thread.
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    /// The last descriptor read or written while watching; -1: none.
    static LAST_FD: Cell<i32> = const { Cell::new(-1) };
    /// (connection, fd) pairs learned so far.
    static BY_CONNECTION: Cell<[(usize, i32); REMEMBERED]> =
        const { Cell::new([(0, -1); REMEMBERED]) };
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
/// call of it used on this thread, else -1.
pub fn of_connection(connection: usize, seen: i32) -> i32 {
    let slot = (connection >> 4) % REMEMBERED;
    BY_CONNECTION
        .try_with(|cell| {
            let mut known = cell.get();
            if seen >= 0 {
                known[slot] = (connection, seen);
                cell.set(known);
                return seen;
            }
            match known[slot] {
                (c, fd) if c == connection => fd,
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

    #[test]
    fn a_connection_keeps_the_socket_its_last_io_used() {
        assert_eq!(of_connection(0x1000, -1), -1);
        assert_eq!(of_connection(0x1000, 7), 7);
        // A later call that did no I/O.
        assert_eq!(of_connection(0x1000, -1), 7);
        // Another connection in the same place of the table replaces it.
        assert_eq!(of_connection(0x1000 + (REMEMBERED << 4), 9), 9);
        assert_eq!(of_connection(0x1000, -1), -1);
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
