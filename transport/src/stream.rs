//! Copies with non-temporal stores, for data that other processes read and this one does not.
//!
//! A plain store into a line another core has cached first takes the line back from that core.
//! `perf` of `rdcoll-bench bcast --ranks 4 -m 256K:256K` (counter blocks, 4 ranks on 2
//! cores) put 41 % of all samples in the root's copies into its children's blocks and 3 % in
//! each leaf's copy of the same bytes out of its own block. A non-temporal store writes the
//! line past this core's caches and only invalidates the other copies (docs/ALGORITHMS.md,
//! "Broadcast", shared staging).

/// Copies `len` bytes from `src` to `dst` with non-temporal stores where the CPU has them
/// (x86-64: SSE2 `movntdq` for the 16-byte-aligned middle, plain copies for the ends), and a
/// store fence at the end, so that any store after the call (a flag) becomes visible after the
/// data. Elsewhere a plain copy.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` bytes, and the two must not
/// overlap.
pub(crate) unsafe fn copy_streaming(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let head = dst.align_offset(16).min(len);
        // SAFETY: inside both ranges (the caller's promise); `head < len` or equal.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
        let body = (len - head) & !63;
        let mut i = head;
        while i < head + body {
            // SAFETY: `dst + i` is 16-byte aligned (`head` aligned it, steps of 64) and the 64
            // bytes from `i` are inside both ranges (`i + 64 <= head + body <= len`); SSE2 is
            // part of x86-64.
            unsafe {
                let s = src.add(i) as *const __m128i;
                let d = dst.add(i) as *mut __m128i;
                let (a, b, c, e) = (
                    _mm_loadu_si128(s),
                    _mm_loadu_si128(s.add(1)),
                    _mm_loadu_si128(s.add(2)),
                    _mm_loadu_si128(s.add(3)),
                );
                _mm_stream_si128(d, a);
                _mm_stream_si128(d.add(1), b);
                _mm_stream_si128(d.add(2), c);
                _mm_stream_si128(d.add(3), e);
            }
            i += 64;
        }
        // SAFETY: the tail `i..len` is inside both ranges.
        unsafe { std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i) };
        // Non-temporal stores are weakly ordered: fence them before any later store.
        // SAFETY: SSE is part of x86-64.
        unsafe { _mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as promised by the caller.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    };
}

#[cfg(test)]
mod tests {
    use super::copy_streaming;

    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let src: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for misalign in 0..17 {
            for n in (0..300).chain([512, 777, 900]) {
                let mut dst = vec![0xAAu8; n + misalign + 2];
                // SAFETY: both ranges are inside their vectors and distinct.
                unsafe {
                    copy_streaming(dst.as_mut_ptr().add(misalign + 1), src.as_ptr().add(3), n)
                };
                assert_eq!(&dst[misalign + 1..misalign + 1 + n], &src[3..3 + n]);
                assert!(
                    dst[..=misalign].iter().all(|&b| b == 0xAA),
                    "{n} {misalign}"
                );
                assert_eq!(dst[misalign + 1 + n], 0xAA, "{n} {misalign}");
            }
        }
    }
}
