//! A single-producer, single-consumer byte ring in shared memory, one per ordered pair of ranks.
//!
//! Each record is a 16-byte header (`seq:u64, len:u32, kind:u32`) and its payload, padded to
//! whole cache lines, so every record starts a line: a small message is exactly one line for
//! the consumer to miss on, and no record ever shares its line with the next one (a filler in
//! the line the consumer polls, then the record in the next, cost two transfers per message:
//! 70 vs 40 ns one-way in `raw_ring_pingpong_between_processes`). `seq` is the record's absolute
//! position plus one, stored last with release order, so the consumer polls the very line the
//! record starts on and a record from an earlier lap can never be mistaken for a new one.
//! Before it publishes a record the producer zeroes the sequence word where the next record
//! will start, so stale bytes of an earlier lap (a payload that happened to hold the right
//! number) are never read as a header. The consumer publishes its position for the producer,
//! which reads it only when its cached view says the ring is full.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of a record header.
pub(crate) const REC_HEADER: usize = 16;
/// Kind of the filler record that skips ahead to the ring's start.
const K_WRAP: u32 = u32::MAX;
/// Cache-line size: every record starts on a line and covers whole lines.
const LINE: usize = 64;
/// Space kept free past every record so the next record's sequence word can be cleared.
const NEXT_SEQ_GUARD: u64 = 16;

fn padded(len: usize) -> usize {
    (REC_HEADER + len).next_multiple_of(LINE)
}

/// # Safety
/// `data + off` must be 8-aligned and inside a live ring of which it is a record start.
unsafe fn seq_at(data: *mut u8, off: usize) -> &'static AtomicU64 {
    // SAFETY: the caller guarantees alignment and liveness of the ring memory.
    unsafe { &*(data.add(off) as *const AtomicU64) }
}

/// The producer's private state for one ring.
#[derive(Default)]
pub(crate) struct Producer {
    tail: u64,
    cached_head: u64,
}

impl Producer {
    /// Appends a record made of `parts`, or returns false when the ring lacks space.
    ///
    /// # Safety
    /// `data` must point to a ring of `cap` bytes (a power of two of at least a cache line,
    /// 16-aligned; 64-aligned for records to fall on lines) that only this producer writes,
    /// and `head` must be its consumer position.
    #[inline]
    pub(crate) unsafe fn try_push(
        &mut self,
        data: *mut u8,
        cap: usize,
        head: &AtomicU64,
        kind: u32,
        parts: &[&[u8]],
    ) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let size = padded(len);
        let mut off = (self.tail as usize) & (cap - 1);
        // Skip to the ring's start if the record does not fit before its end.
        let filler = if cap - off < size { cap - off } else { 0 };
        let need = (filler + size) as u64 + NEXT_SEQ_GUARD;
        if self.tail + need - self.cached_head > cap as u64 {
            self.cached_head = head.load(Ordering::Acquire);
            if self.tail + need - self.cached_head > cap as u64 {
                return false;
            }
        }
        // SAFETY (whole block): offsets stay inside the ring (checked sizes, records of whole
        // lines), and the space between tail and head + cap (which includes the guard past
        // this record) belongs to the producer.
        unsafe {
            if filler > 0 {
                let h = data.add(off);
                std::ptr::write(h.add(8) as *mut u32, (filler - REC_HEADER) as u32);
                std::ptr::write(h.add(12) as *mut u32, K_WRAP);
                let next = (off + filler) & (cap - 1);
                seq_at(data, next).store(0, Ordering::Relaxed);
                seq_at(data, off).store(self.tail + 1, Ordering::Release);
                self.tail += filler as u64;
                off = next;
            }
            let h = data.add(off);
            let mut p = h.add(REC_HEADER);
            for part in parts {
                crate::copy_bytes(std::slice::from_raw_parts_mut(p, part.len()), part);
                p = p.add(part.len());
            }
            std::ptr::write(h.add(8) as *mut u32, len as u32);
            std::ptr::write(h.add(12) as *mut u32, kind);
            // Ordered before the store below by its release semantics.
            seq_at(data, (off + size) & (cap - 1)).store(0, Ordering::Relaxed);
            // A plain release store: a consumer that may be asleep is woken by the caller's
            // `Inner::ring_doorbell`, which orders this store before its look at the sleepers.
            seq_at(data, off).store(self.tail + 1, Ordering::Release);
        }
        self.tail += size as u64;
        true
    }
}

