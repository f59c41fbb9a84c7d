//! The shm watchdog: one thread per rank that sleeps on pidfds of all peers and marks a peer dead
//! the moment its process exits (falling back to polling `kill(pid, 0)` where pidfds are
//! missing). Every tick it also looks at the peers' `closed` words, set when a fabric is
//! dropped while its process lives on. A dead peer is failed once its ring is drained.

use std::sync::Arc;
use std::thread::JoinHandle;

use std::sync::atomic::Ordering;

use super::{os, ring, Inner};
use crate::error::{Result, TransportError};
use crate::types::{Event, OpId, Rank};

/// Tick of the watchdog: how often it looks at `closed` words (and, where pidfds are
/// missing, at processes).
const POLL_MS: i32 = 100;

impl Inner {
    /// Notes that `rank` is gone. It is failed by the next poll that finds its ring drained,
    /// so its last messages and completions still arrive, before the failure.
    pub(crate) fn mark_dead(&self, rank: Rank) {
        if self.dead[rank as usize].swap(true, Ordering::AcqRel) {
            return;
        }
        self.any_dead.store(true, Ordering::SeqCst);
        let own = self.view(self.rank);
        own.doorbell().fetch_add(1, Ordering::Release);
        os::futex_wake(own.doorbell());
    }

    /// Whether `rank`'s fabric was dropped (its process may live on).
    pub(crate) fn peer_closed(&self, rank: Rank) -> bool {
        self.view(rank).closed().load(Ordering::Acquire) != 0
    }

    /// Fails the dead peers whose rings are empty; call without the consumer lock.
    #[cold]
    pub(super) fn reap_dead(&self) {
        if !self.any_dead.load(Ordering::Acquire) {
            return;
        }
        let mut left = false;
        for src in 0..self.size {
            if !self.dead[src].load(Ordering::Acquire) || self.failed[src].load(Ordering::Acquire) {
                continue;
            }
            let ring = &self.incoming[src];
            // SAFETY: our own incoming ring; `head` is where its consumer stands.
            if unsafe { ring::peek_ready(ring.data, self.layout.ring_bytes, ring.head()) } {
                left = true;
            } else {
                self.fail_peer(src as Rank);
            }
        }
        if !left {
            self.any_dead.store(false, Ordering::Release);
            // A peer marked dead meanwhile has set the flag again after its own store.
            if self
                .dead
                .iter()
                .zip(&self.failed)
                .any(|(d, f)| d.load(Ordering::Acquire) && !f.load(Ordering::Acquire))
            {
                self.any_dead.store(true, Ordering::Release);
            }
        }
    }

    /// Fails `rank` once: pending operations complete with `PeerFailed`, then the event.
    pub(crate) fn fail_peer(&self, rank: Rank) {
        // The removed operations are dropped after the lock is released: one may hold the
        // last handle to caller memory, whose drop waits for copies still inside it.
        let (drained, removed): (Vec<u64>, Vec<_>) = {
            let mut pending = self.pending.lock();
            if self.failed[rank as usize].swap(true, Ordering::AcqRel) {
                return;
            }
            self.dead[rank as usize].store(true, Ordering::Release);
            let ids: Vec<u64> = pending
                .iter()
                .filter(|(_, p)| p.peer == rank)
                .map(|(k, _)| *k)
                .collect();
            let removed = ids.iter().filter_map(|id| pending.remove(id)).collect();
            (ids, removed)
        };
        drop(removed);
        self.producers[rank as usize].lock().backlog.clear();
        super::split::forget_peer(self, rank);
        for op in drained {
            self.local_events.push(Event::Completed {
                op: OpId(op),
                result: Err(TransportError::PeerFailed(rank)),
            });
        }
        self.local_events.push(Event::PeerFailed { rank });
        let own = self.view(self.rank);
        own.doorbell().fetch_add(1, Ordering::Release);
        os::futex_wake(own.doorbell());
    }
}

/// A running watchdog; [`Watchdog::stop`] ends it.
pub(crate) struct Watchdog {
    thread: Option<JoinHandle<()>>,
    wake_fd: i32,
}

impl Watchdog {
    pub(crate) fn start(inner: Arc<Inner>, pids: Vec<i32>) -> Result<Watchdog> {
        let mut pipe = [0i32; 2];
        // SAFETY: pipe2 fills two descriptors we own.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(TransportError::io(
                "watchdog pipe",
                std::io::Error::last_os_error(),
            ));
        }
        let me = inner.rank as usize;
        let peers: Vec<(Rank, i32, Option<i32>)> = pids
            .iter()
            .enumerate()
            .filter(|(r, _)| *r != me)
            .map(|(r, &pid)| (r as Rank, pid, os::pidfd_open(pid)))
            .collect();
        let stop_fd = pipe[0];
        let thread = std::thread::Builder::new()
            .name(format!("rdcoll-shm-watch-{me}"))
            .spawn(move || watch(inner, peers, stop_fd))
            .map_err(|e| TransportError::io("starting the watchdog", e))?;
        Ok(Watchdog {
            thread: Some(thread),
            wake_fd: pipe[1],
        })
    }

    pub(crate) fn stop(mut self) {
        // SAFETY: writing one byte to our pipe, then closing it.
        unsafe {
            libc::write(self.wake_fd, [1u8].as_ptr() as *const libc::c_void, 1);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // SAFETY: closing our write end after the thread is gone.
        unsafe { libc::close(self.wake_fd) };
    }
}

fn watch(inner: Arc<Inner>, mut peers: Vec<(Rank, i32, Option<i32>)>, stop_fd: i32) {
    loop {
        let mut fds = vec![libc::pollfd {
            fd: stop_fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut owners = Vec::new();
        let mut need_polling = false;
        for (i, (_, _, pidfd)) in peers.iter().enumerate() {
            match pidfd {
                Some(fd) => {
                    fds.push(libc::pollfd {
                        fd: *fd,
                        events: libc::POLLIN,
                        revents: 0,
                    });
                    owners.push(i);
                }
                None => need_polling = true,
            }
        }
        // SAFETY: polling descriptors we own, with a correctly sized array.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_MS) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                // Without pidfds we can still watch by polling the processes.
                tracing::warn!("shm watchdog: poll failed ({err}); watching by polling");
                for (_, _, pidfd) in peers.iter_mut() {
                    if let Some(fd) = pidfd.take() {
                        // SAFETY: closing a pidfd we opened.
                        unsafe { libc::close(fd) };
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(POLL_MS as u64));
            }
            continue;
        }
        if fds[0].revents != 0 {
            break;
        }
        let mut dead = Vec::new();
        for (slot, &i) in owners.iter().enumerate() {
            if fds[slot + 1].revents != 0 {
                dead.push(i);
            }
        }
        for (i, (rank, pid, pidfd)) in peers.iter().enumerate() {
            let closed = inner.peer_closed(*rank);
            let exited = need_polling && pidfd.is_none() && !os::process_alive(*pid);
            if (closed || exited) && !dead.contains(&i) {
                dead.push(i);
            }
        }
        dead.sort_unstable();
        for &i in dead.iter().rev() {
            let (rank, _, pidfd) = peers.remove(i);
            if let Some(fd) = pidfd {
                // SAFETY: closing a pidfd we opened.
                unsafe { libc::close(fd) };
            }
            inner.mark_dead(rank);
        }
    }
    for (_, _, pidfd) in peers {
        if let Some(fd) = pidfd {
            // SAFETY: closing pidfds we opened.
            unsafe { libc::close(fd) };
        }
    }
    // SAFETY: closing our read end.
    unsafe { libc::close(stop_fd) };
}
