//! One node of a Robber multicast (paper 003 §3.1, phases 3 and 4) as a state machine: it is
//! told what arrives (a control message, a piece it got) and returns what to do (messages to
//! send, pieces to get), so the same code runs over the fabric and in the tests' simulation.
//!
//! Differences from the paper, all in how data moves: a `request` / `piece` pair is a
//! one-sided get from the holder's buffer (whose descriptor its bitfield carries, so a node
//! gets from a peer only once that peer's bitfield has come); a node keeps at most
//! `gets_per_peer` gets outstanding to each peer. With `steal` off the node is MOB's: its
//! share of the work is fixed.

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::pieces::Pieces;
use super::plan::Plan;
use super::wire::Msg;

/// What a multicast's nodes share.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    /// Pieces of the message.
    pub(crate) pieces: usize,
    /// Robber (work stealing) rather than MOB (static work).
    pub(crate) steal: bool,
    /// Gets outstanding to one peer at most.
    pub(crate) gets_per_peer: usize,
}

/// What a node asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Send `msg` to node `to`.
    Send { to: usize, msg: Msg },
    /// Get `piece` from node `from`'s buffer (at the piece's offset, into the same place in
    /// this node's buffer); report it with [`Node::on_piece`].
    Get { from: usize, piece: usize },
}

/// A peer, as this node knows it.
struct PeerState {
    node: usize,
    local: bool,
    /// What it desires from this node.
    wants: Pieces,
    /// What it is known to hold (its bitfields and haves).
    holds: Pieces,
    /// Its bitfield (with its buffer's descriptor) has come: gets from it may start.
    answered: bool,
    gets: usize,
    /// The pieces of the gets outstanding to it.
    asked: Pieces,
    /// In this node's labour force (a local peer that presumably has work).
    working: bool,
    done: bool,
    stop_sent: bool,
    stop_heard: bool,
}

/// One node's multicast state.
pub(crate) struct Node {
    me: usize,
    params: Params,
    peers: Vec<PeerState>,
    have: Pieces,
    pending: Pieces,
    work: Pieces,
    /// The local peer a steal is outstanding to.
    stealing: Option<usize>,
    /// The order in which it pulls pieces from global peers (see `Node::new`).
    order: Order,
    done_sent: bool,
    rng: StdRng,
    out: Vec<Action>,
}

/// The order in which a node pulls from global peers: its own segment first, in order, then
/// at random (see `Node::new`).
#[derive(Clone, Debug)]
struct Order {
    segment: Pieces,
    start: usize,
}

impl Order {
    /// The next piece of `holds & want` not in `except`.
    fn next(
        &self,
        holds: &Pieces,
        want: &Pieces,
        except: &Pieces,
        rng: &mut StdRng,
    ) -> Option<usize> {
        holds
            .first_from(&want.and(&self.segment), except, self.start)
            .or_else(|| holds.pick(want, except, rng))
    }
}

/// A message that the protocol does not allow where it came.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct OutOfStep(pub(crate) String);

