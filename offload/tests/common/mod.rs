//! A two-rank job for behaviour tests: rank 0 initiates, rank 1 is the target. Over the local
//! transport both network interfaces live in this process; in inline mode the test drives both.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use rdcoll_offload::*;
use rdcoll_transport::{Fabric, Region};

pub const WAIT: Duration = Duration::from_secs(20);

pub struct Job {
    pub ini: Ni,
    pub tgt: Ni,
    pub ini_eq: EqHandle,
    pub tgt_eq: EqHandle,
    pub pt: PtIndex,
}

pub fn fabrics(n: usize) -> Vec<Arc<dyn Fabric>> {
    rdcoll_transport::local::create(n)
        .expect("local job")
        .into_iter()
        .map(|f| Arc::new(f) as Arc<dyn Fabric>)
        .collect()
}

/// Two shm endpoints in this process (the segments are real shared memory; both ranks happen
/// to live in one process, which the shm backend does not mind).
pub fn shm_fabrics() -> Vec<Arc<dyn Fabric>> {
    let cfg = rdcoll_transport::FabricConfig::default();
    rdcoll_transport::shm::ShmFabric::job_in_process(2, &cfg)
        .expect("shm job")
        .into_iter()
        .map(|f| Arc::new(f) as Arc<dyn Fabric>)
        .collect()
}

/// Which transport a test job runs over.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Local,
    Shm,
}

pub fn job_on(backend: Backend, cfg: NiConfig, flow_control: bool) -> Job {
    let f = match backend {
        Backend::Local => fabrics(2),
        Backend::Shm => shm_fabrics(),
    };
    job_from(f, cfg, flow_control)
}

pub fn job_with(cfg: NiConfig, flow_control: bool) -> Job {
    job_from(fabrics(2), cfg, flow_control)
}

fn job_from(mut f: Vec<Arc<dyn Fabric>>, cfg: NiConfig, flow_control: bool) -> Job {
    let tgt = Ni::new(f.pop().unwrap(), cfg.clone()).unwrap();
    let ini = Ni::new(f.pop().unwrap(), cfg).unwrap();
    let ini_eq = ini.eq_alloc(256).unwrap();
    let tgt_eq = tgt.eq_alloc(256).unwrap();
    let pt = tgt.pt_alloc(Some(tgt_eq), flow_control).unwrap();
    Job {
        ini,
        tgt,
        ini_eq,
        tgt_eq,
        pt,
    }
}

pub fn job() -> Job {
    job_with(NiConfig::default(), false)
}

impl Job {
    /// Runs both agents until neither has anything left to do.
    pub fn settle(&self) {
        let mut quiet = 0;
        for _ in 0..100_000 {
            if self.ini.progress() + self.tgt.progress() == 0 {
                quiet += 1;
                if quiet > 50 {
                    return;
                }
                std::thread::yield_now();
            } else {
                quiet = 0;
            }
        }
    }

    pub fn tgt_events(&self) -> Vec<Event> {
        drain(&self.tgt, self.tgt_eq)
    }

    pub fn ini_events(&self) -> Vec<Event> {
        drain(&self.ini, self.ini_eq)
    }

    /// A target region holding `len` bytes of zeros.
    pub fn tgt_region(&self, len: usize) -> Region {
        self.tgt.fabric().alloc_region(len).unwrap()
    }

    /// A memory descriptor on the initiator over `data`, counting acks and replies on `ct`.
    pub fn md(&self, data: &[u8], ct: Option<CtHandle>) -> MdHandle {
        let r = self.ini.fabric().alloc_region(data.len().max(1)).unwrap();
        r.write(0, data).unwrap();
        let opts = MdOptions {
            ct,
            ct_ack: true,
            ct_reply: true,
            ..MdOptions::default()
        };
        self.ini.md_bind(r, Some(self.ini_eq), opts).unwrap()
    }

    pub fn append(
        &self,
        list: List,
        region: Region,
        bits: u64,
        ignore: u64,
        options: MeOptions,
        user_ptr: u64,
    ) -> MeHandle {
        self.tgt
            .me_append(
                self.pt,
                list,
                MeSpec {
                    region,
                    match_bits: bits,
                    ignore_bits: ignore,
                    match_id: MatchId::Any,
                    options,
                    user_ptr,
                },
            )
            .unwrap()
    }

    pub fn put_args(&self, md: MdHandle, len: usize, bits: u64, remote_offset: usize) -> PutArgs {
        PutArgs {
            md,
            local_offset: 0,
            len,
            ack_req: AckReq::Ack,
            target: 1,
            pt: self.pt,
            match_bits: bits,
            remote_offset,
            user_ptr: 77,
            hdr_data: 0xfeed,
        }
    }

    /// Puts `data` with `bits` at `remote_offset` and lets both sides settle.
    pub fn put(&self, data: &[u8], bits: u64, remote_offset: usize) {
        let md = self.md(data, None);
        self.ini
            .put(self.put_args(md, data.len(), bits, remote_offset))
            .unwrap();
        self.settle();
    }
}

pub fn drain(ni: &Ni, eq: EqHandle) -> Vec<Event> {
    let mut out = Vec::new();
    while let Some(ev) = ni.eq_get(eq).unwrap() {
        out.push(ev);
    }
    out
}

pub fn kinds(evs: &[Event]) -> Vec<EventKind> {
    evs.iter().map(|e| e.kind).collect()
}

pub fn read(region: &Region, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    region.read(offset, &mut v).unwrap();
    v
}
