//! Queued receives: nonblocking receives kept in the engine, in post order,
//! instead of as match-list entries, while nothing else is posted on the message portal. The
//! engine's own progress takes eager messages for them straight from the transport's buffer
//! (as the blocking fast path does for one receive), with no region, entry, event or dispatch
//! on the way: `osu_bw`'s window of 64 receives costs a fraction of what entries cost.
//!
//! Matching stays MPI's, by three rules:
//! - queued receives exist only while the message portal's priority list is empty, so they
//!   are all the posted receives there are, and the queue's order is post order;
//! - no queued unexpected message matches a queued receive: a receive that would match one is
//!   posted as an entry (which takes it), after every queued receive has been posted as an
//!   entry in order ("materialised"), since they are older;
//! - anything queued as unexpected while receives are queued (a rendezvous header, or a message
//!   another caller's progress polled, the thread-mode agent's included) is compared with the
//!   queue before the engine takes another message; a match materialises the queue, so the
//!   entry of the receive it belongs to takes it and nothing newer overtakes it.
//!
//! In thread mode the agent stands aside while a host thread polls in a wait, so the messages
//! usually reach the queue; one the agent handles meanwhile becomes unexpected (third rule).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use rdcoll_transport::{Rank, TransportError};

use super::fast::{deliver_eager, eager_on_message_portal, poll_one, Polled, Selector};
use super::{Context, Engine, Inner, Req, Source, Status, TagSel};
use crate::error::Result;
use crate::event::Event;
use crate::state::State;

/// Fabric events one progress pass handles at most (as the agent's own pass).
const BATCH: usize = 64;

/// One queued receive.
pub(super) struct Light {
    id: u64,
    /// The caller's buffer (a plain number so the engine stays `Send`).
    addr: usize,
    capacity: usize,
    source: Source,
    tag: TagSel,
    context: Context,
    sel: Selector,
}

/// The queued receives, and how far the unexpected headers were compared with them.
#[derive(Default)]
pub(super) struct Lights {
    queue: VecDeque<Light>,
    /// `State::queued_unexpected` when the queue was last compared.
    seen_count: u64,
    /// The newest unexpected header (by sequence number) compared with the queue.
    seen_seq: u64,
    /// When `seen_count` was taken, no unexpected message waited on the message portal.
    /// With the count unchanged since, none waits now (nothing was queued, and taking only
    /// removes), so a receive can join a non-empty queue without the state lock.
    clean: bool,
}

impl Lights {
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Compares the unexpected headers queued on the message portal since the last look with
    /// the queue; true if one matches a queued receive (then the queue must be materialised).
    fn refresh(&mut self, st: &State, engine: &Engine) -> bool {
        let count = st.queued_unexpected.load(Ordering::Relaxed);
        if count == self.seen_count {
            return false;
        }
        let since = self.seen_seq;
        self.seen_count = count;
        // Whatever was queued may still wait (it matched nobody here): only a look at the
        // whole portal, in `post_light`, makes the queue clean again.
        self.clean = false;
        self.seen_seq = st.next_seq;
        let Some(portal) = st.portals.get(engine.pt_msg.0) else {
            return false;
        };
        portal
            .unexpected
            .range(since + 1..)
            .filter(|(_, u)| !u.get)
            .any(|(_, u)| {
                self.queue
                    .iter()
                    .any(|l| l.sel.accepts(u.initiator, u.match_bits))
            })
    }

    fn remove(&mut self, id: u64) -> Option<Light> {
        let at = self.queue.iter().position(|l| l.id == id)?;
        self.queue.remove(at)
    }
}

/// What posting a receive decided.
pub(super) enum Posted {
    /// Queued (its id).
    Queued(u64),
    /// It must be an entry: something is posted as one, an unexpected message matches it, or
    /// its buffer is larger than the eager limit (the queue, if any, has been materialised
    /// first).
    AsEntry,
}

impl Engine {
    /// Queues a receive if the rules of this module allow it.
    ///
    /// # Safety
    /// As for [`Engine::irecv`].
    pub(super) unsafe fn post_light(
        &self,
        inner: &mut Inner,
        addr: usize,
        capacity: usize,
        source: Source,
        tag: TagSel,
        context: Context,
    ) -> Result<Posted> {
        if capacity > self.cfg.eager_limit {
            // A buffer that fits a rendezvous message likely gets one. Its header, taken for a
            // queued receive, would wait as unexpected until the queue is materialised, and
            // its first chunk would be copied twice: post it as an entry at once.
            if !inner.lights.is_empty() {
                self.materialize_lights(inner);
            }
            return Ok(Posted::AsEntry);
        }
        let sel = Selector::new(context, tag, source);
        let lights = &inner.lights;
        if !lights.queue.is_empty()
            && lights.clean
            && self.ni.queued_unexpected() == lights.seen_count
        {
            // Nothing is posted as an entry (first rule) and no unexpected message waits:
            // checked as of `seen_count`, unchanged. A header queued concurrently from now on
            // is compared with the queue, this receive included, by the next progress pass.
            return Ok(Posted::Queued(
                self.queue_light(inner, addr, capacity, source, tag, context, sel),
            ));
        }
        let st = self.ni.lock_state();
        let Some(portal) = st.portals.get(self.pt_msg.0) else {
            return Ok(Posted::AsEntry);
        };
        if !portal.priority.is_empty() {
            // Entries are posted (so, by the first rule, nothing is queued): join them.
            return Ok(Posted::AsEntry);
        }
        let stale = inner.lights.refresh(&st, self);
        if stale || super::fast::unexpected_match(&st, self, sel) {
            drop(st);
            self.materialize_lights(inner);
            return Ok(Posted::AsEntry);
        }
        if inner.lights.queue.is_empty() {
            // Everything queued so far was compared with the (empty) queue.
            inner.lights.seen_count = st.queued_unexpected.load(Ordering::Relaxed);
            inner.lights.seen_seq = st.next_seq;
        }
        inner.lights.clean = !portal.unexpected.values().any(|u| !u.get);
        drop(st);
        Ok(Posted::Queued(self.queue_light(
            inner, addr, capacity, source, tag, context, sel,
        )))
    }

