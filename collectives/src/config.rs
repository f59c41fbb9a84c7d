//! Settings of the collectives, from `RDCOLL_BCAST_SMALL_MAX`, `RDCOLL_BCAST_BLOCK`,
//! `RDCOLL_BCAST_CHUNK`, `RDCOLL_BCAST_TRANSFER`, `RDCOLL_BCAST_ALGORITHM`, `RDCOLL_CLUSTER`, `RDCOLL_ALLREDUCE_SMALL_MAX`,
//! `RDCOLL_ALLREDUCE_DEGREE`, `RDCOLL_BARRIER_ALGORITHM`, `RDCOLL_MULTICAST_PIECE` and
//! `RDCOLL_MULTICAST_GETS`.

use crate::error::{CollError, Result};
use crate::schedule::Algorithm;

/// Default largest broadcast sent through counter-byte blocks (docs/ALGORITHMS.md,
/// "Broadcast"; at 32 KiB, 2 ranks, counter
/// blocks took 3.8-4.2 us and an RDMC write 4.9-6.2; at 64 KiB 7.3-9.0 against 6.0-7.4).
pub const DEFAULT_BCAST_SMALL_MAX: usize = 32 << 10;
/// The same where every rank is on one host (shm, local): beyond it, the shared-staging
/// broadcast (docs/ALGORITHMS.md, "Broadcast").
pub const SHARED_BCAST_SMALL_MAX: usize = 4096;
/// Largest RDMC block unless `RDCOLL_BCAST_BLOCK` says otherwise.
pub const DEFAULT_MAX_BLOCK: usize = 1 << 20;
/// Smallest RDMC block chosen automatically.
pub const MIN_AUTO_BLOCK: usize = 32 << 10;
/// Largest `RDCOLL_BCAST_BLOCK`.
pub const MAX_BLOCK: usize = 64 << 20;
/// Chunk of the shared-staging broadcast up to [`SHARED_SMALL_CHUNKS_MAX`] bytes: two to four
/// chunks let the readers start before the root has staged everything (2 ranks, 512 KiB:
/// 19.8 us against 21.3 with one chunk).
pub const SHARED_CHUNK: usize = 256 << 10;
/// Longest message cut into [`SHARED_CHUNK`]s; longer ones go in [`MAX_SHARED_CHUNK`]s (4 MiB:
/// 153 us against 229 with 256 KiB chunks at 2 ranks, 230 against 371 at 4 ranks on 2 cores).
pub const SHARED_SMALL_CHUNKS_MAX: usize = 1 << 20;
/// Largest chunk of the shared-staging broadcast (each rank stages `SLOTS` of them).
pub const MAX_SHARED_CHUNK: usize = 1 << 20;

/// Default largest allreduce (and reduce) sent through the degree-k tree of RDMA writes;
/// larger ones reduce-scatter and allgather (docs/ALGORITHMS.md, "Allreduce and reduce").
pub const DEFAULT_ALLREDUCE_SMALL_MAX: usize = 16 << 10;
/// `RDCOLL_ALLREDUCE_SMALL_MAX`'s default where every write is a message (the fabric suggests
/// a rendezvous chunk: tcp): there the pipelined reduce-scatter's per-chunk writes and
/// acknowledgements cost more than the tree's extra bytes up to 64 KiB (2 ranks over tcp:
/// 32 KiB in 16-23 us against 36-43, 64 KiB 35-37 against 50-59).
pub const MESSAGE_FABRIC_ALLREDUCE_SMALL_MAX: usize = 64 << 10;
/// Largest `RDCOLL_ALLREDUCE_SMALL_MAX` (each rank registers one slot of it per rank).
pub const MAX_ALLREDUCE_SMALL_MAX: usize = 1 << 20;

