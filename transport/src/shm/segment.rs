//! POSIX shared-memory segments: created mode 0600 by their owner, mapped by every rank of the
//! job, and unlinked as soon as all have mapped them, so a crash after start-up leaves nothing
//! in /dev/shm. A rank killed before its peers mapped its segment leaves the name; `rdcoll-run`
//! removes the job's names once every rank has ended (`remove_job_segments`).

use std::ffi::CString;

use crate::error::{Result, TransportError};

/// A mapped segment; unmapped on drop.
pub(crate) struct Segment {
    base: *mut u8,
    len: usize,
    name: CString,
}

// SAFETY: the mapping is shared memory accessed only through raw copies and atomics.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

fn os_err(what: String) -> TransportError {
    TransportError::io(what, std::io::Error::last_os_error())
}

impl Segment {
    /// Creates (exclusively) and maps a zeroed segment of `len` bytes.
    pub(crate) fn create(name: &str, len: usize) -> Result<Segment> {
        let cname = CString::new(name).map_err(|_| TransportError::InvalidArgument(name.into()))?;
        // SAFETY: shm_open with a valid C string; the descriptor is closed below.
        let fd = unsafe {
            libc::shm_open(
                cname.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600,
            )
        };
        if fd < 0 {
            return Err(os_err(format!("creating shared memory {name}")));
        }
        // SAFETY: fd is a fresh shm descriptor we own.
        let sized = unsafe { libc::ftruncate(fd, len as libc::off_t) };
        if sized != 0 {
            let e = os_err(format!("sizing shared memory {name} to {len} bytes"));
            // SAFETY: closing and unlinking what we just created.
            unsafe {
                libc::close(fd);
                libc::shm_unlink(cname.as_ptr());
            }
            return Err(e);
        }
        Self::map(fd, cname, len)
    }

    /// Creates a segment named `prefix` and one of `suffixes` (random ones in use): a name
    /// somebody else already holds (another user who guessed it, a stale segment) is skipped
    /// for the next, so nobody can keep a rank from starting by claiming its name first. The
    /// segment and the name it got.
    pub(crate) fn create_unique(
        prefix: &str,
        len: usize,
        suffixes: impl IntoIterator<Item = u64>,
    ) -> Result<(Segment, String)> {
        let mut last = None;
        for suffix in suffixes.into_iter().take(8) {
            let name = format!("{prefix}-{suffix:016x}");
            match Segment::create(&name, len) {
                Ok(seg) => return Ok((seg, name)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| TransportError::Bootstrap("no name to create".into())))
    }

    /// Opens and maps a segment a peer created.
    pub(crate) fn open(name: &str, len: usize) -> Result<Segment> {
        let cname = CString::new(name).map_err(|_| TransportError::InvalidArgument(name.into()))?;
        // SAFETY: shm_open with a valid C string.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(os_err(format!("opening shared memory {name}")));
        }
        // SAFETY: fstat on our descriptor into a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let stat_ok = unsafe { libc::fstat(fd, &mut st) } == 0;
        // SAFETY: geteuid has no failure mode.
        if stat_ok && st.st_uid != unsafe { libc::geteuid() } {
            // SAFETY: closing our descriptor.
            unsafe { libc::close(fd) };
            return Err(TransportError::Bootstrap(format!(
                "shared memory {name} belongs to another user"
            )));
        }
        if !stat_ok || (st.st_size as usize) < len {
            // SAFETY: closing our descriptor.
            unsafe { libc::close(fd) };
            return Err(TransportError::Bootstrap(format!(
                "shared memory {name} is smaller than {len} bytes"
            )));
        }
        Self::map(fd, cname, len)
    }

    fn map(fd: i32, name: CString, len: usize) -> Result<Segment> {
        // Mapping `len` bytes of a descriptor sized to at least `len`; then closing it
        // (the mapping keeps the memory).
        // SAFETY: as just said.
        let base = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            libc::close(fd);
            p
        };
        if base == libc::MAP_FAILED {
            return Err(os_err(format!("mapping {} bytes of shared memory", len)));
        }
        Ok(Segment {
            base: base as *mut u8,
            len,
            name,
        })
    }

    /// Removes the name from /dev/shm (mappings stay valid).
    pub(crate) fn unlink(&self) {
        // SAFETY: unlinking by name; harmless if already gone.
        unsafe { libc::shm_unlink(self.name.as_ptr()) };
    }

    /// Address of byte `offset`; `offset + size` must be within the segment.
    #[inline]
    pub(crate) fn at(&self, offset: usize, size: usize) -> Result<*mut u8> {
        if offset.checked_add(size).is_some_and(|e| e <= self.len) {
            // SAFETY: checked to be inside the mapping.
            Ok(unsafe { self.base.add(offset) })
        } else {
            Err(self.beyond(offset, size))
        }
    }

    /// The error of [`at`](Segment::at), built out of line: every shared word of the message
    /// and RDMA-write paths is reached through `at`.
    #[cold]
    #[inline(never)]
    fn beyond(&self, offset: usize, size: usize) -> TransportError {
        TransportError::InvalidArgument(format!(
            "segment range {offset}+{size} beyond {}",
            self.len
        ))
    }

    /// Maps the pages of `offset..offset + len` into this process now, so the first lap of a
    /// message ring does not take a page fault every 64 messages (the first 10,000 8-byte
    /// ping-pongs of a job measured 0.13 instead of 0.11 us). Only page tables change, never
    /// the contents, so peers may be using the range meanwhile. Best effort: a kernel without
    /// MADV_POPULATE_WRITE (before 5.14) just faults the pages on first use.
    pub(crate) fn prefault(&self, offset: usize, len: usize) {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let start = offset - offset % page.max(1);
        let end = offset.saturating_add(len).min(self.len);
        if start >= end {
            return;
        }
        // A page-aligned range inside our mapping; MADV_POPULATE_WRITE only populates
        // page tables (as a write fault would) and does not modify memory.
        // SAFETY: as just said.
        unsafe {
            libc::madvise(
                self.base.add(start) as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }

    /// Base address of the mapping.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // Unmapping exactly what `map` mapped; no references into it outlive the
        // segment (every user holds an Arc to it).
        // SAFETY: as just said.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Removes what is left in /dev/shm of job `job`'s segments (`rdcoll-{job}-...`): a rank
/// killed before all its peers had mapped its segment could not unlink it. For a launcher,
/// once every rank of the job has exited.
pub(crate) fn remove_job_segments(job: &str) {
    let prefix = format!("rdcoll-{job}-");
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_somebody_holds_is_skipped() {
        let prefix = format!("/rdcoll-test-{}", std::process::id());
        // Somebody claimed the first name the owner would try.
        let squatter = Segment::create(&format!("{prefix}-{:016x}", 1u64), 4096).unwrap();
        let (seg, name) = Segment::create_unique(&prefix, 4096, [1u64, 2, 3]).unwrap();
        assert_eq!(name, format!("{prefix}-{:016x}", 2u64));
        let peer = Segment::open(&name, 4096).unwrap();
        drop(peer);
        seg.unlink();
        squatter.unlink();
    }
}
