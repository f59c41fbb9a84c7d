//! Registered memory: the [`Region`] handle, its backing storage, and the per-rank table that
//! turns a [`RegionKey`] from a peer into a region (checked: unknown, stale or out-of-range keys
//! are errors, never an access outside the region).
//!
//! Region memory is shared with peers the way RDMA memory is: peers' puts may land at any time.
//! It is therefore only touched through raw copies and atomics, never through Rust references to
//! its bytes.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use crate::error::{Result, TransportError};
use crate::types::{range_fits, Rank, RegionKey, RemoteRegion};

mod table;
pub(crate) use table::RegionTable;

/// Alignment of regions the fabric allocates (a cache line).
pub const REGION_ALIGN: usize = 64;

/// Where a region's bytes live, and so how they are released.
pub(crate) enum Backing {
    /// Allocated by the fabric on the process heap.
    Owned(Layout),
    /// The caller's memory, registered with `register_memory`; never freed here.
    External,
    /// A block of a shared-memory heap or pages mapped for the region; handed back (by the
    /// closure) on drop.
    Shared(Box<dyn FnOnce() + Send + Sync>),
}

/// Something that published a region to peers and must forget it when the region goes.
pub(crate) trait Publisher: Send + Sync {
    /// Peers can no longer reach `key`.
    fn unpublish(&self, key: RegionKey);
}

pub(crate) struct RegionInner {
    rank: Rank,
    key: RegionKey,
    ptr: NonNull<u8>,
    len: usize,
    /// `false` once deregistered; held for reading during every copy into or out of caller
    /// memory (`external`), so that `deregister` can wait for them.
    alive: RwLock<bool>,
    /// `alive`, readable without the lock: copies into memory the fabric owns need only know
    /// whether the region is still registered, as that memory lives as long as the handle.
    registered: AtomicBool,
    unpublished: AtomicBool,
    /// Handles held by the owner (not peers' transient lookups): when the last goes, peers
    /// can no longer name the region, even while a peer's copy still holds its memory.
    owners: std::sync::atomic::AtomicUsize,
    backing: Mutex<Option<Backing>>,
    /// The memory is the caller's (`register_memory`), not the fabric's: no atomics on it.
    external: bool,
    publisher: Weak<dyn Publisher>,
}

// SAFETY: the pointer is to memory owned by (or, for external regions, promised to) the region
// for its lifetime; every access is a raw copy or an atomic, as for memory a NIC writes into.
unsafe impl Send for RegionInner {}
// SAFETY: as above; concurrent access is the RDMA contract, made explicit at each access.
unsafe impl Sync for RegionInner {}

impl RegionInner {
    fn unpublish(&self) {
        if !self.unpublished.swap(true, Ordering::AcqRel) {
            if let Some(p) = self.publisher.upgrade() {
                p.unpublish(self.key);
            }
        }
    }
}

impl Drop for RegionInner {
    fn drop(&mut self) {
        self.unpublish();
        match self.backing.get_mut().take() {
            Some(Backing::Owned(layout)) => {
                // SAFETY: allocated in `alloc_owned` with exactly this layout; the last handle is
                // gone, so nothing else refers to the memory.
                unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) }
            }
            Some(Backing::Shared(release)) => release(),
            Some(Backing::External) | None => {}
        }
    }
}

/// Regions this large are mapped pages of their own in [`Region::alloc_lazy`].
const MAPPED_FROM: usize = 256 << 10;

/// A handle to registered memory that peers can name by its [`RegionKey`]. Cloning is cheap;
/// peers can no longer reach the region once the owner's last clone is dropped, and memory the
/// fabric allocated is freed once no copy uses it any more.
pub struct Region {
    pub(crate) inner: Arc<RegionInner>,
    /// Whether this handle is the owner's (counted in `owners`) or a peer's transient lookup.
    owner: bool,
}

