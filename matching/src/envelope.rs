//! Envelopes, receive selectors and the 64-bit match-bit layout.
//!
//! This is the vocabulary of the matching engine. A message carries an [`Envelope`] (context,
//! source, tag); a receive names a [`ReceiveSpec`] (context, source or ANY_SOURCE, tag or ANY_TAG
//! or a masked tag). Both have a Portals 4 form (paper 002, Section 1.2): 64 match bits, plus
//! ignore bits on the receive side, matched by `((msg ^ match) & !ignore) == 0`.
//!
//! Bit layout of the match bits (most significant first):
//!
//! ```text
//!  63  62 ............ 48  47 .................. 16  15 ...... 0
//! +---+-------------------+-----------------------+------------+
//! | I |  context id (15)  |        tag (32)       | nonce (16) |
//! +---+-------------------+-----------------------+------------+
//!  \_______ context field (16) _______/
//! ```
//!
//! * `I` is the internal flag: traffic of the library itself (collectives) uses the *internal
//!   twin* of a communicator's context ([`ContextId::internal_twin`]). The whole 16-bit context
//!   field is always compared — an ignore mask may never cover it — so no user receive, not
//!   even an ANY_TAG one, can ever match internal traffic: ANY_TAG wildcards the 32 tag bits only.
//! * The nonce bits carry protocol information of the sender (e.g. a synchronous-send flag).
//!   Receives always ignore them.
//! * ANY_TAG is the ignore mask [`TAG_MASK`]; ANY_SOURCE is [`Source::Any`], outside the bits as
//!   in Portals (`PTL_RANK_ANY`).

use crate::error::MatchError;

/// Bit position of the lowest tag bit in the match bits.
pub const TAG_SHIFT: u32 = 16;
/// Bit position of the lowest context bit in the match bits.
pub const CONTEXT_SHIFT: u32 = 48;
/// Match-bit mask of the nonce (protocol) bits, which every receive ignores.
pub const NONCE_MASK: u64 = 0xFFFF;
/// Match-bit mask of the 32 tag bits; ignoring exactly these is ANY_TAG.
pub const TAG_MASK: u64 = 0xFFFF_FFFF << TAG_SHIFT;
/// Match-bit mask of the 16-bit context field (internal flag included); never ignorable.
pub const CONTEXT_MASK: u64 = 0xFFFF << CONTEXT_SHIFT;
/// Match-bit mask of the internal flag, the top bit of the context field.
pub const INTERNAL_FLAG: u64 = 1 << 63;

/// A communicator's context id, or its internal twin used for the library's own traffic.
///
/// User context ids are `0..=ContextId::MAX_ID`; each has an internal twin with the same id and
/// the internal flag set. The two never match each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContextId(u32);

impl ContextId {
    /// Largest context id (15 bits).
    pub const MAX_ID: u32 = (1 << 15) - 1;
    const INTERNAL: u32 = 1 << 15;

    /// The user context `id`; fails if `id` does not fit in 15 bits.
    pub fn user(id: u32) -> Result<Self, MatchError> {
        if id > Self::MAX_ID {
            return Err(MatchError::ContextOutOfRange { id });
        }
        Ok(ContextId(id))
    }

    /// The internal context `id` (for collectives); fails if `id` does not fit in 15 bits.
    pub fn internal(id: u32) -> Result<Self, MatchError> {
        Ok(Self::user(id)?.internal_twin())
    }

    /// The internal twin of this context (same id, internal flag set).
    pub const fn internal_twin(self) -> Self {
        ContextId(self.0 | Self::INTERNAL)
    }

    /// The user twin of this context (same id, internal flag clear).
    pub const fn user_twin(self) -> Self {
        ContextId(self.0 & Self::MAX_ID)
    }

    /// The 15-bit id, without the internal flag.
    pub const fn id(self) -> u32 {
        self.0 & Self::MAX_ID
    }

