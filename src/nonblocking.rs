//! Nonblocking collectives: started inside a [`Scope`], they run on the communicator's
//! collective thread while the caller computes, and complete whether or not the caller calls
//! the library meanwhile (MPI's progress rule for `MPI_Iallreduce` and friends). Every rank
//! starts them in the same order, as for the blocking ones; a communicator's collectives, its
//! blocking ones included, run in the order they were called: a blocking collective waits for
//! the nonblocking ones started before it.
//!
//! The thread is started by the communicator's first nonblocking collective and sleeps while
//! it has nothing to do; it runs the same algorithms as the blocking calls.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use rdcoll_collectives::Collectives;

use crate::{Comm, Error, Result};

/// A collective's outcome, once its thread has run it.
pub(crate) struct Pending {
    result: Mutex<Option<Result<()>>>,
    done: Condvar,
}

impl Pending {
    fn new() -> Arc<Pending> {
        Arc::new(Pending {
            result: Mutex::new(None),
            done: Condvar::new(),
        })
    }

    fn finish(&self, r: Result<()>) {
        *lock(&self.result) = Some(r);
        self.done.notify_all();
    }

    pub(crate) fn is_done(&self) -> bool {
        lock(&self.result).is_some()
    }

    /// Waits until the collective has run; its result (the first call only: later calls get
    /// `Ok`).
    pub(crate) fn wait(&self) -> Result<()> {
        let mut r = lock(&self.result);
        while r.is_none() {
            r = self.done.wait(r).unwrap_or_else(|p| p.into_inner());
        }
        r.replace(Ok(())).unwrap_or(Ok(()))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) type Job = Box<dyn FnOnce(&Collectives) -> Result<()> + Send>;

struct Queue {
    jobs: VecDeque<(Job, Arc<Pending>)>,
    /// A job is running.
    busy: bool,
    stop: bool,
}

/// A communicator's collective thread and its queue.
pub(crate) struct Worker {
    queue: Mutex<Queue>,
    changed: Condvar,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Worker {
    fn start(coll: Arc<Collectives>) -> Result<Arc<Worker>> {
        let w = Arc::new(Worker {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                busy: false,
                stop: false,
            }),
            changed: Condvar::new(),
            thread: Mutex::new(None),
        });
        let me = w.clone();
        let handle = std::thread::Builder::new()
            .name("rdcoll-collectives".into())
            .spawn(move || me.serve(&coll))
            .map_err(|e| {
                Error::InvalidArgument(format!("cannot start the collective thread: {e}"))
            })?;
        *lock(&w.thread) = Some(handle);
        Ok(w)
    }

    fn serve(&self, coll: &Collectives) {
        rdcoll_collectives::run_in_background();
        loop {
            let (job, pending) = {
                let mut q = lock(&self.queue);
                q.busy = false;
                self.changed.notify_all();
                loop {
                    if let Some(j) = q.jobs.pop_front() {
                        q.busy = true;
                        break j;
                    }
                    if q.stop {
                        return;
                    }
                    q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner());
                }
            };
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(coll)))
                .unwrap_or_else(|_| Err(Error::InvalidArgument("a collective panicked".into())));
            pending.finish(r);
        }
    }

    pub(crate) fn submit(&self, job: Job) -> Arc<Pending> {
        let pending = Pending::new();
        lock(&self.queue).jobs.push_back((job, pending.clone()));
        self.changed.notify_all();
        pending
    }

    /// Waits until every collective submitted so far has run.
    pub(crate) fn wait_idle(&self) {
        let mut q = lock(&self.queue);
        while q.busy || !q.jobs.is_empty() {
            q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Stops the thread once its queue is empty.
    pub(crate) fn stop(&self) {
        lock(&self.queue).stop = true;
        self.changed.notify_all();
        if let Some(h) = lock(&self.thread).take() {
            let _ = h.join();
        }
    }
}

/// A nonblocking collective in flight, borrowing its buffers for the scope it was started in.
#[must_use = "a collective request must be waited for (or it is waited for when its scope ends)"]
pub struct CollRequest<'scope> {
    pub(crate) pending: Arc<Pending>,
    pub(crate) _bufs: std::marker::PhantomData<&'scope mut ()>,
}