/// Whether a record waits at the consumer position published in `head`, without taking the
/// consumer's lock: lets an idle poll cost a few plain loads.
///
/// # Safety
/// `data` must point to a live ring of `cap` bytes whose consumer publishes its position in
/// `head`.
pub(crate) unsafe fn peek_ready(data: *mut u8, cap: usize, head: &AtomicU64) -> bool {
    let h = head.load(Ordering::Relaxed);
    // SAFETY: positions are record starts inside the ring (the consumer only publishes those).
    unsafe { seq_at(data, (h as usize) & (cap - 1)).load(Ordering::Acquire) == h + 1 }
}

/// The consumer's private state for one ring.
#[derive(Default)]
pub(crate) struct Consumer {
    head: u64,
}

/// A record the ring held something malformed: the producer broke the format.
#[derive(Debug)]
pub(crate) struct Corrupt;

impl Consumer {
    /// Hands the next record to `f` (kind, payload) and releases its space.
    ///
    /// # Safety
    /// `data` must point to a live ring of `cap` bytes that only this consumer reads, and
    /// `head` must be its published consumer position.
    #[inline(always)]
    pub(crate) unsafe fn try_pop<R>(
        &mut self,
        data: *mut u8,
        cap: usize,
        head: &AtomicU64,
        f: impl FnOnce(u32, &[u8]) -> R,
    ) -> Result<Option<R>, Corrupt> {
        loop {
            let off = (self.head as usize) & (cap - 1);
            // SAFETY (whole block): `off` is a record start; after the acquire load matched,
            // the producer has finished writing the record and will not touch it until the
            // head moves past it. Lengths are checked against the ring before any slice.
            unsafe {
                if seq_at(data, off).load(Ordering::Acquire) != self.head + 1 {
                    return Ok(None);
                }
                let h = data.add(off);
                let len = std::ptr::read(h.add(8) as *const u32) as usize;
                let kind = std::ptr::read(h.add(12) as *const u32);
                if kind == K_WRAP {
                    // A filler covers its header plus `len` bytes (to the ring's end).
                    let skip = REC_HEADER + len;
                    if skip > cap - off || !skip.is_multiple_of(LINE) {
                        return Err(Corrupt);
                    }
                    self.head += skip as u64;
                    head.store(self.head, Ordering::Release);
                    continue;
                }
                if padded(len) > cap - off {
                    return Err(Corrupt);
                }
                let payload = std::slice::from_raw_parts(h.add(REC_HEADER), len);
                let r = f(kind, payload);
                self.head += padded(len) as u64;
                head.store(self.head, Ordering::Release);
                return Ok(Some(r));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_keeps_order_across_threads() {
        const CAP: usize = 4096;
        #[repr(align(64))]
        struct Mem([u8; CAP]);
        let mem = Box::leak(Box::new(Mem([0; CAP])));
        let data = mem.0.as_mut_ptr() as usize;
        let head: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let producer = std::thread::spawn(move || {
            let mut p = Producer::default();
            for i in 0u32..20_000 {
                let len = (i as usize * 7) % 300;
                let body = vec![i as u8; len];
                // SAFETY: the leaked ring is only written by this thread.
                while !unsafe { p.try_push(data as *mut u8, CAP, head, i, &[&body]) } {
                    std::thread::yield_now();
                }
            }
        });
        let mut c = Consumer::default();
        let mut next = 0u32;
        while next < 20_000 {
            // SAFETY: the leaked ring is only read by this thread.
            let got =
                unsafe { c.try_pop(data as *mut u8, CAP, head, |k, p| (k, p.to_vec())) }.unwrap();
            match got {
                Some((k, p)) => {
                    assert_eq!(k, next);
                    assert_eq!(p.len(), (next as usize * 7) % 300);
                    assert!(p.iter().all(|&b| b == next as u8));
                    next += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        producer.join().unwrap();
    }
    #[test]
    fn stale_payload_of_an_earlier_lap_is_never_read_as_a_record() {
        const CAP: usize = 4096;
        #[repr(align(64))]
        struct Mem([u8; CAP]);
        let mut mem = Box::new(Mem([0; CAP]));
        let data = mem.0.as_mut_ptr();
        let head = AtomicU64::new(0);
        let (mut p, mut c) = (Producer::default(), Consumer::default());
        // Lap one: a payload whose every word holds the sequence number a record starting
        // there one lap later would carry.
        let len = CAP - 80;
        let poison: Vec<u8> = (0..len / 8)
            .flat_map(|j| ((REC_HEADER + 8 * j + CAP + 1) as u64).to_le_bytes())
            .collect();
        // SAFETY: `mem` is a ring of CAP bytes used by this thread alone.
        unsafe {
            assert!(p.try_push(data, CAP, &head, 9, &[&poison]));
            let got = c.try_pop(data, CAP, &head, |k, b| (k, b.len())).unwrap();
            assert_eq!(got, Some((9, len)));
            // Lap two: a filler to the end, then a small record at the start; the record
            // after it would begin inside the poisoned payload.
            assert!(p.try_push(data, CAP, &head, 5, &[&[1u8; 32]]));
            let got = c.try_pop(data, CAP, &head, |k, b| (k, b.to_vec())).unwrap();
            assert_eq!(got, Some((5, vec![1u8; 32])));
            assert!(matches!(c.try_pop(data, CAP, &head, |_, _| ()), Ok(None)));
            assert!(!peek_ready(data, CAP, &head));
        }
    }
}

#[cfg(test)]
mod latency_probe {
    use super::*;

    /// Raw ring ping-pong between two processes, no fabric around it (run by hand with
    /// `--ignored --nocapture` to see how much of the message latency the ring itself costs).
    #[test]
    #[ignore]
    fn raw_ring_pingpong_between_processes() {
        const CAP: usize = 1 << 18;
        const N: u64 = 400_000;
        let total = 2 * (CAP + 4096);
        // SAFETY: an anonymous shared mapping, used only by this test and its child.
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as *mut u8;
        let ring = |i: usize| -> (*mut u8, &'static AtomicU64) {
            // SAFETY: inside the mapping, page aligned.
            unsafe {
                (
                    mem.add(i * (CAP + 4096) + 4096),
                    &*(mem.add(i * (CAP + 4096)) as *const AtomicU64),
                )
            }
        };
        let (a_data, a_head) = ring(0);
        let (b_data, b_head) = ring(1);
        // Payloads of one line's record, one that once needed a filler, two lines' and more.
        const SIZES: [usize; 4] = [8, 24, 40, 100];
        let run =
            |out: (*mut u8, &AtomicU64), inp: (*mut u8, &AtomicU64), n: usize, first: bool| {
                let mut p = Producer::default();
                let mut c = Consumer::default();
                let msg = vec![0u8; n];
                let mut t = std::time::Instant::now();
                for i in 0..N {
                    if i == N / 10 {
                        t = std::time::Instant::now();
                    }
                    if first {
                        // SAFETY: each ring has one producer and one consumer process.
                        unsafe { while !p.try_push(out.0, CAP, out.1, 1, &[&msg]) {} }
                    }
                    // SAFETY: as above.
                    while unsafe { c.try_pop(inp.0, CAP, inp.1, |_, _| ()) }
                        .ok()
                        .flatten()
                        .is_none()
                    {
                        std::hint::spin_loop();
                    }
                    if !first {
                        // SAFETY: as above.
                        unsafe { while !p.try_push(out.0, CAP, out.1, 1, &[&msg]) {} }
                    }
                }
                t.elapsed().as_nanos() as f64 / (N - N / 10) as f64 / 2.0
            };
        // SAFETY: the child only runs the ring loop and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            for n in SIZES {
                run((b_data, b_head), (a_data, a_head), n, false);
            }
            // SAFETY: leaving the forked child.
            unsafe { libc::_exit(0) };
        }
        for n in SIZES {
            let ns = run((a_data, a_head), (b_data, b_head), n, true);
            println!("raw ring one-way, {n} B: {ns:.0} ns");
        }
        // SAFETY: reaping the child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    }
}
