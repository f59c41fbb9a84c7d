//! A network interface's limits and choices ([`NiConfig`]), and reading them from the
//! environment (`RDCOLL_OFFLOAD`, `RDCOLL_AGENT_POLL_US`, `RDCOLL_AGENT_GRACE_US`).

use std::time::Duration;

use crate::error::Result;

/// Who runs the progress agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A dedicated progress thread: the host is not involved once operations are posted.
    Thread,
    /// The host's own calls (waits, polls, `progress`) drive the agent.
    Inline,
}

/// How long a thread-mode agent with a core of its own polls after its last event.
pub const DEFAULT_AGENT_POLL: Duration = Duration::from_micros(50);

/// How long a thread-mode agent stands aside after a host thread last polled in a wait or
/// posted a send or receive (posts count within 1 ms of a poll): long enough to cover the
/// gaps of a communication loop; about this late (plus the agent's 100 us nap) does it take
/// over when the host leaves.
pub const DEFAULT_AGENT_GRACE: Duration = Duration::from_micros(100);

/// Limits and choices of a network interface.
#[derive(Debug, Clone)]
pub struct NiConfig {
    /// Who runs the agent.
    pub mode: Mode,
    /// Most triggered operations pending at once; more is `NoSpace`.
    pub max_triggered: usize,
    /// Most unexpected headers per portal table entry (flow control beyond it).
    pub max_unexpected: usize,
    /// Most objects of each kind (portal entries, counters, queues, descriptors).
    pub max_objects: usize,
    /// Puts up to this size travel inside the header message; larger ones are pulled by the
    /// target with a transport get.
    pub inline_max: usize,
    /// In thread mode, pin the agent to a core (with the `hwloc` feature): agents of local
    /// ranks 0, 1, ... take the last core, the one before, and so on. `None`: not pinned.
    pub pin_slot: Option<usize>,
    /// In thread mode, how long the agent keeps polling the fabric after its last event before
    /// it sleeps: waking a sleeping agent costs microseconds per message, polling costs a core
    /// (`RDCOLL_AGENT_POLL_US`; by default 50 us when the host has two cores per rank, which is
    /// when `auto` picks thread mode, else 0).
    pub agent_poll: Duration,
    /// In thread mode, how long the agent leaves the fabric to host threads after one last
    /// polled in a wait or posted a send or receive (`RDCOLL_AGENT_GRACE_US`, default
    /// `DEFAULT_AGENT_GRACE`).
    pub agent_grace: Duration,
}

impl Default for NiConfig {
    fn default() -> Self {
        NiConfig {
            mode: Mode::Inline,
            max_triggered: 4096,
            max_unexpected: 4096,
            max_objects: 4096,
            inline_max: crate::initiator::inline_capacity().min(8192),
            pin_slot: None,
            agent_poll: Duration::ZERO,
            agent_grace: DEFAULT_AGENT_GRACE,
        }
    }
}

impl NiConfig {
    /// Defaults, with the mode from `RDCOLL_OFFLOAD=thread|inline|auto` (auto, the default:
    /// a thread when this host has at least two cores per rank of a job of `ranks_here`).
    pub fn from_env(ranks_here: usize) -> Result<NiConfig> {
        let cores = rdcoll_transport::cores::for_ranks_here(ranks_here);
        let agent_has_core = cores >= 2 * ranks_here.max(1);
        let auto = if agent_has_core {
            Mode::Thread
        } else {
            Mode::Inline
        };
        let agent_poll = match micros_from_env("RDCOLL_AGENT_POLL_US")? {
            Some(d) => d,
            None if agent_has_core => DEFAULT_AGENT_POLL,
            None => Duration::ZERO,
        };
        let agent_grace = micros_from_env("RDCOLL_AGENT_GRACE_US")?.unwrap_or(DEFAULT_AGENT_GRACE);
        let mode = match rdcoll_transport::settings::word("RDCOLL_OFFLOAD")? {
            Some("thread") => Mode::Thread,
            Some("inline") => Mode::Inline,
            _ => auto,
        };
        Ok(NiConfig {
            mode,
            pin_slot: Some(local_slot()?),
            agent_poll,
            agent_grace,
            ..NiConfig::default()
        })
    }
}

/// A duration in whole microseconds from the setting `name`, if set.
fn micros_from_env(name: &'static str) -> Result<Option<Duration>> {
    Ok(rdcoll_transport::settings::number(name)?.map(Duration::from_micros))
}

/// This rank's index among the ranks on its host, as launchers tell it (else its rank):
/// `RDCOLL_LOCAL_RANK` if set (a malformed one is an error), else the first of the other
/// launchers' variables that holds a number.
fn local_slot() -> Result<usize> {
    let slot = rdcoll_transport::settings::number_or_launchers(
        "RDCOLL_LOCAL_RANK",
        &[
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "MPI_LOCALRANKID",
            "SLURM_LOCALID",
            "RDCOLL_RANK",
        ],
    )?;
    Ok(slot.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX)))
}
