//! Communicators: duplicates, splits by colour and key, and subsets of a communicator's ranks;
//! and, for those over part of the job, the translation of their ranks to the job's (the
//! fabric's) and back on the message path.
//!
//! Context ids: a duplicate of a communicator over the whole job takes the next id of a
//! counter every rank advances alike (no message); a split, and a duplicate of a split
//! communicator, agree on an id free on every rank of the parent (an allreduce of free-id
//! masks), since ranks outside the parent may have used ids of their own meanwhile.

use std::sync::Arc;

use rdcoll_offload::p2p::{Context, Engine, Members, Source, Status};
use rdcoll_offload::OffloadError;

use crate::{Comm, Error, Op, Rank, Result};

/// The colour of a rank that joins no communicator of a split.
const NO_COLOR: u64 = u64::MAX;

impl Comm {
    /// The job's rank of this communicator's rank `r` ([`PROC_NULL`](crate::PROC_NULL) stays
    /// itself); a rank outside the communicator is an error.
    #[inline]
    pub(crate) fn to_fabric(&self, r: Rank) -> Result<Rank> {
        match &self.members {
            None => Ok(r),
            Some(m) => Ok(m.fabric_rank(r)?),
        }
    }

    /// [`to_fabric`](Comm::to_fabric) for a receive's or probe's source.
    #[inline]
    pub(crate) fn source_to_fabric(&self, s: Source) -> Result<Source> {
        match (s, &self.members) {
            (Source::Rank(r), Some(m)) => Ok(Source::Rank(m.fabric_rank(r)?)),
            _ => Ok(s),
        }
    }

    /// A status from the engine, its source in this communicator's ranks.
    #[inline]
    pub(crate) fn status_from_fabric(&self, st: Status) -> Status {
        status_in(self.members.as_deref(), st)
    }

    /// An error from the engine, a truncated message's sender in this communicator's ranks.
    pub(crate) fn error_from_fabric(&self, e: OffloadError) -> Error {
        error_in(self.members.as_deref(), e)
    }

    /// The members of this communicator (the whole job if it has none of its own).
    pub(crate) fn members(&self) -> Members {
        match &self.members {
            Some(m) => (**m).clone(),
            None => Members::whole(self.fabric.rank(), self.fabric.size()),
        }
    }

    /// A communicator over the same ranks with its own context: its messages never match
    /// those of `self`. Collective: every rank calls `dup` in the same order. A dropped
    /// communicator's id is reused once every rank has dropped it (when fresh ids run out,
    /// `dup` runs an agreement, an allreduce over `self`, to learn which; a duplicate of a
    /// split communicator always agrees on its id that way).
    pub fn dup(&self) -> Result<Comm> {
        let engine = self.engine()?.clone();
        let context = match &self.members {
            None => {
                if engine.contexts_exhausted() {
                    let mine = engine.free_contexts();
                    let mut all = vec![0u64; mine.len()];
                    self.allreduce(&mine, &mut all, Op::BitAnd)?;
                    engine.adopt_free_contexts(&all);
                }
                engine.new_context()?
            }
            Some(_) => self.agree_on_split_context(&engine, true)?,
        };
        Ok(self.derived(engine, context, self.members.clone()))
    }

    /// Splits this communicator: the ranks that pass the same `color` form a new one, ranked
    /// by `key` (ties by their rank here); a rank that passes `None` joins none and gets
    /// `None`. Collective over `self`. The new communicators have contexts of their own
    /// (their messages never match another communicator's) and their own collectives; they
    /// can be split, duplicated and dropped in any order.
    ///
    /// ```
    /// // Even and odd ranks each sum their ranks.
    /// let sums = rdcoll::local::run(5, |world| {
    ///     let half = world.split(Some(world.rank() % 2), 0).unwrap().unwrap();
    ///     let mut sum = [0u32];
    ///     half.allreduce(&[world.rank()], &mut sum, rdcoll::Op::Sum).unwrap();
    ///     (half.size(), sum[0])
    /// })
    /// .unwrap();
    /// assert_eq!(sums, [(3, 6), (2, 4), (3, 6), (2, 4), (3, 6)]);
    /// ```
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Comm>> {
        self.split_checked(color, key, 0)
    }

