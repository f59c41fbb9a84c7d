//! Thin wrappers over the Linux calls the shm backend needs: futexes on shared words,
//! `process_vm_readv/writev` (cross-memory attach), and pidfds for liveness.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, at most `timeout` (shared futex: works across processes).
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    // Capped: a longer sleep is woken by the doorbell or the caller's next slice anyway.
    let timeout = timeout.min(Duration::from_secs(86_400));
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a 4-byte aligned word in a live mapping, with a valid timespec.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word as *const AtomicU32,
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every process sleeping on `word`.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a 4-byte aligned word in a live mapping.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word as *const AtomicU32,
            libc::FUTEX_WAKE,
            i32::MAX,
        );
    }
}

/// Copies `len` bytes from `remote` in process `pid` to `local`. Returns the OS error number
/// on failure (EPERM when the kernel refuses cross-memory attach).
pub(crate) fn read_remote(pid: i32, remote: usize, local: *mut u8, len: usize) -> Result<(), i32> {
    cross_copy(pid, remote, local, len, false)
}

/// Copies `len` bytes from `local` to `remote` in process `pid` (`process_vm_writev`); errors
/// as for [`read_remote`]. The caller must hold the remote range against reuse (see
/// `Inner::direct_copy`): the kernel checks only that it is mapped.
pub(crate) fn write_remote(
    pid: i32,
    remote: usize,
    local: *const u8,
    len: usize,
) -> Result<(), i32> {
    cross_copy(pid, remote, local as *mut u8, len, true)
}

/// `process_vm_readv` (or with `write`, `process_vm_writev`) of `len` bytes, resumed after a
/// partial transfer.
fn cross_copy(pid: i32, remote: usize, local: *mut u8, len: usize, write: bool) -> Result<(), i32> {
    let mut done = 0;
    while done < len {
        let l = libc::iovec {
            iov_base: local.wrapping_add(done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the local iovec covers memory the caller owns for `len` bytes (written only
        // when reading); the remote one is checked by the kernel against the other process's
        // mappings.
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid, &l, 1, &r, 1, 0)
            } else {
                libc::process_vm_readv(pid, &l, 1, &r, 1, 0)
            }
        };
        if n <= 0 {
            return Err(if n == 0 {
                libc::EFAULT
            } else {
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO)
            });
        }
        done += n as usize;
    }
    Ok(())
}

/// Opens a pidfd for `pid`, readable once the process exits.
pub(crate) fn pidfd_open(pid: i32) -> Option<i32> {
    // SAFETY: plain syscall; a negative return is an error.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    (fd >= 0).then_some(fd as i32)
}

/// Whether process `pid` still runs (a zombie, exited but not yet reaped, does not).
pub(crate) fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    // The state is the first field after the parenthesised command name.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next()),
            Some('Z' | 'X')
        ),
        Err(_) => true,
    }
}
