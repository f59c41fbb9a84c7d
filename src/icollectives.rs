//! The nonblocking collectives a [`Scope`] starts: each returns a [`CollRequest`] that
//! borrows its buffers until the scope ends, and runs on the communicator's collective thread
//! (`nonblocking.rs`).

use bytemuck::Pod;
use rdcoll_collectives::blocks::even_parts;
use rdcoll_collectives::reduce::op::{check, op_reducer, reducer};
use rdcoll_collectives::{Collectives, Element, Op};

use crate::blocks::byte_parts;
use crate::nonblocking::{Buf, CollRequest, Job};
use crate::{Error, Rank, Result, Scope};

impl<'scope> Scope<'scope, '_> {
    /// `r`, a nonblocking collective's own check of this rank's arguments: when it failed and
    /// the ranks compare their calls (`RDCOLL_CHECK_COLLECTIVES`), this rank still takes part
    /// in the comparison, as having refused, in order after the collectives it started
    /// before, so that the others get `Mismatch` instead of waiting for it.
    fn arguments<T, E: Into<Error>>(&'scope self, r: std::result::Result<T, E>) -> Result<T> {
        r.map_err(|e| {
            if let Some(refusal) = self.comm().submit_refusal() {
                self.note_collective(refusal);
            }
            e.into()
        })
    }

    fn start(&'scope self, job: Job) -> Result<CollRequest<'scope>> {
        let pending = self.comm().worker()?.submit(job);
        self.note_collective(pending.clone());
        Ok(CollRequest {
            pending,
            _bufs: std::marker::PhantomData,
        })
    }

    /// Starts `job` on `send` and `recv` (as bytes), which stay borrowed for the scope.
    fn start_on<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        job: impl FnOnce(&Collectives, &[u8], &mut [u8]) -> Result<()> + Send + 'static,
    ) -> Result<CollRequest<'scope>> {
        let s = Buf::of(bytemuck::cast_slice(send));
        let r = Buf::of_mut(bytemuck::cast_slice_mut(recv));
        self.start(Box::new(move |c| {
            // Both buffers are borrowed for 'scope, which waits for the job before
            // the borrows end; only the job touches them meanwhile.
            // SAFETY: as just said.
            let (send, recv) = unsafe { (s.get_ref(), r.get()) };
            job(c, send, recv)
        }))
    }

    /// Starts a barrier ([`Comm::barrier`](crate::Comm::barrier)).
    pub fn ibarrier(&'scope self) -> Result<CollRequest<'scope>> {
        self.start(Box::new(|c| Ok(c.barrier()?)))
    }

    /// Starts a broadcast of `buf` from `root` ([`Comm::bcast`](crate::Comm::bcast)).
    pub fn ibcast<T: Pod>(
        &'scope self,
        buf: &'scope mut [T],
        root: Rank,
    ) -> Result<CollRequest<'scope>> {
        let b = Buf::of_mut(bytemuck::cast_slice_mut(buf));
        self.start(Box::new(move |c| {
            // `buf` is borrowed for 'scope, which waits for the job before the borrow
            // ends; only the job touches it meanwhile.
            // SAFETY: as just said.
            let buf = unsafe { b.get() };
            Ok(c.bcast(buf, root)?)
        }))
    }

    /// Starts an allreduce of `send` into `recv` with `op` ([`Comm::allreduce`](crate::Comm::allreduce)).
    ///
    /// ```
    /// let sums = rdcoll::local::run(3, |comm| {
    ///     let mine = vec![comm.rank() as u64; 1000];
    ///     let mut total = vec![0u64; 1000];
    ///     comm.scope(|s| {
    ///         let r = s.iallreduce(&mine, &mut total, rdcoll::Op::Sum).unwrap();
    ///         // ... compute here; the reduction goes on meanwhile ...
    ///         r.wait().unwrap();
    ///     });
    ///     total[999]
    /// })
    /// .unwrap();
    /// assert_eq!(sums, [3, 3, 3]);
    /// ```
    pub fn iallreduce<T: Element>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        op: Op,
    ) -> Result<CollRequest<'scope>> {
        self.arguments(check::<T>(op))?;
        self.iallreduce_by(send, recv, op_reducer::<T>(op))
    }

    /// Starts an allreduce with a reduction of the caller's ([`Comm::allreduce_with`](crate::Comm::allreduce_with)).
    pub fn iallreduce_with<T: Pod, F: Fn(&mut T, &T) + Send + Sync + 'static>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        f: F,
    ) -> Result<CollRequest<'scope>> {
        self.iallreduce_by(send, recv, reducer(f))
    }

    fn iallreduce_by<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        f: impl Fn(&mut [u8], &[u8]) + Send + Sync + 'static,
    ) -> Result<CollRequest<'scope>> {
        if send.len() != recv.len() {
            return self.arguments(Err(Error::InvalidArgument(format!(
                "send has {} elements, recv {}",
                send.len(),
                recv.len()
            ))));
        }
        let elem = std::mem::size_of::<T>();
        self.start_on(send, recv, move |c, send, acc| {
            // Any copy is the job's too (a long vector's is time the caller would not
            // compute): only this rank's segment of a large one.
            Ok(c.reduce_apart(send, acc, elem, &f, None)?)
        })
    }

    /// Starts an allgather ([`Comm::allgather`](crate::Comm::allgather)).
    pub fn iallgather<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
    ) -> Result<CollRequest<'scope>> {
        let parts = even_parts(self.comm().size() as usize, std::mem::size_of_val(send));
        self.start_on(send, recv, move |c, send, recv| {
            Ok(c.allgatherv(send, recv, &parts)?)
        })
    }

    /// Starts an alltoall ([`Comm::alltoall`](crate::Comm::alltoall)).
    pub fn ialltoall<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
    ) -> Result<CollRequest<'scope>> {
        let n = self.comm().size();
        if send.len() != recv.len() || send.len() % (n as usize) != 0 {
            return self.arguments(Err(Error::InvalidArgument(format!(
                "alltoall needs send and receive buffers of the same whole number of blocks for \
                 {n} ranks ({} and {} elements)",
                send.len(),
                recv.len()
            ))));
        }
        let block = std::mem::size_of_val(send) / (n as usize);
        self.start_on(send, recv, move |c, send, recv| {
            Ok(c.alltoall(send, recv, block)?)
        })
    }

    /// Starts a reduce of `send` into `root`'s `recv` with `op` ([`Comm::reduce`](crate::Comm::reduce); `recv`
    /// matters at the root only).
    pub fn ireduce<T: Element>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        op: Op,
        root: Rank,
    ) -> Result<CollRequest<'scope>> {
        self.arguments(check::<T>(op))?;
        self.ireduce_by(send, recv, op_reducer::<T>(op), root)
    }

    /// Starts a reduce with a reduction of the caller's ([`Comm::reduce_with`](crate::Comm::reduce_with)).
    pub fn ireduce_with<T: Pod, F: Fn(&mut T, &T) + Send + Sync + 'static>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        f: F,
        root: Rank,
    ) -> Result<CollRequest<'scope>> {
        self.ireduce_by(send, recv, reducer(f), root)
    }

    fn ireduce_by<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        f: impl Fn(&mut [u8], &[u8]) + Send + Sync + 'static,
        root: Rank,
    ) -> Result<CollRequest<'scope>> {
        let at_root = self.comm().rank() == root;
        if at_root && send.len() != recv.len() {
            return self.arguments(Err(Error::InvalidArgument(format!(
                "send has {} elements, recv {}",
                send.len(),
                recv.len()
            ))));
        }
        let elem = std::mem::size_of::<T>();
        let align = std::mem::align_of::<T>();
        self.start_on(send, recv, move |c, send, acc| {
            if at_root {
                return Ok(c.reduce_apart(send, acc, elem, &f, Some(root))?);
            }
            // Elsewhere the contribution is only read (a small one is combined in a copy),
            // unless its elements need more alignment than that copy gets (`Comm::reduce`).
            if align > 64 {
                let mut scratch: Vec<T> = bytemuck::cast_slice::<u8, T>(send).to_vec();
                return Ok(c.reduce(bytemuck::cast_slice_mut(&mut scratch), elem, &f, root)?);
            }
            Ok(c.reduce_from(send, (elem, align), &f, root)?)
        })
    }

    /// Starts a gather ([`Comm::gather`](crate::Comm::gather); `recv` matters at the root only).
    pub fn igather<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        root: Rank,
    ) -> Result<CollRequest<'scope>> {
        self.start_on(send, recv, move |c, send, recv| {
            Ok(c.gather(send, recv, root)?)
        })
    }

    /// Starts a scatter ([`Comm::scatter`](crate::Comm::scatter); `send` matters at the root only).
    pub fn iscatter<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        root: Rank,
    ) -> Result<CollRequest<'scope>> {
        self.start_on(send, recv, move |c, send, recv| {
            Ok(c.scatter(send, recv, root)?)
        })
    }

    /// Starts a gatherv ([`Comm::gatherv`](crate::Comm::gatherv); `counts` and `recv` matter at the root only).
    pub fn igatherv<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        counts: &[usize],
        root: Rank,
    ) -> Result<CollRequest<'scope>> {
        let parts = self.arguments(byte_parts::<T>(counts))?;
        self.start_on(send, recv, move |c, send, recv| {
            Ok(c.gatherv(send, recv, &parts, root)?)
        })
    }

    /// Starts a scatterv ([`Comm::scatterv`](crate::Comm::scatterv); `send` and `counts` matter at the root only).
    pub fn iscatterv<T: Pod>(
        &'scope self,
        send: &'scope [T],
        counts: &[usize],
        recv: &'scope mut [T],
        root: Rank,
    ) -> Result<CollRequest<'scope>> {
        let parts = self.arguments(byte_parts::<T>(counts))?;
        self.start_on(send, recv, move |c, send, recv| {
            Ok(c.scatterv(send, &parts, recv, root)?)
        })
    }

    /// Starts an allgatherv ([`Comm::allgatherv`](crate::Comm::allgatherv)).
    ///
    /// ```
    /// let got = rdcoll::local::run(3, |comm| {
    ///     let r = comm.rank() as usize;
    ///     let mine = vec![r as u8; r + 1];
    ///     let mut all = vec![0u8; 6];
    ///     comm.scope(|s| {
    ///         s.iallgatherv(&mine, &mut all, &[1, 2, 3]).unwrap().wait().unwrap();
    ///     });
    ///     all
    /// })
    /// .unwrap();
    /// assert_eq!(got[2], [0, 1, 1, 2, 2, 2]);
    /// ```
    pub fn iallgatherv<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        counts: &[usize],
    ) -> Result<CollRequest<'scope>> {
        let parts = self.arguments(byte_parts::<T>(counts))?;
        self.start_on(send, recv, move |c, send, recv| {
            Ok(c.allgatherv(send, recv, &parts)?)
        })
    }

    /// Starts an alltoallv ([`Comm::alltoallv`](crate::Comm::alltoallv)).
    pub fn ialltoallv<T: Pod>(
        &'scope self,
        send: &'scope [T],
        send_counts: &[usize],
        recv: &'scope mut [T],
        recv_counts: &[usize],
    ) -> Result<CollRequest<'scope>> {
        let send_parts = self.arguments(byte_parts::<T>(send_counts))?;
        let recv_parts = self.arguments(byte_parts::<T>(recv_counts))?;
        self.start_on(send, recv, move |c, send, recv| {
            Ok(c.alltoallv(send, &send_parts, recv, &recv_parts)?)
        })
    }

    /// Starts a reduce_scatter ([`Comm::reduce_scatter`](crate::Comm::reduce_scatter): blocks of `counts[r]` elements,
    /// the same `counts` on every rank).
    pub fn ireduce_scatter<T: Element>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        counts: &[usize],
        op: Op,
    ) -> Result<CollRequest<'scope>> {
        self.arguments(check::<T>(op))?;
        let parts = self.arguments(byte_parts::<T>(counts))?;
        let elem = std::mem::size_of::<T>();
        self.start_on(send, recv, move |c, send, recv| {
            Ok(c.reduce_scatter(send, &parts, recv, elem, &op_reducer::<T>(op))?)
        })
    }

    /// Starts a reduce_scatter_block ([`Comm::reduce_scatter_block`](crate::Comm::reduce_scatter_block)).
    pub fn ireduce_scatter_block<T: Element>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        op: Op,
    ) -> Result<CollRequest<'scope>> {
        self.arguments(check::<T>(op))?;
        let elem = std::mem::size_of::<T>();
        self.start_on(send, recv, move |c, send, recv| {
            Ok(c.reduce_scatter_block(send, recv, elem, &op_reducer::<T>(op))?)
        })
    }

    /// Starts an inclusive scan ([`Comm::scan`](crate::Comm::scan)).
    pub fn iscan<T: Element>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        op: Op,
    ) -> Result<CollRequest<'scope>> {
        self.arguments(check::<T>(op))?;
        self.prefix(send, recv, op_reducer::<T>(op), true)
    }

    /// Starts an inclusive scan with a reduction of the caller's ([`Comm::scan_with`](crate::Comm::scan_with)).
    pub fn iscan_with<T: Pod, F: Fn(&mut T, &T) + Send + Sync + 'static>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        f: F,
    ) -> Result<CollRequest<'scope>> {
        self.prefix(send, recv, reducer(f), true)
    }

    /// Starts an exclusive scan ([`Comm::exscan`](crate::Comm::exscan)).
    pub fn iexscan<T: Element>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        op: Op,
    ) -> Result<CollRequest<'scope>> {
        self.arguments(check::<T>(op))?;
        self.prefix(send, recv, op_reducer::<T>(op), false)
    }

    /// Starts an exclusive scan with a reduction of the caller's ([`Comm::exscan_with`](crate::Comm::exscan_with)).
    pub fn iexscan_with<T: Pod, F: Fn(&mut T, &T) + Send + Sync + 'static>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        f: F,
    ) -> Result<CollRequest<'scope>> {
        self.prefix(send, recv, reducer(f), false)
    }

    fn prefix<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        f: impl Fn(&mut [u8], &[u8]) + Send + Sync + 'static,
        inclusive: bool,
    ) -> Result<CollRequest<'scope>> {
        let elem = std::mem::size_of::<T>();
        self.start_on(send, recv, move |c, send, recv| {
            match inclusive {
                true => c.scan(send, recv, elem, &f)?,
                false => c.exscan(send, recv, elem, &f)?,
            }
            Ok(())
        })
    }
}
