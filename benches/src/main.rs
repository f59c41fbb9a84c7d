//! `rdcoll-bench`: the benchmark binary. Each subcommand measures one layer and prints the
//! comparison it is judged against in the same run.

mod bcast;
mod compare;
mod faults;
mod info;
mod match_comm;
mod matching;
mod offload;
mod p2p;
mod paired;
mod soak;
mod stability;
mod suite;
mod transport;
mod wan;

fn usage() -> ! {
    eprintln!("usage: rdcoll-bench <info|latency|bw|bibw|sendrecv|bcast|allreduce|reduce|barrier|allgather|allgatherv|gather|scatter|alltoall|alltoallv|reduce_scatter|scan|transport|match|offload|faults|soak|stability|suite|wan> [options]");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else { usage() };
    let rest = &args[1..];
    let code = match cmd.as_str() {
        "info" => info::run(rest),
        "faults" => faults::run(rest),
        // A rank of a `faults` trial (started by it).
        "fault-rank" => faults::rank(rest),
        "match" if match_comm::wanted(rest) => match_comm::run(rest),
        "match" => matching::run(rest),
        "offload" => offload::run(rest),
        "transport" => transport::run(rest),
        "soak" => soak::run(rest),
        // A rank of a `soak` job (started by it).
        "soak-rank" => soak::rank(rest),
        "stability" => stability::run(rest),
        "suite" => suite::run(rest),
        "wan" => wan::run(rest),
        // A rank of a `wan` run (started by it).
        "wan-rank" => wan::rank(rest),
        _ => match (
            rdcoll_bench::coll::CollKind::from_name(cmd),
            rdcoll_bench::osu::Kind::from_name(cmd),
        ) {
            (Some(kind), _) => bcast::run(kind, rest),
            (None, Some(kind)) => p2p::run(kind, rest),
            (None, None) => usage(),
        },
    };
    std::process::exit(code);
}
