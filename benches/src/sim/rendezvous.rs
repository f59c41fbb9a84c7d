//! Paper 002 (§4.1): a permutation on a Dragonfly, every rank sending one message to another
//! and receiving one, with 0 or 1 % of the receivers draining memory 2x, 4x or 8x slower than
//! their link; push (the whole message as one transfer: one get of all of it) against the
//! receiver-driven rendezvous of `chunk`-byte gets with `c` outstanding. Throughput as the
//! paper's: each receiver's bytes over the time from the first send to its receive's end, as
//! a fraction of the link's bandwidth, averaged over the receivers.
//!
//! On the packet-level network (the default) a slow receiver's backlog fills the lossless
//! buffers on its sender's route and blocks traffic that shares them, the congestion the
//! paper measures; on the flow-level one a slow receiver slows only what goes to it.

use rdcoll::sim::{self, DragonflyRouting, NetworkModel, SimConfig, Topology};
use rdcoll::Source;

use super::{Figure, Series};

/// What to run.
pub struct Rendezvous {
    /// Ranks per router, routers per group, global links per router.
    pub shape: (usize, usize, usize),
    /// Bytes each rank sends.
    pub bytes: usize,
    /// The rendezvous's chunk.
    pub chunk: usize,
    /// Outstanding gets to sweep.
    pub credits: Vec<usize>,
    /// How many times slower than their link the slow receivers drain (1: none slow).
    pub slowdowns: Vec<f64>,
    /// Fraction of receivers that are slow.
    pub slow_fraction: f64,
    /// Flows or packets.
    pub network: NetworkModel,
    /// How the Dragonfly routes.
    pub routing: DragonflyRouting,
}

impl Default for Rendezvous {
    /// 1,056 ranks (p = 4, a = 8, h = 4: 33 groups, Valiant routing), 1 MiB each, 16 KiB
    /// chunks; packets of 4 KiB in buffers of 64 KiB (16 packets, the paper's ratio of
    /// 256-flit buffers to 16-flit packets).
    fn default() -> Self {
        Rendezvous {
            shape: (4, 8, 4),
            bytes: 1 << 20,
            chunk: 16 << 10,
            credits: vec![2, 4, 8, 16],
            slowdowns: vec![1.0, 2.0, 4.0, 8.0],
            slow_fraction: 0.01,
            network: NetworkModel::Packets {
                mtu: 4 << 10,
                buffer: 64 << 10,
            },
            routing: DragonflyRouting::Valiant,
        }
    }
}

/// The paper's pattern: ranks paired at random (a fixed seed), each sending to its partner;
/// with an odd count the last three form a ring. Entry `r` is whom rank `r` sends to.
pub fn pairing(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut to = vec![0; n];
    let pairs = if !n.is_multiple_of(2) { n - 3 } else { n };
    for p in order[..pairs].chunks(2) {
        to[p[0]] = p[1];
        to[p[1]] = p[0];
    }
    if !n.is_multiple_of(2) {
        let ring = &order[n - 3..];
        for k in 0..3 {
            to[ring[k]] = ring[(k + 1) % 3];
        }
    }
    to
}

