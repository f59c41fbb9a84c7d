//! The network interface's counting events (Portals `PtlCT*`): allocation, reads, waits,
//! increments and sets, and the triggered operations they release.

use std::time::Duration;

use rdcoll_transport::SpinGuard;

use crate::counter::{Counter, TriggeredOp};
use crate::error::{invalid, Result};
use crate::state::State;
use crate::types::{CtHandle, CtValue};
use crate::Mode;

use crate::Ni;

impl Ni {
    /// A new counting event at zero.
    pub fn ct_alloc(&self) -> Result<CtHandle> {
        self.with(|st| st.cts.insert(Counter::default()).map(CtHandle))
    }

    /// Frees a counter, dropping the triggered operations that wait on it.
    pub fn ct_free(&self, ct: CtHandle) -> Result<()> {
        self.with(|st| {
            let c = st.cts.must(ct.0)?;
            let dropped = c.cancel_all();
            st.triggered_pending -= dropped.len();
            for md in dropped.iter().filter_map(TriggeredOp::md) {
                st.unuse_md(md);
            }
            st.cts.remove(ct.0);
            Ok(())
        })
    }

    /// The counter's value (runs the agent first in inline mode).
    pub fn ct_get(&self, ct: CtHandle) -> Result<CtValue> {
        if self.shared.mode == Mode::Inline {
            self.progress();
        }
        let mut st = self.shared.state.lock();
        let value = st.cts.must(ct.0).map(|c| c.value);
        // A read notifies nobody (a waiter's own look must not end its next sleep: see
        // `Engine::idle`), unless releasing pending triggered operations changed something.
        self.release_fired(st)?;
        value
    }

    /// Releases the triggered operations that changed counters reached, drops the state lock
    /// and, if anything was released, notifies waiters: the end of a call that changes nothing
    /// else (a read, a quiet put).
    pub(crate) fn release_fired(&self, mut st: SpinGuard<'_, State>) -> Result<()> {
        if st.dirty.is_empty() {
            return Ok(());
        }
        let fired = st.fire_ready();
        drop(st);
        self.notify_changed();
        fired
    }

    /// The counter's value as it stands, without running the agent.
    pub fn ct_peek(&self, ct: CtHandle) -> Result<CtValue> {
        Ok(self.shared.state.lock().cts.must(ct.0)?.value)
    }

    /// Waits until `success + failure >= threshold`, or returns early on a failure count.
    pub fn ct_wait(&self, ct: CtHandle, threshold: u64, timeout: Duration) -> Result<CtValue> {
        let mut value = CtValue::default();
        self.wait_until(timeout, |st| {
            value = st.cts.must(ct.0)?.value;
            Ok(value.total() >= threshold || value.failure > 0)
        })?;
        Ok(value)
    }

    /// Adds to a counter (which may release triggered operations). Exactly one of `success`
    /// and `failure` must be non-zero.
    pub fn ct_inc(&self, ct: CtHandle, by: CtValue) -> Result<()> {
        check_increment(by)?;
        self.with(|st| {
            st.ct_change(ct, |v| {
                v.success = v.success.saturating_add(by.success);
                v.failure = v.failure.saturating_add(by.failure);
            })
        })
    }

    /// Sets a counter (which may release triggered operations).
    pub fn ct_set(&self, ct: CtHandle, to: CtValue) -> Result<()> {
        self.with(|st| st.ct_change(ct, |v| *v = to))
    }
}

pub(crate) fn check_increment(by: CtValue) -> Result<()> {
    if (by.success == 0) == (by.failure == 0) {
        return Err(invalid(
            "a counter increment adds to exactly one of success and failure",
        ));
    }
    Ok(())
}
