//! The key-value store on a shared file system (`RDCOLL_STORE=file:/shared/dir`), for clusters
//! where no rank can listen for the others. The directory must be fresh for each job.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::store::Store;
use crate::error::{Result, TransportError};

/// A store kept as one file per key in a shared directory.
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// Uses (and creates) `dir`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<FileStore> {
        let dir = dir.into();
        fs::create_dir_all(&dir)
            .map_err(|e| TransportError::io(format!("creating store dir {}", dir.display()), e))?;
        Ok(FileStore { dir })
    }

    fn path(&self, key: &str) -> PathBuf {
        let name: String = key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '.'
                }
            })
            .collect();
        self.dir.join(format!("{name}.{:016x}", fnv(key)))
    }

    fn poll<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        let mut delay = Duration::from_millis(1);
        loop {
            if let Some(v) = f() {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout {
                    what: format!("{what} in {}", self.dir.display()),
                    after: timeout,
                });
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(50));
        }
    }

    fn counter(&self, key: &str) -> i64 {
        fs::read(self.path(key))
            .ok()
            .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map(i64::from_le_bytes)
            .unwrap_or(0)
    }
}

/// FNV-1a, to keep distinct keys distinct after the name is made file-safe.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let path = self.path(key);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let io = |e| TransportError::io(format!("writing store key {key:?}"), e);
        fs::write(&tmp, value).map_err(io)?;
        fs::rename(&tmp, &path).map_err(io)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let path = self.path(key);
        self.poll(&format!("store key {key:?}"), timeout, || {
            fs::read(&path).ok()
        })
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let path = self.path(key);
        let io = |e| TransportError::io(format!("updating store counter {key:?}"), e);
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path.with_extension("lock"))
            .map_err(io)?;
        // SAFETY: flock on a descriptor we own; released when `file` closes.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io(std::io::Error::last_os_error()));
        }
        let mut cur = [0u8; 8];
        let have = file.read(&mut cur).map_err(io)?;
        let v = if have == 8 {
            i64::from_le_bytes(cur)
        } else {
            0
        }
        .wrapping_add(delta);
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(&v.to_le_bytes()).map_err(io)?;
        // Publish for readers that do not take the lock.
        self.set(key, &v.to_le_bytes())?;
        Ok(v)
    }

    fn wait_at_least(&self, key: &str, target: i64, timeout: Duration) -> Result<()> {
        self.poll(
            &format!("counter {key:?} to reach {target}"),
            timeout,
            || (self.counter(key) >= target).then_some(()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_values_across_handles() {
        let dir = std::env::temp_dir().join(format!("rdcoll-fs-{}", std::process::id()));
        let a = FileStore::open(&dir).unwrap();
        let b = FileStore::open(&dir).unwrap();
        a.set("addr/0", b"x:1").unwrap();
        assert_eq!(b.get("addr/0", Duration::from_secs(1)).unwrap(), b"x:1");
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = FileStore::open(&dir).unwrap();
                std::thread::spawn(move || s.barrier("b", 4, Duration::from_secs(5)))
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        assert!(b.get("missing", Duration::from_millis(20)).is_err());
        let _ = fs::remove_dir_all(&dir);
    }
}
