//! The RDMC experiment (papers 000 and 001): sequential send, chain, binomial tree and
//! binomial pipeline broadcasts of one large message to 4-512 ranks on a full-bisection
//! network, each as a multiple of one point-to-point transfer of the message, beside the
//! binomial pipeline's bound of (l + k - 1) / k transfers (k blocks, l = log2 of the ranks).

use rdcoll::sim::{self, SimConfig};
use rdcoll::{BcastAlgorithm, BcastSchedule, BcastTransfer, CollConfig};

use super::{Figure, Series};

/// What to run.
pub struct Rdmc {
    /// Message size in bytes.
    pub bytes: usize,
    /// Block size in bytes.
    pub block: usize,
    /// Job sizes.
    pub ranks: Vec<usize>,
    /// The network.
    pub network: SimConfig,
}

impl Default for Rdmc {
    fn default() -> Self {
        Rdmc {
            bytes: 256 << 20,
            block: 1 << 20,
            ranks: vec![4, 8, 16, 32, 64, 128, 256, 512],
            network: SimConfig::switch(2),
        }
    }
}

/// The broadcasts the papers compare, in their order.
pub const ALGORITHMS: [BcastSchedule; 4] = [
    BcastSchedule::Sequential,
    BcastSchedule::Chain,
    BcastSchedule::BinomialTree,
    BcastSchedule::BinomialPipeline,
];

/// Virtual seconds from the root's start of one `bytes` broadcast with `algorithm` on `ranks`
/// ranks until the last rank has it. Payload-free above one block's notice: the blocks move
/// no bytes, the protocol's own messages do.
pub fn bcast_time(
    network: &SimConfig,
    ranks: usize,
    bytes: usize,
    block: usize,
    algorithm: BcastSchedule,
) -> Result<f64, String> {
    let cfg = SimConfig {
        ranks,
        payload_free_above: Some(4096),
        ..network.clone()
    };
    let coll = CollConfig {
        bcast_algorithm: BcastAlgorithm::Rdmc(algorithm),
        bcast_transfer: Some(BcastTransfer::Write),
        bcast_block: Some(block),
        ..CollConfig::default()
    };
    let (start, end) = super::bcast_span(cfg, bytes, &|_| coll.clone())?;
    Ok(end - start)
}

/// Virtual seconds of one `bytes` put between two ranks, until its completion: the unit the
/// papers measure broadcasts in.
pub fn one_transfer(network: &SimConfig, bytes: usize) -> Result<f64, String> {
    let cfg = SimConfig {
        ranks: 2,
        payload_free_above: Some(4096),
        ..network.clone()
    };
    let times = sim::run(cfg, |comm| -> Result<f64, String> {
        let f = comm.fabric();
        let region = f.alloc_region(bytes).map_err(|e| e.to_string())?;
        let err = |e: rdcoll::TransportError| e.to_string();
        if comm.rank() == 1 {
            f.send(0, &region.remote().to_bytes()).map_err(err)?;
            // Stays until rank 0 is done with its region.
            while !matches!(
                f.wait(None).map_err(err)?,
                Some(rdcoll::transport::Event::Message { .. })
            ) {}
            return Ok(0.0);
        }
        let peer = loop {
            if let Some(rdcoll::transport::Event::Message { data, .. }) =
                f.wait(None).map_err(err)?
            {
                break rdcoll::transport::RemoteRegion::from_bytes(&data).map_err(err)?;
            }
        };
        let start = comm.wtime();
        let op = f.put(&region, 0, bytes, peer.at(0), None).map_err(err)?;
        loop {
            match f.wait(None).map_err(err)? {
                Some(rdcoll::transport::Event::Completed { op: done, result }) if done == op => {
                    result.map_err(err)?;
                    break;
                }
                _ => {}
            }
        }
        let took = comm.wtime() - start;
        f.send(1, b"done").map_err(err)?;
        Ok(took)
    })
    .map_err(|e| e.to_string())?;
    times.into_iter().next().expect("rank 0's time")
}

/// Runs the experiment: one series per algorithm plus the bound, in units of one transfer.
pub fn run(e: &Rdmc, progress: &mut dyn FnMut(&str)) -> Result<Figure, String> {
    let unit = one_transfer(&e.network, e.bytes)?;
    let blocks = e.bytes.div_ceil(e.block) as f64;
    let mut series: Vec<Series> = ALGORITHMS.iter().map(|a| Series::new(a.name())).collect();
    let mut bound = Series::new("(l+k-1)/k bound");
    for &n in &e.ranks {
        let l = (n as f64).log2().ceil();
        bound.points.push((n as f64, (l + blocks - 1.0) / blocks));
        for (a, s) in ALGORITHMS.iter().zip(series.iter_mut()) {
            let wall = std::time::Instant::now();
            let t = bcast_time(&e.network, n, e.bytes, e.block, *a)?;
            progress(&format!(
                "{} ranks, {}: {:.3} ms ({:.3} transfers; simulated in {:.1} s)",
                n,
                a.name(),
                t * 1e3,
                t / unit,
                wall.elapsed().as_secs_f64()
            ));
            s.points.push((n as f64, t / unit));
        }
    }
    series.push(bound);
    Ok(Figure {
        name: "rdmc".into(),
        title: format!(
            "RDMC broadcast of {} MiB, {} KiB blocks, simulated full-bisection network",
            e.bytes >> 20,
            e.block >> 10
        ),
        x_label: "ranks".into(),
        y_label: "time / one transfer".into(),
        series,
        log_y: true,
    })
}
