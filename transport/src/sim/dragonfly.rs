//! A balanced Dragonfly (Kim et al., 2008; the network of paper 002): `g = a * h + 1` groups of
//! `a` routers, each router with `p` ranks, a link to every other router of its group, and
//! `h` global links; every pair of groups joined by one global link, router `r` of group `i`
//! holding the links to groups `i + r*h + 1 ..= i + r*h + h` (mod `g`). Minimal routing takes
//! at most a local hop, the global link and a local hop; Valiant routing goes through a
//! random intermediate group first (chosen per transfer, from its ids, so runs repeat).

use super::config::DragonflyRouting;

/// The shape of a Dragonfly.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dragonfly {
    /// Ranks per router.
    pub(crate) p: usize,
    /// Routers per group.
    pub(crate) a: usize,
    /// Global links per router.
    pub(crate) h: usize,
}

impl Dragonfly {
    pub(crate) fn groups(&self) -> usize {
        self.a * self.h + 1
    }

    /// Ranks of the whole network.
    pub(crate) fn ranks(&self) -> usize {
        self.groups() * self.a * self.p
    }

    /// Links after the ranks' own (`2 * ranks` of them, starting at `base`): each group's
    /// local links (`a * a`, the diagonal unused), then the global links (`g * g`, likewise).
    pub(crate) fn links(&self) -> usize {
        let g = self.groups();
        g * self.a * self.a + g * g
    }

    fn router_of(&self, rank: usize) -> (usize, usize) {
        let router = rank / self.p;
        (router / self.a, router % self.a)
    }

    fn local(&self, base: usize, group: usize, from: usize, to: usize) -> u32 {
        (base + (group * self.a + from) * self.a + to) as u32
    }

    fn global(&self, base: usize, from: usize, to: usize) -> u32 {
        let g = self.groups();
        (base + g * self.a * self.a + from * g + to) as u32
    }

    /// The router of group `from` that holds the global link to group `to`.
    fn gateway(&self, from: usize, to: usize) -> usize {
        let g = self.groups();
        ((to + g - from) % g - 1) / self.h
    }

    /// Router-level hops from router (`gs`, `rs`) to router (`gd`, `rd`), minimally.
    fn minimal(&self, base: usize, (gs, rs): (usize, usize), (gd, rd): (usize, usize)) -> Vec<u32> {
        let mut links = Vec::with_capacity(3);
        if gs == gd {
            if rs != rd {
                links.push(self.local(base, gs, rs, rd));
            }
            return links;
        }
        let out = self.gateway(gs, gd);
        let inn = self.gateway(gd, gs);
        if rs != out {
            links.push(self.local(base, gs, rs, out));
        }
        links.push(self.global(base, gs, gd));
        if inn != rd {
            links.push(self.local(base, gd, inn, rd));
        }
        links
    }

    /// The network links (after the ranks' own) from rank `from` to rank `to`; `salt` picks
    /// Valiant's intermediate group.
    pub(crate) fn route(
        &self,
        base: usize,
        from: usize,
        to: usize,
        routing: DragonflyRouting,
        salt: u64,
    ) -> Vec<u32> {
        let (src, dst) = (self.router_of(from), self.router_of(to));
        let g = self.groups();
        if routing == DragonflyRouting::Minimal || src.0 == dst.0 || g < 3 {
            return self.minimal(base, src, dst);
        }
        // A group other than both ends, from a hash of the transfer.
        let mut x = salt ^ ((from as u64) << 32 | to as u64);
        x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        let mut mid = (x % (g as u64 - 2)) as usize;
        for end in [src.0.min(dst.0), src.0.max(dst.0)] {
            if mid >= end {
                mid += 1;
            }
        }
        let landing = (mid, self.gateway(mid, src.0));
        let mut links = self.minimal(base, src, landing);
        links.extend(self.minimal(base, landing, dst));
        links
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// p = 2, a = 4, h = 2: 9 groups, 72 ranks. Every pair of groups is joined once, and
    /// each route ends in the destination's group.
    #[test]
    fn every_group_pair_has_one_global_link_and_routes_arrive() {
        let d = Dragonfly { p: 2, a: 4, h: 2 };
        assert_eq!((d.groups(), d.ranks()), (9, 72));
        let g = d.groups();
        for i in 0..g {
            let mut seen = vec![0; g];
            for r in 0..d.a {
                for k in 1..=d.h {
                    seen[(i + r * d.h + k) % g] += 1;
                }
            }
            assert!((0..g).all(|j| seen[j] == usize::from(j != i)), "{seen:?}");
            for j in (0..g).filter(|&j| j != i) {
                assert!(d.gateway(i, j) < d.a);
            }
        }
        let base = 144;
        let global_base = base + g * d.a * d.a;
        for (from, to) in [(0, 71), (5, 6), (0, 1), (17, 40)] {
            for routing in [DragonflyRouting::Minimal, DragonflyRouting::Valiant] {
                let links = d.route(base, from, to, routing, 7);
                let globals = links.iter().filter(|&&l| l as usize >= global_base).count();
                let same_group = d.router_of(from).0 == d.router_of(to).0;
                match (routing, same_group) {
                    (_, true) => assert_eq!(globals, 0),
                    (DragonflyRouting::Minimal, false) => assert_eq!(globals, 1),
                    (_, false) => assert_eq!(globals, 2),
                }
                assert!(links.len() <= 6 && links.iter().all(|&l| (l as usize) < base + d.links()));
            }
        }
    }
}
