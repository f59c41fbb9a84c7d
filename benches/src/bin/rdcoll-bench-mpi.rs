//! `rdcoll-bench-mpi latency|bw|bibw|sendrecv [OSU options]`: the same OSU loops as `rdcoll-bench`, on
//! MPI through the `mpi` crate, for side-by-side runs (`rdcoll-bench ... --vs-mpi`). Build it
//! against each installed MPI with `scripts/build-mpi-bench`; start it with `mpirun -n 2`.

use mpi::collective::{CommunicatorCollectives, Root};
use mpi::datatype::{Partition, PartitionMut};
use mpi::point_to_point::{Destination, Source};
use mpi::topology::Communicator;
use rdcoll_bench::coll::{self, CollKind, Collective};
use rdcoll_bench::depth::{self, DepthCase, DepthComm};
use rdcoll_bench::osu::{self, Kind, Messenger, Options};

struct MpiMessenger {
    world: mpi::topology::SimpleCommunicator,
}

impl Messenger for MpiMessenger {
    fn rank(&self) -> u32 {
        self.world.rank() as u32
    }
    fn send(&self, buf: &[u8], peer: u32, tag: u32) -> Result<(), String> {
        self.world
            .process_at_rank(peer as i32)
            .send_with_tag(buf, tag as i32);
        Ok(())
    }
    fn recv(&self, buf: &mut [u8], peer: u32, tag: u32) -> Result<(), String> {
        self.world
            .process_at_rank(peer as i32)
            .receive_into_with_tag(buf, tag as i32);
        Ok(())
    }
    fn send_window(&self, buf: &[u8], window: usize, peer: u32, tag: u32) -> Result<(), String> {
        let p = self.world.process_at_rank(peer as i32);
        mpi::request::scope(|scope| {
            let reqs: Vec<_> = (0..window)
                .map(|_| p.immediate_send_with_tag(scope, buf, tag as i32))
                .collect();
            for r in reqs {
                r.wait();
            }
        });
        Ok(())
    }
    fn recv_window(&self, bufs: &mut [Vec<u8>], peer: u32, tag: u32) -> Result<(), String> {
        let p = self.world.process_at_rank(peer as i32);
        mpi::request::scope(|scope| {
            let reqs: Vec<_> = bufs
                .iter_mut()
                .map(|b| p.immediate_receive_into_with_tag(scope, &mut b[..], tag as i32))
                .collect();
            for r in reqs {
                r.wait();
            }
        });
        Ok(())
    }
    fn sendrecv(&self, buf: &[u8], into: &mut [u8], peer: u32, tag: u32) -> Result<(), String> {
        let p = self.world.process_at_rank(peer as i32);
        mpi::point_to_point::send_receive_into_with_tags(buf, &p, tag as i32, into, &p, tag as i32);
        Ok(())
    }
    fn exchange_window(
        &self,
        buf: &[u8],
        bufs: &mut [Vec<u8>],
        peer: u32,
        tag: u32,
    ) -> Result<(), String> {
        let p = self.world.process_at_rank(peer as i32);
        let n = bufs.len();
        mpi::request::scope(|scope| {
            let recvs: Vec<_> = bufs
                .iter_mut()
                .map(|b| p.immediate_receive_into_with_tag(scope, &mut b[..], tag as i32))
                .collect();
            let sends: Vec<_> = (0..n)
                .map(|_| p.immediate_send_with_tag(scope, buf, tag as i32))
                .collect();
            for r in recvs {
                r.wait();
            }
            for r in sends {
                r.wait();
            }
        });
        Ok(())
    }
    fn wtime(&self) -> f64 {
        mpi::time()
    }
}

