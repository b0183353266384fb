//! Endpoints, groups and the replicated, immutable [`ViewState`] (thesis §2.1.3-2.1.7, Table 2.3).

use crate::layers::StackConfig;
use crate::spec::StackSpec;
use crate::Rank;
use core::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

/// An endpoint identifier. It contains no address, so an endpoint can migrate between processes
/// (thesis §2.1.3). Drivers choose it: the simulator numbers its nodes; the runtime counts the
/// high bits down with the time the endpoint was made and draws the rest at random, so that at
/// equal logical times the older coordinator's partition grants a merge (`heal` orders views by
/// (primary, view id)).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointId(pub u64);

impl fmt::Debug for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{:016x}", self.0)
    }
}

impl fmt::Display for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Reads an id as it is printed (`e` and up to 16 hex digits), as scripts and tools give it back.
impl std::str::FromStr for EndpointId {
    type Err = String;

    fn from_str(text: &str) -> Result<EndpointId, String> {
        let bad = || format!("`{text}` is not an endpoint id: `e` and up to 16 hex digits, as views print it");
        let digits = |h: &&str| (1..=16).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_hexdigit());
        let hex = text.strip_prefix('e').filter(digits).ok_or_else(bad)?;
        u64::from_str_radix(hex, 16).map(EndpointId).map_err(|_| bad())
    }
}

/// A group is only a name (thesis §2.1.4): there is no group object anywhere.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct GroupName(pub Arc<str>);

impl GroupName {
    /// A group called `name`.
    pub fn new(name: &str) -> GroupName {
        GroupName(Arc::from(name))
    }
}

/// Where a process can be reached. Data only: the core never opens a socket.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Address {
    /// A node of the deterministic simulator.
    Sim(u32),
    /// A UDP/IP address.
    Inet(SocketAddr),
}

impl From<Address> for motet_wire::WireAddress {
    fn from(address: Address) -> motet_wire::WireAddress {
        match address {
            Address::Sim(node) => motet_wire::WireAddress::Sim(node),
            Address::Inet(SocketAddr::V4(a)) => motet_wire::WireAddress::V4(a.ip().octets(), a.port()),
            Address::Inet(SocketAddr::V6(a)) => motet_wire::WireAddress::V6(a.ip().octets(), a.port()),
        }
    }
}

impl From<motet_wire::WireAddress> for Address {
    fn from(address: motet_wire::WireAddress) -> Address {
        match address {
            motet_wire::WireAddress::Sim(node) => Address::Sim(node),
            motet_wire::WireAddress::V4(ip, port) => Address::Inet(SocketAddr::from((ip, port))),
            motet_wire::WireAddress::V6(ip, port) => Address::Inet(SocketAddr::from((ip, port))),
        }
    }
}

/// A view identifier: a logical time plus the coordinator that made the view (thesis Table 2.3,
/// `view_id`). Totally ordered by `(ltime, coord)`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ViewId {
    /// Logical time, increasing with each view in a lineage.
    pub ltime: u64,
    /// The endpoint that installed the view.
    pub coord: EndpointId,
}

/// The replicated, immutable configuration of a view: everything needed to build the protocol
/// stack of any member (thesis §2.1.7, Table 2.3). All members of a view hold equal values; a new
/// view is a modified copy, never an update in place.
#[derive(Clone, PartialEq, Debug)]
pub struct ViewState {
    /// The group.
    pub group: GroupName,
    /// The protocol: the layer list of the stack, top to bottom.
    pub stack: StackSpec,
    /// Protocol parameters: every layer's configuration, equal at all members.
    pub params: Arc<StackConfig>,
    /// Rank of the coordinator.
    pub coord: Rank,
    /// This view's identifier.
    pub view_id: ViewId,
    /// Members, indexed by rank.
    pub members: Vec<EndpointId>,
    /// Address of each member's process, indexed by rank.
    pub addresses: Vec<Address>,
    /// Whether this is a primary-partition view.
    pub primary: bool,
    /// Identifiers of the views this one was formed from (empty for a first view).
    pub prev_ids: Vec<ViewId>,
    /// Group key material for security layers (room for a later issue; `None` means no key).
    pub key: Option<Arc<[u8]>>,
    /// Whether this is a state-transfer view (the `Xfer` layer).
    pub xfer_view: bool,
    /// Per rank, whether the member is a client (Ensemble's `ViewState.clients`, property
    /// `Cltsvr`): casts can be addressed to servers only or clients only.
    pub clients: Vec<bool>,
}

