//! The libfabric objects of one rank (fabric, domain, reliable-datagram endpoint, completion
//! queue, address vector) and the raw calls the backend makes on them. Nothing here is
//! thread-safe: the backend calls all of it under its state lock (`FI_THREAD_DOMAIN`).

use std::ffi::{c_void, CStr};
use std::ptr;

use rdcoll_ofi_sys as fi;

use crate::error::{Result, TransportError};

/// libfabric API version asked for: 1.17, what Debian 12 ships.
const API_VERSION: u32 = (1 << 16) | 17;

/// Capabilities the backend needs, each with the name a user sees when a provider lacks it.
const NEEDED_CAPS: &[(u64, &str)] = &[
    (fi::FI_MSG as u64, "FI_MSG (active messages)"),
    (fi::FI_RMA as u64, "FI_RMA (one-sided reads and writes)"),
    (fi::FI_READ as u64, "FI_READ"),
    (fi::FI_WRITE as u64, "FI_WRITE"),
    (fi::FI_REMOTE_READ as u64, "FI_REMOTE_READ"),
    (fi::FI_REMOTE_WRITE as u64, "FI_REMOTE_WRITE"),
    (
        fi::FI_MULTI_RECV as u64,
        "FI_MULTI_RECV (receive buffers shared by messages)",
    ),
];

/// Memory-registration modes the backend knows how to honour.
const MR_MODES_SUPPORTED: u32 = fi::FI_MR_LOCAL
    | fi::FI_MR_VIRT_ADDR
    | fi::FI_MR_ALLOCATED
    | fi::FI_MR_PROV_KEY
    | fi::FI_MR_ENDPOINT;

/// The text of a libfabric error code (negative or positive).
pub(crate) fn fi_error_text(code: isize) -> String {
    let errnum = code.unsigned_abs() as i32;
    // SAFETY: fi_strerror returns a pointer to a static, NUL-terminated string for any code.
    let text = unsafe { CStr::from_ptr(fi::fi_strerror(errnum)) };
    text.to_string_lossy().into_owned()
}

/// An error from a libfabric call, naming the call and the provider's reason.
pub(crate) fn fi_error(what: &str, code: isize) -> TransportError {
    TransportError::Io {
        context: format!("libfabric {what}"),
        message: format!("{} ({code})", fi_error_text(code)),
    }
}

fn check(what: &str, code: isize) -> Result<()> {
    if code < 0 {
        Err(fi_error(what, code))
    } else {
        Ok(())
    }
}

/// What the chosen provider offers and asks for.
#[derive(Debug, Clone)]
pub(crate) struct ProviderTraits {
    /// e.g. `tcp;ofi_rxm`.
    pub name: String,
    /// Registration modes the provider requires (a subset of [`MR_MODES_SUPPORTED`]).
    pub mr_mode: u32,
    /// Largest message `fi_inject` takes.
    pub inject_size: usize,
    /// Largest message or RMA transfer in one call.
    pub max_msg_size: usize,
}

impl ProviderTraits {
    pub(crate) fn needs(&self, mode: u32) -> bool {
        self.mr_mode & mode != 0
    }
}

/// A rank's libfabric objects. Dropped in reverse order of opening.
pub(crate) struct Provider {
    /// What fi_getinfo returned (freed on drop), and the entry in use.
    list: *mut fi::fi_info,
    info: *mut fi::fi_info,
    fabric: *mut fi::fid_fabric,
    domain: *mut fi::fid_domain,
    pub(crate) cq: *mut fi::fid_cq,
    av: *mut fi::fid_av,
    pub(crate) ep: *mut fi::fid_ep,
    /// File descriptor that becomes readable when the completion queue may have entries
    /// (`FI_WAIT_FD`), where the provider offers one.
    pub(crate) wait_fd: Option<i32>,
    pub(crate) traits: ProviderTraits,
}

// SAFETY: the handles are plain pointers to libfabric objects opened with FI_THREAD_DOMAIN;
// the backend only touches them under its state lock, so one thread at a time uses them.
unsafe impl Send for Provider {}

/// Builds the hints for `fi_getinfo` with `caps`; freed with `fi_freeinfo`.
fn hints(caps: u64) -> Result<*mut fi::fi_info> {
    // SAFETY: fi_allocinfo returns a zeroed fi_info with every attribute struct allocated,
    // or null.
    let h = unsafe { fi::fi_allocinfo() };
    if h.is_null() {
        return Err(TransportError::OutOfResources {
            what: "libfabric hints",
        });
    }
    // SAFETY: `h` and its attribute pointers were just allocated by fi_allocinfo.
    unsafe {
        (*h).caps = caps;
        (*h).mode = fi::FI_CONTEXT;
        (*(*h).ep_attr).type_ = fi::FI_EP_RDM;
        (*(*h).domain_attr).mr_mode = MR_MODES_SUPPORTED as i32;
        (*(*h).domain_attr).threading = fi::FI_THREAD_DOMAIN;
        (*(*h).domain_attr).resource_mgmt = fi::FI_RM_ENABLED;
        (*(*h).domain_attr).av_type = fi::FI_AV_TABLE;
        (*(*h).tx_attr).op_flags = fi::FI_DELIVERY_COMPLETE as u64;
        (*(*h).tx_attr).msg_order = fi::FI_ORDER_SAS as u64;
        (*(*h).rx_attr).msg_order = fi::FI_ORDER_SAS as u64;
    }
    Ok(h)
}

