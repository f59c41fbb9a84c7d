//! Match list entries: the matching rule, where a deposit goes and how much of it fits, and when
//! an entry unlinks itself (SEMANTICS.md §1-2).

use rdcoll_transport::{Rank, Region};

use crate::types::{MatchId, MeOptions, MeSpec};

/// A linked entry.
#[derive(Debug, Clone)]
pub(crate) struct Me {
    pub(crate) region: Region,
    pub(crate) match_bits: u64,
    pub(crate) ignore_bits: u64,
    pub(crate) match_id: MatchId,
    pub(crate) options: MeOptions,
    pub(crate) user_ptr: u64,
    /// The entry's own offset (manage-local).
    pub(crate) local_off: usize,
}

/// Where one message lands in an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    /// Offset in the entry's buffer.
    pub(crate) offset: usize,
    /// Bytes moved (`mlength`).
    pub(crate) mlength: usize,
}

/// Whether `bits` match `match_bits` outside `ignore_bits` (ignored on both sides).
pub(crate) fn bits_match(bits: u64, match_bits: u64, ignore_bits: u64) -> bool {
    (bits ^ match_bits) & !ignore_bits == 0
}

impl Me {
    pub(crate) fn new(spec: MeSpec) -> Me {
        Me {
            region: spec.region,
            match_bits: spec.match_bits,
            ignore_bits: spec.ignore_bits,
            match_id: spec.match_id,
            options: spec.options,
            user_ptr: spec.user_ptr,
            local_off: 0,
        }
    }

    fn len(&self) -> usize {
        self.region.len()
    }

    /// Where a message of `rlength` bytes asking for `remote_offset` would go: the entry's own
    /// offset with manage-local, and truncated to what is left (zero past the end).
    pub(crate) fn placement(&self, remote_offset: usize, rlength: usize) -> Placement {
        let offset = if self.options.manage_local {
            self.local_off
        } else {
            remote_offset
        };
        Placement {
            offset,
            mlength: rlength.min(self.len().saturating_sub(offset)),
        }
    }

    /// Whether this entry takes a message: match id, no-truncate fit, then the bits.
    pub(crate) fn accepts(
        &self,
        initiator: Rank,
        bits: u64,
        remote_offset: usize,
        rlength: usize,
    ) -> bool {
        if !self.match_id.accepts(initiator) {
            return false;
        }
        if self.options.no_truncate {
            let p = self.placement(remote_offset, rlength);
            let fits = p
                .offset
                .checked_add(rlength)
                .is_some_and(|end| end <= self.len());
            if !fits {
                return false;
            }
        }
        bits_match(bits, self.match_bits, self.ignore_bits)
    }

    /// Records a deposit of `mlength` bytes; returns whether the entry must now unlink.
    pub(crate) fn consume(&mut self, mlength: usize) -> bool {
        if self.options.manage_local {
            self.local_off = self.local_off.saturating_add(mlength);
        }
        let below_min_free = self.options.manage_local
            && self.options.min_free != 0
            && self.len().saturating_sub(self.local_off) < self.options.min_free;
        self.options.use_once || below_min_free
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdcoll_transport::Fabric;

    fn me(len: usize, options: MeOptions) -> (Me, rdcoll_transport::local::LocalFabric) {
        let f = rdcoll_transport::local::create(1).unwrap().remove(0);
        let region = f.alloc_region(len).unwrap();
        let me = Me::new(MeSpec {
            region,
            match_bits: 0x700,
            ignore_bits: 0xff,
            match_id: MatchId::Any,
            options,
            user_ptr: 0,
        });
        (me, f)
    }

    #[test]
    fn ignore_bits_mask_both_sides() {
        assert!(bits_match(0x0702, 0x0700, 0xff));
        assert!(!bits_match(0x0802, 0x0700, 0xff));
        assert!(bits_match(0x0802, 0, !0));
    }

    #[test]
    fn offset_past_the_end_is_a_zero_length_deposit() {
        let (m, _f) = me(8, MeOptions::default());
        assert_eq!(
            m.placement(12, 4),
            Placement {
                offset: 12,
                mlength: 0
            }
        );
        assert_eq!(m.placement(6, 4).mlength, 2);
    }

    #[test]
    fn no_truncate_entry_too_small_does_not_match() {
        let opts = MeOptions {
            no_truncate: true,
            ..MeOptions::default()
        };
        let (m, _f) = me(4, opts);
        assert!(!m.accepts(0, 0x700, 0, 10));
        assert!(m.accepts(0, 0x700, 0, 4));
        assert!(
            !m.accepts(0, 0x700, usize::MAX, 4),
            "offset overflow is no fit"
        );
    }

    #[test]
    fn min_free_unlinks_after_seven_bytes_not_after_five() {
        let opts = MeOptions {
            manage_local: true,
            min_free: 4,
            ..MeOptions::default()
        };
        let (mut m, _f) = me(10, opts);
        assert!(m.consume(7), "3 bytes left < 4");
        let (mut m, _f) = me(10, opts);
        assert!(!m.consume(5), "5 bytes left >= 4");
        assert_eq!(m.placement(0, 5).offset, 5);
        assert!(m.consume(5));
    }
}
