//! Reusable scratch buffers for the block collectives: a fresh multi-megabyte buffer per call
//! is a fresh mapping whose every page faults on first touch (and is unmapped again at the
//! end), which cost a 1 MiB scan most of its time. Buffers are 16-byte aligned (for any
//! element type) and kept by the communicator's collectives between calls.

use std::sync::Mutex;

/// Buffers kept between calls (at most a few; the largest stay).
#[derive(Default)]
pub(crate) struct Pool(Mutex<Vec<Vec<u128>>>);

/// Most buffers a pool keeps.
const KEEP: usize = 4;

impl Pool {
    /// A buffer of `len` bytes (contents unspecified), returned to the pool when dropped.
    pub(crate) fn take(&self, len: usize) -> Scratch<'_> {
        let words = len.div_ceil(16);
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let buf = match kept.iter().position(|b| b.len() >= words) {
            Some(i) => kept.swap_remove(i),
            None => vec![0u128; words],
        };
        Scratch {
            pool: self,
            buf,
            len,
        }
    }
}

/// A buffer from a [`Pool`].
pub(crate) struct Scratch<'p> {
    pool: &'p Pool,
    buf: Vec<u128>,
    len: usize,
}

impl Scratch<'_> {
    pub(crate) fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.buf)[..self.len]
    }
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.buf)[..self.len]
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        let mut kept = self.pool.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.push(std::mem::take(&mut self.buf));
        if kept.len() > KEEP {
            // The smallest goes.
            let smallest = (0..kept.len()).min_by_key(|&i| kept[i].len()).unwrap_or(0);
            kept.swap_remove(smallest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_and_are_aligned() {
        let pool = Pool::default();
        let p = {
            let mut a = pool.take(1000);
            a.bytes_mut()[999] = 7;
            assert_eq!(a.bytes().as_ptr() as usize % 16, 0);
            a.bytes().as_ptr() as usize
        };
        let b = pool.take(500);
        assert_eq!(b.bytes().as_ptr() as usize, p);
        assert_eq!(b.bytes().len(), 500);
    }
}
