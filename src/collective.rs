//! Collectives on a [`Comm`]: broadcast (and, with issue 7, reduce, allreduce and barrier).
//! Every rank calls them in the same order; see `rdcoll_collectives` for the algorithms.

use bytemuck::Pod;
use rdcoll_collectives::reduce::op::{check, op_reducer, reducer};
use rdcoll_collectives::{Collectives, Element, Multicast, Op};

use crate::{Comm, Error, Rank, Result};

impl Comm {
    /// `r`, a collective's own check of this rank's arguments: when it failed and the ranks
    /// compare their calls (`RDCOLL_CHECK_COLLECTIVES`), this rank still takes part in the
    /// comparison, as having refused, so that the others get `Mismatch` instead of waiting.
    pub(crate) fn arguments<T, E: Into<Error>>(&self, r: std::result::Result<T, E>) -> Result<T> {
        r.map_err(|e| {
            if let Ok(c) = self.collectives() {
                c.refuse_call();
            }
            e.into()
        })
    }

    /// The collectives of this communicator, created on first use.
    #[inline]
    pub(crate) fn collectives(&self) -> Result<&Collectives> {
        if let Some(w) = self.worker.get() {
            // Collectives run in the order they were called: nonblocking ones first.
            w.wait_idle();
        }
        Ok(self.collectives_arc()?)
    }

    /// The collectives, shared with the collective thread.
    pub(crate) fn collectives_arc(&self) -> Result<&std::sync::Arc<Collectives>> {
        match self.collectives.get() {
            Some(c) => Ok(c),
            None => self.start_collectives(),
        }
    }

    /// The first use's part of [`collectives`](Comm::collectives), out of line (as for the
    /// engine: every later call is then a load and a branch).
    #[cold]
    #[inline(never)]
    fn start_collectives(&self) -> Result<&std::sync::Arc<Collectives>> {
        self.start_once(&self.collectives, || {
            let fabric = self.engine()?.ni().fabric().clone();
            let cfg = rdcoll_collectives::CollConfig::from_env_for(fabric.as_ref())?;
            Ok(std::sync::Arc::new(self.new_collectives(cfg)?))
        })
    }

    /// This communicator's collectives with settings `cfg`.
    fn new_collectives(&self, cfg: rdcoll_collectives::CollConfig) -> Result<Collectives> {
        let engine = self.engine()?.clone();
        Ok(Collectives::with_members(
            engine,
            self.context(),
            cfg,
            self.members(),
        )?)
    }

    /// This communicator's collectives at the level of bytes (blocks as byte ranges,
    /// reductions as byte-level functions), for bindings to other languages such as the C
    /// API; Rust programs use the typed methods of `Comm`. Set up on first use.
    pub fn byte_collectives(&self) -> Result<&Collectives> {
        self.collectives()
    }

    /// The collectives' settings in use on this communicator.
    pub fn collectives_config(&self) -> &rdcoll_collectives::CollConfig {
        match self.collectives_arc() {
            Ok(c) => c.config(),
            Err(_) => &DEFAULT_CONFIG,
        }
    }

    /// A duplicate of this communicator (see [`dup`](Comm::dup); collective) whose
    /// collectives use `cfg` instead of the `RDCOLL_*` settings: for choosing an algorithm per
    /// communicator, or for in-process ranks, which share one environment.
    pub fn with_collectives_config(&self, cfg: rdcoll_collectives::CollConfig) -> Result<Comm> {
        let comm = self.dup()?;
        let c = comm.new_collectives(cfg)?;
        let _ = comm.collectives.set(std::sync::Arc::new(c));
        Ok(comm)
    }

    /// Returns once every rank of this communicator has called `barrier` (dissemination over
    /// one-byte RDMA writes).
    pub fn barrier(&self) -> Result<()> {
        Ok(self.collectives()?.barrier()?)
    }

