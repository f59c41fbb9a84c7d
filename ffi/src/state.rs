//! The library's life cycle (`rdc_init` .. `rdc_finalize`) and the handle tables behind the
//! opaque `rdc_comm` and `rdc_request` pointers. A handle is an index and a generation
//! packed into the pointer's bits, never a real address: a freed or finished handle names
//! nothing any more, so using it is an error code, not a use after free.

use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard};

use rdcoll::{Comm, RawRequest};

use crate::*;

/// A communicator (opaque).
pub struct rdc_comm {
    _private: [u8; 0],
}

/// A nonblocking operation in flight (opaque).
pub struct rdc_request {
    _private: [u8; 0],
}

/// A table of live objects with generation-checked handles.
pub(crate) struct Table<T> {
    slots: Vec<(u32, Option<T>)>,
}

impl<T> Table<T> {
    const fn new() -> Self {
        Table { slots: Vec::new() }
    }

    /// Stores `v`; its handle (never 0).
    pub(crate) fn insert(&mut self, v: T) -> usize {
        let free = self.slots.iter().position(|s| s.1.is_none());
        let i = match free {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[i];
        slot.0 = slot.0.wrapping_add(1).max(1);
        slot.1 = Some(v);
        ((i + 1) << 32) | slot.0 as usize
    }

    fn find(&self, h: usize) -> Option<usize> {
        let i = (h >> 32).checked_sub(1)?;
        let (generation, v) = self.slots.get(i)?;
        (v.is_some() && *generation as usize == (h & 0xffff_ffff)).then_some(i)
    }

    pub(crate) fn get(&self, h: usize) -> Option<&T> {
        let i = self.find(h)?;
        self.slots[i].1.as_ref()
    }

    pub(crate) fn get_mut(&mut self, h: usize) -> Option<&mut T> {
        let i = self.find(h)?;
        self.slots[i].1.as_mut()
    }

    pub(crate) fn take(&mut self, h: usize) -> Option<T> {
        let i = self.find(h)?;
        self.slots[i].1.take()
    }

    fn clear(&mut self) -> Vec<T> {
        self.slots.iter_mut().filter_map(|s| s.1.take()).collect()
    }
}

/// Where the library stands.
pub(crate) enum Phase {
    Before,
    Running {
        world: usize,
        comms: Table<Arc<Comm>>,
        requests: Table<RawRequest>,
    },
    After,
}

pub(crate) static STATE: Mutex<Phase> = Mutex::new(Phase::Before);

/// The state, also after a panic elsewhere poisoned the lock.
pub(crate) fn lock() -> MutexGuard<'static, Phase> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` with the running state, or returns the life-cycle error.
pub(crate) fn running<R>(
    f: impl FnOnce(&mut Table<Arc<Comm>>, &mut Table<RawRequest>, usize) -> Result<R, c_int>,
) -> Result<R, c_int> {
    match &mut *lock() {
        Phase::Before => Err(RDC_ERR_NOT_INITIALIZED),
        Phase::After => Err(RDC_ERR_FINALIZED),
        Phase::Running {
            world,
            comms,
            requests,
        } => f(comms, requests, *world),
    }
}

/// The communicator behind `comm` (a clone of its handle: the table's lock is not held while
/// it is used).
pub(crate) fn comm_of(comm: *const rdc_comm) -> Result<Arc<Comm>, c_int> {
    running(|comms, _, _| comms.get(comm as usize).cloned().ok_or(RDC_ERR_COMM))
}

/// Turns a `Result` into a return code.
pub(crate) fn finish(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => RDC_SUCCESS,
        Err(code) => code,
    }
}

/// Joins the job this process was started in (under `rdcoll-run`, `srun`, `mpirun` or
/// `mpiexec`; alone, a job of one). Call once, before anything else but `rdc_initialized`,
/// `rdc_finalized`, `rdc_strerror` and `rdc_wtime`.
#[no_mangle]
pub extern "C" fn rdc_init() -> c_int {
    guard(|| {
        let mut st = lock();
        match &*st {
            Phase::Running { .. } => return RDC_ERR_ALREADY_INITIALIZED,
            Phase::After => return RDC_ERR_FINALIZED,
            Phase::Before => {}
        }
        match rdcoll::init() {
            Ok(world) => {
                let mut comms = Table::new();
                let world = comms.insert(Arc::new(world));
                *st = Phase::Running {
                    world,
                    comms,
                    requests: Table::new(),
                };
                RDC_SUCCESS
            }
            Err(e) => code_of(&e),
        }
    })
}

/// Leaves the job: waits for requests still in flight, frees every communicator. Nothing but
/// `rdc_initialized`, `rdc_finalized`, `rdc_strerror` and `rdc_wtime` may be called after it.
#[no_mangle]
pub extern "C" fn rdc_finalize() -> c_int {
    guard(|| {
        let (comms, requests) = {
            let mut st = lock();
            match std::mem::replace(&mut *st, Phase::After) {
                Phase::Running {
                    mut comms,
                    mut requests,
                    ..
                } => (comms.clear(), requests.clear()),
                Phase::Before => {
                    *st = Phase::Before;
                    return RDC_ERR_NOT_INITIALIZED;
                }
                Phase::After => return RDC_ERR_FINALIZED,
            }
        };
        // Outside the lock: requests wait for their transfers as they drop.
        drop(requests);
        drop(comms);
        RDC_SUCCESS
    })
}

