//! Registrations for one-sided access, on both sides.
//!
//! An owner registers each region with the provider ([`LocalMr`]) and records which peers
//! looked its key up; a peer caches what it learnt ([`RemoteMr`]) and checks every one-sided
//! operation against it before posting, so a bad key or range never reaches the provider (on
//! `tcp;ofi_rxm` a refused key tears the connection down). When a region goes, its owner tells
//! every peer that looked it up (`KeyGone`) and closes the registration (and lets the memory
//! go) only once each has answered that nothing of its own is still in flight through the key.

use std::ffi::c_void;

use rdcoll_ofi_sys as fi;

use crate::types::Rank;

/// One of this rank's regions as the provider knows it.
pub(crate) struct LocalMr {
    pub(crate) mr: *mut fi::fid_mr,
    pub(crate) desc: *mut c_void,
    /// The address peers name in one-sided operations: the region's base where the provider
    /// asks for virtual addresses (`FI_MR_VIRT_ADDR`), else 0 (offsets).
    pub(crate) remote_base: u64,
    pub(crate) len: usize,
    /// Memory the caller registered (a rendezvous buffer, typically used for one message):
    /// peers forget its key as soon as they have nothing in flight through it.
    pub(crate) transient: bool,
    /// The key peers present (ours, or the provider's with `FI_MR_PROV_KEY`).
    pub(crate) remote_key: u64,
    /// Peers that looked the key up and have not been told it is gone.
    pub(crate) holders: Vec<Rank>,
    /// Peers told it is gone that have not answered yet.
    pub(crate) awaiting: Vec<Rank>,
    /// The region was deregistered: no new lookups succeed.
    pub(crate) dying: bool,
}

/// A peer's region as learnt from its owner.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteMr {
    pub(crate) len: u64,
    pub(crate) remote_base: u64,
    pub(crate) remote_key: u64,
    /// One-sided operations posted through this key and not yet completed.
    pub(crate) in_flight: u32,
    /// The owner retired the key; answered once `in_flight` reaches zero.
    pub(crate) gone: bool,
    /// Forgotten (and the owner told) once `in_flight` reaches zero.
    pub(crate) transient: bool,
}