/// `fi_getinfo` with the given capabilities: the provider list, or the error code.
fn getinfo(caps: u64) -> Result<std::result::Result<*mut fi::fi_info, isize>> {
    let h = hints(caps)?;
    let mut info = ptr::null_mut();
    // SAFETY: `h` is a valid hints structure; libfabric reads it and writes `info`.
    let ret = unsafe { fi::fi_getinfo(API_VERSION, ptr::null(), ptr::null(), 0, h, &mut info) };
    // SAFETY: `h` came from fi_allocinfo and is not used again.
    unsafe { fi::fi_freeinfo(h) };
    Ok(if ret == 0 && !info.is_null() {
        Ok(info)
    } else {
        Err(ret as isize)
    })
}

/// Why no provider fits: the first capability that, once dropped from the request, makes one
/// appear; or the provider's own error.
fn explain_missing(code: isize) -> TransportError {
    let all = NEEDED_CAPS.iter().fold(0, |acc, (c, _)| acc | c);
    let provider = std::env::var("FI_PROVIDER").unwrap_or_else(|_| "any".into());
    for (cap, name) in NEEDED_CAPS {
        if let Ok(Ok(info)) = getinfo(all & !cap) {
            // SAFETY: a list fi_getinfo returned, freed once.
            unsafe { fi::fi_freeinfo(info) };
            return TransportError::InvalidArgument(format!(
                "RDCOLL_TRANSPORT=ofi: libfabric provider {provider:?} lacks {name}, which \
                 the ofi backend needs (set FI_PROVIDER to one that has it: tcp, sockets, net)"
            ));
        }
    }
    TransportError::InvalidArgument(format!(
        "RDCOLL_TRANSPORT=ofi: no libfabric provider (FI_PROVIDER={provider:?}) offers \
         reliable-datagram endpoints with messages, RMA reads and writes, multi-receive \
         buffers and delivery-complete writes: {} ({code}); `fi_info -t FI_EP_RDM` lists \
         what this host has",
        fi_error_text(code)
    ))
}

impl Provider {
    /// Opens the first provider that offers what the backend needs, and its endpoint.
    ///
    /// Among the provider's entries (one per interface and address family for IP providers)
    /// it takes the one whose source address is `prefer` (the address that reaches the job's
    /// store, as the tcp backend listens on), else the first: ranks on several hosts then need
    /// no `FI_TCP_IFACE`.
    pub(crate) fn open(
        size: usize,
        min_multi_recv: usize,
        prefer: Option<std::net::IpAddr>,
    ) -> Result<Provider> {
        let caps = NEEDED_CAPS.iter().fold(0, |acc, (c, _)| acc | c);
        let list = getinfo(caps)?.map_err(explain_missing)?;
        // libfabric 1.17's shm provider is taken only when nothing else is offered (and then
        // refused below, with the reason).
        let mut first = None;
        let mut matching = None;
        let mut at = list;
        while !at.is_null() {
            // SAFETY: `at` walks the list fi_getinfo returned, each entry complete.
            let (name, here, next) = unsafe { (traits_of(at).name, source_ip(at), (*at).next) };
            if name != "shm" {
                first = first.or(Some(at));
                if prefer.is_some() && here == prefer && matching.is_none() {
                    matching = Some(at);
                }
            }
            at = next;
        }
        let info = matching.or(first).unwrap_or(list);
        // SAFETY: `info` is the first entry of a list fi_getinfo returned, with every
        // attribute pointer set.
        let traits = unsafe { traits_of(info) };
        if traits.name == "shm" {
            // SAFETY: the list fi_getinfo returned, freed once.
            unsafe { fi::fi_freeinfo(list) };
            return Err(TransportError::InvalidArgument(
                "RDCOLL_TRANSPORT=ofi: libfabric's shm provider (1.17) crashes when a minimum \
                 multi-receive size is set and does not hand full multi-receive buffers back; \
                 on one host use RDCOLL_TRANSPORT=shm (rdcoll's own shared memory)"
                    .into(),
            ));
        }
        let mut p = Provider {
            list,
            info,
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            ep: ptr::null_mut(),
            wait_fd: None,
            traits,
        };
        // Closed by Drop on any error below.
        p.open_objects(size, min_multi_recv)?;
        Ok(p)
    }

