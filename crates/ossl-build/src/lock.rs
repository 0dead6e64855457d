//! An exclusive advisory lock (flock) serialising builds of one version across processes.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use super::BuildError;

/// Holds an exclusive flock until dropped (closing the file releases it).
#[derive(Debug)]
pub(crate) struct VersionLock {
    _file: File,
}

impl VersionLock {
    /// Takes the lock on `path` (created if needed); calls `on_wait` once if another process
    /// holds it, then blocks until it is free.
    pub fn acquire(path: &Path, on_wait: &mut dyn FnMut()) -> Result<Self, BuildError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| BuildError::io("create lock file", path, e))?;
        let locked = flock(&file, libc::LOCK_EX | libc::LOCK_NB);
        match locked {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                on_wait();
                flock(&file, libc::LOCK_EX).map_err(|e| BuildError::io("lock", path, e))?;
            }
            Err(error) => return Err(BuildError::io("lock", path, error)),
        }
        Ok(VersionLock { _file: file })
    }
}

/// Calls flock(2) with `operation`, retrying when interrupted by a signal.
fn flock(file: &File, operation: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: the descriptor belongs to `file`, which is open for the whole call; flock only
        // takes an integer descriptor and flags and touches no memory of ours.
        let result = unsafe { libc::flock(file.as_raw_fd(), operation) };
        if result == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_lock_reports_waiting_when_held() {
        let path = std::env::temp_dir().join(format!("ossl-lock-test-{}", std::process::id()));
        let first =
            VersionLock::acquire(&path, &mut || panic!("first lock must not wait")).unwrap();
        let (sender, receiver) = std::sync::mpsc::channel();
        let waiter_path = path.clone();
        let waiter = std::thread::spawn(move || {
            let mut waited = false;
            let _second = VersionLock::acquire(&waiter_path, &mut || {
                waited = true;
                sender.send(()).unwrap();
            })
            .unwrap();
            waited
        });
        receiver.recv().unwrap();
        drop(first);
        assert!(waiter.join().unwrap());
        std::fs::remove_file(&path).unwrap();
    }
}
