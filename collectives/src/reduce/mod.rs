//! Reduce and allreduce (issue 7, after paper 004 Section 4.2): small vectors by the degree-k
//! tree of RDMA writes into per-sender slots (then, for an allreduce, the counter-byte
//! broadcast of the result), large ones by reduce-scatter and allgather. Every path combines
//! in an order fixed by the ranks' ids, never by arrival: results are bitwise reproducible.

pub mod degree_k;
pub(crate) mod exchange;
pub mod model;
pub mod op;
mod scatter_gather;

use rdcoll_transport::Rank;

use crate::agreement::{Call, CallKind};
use crate::config::ReduceDegree;
use crate::error::{CollError, Result};
use crate::{Collectives, Inner};

use degree_k::DegreeKSlots;
use model::Model;
use op::Reducer;

/// One communicator's reduction state.
pub(crate) struct ReduceState {
    slots: DegreeKSlots,
    /// The broadcast-free allreduce of degree `n - 1`.
    exchange: exchange::Exchange,
    /// Staging for large vectors, set up by the first one.
    large: Option<scatter_gather::ScatterGather>,
    /// Rank 0's model parameters (the same on every rank).
    model: Model,
}

impl Collectives {
    /// Reduces `acc` (this rank's contribution, whole `elem`-byte elements aligned for their
    /// type) over every rank with `reduce`: afterwards every rank's `acc` holds the result.
    /// Every rank passes the same length.
    pub fn allreduce(&self, acc: &mut [u8], elem: usize, reduce: &Reducer<'_>) -> Result<()> {
        self.agree(|| reduction_call(None, acc.len(), elem, reduce))?;
        self.reduction(acc, elem, reduce, None)
    }

    /// Like [`allreduce`](Collectives::allreduce), but only `root`'s `acc` ends with the
    /// result (the others' are used as scratch).
    pub fn reduce(
        &self,
        acc: &mut [u8],
        elem: usize,
        reduce: &Reducer<'_>,
        root: Rank,
    ) -> Result<()> {
        self.agree(|| reduction_call(Some(root), acc.len(), elem, reduce))?;
        self.check_root(root)?;
        self.reduction(acc, elem, reduce, Some(root))
    }

    /// [`allreduce`](Collectives::allreduce) (`root: None`) or, at `root`,
    /// [`reduce`](Collectives::reduce), of the contribution `send` into `recv` (of the same
    /// length): a vector above the small limit is read from `send`, and only this rank's own
    /// segment of it is copied into `recv` (the rest of `recv` receives the other segments'
    /// results); a small one is copied into `recv` and combined there.
    pub fn reduce_apart(
        &self,
        send: &[u8],
        recv: &mut [u8],
        elem: usize,
        reduce: &Reducer<'_>,
        root: Option<Rank>,
    ) -> Result<()> {
        if send.len() != recv.len() {
            self.refuse_call();
            return Err(CollError::InvalidArgument(format!(
                "send has {} bytes, receive {}",
                send.len(),
                recv.len()
            )));
        }
        if root.is_some_and(|r| r != self.waiter.rank()) {
            self.refuse_call();
            return Err(CollError::InvalidArgument(
                "only the root receives a reduce's result: reduce_from elsewhere".into(),
            ));
        }
        self.agree(|| reduction_call(root, send.len(), elem, reduce))?;
        if let Some(r) = root {
            self.check_root(r)?;
        }
        if send.len() <= self.cfg.allreduce_small_max || self.waiter.size() == 1 {
            recv.copy_from_slice(send);
            return self.reduction(recv, elem, reduce, root);
        }
        if elem == 0 || !send.len().is_multiple_of(elem) {
            return Err(CollError::InvalidArgument(format!(
                "{} bytes are not whole {elem}-byte elements",
                send.len()
            )));
        }
        self.guarded(|inner| {
            let contribution = scatter_gather::Contribution::Apart {
                from: send,
                into: recv,
            };
            // A failure midway leaves the ranks out of step: it breaks the communicator.
            self.large_reduction(inner, contribution, elem, reduce, root)?;
            Ok(Ok(()))
        })
    }

