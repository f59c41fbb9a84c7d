//! Pull puts: a put into memory the target registered, which the target copies itself out of
//! the initiator's memory with `process_vm_readv` (`K_PUT_PULL`, and the target's part of a
//! split put, `K_PUT_SPLIT`).

use super::records::*;
use super::service::{done, status_of, tail_event, target_region};
use super::{os, Inner, PutTail};
use crate::error::Result;
use crate::region::Region;
use crate::types::{Event, OpId, Rank, RemoteAddr};

/// The words of a pull request: [op, key, offset, len, src_addr, tail_kind, tail_value].
pub(super) fn request_words(
    op: OpId,
    (src, src_offset): (&Region, usize),
    len: usize,
    dst: RemoteAddr,
    tail: PutTail,
) -> [u64; 7] {
    let [tail_kind, tail_value] = tail.words();
    [
        op.0,
        dst.key.0,
        dst.offset as u64,
        len as u64,
        (src.base_addr() + src_offset) as u64,
        tail_kind,
        tail_value,
    ]
}

/// A pull put as the target reads it from its request.
#[derive(Clone, Copy)]
pub(super) struct PullPut {
    pub(super) op: u64,
    key: u64,
    offset: u64,
    pub(super) len: u64,
    src_addr: u64,
    tail: PutTail,
}

/// What pulling gave: the region's error, or the errno of a refused cross-memory read.
type Pulled = Result<std::result::Result<(), i32>>;

/// The `K_DONE` status and region length that report `result`.
pub(super) fn outcome(result: &Pulled) -> (u64, u64) {
    match result {
        Ok(Ok(())) => (ST_OK, 0),
        Ok(Err(_)) => (ST_CMA_REFUSED, 0),
        Err(e) => status_of(e),
    }
}

impl PullPut {
    /// The put of request `words`, or `Err(op)` when its tail is malformed.
    pub(super) fn parse(words: [u64; 7]) -> std::result::Result<PullPut, u64> {
        let [op, key, offset, len, src_addr, tail_kind, tail_value] = words;
        match PutTail::from_words(tail_kind, tail_value) {
            Some(tail) => Ok(PullPut {
                op,
                key,
                offset,
                len,
                src_addr,
                tail,
            }),
            None => Err(op),
        }
    }

    /// Runs `f` on the destination region and the offset of the put's first byte in it, after
    /// checking the data and the flag byte fit.
    fn in_region<R>(
        &self,
        inner: &Inner,
        f: impl FnOnce(&Region, usize) -> Result<R>,
    ) -> Result<R> {
        let span = self.len.saturating_add(self.tail.extra() as u64);
        target_region(inner, self.key, self.offset, span).and_then(|(region, o, _)| f(&region, o))
    }

    /// Copies bytes `from..to` of the put's data from `src`'s memory into `region` at `o`.
    fn read(
        &self,
        inner: &Inner,
        src: Rank,
        (region, o): (&Region, usize),
        from: usize,
        to: usize,
    ) -> Pulled {
        region.with_range(o + from, to - from, |d| {
            let pid = inner.pids[src as usize];
            os::read_remote(pid, self.src_addr as usize + from, d, to - from)
        })
    }

    /// Pulls bytes `0..to` (the target's part of a split put).
    pub(super) fn pull_head(&self, inner: &Inner, src: Rank, to: usize) -> Pulled {
        self.in_region(inner, |region, o| self.read(inner, src, (region, o), 0, to))
    }

    /// Pulls bytes `from..len` (none when `from` is the length), stores the flag after the
    /// data, and reports the put to its initiator: `K_DONE`, and the tail's event on success.
    pub(super) fn finish(&self, inner: &Inner, src: Rank, from: usize) -> Option<Event> {
        let len = self.len as usize;
        let result = self.in_region(inner, |region, o| {
            let read = self.read(inner, src, (region, o), from, len)?;
            if let (Ok(()), PutTail::Flag(v)) = (&read, self.tail) {
                region.store_flag(o + len, v)?;
            }
            Ok(read)
        });
        let (status, region_len) = outcome(&result);
        done(inner, src, self.op, status, region_len);
        (status == ST_OK)
            .then(|| tail_event(inner, src, self.tail))
            .flatten()
    }
}