    /// Whether this is an internal (library-traffic) context.
    pub const fn is_internal(self) -> bool {
        self.0 & Self::INTERNAL != 0
    }

    /// The 16-bit context field as it appears in the match bits.
    pub const fn field(self) -> u32 {
        self.0
    }

    /// The context whose 24-bit field is `field & 0xFFFF` (extra high bits are dropped).
    pub const fn from_field(field: u32) -> Self {
        ContextId(field & 0xFFFF)
    }
}

/// The source a receive accepts: one rank, or any (MPI_ANY_SOURCE, PTL_RANK_ANY).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Only messages from this rank.
    Rank(u32),
    /// Messages from any rank.
    Any,
}

/// The tags a receive accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagPattern {
    /// Only this tag.
    Exact(u32),
    /// Any user tag (MPI_ANY_TAG). Never matches another context, internal twin included.
    Any,
    /// Portals-style: tags equal to `tag` on every bit not set in `ignore`.
    Masked {
        /// Tag bits to compare.
        tag: u32,
        /// Tag bits to ignore.
        ignore: u32,
    },
}

/// What a message carries for matching: context, source rank, tag, and nonce bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// Context (communicator, or its internal twin).
    pub context: ContextId,
    /// Rank of the sender.
    pub source: u32,
    /// The sender's tag.
    pub tag: u32,
    /// Protocol bits of the sender; carried, never matched.
    pub nonce: u16,
}

impl Envelope {
    /// An envelope with nonce 0.
    pub const fn new(context: ContextId, source: u32, tag: u32) -> Self {
        Envelope {
            context,
            source,
            tag,
            nonce: 0,
        }
    }

    /// The 64 match bits of this envelope.
    pub const fn match_bits(&self) -> u64 {
        ((self.context.field() as u64) << CONTEXT_SHIFT)
            | ((self.tag as u64) << TAG_SHIFT)
            | self.nonce as u64
    }

    /// The envelope a message with these match bits from `source` carries. Total: every 64-bit
    /// value decodes.
    pub const fn from_match_bits(bits: u64, source: u32) -> Self {
        Envelope {
            context: ContextId::from_field((bits >> CONTEXT_SHIFT) as u32),
            source,
            tag: (bits >> TAG_SHIFT) as u32,
            nonce: bits as u16,
        }
    }
}

/// What a receive (or probe) accepts: a context, a source or any, and a tag pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReceiveSpec {
    /// Context; only messages of exactly this context match.
    pub context: ContextId,
    /// Accepted source.
    pub source: Source,
    /// Accepted tags.
    pub tag: TagPattern,
}

impl ReceiveSpec {
    /// A receive for `(context, source, tag)`.
    pub const fn new(context: ContextId, source: Source, tag: TagPattern) -> Self {
        ReceiveSpec {
            context,
            source,
            tag,
        }
    }

    /// A receive from Portals match and ignore bits. Nonce bits are always ignored. Fails if
    /// `ignore_bits` covers any context bit: contexts (and the internal flag) never cross-match.
    pub fn from_match_bits(
        match_bits: u64,
        ignore_bits: u64,
        source: Source,
    ) -> Result<Self, MatchError> {
        if ignore_bits & CONTEXT_MASK != 0 {
            return Err(MatchError::IgnoresContextBits { ignore_bits });
        }
        let envelope = Envelope::from_match_bits(match_bits, 0);
        let ignore = (ignore_bits >> TAG_SHIFT) as u32;
        Ok(ReceiveSpec {
            context: envelope.context,
            source,
            tag: TagPattern::Masked {
                tag: envelope.tag,
                ignore,
            }
            .normalized(),
        })
    }

    /// The Portals `(match_bits, ignore_bits)` of this receive; the nonce bits are ignored.
    pub const fn match_bits(&self) -> (u64, u64) {
        let (tag, ignore) = match self.tag {
            TagPattern::Exact(tag) => (tag, 0),
            TagPattern::Any => (0, u32::MAX),
            TagPattern::Masked { tag, ignore } => (tag & !ignore, ignore),
        };
        let bits = Envelope::new(self.context, 0, tag).match_bits();
        (bits, ((ignore as u64) << TAG_SHIFT) | NONCE_MASK)
    }