    /// The degree the model picks for `bytes` bytes on this communicator (what an allreduce
    /// of that size uses below the small limit; `RDCOLL_ALLREDUCE_DEGREE` overrides it).
    /// Collective the first time (it sets the reductions up).
    pub fn allreduce_degree(&self, bytes: usize) -> Result<usize> {
        self.guarded(|inner| {
            let n = self.waiter.size();
            let model = self.reduce_state(inner)?.model;
            Ok(Ok(self.degree(n, &model, bytes)))
        })
    }

    fn degree(&self, n: usize, model: &Model, bytes: usize) -> usize {
        match self.cfg.allreduce_degree {
            ReduceDegree::Fixed(k) => k.clamp(1, n.saturating_sub(1).max(1)),
            ReduceDegree::Model => model.choose(n, bytes),
        }
    }

    fn reduction(
        &self,
        acc: &mut [u8],
        elem: usize,
        reduce: &Reducer<'_>,
        root: Option<Rank>,
    ) -> Result<()> {
        if elem == 0 || !acc.len().is_multiple_of(elem) {
            return Err(CollError::InvalidArgument(format!(
                "{} bytes are not whole {elem}-byte elements",
                acc.len()
            )));
        }
        self.guarded(|inner| {
            let n = self.waiter.size();
            if n == 1 {
                return Ok(Ok(()));
            }
            let small = acc.len() <= self.cfg.allreduce_small_max;
            let model = self.reduce_state(inner)?.model;
            if !small {
                let contribution = scatter_gather::Contribution::InOut(acc);
                self.large_reduction(inner, contribution, elem, reduce, root)?;
                return Ok(Ok(()));
            }
            let k = self.degree(n, &model, acc.len());
            if root.is_none() && k == n - 1 {
                // One step: everyone combines everything, in the degree-(n-1) tree's order.
                let Inner {
                    reduction, puts, ..
                } = inner;
                let state = reduction.as_mut().expect("set up by reduce_state");
                state.exchange.allreduce(&self.waiter, puts, acc, reduce)?;
                return Ok(Ok(()));
            }
            {
                let Inner {
                    reduction, puts, ..
                } = inner;
                let state = reduction.as_mut().expect("set up by reduce_state");
                // The tree is rooted at rank 0 whatever the root: its nodes combine in
                // ascending id order, so with ids that are ranks the result is `v0 op v1 op
                // ...` as MPI defines it for operations that do not commute (a tree rooted
                // elsewhere combined the ranks rotated, from the root on).
                state.slots.reduce(&self.waiter, puts, acc, reduce, k, 0)?;
                if let Some(root) = root.filter(|&r| r != 0) {
                    // One more write: the result from rank 0 to the root.
                    if let Err(e) = state.slots.forward(&self.waiter, puts, acc, 0, root)? {
                        return Ok(Err(e));
                    }
                }
            }
            if root.is_none() {
                // The result, from the tree's root to everyone (counter-byte blocks).
                self.small(inner, acc, 0)?;
            }
            Ok(Ok(()))
        })
    }

    /// The reduce-scatter path of [`reduction`](Collectives::reduction) (vectors above the
    /// small limit), inside its guarded step.
    fn large_reduction(
        &self,
        inner: &mut Inner,
        contribution: scatter_gather::Contribution<'_>,
        elem: usize,
        reduce: &Reducer<'_>,
        root: Option<Rank>,
    ) -> Result<()> {
        self.reduce_state(inner)?;
        let Inner {
            reduction, puts, ..
        } = inner;
        let state = reduction.as_mut().expect("set up by reduce_state");
        if state.large.is_none() {
            let large = scatter_gather::ScatterGather::new(&self.waiter, self.context)?;
            state.large = Some(large);
        }
        let large = state.large.as_mut().expect("set just above");
        large.reduce(&self.waiter, puts, contribution, elem, reduce, root)
    }