impl CollRequest<'_> {
    /// Waits for the collective to complete on this rank.
    pub fn wait(self) -> Result<()> {
        self.pending.wait()
    }

    /// Whether the collective has completed on this rank (its error, if it failed, is
    /// returned by this call once, or by [`wait`](CollRequest::wait)).
    pub fn test(&mut self) -> Result<bool> {
        if !self.pending.is_done() {
            return Ok(false);
        }
        self.pending.wait().map(|()| true)
    }
}

/// A pointer to a caller's buffer that may go to the collective thread.
#[derive(Clone, Copy)]
pub(crate) struct Buf(*mut u8, pub(crate) usize);
// SAFETY: the buffer is the caller's, borrowed for the scope, which waits for the collective
// before the borrow ends; only the collective thread touches it meanwhile.
unsafe impl Send for Buf {}

impl Buf {
    pub(crate) fn of(b: &[u8]) -> Buf {
        Buf(b.as_ptr() as *mut u8, b.len())
    }
    pub(crate) fn of_mut(b: &mut [u8]) -> Buf {
        Buf(b.as_mut_ptr(), b.len())
    }
    /// A buffer lent for reading.
    ///
    /// # Safety
    /// The buffer must be alive and not written for `'a` (see `Buf`'s `Send`).
    pub(crate) unsafe fn get_ref<'a>(self) -> &'a [u8] {
        if self.1 == 0 {
            return &[];
        }
        // SAFETY: as the function's contract says.
        unsafe { std::slice::from_raw_parts(self.0, self.1) }
    }

    /// # Safety
    /// The buffer must be alive and unaliased for `'a` (see `Buf`'s `Send`).
    pub(crate) unsafe fn get<'a>(self) -> &'a mut [u8] {
        if self.1 == 0 {
            return &mut [];
        }
        // SAFETY: as the function's contract says.
        unsafe { std::slice::from_raw_parts_mut(self.0, self.1) }
    }
}

impl Comm {
    /// Queues, in order after the nonblocking collectives started before, this rank's part in
    /// the ranks' comparison of a collective call it refused (`RDCOLL_CHECK_COLLECTIVES`);
    /// `None` when the comparison is off (or no collective thread can run).
    pub(crate) fn submit_refusal(&self) -> Option<Arc<Pending>> {
        if !self.collectives_config().check_collectives {
            return None;
        }
        let worker = self.worker().ok()?;
        Some(worker.submit(Box::new(|c| {
            c.refuse_call();
            Ok(())
        })))
    }

    /// For bindings whose own checks of a nonblocking collective's arguments fail before it
    /// starts (the C API): with `RDCOLL_CHECK_COLLECTIVES` on, this rank takes part in the
    /// ranks' comparison of that call as having refused it, in order after the nonblocking
    /// collectives started before and without waiting, so that the others get `Mismatch`
    /// naming it instead of waiting for it. Off: nothing. Rust's own calls do this themselves.
    pub fn refuse_nonblocking_collective(&self) {
        let _ = self.submit_refusal();
    }

    /// This communicator's collective thread, started on first use.
    pub(crate) fn worker(&self) -> Result<&Arc<Worker>> {
        if let Some(w) = self.worker.get() {
            return Ok(w);
        }
        if self.fabric.clock_is_virtual() {
            // Virtual time moves when every rank's thread sleeps in the fabric; a second thread
            // of a rank, and an owner waiting for it outside the fabric, would stop it.
            return Err(Error::InvalidArgument(
                "nonblocking collectives do not run on the simulated fabric yet".into(),
            ));
        }
        self.start_once(&self.worker, || {
            Worker::start(self.collectives_arc()?.clone())
        })
    }
}
