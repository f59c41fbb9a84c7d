//! `rdcoll-bench info`: what this process would run with — rank and size as the launcher set
//! them, the transport choice, and every `RDCOLL_*` setting with its effective value.

use rdcoll_transport::bootstrap::{host_identity, rank_and_size, TransportChoice};
use rdcoll_transport::{FabricConfig, MAX_MESSAGE_SIZE};

/// Prints the configuration; returns the exit code (non-zero if a setting is malformed).
pub fn run(_args: &[String]) -> i32 {
    let report = || -> Result<(), String> {
        let (rank, size) = rank_and_size().map_err(|e| e.to_string())?;
        let choice = TransportChoice::from_env().map_err(|e| e.to_string())?;
        let c = FabricConfig::from_env().map_err(|e| e.to_string())?;
        let var = |k: &str| std::env::var(k).unwrap_or_else(|_| "(unset)".into());
        println!("rank / size               {rank} / {size}");
        println!("RDCOLL_STORE              {}", var("RDCOLL_STORE"));
        println!("RDCOLL_STORE_SERVER       {}", var("RDCOLL_STORE_SERVER"));
        println!("RDCOLL_TRANSPORT          {choice:?}");
        println!("RDCOLL_TCP_HOST           {}", var("RDCOLL_TCP_HOST"));
        println!("RDCOLL_PEER_TIMEOUT_MS    {}", c.peer_timeout.as_millis());
        println!(
            "RDCOLL_BOOTSTRAP_TIMEOUT_MS {}",
            c.bootstrap_timeout.as_millis()
        );
        match c.shm_ring_bytes {
            Some(b) => println!("RDCOLL_SHM_RING_BYTES     {b}"),
            None => println!(
                "RDCOLL_SHM_RING_BYTES     by job size (2 ranks: {})",
                c.shm_ring_bytes_for(2)
            ),
        }
        println!("RDCOLL_SHM_HEAP_BYTES     {}", c.shm_heap_bytes);
        println!("RDCOLL_SHM_CMA            {}", c.shm_cma as u8);
        println!("RDCOLL_MAX_REGIONS        {}", c.max_regions);
        println!(
            "RDCOLL_SINK_RATE          {}",
            c.sink_rate
                .map_or("(unset)".to_string(), |r| format!("{r} bytes/s"))
        );
        let p2p = rdcoll_offload::p2p::P2pConfig::from_env().map_err(|e| e.to_string())?;
        println!("RDCOLL_EAGER_LIMIT        {}", p2p.eager_limit);
        println!("RDCOLL_RNDV_CHUNK         {}", p2p.rndv_chunk);
        println!("RDCOLL_RNDV_CREDITS       {}", p2p.rndv_credits);
        let ni = rdcoll_offload::NiConfig::from_env(size).map_err(|e| e.to_string())?;
        println!(
            "RDCOLL_OFFLOAD            {:?} (for {size} ranks on this host)",
            ni.mode
        );
        let coll = rdcoll::CollConfig::from_env().map_err(|e| e.to_string())?;
        println!(
            "RDCOLL_BCAST_SMALL_MAX    {}",
            coll.bcast_small_max.map_or(
                "(unset: 4 KiB where all ranks share one host, else 32 KiB)".into(),
                |b| b.to_string()
            )
        );
        println!(
            "RDCOLL_BCAST_BLOCK        {}",
            coll.bcast_block.map_or(
                "(unset: RDMC len/k, k = one per 128 KiB, 2..16, at least log2 ranks; 32 KiB..1 MiB; 2 ranks or more ranks than cores: one block up to 1 MiB; shared staging 256 KiB chunks up to 1 MiB, 1 MiB beyond)"
                    .into(),
                |b| b.to_string()
            )
        );
        println!(
            "RDCOLL_BCAST_TRANSFER     {}",
            coll.bcast_transfer.map_or(
                "(unset: staged when ranks outnumber cores, else write)".into(),
                |t| format!("{t:?}")
            )
        );
        println!("RDCOLL_BCAST_ALGORITHM    {:?}", coll.bcast_algorithm);
        println!(
            "RDCOLL_CLUSTER            {}",
            coll.cluster.as_deref().unwrap_or("(unset: the host)")
        );
        println!("RDCOLL_ALLREDUCE_SMALL_MAX {}", coll.allreduce_small_max);
        println!("RDCOLL_ALLREDUCE_DEGREE   {:?}", coll.allreduce_degree);
        println!("RDCOLL_BARRIER_ALGORITHM  {:?}", coll.barrier_algorithm);
        match coll.multicast_piece {
            Some(p) => println!("RDCOLL_MULTICAST_PIECE    {p}"),
            None => println!(
                "RDCOLL_MULTICAST_PIECE    by length (1 GiB: {})",
                coll.multicast_piece_for(1 << 30)
            ),
        }
        println!("RDCOLL_MULTICAST_GETS     {}", coll.multicast_gets);
        let model = rdcoll::Model::load().map_err(|e| e.to_string())?;
        println!(
            "RDCOLL_ALLREDUCE_MODEL    {} (alpha {} ns, beta {} ns/B, gamma {} ns/B)",
            rdcoll::Model::path().map_or("(no home)".into(), |p| p.display().to_string()),
            model.per_message_ns,
            model.per_byte_ns,
            model.reduce_per_byte_ns
        );
        println!("RDCOLL_LOG                {}", var("RDCOLL_LOG"));
        println!("max active message        {MAX_MESSAGE_SIZE} bytes");
        println!("host identity             {}", host_identity());
        Ok(())
    };
    match report() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("rdcoll-bench info: {e}");
            1
        }
    }
}
