//! `membarrier(2)`: the expensive half of an asymmetric fence, whose cheap half is a compiler
//! fence. A thread that must not miss another's plain store (a sleeper about to wait, an owner
//! withdrawing memory) runs one; the threads it orders pay nothing on their fast paths.

use std::sync::OnceLock;

/// Commands (linux/membarrier.h); `libc` does not export them.
const CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;
const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

fn call(cmd: libc::c_int) -> bool {
    // SAFETY: plain syscall with constant arguments; it changes no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
}

/// Registers this process for expedited global memory barriers, so that another process's
/// [`global`] orders the memory accesses of this one's running threads. False when the kernel
/// (or a seccomp filter) refuses.
pub(crate) fn register_global() -> bool {
    call(CMD_REGISTER_GLOBAL_EXPEDITED)
}

/// Runs a full memory barrier on every CPU that runs a thread of a registered process (ours
/// included) before it returns. False if the call failed (then nothing is guaranteed).
pub(crate) fn global() -> bool {
    call(CMD_GLOBAL_EXPEDITED)
}

/// Runs a full memory barrier on every CPU that runs a thread of this process before it
/// returns: every store another thread of ours made before the call is visible after it.
/// Registers the process on first use. False where the kernel refuses (then nothing is
/// guaranteed).
pub(crate) fn private() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| call(CMD_REGISTER_PRIVATE_EXPEDITED)) && call(CMD_PRIVATE_EXPEDITED)
}

#[cfg(test)]
mod tests {
    #[test]
    fn membarriers_work_once_registered_or_report_why_not() {
        if super::register_global() {
            assert!(super::global());
        } else {
            eprintln!("global membarrier refused here: the shm backend falls back to full fences");
        }
        if !super::private() {
            eprintln!("private membarrier refused here: lock sleepers nap instead");
        }
    }
}
