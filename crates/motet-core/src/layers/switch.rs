//! `switch`: protocol switching on the fly (property `Switch`; Ensemble `switch`, digest §1.14 and
//! item 36; thesis §2.1.9: every view builds a fresh stack from its `ViewState`, so the next view
//! may run another one).
//!
//! Provides: [`Service::Switching`]. Requires below: [`Service::ReliableCast`]; above:
//! [`Service::Membership`], which builds the next view with the requested stack. Header:
//! `Request(spec)` and `NoHdr`.
//!
//! The application asks (`Action::Switch`, coming up from `appl`); this layer casts the request to
//! the view, and every member passes up the requests it *delivers*, its own included (through
//! `local`). The coordinator's membership layer then runs a view change with nobody excluded, and
//! every member builds the next view with the requested stack. The flush's cut makes the set of
//! requests delivered in a view the same at every member going on to the next one, and `intra`
//! picks one by a fixed rule (the highest origin rank, its latest request), so all agree on the
//! new stack. Messages are delivered in the view they were sent in, so each keeps the guarantee of
//! the stack it was sent with. (The seeds do not describe Ensemble's switching protocol; this one
//! is ours.) A request in a view that ends by a merge is not carried into the merged view, which
//! takes the granting partition's stack: ask again.

use crate::error::ApiError;
use crate::event::{Dn, DropReason, Msg, Qos, Up};
use crate::layer::{Layer, LayerSpec, Outbox, Service};
use crate::spec::StackSpec;
use crate::view::ViewState;
use crate::Rank;
use motet_wire::hdr::switch::Header;

/// `switch` has no parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {}

/// Static description.
pub static SPEC: LayerSpec = LayerSpec {
    name: "switch",
    summary: "protocol switching: a request cast to the view, the next view runs the new stack",
    provides: &[Service::Switching],
    requires_below: &[Service::ReliableCast],
    requires_above: &[Service::Membership],
    above_every: &[],
    below_every: &[],
};

/// `switch` state.
#[derive(Debug, PartialEq)]
pub struct Switch {
    rank: Rank,
    requests: u64,
    /// The stack the view runs.
    stack: StackSpec,
    /// A state-transfer view: the next view may still owe its transfer, so a stack to switch to
    /// must have `xfer`.
    xfer_view: bool,
}

impl Switch {
    /// A `switch` for `view`.
    pub fn new(_config: &Config, view: &ViewState, rank: Rank) -> Switch {
        Switch { rank, requests: 0, stack: view.stack.clone(), xfer_view: view.xfer_view }
    }
}

/// Whether a view running `from` (a state-transfer view or not) may switch to `to`; `appl`
/// refuses its application's request with this error, and every member drops a request from
/// another that fails it.
/// - `to` must be able to switch again (`Switch`).
/// - In a transfer view, `to` must have `Xfer`: the next view may still owe the transfer, and no
///   layer could end it, every cast held (a review's finding).
/// - `to` keeps the membership and merging layers `from` has: without them, a partition could
///   never merge again nor a new member join (the runtime starts every member alone), and the
///   group could not even switch back by merging.
/// - `to` has `Primary` if and only if `from` has: a view is primary only if it follows a primary
///   view, so a group switched away from it, or to it, has no primary view ever again (found by a
///   review: one request silently took away what an application gated its writes on).
/// - `to` keeps the flow control (`mflow`, `pt2ptw`) and the fragmentation (`frag`) `from` has.
///   Without flow control a slow member makes every sender buffer without bound, which is why the
///   runtime refuses such stacks at its joins; a request from another member could install one
///   there all the same. Without `frag` the largest message falls from `appl.message_size_max` to
///   one datagram's, and the messages the application was told were taken under the old limit
///   (parked behind the switch's flush) were refused after it (a review's findings).
pub fn check_target(from: &StackSpec, xfer_view: bool, to: &StackSpec) -> Result<(), ApiError> {
    use super::LayerKind as K;
    let has = |k| to.layers().contains(&k);
    if !has(K::Switch) {
        return Err(ApiError::NoSwitch(format!("to `{to}`")));
    }
    if xfer_view && !has(K::Xfer) {
        return Err(ApiError::SwitchInTransfer(to.to_string()));
    }
    let dropped = |k| from.layers().contains(&k) && !has(k);
    if [K::Mflow, K::Pt2ptw].into_iter().any(dropped) {
        return Err(ApiError::SwitchLoses {
            to: to.to_string(),
            why: "it lacks the flow control this stack has, and a slow member would make every sender buffer without bound (keep Flow)",
        });
    }
    if dropped(K::Frag) {
        return Err(ApiError::SwitchLoses {
            to: to.to_string(),
            why: "it lacks the fragmentation this stack has: messages larger than one datagram, and those already taken behind the switch, would be refused (keep Frag)",
        });
    }
    keeps(from, to)
}

