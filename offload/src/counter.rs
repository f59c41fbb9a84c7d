//! Counting events and the triggered operations waiting on them.
//!
//! Each counter keeps its pending triggers in a map ordered by (threshold, post sequence): an
//! update pops from the front while the front's threshold is reached, so a counter with nothing
//! to fire costs one comparison, several released by one update go in threshold order (ties in
//! post order), and nothing rescans a list (the reference implementation walks all pending
//! operations on every update).

use std::collections::BTreeMap;

use crate::types::{CtHandle, CtValue, GetArgs, PutArgs};

/// An operation a counter releases.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TriggeredOp {
    Put(PutArgs),
    Get(GetArgs),
    CtInc { ct: CtHandle, by: CtValue },
    CtSet { ct: CtHandle, to: CtValue },
}

impl TriggeredOp {
    /// The memory descriptor the operation uses, if it is a put or a get.
    pub(crate) fn md(&self) -> Option<crate::types::MdHandle> {
        match self {
            TriggeredOp::Put(a) => Some(a.md),
            TriggeredOp::Get(a) => Some(a.md),
            TriggeredOp::CtInc { .. } | TriggeredOp::CtSet { .. } => None,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counter {
    pub(crate) value: CtValue,
    triggers: BTreeMap<(u64, u64), TriggeredOp>,
}

impl Counter {
    /// Queues `op` until the counter reaches `threshold`.
    pub(crate) fn add_trigger(&mut self, threshold: u64, seq: u64, op: TriggeredOp) {
        self.triggers.insert((threshold, seq), op);
    }

    /// The next operation whose threshold is reached, if any.
    pub(crate) fn pop_ready(&mut self) -> Option<TriggeredOp> {
        let total = self.value.total();
        let (&(threshold, _), _) = self.triggers.first_key_value()?;
        if threshold <= total {
            self.triggers.pop_first().map(|(_, op)| op)
        } else {
            None
        }
    }

    /// Whether a pending operation puts from or gets into `md`.
    pub(crate) fn uses_md(&self, md: crate::types::MdHandle) -> bool {
        self.triggers.values().any(|op| op.md() == Some(md))
    }

    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.triggers.len()
    }

    /// Drops every pending operation (the counter is freed or its triggers cancelled) and
    /// returns them.
    pub(crate) fn cancel_all(&mut self) -> Vec<TriggeredOp> {
        std::mem::take(&mut self.triggers).into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inc(ct: u32) -> TriggeredOp {
        TriggeredOp::CtInc {
            ct: CtHandle(ct),
            by: CtValue {
                success: 1,
                failure: 0,
            },
        }
    }

    fn target(op: Option<TriggeredOp>) -> Option<u32> {
        match op {
            Some(TriggeredOp::CtInc { ct, .. }) => Some(ct.0),
            _ => None,
        }
    }

    #[test]
    fn releases_in_threshold_order_then_post_order() {
        let mut c = Counter::default();
        c.add_trigger(2, 0, inc(20));
        c.add_trigger(1, 1, inc(10));
        c.add_trigger(2, 2, inc(21));
        assert!(c.pop_ready().is_none());
        c.value.success = 1;
        assert_eq!(target(c.pop_ready()), Some(10));
        assert!(c.pop_ready().is_none());
        c.value.failure = 1;
        assert_eq!(target(c.pop_ready()), Some(20));
        assert_eq!(target(c.pop_ready()), Some(21));
        assert_eq!(c.pending(), 0);
    }
}