/// Pieces a multicast aims for by default (paper 003: 600 MB in pieces of a few hundred
/// kilobytes). Fewer, larger pieces wait longer in each relay before they can be passed on:
/// 40 MB over the emulated WAN of `rdcoll-bench wan` (docs/PERFORMANCE.md) reached 68 % of the maximum
/// in 256 KiB pieces, 81 % in 64 KiB, 88 % in 32 KiB and 90 % in 16 KiB.
pub const MULTICAST_PIECES: usize = 2048;
/// Smallest piece chosen by default.
pub const MIN_MULTICAST_PIECE: usize = 16 << 10;
/// Largest piece chosen by default.
pub const MAX_DEFAULT_MULTICAST_PIECE: usize = 1 << 20;
/// Most pieces a multicast cuts a message into (longer messages get longer pieces): a bitfield
/// is then at most 8 KiB.
pub const MAX_MULTICAST_PIECES: usize = 1 << 16;
/// Default gets a multicast keeps outstanding to one peer. One: every rank of a cluster pulls
/// over the same wide-area link, so one get each already keeps it busy, and every piece
/// asked for and not yet come is one the other clusters cannot know about and may pull from
/// the root's cluster again (with 4, 31 % of the root's pieces went out twice in the
/// simulated slow-links scenario, and Robber reached 56 % of the maximum there; with 1, 84 %).
pub const DEFAULT_MULTICAST_GETS: usize = 1;
/// Largest `RDCOLL_MULTICAST_GETS`.
pub const MAX_MULTICAST_GETS: usize = 64;

/// A receiver-initiated multicast across clusters (paper 003).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Multicast {
    /// Robber: the ranks of a cluster share the pulling of pieces into it, and idle ranks
    /// steal work from busy ones.
    Robber,
    /// MOB: the same with each rank's share fixed at the start.
    Mob,
}

/// How the degree of the reduce tree is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceDegree {
    /// By the paper's model (see `reduce::model`).
    Model,
    /// Always this one (clamped to `1..=n-1`).
    Fixed(usize),
}

/// How a broadcast travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BcastAlgorithm {
    /// Counter-byte blocks up to the small limit, then the binomial pipeline (or hybrid when
    /// the ranks span several hosts or clusters).
    Auto,
    /// Counter-byte RDMA-write blocks down a binomial tree (paper 004), whatever the size.
    Counter,
    /// One of the RDMC family, whatever the size.
    Rdmc(Algorithm),
    /// Counter-byte blocks up to the small limit, then every rank copies the message out of
    /// the root's own staging (ranks that share memory only: shm, local).
    Shared,
    /// Counter-byte blocks up to the small limit, then a receiver-initiated multicast.
    Multicast(Multicast),
}

impl BcastAlgorithm {
    /// Parses `auto`, `counter`, or an RDMC algorithm's name.
    pub fn from_name(s: &str) -> Option<BcastAlgorithm> {
        match s {
            "auto" => Some(BcastAlgorithm::Auto),
            "counter" => Some(BcastAlgorithm::Counter),
            "shared" => Some(BcastAlgorithm::Shared),
            "robber" => Some(BcastAlgorithm::Multicast(Multicast::Robber)),
            "mob" => Some(BcastAlgorithm::Multicast(Multicast::Mob)),
            other => Algorithm::from_name(other).map(BcastAlgorithm::Rdmc),
        }
    }

    /// The name, as parsed.
    pub fn name(self) -> &'static str {
        match self {
            BcastAlgorithm::Auto => "auto",
            BcastAlgorithm::Counter => "counter",
            BcastAlgorithm::Shared => "shared",
            BcastAlgorithm::Multicast(Multicast::Robber) => "robber",
            BcastAlgorithm::Multicast(Multicast::Mob) => "mob",
            BcastAlgorithm::Rdmc(a) => a.name(),
        }
    }
}

/// How an RDMC broadcast moves a block into this rank (each receiver chooses for itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BcastTransfer {
    /// The sender writes it straight into this rank's buffer, then a notice (on shm with a
    /// core per rank, both processes copy a large write at once).
    Write,
    /// The sender writes it into a staging buffer in this rank's registered area and the
    /// notice after it, without waiting; this rank copies it into place (best where ranks
    /// outnumber cores).
    Staged,
}

impl BcastTransfer {
    /// Parses `write` or `staged`.
    pub fn from_name(s: &str) -> Option<BcastTransfer> {
        match s {
            "write" => Some(BcastTransfer::Write),
            "staged" => Some(BcastTransfer::Staged),
            _ => None,
        }
    }
}