/// The part of [`check_target`] that also holds for the stack of a view granted by another
/// partition (`inter`): `to` keeps what `from` has of membership and merging, and `Primary` as
/// it is.
pub fn keeps(from: &StackSpec, to: &StackSpec) -> Result<(), ApiError> {
    let (had, has) = (kept(from), kept(to));
    let loses = |why| Err(ApiError::SwitchLoses { to: to.to_string(), why });
    if had & MERGING & !has != 0 {
        return loses(
            "it lacks membership or merging this stack has, and the group could then never merge a partition or take a member again (keep Gmp and Heal)",
        );
    }
    if !keeps_kept(had, has) {
        return loses(
            "it adds or removes Primary, and a view is primary only if it follows a primary view: no view would ever be primary again (keep Primary as it is)",
        );
    }
    Ok(())
}

/// The layers [`keeps`] reads, one bit each: membership and merging, then `Primary`. `heal`'s
/// hello carries them (`motet_wire::hdr::heal::Hello`'s `keeps`), so that a partition
/// knows before asking whether a merge with another could be taken.
const KEPT: [super::LayerKind; 5] = {
    use super::LayerKind as K;
    [K::Intra, K::Inter, K::Heal, K::Merge, K::Primary]
};
/// The bits of [`KEPT`]'s membership and merging layers.
const MERGING: u8 = 0x0f;

/// What of [`KEPT`] `spec` has, one bit each (at most `motet_wire::hdr::heal::KEEPS_MAX`).
pub(crate) fn kept(spec: &StackSpec) -> u8 {
    KEPT.iter().enumerate().filter(|(_, k)| spec.layers().contains(k)).fold(0, |bits, (i, _)| bits | 1 << i)
}

/// [`keeps`] on [`kept`]'s bits: whether a stack that has `to` keeps what one with `from` has.
pub(crate) fn keeps_kept(from: u8, to: u8) -> bool {
    from & MERGING & !to == 0 && (from ^ to) & !MERGING == 0
}

