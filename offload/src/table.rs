//! Tables of the network interface's objects, with ids that are not reused while the table
//! lives (up to 2^32 allocations), so a stale handle names nothing instead of a newer object.

use rustc_hash::FxHashMap as HashMap;

use crate::error::{invalid, OffloadError, Result};

pub(crate) struct Table<T> {
    items: HashMap<u32, T>,
    next: u32,
    limit: usize,
    what: &'static str,
}

impl<T> Table<T> {
    pub(crate) fn new(what: &'static str, limit: usize) -> Self {
        Table {
            items: HashMap::default(),
            next: 0,
            limit,
            what,
        }
    }

    /// Stores `value` under a fresh id; `NoSpace` at the limit of live objects.
    pub(crate) fn insert(&mut self, value: T) -> Result<u32> {
        if self.items.len() >= self.limit {
            return Err(OffloadError::NoSpace {
                what: self.what,
                limit: self.limit,
            });
        }
        while self.items.contains_key(&self.next) {
            self.next = self.next.wrapping_add(1);
        }
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.items.insert(id, value);
        Ok(id)
    }

    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        self.items.get(&id)
    }

    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        self.items.get_mut(&id)
    }

    /// The object `id`, or an error naming what was looked for.
    pub(crate) fn must(&mut self, id: u32) -> Result<&mut T> {
        let what = self.what;
        self.items
            .get_mut(&id)
            .ok_or_else(|| invalid(format!("{what} {id} does not exist")))
    }

    pub(crate) fn remove(&mut self, id: u32) -> Option<T> {
        self.items.remove(&id)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.items.values()
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
}