/// How a barrier synchronises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierAlgorithm {
    /// `Flat` when every rank is on one host and ranks outnumber cores, else `Dissemination`.
    Auto,
    /// `ceil(log2 n)` rounds of one-byte writes; every rank waits once per round.
    Dissemination,
    /// Every rank writes its arrival byte to rank 0, which waits for all of them and writes a
    /// release byte to each: one wait per rank. Fewer wake-ups when ranks share cores.
    Flat,
}

impl BarrierAlgorithm {
    /// Parses `auto`, `dissemination` or `flat`.
    pub fn from_name(s: &str) -> Option<BarrierAlgorithm> {
        match s {
            "auto" => Some(BarrierAlgorithm::Auto),
            "dissemination" => Some(BarrierAlgorithm::Dissemination),
            "flat" => Some(BarrierAlgorithm::Flat),
            _ => None,
        }
    }
}

/// The collectives' settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollConfig {
    /// Broadcasts up to this many bytes use counter-byte blocks (with `Auto` and `Shared`);
    /// `None`: [`SHARED_BCAST_SMALL_MAX`] where every rank is on one host, else
    /// [`DEFAULT_BCAST_SMALL_MAX`].
    pub bcast_small_max: Option<usize>,
    /// RDMC block size; `None`: chosen by message size.
    pub bcast_block: Option<usize>,
    /// The shared staging's chunk (at most [`MAX_SHARED_CHUNK`]); `None`: chosen by message
    /// size.
    pub bcast_chunk: Option<usize>,
    /// How RDMC blocks move into this rank; `None`: staged where the ranks of this host
    /// outnumber its cores, else written straight into place.
    pub bcast_transfer: Option<BcastTransfer>,
    /// Which broadcast algorithm.
    pub bcast_algorithm: BcastAlgorithm,
    /// This rank's cluster for the hybrid broadcast; `None`: its host.
    pub cluster: Option<String>,
    /// Reductions up to this many bytes use the degree-k tree.
    pub allreduce_small_max: usize,
    /// The reduce tree's degree.
    pub allreduce_degree: ReduceDegree,
    /// How a barrier synchronises.
    pub barrier_algorithm: BarrierAlgorithm,
    /// Bytes per piece of a multicast; `None`: by length (see
    /// [`multicast_piece_for`](CollConfig::multicast_piece_for)).
    pub multicast_piece: Option<usize>,
    /// Gets a multicast keeps outstanding to one peer.
    pub multicast_gets: usize,
    /// Every collective first compares the ranks' arguments (which collective, root,
    /// lengths, counts, reduction): ranks that disagree get `Mismatch` on every rank before
    /// anything moves. Costs one small exchange per collective; on by default in debug
    /// builds.
    pub check_collectives: bool,
}

impl Default for CollConfig {
    fn default() -> Self {
        CollConfig {
            bcast_small_max: None,
            bcast_block: None,
            bcast_chunk: None,
            bcast_transfer: None,
            bcast_algorithm: BcastAlgorithm::Auto,
            cluster: None,
            allreduce_small_max: DEFAULT_ALLREDUCE_SMALL_MAX,
            allreduce_degree: ReduceDegree::Model,
            barrier_algorithm: BarrierAlgorithm::Auto,
            multicast_piece: None,
            multicast_gets: DEFAULT_MULTICAST_GETS,
            check_collectives: cfg!(debug_assertions),
        }
    }
}

/// The size setting `name` if set, refused outside `lo..=hi`.
fn size_within(name: &'static str, lo: usize, hi: usize) -> Result<Option<usize>> {
    match rdcoll_transport::settings::size(name)? {
        Some(b) if !(lo..=hi).contains(&b) => Err(CollError::InvalidArgument(format!(
            "{name}={b} is outside {lo}..={hi}"
        ))),
        b => Ok(b),
    }
}