impl Layer for Switch {
    fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
        match ev {
            Up::SwitchReq(spec) => {
                // From our own application, below: tell everyone (ourselves included).
                self.requests += 1;
                let msg = Msg::default().with(Header::Request(spec.to_string()));
                out.dn(Dn::Cast { msg, qos: Qos::Reliable });
            }
            Up::Cast { origin, mut msg, qos } => match msg.pop_as::<Header>() {
                Some(Header::NoHdr) => out.up(Up::Cast { origin, msg, qos }),
                // This layer casts its headers reliably only: one on an unreliable cast (it has no
                // sequence number, so a forger need not guess one) is forged.
                Some(_) if qos == Qos::Unreliable => {
                    out.drop_input(super::LayerKind::Switch, DropReason::HeaderMismatch)
                }
                // What `appl` refuses at its own member is refused from any other too
                // ([`check_target`]): only the asking member's `appl` checked some of it before
                // (a review's finding).
                Some(Header::Request(text)) => match StackSpec::parse(&text) {
                    Ok(spec) if check_target(&self.stack, self.xfer_view, &spec).is_ok() => {
                        tracing::info!(from = origin, stack = %spec, "stack switch requested for the next view");
                        out.up(Up::Switch { origin, spec })
                    }
                    Ok(spec) => {
                        let why = check_target(&self.stack, self.xfer_view, &spec).err();
                        tracing::warn!(from = origin, stack = %spec, ?why, "a switch request its sender should have refused: dropped");
                        out.drop_input(super::LayerKind::Switch, DropReason::Malformed)
                    }
                    Err(_) => out.drop_input(super::LayerKind::Switch, DropReason::Malformed),
                },
                None => out.drop_input(super::LayerKind::Switch, DropReason::HeaderMismatch),
            },
            other => out.pass_up(super::LayerKind::Switch, other, Header::NoHdr),
        }
    }

    fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
        out.pass_dn(ev, Header::NoHdr);
    }

    fn check_invariants(&self) {
        let _ = self.rank;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::harness::{Harness, Out};

    /// Rank 0's request for `text`, as it arrives.
    fn request(text: &str) -> Up {
        Up::Cast { origin: 0, msg: Msg::default().with(Header::Request(text.into())), qos: Qos::Reliable }
    }

    /// In a transfer view, a request for a stack without `xfer` is dropped at every member, not
    /// only refused by the asking member's `appl` (a member that skipped that check left the
    /// group in a transfer view no layer could end).
    #[test]
    fn in_a_transfer_view_a_request_without_xfer_is_dropped() {
        let mut view = (*crate::testing::view_of("vsync+Xfer", 2)).clone();
        view.xfer_view = true;
        let mut h = Harness::new(Switch::new(&Config {}, &view, 1), 1);
        assert!(h.up(request("vsync")).is_empty());
        assert_eq!(h.stats.drops(DropReason::Malformed), 1);
        let out = h.up(request("total+Xfer"));
        assert!(matches!(&out[..], [Out::Up(Up::Switch { origin: 0, .. })]), "{out:?}");
    }

    /// A request for a stack that drops membership, merging, or `Primary`, or adds `Primary`, is
    /// dropped at every member: the group could not regain them (found by a review).
    #[test]
    fn a_request_that_would_lose_membership_or_primary_views_is_dropped() {
        let primary = crate::testing::view_of("vsync+Primary", 2);
        let mut h = Harness::new(Switch::new(&Config {}, &primary, 1), 1);
        let no_heal = "Gmp+Sync+Suspect+Slander+Frag+Flow+Local+Switch+Primary";
        for refused in ["vsync", no_heal] {
            assert!(h.up(request(refused)).is_empty(), "{refused}");
        }
        assert_eq!(h.stats.drops(DropReason::Malformed), 2);
        assert!(matches!(&h.up(request("total+Primary"))[..], [Out::Up(Up::Switch { .. })]));
        let plain = crate::testing::view_of("vsync", 2);
        let mut h = Harness::new(Switch::new(&Config {}, &plain, 1), 1);
        assert!(h.up(request("vsync+Primary")).is_empty(), "adds Primary");
        assert!(matches!(&h.up(request("total"))[..], [Out::Up(Up::Switch { .. })]));
        // The application asking hears why.
        let vsync = StackSpec::parse("vsync").unwrap();
        assert!(matches!(check_target(&primary.stack, false, &vsync), Err(ApiError::SwitchLoses { .. })));
    }

    /// A request for a stack without the flow control or the fragmentation the view's stack has
    /// is dropped at every member, and refused to the application asking: without flow control
    /// a slow member makes every sender buffer without bound (the runtime refuses such stacks at
    /// its joins, and a peer's request installed one there all the same), and without `frag`
    /// messages already taken under the old size limit were refused after the switch (a
    /// review's findings). A stack that never had them may still switch to one without them.
    #[test]
    fn a_request_that_would_lose_flow_control_or_fragmentation_is_dropped() {
        let view = crate::testing::view_of("vsync", 2);
        let mut h = Harness::new(Switch::new(&Config {}, &view, 1), 1);
        let no_flow = "Gmp+Sync+Heal+Suspect+Slander+Frag+Local+Switch";
        let no_frag = "Gmp+Sync+Heal+Suspect+Slander+Flow+Local+Switch";
        for refused in [no_flow, no_frag] {
            assert!(h.up(request(refused)).is_empty(), "{refused}");
            let to = StackSpec::parse(refused).unwrap();
            assert!(matches!(check_target(&view.stack, false, &to), Err(ApiError::SwitchLoses { .. })), "{refused}");
        }
        assert_eq!(h.stats.drops(DropReason::Malformed), 2);
        let bare = crate::testing::view_of("Gmp+Sync+Heal+Suspect+Slander+Local+Switch", 2);
        let mut h = Harness::new(Switch::new(&Config {}, &bare, 1), 1);
        assert!(matches!(&h.up(request(no_frag))[..], [Out::Up(Up::Switch { .. })]), "nothing lost");
    }

    /// The bits `heal`'s hello carries decide as [`keeps`] does, for every pair of a few stacks
    /// that differ in what it reads, and fit the wire's field.
    #[test]
    fn kept_bits_decide_as_keeps_does() {
        let specs = [
            "vsync",
            "vsync+Primary",
            "total",
            "total+Primary",
            "fifo",
            "Gmp+Sync+Suspect+Slander+Frag+Flow+Local+Switch+Primary",
            "Gmp+Sync+Suspect+Slander+Frag+Flow+Local+Switch",
        ]
        .map(|text| StackSpec::parse(text).unwrap());
        let mut seen = std::collections::BTreeSet::new();
        for from in &specs {
            assert!(kept(from) <= motet_wire::hdr::heal::KEEPS_MAX, "{from}");
            seen.insert(kept(from));
            for to in &specs {
                assert_eq!(keeps_kept(kept(from), kept(to)), keeps(from, to).is_ok(), "{from} to {to}");
            }
        }
        assert!(seen.len() >= 4, "the stacks differ in what is read: {seen:?}");
        assert_eq!((1u16 << KEPT.len()) - 1, u16::from(motet_wire::hdr::heal::KEEPS_MAX));
    }

    #[test]
    fn a_request_is_cast_and_what_is_delivered_goes_up() {
        let view = crate::testing::view_of("vsync", 2);
        let mut h = Harness::new(Switch::new(&Config {}, &view, 1), 1);
        let total = StackSpec::parse("total").unwrap();
        let out = h.up(Up::SwitchReq(total.clone()));
        let msg = match &out[..] {
            [Out::Dn(Dn::Cast { msg, qos: Qos::Reliable })] => msg.clone(),
            other => panic!("{other:?}"),
        };
        // Only what is delivered counts, our own request included.
        let out = h.up(Up::Cast { origin: 1, msg, qos: Qos::Reliable });
        assert!(matches!(&out[..], [Out::Up(Up::Switch { origin: 1, spec })] if *spec == total));
        // A request for a stack that cannot switch again, or no stack at all, is dropped.
        for text in ["fifo", "no such stack"] {
            let msg = Msg::default().with(Header::Request(text.into()));
            assert!(h.up(Up::Cast { origin: 0, msg, qos: Qos::Reliable }).is_empty());
        }
        assert_eq!(h.stats.drops(DropReason::Malformed), 2);
    }
}
