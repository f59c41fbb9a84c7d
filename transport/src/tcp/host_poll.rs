//! Which peers' sockets hold bytes, for a host thread's poll (`Shared::read_now`): one
//! `epoll_wait` without a timeout on an epoll set of the host's own (level-triggered, every
//! peer's socket for reading), instead of a `recv` per peer that mostly answers `EAGAIN`.
//!
//! Why: a waiting host thread polls over and over, and each poll read every peer's socket. 4
//! ranks over tcp: 141,015 `recvfrom` calls for 2,000 bcast + barrier iterations, 84 % of them
//! `EAGAIN`; with `n` ranks, `n - 1` system calls per poll. With one peer there is nothing to
//! save (its `recv` is the one call either way, and finds the bytes at once): no set then.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;

use super::{engine, Shared};
use crate::error::{Result, TransportError};
use crate::types::{EventRef, Rank};

/// Most ready peers one poll takes (level-triggered: the others are reported next time).
const BATCH: usize = 64;

/// The host threads' epoll set over the peers' sockets.
pub(super) struct HostPoll {
    set: OwnedFd,
}

impl HostPoll {
    /// A set over `sockets` (`(peer, fd)`), or `None` for fewer than two peers.
    pub(super) fn new(sockets: &[(usize, RawFd)]) -> Result<Option<HostPoll>> {
        if sockets.len() < 2 {
            return Ok(None);
        }
        // SAFETY: epoll_create1 takes no pointers; its result is checked before use.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(TransportError::io("creating the host's epoll set", e));
        }
        // SAFETY: `fd` is a new descriptor owned by nothing else.
        let set = unsafe { OwnedFd::from_raw_fd(fd) };
        for &(peer, socket) in sockets {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: peer as u64,
            };
            let set_fd = set.as_raw_fd();
            // SAFETY: `ev` is a valid event for the call's duration; the descriptors are open.
            let rc = unsafe { libc::epoll_ctl(set_fd, libc::EPOLL_CTL_ADD, socket, &mut ev) };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                return Err(TransportError::io("watching a peer's socket", e));
            }
        }
        Ok(Some(HostPoll { set }))
    }

    /// Calls `f(peer)` for every peer whose socket has bytes, an end or an error to read.
    pub(super) fn ready(&self, mut f: impl FnMut(usize)) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; BATCH];
        let set = self.set.as_raw_fd();
        // SAFETY: `events` has room for `BATCH` entries; a zero timeout never blocks.
        let n = unsafe { libc::epoll_wait(set, events.as_mut_ptr(), BATCH as i32, 0) };
        // An interrupted or failed look finds nothing this time; the next poll looks again.
        for ev in events.iter().take(usize::try_from(n).unwrap_or(0)) {
            f(ev.u64 as usize);
        }
    }

    /// Stops watching `socket` (its peer failed: a shut-down socket would be reported readable
    /// at every poll).
    pub(super) fn forget(&self, socket: RawFd) {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL; a descriptor not in the set is
        // refused harmlessly.
        unsafe {
            libc::epoll_ctl(
                self.set.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                socket,
                std::ptr::null_mut(),
            )
        };
    }
}

impl Shared {
    /// Reads, on the polling host thread, what the peers' sockets hold and handles it: a
    /// message is then ready as soon as it arrives instead of once the I/O thread has woken
    /// up (10-20 us on a busy host). A peer whose reader is busy (the I/O thread reading it)
    /// is skipped. At most `engine::READ_BUDGET` bytes per peer: a peer that floods this rank
    /// must not keep the host thread from what it polls for (the rest is the I/O thread's).
    pub(super) fn read_now(&self) {
        self.read_now_lending(&mut None);
    }

    /// [`read_now`](Shared::read_now), handing messages to `lend` (when given) in place in the
    /// read buffer, while no event waits before them (they would overtake it).
    pub(super) fn read_now_lending(&self, lend: &mut Option<&mut dyn FnMut(EventRef<'_>)>) {
        self.host_polled();
        if self.sink.is_some() {
            // `RDCOLL_SINK_RATE` paces deposits by sleeping: not on a host thread, which may
            // hold the offload NI's lock while it polls.
            return;
        }
        for r in 0..self.size {
            if r != self.rank as usize && !self.peers[r].failed.load(Ordering::Acquire) {
                self.write_now(r as Rank);
            }
        }
        match &self.host_poll {
            Some(hp) => hp.ready(|r| self.read_for_host(r, lend)),
            None => (0..self.size).for_each(|r| self.read_for_host(r, lend)),
        }
    }

    /// A host thread's read of peer `r` (see [`read_now`](Shared::read_now)).
    fn read_for_host(&self, r: usize, lend: &mut Option<&mut dyn FnMut(EventRef<'_>)>) {
        if r == self.rank as usize || self.peers[r].failed.load(Ordering::Acquire) {
            return;
        }
        let Some(mut rb) = self.readers[r].try_lock() else {
            return;
        };
        match engine::read_peer(self, r as Rank, &mut rb, engine::READ_BUDGET, lend) {
            Ok(false) => {}
            Ok(true) => {
                self.host_left[r].store(true, Ordering::Release);
                let _ = self.waker.wake();
            }
            Err(why) => {
                drop(rb);
                self.fail_peer(r as Rank, &why);
            }
        }
    }
}