    /// The communicator of `ranks` (this communicator's ranks, in the new one's order); ranks
    /// not listed get `None`. Collective over `self`: every rank passes the same list (else
    /// every rank gets [`Error::Mismatch`]).
    pub fn subset(&self, ranks: &[Rank]) -> Result<Option<Comm>> {
        let n = self.size();
        let mut seen = vec![false; n as usize];
        for &r in ranks {
            match seen.get_mut(r as usize) {
                Some(s) if !*s => *s = true,
                Some(_) => return Err(Error::InvalidArgument(format!("rank {r} is listed twice"))),
                None => {
                    return Err(Error::InvalidArgument(format!(
                        "rank {r} is not in this communicator of {n} ranks"
                    )))
                }
            }
        }
        let check = ranks.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &r| {
            (h ^ (r as u64 + 1)).wrapping_mul(0x0100_0000_01b3)
        });
        let position = ranks.iter().position(|&r| r == self.rank());
        let key = position.unwrap_or(0) as i32;
        self.split_checked(position.map(|_| 0), key, check | 1)
    }

    /// [`split`](Comm::split), with `check` (0, or a hash of a subset's list) compared across
    /// the ranks.
    fn split_checked(&self, color: Option<u32>, key: i32, check: u64) -> Result<Option<Comm>> {
        let n = self.size();
        let mine = [color.map_or(NO_COLOR, u64::from), key as i64 as u64, check];
        let mut all = vec![0u64; 3 * n as usize];
        self.allgather(&mine, &mut all)?;
        let engine = self.engine()?.clone();
        // Every rank takes part in the agreement, also one that will refuse the split, so that
        // the others do not wait for it.
        let context = self.agree_on_split_context(&engine, color.is_some());
        if let Some(r) = all.chunks(3).position(|c| c[2] != check) {
            if let Ok(c) = context {
                engine.release_context(c);
            }
            return Err(Error::Mismatch(format!(
                "rank {r} passed another list of ranks than rank {} to subset",
                self.rank()
            )));
        }
        let context = context?;
        let Some(color) = color else {
            return Ok(None);
        };
        let mut chosen: Vec<(i64, usize)> = all
            .chunks(3)
            .enumerate()
            .filter(|(_, c)| c[0] == u64::from(color))
            .map(|(r, c)| (c[1] as i64, r))
            .collect();
        chosen.sort_unstable();
        let ranks = chosen
            .iter()
            .map(|&(_, r)| self.to_fabric(r as Rank))
            .collect::<Result<Vec<_>>>()?;
        let members = Members::new(ranks, self.fabric.rank(), self.fabric.size())?;
        let members = (!members.is_whole()).then(|| Arc::new(members));
        Ok(Some(self.derived(engine, context, members)))
    }

    /// An id of the split pool free on every rank of this communicator (collective), taken on
    /// this rank if it `join`s the new communicator.
    fn agree_on_split_context(&self, engine: &Engine, join: bool) -> Result<Context> {
        let mine = engine.free_group_contexts();
        let mut all = vec![0u64; mine.len()];
        self.allreduce(&mine, &mut all, Op::BitAnd)?;
        Ok(engine.take_group_context(&all, join)?)
    }

    /// A communicator of this one's job with `context` over `members`.
    fn derived(
        &self,
        engine: Arc<Engine>,
        context: Context,
        members: Option<Arc<Members>>,
    ) -> Comm {
        Comm {
            fabric: self.fabric.clone(),
            engine: std::sync::OnceLock::from(engine),
            context,
            collectives: std::sync::OnceLock::new(),
            worker: std::sync::OnceLock::new(),
            starting: parking_lot::ReentrantMutex::new(()),
            members,
        }
    }
}

/// A status from the engine, its source in the ranks of a communicator over `members`.
#[inline]
pub(crate) fn status_in(members: Option<&Members>, mut st: Status) -> Status {
    if let Some(m) = members {
        st.source = m.comm_rank(st.source);
    }
    st
}

/// An error from the engine, a truncated message's sender in the ranks of a communicator over
/// `members` (a failed peer stays named by its rank in the job).
pub(crate) fn error_in(members: Option<&Members>, e: OffloadError) -> Error {
    match (e, members) {
        (
            OffloadError::Truncated {
                sender,
                tag,
                len,
                capacity,
            },
            Some(m),
        ) => Error::Truncated {
            sender: m.comm_rank(sender),
            tag,
            len,
            capacity,
        },
        (e, _) => e.into(),
    }
}
