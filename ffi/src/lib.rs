//! The C API of rdcoll: `librdcoll.so` and `librdcoll.a` with `include/rdcoll.h` (generated
//! from this crate by cbindgen). A thin veneer over the Rust API: every entry point checks its
//! arguments, turns them into a call of the `rdcoll` crate and the result into a return code
//! (`rdc_strerror` gives its text). No Rust panic crosses the boundary: one is caught and
//! returned as `RDC_ERR_INTERNAL`.
//!
//! Threads: every function may be called from any thread (`RDC_THREAD_MULTIPLE` for
//! point-to-point); the collectives of one communicator must not run concurrently from two
//! threads (call them in the same order on every rank, as in MPI).

#![allow(non_camel_case_types)]
// The entry points take C's raw pointers by design: they are called from C, whose contract
// (valid for the counts given) is stated in the header, and they check what can be checked.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod block_jobs;
mod blocks;
mod coll;
mod iblocks;
mod icoll;
mod ops;
mod p2p;
mod request_sets;
mod requests;
mod state;

use std::ffi::{c_char, c_int};

pub use blocks::*;
pub use coll::*;
pub use iblocks::*;
pub use icoll::*;
pub use ops::*;
pub use p2p::*;
pub use request_sets::*;
pub use requests::*;
pub use state::*;

/// Success.
pub const RDC_SUCCESS: c_int = 0;
/// An argument is invalid (see the more specific codes below).
pub const RDC_ERR_ARG: c_int = 1;
/// A NULL pointer where data or a result was needed.
pub const RDC_ERR_NULL: c_int = 2;
/// A negative element count, or one whose bytes do not fit in memory.
pub const RDC_ERR_COUNT: c_int = 3;
/// A rank outside the communicator.
pub const RDC_ERR_RANK: c_int = 4;
/// A negative tag (other than `RDC_ANY_TAG` where a receive accepts it).
pub const RDC_ERR_TAG: c_int = 5;
/// An unknown datatype.
pub const RDC_ERR_DATATYPE: c_int = 6;
/// An unknown reduction operation, or one the datatype does not have.
pub const RDC_ERR_OP: c_int = 7;
/// A NULL, freed or unknown communicator.
pub const RDC_ERR_COMM: c_int = 8;
/// A NULL, finished or unknown request (for example one waited for twice).
pub const RDC_ERR_REQUEST: c_int = 9;
/// `rdc_init` has not been called.
pub const RDC_ERR_NOT_INITIALIZED: c_int = 10;
/// `rdc_finalize` has been called.
pub const RDC_ERR_FINALIZED: c_int = 11;
/// `rdc_init` was called twice.
pub const RDC_ERR_ALREADY_INITIALIZED: c_int = 12;
/// A message was longer than the receive buffer (it was consumed; the status has its length).
pub const RDC_ERR_TRUNCATE: c_int = 13;
/// A rank involved in the operation has failed.
pub const RDC_ERR_PEER_FAILED: c_int = 14;
/// Ranks passed arguments that cannot go together (another count, root, datatype or
/// operation, or another collective): on every rank, before anything moves, with
/// `RDCOLL_CHECK_COLLECTIVES=1` (the default in debug builds); otherwise only where the
/// protocol notices. The communicator stays usable - always with the check on; without it, a
/// disagreement the protocol cannot absorb leaves the ranks out of step, and later
/// collectives return `RDC_ERR_COMM_BROKEN`.
pub const RDC_ERR_MISMATCH: c_int = 15;
/// An earlier collective on the communicator left the ranks out of step (a rank died, or a
/// disagreement the protocol could not absorb); its collectives can no longer be used
/// (point-to-point still can).
pub const RDC_ERR_COMM_BROKEN: c_int = 16;
/// The transport failed (I/O, bootstrap, bad remote key...).
pub const RDC_ERR_TRANSPORT: c_int = 17;
/// Out of a resource (memory, handles); also a blocking receive from a rank that waits in a
/// send this receive does not match, behind its own messages that fill its share of this
/// rank's memory for unexpected messages (`RDCOLL_UNEXPECTED_MAX`): receive those first.
pub const RDC_ERR_RESOURCES: c_int = 18;
/// A bug in rdcoll (a caught panic, say).
pub const RDC_ERR_INTERNAL: c_int = 19;

