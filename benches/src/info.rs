//! `rdcoll-bench info`: what this process would run with. Every declared `RDCOLL_*` setting
//! (`rdcoll_transport::settings::SETTINGS`, so none is left out) with its value or default,
//! then what they come to here: rank and size as the launcher set them, the transport, the
//! offload mode, the allreduce model. A malformed setting is an error naming it (exit 1).

use rdcoll_transport::bootstrap::{host_identity, rank_and_size, TransportChoice};
use rdcoll_transport::settings::{self, SETTINGS};
use rdcoll_transport::{FabricConfig, MAX_MESSAGE_SIZE};

/// Prints the configuration; returns the exit code (non-zero if a setting is malformed).
pub fn run(_args: &[String]) -> i32 {
    match report() {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("rdcoll-bench info: {e}");
            1
        }
    }
}

/// The report, or the first malformed setting.
pub fn report() -> Result<String, String> {
    use std::fmt::Write as _;
    let mut out = String::new();
    let width = SETTINGS.iter().map(|s| s.name.len()).max().unwrap_or(0);
    for s in SETTINGS {
        settings::read(s.name).map_err(|e| e.to_string())?;
        let shown = match settings::given(s.name) {
            Some(v) => v,
            None => format!("(unset: {})", s.default.replace('`', "")),
        };
        let _ = writeln!(out, "{:<width$}  {:<7}  {shown}", s.name, s.level.name());
    }
    let (rank, size) = rank_and_size().map_err(|e| e.to_string())?;
    let choice = TransportChoice::from_env().map_err(|e| e.to_string())?;
    let fabric = FabricConfig::from_env().map_err(|e| e.to_string())?;
    rdcoll_offload::p2p::P2pConfig::from_env().map_err(|e| e.to_string())?;
    let ni = rdcoll_offload::NiConfig::from_env(size).map_err(|e| e.to_string())?;
    let coll = rdcoll::CollConfig::from_env().map_err(|e| e.to_string())?;
    let model = rdcoll::Model::load().map_err(|e| e.to_string())?;
    let _ = writeln!(out, "\nin this process:");
    let _ = writeln!(out, "rank / size                {rank} / {size}");
    let _ = writeln!(out, "transport                  {choice:?}");
    let _ = writeln!(
        out,
        "offload agent              {:?} (for {size} ranks on this host)",
        ni.mode
    );
    let _ = writeln!(
        out,
        "shm rings                  {} bytes each at 2 ranks",
        fabric.shm_ring_bytes_for(2)
    );
    let _ = writeln!(
        out,
        "multicast piece            {} bytes for 1 GiB",
        coll.multicast_piece_for(1 << 30)
    );
    let _ = writeln!(
        out,
        "allreduce model            {} (alpha {} ns, beta {} ns/B, gamma {} ns/B)",
        rdcoll::Model::path().map_or("(no home)".into(), |p| p.display().to_string()),
        model.per_message_ns,
        model.per_byte_ns,
        model.reduce_per_byte_ns
    );
    let _ = writeln!(out, "max active message         {MAX_MESSAGE_SIZE} bytes");
    let _ = writeln!(out, "host identity              {}", host_identity());
    Ok(out)
}
