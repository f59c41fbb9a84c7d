//! Whom a receive accepts ([`Source`], [`TagSel`]) and what it tells ([`Status`]): its fields,
//! a length in elements, and the status of an operation with [`PROC_NULL`].

use rdcoll_transport::Rank;

use crate::error::{invalid, Result};

/// Which sender a receive or probe accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// Any rank (`MPI_ANY_SOURCE`).
    Any,
    /// This rank only.
    Rank(Rank),
}

impl From<Rank> for Source {
    fn from(r: Rank) -> Source {
        Source::Rank(r)
    }
}

/// Which tag a receive or probe accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TagSel {
    /// Any tag (`MPI_ANY_TAG`).
    Any,
    /// This tag only.
    Value(u32),
}

impl From<u32> for TagSel {
    fn from(t: u32) -> TagSel {
        TagSel::Value(t)
    }
}

/// What a completed receive (or a probe) tells about its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The sender.
    pub source: Rank,
    /// The message's tag.
    pub tag: u32,
    /// The message's length in bytes.
    pub len: usize,
    /// The request was cancelled before it matched (nothing was received).
    pub cancelled: bool,
}

/// The rank that is nobody (`MPI_PROC_NULL`): a send to it or a receive or probe from it
/// completes at once, moving nothing; the receive's status names it as the source, with tag
/// [`NULL_TAG`] and length 0.
pub const PROC_NULL: Rank = Rank::MAX;
/// The tag of a status from [`PROC_NULL`] (`MPI_ANY_TAG`'s place; -1 as a C int).
pub const NULL_TAG: u32 = u32::MAX;

impl Status {
    /// What a receive or probe from [`PROC_NULL`] reports.
    pub fn from_proc_null() -> Status {
        Status {
            source: PROC_NULL,
            tag: NULL_TAG,
            len: 0,
            cancelled: false,
        }
    }

    /// The message's length in elements of `T` (as `MPI_Get_count`); an error if it is not a
    /// whole number of them (or `T` has no size).
    pub fn count<T>(&self) -> Result<usize> {
        let size = std::mem::size_of::<T>();
        if size == 0 || !self.len.is_multiple_of(size) {
            return Err(invalid(format!(
                "a {}-byte message is not a whole number of {}-byte elements",
                self.len, size
            )));
        }
        Ok(self.len / size)
    }
}