impl ViewState {
    /// A first view of `members` (coordinator = rank 0, logical time 0): what a static group starts
    /// with, and what the simulator and tests build.
    pub fn initial(
        group: GroupName,
        stack: StackSpec,
        params: StackConfig,
        members: Vec<EndpointId>,
        addresses: Vec<Address>,
    ) -> ViewState {
        assert_eq!(members.len(), addresses.len(), "one address per member");
        assert!(!members.is_empty(), "a view has at least one member");
        let n = members.len();
        ViewState {
            group,
            stack,
            params: Arc::new(params),
            coord: 0,
            view_id: ViewId { ltime: 0, coord: members[0] },
            members,
            addresses,
            primary: true,
            prev_ids: Vec::new(),
            key: None,
            xfer_view: false,
            clients: vec![false; n],
        }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Never true: a view has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The membership part of this view, for messages to members of other partitions.
    pub fn to_full(&self) -> motet_wire::hdr::intra::FullView {
        motet_wire::hdr::intra::FullView {
            ltime: self.view_id.ltime,
            coord: self.view_id.coord.0,
            members: self.members.iter().map(|e| e.0).collect(),
            addresses: self.addresses.iter().map(|&a| a.into()).collect(),
            prev: self.prev_ids.iter().map(|v| (v.ltime, v.coord.0)).collect(),
            primary: self.primary,
            stack: self.stack.to_string(),
            clients: (0..self.len() as u64).filter(|&r| self.is_client(r as Rank)).collect(),
            params: self.params.to_wire(),
        }
    }

    /// The view `full` describes, of this group: its membership, stack and parameters.
    pub fn with_full(&self, full: &motet_wire::hdr::intra::FullView) -> ViewState {
        let members: Vec<EndpointId> = full.members.iter().map(|&e| EndpointId(e)).collect();
        let coord = EndpointId(full.coord);
        // The granter's stack (it may have switched); one this build cannot parse keeps ours.
        let stack = StackSpec::parse(&full.stack).unwrap_or_else(|_| self.stack.clone());
        // Likewise the parameters: every member of a view runs the view's (thesis §2.1.7), or
        // members configured differently would disagree on when to report credit, fragment or
        // suspect. Parameters that do not read or do not validate (another build's, which the
        // wire version already keeps out) leave this member with the ones it runs.
        let params = match StackConfig::from_wire(&full.params) {
            Ok(params) if params == *self.params => Arc::clone(&self.params),
            Ok(params) => Arc::new(params),
            Err(e) => {
                tracing::warn!(error = %e, "a view's parameters are unusable; keeping the ones this member runs");
                Arc::clone(&self.params)
            }
        };
        ViewState {
            coord: members.iter().position(|&e| e == coord).unwrap_or(0) as Rank,
            view_id: ViewId { ltime: full.ltime, coord },
            addresses: full.addresses.iter().map(|&a| a.into()).collect(),
            primary: full.primary,
            prev_ids: full.prev.iter().map(|&(ltime, c)| ViewId { ltime, coord: EndpointId(c) }).collect(),
            members,
            // A merged view is a state-transfer view when the stack transfers state (as the
            // granter decided it in `inter`).
            xfer_view: full.prev.len() >= 2 && stack.layers().contains(&crate::layers::LayerKind::Xfer),
            clients: (0..full.members.len() as u64).map(|r| full.clients.contains(&r)).collect(),
            stack,
            params,
            ..self.clone()
        }
    }

    /// Whether the member at `rank` is a client.
    pub fn is_client(&self, rank: Rank) -> bool {
        self.clients.get(usize::from(rank)).copied().unwrap_or(false)
    }

    /// The ranks of the servers (not clients), or of the clients.
    pub fn ranks_where(&self, clients: bool) -> Vec<Rank> {
        (0..self.len() as Rank).filter(|&r| self.is_client(r) == clients).collect()
    }

    /// The rank of `endpoint`, if it is a member.
    pub fn rank_of(&self, endpoint: EndpointId) -> Option<Rank> {
        self.members.iter().position(|&e| e == endpoint).map(|r| r as Rank)
    }
}

/// A set of ranks (small bit set; views beyond 64 members spill to a vector of words).
#[derive(Clone, Default)]
pub struct RankSet {
    words: smallvec::SmallVec<[u64; 1]>,
}

/// Sets are equal when they have the same members: a set that once held a high rank keeps a
/// trailing word of zeros, which neither equality nor the hash may see.
impl PartialEq for RankSet {
    fn eq(&self, other: &RankSet) -> bool {
        self.significant() == other.significant()
    }
}

impl Eq for RankSet {}

impl std::hash::Hash for RankSet {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.significant().hash(state);
    }
}

