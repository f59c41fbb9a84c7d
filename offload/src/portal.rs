//! A portal table entry: its priority and overflow lists, the unexpected headers that arrivals on
//! the overflow list leave, and its flow-control state (SEMANTICS.md §1, §3, §7).

use std::collections::BTreeMap;

use rdcoll_transport::Rank;

use crate::event::Location;
use crate::match_list::MatchList;
use crate::me::Me;
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
    /// Where the data lies (or is being pulled to), in the overflow entry's buffer.
    pub(crate) start: Location,
    /// The transfer still bringing the data in, if it has not finished.
    pub(crate) pending: Option<rdcoll_transport::OpId>,
    /// Left by a get (served from the overflow entry) rather than a put.
    pub(crate) get: bool,
}

/// One portal table entry.
#[derive(Debug)]
pub(crate) struct Portal {
    pub(crate) enabled: bool,
    pub(crate) flow_control: bool,
    pub(crate) eq: Option<EqHandle>,
    pub(crate) priority: MatchList,
    pub(crate) overflow: MatchList,
    /// In arrival order.
    pub(crate) unexpected: BTreeMap<u64, Unexpected>,
    pub(crate) max_unexpected: usize,
}

impl Portal {
    pub(crate) fn new(eq: Option<EqHandle>, flow_control: bool, max_unexpected: usize) -> Self {
        Portal {
            enabled: true,
            flow_control,
            eq,
            priority: MatchList::default(),
            overflow: MatchList::default(),
            unexpected: BTreeMap::new(),
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
    /// on the overflow list.
    pub(crate) fn find(
        &self,
        initiator: Rank,
        bits: u64,
        remote_offset: usize,
        rlength: usize,
    ) -> Option<(List, u64)> {
        let first =
            |entries: &MatchList| entries.first_accepting(initiator, bits, remote_offset, rlength);
        first(&self.priority)
            .map(|s| (List::Priority, s))
            .or_else(|| first(&self.overflow).map(|s| (List::Overflow, s)))
    }

    /// Unexpected headers `me` would take, oldest first (all of them, or the first only);
    /// `check_op` skips them all unless `me` accepts puts (appends and search-delete check,
    /// search-only does not).
    pub(crate) fn unexpected_for(&self, me: &Me, all: bool, check_op: bool) -> Vec<u64> {
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