/// The receivers' mean throughput in one permutation, as a fraction of the link's bandwidth;
/// `credits: None` is push.
pub fn throughput(e: &Rendezvous, slowdown: f64, credits: Option<usize>) -> Result<f64, String> {
    let (p, a, h) = e.shape;
    let n = (a * h + 1) * a * p;
    let slow: Vec<(u32, f64)> = if slowdown > 1.0 {
        let count = ((n as f64 * e.slow_fraction).round() as usize).max(1);
        (0..count)
            .map(|i| ((i * n / count) as u32, 1.0 / slowdown))
            .collect()
    } else {
        Vec::new()
    };
    let cfg = SimConfig {
        topology: Topology::Dragonfly {
            ranks_per_router: p,
            routers_per_group: a,
            globals_per_router: h,
            routing: e.routing,
        },
        slow_receivers: slow,
        payload_free_above: Some(4096),
        network: e.network,
        ..SimConfig::switch(n)
    };
    let link = cfg.link_bandwidth;
    let (bytes, chunk) = (e.bytes, e.chunk);
    let to = pairing(n);
    let spans = sim::run(cfg, |comm| -> Result<(f64, f64), String> {
        let err = |e: rdcoll::Error| e.to_string();
        let (chunk, credits) = match credits {
            Some(c) => (chunk, c),
            None => (bytes.next_multiple_of(1024), 1),
        };
        comm.set_rendezvous(chunk, credits).map_err(err)?;
        let me = comm.rank() as usize;
        let from = to.iter().position(|&t| t == me).expect("a permutation") as u32;
        let to = to[me] as u32;
        let out = vec![0u8; bytes];
        let mut inbox = vec![0u8; bytes];
        let start = comm.wtime();
        comm.sendrecv(&out, to, 1, &mut inbox, from, 1)
            .map_err(err)?;
        let end = comm.wtime();
        // Everyone done before anyone leaves (leaving tells every rank).
        if me == 0 {
            for _ in 1..n {
                comm.recv(&mut [0u8; 0], Source::Any, 2).map_err(err)?;
            }
            for r in 1..n {
                comm.send(&[0u8; 0], r as u32, 3).map_err(err)?;
            }
        } else {
            comm.send(&[0u8; 0], 0, 2).map_err(err)?;
            comm.recv(&mut [0u8; 0], 0, 3).map_err(err)?;
        }
        Ok((start, end))
    })
    .map_err(|e| e.to_string())?;
    let spans: Vec<(f64, f64)> = spans.into_iter().collect::<Result<_, _>>()?;
    let first = spans.iter().map(|s| s.0).fold(f64::MAX, f64::min);
    let rates = spans.iter().map(|s| bytes as f64 / (s.1 - first) / link);
    Ok(rates.sum::<f64>() / n as f64)
}

/// Runs the experiment: per mode (push, then each `c`), normalized throughput against the
/// slow receivers' slowdown.
pub fn run(e: &Rendezvous, progress: &mut dyn FnMut(&str)) -> Result<Figure, String> {
    let modes: Vec<Option<usize>> = std::iter::once(None)
        .chain(e.credits.iter().map(|&c| Some(c)))
        .collect();
    let name = |m: &Option<usize>| match m {
        None => "push (one get)".to_string(),
        Some(c) => format!("receiver-driven, c = {c}"),
    };
    let mut series: Vec<Series> = modes.iter().map(|m| Series::new(&name(m))).collect();
    for &slowdown in &e.slowdowns {
        for (m, s) in modes.iter().zip(series.iter_mut()) {
            let wall = std::time::Instant::now();
            let t = throughput(e, slowdown, *m)?;
            progress(&format!(
                "slow receivers {slowdown}x, {}: {t:.3} of the link (simulated in {:.1} s)",
                name(m),
                wall.elapsed().as_secs_f64()
            ));
            s.points.push((slowdown, t));
        }
    }
    let (p, a, h) = e.shape;
    Ok(Figure {
        name: "rendezvous".into(),
        title: format!(
            "Random pairs on a Dragonfly of {} ranks ({:?} routing), {} KiB each, {} % slow receivers, {}",
            (a * h + 1) * a * p,
            e.routing,
            e.bytes >> 10,
            e.slow_fraction * 100.0,
            match e.network {
                NetworkModel::Flows => "flows".to_string(),
                NetworkModel::Packets { mtu, buffer } =>
                    format!("{} KiB packets, {} KiB buffers", mtu >> 10, buffer >> 10),
            }
        ),
        x_label: "slow receivers' slowdown".into(),
        y_label: "throughput (fraction of link bandwidth)".into(),
        series,
        log_y: false,
    })
}

#[cfg(test)]
mod tests {
    use super::pairing;

    #[test]
    fn pairing_is_a_permutation_without_fixed_points() {
        for n in [2, 3, 5, 72, 1056] {
            let to = pairing(n);
            let mut seen = vec![false; n];
            for (r, &t) in to.iter().enumerate() {
                assert_ne!(r, t, "{n} ranks");
                assert!(!seen[t], "{n} ranks: {t} twice");
                seen[t] = true;
            }
        }
    }
}
