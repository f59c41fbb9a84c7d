//! Checked collectives (`RDCOLL_CHECK_COLLECTIVES`, on by default in debug builds): before a
//! collective moves anything, every rank publishes what it was asked to do - which collective,
//! its root, its length, its counts, its reduction - into every other rank's exchange slot
//! (one RDMA write per peer), and every rank compares all of them. Ranks that disagree get
//! `Mismatch` on every rank, with the same message everywhere naming the first rank that
//! differs from rank 0 and how; nothing has moved, and the communicator stays usable (every
//! rank took part in the comparison).
//!
//! Without the check a collective trusts its arguments, as MPI's do: some mistakes are still
//! caught by the algorithms' own traffic (a receiver that hears a length other than its own),
//! but ranks that disagree on the root or on the collective never hear from each other.
//!
//! Reductions are compared by what they compute: each rank applies its reduction to fixed
//! operands (nonzero, but for one zero accumulator) and publishes a hash of the bits it got
//! with the element size. Operations or element types that give other bits differ; ones that
//! give the same bits on every operand (the sum of `i32` and of `u32`) cannot give different
//! results and pass.

use std::ops::Range;

use rdcoll_transport::Rank;

use crate::error::{CollError, Result};
use crate::reduce::exchange::Kind;
use crate::reduce::op::Reducer;
use crate::{area, fnv1a, fnv1a_from, Collectives};

/// Which collective a rank called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CallKind {
    Barrier = 1,
    Bcast,
    BcastAnySize,
    Allreduce,
    Reduce,
    Gather,
    Gatherv,
    Scatter,
    Scatterv,
    Allgatherv,
    Alltoall,
    Alltoallv,
    ReduceScatterBlock,
    ReduceScatter,
    Scan,
    Exscan,
}

impl CallKind {
    const ALL: [CallKind; 16] = [
        CallKind::Barrier,
        CallKind::Bcast,
        CallKind::BcastAnySize,
        CallKind::Allreduce,
        CallKind::Reduce,
        CallKind::Gather,
        CallKind::Gatherv,
        CallKind::Scatter,
        CallKind::Scatterv,
        CallKind::Allgatherv,
        CallKind::Alltoall,
        CallKind::Alltoallv,
        CallKind::ReduceScatterBlock,
        CallKind::ReduceScatter,
        CallKind::Scan,
        CallKind::Exscan,
    ];

    fn name(self) -> &'static str {
        match self {
            CallKind::Barrier => "barrier",
            CallKind::Bcast => "bcast",
            CallKind::BcastAnySize => "bcast_any_size",
            CallKind::Allreduce => "allreduce",
            CallKind::Reduce => "reduce",
            CallKind::Gather => "gather",
            CallKind::Gatherv => "gatherv",
            CallKind::Scatter => "scatter",
            CallKind::Scatterv => "scatterv",
            CallKind::Allgatherv => "allgather(v)",
            CallKind::Alltoall => "alltoall",
            CallKind::Alltoallv => "alltoallv",
            CallKind::ReduceScatterBlock => "reduce_scatter_block",
            CallKind::ReduceScatter => "reduce_scatter",
            CallKind::Scan => "scan",
            CallKind::Exscan => "exscan",
        }
    }

    fn from_u8(b: u8) -> Option<CallKind> {
        CallKind::ALL.into_iter().find(|k| *k as u8 == b)
    }

    /// Collectives where the root's counts must be the lengths the ranks pass.
    fn root_counts(self) -> bool {
        matches!(self, CallKind::Gatherv | CallKind::Scatterv)
    }
}

/// What one rank was asked to do: the arguments every rank must pass alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Call {
    kind: CallKind,
    /// The root, for rooted collectives.
    root: Option<Rank>,
    /// The length every rank passes alike (for `gatherv` / `scatterv`, this rank's block).
    bytes: Option<u64>,
    /// A hash of the block lengths (every rank's for `allgatherv` and `reduce_scatter`, the
    /// root's alone for `gatherv` and `scatterv`).
    counts: Option<u64>,
    /// The reduction's fingerprint ([`fingerprint`]).
    reduction: Option<u64>,
    /// The rank refused its own arguments (it returns its own error): the others get
    /// `Mismatch` instead of waiting for it.
    refused: bool,
}