impl CollConfig {
    /// See [`DEFAULT_ALLREDUCE_SMALL_MAX`].
    pub const DEFAULT_ALLREDUCE_SMALL_MAX: usize = DEFAULT_ALLREDUCE_SMALL_MAX;
    /// See [`MESSAGE_FABRIC_ALLREDUCE_SMALL_MAX`].
    pub const MESSAGE_FABRIC_ALLREDUCE_SMALL_MAX: usize = MESSAGE_FABRIC_ALLREDUCE_SMALL_MAX;

    /// Defaults, overridden by the environment; a malformed value is an error.
    pub fn from_env() -> Result<CollConfig> {
        CollConfig::from_env_over(CollConfig::default())
    }

    /// [`from_env`](CollConfig::from_env) with the defaults for `fabric` (every rank of a
    /// job has the same kind of fabric, so they agree): where every write is a message,
    /// [`MESSAGE_FABRIC_ALLREDUCE_SMALL_MAX`].
    pub fn from_env_for(fabric: &dyn rdcoll_transport::Fabric) -> Result<CollConfig> {
        let mut defaults = CollConfig::default();
        if fabric.rndv_chunk_hint().is_some() {
            defaults.allreduce_small_max = MESSAGE_FABRIC_ALLREDUCE_SMALL_MAX;
        }
        CollConfig::from_env_over(defaults)
    }

    /// `defaults`, overridden by the environment.
    fn from_env_over(defaults: CollConfig) -> Result<CollConfig> {
        use rdcoll_transport::settings::{flag, number, read, size, text, word, Value};
        let mut c = CollConfig {
            bcast_small_max: size("RDCOLL_BCAST_SMALL_MAX")?,
            ..defaults
        };
        c.bcast_block = size_within("RDCOLL_BCAST_BLOCK", 1, MAX_BLOCK)?;
        c.bcast_chunk = size_within("RDCOLL_BCAST_CHUNK", 1, MAX_SHARED_CHUNK)?;
        c.bcast_transfer = word("RDCOLL_BCAST_TRANSFER")?.and_then(BcastTransfer::from_name);
        if let Some(w) = word("RDCOLL_BCAST_ALGORITHM")? {
            c.bcast_algorithm = BcastAlgorithm::from_name(w).ok_or_else(|| {
                CollError::InvalidArgument(format!("RDCOLL_BCAST_ALGORITHM={w:?} is not known"))
            })?;
        }
        c.cluster = text("RDCOLL_CLUSTER")?;
        c.allreduce_small_max =
            size_within("RDCOLL_ALLREDUCE_SMALL_MAX", 0, MAX_ALLREDUCE_SMALL_MAX)?
                .unwrap_or(c.allreduce_small_max);
        match read("RDCOLL_ALLREDUCE_DEGREE")? {
            Some(Value::Number(0)) => {
                return Err(CollError::InvalidArgument(
                    "RDCOLL_ALLREDUCE_DEGREE=0: a degree is at least 1".into(),
                ))
            }
            Some(Value::Number(k)) => {
                c.allreduce_degree = ReduceDegree::Fixed(usize::try_from(k).unwrap_or(usize::MAX))
            }
            _ => c.allreduce_degree = ReduceDegree::Model,
        }
        if let Some(w) = word("RDCOLL_BARRIER_ALGORITHM")? {
            c.barrier_algorithm = BarrierAlgorithm::from_name(w).ok_or_else(|| {
                CollError::InvalidArgument(format!("RDCOLL_BARRIER_ALGORITHM={w:?} is not known"))
            })?;
        }
        c.multicast_piece = size_within("RDCOLL_MULTICAST_PIECE", 1, MAX_BLOCK)?;
        if let Some(g) = number("RDCOLL_MULTICAST_GETS")? {
            c.multicast_gets = usize::try_from(g)
                .ok()
                .filter(|g| (1..=MAX_MULTICAST_GETS).contains(g))
                .ok_or_else(|| {
                    CollError::InvalidArgument(format!(
                        "RDCOLL_MULTICAST_GETS={g}: expected 1..={MAX_MULTICAST_GETS}"
                    ))
                })?;
        }
        if let Some(on) = flag("RDCOLL_CHECK_COLLECTIVES")? {
            c.check_collectives = on;
        }
        Ok(c)
    }