    fn open_objects(&mut self, size: usize, min_multi_recv: usize) -> Result<()> {
        // SAFETY: every call gets the objects opened before it, valid until Drop closes them;
        // the attribute structures live on this stack frame for the duration of each call.
        unsafe {
            check(
                "fi_fabric",
                fi::fi_fabric((*self.info).fabric_attr, &mut self.fabric, ptr::null_mut()) as isize,
            )?;
            check(
                "fi_domain",
                fi::fi_domain(self.fabric, self.info, &mut self.domain, ptr::null_mut()) as isize,
            )?;
            let mut av_attr = fi::fi_av_attr {
                type_: fi::FI_AV_TABLE,
                count: size,
                ..Default::default()
            };
            check(
                "fi_av_open",
                fi::fi_av_open(self.domain, &mut av_attr, &mut self.av, ptr::null_mut()) as isize,
            )?;
            let mut cq_attr = fi::fi_cq_attr {
                format: fi::FI_CQ_FORMAT_DATA,
                wait_obj: fi::FI_WAIT_FD,
                ..Default::default()
            };
            if fi::fi_cq_open(self.domain, &mut cq_attr, &mut self.cq, ptr::null_mut()) != 0 {
                cq_attr.wait_obj = fi::FI_WAIT_NONE;
                check(
                    "fi_cq_open",
                    fi::fi_cq_open(self.domain, &mut cq_attr, &mut self.cq, ptr::null_mut())
                        as isize,
                )?;
            } else {
                let mut fd: i32 = -1;
                let ret = fi::fi_control(
                    &mut (*self.cq).fid,
                    fi::FI_GETWAIT as i32,
                    &mut fd as *mut i32 as *mut c_void,
                );
                if ret == 0 && fd >= 0 {
                    self.wait_fd = Some(fd);
                }
            }
            check(
                "fi_endpoint",
                fi::fi_endpoint(self.domain, self.info, &mut self.ep, ptr::null_mut()) as isize,
            )?;
            check(
                "binding the address vector",
                fi::fi_ep_bind(self.ep, &mut (*self.av).fid, 0) as isize,
            )?;
            check(
                "binding the completion queue",
                fi::fi_ep_bind(
                    self.ep,
                    &mut (*self.cq).fid,
                    (fi::FI_TRANSMIT | fi::FI_RECV) as u64,
                ) as isize,
            )?;
            let mut min = min_multi_recv;
            check(
                "setting FI_OPT_MIN_MULTI_RECV",
                fi::fi_setopt(
                    &mut (*self.ep).fid,
                    fi::FI_OPT_ENDPOINT as i32,
                    fi::FI_OPT_MIN_MULTI_RECV as i32,
                    &mut min as *mut usize as *mut c_void,
                    std::mem::size_of::<usize>(),
                ) as isize,
            )?;
            check("fi_enable", fi::fi_enable(self.ep) as isize)?;
        }
        Ok(())
    }

    /// This endpoint's address, for peers' address vectors.
    pub(crate) fn name(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: the endpoint is open; `buf` has `len` writable bytes and libfabric writes at
        // most that many (or reports the size it needs).
        let ret = unsafe {
            fi::fi_getname(
                &mut (*self.ep).fid,
                buf.as_mut_ptr() as *mut c_void,
                &mut len,
            )
        };
        check("fi_getname", ret as isize)?;
        buf.truncate(len);
        Ok(buf)
    }

    /// Inserts every rank's address in rank order, so that a rank's `fi_addr_t` is its rank.
    pub(crate) fn insert_addresses(&mut self, names: &[Vec<u8>]) -> Result<()> {
        for (rank, name) in names.iter().enumerate() {
            let mut addr: fi::fi_addr_t = 0;
            // SAFETY: the address vector is open; `name` holds one address as fi_getname wrote
            // it; `addr` receives one fi_addr_t.
            let ret = unsafe {
                fi::fi_av_insert(
                    self.av,
                    name.as_ptr() as *const c_void,
                    1,
                    &mut addr,
                    0,
                    ptr::null_mut(),
                )
            };
            if ret != 1 || addr != rank as u64 {
                return Err(TransportError::Bootstrap(format!(
                    "libfabric gave rank {rank}'s address the index {addr} (insert returned \
                     {ret}); the ofi backend needs a table address vector in rank order"
                )));
            }
        }
        Ok(())
    }