/// Bytes of a published call.
pub(crate) const RECORD: usize = 32;
const NONE: u64 = u64::MAX;

impl Call {
    pub(crate) fn new(kind: CallKind) -> Call {
        Call {
            kind,
            root: None,
            bytes: None,
            counts: None,
            reduction: None,
            refused: false,
        }
    }

    /// The call of a rank that refused its own arguments.
    fn refusal() -> Call {
        Call {
            refused: true,
            ..Call::new(CallKind::Barrier)
        }
    }

    pub(crate) fn root(mut self, root: Rank) -> Call {
        self.root = Some(root);
        self
    }

    pub(crate) fn bytes(mut self, len: usize) -> Call {
        self.bytes = Some(len as u64);
        self
    }

    /// Block lengths of `parts` (compared, not the offsets: blocks may lie anywhere).
    pub(crate) fn counts(mut self, parts: &[Range<usize>]) -> Call {
        let lens: Vec<u8> = parts
            .iter()
            .flat_map(|p| (p.len() as u64).to_le_bytes())
            .collect();
        self.counts = Some(fnv1a(&lens));
        self
    }

    pub(crate) fn reduction(mut self, elem: usize, reduce: &Reducer<'_>) -> Call {
        self.reduction = Some(fingerprint(elem, reduce));
        self
    }

    fn encode(&self) -> [u8; RECORD] {
        let mut r = [0u8; RECORD];
        r[0] = self.kind as u8;
        r[1] = u8::from(self.refused);
        r[4..8].copy_from_slice(&self.root.unwrap_or(u32::MAX).to_le_bytes());
        for (i, v) in [self.bytes, self.counts, self.reduction].iter().enumerate() {
            r[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.unwrap_or(NONE).to_le_bytes());
        }
        r
    }

    fn decode(r: &[u8]) -> Option<Call> {
        let word = |i: usize| {
            let v = u64::from_le_bytes(r.get(8 + 8 * i..16 + 8 * i)?.try_into().ok()?);
            Some((v != NONE).then_some(v))
        };
        let root = u32::from_le_bytes(r.get(4..8)?.try_into().ok()?);
        Some(Call {
            kind: CallKind::from_u8(*r.first()?)?,
            root: (root != u32::MAX).then_some(root),
            bytes: word(0)?,
            counts: word(1)?,
            reduction: word(2)?,
            refused: r[1] == 1,
        })
    }

    /// The call in words, for a message.
    fn describe(&self) -> String {
        let mut s = self.kind.name().to_string();
        let mut args = Vec::new();
        if let Some(r) = self.root {
            args.push(format!("root {r}"));
        }
        if let Some(b) = self.bytes {
            args.push(format!("{b} bytes"));
        }
        if !args.is_empty() {
            s.push_str(&format!(" ({})", args.join(", ")));
        }
        s
    }

    /// How `other` (rank `r`'s call) differs from this one (rank `r0`'s), if it does.
    fn differs(&self, r0: usize, other: &Call, r: usize) -> Option<String> {
        if other.refused {
            return Some(refused(r));
        }
        let what = if self.kind != other.kind {
            "another collective"
        } else if self.root != other.root {
            "another root"
        } else if self.bytes != other.bytes && !self.kind.root_counts() {
            "another length"
        } else if self.counts != other.counts && !self.kind.root_counts() {
            "other counts"
        } else if self.reduction != other.reduction {
            "another reduction (operation or element type)"
        } else {
            return None;
        };
        Some(format!(
            "the ranks' collective calls differ ({what}): rank {r0} called {}, rank {r} called {}",
            self.describe(),
            other.describe()
        ))
    }
}

/// The verdict when rank `r` refused its own arguments.
fn refused(r: usize) -> String {
    format!("rank {r} refused its own arguments for this collective (its error says why)")
}

/// Fixed operands for reductions' fingerprints: `(accumulator byte, operand byte)`, each
/// repeated over an element. Nonzero operands (a caller's reduction may divide by them); one
/// zero accumulator tells logical and from logical or. As floats they are near 1 (0.75, 12
/// and their negatives for `f32`), so no result is subnormal: a thread that flushes
/// subnormals to zero computes the same bits.
///
/// Elements longer than [`FINGERPRINT_MAX`] are compared by size alone.
const OPERANDS: [(u8, u8); 4] = [(0x3f, 0x41), (0xbf, 0xc1), (0xbf, 0x41), (0x00, 0x41)];