/// A receive from any rank (in the header as a parenthesised macro: `cbindgen.toml`).
pub const RDC_ANY_SOURCE: c_int = -1;
/// A receive of any tag.
pub const RDC_ANY_TAG: c_int = -1;
/// The rank that is nobody (`MPI_PROC_NULL`): operations with it complete at once.
pub const RDC_PROC_NULL: c_int = -2;
/// As the send buffer of `rdc_allreduce` or `rdc_reduce`: the receive buffer holds this
/// rank's contribution and is replaced by the result.
#[allow(clippy::manual_dangling_ptr)] // the address 1 exactly, as the header's macro says
pub const RDC_IN_PLACE: *const std::ffi::c_void = 1 as *const std::ffi::c_void;

/// Every function is safe to call from several threads at once (collectives of one
/// communicator excepted; see the crate's documentation).
pub const RDC_THREAD_MULTIPLE: c_int = 3;

/// `rdc_multicast`: Robber, with work stealing inside each cluster.
pub const RDC_MULTICAST_ROBBER: c_int = 1;
/// `rdc_multicast`: MOB, each rank's share of the work fixed.
pub const RDC_MULTICAST_MOB: c_int = 2;

/// Element types.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum rdc_datatype {
    /// Bytes (`unsigned char`), moved as they are; reductions treat them as `uint8_t`.
    RDC_BYTE = 0,
    /// `int8_t`.
    RDC_INT8 = 1,
    /// `int16_t`.
    RDC_INT16 = 2,
    /// `int32_t`.
    RDC_INT32 = 3,
    /// `int64_t`.
    RDC_INT64 = 4,
    /// `uint8_t`.
    RDC_UINT8 = 5,
    /// `uint16_t`.
    RDC_UINT16 = 6,
    /// `uint32_t`.
    RDC_UINT32 = 7,
    /// `uint64_t`.
    RDC_UINT64 = 8,
    /// `float`.
    RDC_FLOAT = 9,
    /// `double`.
    RDC_DOUBLE = 10,
    /// `float _Complex` (C99; `std::complex<float>` in C++): sums and products only.
    RDC_C_FLOAT_COMPLEX = 11,
    /// `double _Complex` (C99; `std::complex<double>` in C++): sums and products only.
    RDC_C_DOUBLE_COMPLEX = 12,
    /// Not a datatype: gives the enum the range of an `int` (C++ may then hold any value
    /// in it, and `-fshort-enums` cannot shrink it below the `int` the library reads).
    RDC_DATATYPE_INT_RANGE = 0x7fff_ffff,
}

/// Reduction operations (integers wrap on overflow; logical and bitwise ones are for
/// integer types only; complex types have sums and products only).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum rdc_op {
    /// Sum.
    RDC_SUM = 0,
    /// Product.
    RDC_PROD = 1,
    /// Minimum.
    RDC_MIN = 2,
    /// Maximum.
    RDC_MAX = 3,
    /// Logical and (1 or 0).
    RDC_LAND = 4,
    /// Logical or.
    RDC_LOR = 5,
    /// Logical exclusive or.
    RDC_LXOR = 6,
    /// Bitwise and.
    RDC_BAND = 7,
    /// Bitwise or.
    RDC_BOR = 8,
    /// Bitwise exclusive or.
    RDC_BXOR = 9,
    /// No operation: what `rdc_op_free` leaves in the handle it freed.
    RDC_OP_NULL = -1,
    /// Not an operation: gives the enum the range of an `int`, so that it holds the handles
    /// `rdc_op_create` makes (see `RDC_DATATYPE_INT_RANGE`).
    RDC_OP_INT_RANGE = 0x7fff_ffff,
}

/// A datatype argument as the C API takes it: C sees `rdc_datatype`, so a compiler warns
/// where an operation or another enum is passed instead (gcc with `-Wextra`, clang by
/// default); any `int` is accepted here and checked (`RDC_ERR_DATATYPE`).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatatypeArg(pub c_int);

/// An operation argument as the C API takes it: C sees `rdc_op` (see [`DatatypeArg`]); the
/// handles `rdc_op_create` returns are `int`s and convert to it silently.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpArg(pub c_int);

