//! Tables of the network interface's objects, with ids that are not reused while the table
//! lives (up to 2^32 allocations), so a stale handle names nothing instead of a newer object.
//! The first ids (objects made at set-up, such as the message layer's portals, looked up for
//! every message) sit in a small array indexed by id; later ones in a hash map.

use rustc_hash::FxHashMap as HashMap;

use crate::error::{invalid, OffloadError, Result};

/// Ids below this are stored in the array.
const DIRECT: u32 = 64;

pub(crate) struct Table<T> {
    direct: Vec<Option<T>>,
    items: HashMap<u32, T>,
    live: usize,
    next: u32,
    limit: usize,
    what: &'static str,
}

impl<T> Table<T> {
    pub(crate) fn new(what: &'static str, limit: usize) -> Self {
        Table {
            direct: Vec::new(),
            items: HashMap::default(),
            live: 0,
            next: 0,
            limit,
            what,
        }
    }

    fn contains(&self, id: u32) -> bool {
        self.get(id).is_some()
    }

    /// Stores `value` under a fresh id; `NoSpace` at the limit of live objects.
    pub(crate) fn insert(&mut self, value: T) -> Result<u32> {
        if self.live >= self.limit {
            return Err(OffloadError::NoSpace {
                what: self.what,
                limit: self.limit,
            });
        }
        while self.contains(self.next) {
            self.next = self.next.wrapping_add(1);
        }
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        if id < DIRECT {
            let i = id as usize;
            if self.direct.len() <= i {
                self.direct.resize_with(i + 1, || None);
            }
            self.direct[i] = Some(value);
        } else {
            self.items.insert(id, value);
        }
        self.live += 1;
        Ok(id)
    }

    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        if id < DIRECT {
            return self.direct.get(id as usize)?.as_ref();
        }
        self.items.get(&id)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        if id < DIRECT {
            return self.direct.get_mut(id as usize)?.as_mut();
        }
        self.items.get_mut(&id)
    }

    /// The object `id`, or an error naming what was looked for.
    #[inline]
    pub(crate) fn must(&mut self, id: u32) -> Result<&mut T> {
        let what = self.what;
        self.get_mut(id)
            .ok_or_else(|| invalid(format!("{what} {id} does not exist")))
    }

    pub(crate) fn remove(&mut self, id: u32) -> Option<T> {
        let removed = if id < DIRECT {
            self.direct.get_mut(id as usize)?.take()
        } else {
            self.items.remove(&id)
        };
        if removed.is_some() {
            self.live -= 1;
        }
        removed
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.direct.iter().flatten().chain(self.items.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_not_reused_and_the_limit_holds() {
        let mut t = Table::new("thing", 2);
        let a = t.insert('a').unwrap();
        let b = t.insert('b').unwrap();
        assert!(matches!(t.insert('c'), Err(OffloadError::NoSpace { .. })));
        t.remove(a);
        let c = t.insert('c').unwrap();
        assert!(c != a && c != b);
        assert!(t.get(a).is_none());
        assert!(t.must(a).is_err());
    }

    #[test]
    fn ids_past_the_array_behave_the_same() {
        let mut t = Table::new("thing", 1000);
        let ids: Vec<u32> = (0..200).map(|i| t.insert(i).unwrap()).collect();
        assert_eq!(t.values().count(), 200);
        for &id in &ids {
            assert_eq!(t.get(id), Some(&id));
        }
        for &id in ids.iter().step_by(2) {
            assert_eq!(t.remove(id), Some(id));
            assert_eq!(t.remove(id), None);
        }
        assert_eq!(t.values().count(), 100);
        let fresh = t.insert(7).unwrap();
        assert!(!ids.contains(&fresh), "an id is not reused");
        assert!(t.must(ids[0]).is_err() && t.must(ids[1]).is_ok());
    }
}
