//! Which of its rank's copy slots a thread announces its direct copies in.
//!
//! A direct copy into or out of a peer's heap must be visible to the peer before it starts,
//! so that the peer, withdrawing the region, can wait for it. Counting copies in a shared word
//! costs two locked read-modify-writes per copy, and the second waits for the copy's stores
//! into the peer's cache lines to complete: the main cost of a small put. Instead each thread
//! owns one of `COPY_SLOTS` words in its rank's segment and announces a copy there with plain
//! stores; the withdrawing owner pays for the ordering with a membarrier (see `retract`). A
//! thread takes a slot on its first direct copy and gives it back when it exits; threads
//! beyond `COPY_SLOTS` at once use the shared count.

use std::cell::Cell;

use parking_lot::Mutex;

/// Copy slots per rank (words in the segment's control block).
pub(crate) const COPY_SLOTS: usize = 32;

/// Slots given back by exited threads, and the next never-used one.
static FREE: Mutex<(Vec<usize>, usize)> = Mutex::new((Vec::new(), 0));

/// A thread's slot, returned to `FREE` when the thread exits.
struct Owned(Cell<Option<Option<usize>>>);

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(Some(i)) = self.0.get() {
            FREE.lock().0.push(i);
        }
    }
}

thread_local! {
    static MINE: Owned = const { Owned(Cell::new(None)) };
}

/// This thread's slot, or `None` when every slot is taken by a live thread.
pub(crate) fn this_thread() -> Option<usize> {
    MINE.try_with(|m| match m.0.get() {
        Some(slot) => slot,
        None => {
            let slot = {
                let mut free = FREE.lock();
                free.0.pop().or_else(|| {
                    let i = free.1;
                    (i < COPY_SLOTS).then(|| {
                        free.1 += 1;
                        i
                    })
                })
            };
            m.0.set(Some(slot));
            slot
        }
    })
    .ok()
    .flatten()
}

/// The word a copy into or out of region-table entry `index` of `owner` announces itself with
/// (never 0, which means "no copy").
pub(crate) fn tag(owner: usize, index: usize) -> u64 {
    ((owner as u64 + 1) << 32) | index as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_hold_distinct_slots_and_give_them_back() {
        let mine = this_thread();
        assert_eq!(this_thread(), mine, "a thread keeps its slot");
        let others: Vec<Option<usize>> = (0..4)
            .map(|_| std::thread::spawn(this_thread))
            .map(|h| h.join().unwrap())
            .collect();
        // Each exited before the next started, so they could reuse one slot, never ours.
        assert!(others.iter().all(|s| s.is_some() && *s != mine));
        let held: Vec<Option<usize>> = std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let go_rx = std::sync::Arc::new(parking_lot::Mutex::new(go_rx));
            for _ in 0..3 {
                let (tx, go_rx) = (tx.clone(), go_rx.clone());
                s.spawn(move || {
                    tx.send(this_thread()).unwrap();
                    let _ = go_rx.lock().recv();
                });
            }
            let held = (0..3).map(|_| rx.recv().unwrap()).collect();
            for _ in 0..3 {
                go_tx.send(()).unwrap();
            }
            held
        });
        let mut distinct = held.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            3,
            "live threads hold distinct slots: {held:?}"
        );
        assert!(!held.contains(&mine));
    }

    #[test]
    fn tags_name_owner_and_entry_and_are_never_zero() {
        assert_ne!(tag(0, 0), 0);
        assert_ne!(tag(0, 5), tag(1, 5));
        assert_ne!(tag(2, 5), tag(2, 6));
    }
}