/// Sets `*flag` to 1 if `rdc_init` has succeeded (even if `rdc_finalize` followed), else 0.
#[no_mangle]
pub extern "C" fn rdc_initialized(flag: *mut c_int) -> c_int {
    guard(|| {
        if flag.is_null() {
            return RDC_ERR_NULL;
        }
        let v = !matches!(*lock(), Phase::Before) as c_int;
        // SAFETY: `flag` is non-NULL and, by the API's contract, points to a writable int.
        unsafe { *flag = v };
        RDC_SUCCESS
    })
}

/// Sets `*flag` to 1 if `rdc_finalize` has been called, else 0.
#[no_mangle]
pub extern "C" fn rdc_finalized(flag: *mut c_int) -> c_int {
    guard(|| {
        if flag.is_null() {
            return RDC_ERR_NULL;
        }
        let v = matches!(*lock(), Phase::After) as c_int;
        // SAFETY: as in `rdc_initialized`.
        unsafe { *flag = v };
        RDC_SUCCESS
    })
}

/// The level of thread safety: `RDC_THREAD_MULTIPLE` (see the header's introduction).
#[no_mangle]
pub extern "C" fn rdc_thread_level(level: *mut c_int) -> c_int {
    guard(|| {
        if level.is_null() {
            return RDC_ERR_NULL;
        }
        // SAFETY: as in `rdc_initialized`.
        unsafe { *level = RDC_THREAD_MULTIPLE };
        RDC_SUCCESS
    })
}

/// Sets `*comm` to the communicator of every rank of the job.
#[no_mangle]
pub extern "C" fn rdc_comm_world(comm: *mut *mut rdc_comm) -> c_int {
    guard(|| {
        if comm.is_null() {
            return RDC_ERR_NULL;
        }
        finish(running(|_, _, world| {
            // SAFETY: `comm` is non-NULL and points to a writable handle (the contract).
            unsafe { *comm = world as *mut rdc_comm };
            Ok(())
        }))
    })
}

/// Sets `*rank` to this rank in `comm` (`0..size`).
#[no_mangle]
pub extern "C" fn rdc_comm_rank(comm: *const rdc_comm, rank: *mut c_int) -> c_int {
    guard(|| {
        if rank.is_null() {
            return RDC_ERR_NULL;
        }
        finish(comm_of(comm).map(|c| {
            // SAFETY: `rank` is non-NULL and points to a writable int (the contract).
            unsafe { *rank = c.rank() as c_int };
        }))
    })
}

/// Sets `*size` to the number of ranks in `comm`.
#[no_mangle]
pub extern "C" fn rdc_comm_size(comm: *const rdc_comm, size: *mut c_int) -> c_int {
    guard(|| {
        if size.is_null() {
            return RDC_ERR_NULL;
        }
        finish(comm_of(comm).map(|c| {
            // SAFETY: as in `rdc_comm_rank`.
            unsafe { *size = c.size() as c_int };
        }))
    })
}

/// Sets `*newcomm` to a duplicate of `comm` with its own context: its messages never match
/// `comm`'s. Collective: every rank of `comm` calls it, in the same order.
#[no_mangle]
pub extern "C" fn rdc_comm_dup(comm: *const rdc_comm, newcomm: *mut *mut rdc_comm) -> c_int {
    guard(|| {
        if newcomm.is_null() {
            return RDC_ERR_NULL;
        }
        let r = comm_of(comm).and_then(|c| c.dup().map_err(|e| code_of(&e)));
        finish(r.and_then(|dup| {
            let h = running(|comms, _, _| Ok(comms.insert(Arc::new(dup))))?;
            // SAFETY: `newcomm` is non-NULL and points to a writable handle (the contract).
            unsafe { *newcomm = h as *mut rdc_comm };
            Ok(())
        }))
    })
}

/// Frees a communicator made by `rdc_comm_dup` and sets `*comm` to NULL (the world
/// communicator cannot be freed).
#[no_mangle]
pub extern "C" fn rdc_comm_free(comm: *mut *mut rdc_comm) -> c_int {
    guard(|| {
        if comm.is_null() {
            return RDC_ERR_NULL;
        }
        // SAFETY: `comm` is non-NULL and points to a handle (the contract).
        let h = unsafe { *comm } as usize;
        let freed = running(|comms, _, world| {
            if h == world {
                return Err(RDC_ERR_COMM);
            }
            comms.take(h).ok_or(RDC_ERR_COMM)
        });
        match freed {
            Ok(c) => {
                drop(c);
                // SAFETY: as above.
                unsafe { *comm = std::ptr::null_mut() };
                RDC_SUCCESS
            }
            Err(code) => code,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn handles_are_never_null_and_die_with_their_object() {
        let mut t = Table::new();
        let a = t.insert("a");
        let b = t.insert("b");
        assert!(a != 0 && b != 0 && a != b);
        assert_eq!(t.get(a), Some(&"a"));
        assert_eq!(t.take(a), Some("a"));
        assert_eq!(t.get(a), None, "a taken handle names nothing");
        assert_eq!(t.take(a), None, "taken twice");
        let c = t.insert("c");
        assert_ne!(c, a, "the slot is reused under a new generation");
        assert_eq!(t.get(a), None);
        assert_eq!(t.get(c), Some(&"c"));
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(0x12345), None);
        assert_eq!(t.get(usize::MAX), None);
        *t.get_mut(b).unwrap() = "B";
        assert_eq!(t.clear(), vec!["c", "B"]);
        assert_eq!(t.get(b), None);
    }
}
