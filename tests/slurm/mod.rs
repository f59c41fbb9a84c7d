//! A one-node Slurm for tests: `slurmctld` and `slurmd` in the foreground, as root, with
//! `auth/none` and ports of their own in a temporary directory; stopped when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running one-node Slurm.
pub struct Slurm {
    dir: PathBuf,
    conf: String,
    daemons: Vec<Child>,
}

/// Whether `program` is on the `PATH` (Slurm's clients fail `--version` without a
/// configuration).
fn runs(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Output of a command, trimmed ("" if it cannot run).
fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// A TCP port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

impl Slurm {
    /// Starts Slurm and waits until its node is idle; `None` (saying why) where Slurm is not
    /// installed or this is not root (slurmd runs jobs as their user, and only root may).
    pub fn start() -> Option<Slurm> {
        if !["slurmctld", "slurmd", "srun", "sinfo"]
            .iter()
            .all(|p| runs(p))
        {
            eprintln!("Slurm (slurmctld, slurmd, srun) is not installed: not checked");
            return None;
        }
        if output("id", &["-u"]) != "0" {
            eprintln!("not root: a test Slurm cannot run jobs; not checked");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("rdcoll-slurm-{}", std::process::id()));
        for sub in ["state", "spool"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let host = output("hostname", &[]);
        let (ctld_port, d_port) = (free_port(), free_port());
        let d = dir.display();
        let conf = format!(
            "ClusterName=rdcolltest\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={d_port}\n\
             AuthType=auth/none\n\
             CredType=cred/none\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/pgid\n\
             TaskPlugin=task/none\n\
             SchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             ReturnToService=2\n\
             MpiDefault=none\n\
             SlurmdParameters=config_overrides\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN\n\
             PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP \
             OverSubscribe=FORCE\n"
        );
        let conf_path = dir.join("slurm.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let conf = conf_path.to_string_lossy().into_owned();
        let spawn = |program: &str, args: &[&str]| {
            Command::new(program)
                .args(args)
                .env("SLURM_CONF", &conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{program}: {e}"))
        };
        let mut slurm = Slurm {
            daemons: vec![spawn("slurmctld", &["-D", "-c", "-f", &conf])],
            dir,
            conf: conf.clone(),
        };
        slurm
            .daemons
            .push(spawn("slurmd", &["-D", "-N", &host, "-f", &conf]));
        let start = Instant::now();
        loop {
            let state = Command::new("sinfo")
                .args(["-h", "-o", "%t"])
                .env("SLURM_CONF", &conf)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            if state == "idle" {
                return Some(slurm);
            }
            if start.elapsed() > Duration::from_secs(60) {
                let log = |f: &str| std::fs::read_to_string(slurm.dir.join(f)).unwrap_or_default();
                panic!(
                    "the test Slurm did not come up (node state {state:?}):\n{}\n{}",
                    log("slurmctld.log"),
                    log("slurmd.log")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The configuration file (for `SLURM_CONF`).
    pub fn conf(&self) -> &str {
        &self.conf
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