/// Longest element whose reduction is fingerprinted (longer ones: by size).
const FINGERPRINT_MAX: usize = 1 << 16;

/// A hash of the element size and of the bits `reduce` computes on [`OPERANDS`]. A reduction
/// that panics on them contributes a fixed value.
pub(crate) fn fingerprint(elem: usize, reduce: &Reducer<'_>) -> u64 {
    if elem > FINGERPRINT_MAX {
        return fnv1a(&(elem as u64).to_le_bytes());
    }
    // Aligned for any element type (u128 at most); on the stack for elements up to 64 bytes.
    let words = elem.div_ceil(16).max(1);
    let (mut acc_small, mut operand_small) = ([0u128; 4], [0u128; 4]);
    let (mut acc_big, mut operand_big) = (Vec::new(), Vec::new());
    let (acc, operand): (&mut [u128], &mut [u128]) = if words <= 4 {
        (&mut acc_small[..words], &mut operand_small[..words])
    } else {
        acc_big.resize(words, 0);
        operand_big.resize(words, 0);
        (&mut acc_big, &mut operand_big)
    };
    let mut hash = fnv1a(&(elem as u64).to_le_bytes());
    for (a, b) in OPERANDS {
        acc.fill(u128::from_le_bytes([a; 16]));
        operand.fill(u128::from_le_bytes([b; 16]));
        let acc_bytes = &mut bytemuck::cast_slice_mut::<u128, u8>(acc)[..elem];
        let operand_bytes = &bytemuck::cast_slice::<u128, u8>(operand)[..elem];
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            reduce(acc_bytes, operand_bytes)
        }));
        hash = match ran {
            Ok(()) => fnv1a_from(hash, acc_bytes),
            Err(_) => fnv1a_from(hash, b"panicked"),
        };
    }
    hash
}

/// The verdict on every rank's call, taken in rank order as the records arrive: the first
/// rank whose call differs from rank 0's, or, for `gatherv` / `scatterv`, a root whose counts
/// are not the blocks the ranks pass.
#[derive(Default)]
struct Judge {
    first: Option<Call>,
    why: Option<String>,
    /// A rank whose record could not be read.
    garbled: Option<usize>,
    /// Every rank's block length so far (`gatherv` / `scatterv`).
    blocks: Vec<u64>,
    /// The root's counts hash (`gatherv` / `scatterv`).
    root_counts: Option<u64>,
}

impl Judge {
    fn take(&mut self, r: usize, call: Call) {
        let Some(first) = &self.first else {
            if call.refused {
                self.why = Some(refused(r));
            }
            self.first = Some(call);
            self.take_block(r, &call);
            return;
        };
        if self.why.is_none() {
            self.why = first.differs(0, &call, r);
        }
        self.take_block(r, &call);
    }

    fn take_block(&mut self, r: usize, call: &Call) {
        if call.kind.root_counts() {
            self.blocks.push(call.bytes.unwrap_or(NONE));
            if call.root == Some(r as Rank) {
                self.root_counts = call.counts;
            }
        }
    }

    fn take_record(&mut self, r: usize, record: &[u8]) {
        match Call::decode(record) {
            Some(c) => self.take(r, c),
            None => {
                self.garbled.get_or_insert(r);
            }
        }
    }

    fn verdict(self) -> Option<String> {
        if let Some(r) = self.garbled {
            return Some(format!(
                "rank {r} published a collective call this rank cannot read (another version \
                 of rdcoll?)"
            ));
        }
        if self.why.is_some() {
            return self.why;
        }
        let first = self.first?;
        // A root outside the communicator (the same on every rank: else it differed above) is
        // each rank's own `InvalidArgument` once the collective checks its root.
        let root_inside = first.root.is_some_and(|r| (r as usize) < self.blocks.len());
        if first.kind.root_counts() && root_inside {
            let lens: Vec<u8> = self.blocks.iter().flat_map(|b| b.to_le_bytes()).collect();
            if self.root_counts != Some(fnv1a(&lens)) {
                return Some(format!(
                    "the ranks' collective calls differ: rank {}'s counts for {} are not the \
                     blocks the ranks pass ({:?} bytes)",
                    first.root.unwrap_or(0),
                    first.kind.name(),
                    self.blocks
                ));
            }
        }
        None
    }
}

