//! Probes: a search-only over the unexpected headers, which reports the message the matching
//! receive would take without taking it.

use super::bits::{self, Header};
use super::{Context, Engine, Source, Status, TagSel};
use crate::error::{invalid, OffloadError, Result};
use crate::types::{MatchId, MeOptions, MeSpec, NiFail, SearchOp};
use rdcoll_transport::TransportError;

impl Engine {
    /// The envelope of the first unexpected message from `source` with `tag` in `context`,
    /// if one has arrived. The message stays queued for a receive.
    pub fn iprobe(&self, source: Source, tag: TagSel, context: Context) -> Result<Option<Status>> {
        if source == Source::Rank(super::PROC_NULL) {
            return Ok(Some(Status::from_proc_null()));
        }
        let match_id = match source {
            Source::Any => MatchId::Any,
            Source::Rank(r) => {
                self.check_rank(r, "source")?;
                MatchId::Rank(r)
            }
        };
        let mut inner = self.inner.lock();
        self.progress_locked(&mut inner)?;
        // An id no request has meanwhile, for the search event.
        let id = inner.reqs.reserve();
        inner.reqs.release(id);
        let (match_bits, ignore_bits) = bits::receive_bits(context, tag);
        let spec = MeSpec {
            region: self.probe_region.clone(),
            match_bits,
            ignore_bits,
            match_id,
            options: MeOptions {
                use_once: true,
                op_get: false,
                ..MeOptions::default()
            },
            user_ptr: id,
        };
        self.ni.me_search(self.pt_msg, spec, SearchOp::Only)?;
        self.progress_locked(&mut inner)?;
        let ev = inner
            .searches
            .remove(&id)
            .ok_or_else(|| invalid("the probe's search event did not arrive"))?;
        if ev.fail != NiFail::Ok {
            return Ok(None);
        }
        Ok(Some(Status {
            source: ev.peer,
            tag: bits::tag_of(ev.match_bits),
            len: usize::try_from(Header::decode(ev.hdr_data).len).unwrap_or(usize::MAX),
            cancelled: false,
        }))
    }

    /// Waits for a message from `source` with `tag` in `context` and returns its envelope,
    /// leaving it queued. Fails if the awaited sender has failed, or waits in a send behind its
    /// own messages that fill its share of this rank's unexpected-message memory
    /// ([`OffloadError::SenderBlocked`]).
    pub fn probe(&self, source: Source, tag: TagSel, context: Context) -> Result<Status> {
        let mut backoff = super::Backoff::default();
        loop {
            // A message a probe can report is one queued as unexpected: until another is, a
            // new search would find nothing. Searching at every look made each one an event
            // (so the wait never backed off, and spun) and a notification (so other threads'
            // sleeps ended too).
            let seen = self.ni.queued_unexpected();
            if let Some(s) = self.iprobe(source, tag, context)? {
                return Ok(s);
            }
            loop {
                // A failed sender (for any sender: every other rank failed).
                if let Some(r) = super::recv::peer_gone(self, source) {
                    // Its last messages were handled before its failure: one more look.
                    if let Some(s) = self.iprobe(source, tag, context)? {
                        return Ok(s);
                    }
                    return Err(TransportError::PeerFailed(r).into());
                }
                self.progress()?;
                if self.ni.queued_unexpected() != seen {
                    break;
                }
                // A sender blocked behind its own messages, none of which this probe matches
                // (it would have found one): as for a receive (`Engine::wait`).
                if let Some(sender) = self.blocked_sender(source) {
                    return Err(OffloadError::SenderBlocked {
                        sender,
                        limit: self.cfg.unexpected_max,
                    });
                }
                self.idle(&mut backoff);
            }
        }
    }
}
