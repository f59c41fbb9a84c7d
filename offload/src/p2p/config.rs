//! Protocol settings: the eager limit, the rendezvous chunk size and credits, and the memory
//! for unexpected eager messages, from `RDCOLL_EAGER_LIMIT`, `RDCOLL_RNDV_CHUNK`,
//! `RDCOLL_RNDV_CREDITS` and `RDCOLL_UNEXPECTED_MAX`.

use crate::error::{invalid, Result};

/// Default eager limit (docs/ALGORITHMS.md, "Point-to-point"): 64 KiB, one active message.
/// Against 32 KiB, a 64 KiB ping-pong took 0.50x the time, a window of them (`osu_bw`)
/// 2.7x the rate and `osu_bibw` 1.4x (2 ranks, shm): the part of a window that overflows the
/// channel goes by rendezvous instead (`send::BACKLOG_RENDEZVOUS_MIN`).
pub const DEFAULT_EAGER_LIMIT: usize = 65536;
/// Default rendezvous chunk. With shm's split puts, 1 MiB chunks made 4 MiB messages as fast
/// as one single get (1.00-1.03x) on 2026-11-23, 0.90-0.95x a day later with faster copies
/// (four split handshakes instead of one); 2 MiB chunks gave 0.99x and 3-8 % more bandwidth
/// from 2 to 16 MiB.
pub const DEFAULT_RNDV_CHUNK: usize = 2 << 20;
/// Default most gets in flight per rendezvous receive.
pub const DEFAULT_RNDV_CREDITS: usize = 4;
/// Default bytes a rank spends on other ranks' unexpected eager messages (see `credits`).
pub const DEFAULT_UNEXPECTED_MAX: usize = 1 << 30;

/// How messages travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct P2pConfig {
    /// Messages up to this many bytes go eagerly, with their header; longer ones send this many
    /// bytes with the header and the rest is fetched by the receiver.
    pub eager_limit: usize,
    /// Bytes per rendezvous get (a multiple of 1 KiB, at most 32 MiB - 1 KiB).
    pub rndv_chunk: usize,
    /// Most gets a rendezvous receive has in flight (`c`).
    pub rndv_credits: usize,
    /// Bytes of memory a rank spends on other ranks' eager messages that wait unreceived
    /// (payload plus 256 bytes each), divided among its peers with at least 256 KiB each; a
    /// sender past its share sends by rendezvous until the receiver catches up.
    pub unexpected_max: usize,
}

impl Default for P2pConfig {
    fn default() -> Self {
        P2pConfig {
            eager_limit: DEFAULT_EAGER_LIMIT,
            rndv_chunk: DEFAULT_RNDV_CHUNK,
            rndv_credits: DEFAULT_RNDV_CREDITS,
            unexpected_max: DEFAULT_UNEXPECTED_MAX,
        }
    }
}

impl P2pConfig {
    /// Defaults, overridden by the environment; a malformed or out-of-range value is an error.
    pub fn from_env() -> Result<P2pConfig> {
        P2pConfig::from_env_with(P2pConfig::default())
    }

    /// [`from_env`](P2pConfig::from_env) for messages over `fabric`: its rendezvous chunk
    /// ([`Fabric::rndv_chunk_hint`](rdcoll_transport::Fabric::rndv_chunk_hint)) is the
    /// default.
    pub fn from_env_for(fabric: &dyn rdcoll_transport::Fabric) -> Result<P2pConfig> {
        let mut c = P2pConfig::default();
        if let Some(chunk) = fabric.rndv_chunk_hint() {
            c.rndv_chunk = chunk;
        }
        P2pConfig::from_env_with(c)
    }

    fn from_env_with(mut c: P2pConfig) -> Result<P2pConfig> {
        use rdcoll_transport::settings::{number, size};
        c.eager_limit = size("RDCOLL_EAGER_LIMIT")?.unwrap_or(c.eager_limit);
        c.rndv_chunk = size("RDCOLL_RNDV_CHUNK")?.unwrap_or(c.rndv_chunk);
        if let Some(v) = number("RDCOLL_RNDV_CREDITS")? {
            c.rndv_credits = usize::try_from(v).unwrap_or(usize::MAX);
        }
        c.unexpected_max = size("RDCOLL_UNEXPECTED_MAX")?.unwrap_or(c.unexpected_max);
        c.validate(crate::initiator::inline_capacity())?;
        Ok(c)
    }

    /// Checks the settings against what the header and an inline put can carry.
    pub fn validate(&self, inline_max: usize) -> Result<()> {
        if self.eager_limit > inline_max {
            return Err(invalid(format!(
                "RDCOLL_EAGER_LIMIT={} exceeds the {inline_max} bytes an inline put carries",
                self.eager_limit
            )));
        }
        let chunk = self.rndv_chunk;
        if chunk == 0 || chunk & 1023 != 0 || chunk > super::bits::MAX_CHUNK {
            return Err(invalid(format!(
                "RDCOLL_RNDV_CHUNK={chunk}: expected a multiple of 1 KiB from 1 KiB to {} bytes",
                super::bits::MAX_CHUNK
            )));
        }
        if self.rndv_credits == 0 {
            return Err(invalid("RDCOLL_RNDV_CREDITS must be at least 1"));
        }
        Ok(())
    }
}

/// Parses `123`, `64K`, `1M`, `2G` (case-insensitive, powers of 1024): the settings' sizes.
pub use rdcoll_transport::settings::parse_size;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes_and_reject_junk() {
        assert_eq!(parse_size("8192"), Some(8192));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
    }

    #[test]
    fn validation_names_the_bad_setting() {
        let inline = crate::initiator::inline_capacity();
        let ok = P2pConfig::default();
        assert!(ok.validate(inline).is_ok());
        let bad = P2pConfig {
            eager_limit: inline + 1,
            ..ok
        };
        assert!(bad
            .validate(inline)
            .unwrap_err()
            .to_string()
            .contains("EAGER"));
        let bad = P2pConfig {
            rndv_chunk: 1000,
            ..ok
        };
        assert!(bad
            .validate(inline)
            .unwrap_err()
            .to_string()
            .contains("CHUNK"));
        let bad = P2pConfig {
            rndv_credits: 0,
            ..ok
        };
        assert!(bad.validate(inline).is_err());
    }
}
