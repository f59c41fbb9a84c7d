//! Puts and gets: to this rank itself (a copy), small ones inside messages, large ones as
//! one-sided writes and reads through the peer's registration (looked up first, checked here).

use super::post::{OpContext, Posted};
use super::state::{Operation, Posting, RmaRequest, State, Waiting, INLINE_MAX};
use super::wire::{self, Kind};
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::types::{range_fits, Event, OpId, RemoteAddr};

impl State {
    /// A put of `len` bytes of `src` at `src_offset` to `dst`, with an immediate or a flag.
    pub(crate) fn put(
        &mut self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        imm: Option<u64>,
        flag: Option<u8>,
    ) -> Result<OpId> {
        self.check_peer(dst.rank)?;
        src.check_range(src_offset, len)?;
        let op = self.token();
        if dst.rank == self.rank {
            let r = match flag {
                Some(v) => self.table.put_flag_from(src, src_offset, len, dst, v),
                None => self.table.put_from(src, src_offset, len, dst),
            };
            if let (Ok(()), Some(imm)) = (&r, imm) {
                self.events.push(Event::Immediate {
                    src: self.rank,
                    imm,
                });
            }
            if flag.is_some() {
                self.events.wake_all();
            }
            self.events.push(Event::Completed {
                op: OpId(op),
                result: r,
            });
            return Ok(OpId(op));
        }
        if len <= INLINE_MAX {
            let mut data = vec![0u8; len];
            src.read(src_offset, &mut data)?;
            let m = wire::pack_marks(imm, flag);
            let words = [op, dst.key.0, dst.offset as u64, m[0], m[1], m[2]];
            self.ops.insert(
                op,
                Operation {
                    dest: dst.rank,
                    waiting: Waiting::Ack,
                },
            );
            // A flag or immediate promises the target every earlier put to it too: behind
            // this rank's one-sided writes to it still in flight.
            let fenced = imm.is_some() || flag.is_some();
            self.send_control(dst.rank, Kind::Put, words, &data, fenced)?;
            return Ok(OpId(op));
        }
        self.start_rma(RmaRequest {
            op,
            write: true,
            region: src.clone(),
            local_offset: src_offset,
            len,
            dest: dst.rank,
            key: dst.key.0,
            remote_offset: dst.offset,
            marks: (imm.is_some() || flag.is_some()).then_some((imm, flag)),
        });
        Ok(OpId(op))
    }

    /// A get of `len` bytes at `src` into `dst` at `dst_offset`.
    pub(crate) fn get(
        &mut self,
        dst: &Region,
        dst_offset: usize,
        len: usize,
        src: RemoteAddr,
    ) -> Result<OpId> {
        self.check_peer(src.rank)?;
        dst.check_range(dst_offset, len)?;
        let op = self.token();
        if src.rank == self.rank {
            let r = self.table.get_into(dst, dst_offset, len, src);
            self.events.push(Event::Completed {
                op: OpId(op),
                result: r,
            });
            return Ok(OpId(op));
        }
        if len <= INLINE_MAX {
            let words = [op, src.key.0, src.offset as u64, len as u64, 0, 0];
            self.ops.insert(
                op,
                Operation {
                    dest: src.rank,
                    waiting: Waiting::Data {
                        region: dst.clone(),
                        offset: dst_offset,
                    },
                },
            );
            self.send_control(src.rank, Kind::Get, words, &[], false)?;
            return Ok(OpId(op));
        }
        self.start_rma(RmaRequest {
            op,
            write: false,
            region: dst.clone(),
            local_offset: dst_offset,
            len,
            dest: src.rank,
            key: src.key.0,
            remote_offset: src.offset,
            marks: None,
        });
        Ok(OpId(op))
    }

    fn start_rma(&mut self, req: RmaRequest) {
        if req.write {
            // Counted from now, not from the post: a flag or immediate sent after this write
            // waits for it even while its key is being looked up.
            self.writes_in_flight[req.dest as usize] += 1;
        }
        self.ops.insert(
            req.op,
            Operation {
                dest: req.dest,
                waiting: Waiting::Rma,
            },
        );
        match self.remote.get(&(req.dest, req.key)) {
            Some(_) => {
                self.post_rma(req);
            }
            None => {
                let at = (req.dest, req.key);
                let first = !self.parked.contains_key(&at);
                self.parked.entry(at).or_default().push(req);
                if first {
                    let words = [at.1, 0, 0, 0, 0, 0];
                    if self
                        .send_control(at.0, Kind::KeyQuery, words, &[], false)
                        .is_err()
                    {
                        // The peer failed; its parked requests were failed with it.
                    }
                }
            }
        }
    }

