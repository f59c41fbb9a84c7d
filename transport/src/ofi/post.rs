//! The data-path calls on a rank's endpoint: post a multi-receive buffer, send or inject a
//! message, write or read a peer's memory, and read the completion queue.

use std::ffi::c_void;
use std::ptr;

use rdcoll_ofi_sys as fi;

use super::provider::{fi_error, Provider};
use crate::error::Result;

/// Per-operation context handed to libfabric: room for the provider's own use
/// (`FI_CONTEXT`/`FI_CONTEXT2` mode) followed by the backend's token for the operation.
#[repr(C)]
pub(crate) struct OpContext {
    provider_space: [*mut c_void; 8],
    /// Names the operation in the backend's table of what is in flight.
    pub(crate) token: u64,
}

impl OpContext {
    pub(crate) fn new(token: u64) -> Box<OpContext> {
        Box::new(OpContext {
            provider_space: [ptr::null_mut(); 8],
            token,
        })
    }
}

/// Whether a post was taken, or must wait for the provider to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Posted {
    Taken,
    Again,
}

fn posted(what: &str, ret: isize) -> Result<Posted> {
    if ret == -(fi::FI_EAGAIN as isize) {
        Ok(Posted::Again)
    } else if ret < 0 {
        Err(fi_error(what, ret))
    } else {
        Ok(Posted::Taken)
    }
}

/// One completion: the operation's context, flags, and for a receive where its bytes are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Completion {
    pub(crate) context: *mut c_void,
    pub(crate) flags: u64,
    pub(crate) len: usize,
    pub(crate) buf: *const u8,
    /// libfabric's error code (0: success).
    pub(crate) err: i32,
}

impl Provider {
    /// Posts `len` bytes at `buf` as a multi-receive buffer: messages land packed in it until
    /// less than the minimum is left, then a completion with `FI_MULTI_RECV` hands it back.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and untouched until that completion (or the endpoint's
    /// close); `ctx` must stay at its address as long.
    pub(crate) unsafe fn post_multi_recv(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        ctx: *mut OpContext,
    ) -> Result<Posted> {
        let iov = libc::iovec {
            iov_base: buf as *mut c_void,
            iov_len: len,
        };
        let mut desc = desc;
        let msg = fi::fi_msg {
            msg_iov: &iov as *const libc::iovec as *const fi::iovec,
            desc: &mut desc,
            iov_count: 1,
            addr: u64::MAX, // FI_ADDR_UNSPEC: from any peer
            context: ctx as *mut c_void,
            data: 0,
        };
        // SAFETY: the endpoint is open; the caller keeps buffer and context alive.
        let ret = unsafe { fi::fi_recvmsg(self.ep, &msg, fi::FI_MULTI_RECV as u64) };
        posted("fi_recvmsg", ret)
    }

    /// Sends `data` to `dest` with no completion: the provider copied it before returning.
    /// Only for messages up to the provider's inject size.
    pub(crate) fn inject(&self, data: &[u8], dest: u64) -> Result<Posted> {
        // SAFETY: the endpoint is open; fi_inject copies `data` before it returns.
        let ret =
            unsafe { fi::fi_inject(self.ep, data.as_ptr() as *const c_void, data.len(), dest) };
        posted("fi_inject", ret)
    }

    /// Sends `len` bytes at `buf` to `dest`; a completion with `ctx` follows.
    ///
    /// # Safety
    /// `buf..buf+len` and `ctx` must stay valid until that completion.
    pub(crate) unsafe fn send(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        ctx: *mut OpContext,
    ) -> Result<Posted> {
        // SAFETY: the endpoint is open; the caller keeps buffer and context alive.
        let ret =
            unsafe { fi::fi_send(self.ep, buf as *const c_void, len, desc, dest, ctx.cast()) };
        posted("fi_send", ret)
    }