    /// The piece of a multicast of `len` bytes: the setting, or about `len` /
    /// [`MULTICAST_PIECES`] (a power of two from [`MIN_MULTICAST_PIECE`] to
    /// [`MAX_DEFAULT_MULTICAST_PIECE`]); grown so that the message has at most
    /// [`MAX_MULTICAST_PIECES`] pieces.
    pub fn multicast_piece_for(&self, len: usize) -> usize {
        let by_len = (len / MULTICAST_PIECES)
            .next_power_of_two()
            .clamp(MIN_MULTICAST_PIECE, MAX_DEFAULT_MULTICAST_PIECE);
        self.multicast_piece
            .unwrap_or(by_len)
            .max(len.div_ceil(MAX_MULTICAST_PIECES))
    }

    /// The RDMC block size for a message of `len` bytes broadcast to `ranks` ranks, all on
    /// one host and more than its cores if `crowded`: the setting, or `len / k` rounded down
    /// to a power of two between 32 KiB and 1 MiB, with k = one block per 128 KiB, at least 2
    /// and at least log2(ranks) (so a bigger group still pipelines), at most 16. Each block
    /// costs a ready/transfer handshake (1-3 us between cores), so blocks below 128 KiB pay
    /// more in steps than they win in pipelining: at 256-512 KiB, 4 ranks, 128 KiB blocks
    /// took 0.55-0.7x the time of the earlier len/16. Two ranks have nothing to pipeline (one receiver, no relays), and
    /// where ranks outnumber cores every handshake costs context switches: there one block up
    /// to 1 MiB, 1 MiB blocks beyond (2 ranks at 1 MiB: 128 KiB blocks took 2x the time of
    /// one; 4 ranks on 2 cores at 1-2 MiB: the default took 1.35-1.55x the time of 1 MiB
    /// blocks; "RDMC straight into the receiver's buffer").
    pub fn block_for(&self, len: usize, ranks: usize, crowded: bool) -> usize {
        if let Some(b) = self.bcast_block {
            return b;
        }
        if ranks <= 2 || crowded {
            return len
                .next_power_of_two()
                .clamp(MIN_AUTO_BLOCK, DEFAULT_MAX_BLOCK);
        }
        let depth = ranks.max(1).next_power_of_two().ilog2() as usize;
        let k = (len >> 17).max(depth).clamp(2, 16);
        // Rounded down, so that a message gets at least k blocks.
        let block = 1usize << (len / k).max(1).ilog2();
        block.clamp(MIN_AUTO_BLOCK, DEFAULT_MAX_BLOCK)
    }

    /// The chunk of a shared-staging broadcast of `len` bytes: `RDCOLL_BCAST_CHUNK` (at most
    /// [`MAX_SHARED_CHUNK`]), or [`SHARED_CHUNK`] up to [`SHARED_SMALL_CHUNKS_MAX`] and
    /// [`MAX_SHARED_CHUNK`] beyond.
    pub fn shared_chunk(&self, len: usize) -> usize {
        match self.bcast_chunk {
            Some(b) => b.min(MAX_SHARED_CHUNK),
            None if len <= SHARED_SMALL_CHUNKS_MAX => SHARED_CHUNK,
            None => MAX_SHARED_CHUNK,
        }
    }

    /// The largest chunk of any shared-staging broadcast (the size of a staging slot).
    pub fn max_shared_chunk(&self) -> usize {
        self.bcast_chunk
            .map_or(MAX_SHARED_CHUNK, |b| b.min(MAX_SHARED_CHUNK))
    }