    /// Checks `req` against what its owner said of the key and posts it; `false` if the
    /// provider had no room (it waits in `retry`).
    pub(crate) fn post_rma(&mut self, req: RmaRequest) -> bool {
        let (dest, key) = (req.dest, req.key);
        if !self.ops.contains_key(&req.op) {
            self.write_ended(&req);
            self.graveyard.push(req.region);
            return true; // failed meanwhile (its peer died)
        }
        let Some(entry) = self.remote.get(&(dest, key)).copied() else {
            let err = TransportError::BadKey { rank: dest, key };
            self.fail_request(req, err);
            return true;
        };
        let extra = usize::from(matches!(req.marks, Some((_, Some(_)))));
        let want = req.len + extra;
        if entry.gone {
            self.fail_request(req, TransportError::BadKey { rank: dest, key });
            return true;
        }
        let region_len = usize::try_from(entry.len).unwrap_or(usize::MAX);
        if !range_fits(req.remote_offset, want, region_len) {
            let err = TransportError::OutOfRange {
                rank: dest,
                key,
                offset: req.remote_offset as u64,
                len: want as u64,
                region_len: entry.len,
            };
            self.fail_request(req, err);
            return true;
        }
        if req.len > self.prov.traits.max_msg_size {
            let err = TransportError::InvalidArgument(format!(
                "a one-sided transfer of {} bytes is above provider {}'s limit of {}",
                req.len, self.prov.traits.name, self.prov.traits.max_msg_size
            ));
            self.fail_request(req, err);
            return true;
        }
        let desc = self
            .local
            .get(&req.region.key().0)
            .map_or(std::ptr::null_mut(), |m| m.desc);
        let token = self.token();
        let mut ctx = OpContext::new(token);
        let ctxp: *mut OpContext = &mut *ctx;
        let local = req.region.base_addr() + req.local_offset;
        let raddr = entry.remote_base + req.remote_offset as u64;
        // SAFETY: the local range was checked against the region when the operation was made,
        // and the region handle and context are kept in `postings` until the completion.
        let r = unsafe {
            if req.write {
                self.prov.write(
                    local as *const u8,
                    req.len,
                    desc,
                    dest as u64,
                    raddr,
                    entry.remote_key,
                    ctxp,
                )
            } else {
                self.prov.read(
                    local as *mut u8,
                    req.len,
                    desc,
                    dest as u64,
                    raddr,
                    entry.remote_key,
                    ctxp,
                )
            }
        };
        match r {
            Ok(Posted::Taken) => {
                if let Some(e) = self.remote.get_mut(&(dest, key)) {
                    e.in_flight += 1;
                }
                if req.write {
                    if let Some((imm, flag)) = req.marks {
                        let m = wire::pack_marks(imm, flag);
                        let words = [
                            key,
                            req.remote_offset as u64,
                            req.len as u64,
                            m[0],
                            m[1],
                            m[2],
                        ];
                        let _ = self.send_control(dest, Kind::Notice, words, &[], true);
                    }
                }
                self.postings.insert(
                    token,
                    Posting {
                        _ctx: ctx,
                        request: req,
                    },
                );
                true
            }
            Ok(Posted::Again) => {
                self.retry.push_back(req);
                false
            }
            Err(e) => {
                tracing::warn!(rank = self.rank, dest, error = %e, "ofi one-sided post failed");
                self.lose_peer(dest);
                self.graveyard.push(req.region);
                true
            }
        }
    }

    fn fail_request(&mut self, req: RmaRequest, err: TransportError) {
        self.complete(req.op, Err(err));
        self.write_ended(&req);
        self.graveyard.push(req.region);
    }

    /// A write request ended (landed, failed, or never posted): messages fenced behind it
    /// may go once no other write to its target is in flight.
    pub(crate) fn write_ended(&mut self, req: &RmaRequest) {
        if req.write {
            let w = &mut self.writes_in_flight[req.dest as usize];
            *w = w.saturating_sub(1);
        }
    }
}