    /// Broadcasts `buf` from `root`: afterwards every rank's `buf` holds the root's. Every
    /// rank passes a buffer of the same length (use [`bcast_any_size`](Comm::bcast_any_size)
    /// when only the root knows it). Small messages travel as RDMA writes with counter bytes
    /// down a tree; large ones, where every rank shares one host, through the root's own
    /// staging (every rank copies them out once; two ranks with a core each: written straight
    /// into the receiver's buffer from 64 KiB), elsewhere by the binomial pipeline of RDMC
    /// (`RDCOLL_BCAST_*` settings in the README). Ranks that pass another length or root get
    /// [`Error::Mismatch`]: with `RDCOLL_CHECK_COLLECTIVES` on (the default in debug builds)
    /// every rank, before anything moves; off, a rank that hears another length than its own,
    /// once it has taken its part, with as much of the root's message as fits (ranks that
    /// disagree on the root do not hear of it). The communicator stays usable (see
    /// [`Error::Mismatch`]).
    ///
    /// ```
    /// let got = rdcoll::local::run(4, |comm| {
    ///     let mut v = if comm.rank() == 2 { [7u32, 8, 9] } else { [0; 3] };
    ///     comm.bcast(&mut v, 2).unwrap();
    ///     v
    /// })
    /// .unwrap();
    /// assert!(got.iter().all(|v| *v == [7, 8, 9]));
    /// ```
    pub fn bcast<T: Pod>(&self, buf: &mut [T], root: Rank) -> Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        Ok(self.collectives()?.bcast(bytes, root)?)
    }

    /// Broadcasts `buf` from `root` by a receiver-initiated multicast across clusters (paper
    /// 003), whatever its size: the ranks of each cluster (`RDCOLL_CLUSTER`, else each host)
    /// pull every piece into their cluster once, with one-sided gets from any rank that holds
    /// it, and spread it inside; with [`Multicast::Robber`] a rank that has pulled its share
    /// steals work from a busier one, so faster ranks and links carry more. Meant for large
    /// messages across clusters whose links differ or change (a planned tree runs at the
    /// speed of its slowest link). Lengths as for [`bcast`](Comm::bcast); `RDCOLL_MULTICAST_*`
    /// settings in the README. `RDCOLL_BCAST_ALGORITHM=robber` (or `mob`) makes every large
    /// `bcast` one.
    ///
    /// ```
    /// use rdcoll::Multicast;
    /// let got = rdcoll::local::run(3, |comm| {
    ///     let mut v = vec![comm.rank() as u8; 1 << 20];
    ///     comm.multicast(&mut v, 1, Multicast::Robber).unwrap();
    ///     v
    /// })
    /// .unwrap();
    /// assert!(got.iter().all(|v| v.iter().all(|&b| b == 1)));
    /// ```
    pub fn multicast<T: Pod>(&self, buf: &mut [T], root: Rank, how: Multicast) -> Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        Ok(self.collectives()?.multicast(bytes, root, how)?)
    }

    /// Broadcasts `data` from `root` to ranks that need not know its length: the root passes
    /// `Some(data)`, the others `None`, and every rank gets the root's elements.
    ///
    /// ```
    /// let got = rdcoll::local::run(3, |comm| {
    ///     let mine = [1u16, 2, 3, 4];
    ///     let data = (comm.rank() == 0).then_some(&mine[..]);
    ///     comm.bcast_any_size(data, 0).unwrap()
    /// })
    /// .unwrap();
    /// assert!(got.iter().all(|v| v == &[1, 2, 3, 4]));
    /// ```
    pub fn bcast_any_size<T: Pod>(&self, data: Option<&[T]>, root: Rank) -> Result<Vec<T>> {
        let bytes = data.map(bytemuck::cast_slice::<T, u8>);
        let got = self.collectives()?.bcast_any_size(bytes, root)?;
        let size = std::mem::size_of::<T>();
        if size == 0 {
            return Ok(Vec::new());
        }
        if got.len() % size != 0 {
            return Err(Error::Mismatch(format!(
                "{} bytes broadcast are not a whole number of {size}-byte elements",
                got.len()
            )));
        }
        let mut out = vec![T::zeroed(); got.len() / size];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&got);
        Ok(out)
    }

    /// Combines every rank's `send` element-wise with `op` into every rank's `recv` (same
    /// length everywhere). The result is bitwise identical on every rank and in every run:
    /// contributions are combined in an order fixed by the ranks' ids, never by arrival, for
    /// floating-point types too. Small vectors use the degree-k tree of RDMA writes (the
    /// model in `RDCOLL_ALLREDUCE_*` settings picks `k`), large ones reduce-scatter and
    /// allgather.
    ///
    /// ```
    /// use rdcoll::Op;
    /// let sums = rdcoll::local::run(3, |comm| {
    ///     let mine = [comm.rank() as f64, 1.0];
    ///     let mut total = [0.0; 2];
    ///     comm.allreduce(&mine, &mut total, Op::Sum).unwrap();
    ///     total
    /// })
    /// .unwrap();
    /// assert!(sums.iter().all(|t| *t == [3.0, 3.0]));
    /// ```
    pub fn allreduce<T: Element>(&self, send: &[T], recv: &mut [T], op: Op) -> Result<()> {
        self.arguments(check::<T>(op))?;
        self.arguments(same_len(send.len(), recv.len()))?;
        self.allreduce_apart(send, recv, &op_reducer::<T>(op))
    }

    /// [`allreduce`](Comm::allreduce) with `buf` as both this rank's contribution and the
    /// result.
    pub fn allreduce_in_place<T: Element>(&self, buf: &mut [T], op: Op) -> Result<()> {
        self.arguments(check::<T>(op))?;
        self.allreduce_in_place_unchecked(buf, &op_reducer::<T>(op))
    }

    /// [`allreduce`](Comm::allreduce) with a reduction of the caller's: `f(acc, x)` folds `x`
    /// into `acc` (called in the fixed rank order, so `f` need not be commutative).
    ///
    /// ```
    /// // The largest value with the rank that holds it.
    /// let best = rdcoll::local::run(4, |comm| {
    ///     let mine = [[(comm.rank() as u32 * 7) % 4, comm.rank() as u32]];
    ///     let mut out = [[0u32; 2]];
    ///     comm.allreduce_with(&mine, &mut out, |a: &mut [u32; 2], b: &[u32; 2]| {
    ///         if b[0] > a[0] {
    ///             *a = *b;
    ///         }
    ///     })
    ///     .unwrap();
    ///     out[0]
    /// })
    /// .unwrap();
    /// assert_eq!(best[0], [3, 1]);
    /// ```
    pub fn allreduce_with<T: Pod, F: Fn(&mut T, &T) + Sync>(
        &self,
        send: &[T],
        recv: &mut [T],
        f: F,
    ) -> Result<()> {
        self.arguments(same_len(send.len(), recv.len()))?;
        self.allreduce_apart(send, recv, &reducer(f))
    }

    /// [`allreduce`](Comm::allreduce) of `send` into `recv` (same length, checked) with the
    /// byte-level reduction `f`.
    fn allreduce_apart<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        f: &(dyn Fn(&mut [u8], &[u8]) + Sync),
    ) -> Result<()> {
        let size = std::mem::size_of::<T>();
        Ok(self.collectives()?.reduce_apart(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            size,
            f,
            None,
        )?)
    }

    fn allreduce_in_place_unchecked<T: Pod>(
        &self,
        buf: &mut [T],
        f: &(dyn Fn(&mut [u8], &[u8]) + Sync),
    ) -> Result<()> {
        let size = std::mem::size_of::<T>();
        Ok(self
            .collectives()?
            .allreduce(bytemuck::cast_slice_mut(buf), size, f)?)
    }

    /// Combines every rank's `send` element-wise with `op` into `root`'s `recv` (same length
    /// as `send` there; ignored elsewhere), in the same fixed order as
    /// [`allreduce`](Comm::allreduce).
    pub fn reduce<T: Element>(&self, send: &[T], recv: &mut [T], op: Op, root: Rank) -> Result<()> {
        self.arguments(check::<T>(op))?;
        self.reduce_into(send, recv, &op_reducer::<T>(op), root)
    }

    /// [`reduce`](Comm::reduce) with a reduction of the caller's (see
    /// [`allreduce_with`](Comm::allreduce_with)).
    pub fn reduce_with<T: Pod, F: Fn(&mut T, &T) + Sync>(
        &self,
        send: &[T],
        recv: &mut [T],
        f: F,
        root: Rank,
    ) -> Result<()> {
        self.reduce_into(send, recv, &reducer(f), root)
    }

    /// [`reduce`](Comm::reduce) with `buf` as this rank's contribution and, at the root, the
    /// result (elsewhere `buf` is left as it was).
    pub fn reduce_in_place<T: Element>(&self, buf: &mut [T], op: Op, root: Rank) -> Result<()> {
        self.arguments(check::<T>(op))?;
        if self.rank() == root {
            let f = op_reducer::<T>(op);
            let size = std::mem::size_of::<T>();
            return Ok(self.collectives()?.reduce(
                bytemuck::cast_slice_mut(buf),
                size,
                &f,
                root,
            )?);
        }
        self.reduce_into(buf, &mut [], &op_reducer::<T>(op), root)
    }

    fn reduce_into<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        f: &(dyn Fn(&mut [u8], &[u8]) + Sync),
        root: Rank,
    ) -> Result<()> {
        let size = std::mem::size_of::<T>();
        if self.rank() == root {
            self.arguments(same_len(send.len(), recv.len()))?;
            return Ok(self.collectives()?.reduce_apart(
                bytemuck::cast_slice(send),
                bytemuck::cast_slice_mut(recv),
                size,
                f,
                Some(root),
            )?);
        }
        // Not the root: its vector is only read (the collectives copy a small one, which the
        // tree combines in place), unless its elements need more alignment than a copy made
        // there gets: then it combines in a copy of its own type, as all ranks once did.
        let c = self.collectives()?;
        let align = std::mem::align_of::<T>();
        if align > 64 {
            let mut scratch = send.to_vec();
            return Ok(c.reduce(bytemuck::cast_slice_mut(&mut scratch), size, f, root)?);
        }
        Ok(c.reduce_from(bytemuck::cast_slice(send), (size, align), f, root)?)
    }

    /// The degree of the reduce tree an allreduce of `bytes` bytes uses on this communicator
    /// (the model's choice, or `RDCOLL_ALLREDUCE_DEGREE`). Collective the first time.
    pub fn allreduce_degree(&self, bytes: usize) -> Result<usize> {
        Ok(self.collectives()?.allreduce_degree(bytes)?)
    }
}

/// What `collectives_config` shows when the collectives cannot be set up.
static DEFAULT_CONFIG: std::sync::LazyLock<rdcoll_collectives::CollConfig> =
    std::sync::LazyLock::new(rdcoll_collectives::CollConfig::default);

fn same_len(send: usize, recv: usize) -> Result<()> {
    if send != recv {
        return Err(Error::InvalidArgument(format!(
            "send has {send} elements, recv {recv}"
        )));
    }
    Ok(())
}