    /// Whether a message with `envelope` matches this receive (MPI rules 1-3 of Section 1.1).
    pub fn matches(&self, envelope: &Envelope) -> bool {
        Selector::compile(self).matches(envelope)
    }
}

impl TagPattern {
    /// The same pattern in canonical form: `Masked` with no ignored bit becomes `Exact`, with
    /// every bit ignored becomes `Any`; ignored bits of the tag are cleared.
    pub const fn normalized(self) -> Self {
        match self {
            TagPattern::Masked { ignore: 0, tag } => TagPattern::Exact(tag),
            TagPattern::Masked {
                ignore: u32::MAX, ..
            } => TagPattern::Any,
            TagPattern::Masked { tag, ignore } => TagPattern::Masked {
                tag: tag & !ignore,
                ignore,
            },
            other => other,
        }
    }
}

/// Which queue family a receive belongs to: the four MPI wildcard shapes, or the general class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Shape {
    /// Source and tag given.
    Exact = 0,
    /// Source given, ANY_TAG.
    AnyTag = 1,
    /// ANY_SOURCE, tag given.
    AnySource = 2,
    /// ANY_SOURCE, ANY_TAG.
    AnyAny = 3,
    /// A tag mask that is neither all nor none (any source setting).
    General = 4,
}

/// A receive spec compiled for fast comparison: the `_care` masks have a 1 for every compared
/// bit (all ones for a named source or tag, none for ANY). All fields are 32-bit so that copying
/// a selector never reads back narrower stores (a store-forwarding stall on x86).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Selector {
    pub(crate) context: u32,
    pub(crate) source: u32,
    pub(crate) source_care: u32,
    pub(crate) tag: u32,
    pub(crate) tag_care: u32,
    pub(crate) shape: Shape,
}

impl Selector {
    /// Compiles `spec`, normalizing its tag pattern.
    #[inline]
    pub(crate) fn compile(spec: &ReceiveSpec) -> Self {
        let (source, source_care) = match spec.source {
            Source::Rank(rank) => (rank, u32::MAX),
            Source::Any => (0, 0),
        };
        let (tag, tag_care, masked) = match spec.tag.normalized() {
            TagPattern::Exact(tag) => (tag, u32::MAX, false),
            TagPattern::Any => (0, 0, false),
            TagPattern::Masked { tag, ignore } => (tag, !ignore, true),
        };
        let shape = match (masked, source_care == 0, tag_care == 0) {
            (true, _, _) => Shape::General,
            (false, false, false) => Shape::Exact,
            (false, false, true) => Shape::AnyTag,
            (false, true, false) => Shape::AnySource,
            (false, true, true) => Shape::AnyAny,
        };
        Selector {
            context: spec.context.field(),
            source,
            source_care,
            tag,
            tag_care,
            shape,
        }
    }

    /// Whether this selector accepts any source.
    #[inline]
    pub(crate) fn any_source(&self) -> bool {
        self.source_care == 0
    }