impl Node {
    /// Node `me` of `plan`, holding `have`; its cluster as a whole holds `cluster_has` (its
    /// work is an equal share of the rest, by collective rank, as the paper divides it). Its
    /// cluster is number `stagger.0` of the `stagger.1` clusters that pull pieces in (see
    /// `order_start`).
    pub(crate) fn new(
        me: usize,
        plan: &Plan,
        have: Pieces,
        cluster_has: &Pieces,
        stagger: (usize, usize),
        params: Params,
        seed: u64,
    ) -> Node {
        let p = params.pieces;
        let to_steal: Vec<usize> = Pieces::all(p).minus(cluster_has).iter().collect();
        let (rank, size) = plan.place(me);
        let share = |r: usize| (r * to_steal.len()).div_ceil(size);
        let mut work = Pieces::none(p);
        for &i in &to_steal[share(rank)..share(rank + 1)] {
            work.insert(i);
        }
        let work = work.minus(&have);
        // From global peers a node takes first, in order, the pieces of its own segment of
        // its range (the range cut in as many segments as there are clusters that pull), so
        // that the clusters pull different pieces from the root's cluster at first and then
        // feed each other; then the rest at random, as the paper picks. And it takes from a
        // global peer first what no other global peer is known to hold (those will come from
        // that one). Random picks alone made the clusters pull the same pieces from the root's
        // cluster and left the links between them idle (56-59 % of the maximum on the emulated
        // fast links against 88-90 %; commits 0f5a06b and e560d81).
        let mine = &to_steal[share(rank)..share(rank + 1)];
        let (slot, slots) = (stagger.0, stagger.1.max(1));
        let own = &mine[slot * mine.len() / slots..(slot + 1) * mine.len() / slots];
        let mut segment = Pieces::none(p);
        for &i in own {
            segment.insert(i);
        }
        let order = Order {
            start: own.first().copied().unwrap_or(0),
            segment,
        };
        let peers = plan.peers[me]
            .iter()
            .map(|peer| PeerState {
                node: peer.node,
                local: peer.local,
                wants: Pieces::none(p),
                holds: Pieces::none(p),
                answered: false,
                gets: 0,
                asked: Pieces::none(p),
                working: false,
                done: false,
                stop_sent: false,
                stop_heard: false,
            })
            .collect();
        Node {
            me,
            params,
            peers,
            pending: Pieces::none(p),
            have,
            work,
            stealing: None,
            order,
            done_sent: false,
            rng: StdRng::seed_from_u64(seed ^ (me as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            out: Vec::new(),
        }
    }

    /// The first actions: desires to the peers, found-work to the local ones.
    pub(crate) fn start(&mut self) -> Vec<Action> {
        for k in 0..self.peers.len() {
            let desire = self.desire_for(k);
            if !desire.is_empty() {
                self.send(k, Msg::Desire(desire));
            }
        }
        if self.params.steal && !self.work.is_empty() {
            self.tell_locals(Msg::FoundWork);
        }
        self.after_change();
        std::mem::take(&mut self.out)
    }

    /// Node `from` sent `msg`.
    pub(crate) fn on_message(&mut self, from: usize, msg: Msg) -> Result<Vec<Action>, OutOfStep> {
        let k = self.peer(from)?;
        if self.peers[k].stop_heard {
            return Err(OutOfStep(format!(
                "node {from} sent {msg:?} after its stop"
            )));
        }
        match msg {
            Msg::Desire(set) => {
                let answer = self.have.and(&set);
                self.peers[k].wants = set;
                self.send(k, Msg::Bitfield(answer));
            }
            Msg::Bitfield(set) => {
                let peer = &mut self.peers[k];
                peer.holds.add(&set);
                peer.answered = true;
                self.request_from(k);
            }
            Msg::Have(i) => {
                self.peers[k].holds.insert(i as usize);
                self.request_from(k);
            }
            Msg::Steal => {
                if !self.peers[k].local {
                    return Err(OutOfStep(format!("global peer {from} tried to steal work")));
                }
                let give = if self.params.steal {
                    let half = self.work.len().div_ceil(2);
                    self.work.take_first(half)
                } else {
                    Pieces::none(self.params.pieces)
                };
                let gave = !give.is_empty();
                self.send(k, Msg::Work(give));
                if gave {
                    self.tell_globals_desire();
                }
            }
            Msg::Work(set) => {
                if self.stealing == Some(k) {
                    self.stealing = None;
                }
                let got = set.minus(&self.have).minus(&self.pending);
                if got.is_empty() {
                    self.peers[k].working = false;
                } else {
                    // The new work sequence.
                    self.work.add(&got);
                    self.tell_globals_desire();
                    for g in 0..self.peers.len() {
                        if !self.peers[g].local {
                            self.request_from(g);
                        }
                    }
                    self.tell_locals(Msg::FoundWork);
                }
            }
            Msg::FoundWork => self.peers[k].working = true,
            Msg::Done => {
                self.peers[k].done = true;
                self.stop_if_both_done(k);
            }
            Msg::Stop => self.peers[k].stop_heard = true,
        }
        self.after_change();
        Ok(std::mem::take(&mut self.out))
    }

    /// The get of `piece` from node `from` has brought it.
    pub(crate) fn on_piece(&mut self, from: usize, piece: usize) -> Result<Vec<Action>, OutOfStep> {
        let k = self.peer(from)?;
        if !self.peers[k].asked.remove(piece) {
            return Err(OutOfStep(format!(
                "piece {piece} from {from} was not asked for"
            )));
        }
        self.peers[k].gets -= 1;
        self.pending.remove(piece);
        self.have.insert(piece);
        self.work.remove(piece);
        for j in 0..self.peers.len() {
            let peer = &self.peers[j];
            if j != k && (peer.local || peer.wants.contains(piece)) {
                self.send(j, Msg::Have(piece as u32));
            }
        }
        self.request_from(k);
        self.after_change();
        Ok(std::mem::take(&mut self.out))
    }

    /// Every piece is here, and every peer has said its stop: nothing more will come from or
    /// be asked of this node.
    pub(crate) fn finished(&self) -> bool {
        self.done_sent && self.peers.iter().all(|p| p.stop_heard && p.stop_sent)
    }

    /// The pieces this node holds.
    #[cfg(test)]
    pub(crate) fn have(&self) -> &Pieces {
        &self.have
    }

    /// The peers whose stop has not come yet (those this node still depends on).
    pub(crate) fn waiting_for(&self) -> impl Iterator<Item = usize> + '_ {
        self.peers.iter().filter(|p| !p.stop_heard).map(|p| p.node)
    }

    fn peer(&self, node: usize) -> Result<usize, OutOfStep> {
        self.peers
            .iter()
            .position(|p| p.node == node)
            .ok_or_else(|| OutOfStep(format!("node {node} is not a peer of node {}", self.me)))
    }

    fn send(&mut self, k: usize, msg: Msg) {
        self.out.push(Action::Send {
            to: self.peers[k].node,
            msg,
        });
    }

    fn tell_locals(&mut self, msg: Msg) {
        for k in 0..self.peers.len() {
            if self.peers[k].local {
                self.send(k, msg.clone());
            }
        }
    }

    /// The new desire (this node's work) to every global peer.
    fn tell_globals_desire(&mut self) {
        for k in 0..self.peers.len() {
            if !self.peers[k].local {
                let desire = self.desire_for(k);
                self.send(k, Msg::Desire(desire));
            }
        }
    }

    /// What this node wants from peer `k`: from a local peer every piece it lacks, from a
    /// global one its work.
    fn desire_for(&self, k: usize) -> Pieces {
        if self.peers[k].local {
            Pieces::all(self.params.pieces).minus(&self.have)
        } else {
            self.work.clone()
        }
    }

    /// Gets from peer `k` what it holds and this node wants, up to the bound on outstanding
    /// gets.
    fn request_from(&mut self, k: usize) {
        if !self.peers[k].answered {
            return;
        }
        let all = Pieces::all(self.params.pieces);
        // What the other answered global peers hold (to take from `k` first what they lack).
        let mut others = Pieces::none(self.params.pieces);
        for (j, other) in self.peers.iter().enumerate() {
            if j != k && !other.local && other.answered {
                others.add(&other.holds);
            }
        }
        while self.peers[k].gets < self.params.gets_per_peer {
            let mut except = self.have.clone();
            except.add(&self.pending);
            let want = if self.peers[k].local {
                &all
            } else {
                &self.work
            };
            let holds = &self.peers[k].holds;
            let picked = if self.peers[k].local {
                holds.pick(want, &except, &mut self.rng)
            } else {
                let mut elsewhere = except.clone();
                elsewhere.add(&others);
                let rng = &mut self.rng;
                self.order
                    .next(holds, want, &elsewhere, rng)
                    .or_else(|| self.order.next(holds, want, &except, rng))
            };
            let Some(piece) = picked else {
                break;
            };
            self.pending.insert(piece);
            self.work.remove(piece);
            self.peers[k].gets += 1;
            self.peers[k].asked.insert(piece);
            let from = self.peers[k].node;
            self.out.push(Action::Get { from, piece });
        }
    }

    /// Retires (done to every peer) once every piece is here, and steals while unemployed.
    fn after_change(&mut self) {
        if !self.done_sent && self.have.is_full() {
            self.done_sent = true;
            for k in 0..self.peers.len() {
                self.send(k, Msg::Done);
                self.stop_if_both_done(k);
            }
        }
        self.try_steal();
    }

    fn stop_if_both_done(&mut self, k: usize) {
        if self.done_sent && self.peers[k].done && !self.peers[k].stop_sent {
            self.peers[k].stop_sent = true;
            self.send(k, Msg::Stop);
        }
    }

    /// An unemployed node (no work, not every piece here or asked for) steals from a random
    /// member of its labour force, one steal at a time.
    fn try_steal(&mut self) {
        let retired = self.have.len() + self.pending.len() == self.params.pieces;
        if !self.params.steal || self.stealing.is_some() || !self.work.is_empty() || retired {
            return;
        }
        let force: Vec<usize> = (0..self.peers.len())
            .filter(|&k| self.peers[k].local && self.peers[k].working && !self.peers[k].done)
            .collect();
        if force.is_empty() {
            return;
        }
        use rand::Rng;
        let k = force[self.rng.gen_range(0..force.len())];
        self.stealing = Some(k);
        self.send(k, Msg::Steal);
    }
}