impl Clone for Region {
    fn clone(&self) -> Region {
        if self.owner {
            self.inner.owners.fetch_add(1, Ordering::Relaxed);
        }
        Region {
            inner: self.inner.clone(),
            owner: self.owner,
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self.owner && self.inner.owners.fetch_sub(1, Ordering::AcqRel) == 1 {
            if self.inner.external && self.inner.registered.load(Ordering::Acquire) {
                // The caller may free its memory once this returns (`register_memory`): wait,
                // as `deregister` does, for copies still inside it, such as this rank's own
                // progress serving a peer on another thread through a transient lookup.
                self.deregister();
            } else {
                // Overlapping peer lookups must not keep a dropped region reachable.
                self.inner.unpublish();
            }
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("rank", &self.inner.rank)
            .field("key", &self.inner.key)
            .field("len", &self.inner.len)
            .finish()
    }
}

impl Region {
    /// Allocates zeroed, cache-line aligned process memory and wraps it.
    pub(crate) fn alloc_owned(
        rank: Rank,
        key: RegionKey,
        len: usize,
        publisher: Weak<dyn Publisher>,
    ) -> Result<Region> {
        let layout = Layout::from_size_align(len.max(1), REGION_ALIGN)
            .map_err(|_| TransportError::InvalidArgument(format!("region of {len} bytes")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(TransportError::OutOfResources { what: "memory" })?;
        Ok(Self::from_raw(
            rank,
            key,
            ptr,
            len,
            Backing::Owned(layout),
            publisher,
        ))
    }

    /// A region over caller memory (`Fabric::register_memory`), which is never freed here;
    /// `InvalidArgument` for a null pointer.
    pub(crate) fn external(
        rank: Rank,
        key: RegionKey,
        ptr: *mut u8,
        len: usize,
        publisher: Weak<dyn Publisher>,
    ) -> Result<Region> {
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| TransportError::InvalidArgument("null pointer registered".into()))?;
        Ok(Self::from_raw(
            rank,
            key,
            ptr,
            len,
            Backing::External,
            publisher,
        ))
    }

    /// Like [`alloc_owned`](Region::alloc_owned), but a region of [`MAPPED_FROM`] bytes or
    /// more is fresh anonymous pages: zero without being written, so it costs memory only
    /// where it is used (the heap's `calloc` may clear reused memory, which touches every
    /// page). For the simulated fabric, whose thousand ranks in one process each register a
    /// slot per peer: 4.6 GB at 256 ranks from the heap, 0.44 GB mapped. Not used by the real
    /// backends: they renew 1 MiB bounce buffers under floods of unexpected messages, where a
    /// mapping, its page faults and its unmapping per renewal have not been measured.
    pub(crate) fn alloc_lazy(
        rank: Rank,
        key: RegionKey,
        len: usize,
        publisher: Weak<dyn Publisher>,
    ) -> Result<Region> {
        if len >= MAPPED_FROM {
            Self::alloc_mapped(rank, key, len, publisher)
        } else {
            Self::alloc_owned(rank, key, len, publisher)
        }
    }

    /// A region of fresh anonymous pages (see [`alloc_lazy`](Region::alloc_lazy)).
    fn alloc_mapped(
        rank: Rank,
        key: RegionKey,
        len: usize,
        publisher: Weak<dyn Publisher>,
    ) -> Result<Region> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no
        // existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(TransportError::OutOfResources { what: "memory" });
        }
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or(TransportError::OutOfResources { what: "memory" })?;
        let addr = p as usize;
        let release = move || {
            // SAFETY: the mapping made above, of `len` bytes; the region's last handle is gone.
            unsafe { libc::munmap(addr as *mut libc::c_void, len) };
        };
        Ok(Self::from_raw(
            rank,
            key,
            ptr,
            len,
            Backing::Shared(Box::new(release)),
            publisher,
        ))
    }

    pub(crate) fn from_raw(
        rank: Rank,
        key: RegionKey,
        ptr: NonNull<u8>,
        len: usize,
        backing: Backing,
        publisher: Weak<dyn Publisher>,
    ) -> Region {
        Region {
            owner: true,
            inner: Arc::new(RegionInner {
                rank,
                key,
                ptr,
                len,
                alive: RwLock::new(true),
                registered: AtomicBool::new(true),
                unpublished: AtomicBool::new(false),
                owners: std::sync::atomic::AtomicUsize::new(1),
                external: matches!(backing, Backing::External),
                backing: Mutex::new(Some(backing)),
                publisher,
            }),
        }
    }

    /// Wraps caller memory as a region that only this rank uses: its key names nothing to
    /// peers (generation 0 is never handed out), so no peer can read or write it. For buffers
    /// that this rank fills itself, such as receive entries of the offload engine.
    ///
    /// # Safety
    /// As for [`crate::Fabric::register_memory`]: `ptr..ptr+len` must stay valid until the last
    /// clone is dropped or [`Region::deregister`] has returned, and must not be accessed through
    /// Rust references meanwhile.
    pub unsafe fn private(rank: Rank, ptr: *mut u8, len: usize) -> Region {
        let ptr = NonNull::new(ptr).unwrap_or(NonNull::dangling());
        let nobody: Weak<dyn Publisher> = Weak::<RegionTable>::new();
        Region::from_raw(
            rank,
            RegionKey::new(0, 0),
            ptr,
            len,
            Backing::External,
            nobody,
        )
    }

    /// The key peers use to name this region.
    pub fn key(&self) -> RegionKey {
        self.inner.key
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }
    /// Whether the region is zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }
    /// The rank that owns it.
    pub fn rank(&self) -> Rank {
        self.inner.rank
    }
    /// The descriptor to hand to peers.
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion {
            rank: self.inner.rank,
            key: self.inner.key,
            len: self.inner.len,
        }
    }
    /// Whether the region is still registered.
    pub fn is_registered(&self) -> bool {
        *self.inner.alive.read_recursive()
    }

