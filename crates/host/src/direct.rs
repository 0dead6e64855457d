//! Big output files written past the page cache (`O_DIRECT`).
//!
//! `sniff -o FILE` writes hundreds of MB a minute. Through the page cache, every page of that
//! is first allocated and copied by the writing thread; on a VM whose host takes freed guest
//! memory back, each such page also faults in the host, and the writer paid 1.2-1.7 s of
//! system time per 600 MB here against 0.1 s for the same write with `O_DIRECT` (measured with
//! `dd`). Whole 4 KiB blocks go straight to the disk from one reused, aligned buffer; a partial
//! last block is written through the page cache when the stream is flushed (so that a reader
//! of the file sees everything written), and written again directly once it is whole.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// The alignment and size unit of direct writes: a multiple of any disk's logical block.
const BLOCK: usize = 4096;
/// The buffer: blocks gathered before a direct write.
const CHUNK_BLOCKS: usize = 256;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; BLOCK]);

/// A file written past the page cache where its file system allows, else as usual.
pub struct DirectFile {
    file: File,
    direct: bool,
    blocks: Vec<Block>,
    /// Bytes in the buffer.
    len: usize,
    /// The file offset of the buffer's first byte: a whole number of blocks.
    offset: u64,
}

impl DirectFile {
    /// Writes to `file` (opened for writing, at its start) past the page cache, falling back to
    /// plain writes where `O_DIRECT` is refused.
    pub fn new(file: File) -> DirectFile {
        // Pipes take the flag too, with another meaning (packets): regular files only.
        let regular = file.metadata().is_ok_and(|m| m.file_type().is_file());
        let direct = regular && set_direct(&file, true).is_ok();
        DirectFile {
            file,
            direct,
            blocks: vec![Block([0; BLOCK]); if direct { CHUNK_BLOCKS } else { 0 }],
            len: 0,
            offset: 0,
        }
    }

    /// Whether writes go past the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    fn buffer(&mut self) -> &mut [u8] {
        let n = self.blocks.len() * BLOCK;
        // SAFETY: `blocks` is a Vec of plain byte arrays, contiguous and initialized; the slice
        // covers exactly its n bytes and borrows it mutably for the slice's lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr().cast::<u8>(), n) }
    }

    /// The first `n` buffered bytes.
    fn buffered(&self, n: usize) -> &[u8] {
        let n = n.min(self.blocks.len() * BLOCK);
        // SAFETY: as in `buffer`, shared, and n is at most the buffer's size.
        unsafe { std::slice::from_raw_parts(self.blocks.as_ptr().cast::<u8>(), n) }
    }

    /// Writes the buffer's whole blocks directly and keeps the rest.
    fn write_blocks(&mut self) -> io::Result<()> {
        let whole = self.len / BLOCK * BLOCK;
        if whole == 0 {
            return Ok(());
        }
        let offset = self.offset;
        let written = self.file.write_all_at(self.buffered(whole), offset);
        if let Err(e) = written {
            // A file system that took the flag but not the write: go on through the cache.
            if e.raw_os_error() != Some(libc::EINVAL) || set_direct(&self.file, false).is_err() {
                return Err(e);
            }
            self.direct = false;
            self.file.write_all_at(self.buffered(whole), offset)?;
        }
        let len = self.len;
        self.buffer().copy_within(whole..len, 0);
        self.len -= whole;
        self.offset += whole as u64;
        Ok(())
    }

    /// Writes the partial last block through the page cache, keeping it in the buffer to be
    /// written again, directly, once it is whole.
    fn write_tail(&mut self) -> io::Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        if self.direct {
            set_direct(&self.file, false)?;
        }
        let (offset, len) = (self.offset, self.len);
        let written = self.file.write_all_at(self.buffered(len), offset);
        if self.direct && set_direct(&self.file, true).is_err() {
            self.direct = false;
        }
        written
    }

    /// Once direct writing has stopped (refused mid-way): writes what is still buffered and
    /// moves the file's own offset, which positional writes left at 0, to the end for the
    /// plain writes that follow.
    fn drain_after_fallback(&mut self) -> io::Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        self.write_tail()?;
        self.offset += self.len as u64;
        self.len = 0;
        self.seek_to_end()
    }

    fn seek_to_end(&self) -> io::Result<()> {
        // SAFETY: lseek on a descriptor this value owns; no memory is passed.
        if unsafe { libc::lseek(self.file.as_raw_fd(), 0, libc::SEEK_END) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Write for DirectFile {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if !self.direct {
            self.drain_after_fallback()?;
            return self.file.write(data);
        }
        let capacity = self.blocks.len() * BLOCK;
        let n = data.len().min(capacity - self.len);
        let at = self.len;
        self.buffer()[at..at + n].copy_from_slice(&data[..n]);
        self.len += n;
        if self.len == capacity {
            self.write_blocks()?;
        }
        Ok(n)
    }

    /// Everything written so far reaches the file.
    fn flush(&mut self) -> io::Result<()> {
        if !self.direct {
            self.drain_after_fallback()?;
            return self.file.flush();
        }
        self.write_blocks()?;
        self.write_tail()
    }
}

impl Drop for DirectFile {
    fn drop(&mut self) {
        let _ = self.flush();
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
        // Pieces that end mid-block, on a block, and past the buffer, with flushes between:
        // after each flush the file holds exactly what was written.
        for (i, len) in [1, 4095, 4096, 10_000, 1 << 20, 3, (1 << 20) + 5000, 7]
            .into_iter()
            .enumerate()
        {
            let piece = pattern(len, i);
            w.write_all(&piece).unwrap();
            want.extend_from_slice(&piece);
            if i % 2 == 1 {
                w.flush().unwrap();
                assert_eq!(std::fs::read(&scratch.0).unwrap(), want, "after piece {i}");
            }
        }
        assert!(w.is_direct(), "direct writes stopped");
        drop(w);
        assert_eq!(std::fs::read(&scratch.0).unwrap(), want);
    }

    #[test]
    fn a_file_system_without_direct_writes_gets_plain_ones() {
        // A pipe: not a regular file, written as it is.
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
