//! Big output files written past the page cache (`O_DIRECT`), by a thread of their own.
//!
//! `sniff -o FILE` writes hundreds of MB a minute. Through the page cache, every page of that
//! is first allocated and copied by the writing thread; on a VM whose host takes freed guest
//! memory back, each such page also faults in the host: the writer paid 1.2-1.7 s of system
//! time per 600 MB here, against 0.1 s for the same write with `O_DIRECT` (measured with `dd`).
//!
//! Whole 4 KiB blocks go straight to the disk from aligned 1 MiB buffers. A direct write waits
//! for the disk, so the writes are made by a thread of their own, with room for
//! `QUEUE` buffers in flight: the caller (sniff's reader, which must keep up with the probes'
//! rings) only copies into a buffer and hands it over. At a flush, the partial last block is
//! also written, through the page cache, so that a reader of the file sees everything; it is
//! written again, directly, once it is whole.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The alignment and size unit of direct writes: a multiple of any disk's logical block.
const BLOCK: usize = 4096;
/// Blocks per buffer.
const BUFFER_BLOCKS: usize = 256;
/// Buffers handed to the writing thread and not yet written, at most (then the caller waits).
const QUEUE: usize = 16;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; BLOCK]);

/// A buffer of whole, aligned blocks.
struct Buffer(Vec<Block>);

impl Buffer {
    fn new() -> Buffer {
        Buffer(vec![Block([0; BLOCK]); BUFFER_BLOCKS])
    }

    const CAPACITY: usize = BLOCK * BUFFER_BLOCKS;

    fn bytes(&self) -> &[u8] {
        // SAFETY: the Vec holds BUFFER_BLOCKS plain byte arrays, contiguous and initialized;
        // the slice covers exactly them and borrows the Vec for its lifetime.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), Self::CAPACITY) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u8>(), Self::CAPACITY) }
    }
}

/// What the writing thread is asked to do.
enum Job {
    /// Write `buffer[..len]` at `offset` (a whole number of blocks): its whole blocks
    /// directly, a partial last block through the page cache.
    Write {
        buffer: Buffer,
        len: usize,
        offset: u64,
    },
    /// Tell the caller once everything before has been written.
    Wait(mpsc::Sender<()>),
}

/// A file written past the page cache where its file system allows, else as usual.
pub struct DirectFile {
    mode: Mode,
}

enum Mode {
    Plain(File),
    Direct(Direct),
}

struct Direct {
    /// The buffer being filled, its bytes, and the file offset of its first byte (a whole
    /// number of blocks).
    buffer: Buffer,
    len: usize,
    offset: u64,
    /// Bytes of `buffer` already handed over at a flush (they are in the file).
    flushed: usize,
    jobs: Option<SyncSender<Job>>,
    /// Buffers the thread is done with, for reuse.
    spare: Receiver<Buffer>,
    /// The first write that failed; the thread writes nothing after it.
    failed: Arc<Mutex<Option<io::Error>>>,
    thread: Option<JoinHandle<()>>,
}

impl DirectFile {
    /// Writes to `file` (opened for writing, at its start) past the page cache, falling back to
    /// plain writes where `O_DIRECT` is refused.
    pub fn new(file: File) -> DirectFile {
        // Pipes take the flag too, with another meaning (packets): regular files only.
        let regular = file.metadata().is_ok_and(|m| m.file_type().is_file());
        if !regular || set_direct(&file, true).is_err() {
            return DirectFile {
                mode: Mode::Plain(file),
            };
        }
        let plain = |file: File| {
            let _ = set_direct(&file, false);
            DirectFile {
                mode: Mode::Plain(file),
            }
        };
        let Ok(for_thread) = file.try_clone() else {
            return plain(file);
        };
        let (jobs, queue) = mpsc::sync_channel(QUEUE);
        let (give_back, spare) = mpsc::channel();
        let failed = Arc::new(Mutex::new(None));
        let thread = {
            let failed = Arc::clone(&failed);
            std::thread::Builder::new()
                .name("tlsscope-write".into())
                .spawn(move || write_jobs(for_thread, queue, give_back, failed))
        };
        match thread {
            Ok(thread) => DirectFile {
                mode: Mode::Direct(Direct {
                    buffer: Buffer::new(),
                    len: 0,
                    offset: 0,
                    flushed: 0,
                    jobs: Some(jobs),
                    spare,
                    failed,
                    thread: Some(thread),
                }),
            },
            Err(_) => plain(file),
        }
    }

