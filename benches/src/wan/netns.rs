//! An emulated multi-cluster WAN on this machine (paper 003 §4.1, Fig. 7, with namespaces for
//! nodes): every node is a network namespace with one link to its cluster's router (another
//! namespace); the routers are joined by a bridge in the calling namespace. Traffic inside a
//! cluster goes node → router → node unshaped; traffic between clusters leaves the source
//! cluster's router through an HTB class per destination cluster (the wide-area link's
//! bandwidth, changed during a run with `tc class change`) and reaches a node through its
//! router port's HTB class for wide-area traffic (the node's wide-area NIC). Needs root,
//! iproute2 and tc (HTB; netem, and so delay, is not available on these kernels).
//!
//! Addresses: router of cluster c 10.253.0.(c+1) on the bridge and 10.254.c.1 inside, node n
//! of cluster c 10.254.c.(n+2).

use std::process::Command;

#[cfg(test)]
use rdcoll_bench::wan_scenario::UNCAPPED;
/// [`UNCAPPED`] as tc writes it (bytes per second).
const FAST: &str = "1250000000bps";
/// HTB burst: small, so that a cap holds over short intervals.
const BURST: &str = "32k";

/// One emulated WAN, removed on drop.
pub struct Wan {
    id: u32,
    clusters: usize,
    nodes: usize,
}

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Runs `command`, whose words are separated by spaces (none of them holds one).
fn sh(command: &str) -> Result<(), String> {
    run(&command.split(' ').collect::<Vec<_>>())
}

fn rate(bytes_per_s: u64) -> String {
    format!("{}bps", bytes_per_s.max(1000))
}

impl Wan {
    /// `clusters` clusters of `nodes` nodes, every link uncapped.
    pub fn new(clusters: usize, nodes: usize) -> Result<Wan, String> {
        if !(1..=50).contains(&clusters) || !(1..=50).contains(&nodes) {
            return Err("1-50 clusters of 1-50 nodes".into());
        }
        let wan = Wan {
            id: std::process::id() % 100_000,
            clusters,
            nodes,
        };
        if let Err(e) = wan.build() {
            wan.remove();
            return Err(e);
        }
        Ok(wan)
    }

    fn bridge(&self) -> String {
        format!("rdwb{}", self.id)
    }

    /// The router namespace of cluster `c`.
    fn router(&self, c: usize) -> String {
        format!("rdwr{}-{c}", self.id)
    }

    /// Node `n` of cluster `c`'s namespace.
    pub fn node_ns(&self, c: usize, n: usize) -> String {
        format!("rdwn{}-{c}-{n}", self.id)
    }

    /// Node `n` of cluster `c`'s address.
    pub fn node_ip(c: usize, n: usize) -> String {
        format!("10.254.{c}.{}", n + 2)
    }

    /// The router's port towards node `n` (in the router's namespace).
    fn port(&self, c: usize, n: usize) -> String {
        format!("rdwp{}-{c}-{n}", self.id)
    }

    fn uplink(&self, c: usize) -> String {
        format!("rdwu{}-{c}", self.id)
    }

    fn build(&self) -> Result<(), String> {
        let br = self.bridge();
        sh(&format!("ip link add {br} type bridge"))?;
        sh(&format!("ip link set {br} up"))?;
        for c in 0..self.clusters {
            let r = self.router(c);
            let up = self.uplink(c);
            let outside = format!("rdwk{}-{c}", self.id);
            sh(&format!("ip netns add {r}"))?;
            sh(&format!("ip link add {up} type veth peer name {outside}"))?;
            sh(&format!("ip link set {up} netns {r}"))?;
            sh(&format!("ip link set {outside} master {br}"))?;
            sh(&format!("ip link set {outside} up"))?;
            sh(&format!(
                "ip -n {r} addr add 10.253.0.{}/24 dev {up}",
                c + 1
            ))?;
            sh(&format!("ip -n {r} link set {up} up"))?;
            sh(&format!("ip -n {r} link set lo up"))?;
            sh(&format!("ip -n {r} link add brc type bridge"))?;
            sh(&format!("ip -n {r} addr add 10.254.{c}.1/24 dev brc"))?;
            sh(&format!("ip -n {r} link set brc up"))?;
            for key in ["net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0"] {
                sh(&format!("ip netns exec {r} sysctl -qw {key}"))?;
            }
            for d in (0..self.clusters).filter(|&d| d != c) {
                let via = format!("10.253.0.{}", d + 1);
                sh(&format!("ip -n {r} route add 10.254.{d}.0/24 via {via}"))?;
            }
            // The wide-area links out of this cluster: one class per destination cluster.
            sh(&format!(
                "tc -n {r} qdisc add dev {up} root handle 1: htb default 99"
            ))?;
            sh(&format!(
                "tc -n {r} class add dev {up} parent 1: classid 1:99 htb rate {FAST}"
            ))?;
            for d in (0..self.clusters).filter(|&d| d != c) {
                let class = format!("1:{}", 10 + d);
                sh(&format!("tc -n {r} class add dev {up} parent 1: classid {class} htb rate {FAST} burst {BURST}"))?;
                sh(&format!("tc -n {r} filter add dev {up} parent 1: protocol ip prio 1 u32 match ip dst 10.254.{d}.0/24 flowid {class}"))?;
            }
            for n in 0..self.nodes {
                self.build_node(c, n)?;
            }
        }
        Ok(())
    }

