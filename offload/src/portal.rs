//! A portal table entry: its priority and overflow lists, the unexpected headers that arrivals on
//! the overflow list leave, and its flow-control state (SEMANTICS.md §1, §3, §7).

use std::collections::BTreeMap;

use rdcoll_transport::Rank;

use crate::event::Location;
use crate::match_list::MatchList;
use crate::me::Me;
use crate::mpi_lists::{spec_of, DirectRecv, MpiLists, Posted};
use crate::types::{EqHandle, List};

/// What an arrival on the overflow list leaves behind for a later append or search.
#[derive(Debug, Clone)]
pub(crate) struct Unexpected {
    pub(crate) initiator: Rank,
    pub(crate) match_bits: u64,
    pub(crate) rlength: usize,
    pub(crate) mlength: usize,
    pub(crate) remote_offset: usize,
    pub(crate) hdr_data: u64,
    /// The initiator's region the rest of the message can be read from (a publishing put).
    pub(crate) published: Option<u64>,
    /// Where the data lies (or is being pulled to), in the overflow entry's buffer.
    pub(crate) start: Location,
    /// The transfer still bringing the data in, if it has not finished.
    pub(crate) pending: Option<rdcoll_transport::OpId>,
    /// Left by a get (served from the overflow entry) rather than a put.
    pub(crate) get: bool,
}

/// Names an unexpected header of a portal, while it is queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderRef {
    /// On a general portal: its sequence number.
    Seq(u64),
    /// On an MPI portal: its place in the matching engine.
    Mpi(rdcoll_matching::UnexpectedHandle),
}

/// One portal table entry.
pub(crate) struct Portal {
    pub(crate) enabled: bool,
    pub(crate) flow_control: bool,
    pub(crate) eq: Option<EqHandle>,
    /// General portals: the priority list. MPI portals keep theirs in `mpi`.
    pub(crate) priority: MatchList,
    pub(crate) overflow: MatchList,
    /// General portals: unexpected headers, in arrival order.
    unexpected: BTreeMap<u64, Unexpected>,
    /// MPI portals: posted receives and unexpected headers, kept by the matching engine.
    pub(crate) mpi: Option<Box<MpiLists>>,
    pub(crate) max_unexpected: usize,
}

/// The entry an arrival selected.
pub(crate) enum Chosen {
    /// An entry still linked on `List` under this sequence number (general portals, and the
    /// overflow list of MPI portals).
    Linked(List, u64),
    /// A use-once entry of an MPI portal's priority list, taken off it.
    Taken(Box<Me>),
    /// A direct receive of an MPI portal, taken off it.
    Direct(DirectRecv),
}

impl Portal {
    pub(crate) fn new(
        eq: Option<EqHandle>,
        flow_control: bool,
        max_unexpected: usize,
        mpi: bool,
    ) -> Self {
        Portal {
            enabled: true,
            flow_control,
            eq,
            priority: MatchList::default(),
            overflow: MatchList::default(),
            unexpected: BTreeMap::new(),
            mpi: mpi.then(Box::default),
            max_unexpected,
        }
    }

    pub(crate) fn list(&mut self, list: List) -> &mut MatchList {
        match list {
            List::Priority => &mut self.priority,
            List::Overflow => &mut self.overflow,
        }
    }

    /// The entry an incoming message matches: the first on the priority list, else the first
    /// on the overflow list. On an MPI portal a priority receive it matches is taken off the
    /// list here (it is use-once).
    pub(crate) fn choose(
        &mut self,
        initiator: Rank,
        bits: u64,
        remote_offset: usize,
        rlength: usize,
    ) -> Option<Chosen> {
        if let Some(mpi) = self.mpi.as_mut() {
            match mpi.take_posted(initiator, bits) {
                Some(Posted::Entry { me, .. }) => return Some(Chosen::Taken(me)),
                Some(Posted::Direct(d)) => return Some(Chosen::Direct(d)),
                None => {}
            }
        } else if let Some(seq) =
            self.priority
                .first_accepting(initiator, bits, remote_offset, rlength)
        {
            return Some(Chosen::Linked(List::Priority, seq));
        }
        self.overflow
            .first_accepting(initiator, bits, remote_offset, rlength)
            .map(|seq| Chosen::Linked(List::Overflow, seq))
    }