/// The verdict on `calls`, rank by rank (see [`Judge`]).
#[cfg(test)]
fn verdict(calls: &[Call]) -> Option<String> {
    let mut judge = Judge::default();
    calls
        .iter()
        .enumerate()
        .for_each(|(r, c)| judge.take(r, *c));
    judge.verdict()
}

impl Collectives {
    /// With `RDCOLL_CHECK_COLLECTIVES` on, compares this rank's `call` with every other
    /// rank's before the collective runs: `Mismatch` on every rank where they differ (the
    /// communicator stays usable). Off: nothing (one branch).
    #[inline]
    pub(crate) fn agree(&self, call: impl FnOnce() -> Call) -> Result<()> {
        if !self.cfg.check_collectives || self.waiter.size() == 1 {
            return Ok(());
        }
        self.agree_now(call())
    }

    /// With `RDCOLL_CHECK_COLLECTIVES` on, takes part in the comparison of the ranks' calls
    /// for a collective this rank refused on its own (its arguments are invalid here, and it
    /// returns its own error): the others get `Mismatch` naming it instead of waiting for it.
    /// Off: nothing.
    pub fn refuse_call(&self) {
        if self.cfg.check_collectives && self.waiter.size() > 1 {
            let _ = self.agree_now(Call::refusal());
        }
    }