impl RankSet {
    /// The empty set.
    pub fn new() -> RankSet {
        RankSet::default()
    }
    /// Adds `rank`.
    pub fn insert(&mut self, rank: Rank) {
        let (word, bit) = (usize::from(rank) / 64, rank % 64);
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << bit;
    }
    /// Removes `rank`.
    pub fn remove(&mut self, rank: Rank) {
        let (word, bit) = (usize::from(rank) / 64, rank % 64);
        if let Some(w) = self.words.get_mut(word) {
            *w &= !(1 << bit);
        }
    }
    /// Whether `rank` is in the set.
    pub fn contains(&self, rank: Rank) -> bool {
        let (word, bit) = (usize::from(rank) / 64, rank % 64);
        self.words.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }
    /// Adds every member of `other`.
    pub fn union_with(&mut self, other: &RankSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }
    /// Members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = Rank> + '_ {
        self.words
            .iter()
            .enumerate()
            .flat_map(|(i, &w)| (0..64).filter(move |b| w & (1 << b) != 0).map(move |b| (i * 64 + b) as Rank))
    }
    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }
    /// The words up to the last that has a member.
    fn significant(&self) -> &[u64] {
        let len = self.words.iter().rposition(|&w| w != 0).map_or(0, |last| last + 1);
        &self.words[..len]
    }
}

impl FromIterator<Rank> for RankSet {
    fn from_iter<I: IntoIterator<Item = Rank>>(iter: I) -> RankSet {
        let mut set = RankSet::new();
        for rank in iter {
            set.insert(rank);
        }
        set
    }
}

