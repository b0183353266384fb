//! The simulated processes: starting, restarting, joining alone, and the application on top of
//! each (its backlog of messages, its events, the views it installs, what it delivers).

use super::{guarantees, key, Event, SimNode, World, RETIRE_GRACE};
use crate::diagram::{DatagramRecord, Lost};
use crate::oracle::{self, Channel, Delivery, Installed, MsgId, Sent, Transfer};
use bytes::Bytes;
use motet_core::{Action, Address, ApiError, AppEvent, EndpointId, GroupName, LayerKind, Node, StackId, ViewState};
use rand::{Rng, RngCore};
use std::sync::Arc;

impl World<'_> {
    /// A node that had not started comes up alone (a singleton, non-primary view) and must merge.
    pub(super) fn start(&mut self, index: usize) {
        if self.nodes[index].alive || self.trace.crashed[index].is_some() {
            return;
        }
        let endpoint = *self.endpoints.iter().find(|(_, &i)| i == index).expect("every node has an endpoint").0;
        self.note(format!("node {index} starts alone"));
        self.bring_up_alone(index, endpoint);
    }

    /// A crashed process restarts: a new endpoint, at a new address, in a view of its own; the
    /// others learn its address (as a re-resolved seed list would tell them), and it must merge.
    pub(super) fn restart(&mut self, old: usize) {
        let index = self.nodes.len();
        let endpoint = EndpointId(self.rng.next_u64());
        let mut node = Node::new();
        node.set_bypass(self.options.bypass);
        self.address.push(index as u32);
        // The same application, restarted: it discards its own casts if it did.
        let loopback = self.nodes[old].loopback;
        let local = self.options.stack.layers().contains(&LayerKind::Local);
        self.nodes.push(SimNode::idle(node, loopback, local));
        let hears_own = self.nodes[index].hears_own;
        self.endpoints.insert(endpoint, index);
        self.trace.nodes += 1;
        self.trace.crashed.push(None);
        self.trace.left.push(false);
        self.trace.exited.push(false);
        self.trace.no_loopback.push(!hears_own);
        self.refresh_peers();
        self.note(format!("node {old} restarts as a new endpoint, node {index}"));
        self.bring_up_alone(index, endpoint);
    }

    /// Tells every node where every process can be found now (as a re-resolved seed list would).
    pub(super) fn refresh_peers(&mut self) {
        let addresses: Vec<Address> = self.address.iter().map(|&a| Address::Sim(a)).collect();
        for sim in &mut self.nodes {
            sim.node.set_peers(GroupName::new("sim"), addresses.clone());
        }
    }

    /// Joins `endpoint` at node `index` in a view of its own. A process starting alone is not the
    /// primary partition: it must merge into it.
    pub(super) fn bring_up_alone(&mut self, index: usize, endpoint: EndpointId) {
        let mut alone = ViewState::initial(
            GroupName::new("sim"),
            self.options.stack.clone(),
            self.options.config.clone(),
            vec![endpoint],
            vec![Address::Sim(self.address[index])],
        );
        alone.primary = false;
        let view = Arc::new(alone);
        self.nodes[index].join(self.now, &view, 0);
        self.flush(index);
    }

    /// Submits the node's backlog in order until flow control pushes back.
    pub(super) fn submit(&mut self, node: usize) {
        // State-transfer actions first: the application's casts wait for the transfer to end.
        while let Some(next) = self.nodes[node].xfer_out.front().cloned() {
            let action = match next {
                Some((chunk, last)) => Action::XferChunk { payload: chunk.into(), last },
                None => Action::XferDone,
            };
            let sim = &mut self.nodes[node];
            match sim.node.handle_action(self.now, sim.stack, action) {
                Ok(()) => drop(sim.xfer_out.pop_front()),
                Err(ApiError::FlowBlocked { .. }) => break,
                // The view ended (a member failed): the next transfer view starts over.
                Err(_) => sim.xfer_out.clear(),
            }
            self.flush(node);
        }
        while let Some(&id) = self.nodes[node].backlog.front() {
            let len = self.rng.gen_range(16..=self.options.payload_max.max(16));
            let mut bytes = id.tag().to_vec();
            let causal =
                self.nodes[node].views.get(&self.nodes[node].stack).is_some_and(|v| guarantees(&v.stack).causal);
            if causal && id.channel == Channel::Cast {
                // The sender's vector clock, for the causal oracle (issue 5: payloads carry it).
                bytes.extend(oracle::encode_clock(&self.nodes[node].clock));
            }
            let filled = bytes.len();
            bytes.resize(len.max(bytes.len()), 0);
            self.rng.fill_bytes(&mut bytes[filled..]);
            let payload = Bytes::from(bytes);
            let action = match id.channel {
                Channel::Cast => Action::Cast(payload.clone().into()),
                Channel::Send { dest } => {
                    // Sends address ranks of the current view; a destination outside it is
                    // unreachable from here, and the application drops the message.
                    let view = self.nodes[node].view();
                    let Some(rank) = view.members.iter().position(|e| self.endpoints[e] == dest) else {
                        self.nodes[node].backlog.pop_front();
                        continue;
                    };
                    Action::send(rank as u16, payload.clone().into())
                }
            };
            let sim = &mut self.nodes[node];
            let view = key(sim.view());
            match sim.node.handle_action(self.now, sim.stack, action) {
                Ok(()) => {
                    sim.backlog.pop_front();
                    if !sim.hears_own && id.channel == Channel::Cast {
                        // An application that discards its own casts knows them as it sends.
                        sim.know(id);
                    }
                    self.trace.sent.push(Sent { id, time: self.now, digest: oracle::digest(&payload), view });
                    self.flush(node);
                }
                Err(ApiError::FlowBlocked { .. } | ApiError::Blocked) => break,
                Err(ApiError::Left | ApiError::NoSuchStack) => {
                    // This node left the group: its application sends no more.
                    self.nodes[node].backlog.pop_front();
                }
                // The destination has failed (a static stack told so by the driver): unreachable,
                // as one outside the view, and the application drops the message.
                Err(ApiError::MemberFailed { .. }) => {
                    self.nodes[node].backlog.pop_front();
                }
                Err(other) => panic!("the simulated application misused the API: {other}"),
            }
        }
    }

    /// Sends the node's datagrams into the network and hands its events to the application.
    pub(super) fn flush(&mut self, index: usize) {
        self.nodes[index].node.check_invariants();
        // With bundles, each destination's datagrams of this turn, in order of first use.
        let mut bundles: Vec<(usize, Vec<Bytes>)> = Vec::new();
        while let Some(out) = self.nodes[index].node.poll_transmit() {
            let datagram = out.to_bytes();
            for address in out.to.addresses() {
                let Address::Sim(to) = address else { unreachable!("simulated addresses only") };
                match self.route(to) {
                    Ok(to) if self.options.bundles => match bundles.iter_mut().find(|(t, _)| *t == to) {
                        Some((_, parts)) => parts.push(datagram.clone()),
                        None => bundles.push((to, vec![datagram.clone()])),
                    },
                    Ok(to) => self.transmit(index, to, vec![datagram.clone()]),
                    // A closed socket: the datagram is lost.
                    Err(owner) => {
                        super::mark(&mut self.hasher, b'r', &[index as u64]);
                        self.datagrams += 1;
                        self.datagrams_lost += 1;
                        if self.options.record_datagrams {
                            self.datagrams_log.push(DatagramRecord {
                                from: index,
                                to: owner,
                                sent: self.now,
                                delivered: None,
                                duplicate: false,
                                lost: Some(Lost::AddressClosed),
                            });
                        }
                    }
                }
            }
        }
        for (to, parts) in bundles {
            self.transmit(index, to, parts);
        }
        let mut released = false;
        while let Some((stack, event)) = self.nodes[index].node.poll_event() {
            match event {
                AppEvent::View { view, .. } => {
                    self.install(index, stack, view);
                    released = true;
                }
                AppEvent::Cast { origin, payload } => self.deliver(index, stack, origin, true, payload.to_bytes()),
                AppEvent::Send { origin, payload } => self.deliver(index, stack, origin, false, payload.to_bytes()),
                AppEvent::FlowBlock { blocked: false, .. } => released = true,
                AppEvent::Exit => {
                    self.nodes[index].alive = false;
                    self.trace.exited[index] = true;
                    self.note(format!("node {index} exits"));
                }
                AppEvent::Block => {
                    self.nodes[index].blocked.insert(stack);
                }
                // A transfer of a view this node has already left starts over in its new view.
                AppEvent::XferProvide | AppEvent::XferChunk { .. } if stack != self.nodes[index].stack => {}
                // A faulty application: it streams nothing. Its member must leave (`xfer`'s stall
                // watch), which the oracles then check as for a member asked to leave.
                AppEvent::XferProvide if self.options.never_streams.contains(&index) => {
                    self.trace.left[index] = true;
                    self.note(format!("node {index}'s application never streams the state it provides"));
                }
                AppEvent::XferProvide => {
                    // The state as it stands at the view's start, in chunks of 256 B.
                    let bytes: Vec<u8> = self.nodes[index].state.iter().flat_map(|id| id.tag()).collect();
                    let view = key(&self.nodes[index].views[&stack]);
                    self.trace.transfers.push(Transfer {
                        view,
                        node: index,
                        provided: true,
                        digest: oracle::digest(&bytes),
                    });
                    let chunks: Vec<&[u8]> = if bytes.is_empty() { vec![&[][..]] } else { bytes.chunks(256).collect() };
                    let last = chunks.len() - 1;
                    let sim = &mut self.nodes[index];
                    for (i, chunk) in chunks.into_iter().enumerate() {
                        sim.xfer_out.push_back(Some((Bytes::copy_from_slice(chunk), i == last)));
                    }
                    sim.xfer_out.push_back(None);
                    released = true;
                }
                AppEvent::XferChunk { payload, last } => {
                    let sim = &mut self.nodes[index];
                    sim.staging.extend_from_slice(&payload.to_bytes());
                    if last {
                        let bytes = std::mem::take(&mut sim.staging);
                        sim.state = bytes.chunks(12).filter_map(MsgId::parse).collect();
                        if !self.options.never_done.contains(&index) {
                            sim.xfer_out.push_back(None);
                        }
                        let view = key(&sim.views[&stack]);
                        self.trace.transfers.push(Transfer {
                            view,
                            node: index,
                            provided: false,
                            digest: oracle::digest(&bytes),
                        });
                        released = true;
                    }
                }
                AppEvent::FlowBlock { .. } => {}
            }
        }
        if released && self.nodes[index].alive {
            self.submit(index);
        }
    }

    /// A node's stack installed its view: it becomes the node's current stack.
    pub(super) fn install(&mut self, node: usize, stack: StackId, view: Arc<ViewState>) {
        let members: Vec<usize> = view.members.iter().map(|e| self.endpoints[e]).collect();
        let view_key = key(&view);
        self.hasher.update(&self.now.0.to_le_bytes());
        super::mark(&mut self.hasher, b'v', &[node as u64]);
        self.hasher.update(&view_key.0.to_le_bytes());
        self.hasher.update(&view_key.1.to_le_bytes());
        // What the view holds, not only its name: members in rank order and the primary flag.
        let primary = u64::from(view.primary);
        super::mark(&mut self.hasher, b'm', &members.iter().map(|&m| m as u64).chain([primary]).collect::<Vec<_>>());
        if view_key.0 > 0 {
            self.note(format!("node {node} installs view {} of {:?}", view_key.0, members));
        }
        let guarantees = guarantees(&view.stack);
        let addresses: Vec<u32> =
            view.addresses.iter().map(|a| if let Address::Sim(a) = a { *a } else { u32::MAX }).collect();
        // And the view's stack and addresses (a switch, a migration), which the oracles check.
        super::mark(&mut self.hasher, b's', &addresses.iter().map(|&a| u64::from(a)).collect::<Vec<_>>());
        self.hasher.update(view.stack.to_string().as_bytes());
        // Endpoint migration: once the node's view has its new address, its old ones close after
        // a grace period; a view without it (formed by a merge) makes it ask again.
        let own = self.address[node];
        if let Some(rank) = view.members.iter().position(|e| self.endpoints[e] == node) {
            if addresses[rank] == own {
                let old =
                    std::iter::once(node as u32).chain(self.routes.iter().filter(|(_, &n)| n == node).map(|(&a, _)| a));
                for address in old.filter(|&a| a != own).collect::<Vec<_>>() {
                    self.retired.entry(address).or_insert(self.now + RETIRE_GRACE);
                }
            } else {
                self.schedule(self.now, Event::Migrate { node, again: true });
            }
        }
        self.trace.views.push(Installed {
            time: self.now,
            node,
            view: view_key,
            members,
            primary: view.primary,
            guarantees,
            stack: view.stack.to_string(),
            addresses,
            xfer: view.xfer_view,
        });
        let sim = &mut self.nodes[node];
        sim.views.insert(stack, view);
        sim.stack = stack;
        if sim.lagging {
            // A new view's stack starts with credit flowing: the runtime says the lag again.
            let _ = sim.node.handle_action(self.now, stack, Action::Lagging(true));
        }
        // A transfer cut short by this view change starts over (in this view, if it transfers).
        sim.staging.clear();
        sim.xfer_out.clear();
    }

    pub(super) fn deliver(&mut self, node: usize, stack: StackId, origin: u16, cast: bool, payload: Bytes) {
        let view = &self.nodes[node].views[&stack];
        let (origin, view) = (self.endpoints[&view.members[usize::from(origin)]], key(view));
        self.hasher.update(&self.now.0.to_le_bytes());
        super::mark(&mut self.hasher, b'd', &[node as u64, origin as u64, u64::from(cast)]);
        self.hasher.update(&oracle::digest(&payload).to_le_bytes());
        if let Some(id) = MsgId::parse(&payload).filter(|_| cast) {
            self.nodes[node].know(id);
        }
        let blocked = self.nodes[node].blocked.contains(&stack);
        self.trace.deliveries.push(Delivery { time: self.now, node, origin, cast, payload, view, blocked });
    }
}

impl SimNode {
    /// The application has cast `id` in its state, and in the vector clock it writes into its
    /// casts.
    fn know(&mut self, id: MsgId) {
        self.state.insert(id);
        if self.clock.len() <= id.origin {
            self.clock.resize(id.origin + 1, 0);
        }
        self.clock[id.origin] = self.clock[id.origin].max(id.index + 1);
    }
}