    /// Registers `len` bytes at `buf` for local use and peers' reads and writes, under `key`
    /// where the provider lets the application choose keys. Returns the registration, its
    /// local descriptor and the key peers must use.
    pub(crate) fn register(
        &self,
        buf: *mut u8,
        len: usize,
        key: u64,
    ) -> Result<(*mut fi::fid_mr, *mut c_void, u64)> {
        let access = (fi::FI_SEND
            | fi::FI_RECV
            | fi::FI_READ
            | fi::FI_WRITE
            | fi::FI_REMOTE_READ
            | fi::FI_REMOTE_WRITE) as u64;
        let mut mr = ptr::null_mut();
        // SAFETY: the domain is open; the caller keeps `buf..buf+len` valid until it closes the
        // registration.
        let ret = unsafe {
            fi::fi_mr_reg(
                self.domain,
                buf as *const c_void,
                len.max(1),
                access,
                0,
                key,
                0,
                &mut mr,
                ptr::null_mut(),
            )
        };
        check("fi_mr_reg", ret as isize)?;
        let close = |e| {
            // SAFETY: `mr` was opened above and is not used again.
            unsafe { fi::fi_close(&mut (*mr).fid) };
            e
        };
        if self.traits.needs(fi::FI_MR_ENDPOINT) {
            // SAFETY: `mr` and the endpoint are open.
            let ret = unsafe { fi::fi_mr_bind(mr, &mut (*self.ep).fid, 0) };
            check("fi_mr_bind", ret as isize).map_err(close)?;
            // SAFETY: `mr` is open and bound.
            let ret = unsafe { fi::fi_mr_enable(mr) };
            check("fi_mr_enable", ret as isize).map_err(close)?;
        }
        // SAFETY: `mr` is open.
        let (desc, remote_key) = unsafe { (fi::fi_mr_desc(mr), fi::fi_mr_key(mr)) };
        Ok((mr, desc, remote_key))
    }

    /// Closes a registration made by [`register`](Provider::register).
    pub(crate) fn deregister(&self, mr: *mut fi::fid_mr) {
        // SAFETY: the caller passes a registration it opened and never uses again.
        unsafe { fi::fi_close(&mut (*mr).fid) };
    }
}

/// The IP address an entry's endpoints would bind to, where it names one.
///
/// # Safety
/// `info` must point to an fi_info from fi_getinfo.
unsafe fn source_ip(info: *mut fi::fi_info) -> Option<std::net::IpAddr> {
    // SAFETY: the caller's promise; `src_addr` holds `src_addrlen` bytes when set.
    unsafe {
        let (addr, len) = ((*info).src_addr as *const u8, (*info).src_addrlen);
        if addr.is_null() || len < 8 {
            return None;
        }
        let bytes = std::slice::from_raw_parts(addr, len);
        let family = u16::from_ne_bytes([bytes[0], bytes[1]]) as i32;
        if family == libc::AF_INET {
            let v4: [u8; 4] = bytes[4..8].try_into().ok()?;
            Some(std::net::IpAddr::from(v4))
        } else if family == libc::AF_INET6 && len >= 24 {
            let v6: [u8; 16] = bytes[8..24].try_into().ok()?;
            Some(std::net::IpAddr::from(v6))
        } else {
            None
        }
    }
}

/// Reads what the chosen provider offers and requires.
///
/// # Safety
/// `info` must point to an fi_info from fi_getinfo with its attribute pointers set.
unsafe fn traits_of(info: *mut fi::fi_info) -> ProviderTraits {
    // SAFETY: the caller's promise.
    unsafe {
        let name = CStr::from_ptr((*(*info).fabric_attr).prov_name)
            .to_string_lossy()
            .into_owned();
        ProviderTraits {
            name,
            mr_mode: (*(*info).domain_attr).mr_mode as u32 & MR_MODES_SUPPORTED,
            inject_size: (*(*info).tx_attr).inject_size,
            max_msg_size: (*(*info).ep_attr).max_msg_size,
        }
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        // SAFETY: each handle was opened by this provider (or is null) and is closed once, the
        // endpoint before what it is bound to.
        unsafe {
            if !self.ep.is_null() {
                fi::fi_close(&mut (*self.ep).fid);
            }
            if !self.av.is_null() {
                fi::fi_close(&mut (*self.av).fid);
            }
            if !self.cq.is_null() {
                fi::fi_close(&mut (*self.cq).fid);
            }
            if !self.domain.is_null() {
                fi::fi_close(&mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                fi::fi_close(&mut (*self.fabric).fid);
            }
            fi::fi_freeinfo(self.list);
        }
    }
}

impl Provider {
    /// Closes the endpoint, so that nothing lands in receive buffers or is read from send
    /// buffers any more; the rest closes on drop.
    pub(crate) fn close_endpoint(&mut self) {
        if !self.ep.is_null() {
            // SAFETY: the endpoint was opened here and is not used after this.
            unsafe { fi::fi_close(&mut (*self.ep).fid) };
            self.ep = ptr::null_mut();
        }
    }

    /// The fabric handle (for `fi_trywait`).
    pub(crate) fn fabric_ptr(&self) -> *mut fi::fid_fabric {
        self.fabric
    }
}