impl Collective for MpiMessenger {
    fn rank(&self) -> u32 {
        self.world.rank() as u32
    }
    fn size(&self) -> usize {
        self.world.size() as usize
    }
    fn bcast(&self, buf: &mut [u8], root: u32) -> Result<(), String> {
        self.world.process_at_rank(root as i32).broadcast_into(buf);
        Ok(())
    }
    fn barrier(&self) -> Result<(), String> {
        self.world.barrier();
        Ok(())
    }
    fn allreduce_f32(&self, send: &[f32], recv: &mut [f32]) -> Result<(), String> {
        self.world
            .all_reduce_into(send, recv, mpi::collective::SystemOperation::sum());
        Ok(())
    }
    fn reduce_f32(&self, send: &[f32], recv: &mut [f32], root: u32) -> Result<(), String> {
        let p = self.world.process_at_rank(root as i32);
        if Collective::rank(self) == root {
            p.reduce_into_root(send, recv, mpi::collective::SystemOperation::sum());
        } else {
            p.reduce_into(send, mpi::collective::SystemOperation::sum());
        }
        Ok(())
    }
    fn allgather(&self, send: &[u8], recv: &mut [u8]) -> Result<(), String> {
        self.world.all_gather_into(send, recv);
        Ok(())
    }
    fn allgatherv(&self, send: &[u8], recv: &mut [u8], counts: &[usize]) -> Result<(), String> {
        let (counts, displs) = counts_and_displs(counts);
        let mut part = PartitionMut::new(recv, &counts[..], &displs[..]);
        self.world.all_gather_varcount_into(send, &mut part);
        Ok(())
    }
    fn gather(&self, send: &[u8], recv: &mut [u8], root: u32) -> Result<(), String> {
        let p = self.world.process_at_rank(root as i32);
        if Collective::rank(self) == root {
            p.gather_into_root(send, recv);
        } else {
            p.gather_into(send);
        }
        Ok(())
    }
    fn scatter(&self, send: &[u8], recv: &mut [u8], root: u32) -> Result<(), String> {
        let p = self.world.process_at_rank(root as i32);
        if Collective::rank(self) == root {
            p.scatter_into_root(send, recv);
        } else {
            p.scatter_into(recv);
        }
        Ok(())
    }
    fn alltoall(&self, send: &[u8], recv: &mut [u8]) -> Result<(), String> {
        self.world.all_to_all_into(send, recv);
        Ok(())
    }
    fn alltoallv(&self, send: &[u8], recv: &mut [u8], counts: &[usize]) -> Result<(), String> {
        let (counts, displs) = counts_and_displs(counts);
        let send = Partition::new(send, &counts[..], &displs[..]);
        let mut recv = PartitionMut::new(recv, &counts[..], &displs[..]);
        self.world.all_to_all_varcount_into(&send, &mut recv);
        Ok(())
    }
    fn reduce_scatter_f32(&self, send: &[f32], recv: &mut [f32]) -> Result<(), String> {
        self.world
            .reduce_scatter_block_into(send, recv, mpi::collective::SystemOperation::sum());
        Ok(())
    }
    fn scan_f32(&self, send: &[f32], recv: &mut [f32]) -> Result<(), String> {
        self.world
            .scan_into(send, recv, mpi::collective::SystemOperation::sum());
        Ok(())
    }
    fn iallreduce_f32(
        &self,
        send: &[f32],
        recv: &mut [f32],
        during: &mut dyn FnMut(),
    ) -> Result<(), String> {
        mpi::request::scope(|scope| {
            let r = self.world.immediate_all_reduce_into(
                scope,
                send,
                recv,
                mpi::collective::SystemOperation::sum(),
            );
            during();
            r.wait();
        });
        Ok(())
    }
    fn ibcast(&self, buf: &mut [u8], root: u32, during: &mut dyn FnMut()) -> Result<(), String> {
        mpi::request::scope(|scope| {
            let r = self
                .world
                .process_at_rank(root as i32)
                .immediate_broadcast_into(scope, buf);
            during();
            r.wait();
        });
        Ok(())
    }
    fn send(&self, buf: &[u8], peer: u32, tag: u32) -> Result<(), String> {
        Messenger::send(self, buf, peer, tag)
    }
    fn recv(&self, buf: &mut [u8], peer: u32, tag: u32) -> Result<(), String> {
        Messenger::recv(self, buf, peer, tag)
    }
    fn wtime(&self) -> f64 {
        mpi::time()
    }
}

/// MPI's counts and displacements (packed) for blocks of `counts` bytes.
fn counts_and_displs(counts: &[usize]) -> (Vec<i32>, Vec<i32>) {
    let c: Vec<i32> = counts.iter().map(|&x| x as i32).collect();
    let d: Vec<i32> = c
        .iter()
        .scan(0i32, |at, &x| {
            let here = *at;
            *at += x;
            Some(here)
        })
        .collect();
    (c, d)
}

impl DepthComm for MpiMessenger {
    fn rank(&self) -> u32 {
        self.world.rank() as u32
    }
    fn send(&self, buf: &[u8], peer: u32, tag: u32) -> Result<(), String> {
        Messenger::send(self, buf, peer, tag)
    }
    fn recv(&self, buf: &mut [u8], from: Option<u32>, tag: u32) -> Result<(), String> {
        match from {
            Some(peer) => Messenger::recv(self, buf, peer, tag)?,
            None => {
                self.world
                    .any_process()
                    .receive_into_with_tag(buf, tag as i32);
            }
        }
        Ok(())
    }
    fn recv_all(
        &self,
        bufs: &mut [[u8; 8]],
        specs: &[(Option<u32>, u32)],
        between: &mut dyn FnMut() -> Result<(), String>,
    ) -> Result<(), String> {
        mpi::request::scope(|scope| {
            let mut reqs = Vec::with_capacity(specs.len());
            for (buf, &(from, tag)) in bufs.iter_mut().zip(specs) {
                let buf = &mut buf[..];
                reqs.push(match from {
                    Some(peer) => self
                        .world
                        .process_at_rank(peer as i32)
                        .immediate_receive_into_with_tag(scope, buf, tag as i32),
                    None => self
                        .world
                        .any_process()
                        .immediate_receive_into_with_tag(scope, buf, tag as i32),
                });
            }
            let between = between();
            for r in reqs {
                r.wait();
            }
            between
        })
    }
    fn wtime(&self) -> f64 {
        mpi::time()
    }
}