    /// Whether `envelope` matches this selector.
    #[inline]
    pub(crate) fn matches(&self, envelope: &Envelope) -> bool {
        self.context == envelope.context.field()
            && (envelope.source ^ self.source) & self.source_care == 0
            && (envelope.tag ^ self.tag) & self.tag_care == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(id: u32) -> ContextId {
        ContextId::user(id).expect("small id")
    }

    #[test]
    fn envelope_match_bits_round_trip() {
        let env = Envelope {
            context: ctx(0x1234).internal_twin(),
            source: 9,
            tag: 0xDEAD_BEEF,
            nonce: 0x5A5A,
        };
        let bits = env.match_bits();
        assert_eq!(bits & INTERNAL_FLAG, INTERNAL_FLAG);
        assert_eq!((bits & TAG_MASK) >> TAG_SHIFT, 0xDEAD_BEEF);
        assert_eq!(bits & NONCE_MASK, 0x5A5A);
        assert_eq!(Envelope::from_match_bits(bits, 9), env);
    }

    #[test]
    fn context_ids_out_of_range_are_errors() {
        assert!(ContextId::user(ContextId::MAX_ID).is_ok());
        assert_eq!(
            ContextId::user(1 << 15),
            Err(MatchError::ContextOutOfRange { id: 1 << 15 })
        );
        assert!(ContextId::internal(u32::MAX).is_err());
    }

    #[test]
    fn internal_twin_keeps_id_and_differs() {
        let user = ctx(77);
        let internal = user.internal_twin();
        assert_ne!(user, internal);
        assert_eq!(internal.id(), 77);
        assert!(internal.is_internal() && !user.is_internal());
        assert_eq!(internal.user_twin(), user);
    }

    #[test]
    fn ignore_bits_over_context_are_rejected() {
        for bit in CONTEXT_SHIFT..64 {
            let ignore = 1u64 << bit;
            assert_eq!(
                ReceiveSpec::from_match_bits(0, ignore, Source::Any),
                Err(MatchError::IgnoresContextBits {
                    ignore_bits: ignore
                })
            );
        }
    }

    #[test]
    fn portals_masks_of_mpi_shape_classify_as_fast_path() {
        let exact = ReceiveSpec::from_match_bits(
            Envelope::new(ctx(3), 0, 42).match_bits(),
            NONCE_MASK,
            Source::Rank(1),
        )
        .expect("valid");
        assert_eq!(exact.tag, TagPattern::Exact(42));
        assert_eq!(Selector::compile(&exact).shape, Shape::Exact);
        let any_tag =
            ReceiveSpec::from_match_bits(0, TAG_MASK | NONCE_MASK, Source::Any).expect("valid");
        assert_eq!(any_tag.tag, TagPattern::Any);
        assert_eq!(Selector::compile(&any_tag).shape, Shape::AnyAny);
        let general =
            ReceiveSpec::from_match_bits(0x0F00, 0xF0 << TAG_SHIFT, Source::Any).expect("valid");
        assert_eq!(Selector::compile(&general).shape, Shape::General);
    }

    #[test]
    fn selector_agrees_with_portals_rule() {
        let specs = [
            ReceiveSpec::new(ctx(1), Source::Rank(2), TagPattern::Exact(5)),
            ReceiveSpec::new(ctx(1), Source::Any, TagPattern::Exact(5)),
            ReceiveSpec::new(ctx(1), Source::Rank(2), TagPattern::Any),
            ReceiveSpec::new(ctx(1), Source::Any, TagPattern::Any),
            ReceiveSpec::new(
                ctx(1),
                Source::Any,
                TagPattern::Masked { tag: 4, ignore: 3 },
            ),
        ];
        for spec in specs {
            let (bits, ignore) = spec.match_bits();
            for source in 0..4 {
                for tag in 0..8 {
                    for context in [ctx(1), ctx(1).internal_twin(), ctx(2)] {
                        let env = Envelope {
                            context,
                            source,
                            tag,
                            nonce: (tag * 37) as u16,
                        };
                        let portals = (env.match_bits() ^ bits) & !ignore == 0
                            && (spec.source == Source::Any || spec.source == Source::Rank(source));
                        assert_eq!(spec.matches(&env), portals, "{spec:?} {env:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn any_tag_never_matches_internal_twin() {
        let spec = ReceiveSpec::new(ctx(4), Source::Any, TagPattern::Any);
        for tag in [0, 1, u32::MAX] {
            assert!(spec.matches(&Envelope::new(ctx(4), 0, tag)));
            assert!(!spec.matches(&Envelope::new(ctx(4).internal_twin(), 0, tag)));
        }
    }
}