    fn build_node(&self, c: usize, n: usize) -> Result<(), String> {
        let (r, ns, port) = (self.router(c), self.node_ns(c, n), self.port(c, n));
        let inside = format!("rdwv{}-{c}-{n}", self.id);
        sh(&format!("ip netns add {ns}"))?;
        sh(&format!(
            "ip -n {r} link add {port} type veth peer name {inside}"
        ))?;
        sh(&format!("ip -n {r} link set {inside} netns {ns}"))?;
        sh(&format!("ip -n {r} link set {port} master brc"))?;
        sh(&format!("ip -n {r} link set {port} up"))?;
        sh(&format!(
            "ip -n {ns} addr add {}/24 dev {inside}",
            Wan::node_ip(c, n)
        ))?;
        sh(&format!("ip -n {ns} link set {inside} up"))?;
        sh(&format!("ip -n {ns} link set lo up"))?;
        sh(&format!("ip -n {ns} route add default via 10.254.{c}.1"))?;
        // What reaches the node: wide-area traffic through 1:1 (its NIC), its cluster's own
        // through 1:2.
        sh(&format!(
            "tc -n {r} qdisc add dev {port} root handle 1: htb default 1"
        ))?;
        sh(&format!(
            "tc -n {r} class add dev {port} parent 1: classid 1:1 htb rate {FAST} burst {BURST}"
        ))?;
        sh(&format!(
            "tc -n {r} class add dev {port} parent 1: classid 1:2 htb rate {FAST}"
        ))?;
        sh(&format!("tc -n {r} filter add dev {port} parent 1: protocol ip prio 1 u32 match ip src 10.254.{c}.0/24 flowid 1:2"))?;
        Ok(())
    }

    /// Caps the wide-area link from cluster `from` to cluster `to` at `bytes_per_s`.
    pub fn set_link(&self, from: usize, to: usize, bytes_per_s: u64) -> Result<(), String> {
        let (r, up, class, rt) = (
            self.router(from),
            self.uplink(from),
            format!("1:{}", 10 + to),
            rate(bytes_per_s),
        );
        sh(&format!("tc -n {r} class change dev {up} parent 1: classid {class} htb rate {rt} ceil {rt} burst {BURST}"))
    }

    /// Caps what node `n` of cluster `c` receives from other clusters at `bytes_per_s`.
    pub fn set_node(&self, c: usize, n: usize, bytes_per_s: u64) -> Result<(), String> {
        let (r, port, rt) = (self.router(c), self.port(c, n), rate(bytes_per_s));
        sh(&format!("tc -n {r} class change dev {port} parent 1: classid 1:1 htb rate {rt} ceil {rt} burst {BURST}"))
    }
}

impl Wan {
    /// Removes every namespace and the bridge (also what a run left half built).
    pub fn remove(&self) {
        for c in 0..self.clusters {
            for n in 0..self.nodes {
                let _ = sh(&format!("ip netns del {}", self.node_ns(c, n)));
            }
            let _ = sh(&format!("ip netns del {}", self.router(c)));
        }
        let _ = sh(&format!("ip link del {}", self.bridge()));
    }
}

impl Drop for Wan {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_uncapped_rate_is_what_tc_gets() {
        assert_eq!(super::rate(super::UNCAPPED), super::FAST);
    }
}