    /// Unexpected headers queued now.
    pub(crate) fn unexpected_len(&self) -> usize {
        match &self.mpi {
            Some(mpi) => mpi.unexpected_len(),
            None => self.unexpected.len(),
        }
    }

    /// Queues an unexpected header (`seq`: its arrival sequence number, for general portals).
    pub(crate) fn queue_header(&mut self, seq: u64, u: Unexpected) -> HeaderRef {
        match self.mpi.as_mut() {
            Some(mpi) => HeaderRef::Mpi(mpi.queue_header(u)),
            None => {
                self.unexpected.insert(seq, u);
                HeaderRef::Seq(seq)
            }
        }
    }

    /// A queued header, to update.
    pub(crate) fn header_mut(&mut self, h: HeaderRef) -> Option<&mut Unexpected> {
        match (h, self.mpi.as_mut()) {
            (HeaderRef::Mpi(h), Some(mpi)) => mpi.header_mut(h),
            (HeaderRef::Seq(s), None) => self.unexpected.get_mut(&s),
            _ => None,
        }
    }

    /// Removes a queued header that must not be taken (its data never arrived).
    pub(crate) fn withdraw_header(&mut self, h: HeaderRef) {
        match (h, self.mpi.as_mut()) {
            (HeaderRef::Mpi(h), Some(mpi)) => mpi.withdraw_header(h),
            (HeaderRef::Seq(s), None) => {
                self.unexpected.remove(&s);
            }
            _ => {}
        }
    }

    /// Takes the unexpected headers `me` would take, oldest first (all of them, or the first
    /// only); `check_op` skips them all unless `me` accepts puts (appends and search-delete
    /// check, search-only does not). On an MPI portal `me` must have an MPI shape
    /// (`mpi_lists::spec_of`); headers there are all puts.
    pub(crate) fn take_headers(&mut self, me: &Me, all: bool, check_op: bool) -> Vec<Unexpected> {
        if let Some(mpi) = self.mpi.as_mut() {
            let Some(spec) = spec_of(me.match_bits, me.ignore_bits, me.match_id) else {
                return Vec::new();
            };
            if check_op && !me.options.op_put {
                return Vec::new();
            }
            let mut taken = Vec::new();
            while let Some(u) = mpi.take_header(&spec) {
                taken.push(u);
                if !all {
                    break;
                }
            }
            return taken;
        }
        let seqs = self.general_headers_for(me, all, check_op);
        seqs.iter()
            .filter_map(|s| self.unexpected.remove(s))
            .collect()
    }

    /// The first unexpected header `me` would take, left in place (a search).
    pub(crate) fn first_header(&mut self, me: &Me) -> Option<Unexpected> {
        if let Some(mpi) = &mut self.mpi {
            let spec = spec_of(me.match_bits, me.ignore_bits, me.match_id)?;
            return mpi.probe(&spec).cloned();
        }
        let seq = *self.general_headers_for(me, false, false).first()?;
        self.unexpected.get(&seq).cloned()
    }

    /// On a general portal: the headers `me` would take, oldest first, by a walk.
    fn general_headers_for(&self, me: &Me, all: bool, check_op: bool) -> Vec<u64> {
        let hits = self.unexpected.iter().filter(|(_, u)| {
            let allowed = if u.get {
                me.options.op_get
            } else {
                me.options.op_put
            };
            me.accepts(u.initiator, u.match_bits, u.remote_offset, u.rlength)
                && (allowed || !check_op)
        });
        if all {
            hits.map(|(&s, _)| s).collect()
        } else {
            hits.take(1).map(|(&s, _)| s).collect()
        }
    }
}