impl fmt::Debug for RankSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An id reads back from how it prints; other text is refused with what an id looks like.
    #[test]
    fn an_endpoint_id_reads_back_as_printed() {
        for id in [0, 1, 0xfdc1_a369_2f15_c00d, u64::MAX] {
            assert_eq!(EndpointId(id).to_string().parse::<EndpointId>(), Ok(EndpointId(id)));
        }
        assert_eq!("e2a".parse::<EndpointId>(), Ok(EndpointId(0x2a)));
        for bad in ["", "e", "2a", "ezz", "e00000000000000000", "e-1", "e+1"] {
            assert!(bad.parse::<EndpointId>().unwrap_err().contains("is not an endpoint id"), "{bad}");
        }
    }

    /// Parameters other than the defaults, with a duration that is not a whole millisecond.
    fn custom() -> StackConfig {
        let mut params = StackConfig::default();
        params.mflow.window_bytes = 1024;
        params.frag.frag_size = 600;
        params.mnak.nak_delay = crate::Duration(1_500_000);
        params.suspect.timeout = crate::Duration::from_millis(2_500);
        params
    }

    #[test]
    fn parameters_travel_exactly_and_the_defaults_take_four_bytes() {
        let defaults = StackConfig::default().to_wire();
        assert_eq!(defaults, StackConfig::schema(), "the schema alone");
        assert_eq!(StackConfig::from_wire(&defaults).unwrap(), StackConfig::default());
        let wire = custom().to_wire();
        assert!(wire.len() > 4 && wire.len() < motet_wire::hdr::intra::PARAMS_MAX, "{} bytes", wire.len());
        assert_eq!(StackConfig::from_wire(&wire).unwrap(), custom(), "exact, to the nanosecond");
        // Garbage, another build's parameters, trailing bytes, and parameters a member would
        // refuse from its own file, are errors.
        assert!(StackConfig::from_wire(&[]).is_err());
        assert!(StackConfig::from_wire(&[0xff; 7]).is_err());
        let mut other_build = wire.clone();
        other_build[0] ^= 1;
        assert!(StackConfig::from_wire(&other_build).unwrap_err().to_string().contains("other parameters"));
        let mut trailing = wire.clone();
        trailing.push(0);
        assert!(StackConfig::from_wire(&trailing).unwrap_err().to_string().contains("after them"));
        let mut zero = custom();
        zero.mflow.window_bytes = 0;
        let err = StackConfig::from_wire(&zero.to_wire()).unwrap_err();
        assert!(err.to_string().contains("window"), "{err}");
    }

    /// Each view passes its parameters on: the view that follows the coordinator's failure, made
    /// by a member's own `intra`, and the view that merges the partitions back, made by `inter`.
    #[test]
    fn parameters_pass_from_view_to_view_through_failure_and_merge() {
        let mut group = crate::testkit::Group::with_config(3, "vsync", crate::Bypass::On, custom());
        let view_of = |group: &crate::testkit::Group, rank: usize| group.views[rank].clone().expect("a view");
        group.partition = Some(vec![0]);
        for _ in 0..100 {
            group.tick(crate::Duration::from_millis(100));
            if group.views[1].as_ref().is_some_and(|v| v.len() == 2)
                && group.views[2].as_ref().is_some_and(|v| v.len() == 2)
            {
                break;
            }
        }
        let after_failure = view_of(&group, 1);
        assert_eq!(after_failure.len(), 2, "the survivors' view");
        assert_eq!(*after_failure.params, custom());
        group.partition = None;
        for _ in 0..200 {
            group.tick(crate::Duration::from_millis(100));
            if (0..3).all(|r| group.views[r].as_ref().is_some_and(|v| v.len() == 3)) {
                break;
            }
        }
        for rank in 0..3 {
            let merged = view_of(&group, rank);
            assert_eq!(merged.len(), 3, "merged at {rank}");
            assert_eq!(*merged.params, custom(), "at {rank}");
        }
    }

    /// A member takes a view's parameters with its membership (as it takes its stack), and keeps
    /// its own when the view's cannot be used.
    #[test]
    fn a_view_from_another_member_brings_its_parameters() {
        let spec = StackSpec::parse("vsync").unwrap();
        let view = |params| {
            ViewState::initial(GroupName::new("g"), spec.clone(), params, vec![EndpointId(1)], vec![Address::Sim(1)])
        };
        let (ours, theirs) = (view(StackConfig::default()), view(custom()));
        let mut full = theirs.to_full();
        assert_eq!(*ours.with_full(&full).params, custom());
        assert_eq!(*theirs.with_full(&ours.to_full()).params, StackConfig::default());
        full.params = vec![0xff; 7];
        assert_eq!(*ours.with_full(&full).params, StackConfig::default(), "unreadable: ours");
    }

    #[test]
    fn rank_sets_with_the_same_members_are_equal_and_hash_alike() {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let mut once_high: RankSet = [3, 100].into_iter().collect();
        once_high.remove(100);
        let low: RankSet = [3].into_iter().collect();
        assert_eq!(once_high, low, "a trailing word of zeros is not a member");
        let hash = |set: &RankSet| BuildHasherDefault::<DefaultHasher>::default().hash_one(set);
        assert_eq!(hash(&once_high), hash(&low));
        assert_ne!(low, [4].into_iter().collect::<RankSet>());
        assert_eq!(RankSet::new(), [70].into_iter().filter(|_| false).collect::<RankSet>());
        let mut emptied: RankSet = [70].into_iter().collect();
        emptied.remove(70);
        assert_eq!(emptied, RankSet::new());
    }
}