/// Initialises MPI (exits if it was already): the universe, and the library's name.
fn start() -> (mpi::environment::Universe, String) {
    let Some(universe) = mpi::initialize() else {
        eprintln!("rdcoll-bench-mpi: MPI was already initialised");
        std::process::exit(1);
    };
    let what = mpi::environment::library_version()
        .ok()
        .and_then(|v| v.lines().next().map(|l| l.trim().to_string()))
        .unwrap_or_else(|| "MPI".into());
    (universe, what)
}

/// `rdcoll-bench-mpi match-depth unexpected|posted [--any] [--max-depth N]`: the depth
/// pattern of `rdcoll-bench match --through-comm`.
fn match_depth(args: &[String]) {
    let case = args.first().and_then(|c| DepthCase::from_name(c));
    let any = args.iter().skip(1).any(|a| a == "--any");
    let max_depth = match args.iter().position(|a| a == "--max-depth") {
        Some(at) => args.get(at + 1).and_then(|v| v.parse().ok()),
        None => Some(usize::MAX),
    };
    let (Some(case), Some(max_depth)) = (case, max_depth) else {
        eprintln!("usage: rdcoll-bench-mpi match-depth unexpected|posted [--any] [--max-depth N]");
        std::process::exit(2);
    };
    let (universe, what) = start();
    let m = MpiMessenger {
        world: universe.world(),
    };
    match depth::run(&m, case, any, max_depth) {
        Ok(rows) => {
            if DepthComm::rank(&m) == 1 {
                print!("{}", depth::format(&what, case, any, &rows));
            }
        }
        Err(e) => {
            eprintln!("rdcoll-bench-mpi: {e}");
            std::process::exit(1);
        }
    }
}

/// `rdcoll-bench-mpi bcast|barrier [-m ..] [--rdmc]`.
fn collective(kind: CollKind, args: &[String]) {
    let (opts, rest) = match Options::parse(args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("rdcoll-bench-mpi: {e}");
            std::process::exit(2);
        }
    };
    let rdmc = rest.iter().any(|a| a == "--rdmc");
    let compute_ms = rest
        .iter()
        .position(|a| a == "--compute-ms")
        .and_then(|i| rest.get(i + 1))
        .and_then(|v| v.parse::<f64>().ok());
    let known = |i: usize, a: &String| {
        a == "--rdmc" || a == "--compute-ms" || (i > 0 && rest[i - 1] == "--compute-ms")
    };
    if let Some((_, bad)) = rest.iter().enumerate().find(|(i, a)| !known(*i, a)) {
        eprintln!("rdcoll-bench-mpi: unknown option {bad}");
        std::process::exit(2);
    }
    let (universe, what) = start();
    let m = MpiMessenger {
        world: universe.world(),
    };
    if kind.nonblocking() {
        match rdcoll_bench::overlap::run(&m, kind, &opts, compute_ms) {
            Ok(rows) if Collective::rank(&m) == 0 => {
                print!("{}", rdcoll_bench::overlap::format(kind, &what, &rows))
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("rdcoll-bench-mpi: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    match coll::run(&m, kind, &opts, rdmc) {
        Ok(rows) => {
            if Collective::rank(&m) == 0 {
                print!("{}", coll::format(kind, &what, &rows, &[], opts.full));
            }
        }
        Err(e) => {
            eprintln!("rdcoll-bench-mpi: {e}");
            std::process::exit(1);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "match-depth") {
        match_depth(&args[1..]);
        return;
    }
    if let Some(kind) = args.first().and_then(|a| CollKind::from_name(a)) {
        collective(kind, &args[1..]);
        return;
    }
    let Some(kind) = args.first().and_then(|a| Kind::from_name(a)) else {
        eprintln!(
            "usage: rdcoll-bench-mpi <latency|bw|bibw|sendrecv|bcast|allreduce|reduce|barrier|allgather|allgatherv|gather|scatter|alltoall|alltoallv|reduce_scatter|scan> [-m [MIN:]MAX] [-i N] [-x N] [-W N] [-f]"
        );
        std::process::exit(2);
    };
    let opts = match Options::parse(&args[1..]) {
        Ok((o, rest)) if rest.is_empty() => o,
        Ok((_, rest)) => {
            eprintln!("rdcoll-bench-mpi: unknown options {rest:?}");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("rdcoll-bench-mpi: {e}");
            std::process::exit(2);
        }
    };
    let Some(universe) = mpi::initialize() else {
        eprintln!("rdcoll-bench-mpi: MPI was already initialised");
        std::process::exit(1);
    };
    let (version, _) = mpi::environment::library_version()
        .map(|v| (v, ()))
        .unwrap_or_default();
    let m = MpiMessenger {
        world: universe.world(),
    };
    match osu::run(&m, kind, &opts) {
        Ok(rows) => {
            if Messenger::rank(&m) == 0 {
                let first_line = version.lines().next().unwrap_or("MPI").trim().to_string();
                print!("{}", osu::format_table(kind, &first_line, &rows));
            }
        }
        Err(e) => {
            eprintln!("rdcoll-bench-mpi: {e}");
            std::process::exit(1);
        }
    }
}