    #[cold]
    #[inline(never)]
    fn agree_now(&self, call: Call) -> Result<()> {
        let mine = call.encode();
        let mut judge = Judge::default();
        if self.exchange_fits(std::iter::once(RECORD)) {
            // One RDMA write per peer.
            self.exchange_blocks(Kind::Agreement, &mine, &|_| RECORD, &mut |r, b| {
                judge.take_record(r, b)
            })?;
        } else {
            // Exchange slots smaller than a record (`RDCOLL_ALLREDUCE_SMALL_MAX`, a shared
            // setting): by messages.
            self.guarded(|_| {
                let all = area::allgather(&self.waiter, self.context, &mine)?;
                all.iter()
                    .enumerate()
                    .for_each(|(r, b)| judge.take_record(r, b));
                Ok(Ok(()))
            })?;
        }
        match judge.verdict() {
            Some(why) => Err(CollError::Mismatch(why)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reduce::op::{op_reducer, Element, Op};

    fn print<T: Element>(op: Op) -> u64 {
        fingerprint(std::mem::size_of::<T>(), &op_reducer::<T>(op))
    }

    #[test]
    fn a_call_survives_its_record() {
        let call = Call::new(CallKind::Gatherv)
            .root(3)
            .bytes(80)
            .counts(&[0..8, 8..24])
            .reduction(8, &op_reducer::<f64>(Op::Max));
        assert_eq!(Call::decode(&call.encode()), Some(call));
        let bare = Call::new(CallKind::Barrier);
        assert_eq!(Call::decode(&bare.encode()), Some(bare));
        assert_eq!(
            Call::decode(&Call::refusal().encode()),
            Some(Call::refusal())
        );
        assert_eq!(Call::decode(&[0u8; RECORD]), None);
        assert_eq!(Call::decode(&call.encode()[..RECORD - 1]), None);
    }

    #[test]
    fn every_operation_on_a_type_has_its_own_fingerprint() {
        fn distinct<T: Element>() {
            let ops: Vec<Op> = Op::ALL
                .into_iter()
                .filter(|o| o.applies_to::<T>())
                .collect();
            for (i, a) in ops.iter().enumerate() {
                for b in &ops[i + 1..] {
                    assert_ne!(
                        print::<T>(*a),
                        print::<T>(*b),
                        "{a:?} and {b:?} on {}",
                        std::any::type_name::<T>()
                    );
                }
            }
        }
        distinct::<i8>();
        distinct::<u16>();
        distinct::<i32>();
        distinct::<u64>();
        distinct::<f32>();
        distinct::<f64>();
        distinct::<crate::Complex32>();
        distinct::<crate::Complex64>();
    }

    #[test]
    fn types_that_compute_other_bits_differ() {
        assert_ne!(print::<f32>(Op::Sum), print::<i32>(Op::Sum));
        assert_ne!(print::<f64>(Op::Max), print::<i64>(Op::Max));
        assert_ne!(print::<i32>(Op::Max), print::<u32>(Op::Max));
        assert_ne!(print::<f32>(Op::Max), print::<u32>(Op::Max));
        assert_ne!(print::<f32>(Op::Min), print::<i32>(Op::Min));
        assert_ne!(print::<u32>(Op::Sum), print::<u64>(Op::Sum));
        // Wrapping sums of signed and unsigned integers are the same bits.
        assert_eq!(print::<u32>(Op::Sum), print::<i32>(Op::Sum));
    }

    /// No operation on the fixed operands gives a subnormal float, whose bits would depend on
    /// the thread's flush-to-zero mode.
    #[test]
    fn the_operands_give_no_subnormal_float() {
        for (a, b) in OPERANDS {
            for op in [Op::Sum, Op::Prod, Op::Min, Op::Max] {
                let mut x = [f32::from_le_bytes([a; 4])];
                f32::combine(op, &mut x, &[f32::from_le_bytes([b; 4])]);
                assert!(
                    x[0].is_normal() || x[0] == 0.0,
                    "{op:?} {a:#x} {b:#x}: {}",
                    x[0]
                );
                let mut y = [f64::from_le_bytes([a; 8])];
                f64::combine(op, &mut y, &[f64::from_le_bytes([b; 8])]);
                assert!(
                    y[0].is_normal() || y[0] == 0.0,
                    "{op:?} {a:#x} {b:#x}: {}",
                    y[0]
                );
            }
        }
    }

    #[test]
    fn a_reduction_that_panics_still_has_a_fingerprint() {
        let f = crate::reduce::op::reducer(|a: &mut u32, b: &u32| *a = a.checked_mul(*b).unwrap());
        assert_eq!(fingerprint(4, &f), fingerprint(4, &f));
    }

    #[test]
    fn the_verdict_names_the_first_rank_that_differs_and_how() {
        let bcast = |len| Call::new(CallKind::Bcast).root(0).bytes(len);
        assert_eq!(verdict(&[bcast(80), bcast(80), bcast(80)]), None);
        let why = verdict(&[bcast(80), bcast(80), bcast(160), bcast(8)]).unwrap();
        assert!(
            why.contains("another length") && why.contains("rank 2"),
            "{why}"
        );
        let why = verdict(&[bcast(80), Call::new(CallKind::Bcast).root(1).bytes(80)]).unwrap();
        assert!(why.contains("another root"), "{why}");
        let why = verdict(&[bcast(80), bcast(80), Call::refusal()]).unwrap();
        assert!(why.contains("rank 2 refused"), "{why}");
        let why = verdict(&[Call::refusal(), bcast(80)]).unwrap();
        assert!(why.contains("rank 0 refused"), "{why}");
        let why = verdict(&[bcast(80), Call::new(CallKind::Barrier)]).unwrap();
        assert!(
            why.contains("another collective") && why.contains("barrier"),
            "{why}"
        );
        let sum = Call::new(CallKind::Allreduce)
            .bytes(8)
            .reduction(8, &op_reducer::<f64>(Op::Sum));
        let max = Call::new(CallKind::Allreduce)
            .bytes(8)
            .reduction(8, &op_reducer::<f64>(Op::Max));
        let why = verdict(&[sum, max]).unwrap();
        assert!(why.contains("another reduction"), "{why}");
    }

    #[test]
    fn the_roots_counts_must_be_the_ranks_blocks() {
        let gv = |len: usize, parts: Option<&[Range<usize>]>| {
            let c = Call::new(CallKind::Gatherv).root(1).bytes(len);
            match parts {
                Some(p) => c.counts(p),
                None => c,
            }
        };
        let parts = [0..4, 4..12, 12..13];
        assert_eq!(
            verdict(&[gv(4, None), gv(8, Some(&parts)), gv(1, None)]),
            None
        );
        let why = verdict(&[gv(4, None), gv(8, Some(&parts)), gv(2, None)]).unwrap();
        assert!(why.contains("rank 1's counts"), "{why}");
    }
}