    /// [`reduce`](Collectives::reduce) on a rank other than `root`, whose contribution `send`
    /// (`elem`-byte elements aligned to `align` bytes, at most 64) is only read, never
    /// written: above the small limit (`config().allreduce_small_max`) only rank 0 copies a
    /// chunk of it at a time into its staging; a small one is combined in a copy aligned as
    /// its elements are, as `reduce` combines in its `acc`. A refused call (bad alignment,
    /// this rank the root) takes part in the collective check as refused.
    pub fn reduce_from(
        &self,
        send: &[u8],
        (elem, align): (usize, usize),
        reduce: &Reducer<'_>,
        root: Rank,
    ) -> Result<()> {
        if align > 64 || !align.is_power_of_two() {
            self.refuse_call();
            return Err(CollError::InvalidArgument(format!(
                "elements aligned to {align} bytes (at most 64, a power of two)"
            )));
        }
        if root == self.waiter.rank() {
            self.refuse_call();
            return Err(CollError::InvalidArgument(
                "the root's vector takes the result: reduce, not reduce_from".into(),
            ));
        }
        self.agree(|| reduction_call(Some(root), send.len(), elem, reduce))?;
        self.check_root(root)?;
        if send.len() <= self.cfg.allreduce_small_max {
            let mut copy = AlignedCopy::of(send, align);
            return self.reduction(copy.bytes_mut(), elem, reduce, Some(root));
        }
        if elem == 0 || !send.len().is_multiple_of(elem) {
            return Err(CollError::InvalidArgument(format!(
                "{} bytes are not whole {elem}-byte elements",
                send.len()
            )));
        }
        self.guarded(|inner| {
            let contribution = scatter_gather::Contribution::In(send);
            // A failure midway leaves the ranks out of step: it breaks the communicator.
            self.large_reduction(inner, contribution, elem, reduce, Some(root))?;
            Ok(Ok(()))
        })
    }

    /// Whether blocks of `lens` bytes fit the exchange slots (the same answer on every rank
    /// when every rank passes the same lengths).
    pub(crate) fn exchange_fits(&self, lens: impl Iterator<Item = usize>) -> bool {
        let cap = self.cfg.allreduce_small_max;
        lens.into_iter().all(|l| l <= cap)
    }

    /// Runs `f` on the reduction state (set up if need be) and the communicator's puts, as a
    /// guarded collective step: its outer error breaks the communicator, its inner one not.
    fn with_reduction<T>(
        &self,
        f: impl FnOnce(&mut ReduceState, &mut crate::Puts) -> Result<Result<T>>,
    ) -> Result<T> {
        self.guarded(|inner| {
            self.reduce_state(inner)?;
            let Inner {
                reduction, puts, ..
            } = inner;
            f(reduction.as_mut().expect("set up by reduce_state"), puts)
        })
    }

    /// An allgather through the exchange slots of the small allreduce: rank `r`'s block of
    /// `lens(r)` bytes (this rank's is `mine`) handed to `take(r, block)` in rank order. One
    /// RDMA write per peer; collective.
    pub(crate) fn exchange_blocks(
        &self,
        kind: exchange::Kind,
        mine: &[u8],
        lens: &dyn Fn(usize) -> usize,
        take: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        self.with_reduction(|state, puts| {
            state
                .exchange
                .exchange(&self.waiter, puts, kind, mine, lens, take)
        })
    }

    /// Runs `f` on the exchange slots (set up if need be) and the communicator's puts, as a
    /// guarded collective step (see `with_reduction`).
    pub(crate) fn with_exchange<T>(
        &self,
        f: impl FnOnce(&mut exchange::Exchange, &mut crate::Puts) -> Result<Result<T>>,
    ) -> Result<T> {
        self.with_reduction(|state, puts| f(&mut state.exchange, puts))
    }

    /// A gather of small blocks through the reduction slots (`out`: the root's receive buffer,
    /// `None` elsewhere): the other ranks write and return; see `DegreeKSlots::gather`.
    pub(crate) fn slots_gather(
        &self,
        mine: &[u8],
        out: Option<&mut [u8]>,
        root: Rank,
    ) -> Result<()> {
        self.with_reduction(|state, puts| state.slots.gather(&self.waiter, puts, mine, out, root))
    }