    /// Stops peers from reaching this region and waits until no peer-driven copy is touching
    /// it. After this returns, memory registered with `register_memory` may be reused freely.
    pub fn deregister(&self) {
        let mut alive = self.inner.alive.write();
        *alive = false;
        self.inner.registered.store(false, Ordering::Release);
        drop(alive);
        self.inner.unpublish();
    }

    /// Copies `out.len()` bytes at `offset` out of the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.with_range(offset, out.len(), |src| {
            // SAFETY: `src` is valid for `out.len()` bytes (checked range, region alive while
            // the guard is held); `out` is a distinct exclusive buffer.
            unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) }
        })
    }

    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.with_range(offset, data.len(), |dst| {
            // SAFETY: `dst` is valid for `data.len()` bytes (checked range, region alive while
            // the guard is held); `data` cannot overlap region memory handed out as a slice.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) }
        })
    }

    /// Copies `data` into the region at `offset` with non-temporal stores where the CPU has
    /// them (see `stream::copy_streaming`): for bytes that other processes will read and this
    /// one will not, such as a broadcast's staging. Any store after the call becomes visible
    /// after the data.
    pub fn write_streaming(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.with_range(offset, data.len(), |dst| {
            // SAFETY: `dst` is valid for `data.len()` bytes (checked range, region alive while
            // the guard is held); `data` cannot overlap region memory handed out as a slice.
            unsafe { crate::stream::copy_streaming(dst, data.as_ptr(), data.len()) }
        })
    }

    /// Copies `len` bytes of `src` at `src_offset` into this region at `offset` (both of this
    /// process; one copy, the ranges checked, both regions held alive meanwhile).
    pub fn copy_from(
        &self,
        offset: usize,
        src: &Region,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        copy_between(src, src_offset, self, offset, len)
    }

    /// Lends `len` bytes at `offset` to `f` as a slice (no copy), the region held alive
    /// meanwhile.
    ///
    /// # Safety
    /// Nothing may write that range while `f` runs: no peer (the caller's protocol must
    /// ensure none does) and no other thread of this process.
    pub unsafe fn with_bytes<R>(
        &self,
        offset: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        self.with_range(offset, len, |p| {
            // SAFETY: `p` is valid for `len` bytes (checked range, region alive while the
            // guard is held); the caller guarantees nobody writes them meanwhile.
            f(unsafe { std::slice::from_raw_parts(p, len) })
        })
    }

    /// Lends `len` bytes at `offset` to `f` as a mutable slice (no copy).
    ///
    /// # Safety
    /// Nothing else may read or write that range while `f` runs: no peer (the caller's
    /// protocol must ensure none does), no operation in flight, no other thread.
    pub unsafe fn with_bytes_mut<R>(
        &self,
        offset: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        self.with_range(offset, len, |p| {
            // SAFETY: `p` is valid for `len` bytes (checked range, region alive while the
            // guard is held); the caller guarantees exclusive access meanwhile.
            f(unsafe { std::slice::from_raw_parts_mut(p, len) })
        })
    }

    /// Fills `len` bytes at `offset` with `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        self.with_range(offset, len, |dst| {
            // SAFETY: `dst` is valid for `len` bytes, see `with_range`.
            unsafe { std::ptr::write_bytes(dst, byte, len) }
        })
    }

    /// The byte at `offset` as an atomic, for flags and counter bytes that peers write with
    /// `put`. Not available on memory registered with `register_memory`.
    pub fn atomic_u8(&self, offset: usize) -> Result<&AtomicU8> {
        let p = self.atomic_ptr(offset, 1)?;
        // SAFETY: in range, inside memory that lives as long as `self`; AtomicU8 has alignment 1.
        Ok(unsafe { &*(p as *const AtomicU8) })
    }

    /// Stores `value` at `offset` with release ordering: the flag of [`crate::Fabric::put_flag`],
    /// published after everything this thread wrote before.
    pub(crate) fn store_flag(&self, offset: usize, value: u8) -> Result<()> {
        self.with_range(offset, 1, |p| {
            // SAFETY: `p` is valid for one byte (checked range, region alive while the guard is
            // held) and `AtomicU8` has the size and alignment of `u8`.
            unsafe { (*(p as *const AtomicU8)).store(value, Ordering::Release) }
        })
    }

    /// The 8-byte word at `offset` (8-aligned) as an atomic.
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64> {
        if !offset.is_multiple_of(8) {
            return Err(TransportError::InvalidArgument(format!(
                "atomic u64 at offset {offset} is not 8-byte aligned"
            )));
        }
        let p = self.atomic_ptr(offset, 8)?;
        // SAFETY: in range, 8-aligned (regions are 64-aligned), lives as long as `self`.
        Ok(unsafe { &*(p as *const AtomicU64) })
    }

    fn atomic_ptr(&self, offset: usize, size: usize) -> Result<*mut u8> {
        if self.inner.external {
            return Err(TransportError::InvalidArgument(
                "atomics are only offered on regions the fabric allocated".into(),
            ));
        }
        self.check_range(offset, size)?;
        // SAFETY: offset checked against the region length.
        Ok(unsafe { self.inner.ptr.as_ptr().add(offset) })
    }

    /// `Ok` if `offset..offset+len` lies inside the region, else the `OutOfRange` error.
    pub(crate) fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        if range_fits(offset, len, self.inner.len) {
            Ok(())
        } else {
            Err(TransportError::OutOfRange {
                rank: self.inner.rank,
                key: self.inner.key.0,
                offset: offset as u64,
                len: len as u64,
                region_len: self.inner.len as u64,
            })
        }
    }

    /// Runs `f` with a pointer to `offset` after checking the range, holding the region alive
    /// (deregistration waits for `f` to return).
    pub(crate) fn with_range<R>(
        &self,
        offset: usize,
        len: usize,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Result<R> {
        self.check_range(offset, len)?;
        if !self.inner.external {
            // The fabric's own memory is freed only with the last handle, and `self` is one:
            // deregistration stops access without freeing anything, so no lock is needed (an
            // atomic read-modify-write per copy would stall on every store to shared memory
            // before it, the main cost of a small collective).
            if !self.inner.registered.load(Ordering::Acquire) {
                return Err(TransportError::BadKey {
                    rank: self.inner.rank,
                    key: self.inner.key.0,
                });
            }
            // SAFETY: offset + len <= region length, checked above; the memory lives as long
            // as `self`.
            let p = unsafe { self.inner.ptr.as_ptr().add(offset) };
            return Ok(f(p));
        }
        let alive = self.inner.alive.read_recursive();
        if !*alive {
            return Err(TransportError::BadKey {
                rank: self.inner.rank,
                key: self.inner.key.0,
            });
        }
        // SAFETY: offset + len <= region length, checked above.
        let p = unsafe { self.inner.ptr.as_ptr().add(offset) };
        Ok(f(p))
    }

    /// A handle for holding on to the bytes. For memory the fabric allocated: one that keeps
    /// the memory (reads and writes through it go on working) but not the region's key, which
    /// peers can no longer name once the owner's own handles are gone; cloning and dropping it
    /// costs one atomic instruction instead of two. For caller memory (`register_memory`),
    /// whose owner's last handle deregisters it: an ordinary clone.
    pub fn clone_memory(&self) -> Region {
        if self.inner.external {
            return self.clone();
        }
        Region {
            inner: self.inner.clone(),
            owner: false,
        }
    }

    /// Base address (for the shm backend's cross-process copies).
    pub(crate) fn base_addr(&self) -> usize {
        self.inner.ptr.as_ptr() as usize
    }

    fn bad_key(&self) -> TransportError {
        TransportError::BadKey {
            rank: self.inner.rank,
            key: self.inner.key.0,
        }
    }
}

/// Copies `len` bytes between two live regions (possibly the same one): the self-targeted and
/// in-process put/get of every backend.
pub(crate) fn copy_between(
    from: &Region,
    from_off: usize,
    to: &Region,
    to_off: usize,
    len: usize,
) -> Result<()> {
    from.with_range(from_off, len, |s| {
        to.with_range(to_off, len, |d| {
            // SAFETY: both ranges were checked on live regions; `copy` allows overlap.
            unsafe { std::ptr::copy(s, d, len) }
        })
    })?
}

mod held;
pub(crate) use held::Held;

#[cfg(test)]
mod tests;