    /// Whether writes go past the page cache.
    pub fn is_direct(&self) -> bool {
        matches!(self.mode, Mode::Direct(_))
    }

    /// Waits until everything written so far is in the file, and returns the first error
    /// writing it met, if any.
    pub fn wait(&mut self) -> io::Result<()> {
        match &mut self.mode {
            Mode::Plain(file) => file.flush(),
            Mode::Direct(d) => {
                d.hand_over(true)?;
                let (done, wait) = mpsc::channel();
                d.send(Job::Wait(done))?;
                let _ = wait.recv();
                d.check()
            }
        }
    }
}

impl Direct {
    /// The writing thread's error, if it met one.
    fn check(&self) -> io::Result<()> {
        match &*self.failed.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(copy_of(e)),
            None => Ok(()),
        }
    }

    fn send(&self, job: Job) -> io::Result<()> {
        let gone = || io::Error::other("the output writer thread has stopped");
        self.jobs
            .as_ref()
            .ok_or_else(gone)?
            .send(job)
            .map_err(|_| gone())
    }

    /// Hands the buffer over: when it is full, or with `partial` (a flush) when it holds
    /// bytes not yet handed over. A partial last block starts the next buffer.
    fn hand_over(&mut self, partial: bool) -> io::Result<()> {
        if self.len < Buffer::CAPACITY && !(partial && self.len > self.flushed) {
            return Ok(());
        }
        let whole = self.len / BLOCK * BLOCK;
        let mut next = self.spare.try_recv().unwrap_or_else(|_| Buffer::new());
        let rest = self.len - whole;
        next.bytes_mut()[..rest].copy_from_slice(&self.buffer.bytes()[whole..self.len]);
        let buffer = std::mem::replace(&mut self.buffer, next);
        let (len, offset) = (self.len, self.offset);
        self.offset += whole as u64;
        self.len = rest;
        self.flushed = rest;
        self.send(Job::Write {
            buffer,
            len,
            offset,
        })
    }
}

impl Write for DirectFile {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let d = match &mut self.mode {
            Mode::Plain(file) => return file.write(data),
            Mode::Direct(d) => d,
        };
        d.check()?;
        let n = data.len().min(Buffer::CAPACITY - d.len);
        let at = d.len;
        d.buffer.bytes_mut()[at..at + n].copy_from_slice(&data[..n]);
        d.len += n;
        d.hand_over(false)?;
        Ok(n)
    }

    /// Hands everything written so far to the writing thread, without waiting for the disk
    /// (see [`DirectFile::wait`]); reports an error the thread met before.
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.mode {
            Mode::Plain(file) => file.flush(),
            Mode::Direct(d) => {
                d.check()?;
                d.hand_over(true)
            }
        }
    }
}