    /// Appends a receive to the queue; its request id.
    #[allow(clippy::too_many_arguments)]
    fn queue_light(
        &self,
        inner: &mut Inner,
        addr: usize,
        capacity: usize,
        source: Source,
        tag: TagSel,
        context: Context,
        sel: Selector,
    ) -> u64 {
        let id = Engine::new_id(inner);
        inner.lights.queue.push_back(Light {
            id,
            addr,
            capacity,
            source,
            tag,
            context,
            sel,
        });
        inner.reqs.insert(id, Req::Light(source));
        id
    }

    /// Posts every queued receive as an entry, oldest first, under its own id.
    pub(super) fn materialize_lights(&self, inner: &mut Inner) {
        let queue = std::mem::take(&mut inner.lights.queue);
        for l in queue {
            // SAFETY: the buffer was lent to this request by the caller of `irecv`, valid and
            // untouched until the request completes; it moves from the queue to an entry.
            let posted = unsafe {
                self.post_recv_as(
                    inner,
                    l.id,
                    l.addr as *mut u8,
                    l.capacity,
                    l.source,
                    l.tag,
                    l.context,
                )
            };
            if let Err(e) = posted {
                inner.reqs.insert(l.id, Req::Done(Err(e)));
            }
        }
    }

    /// The engine's progress while receives are queued: polls the fabric itself, hands each
    /// eager message the first queued receive that matches it takes to that receive, and
    /// everything else to the agent; then collects the agent's events.
    pub(super) fn progress_lights(
        &self,
        inner: &mut Inner,
        events: &mut Vec<Event>,
    ) -> Result<usize> {
        let mut handled = 0;
        let mut materialize = false;
        let drained;
        {
            let mut st = self.ni.lock_state();
            for _ in 0..BATCH {
                if inner.lights.refresh(&st, self) {
                    materialize = true;
                    break;
                }
                let lights = &mut inner.lights;
                let mut taken = None;
                let take = |src, data: &[u8]| take_for_queue(self, lights, src, data);
                match poll_one(&mut st, &mut taken, take) {
                    Polled::Nothing => break,
                    Polled::Other | Polled::Taken => handled += 1,
                }
                if let Some((id, result)) = taken {
                    inner.reqs.insert(id, Req::Done(result));
                }
                if inner.lights.is_empty() {
                    break;
                }
            }
            // What the last event of the pass queued as unexpected is compared too, so that a
            // probe after this pass cannot report a message a queued receive must take.
            if !materialize && inner.lights.refresh(&st, self) {
                materialize = true;
            }
            if handled > 0 {
                super::fast::fire(&mut st);
            }
            drained = drain(&mut st, self, events);
        }
        if handled > 0 {
            // Host threads asleep on the agent's notifications (thread mode).
            self.ni.notify_changed();
        }
        if materialize {
            self.materialize_lights(inner);
        }
        drained.map(|()| handled)
    }

    /// The result of a queued receive whose sender failed (it would wait forever), taking it
    /// off the queue; `None` while it may still get a message.
    pub(super) fn check_light(
        &self,
        inner: &mut Inner,
        id: u64,
        source: Source,
    ) -> Option<Result<Status>> {
        let dead = super::recv::peer_gone(self, source)?;
        // The sender's last messages may wait as unexpected (another caller's progress polled
        // them): then the receive must take its message, not fail.
        let st = self.ni.lock_state();
        let sel = inner.lights.queue.iter().find(|l| l.id == id)?.sel;
        if inner.lights.refresh(&st, self) || super::fast::unexpected_match(&st, self, sel) {
            drop(st);
            self.materialize_lights(inner);
            return None;
        }
        drop(st);
        inner.lights.remove(id)?;
        Some(Err(TransportError::PeerFailed(dead).into()))
    }

    /// Cancels a queued receive: it leaves the queue with a cancelled status.
    pub(super) fn cancel_light(&self, inner: &mut Inner, id: u64) -> Option<Result<Status>> {
        inner.lights.remove(id)?;
        Some(Ok(Status {
            source: 0,
            tag: 0,
            len: 0,
            cancelled: true,
        }))
    }
}

/// Copies an eager message into the first queued receive it matches and takes that receive
/// off the queue: its id and result. `None` if `data` is anything else or matches none.
fn take_for_queue(
    engine: &Engine,
    lights: &mut Lights,
    src: Rank,
    data: &[u8],
) -> Option<(u64, Result<Status>)> {
    let (bits, payload) = eager_on_message_portal(engine, data)?;
    let at = lights.queue.iter().position(|l| l.sel.accepts(src, bits))?;
    let l = lights.queue.remove(at)?;
    let buf: &mut [u8] = if l.capacity == 0 {
        &mut []
    } else {
        // SAFETY: the receive's buffer, lent to it by the caller of `irecv` and untouched by
        // anything else until the request completes, which this copy does.
        unsafe { std::slice::from_raw_parts_mut(l.addr as *mut u8, l.capacity) }
    };
    Some((l.id, deliver_eager(src, bits, payload, buf)))
}

/// Moves the engine's queued events to `events`.
fn drain(st: &mut State, engine: &Engine, events: &mut Vec<Event>) -> Result<()> {
    let q = st.eqs.must(engine.eq.0)?;
    while let Some(ev) = q.pop()? {
        events.push(ev);
    }
    Ok(())
}
