//! What a status says beyond its fields: a length in elements, and the status of an
//! operation with [`PROC_NULL`].

use rdcoll_transport::Rank;

use super::Status;
use crate::error::{invalid, Result};

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