    /// Writes `len` bytes at `buf` to `dest`'s memory at `raddr` under `key`, completing once
    /// they are at the target (`FI_DELIVERY_COMPLETE`).
    ///
    /// # Safety
    /// `buf..buf+len` and `ctx` must stay valid until the completion.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn write(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        raddr: u64,
        key: u64,
        ctx: *mut OpContext,
    ) -> Result<Posted> {
        let flags = (fi::FI_COMPLETION | fi::FI_DELIVERY_COMPLETE) as u64;
        // SAFETY: as the caller promises; the message structures live through the call.
        let ret = unsafe { self.rma(buf, len, desc, dest, raddr, key, ctx, true, flags) };
        posted("fi_writemsg", ret)
    }

    /// Reads `len` bytes of `dest`'s memory at `raddr` under `key` into `buf`.
    ///
    /// # Safety
    /// `buf..buf+len` and `ctx` must stay valid (and `buf` unread) until the completion.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn read(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        raddr: u64,
        key: u64,
        ctx: *mut OpContext,
    ) -> Result<Posted> {
        let flags = fi::FI_COMPLETION as u64;
        // SAFETY: as the caller promises.
        let ret = unsafe { self.rma(buf, len, desc, dest, raddr, key, ctx, false, flags) };
        posted("fi_readmsg", ret)
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn rma(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        raddr: u64,
        key: u64,
        ctx: *mut OpContext,
        write: bool,
        flags: u64,
    ) -> isize {
        let iov = libc::iovec {
            iov_base: buf as *mut c_void,
            iov_len: len,
        };
        let rma_iov = fi::fi_rma_iov {
            addr: raddr,
            len,
            key,
        };
        let mut desc = desc;
        let msg = fi::fi_msg_rma {
            msg_iov: &iov as *const libc::iovec as *const fi::iovec,
            desc: &mut desc,
            iov_count: 1,
            addr: dest,
            rma_iov: &rma_iov,
            rma_iov_count: 1,
            context: ctx as *mut c_void,
            data: 0,
        };
        // SAFETY: the endpoint is open; the structures above live through the call and the
        // caller keeps buffer and context alive until the completion.
        unsafe {
            if write {
                fi::fi_writemsg(self.ep, &msg, flags)
            } else {
                fi::fi_readmsg(self.ep, &msg, flags)
            }
        }
    }

    /// The next completion, if any (progressing the provider on the way: with manual progress
    /// this is what moves data).
    pub(crate) fn next_completion(&self) -> Result<Option<Completion>> {
        let mut entry = fi::fi_cq_data_entry::default();
        // SAFETY: the completion queue is open and was opened with FI_CQ_FORMAT_DATA, so one
        // entry is an fi_cq_data_entry.
        let ret = unsafe { fi::fi_cq_read(self.cq, &mut entry as *mut _ as *mut c_void, 1) };
        if ret == 1 {
            return Ok(Some(Completion {
                context: entry.op_context,
                flags: entry.flags,
                len: entry.len,
                buf: entry.buf as *const u8,
                err: 0,
            }));
        }
        if ret == -(fi::FI_EAGAIN as isize) {
            return Ok(None);
        }
        if ret == -(fi::FI_EAVAIL as isize) {
            let mut err = fi::fi_cq_err_entry::default();
            // SAFETY: the queue is open; `err` is one error entry.
            let n = unsafe { fi::fi_cq_readerr(self.cq, &mut err, 0) };
            if n == 1 {
                return Ok(Some(Completion {
                    context: err.op_context,
                    flags: err.flags,
                    len: err.len,
                    buf: err.buf as *const u8,
                    err: err.err.max(1),
                }));
            }
            return Ok(None);
        }
        Err(fi_error("fi_cq_read", ret))
    }

    /// Whether the caller may now sleep on the wait descriptor (`fi_trywait`): false when
    /// completions are already there or the provider needs progress first.
    pub(crate) fn may_sleep(&self) -> bool {
        let mut cq = self.cq as *mut fi::fid;
        // SAFETY: the fabric and queue are open; `cq` names one fid.
        unsafe { fi::fi_trywait(self.fabric_ptr(), &mut cq, 1) == 0 }
    }
}