    /// The largest block any message may use (the size of a staging buffer).
    pub fn max_block(&self) -> usize {
        self.bcast_block.unwrap_or(DEFAULT_MAX_BLOCK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words a setting declares (`rdcoll_transport::settings`).
    fn declared_words(name: &str) -> &'static [&'static str] {
        match rdcoll_transport::settings::setting(name).map(|s| s.kind) {
            Some(rdcoll_transport::settings::Kind::Words(w)) => w,
            other => panic!("{name} is declared as {other:?}"),
        }
    }

    #[test]
    fn every_declared_word_is_understood() {
        for w in declared_words("RDCOLL_BCAST_ALGORITHM") {
            assert!(BcastAlgorithm::from_name(w).is_some(), "{w}");
        }
        for alg in Algorithm::ALL {
            assert!(
                declared_words("RDCOLL_BCAST_ALGORITHM").contains(&alg.name()),
                "{} is not declared",
                alg.name()
            );
        }
        for w in declared_words("RDCOLL_BARRIER_ALGORITHM") {
            assert!(BarrierAlgorithm::from_name(w).is_some(), "{w}");
        }
        for w in declared_words("RDCOLL_BCAST_TRANSFER") {
            assert!(*w == "auto" || BcastTransfer::from_name(w).is_some(), "{w}");
        }
    }

    #[test]
    fn names_and_blocks() {
        for n in [
            "auto",
            "counter",
            "shared",
            "chain",
            "binomial_pipeline",
            "hybrid",
            "robber",
            "mob",
        ] {
            assert_eq!(BcastAlgorithm::from_name(n).map(|a| a.name()), Some(n));
        }
        assert_eq!(BcastAlgorithm::from_name("bogus"), None);
        assert_eq!(
            BcastTransfer::from_name("write"),
            Some(BcastTransfer::Write)
        );
        assert_eq!(
            BcastTransfer::from_name("staged"),
            Some(BcastTransfer::Staged)
        );
        assert_eq!(BcastTransfer::from_name("read"), None);
        assert_eq!(
            BarrierAlgorithm::from_name("flat"),
            Some(BarrierAlgorithm::Flat)
        );
        assert_eq!(BarrierAlgorithm::from_name("tree"), None);
        let c = CollConfig::default();
        assert_eq!(c.block_for(0, 4, false), MIN_AUTO_BLOCK);
        // Two blocks of 64 KiB, four of 128 KiB, eight of 128 KiB, then sixteen.
        assert_eq!(c.block_for(128 << 10, 4, false), 64 << 10);
        assert_eq!(c.block_for(512 << 10, 4, false), 128 << 10);
        assert_eq!(c.block_for(1 << 20, 3, false), 128 << 10);
        // Two ranks: one block up to 1 MiB.
        assert_eq!(c.block_for(1 << 20, 2, false), 1 << 20);
        assert_eq!(c.block_for(600 << 10, 2, false), 1 << 20);
        assert_eq!(c.block_for(3 << 20, 2, false), 1 << 20);
        // Ranks outnumbering cores: the same.
        assert_eq!(c.block_for(512 << 10, 4, true), 512 << 10);
        assert_eq!(c.block_for(4 << 20, 4, true), 1 << 20);
        assert_eq!(c.block_for(4 << 20, 4, false), 256 << 10);
        // A group of 16 gets at least four blocks.
        assert_eq!(c.block_for(128 << 10, 16, false), 32 << 10);
        assert_eq!(c.block_for(1 << 30, 4, false), DEFAULT_MAX_BLOCK);
        // Shared staging: 256 KiB chunks up to 1 MiB, then 1 MiB ones.
        assert_eq!(c.shared_chunk(1 << 20), 256 << 10);
        assert_eq!(c.shared_chunk((1 << 20) + 1), 1 << 20);
        assert_eq!(c.max_shared_chunk(), 1 << 20);
        let fixed = CollConfig {
            bcast_block: Some(5000),
            ..CollConfig::default()
        };
        assert_eq!(
            (fixed.block_for(1 << 30, 4, false), fixed.max_block()),
            (5000, 5000)
        );
        // Multicast pieces: about 2048 of them, 16 KiB to 1 MiB, grown past 65,536 pieces.
        assert_eq!(c.multicast_piece_for(1 << 20), 16 << 10);
        assert_eq!(c.multicast_piece_for(40_000_000), 32 << 10);
        assert_eq!(c.multicast_piece_for(600_000_000), 512 << 10);
        assert_eq!(c.multicast_piece_for(1 << 40), 1 << 24);
        let set = CollConfig {
            multicast_piece: Some(4096),
            ..CollConfig::default()
        };
        assert_eq!(set.multicast_piece_for(1 << 20), 4096);
    }
}