    /// A small scan or exscan through the reduction slots (`recv`: `None` on a rank whose
    /// arguments are wrong, which still takes part); see `DegreeKSlots::prefix`.
    pub(crate) fn slots_prefix(
        &self,
        send: &[u8],
        recv: Option<&mut [u8]>,
        reduce: &Reducer<'_>,
        inclusive: bool,
    ) -> Result<()> {
        self.with_reduction(|state, puts| {
            state
                .slots
                .prefix(&self.waiter, puts, send, recv, reduce, inclusive)
        })
    }

    /// A scatter of small blocks through the reduction slots (`send`: the root's buffer,
    /// `None` elsewhere); see `DegreeKSlots::scatter`.
    pub(crate) fn slots_scatter(
        &self,
        send: Option<&[u8]>,
        recv: &mut [u8],
        root: Rank,
    ) -> Result<()> {
        self.with_reduction(|state, puts| state.slots.scatter(&self.waiter, puts, send, recv, root))
    }

    /// Sets up the slots and agrees on rank 0's model (collective, once).
    fn reduce_state<'a>(&self, inner: &'a mut Inner) -> Result<&'a mut ReduceState> {
        if inner.reduction.is_none() {
            let cap = self.cfg.allreduce_small_max;
            let slots = DegreeKSlots::new(&self.waiter, self.context, cap)?;
            let exchange = exchange::Exchange::new(&self.waiter, self.context, cap)?;
            let mut bytes = if self.waiter.rank() == 0 {
                Model::load()?.to_bytes()
            } else {
                [0u8; 24]
            };
            self.small(inner, &mut bytes, 0)?;
            inner.reduction = Some(ReduceState {
                slots,
                exchange,
                large: None,
                model: Model::from_bytes(&bytes),
            });
        }
        Ok(inner.reduction.as_mut().expect("set just above"))
    }
}

/// The record the collective check compares for an allreduce (`root: None`) or a reduce
/// of `bytes` bytes.
fn reduction_call(root: Option<Rank>, bytes: usize, elem: usize, reduce: &Reducer<'_>) -> Call {
    let call = match root {
        None => Call::new(CallKind::Allreduce),
        Some(r) => Call::new(CallKind::Reduce).root(r),
    };
    call.bytes(bytes).reduction(elem, reduce)
}

/// A copy of a vector in memory aligned for its elements: 16-byte aligned words (what
/// `malloc` gives, so a plain allocation) for alignments up to 16, 64-byte lines above.
enum AlignedCopy {
    Words(Vec<u128>, usize),
    Lines(Vec<Line>, usize),
}

/// One 64-byte aligned line of an [`AlignedCopy`].
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

impl AlignedCopy {
    /// A copy of `bytes` aligned to `align` (at most 64).
    fn of(bytes: &[u8], align: usize) -> AlignedCopy {
        if align <= 16 {
            AlignedCopy::Words(copy_into_units(bytes), bytes.len())
        } else {
            AlignedCopy::Lines(copy_into_units(bytes), bytes.len())
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            AlignedCopy::Words(v, len) => &mut bytemuck::cast_slice_mut::<u128, u8>(v)[..*len],
            AlignedCopy::Lines(v, len) => &mut bytemuck::cast_slice_mut::<Line, u8>(v)[..*len],
        }
    }
}

/// `bytes` copied into fresh units of `U` (the last one's tail zeroed): one copy, no zeroing
/// pass first.
fn copy_into_units<U: bytemuck::Pod>(bytes: &[u8]) -> Vec<U> {
    let unit = std::mem::size_of::<U>();
    let units = bytes.len().div_ceil(unit);
    let mut out: Vec<U> = Vec::with_capacity(units);
    // Every unit is initialised (copied, or its tail zeroed) before the length covers it; the
    // capacity holds `units * unit >= bytes.len()` bytes, which do not overlap `bytes`.
    // SAFETY: as just said, and `U` is plain bytes, so any initialised content is valid.
    unsafe {
        let base = out.as_mut_ptr().cast::<u8>();
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), base, bytes.len());
        std::ptr::write_bytes(base.add(bytes.len()), 0, units * unit - bytes.len());
        out.set_len(units);
    }
    out
}