/// What a receive, probe or completed request tells.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct rdc_status {
    /// The sender.
    pub source: c_int,
    /// The message's tag.
    pub tag: c_int,
    /// `RDC_SUCCESS`, or the operation's error (`RDC_ERR_TRUNCATE`...).
    pub error: c_int,
    /// The message's length in bytes (for a truncated one, its true length).
    pub count: usize,
    /// Nonzero if the request was cancelled before it matched.
    pub cancelled: c_int,
}

/// The text of return code `code` (a static string; never NULL).
#[no_mangle]
pub extern "C" fn rdc_strerror(code: c_int) -> *const c_char {
    let s: &'static [u8] = match code {
        RDC_SUCCESS => b"success\0",
        RDC_ERR_ARG => b"invalid argument\0",
        RDC_ERR_NULL => b"NULL pointer where data or a result was needed\0",
        RDC_ERR_COUNT => b"invalid element count\0",
        RDC_ERR_RANK => b"rank outside the communicator\0",
        RDC_ERR_TAG => b"invalid tag\0",
        RDC_ERR_DATATYPE => b"unknown datatype\0",
        RDC_ERR_OP => b"unknown reduction operation, or one the datatype does not have\0",
        RDC_ERR_COMM => b"NULL, freed or unknown communicator\0",
        RDC_ERR_REQUEST => b"NULL, finished or unknown request\0",
        RDC_ERR_NOT_INITIALIZED => b"rdc_init has not been called\0",
        RDC_ERR_FINALIZED => b"rdc_finalize has been called\0",
        RDC_ERR_ALREADY_INITIALIZED => b"rdc_init was called twice\0",
        RDC_ERR_TRUNCATE => b"message longer than the receive buffer\0",
        RDC_ERR_PEER_FAILED => b"a rank involved in the operation has failed\0",
        RDC_ERR_MISMATCH => b"ranks passed arguments that cannot go together\0",
        RDC_ERR_COMM_BROKEN => b"an earlier collective on this communicator failed\0",
        RDC_ERR_TRANSPORT => b"transport failure\0",
        RDC_ERR_RESOURCES => b"out of resources\0",
        RDC_ERR_INTERNAL => b"internal error in rdcoll\0",
        _ => b"unknown return code\0",
    };
    s.as_ptr() as *const c_char
}

/// Ends the whole job with exit status `code` (1 if 0), through the launcher that started it
/// (see `rdcoll::abort`). `comm` is accepted for MPI's shape (any handle, or NULL: the whole job
/// ends either way). Does not return.
#[no_mangle]
pub extern "C" fn rdc_abort(comm: *const rdc_comm, code: c_int) -> c_int {
    let _ = comm;
    rdcoll::abort(code)
}

/// Seconds on a clock that only moves forward (wall-clock time, for timing).
#[no_mangle]
pub extern "C" fn rdc_wtime() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

/// The return code of a Rust error.
pub(crate) fn code_of(e: &rdcoll::Error) -> c_int {
    use rdcoll::{Error, OffloadError, TransportError};
    match e {
        Error::Truncated { .. } => RDC_ERR_TRUNCATE,
        Error::InvalidArgument(_) => RDC_ERR_ARG,
        Error::Mismatch(_) => RDC_ERR_MISMATCH,
        Error::CommunicatorBroken(_) => RDC_ERR_COMM_BROKEN,
        Error::Transport(TransportError::PeerFailed(_)) => RDC_ERR_PEER_FAILED,
        Error::Transport(TransportError::InvalidRank { .. }) => RDC_ERR_RANK,
        Error::Transport(TransportError::OutOfResources { .. }) => RDC_ERR_RESOURCES,
        Error::Transport(_) => RDC_ERR_TRANSPORT,
        Error::Offload(OffloadError::NoSpace { .. }) => RDC_ERR_RESOURCES,
        Error::Offload(OffloadError::SenderBlocked { .. }) => RDC_ERR_RESOURCES,
        Error::Offload(_) => RDC_ERR_INTERNAL,
        Error::RankPanicked { .. } => RDC_ERR_INTERNAL,
    }
}

/// Runs `f`, turning a panic into `RDC_ERR_INTERNAL` so that none crosses into C.
pub(crate) fn guard(f: impl FnOnce() -> c_int) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(_) => RDC_ERR_INTERNAL,
    }
}