impl Drop for DirectFile {
    fn drop(&mut self) {
        if let Mode::Direct(d) = &mut self.mode {
            let _ = d.hand_over(true);
            d.jobs = None;
            if let Some(thread) = d.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// The writing thread: writes each job's buffer, gives it back, and stops writing at the
/// first error (still taking jobs, so that the caller never waits on it).
fn write_jobs(
    file: File,
    jobs: Receiver<Job>,
    give_back: mpsc::Sender<Buffer>,
    failed: Arc<Mutex<Option<io::Error>>>,
) {
    let mut direct = true;
    let mut broken = false;
    for job in jobs {
        match job {
            Job::Wait(done) => {
                let _ = done.send(());
            }
            Job::Write {
                buffer,
                len,
                offset,
            } => {
                if !broken {
                    if let Err(e) = write_out(&file, &mut direct, &buffer.bytes()[..len], offset) {
                        broken = true;
                        *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                    }
                }
                let _ = give_back.send(buffer);
            }
        }
    }
}

/// Writes `data` at `offset`: its whole blocks directly (while `direct`), then a partial last
/// block through the page cache. A file system that took the flag but refuses the write
/// (EINVAL) is written through the page cache from then on.
fn write_out(file: &File, direct: &mut bool, data: &[u8], offset: u64) -> io::Result<()> {
    let whole = data.len() / BLOCK * BLOCK;
    if *direct && whole > 0 {
        match file.write_all_at(&data[..whole], offset) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                set_direct(file, false)?;
                *direct = false;
                return file.write_all_at(data, offset);
            }
            Err(e) => return Err(e),
        }
    } else if !*direct {
        return file.write_all_at(data, offset);
    }
    if whole == data.len() {
        return Ok(());
    }
    set_direct(file, false)?;
    let written = file.write_all_at(&data[whole..], offset + whole as u64);
    if set_direct(file, true).is_err() {
        *direct = false;
    }
    written
}

/// The same error again (io::Error is not Clone), keeping its OS code.
fn copy_of(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

/// Sets or clears `O_DIRECT` on an open file.
fn set_direct(file: &File, on: bool) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl F_GETFL/F_SETFL on a descriptor `file` owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if on {
        flags | libc::O_DIRECT
    } else {
        flags & !libc::O_DIRECT
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch file under `dir`, removed when dropped.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(dir: &str, name: &str) -> Scratch {
            Scratch(std::path::PathBuf::from(format!(
                "{dir}/tlsscope-direct-{}-{name}",
                std::process::id()
            )))
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// Bytes that differ at every offset (a shifted copy would show).
    fn pattern(len: usize, seed: usize) -> Vec<u8> {
        (0..len)
            .map(|i| ((i * 31 + seed * 7) % 251) as u8)
            .collect()
    }

    #[test]
    fn what_is_written_and_flushed_is_in_the_file_whole() {
        // /tmp is on the root file system here (ext4), which takes O_DIRECT.
        let scratch = Scratch::new("/tmp", "ext4");
        let mut w = DirectFile::new(File::create(&scratch.0).unwrap());
        assert!(w.is_direct(), "O_DIRECT refused on /tmp");
        let mut want = Vec::new();
        // Pieces that end mid-block, on a block, and past a buffer, flushed (twice, which
        // must not write anything twice) or waited for between them: after each wait the file
        // holds exactly what was written.
        for (i, len) in [
            1,
            4095,
            4096,
            10_000,
            1 << 20,
            3,
            (1 << 20) + 5000,
            7,
            3 << 20,
        ]
        .into_iter()
        .enumerate()
        {
            let piece = pattern(len, i);
            w.write_all(&piece).unwrap();
            want.extend_from_slice(&piece);
            match i % 3 {
                0 => {
                    w.flush().unwrap();
                    w.flush().unwrap();
                }
                1 => {
                    w.wait().unwrap();
                    assert_eq!(std::fs::read(&scratch.0).unwrap(), want, "after piece {i}");
                }
                _ => {}
            }
        }
        drop(w);
        assert_eq!(std::fs::read(&scratch.0).unwrap(), want);
    }

    #[test]
    fn a_failed_write_is_reported_to_the_writer() {
        // A file system of 64 KiB of our own (tests run as root), filled up.
        let dir = format!("/tmp/tlsscope-direct-full-{}", std::process::id());
        std::fs::create_dir_all(&dir).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tlsscope-test", &dir])
            .status()
            .unwrap();
        assert!(mounted.success(), "mounting a tmpfs");
        let path = format!("{dir}/full");
        let mut w = DirectFile::new(File::create(&path).unwrap());
        let mut result = Ok(());
        for _ in 0..64 {
            result = w.write_all(&pattern(64 << 10, 1)).and_then(|()| w.wait());
            if result.is_err() {
                break;
            }
        }
        drop(w);
        let _ = std::process::Command::new("umount").arg(&dir).status();
        let _ = std::fs::remove_dir(&dir);
        let err = result.expect_err("4 MiB fit in 64 KiB");
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    }

    #[test]
    fn a_pipe_is_written_as_it_is() {
        let (reader, writer) = std::io::pipe().unwrap();
        let file = File::from(std::os::fd::OwnedFd::from(writer));
        let mut w = DirectFile::new(file);
        assert!(!w.is_direct());
        let reading = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut reader = reader;
            std::io::Read::read_to_end(&mut reader, &mut got).unwrap();
            got
        });
        let want = pattern(100_000, 3);
        w.write_all(&want).unwrap();
        w.flush().unwrap();
        drop(w);
        assert_eq!(reading.join().unwrap(), want);
    }
}
