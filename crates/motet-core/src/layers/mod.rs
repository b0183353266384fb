//! The layer registry: a closed set of layers with static dispatch (STYLE §1, "a closed
//! `enum AnyLayer` over the registry"). One file per layer; each file has the same anatomy: a
//! `//!` doc citing its seed section, `Config` with documented defaults and units, the state,
//! `impl Layer`, `check_invariants`, and tests.

use crate::event::{Dn, Up};
use crate::layer::{Layer, LayerSpec, Outbox};
use crate::view::ViewState;
use crate::{Rank, StackSpecError};
use std::sync::Arc;

/// The largest flow-control window (`mflow.window_bytes`, `pt2ptw.window_bytes`): 2^14 messages
/// at their least cost (`MESSAGE_CHARGE` bytes, an empty message), half of what a receiver reads
/// a compressed datagram's sequence number as ahead of the one it expects (2^15,
/// `motet_wire::datagram::SEQNO_AHEAD_MAX`; anything else is a duplicate). 1 MiB.
pub const WINDOW_BYTES_MAX: u64 = (1 << 14) * flow::MESSAGE_CHARGE;
/// The longest protocol period or timeout a configuration (or a view) may give: an hour.
pub const PERIOD_MAX: crate::time::Duration = crate::time::Duration::from_millis(3_600_000);
/// The longest a replaced stack may linger (`top.linger_ms`): a minute.
pub const LINGER_MAX: crate::time::Duration = crate::time::Duration::from_millis(60_000);
/// The largest receive window (`mnak`/`pt2pt` `recv_window_max`), in messages: four of the
/// largest flow-control windows of the smallest messages.
pub const RECV_WINDOW_MAX: u64 = 4 * (WINDOW_BYTES_MAX / flow::MESSAGE_CHARGE);
/// The largest message (`appl.message_size_max`): 256 MiB.
pub const MESSAGE_SIZE_MAX: u64 = 256 << 20;
/// The longest pending queue (`pending_max` of `mflow`, `pt2ptw`, `totem`), in messages.
pub const PENDING_MAX: u64 = 1 << 20;

/// The most messages `mnak` or `pt2pt` resends for one NAK or sweep (`retransmit_max`).
pub const RETRANSMIT_MAX: u64 = 4096;

/// The smallest flow-control window: two empty messages (a report is due every half window).
pub const WINDOW_BYTES_MIN: u64 = 2 * flow::MESSAGE_CHARGE;

/// A flush's `Block` that a layer holds until what it waits for has gone down (pending casts,
/// unacknowledged sends), and the `Cut` that came down after it, held behind it. A later round's
/// `Block` may wait in one layer while an earlier round's went on and was answered (`sync` then
/// reports to the later round), and the later round's `Cut` then comes down: passed on at once, it
/// reached `mnak` ahead of the `Block`, which withdraws a cut, so the cut was lost, the flush
/// stalled, and a healthy member was suspected at `flush_timeout` (found by a review). Shared by
/// `pt2ptw`, `mflow` and `pt2pt`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct HeldBlock {
    /// A `Block` waits here.
    pub(crate) held: bool,
    /// The `Cut` that came down while it waited.
    cut: Option<Arc<[u64]>>,
}

impl HeldBlock {
    /// A `Block` comes down: it waits here. A `Cut` still held behind an earlier `Block` is
    /// dropped: it is an earlier round's, which the new `Block` withdraws at `mnak` anyway; let
    /// through after it, it would set a cut the new round's counts, reported at its `Block`, do
    /// not cover. (Usually the new round's `Fail`, which comes first, has let the earlier `Block`
    /// and its `Cut` go on already, in that order, and the new `Block` withdraws the cut at
    /// `mnak`, as before.)
    pub(crate) fn hold(&mut self) {
        self.held = true;
        self.cut = None;
    }

    /// A `Cut` going down: kept while a `Block` waits, else passed on.
    pub(crate) fn cut(&mut self, cut: Arc<[u64]>, out: &mut Outbox<'_>) {
        match self.held {
            true => self.cut = Some(cut),
            false => out.dn(Dn::Cut(cut)),
        }
    }

    /// The waiting `Block` goes on, then the `Cut` that waited behind it.
    pub(crate) fn release(&mut self, out: &mut Outbox<'_>) {
        if std::mem::take(&mut self.held) {
            out.dn(Dn::Block);
            if let Some(cut) = self.cut.take() {
                out.dn(Dn::Cut(cut));
            }
        }
    }
}

/// How many casts of one origin another member may have received, and acted on, beyond those
/// this member has received, when the view's stack has `mflow`: a sender is at most a window
/// ahead of its slowest live receiver, so at most `WINDOW_BYTES_MAX / MESSAGE_CHARGE` (2^14)
/// casts; twice that here (2^15). A header naming casts further ahead (a sequencer's `Order`, a
/// causal timestamp) is no genuine member's. In a stack without flow control a member may lag
/// any number of casts behind a fast sender, so there is no such bound (`u64::MAX`): refusing a
/// genuine header there would lose a cast that the layers below have already delivered.
pub(crate) fn casts_ahead_max(view: &ViewState) -> u64 {
    match view.stack.layers().contains(&LayerKind::Mflow) {
        true => 2 * (WINDOW_BYTES_MAX / flow::MESSAGE_CHARGE),
        false => u64::MAX,
    }
}

pub mod appl;
pub mod bottom;
pub mod causal;
pub mod elect;
mod flow;
pub use flow::MESSAGE_CHARGE;
pub mod frag;
mod gaps;
pub mod heal;
pub mod inter;
pub mod intra;
pub mod leave;
pub mod local;
pub mod merge;
pub mod mflow;
pub mod migrate;
pub mod mnak;
pub mod primary;
pub mod pt2pt;
pub mod pt2ptw;
pub mod safe;
pub mod sequencer;
pub mod slander;
pub mod stable;
pub mod suspect;
pub mod switch;
pub mod sync;
pub mod top;
pub mod totem;
pub mod xfer;

/// A layer type of the registry, reached inside [`AnyLayer`] by its type: a fused trace
/// (`stack::bypass::fused`), whose shape says which layer sits where, calls it without dispatch,
/// so the compiler can inline its declarations into one handler.
pub(crate) trait Typed: Layer + Sized {
    /// The layer's kind.
    const KIND: LayerKind;
    /// The layer in `layer`, which must be of this kind.
    fn typed(layer: &AnyLayer) -> &Self;
    /// The layer in `layer`, which must be of this kind.
    fn typed_mut(layer: &mut AnyLayer) -> &mut Self;
}

/// How a layer of the registry is held in [`AnyLayer`]: in place, or `boxed` (below).
macro_rules! held {
    (; $ty:ty) => { $ty };
    (boxed; $ty:ty) => { Box<$ty> };
}

/// A layer made to be held as [`held!`] says.
macro_rules! hold {
    (; $layer:expr) => {
        $layer
    };
    (boxed; $layer:expr) => {
        Box::new($layer)
    };
}

macro_rules! registry {
    ($($kind:ident => $module:ident :: $ty:ident $($boxed:ident)?),* $(,)?) => {
        /// A layer of the registry, by name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum LayerKind { $(#[doc = concat!("The `", stringify!($module), "` layer.")] $kind,)* }

        impl LayerKind {
            /// Every layer, in canonical stack order (top to bottom; thesis Fig 2.3).
            pub const ALL: &'static [LayerKind] = &[$(LayerKind::$kind,)*];

            /// The layer's static description.
            pub fn spec(self) -> &'static LayerSpec {
                match self { $(LayerKind::$kind => &$module::SPEC,)* }
            }

            /// The layer's name.
            pub fn name(self) -> &'static str {
                self.spec().name
            }

            /// The layer called `name`.
            pub fn from_name(name: &str) -> Option<LayerKind> {
                LayerKind::ALL.iter().copied().find(|kind| kind.name() == name)
            }
        }

        /// Every layer's configuration: the protocol parameters of a view (`ViewState::params`).
        ///
        /// In a configuration file each layer is a table of its parameters (durations in whole
        /// milliseconds, as `*_ms`); a layer or parameter left out keeps its default, and an
        /// unknown one is an error (`[group.params.mnak]`, `nak_delay_ms = 5`).
        #[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct StackConfig {
            $(#[doc = concat!("Parameters of `", stringify!($module), "`.")] pub $module: $module::Config,)*
        }

        /// One instantiated layer (static dispatch over the closed registry).
        #[derive(Debug, PartialEq)]
        pub(crate) enum AnyLayer { $($kind(held!($($boxed)?; $module::$ty)),)* }

        $(
            impl Typed for $module::$ty {
                const KIND: LayerKind = LayerKind::$kind;
                #[inline(always)]
                fn typed(layer: &AnyLayer) -> &Self {
                    match layer { AnyLayer::$kind(layer) => layer, _ => unreachable!("a fused trace's shape is its stack's") }
                }
                #[inline(always)]
                fn typed_mut(layer: &mut AnyLayer) -> &mut Self {
                    match layer { AnyLayer::$kind(layer) => layer, _ => unreachable!("a fused trace's shape is its stack's") }
                }
            }
        )*

        impl AnyLayer {
            pub(crate) fn new(kind: LayerKind, config: &StackConfig, view: &Arc<ViewState>, rank: Rank) -> AnyLayer {
                match kind { $(LayerKind::$kind => AnyLayer::$kind(hold!($($boxed)?; $module::$ty::new(&config.$module, view, rank))),)* }
            }
            #[inline]
            pub(crate) fn handle_up(&mut self, ev: Up, out: &mut Outbox<'_>) {
                match self { $(AnyLayer::$kind(layer) => layer.handle_up(ev, out),)* }
            }
            #[inline]
            pub(crate) fn handle_dn(&mut self, ev: Dn, out: &mut Outbox<'_>) {
                match self { $(AnyLayer::$kind(layer) => layer.handle_dn(ev, out),)* }
            }
            pub(crate) fn handle_timer(&mut self, out: &mut Outbox<'_>) {
                match self { $(AnyLayer::$kind(layer) => layer.handle_timer(out),)* }
            }
            pub(crate) fn check_invariants(&self) {
                match self { $(AnyLayer::$kind(layer) => layer.check_invariants(),)* }
            }
            pub(crate) fn buffered(&self) -> usize {
                match self { $(AnyLayer::$kind(layer) => layer.buffered(),)* }
            }
            #[inline]
            pub(crate) fn fast_dn(&self, down: &crate::fast::Down) -> Option<crate::fast::DnStep> {
                match self { $(AnyLayer::$kind(layer) => layer.fast_dn(down),)* }
            }
            #[inline]
            pub(crate) fn fast_dn_apply(&mut self, down: &crate::fast::Down, out: &mut Outbox<'_>) {
                match self { $(AnyLayer::$kind(layer) => layer.fast_dn_apply(down, out),)* }
            }
            #[inline]
            pub(crate) fn fast_up(&self, up: &crate::fast::Up<'_>) -> Option<crate::fast::UpStep> {
                match self { $(AnyLayer::$kind(layer) => layer.fast_up(up),)* }
            }
            #[inline]
            pub(crate) fn fast_keep(&mut self, kept: &crate::fast::Kept, msg: crate::event::Msg, out: &mut Outbox<'_>) {
                match self { $(AnyLayer::$kind(layer) => layer.fast_keep(kept, msg, out),)* }
            }
            pub(crate) fn fast_keep_wait(&self) -> crate::Duration {
                match self { $(AnyLayer::$kind(layer) => layer.fast_keep_wait(),)* }
            }
            pub(crate) fn fast_split(&self, msg: &crate::event::Msg, index: u32) -> crate::event::Msg {
                match self { $(AnyLayer::$kind(layer) => layer.fast_split(msg, index),)* }
            }
            pub(crate) fn fast_join(&mut self, up: &crate::fast::Up<'_>, msg: crate::event::Msg, out: &mut Outbox<'_>) -> crate::event::Msg {
                match self { $(AnyLayer::$kind(layer) => layer.fast_join(up, msg, out),)* }
            }
            pub(crate) fn fast_release(&mut self, origin: Rank, cast: bool, out: &mut Outbox<'_>) -> Option<(Rank, crate::event::Msg)> {
                match self { $(AnyLayer::$kind(layer) => layer.fast_release(origin, cast, out),)* }
            }
            pub(crate) fn fast_data(&self, header: &motet_wire::Header) -> bool {
                match self { $(AnyLayer::$kind(layer) => layer.fast_data(header),)* }
            }
            pub(crate) fn fast_inert(&self, trace: crate::fast::Trace) -> Option<usize> {
                match self { $(AnyLayer::$kind(layer) => layer.fast_inert(trace),)* }
            }
            pub(crate) fn fast_loopback(&self, trace: crate::fast::Trace) -> bool {
                match self { $(AnyLayer::$kind(layer) => layer.fast_loopback(trace),)* }
            }

            pub(crate) fn fast_loopback_inert(&self) -> bool {
                match self { $(AnyLayer::$kind(layer) => layer.fast_loopback_inert(),)* }
            }
            pub(crate) fn fast_expected(&self, origin: Rank, cast: bool) -> Option<motet_wire::Seqno> {
                match self { $(AnyLayer::$kind(layer) => layer.fast_expected(origin, cast),)* }
            }
            pub(crate) fn fast_templated(&self, cast: bool) -> bool {
                match self { $(AnyLayer::$kind(layer) => layer.fast_templated(cast),)* }
            }
            #[inline]
            pub(crate) fn fast_up_apply(&mut self, up: &crate::fast::Up<'_>, msg: &crate::event::Msg, out: &mut Outbox<'_>) {
                match self { $(AnyLayer::$kind(layer) => layer.fast_up_apply(up, msg, out),)* }
            }
        }
    };
}

// A stack holds its layers in one vector of `AnyLayer`, as wide as the largest layer held in
// place: the few large layers that only the layered path reaches (membership, merging, stability)
// are boxed, so that the rest, and the common path's, do not each take their room (per stack, 21
// layers of 288 bytes each before, of 176 after).
registry! {
    Top => top::Top,
    Inter => inter::Inter,
    Heal => heal::Heal,
    Primary => primary::Primary,
    Intra => intra::Intra boxed,
    Leave => leave::Leave,
    Switch => switch::Switch,
    Migrate => migrate::Migrate,
    Xfer => xfer::Xfer,
    Elect => elect::Elect,
    Merge => merge::Merge boxed,
    Slander => slander::Slander,
    Sync => sync::Sync,
    Suspect => suspect::Suspect,
    Stable => stable::Stable boxed,
    Appl => appl::Appl,
    Sequencer => sequencer::Sequencer,
    Totem => totem::Totem,
    Causal => causal::Causal,
    Safe => safe::Safe boxed,
    Local => local::Local,
    Frag => frag::Frag,
    Pt2ptw => pt2ptw::Pt2ptw,
    Mflow => mflow::Mflow,
    Pt2pt => pt2pt::Pt2pt,
    Mnak => mnak::Mnak,
    Bottom => bottom::Bottom,
}

impl StackConfig {
    /// The parameters as a view carries them on the wire (`FullView::params`): the
    /// [`StackConfig::schema`] fingerprint, then nothing for the defaults, else a compact binary
    /// form (`postcard`), durations exact. Members of a view run its parameters as they run its
    /// stack (thesis §2.1.7: the view state is replicated), so members configured differently
    /// cannot disagree on when to report credit, fragment or suspect.
    pub fn to_wire(&self) -> Vec<u8> {
        let mut wire = Self::schema().to_vec();
        if *self != StackConfig::default() {
            wire.extend(postcard::to_allocvec(self).expect("the parameters are plain numbers and flags"));
        }
        wire
    }

    /// Reads [`StackConfig::to_wire`]'s form, all of it, and checks it
    /// ([`StackConfig::validate`]). Parameters of another build (another schema: a layer or a
    /// parameter added, renamed or given another default) are an error, not misread.
    pub fn from_wire(bytes: &[u8]) -> Result<StackConfig, StackSpecError> {
        let unreadable =
            |why: &str| StackSpecError::Params(format!("unreadable parameters from another member: {why}"));
        let (schema, body) = bytes.split_at_checked(4).ok_or_else(|| unreadable("too short"))?;
        if schema != Self::schema() {
            return Err(unreadable("written by a build with other parameters"));
        }
        if body.is_empty() {
            return Ok(StackConfig::default());
        }
        let (params, rest): (StackConfig, _) =
            postcard::take_from_bytes(body).map_err(|e| unreadable(&e.to_string()))?;
        if !rest.is_empty() {
            return Err(unreadable(&format!("{} bytes after them", rest.len())));
        }
        params.validate()?;
        Ok(params)
    }

    /// A fingerprint of the parameters' layout and defaults in this build (every layer, name and
    /// default value): what the wire form is read against.
    pub fn schema() -> [u8; 4] {
        static SCHEMA: std::sync::OnceLock<[u8; 4]> = std::sync::OnceLock::new();
        *SCHEMA.get_or_init(|| {
            let digest = blake3::hash(format!("{:?}", StackConfig::default()).as_bytes());
            let bytes = digest.as_bytes();
            [bytes[0], bytes[1], bytes[2], bytes[3]]
        })
    }

    /// Checks the parameters: each within what its protocol can work with (a period of zero
    /// would fire a timer on every turn of the loop, a failure timeout of zero suspect everyone,
    /// a window of nothing never repair), and the layers' together: a message of the largest
    /// accepted size must fit, fragmented, into each flow-control layer's pending queue, so that
    /// back-pressure never has to drop.
    pub fn validate(&self) -> Result<(), StackSpecError> {
        let bad = |message: String| Err(StackSpecError::Params(message));
        let periods = [
            ("suspect.sweep_interval_ms", self.suspect.sweep_interval),
            ("suspect.timeout_ms", self.suspect.timeout),
            ("stable.sweep_interval_ms", self.stable.sweep_interval),
            ("mnak.sweep_interval_ms", self.mnak.sweep_interval),
            ("pt2pt.sweep_interval_ms", self.pt2pt.sweep_interval),
            ("heal.gossip_interval_ms", self.heal.gossip_interval),
            ("heal.gossip_interval_max_ms", self.heal.gossip_interval_max),
            ("merge.retry_interval_ms", self.merge.retry_interval),
            ("merge.merge_timeout_ms", self.merge.merge_timeout),
            ("intra.commit_timeout_ms", self.intra.commit_timeout),
            ("intra.flush_timeout_ms", self.intra.flush_timeout),
            ("safe.ack_timeout_ms", self.safe.ack_timeout),
            ("pt2pt.ack_timeout_ms", self.pt2pt.ack_timeout),
            ("xfer.stall_timeout_ms", self.xfer.stall_timeout),
            ("xfer.install_timeout_ms", self.xfer.install_timeout),
            ("mflow.lag_report_interval_ms", self.mflow.lag_report_interval),
            ("pt2ptw.lag_report_interval_ms", self.pt2ptw.lag_report_interval),
            ("mflow.credit_timeout_ms", self.mflow.credit_timeout),
            ("pt2ptw.credit_timeout_ms", self.pt2ptw.credit_timeout),
        ];
        if let Some((name, _)) = periods.iter().find(|(_, d)| d.as_millis() == 0) {
            return bad(format!("{name} must be at least 1 ms"));
        }
        // Parameters also arrive with views, from other members (a merge's grant): maxima keep
        // one that is wrong from turning a bound off (a failure timeout of days, a replaced stack
        // lingering for ever with its buffers, a receive window of any size).
        if let Some((name, _)) = periods.iter().find(|(_, d)| *d > PERIOD_MAX) {
            return bad(format!("{name} must be at most {} ms (an hour)", PERIOD_MAX.as_millis()));
        }
        // Delays hold work back on purpose (a NAK for reordering to settle, an order or an
        // acknowledgement to batch): one as long as the failure detector's timeout holds repair
        // or delivery that long on every loss, and flushes time out waiting behind it.
        let delays = [
            ("mnak.nak_delay_ms", self.mnak.nak_delay),
            ("pt2pt.nak_delay_ms", self.pt2pt.nak_delay),
            ("sequencer.order_delay_ms", self.sequencer.order_delay),
            ("safe.ack_delay_ms", self.safe.ack_delay),
        ];
        if let Some((name, delay)) = delays.iter().find(|(_, d)| *d >= self.suspect.timeout) {
            return bad(format!(
                "{name} ({} ms) must be shorter than suspect.timeout_ms ({} ms): it holds repair or delivery back that long (a few ms absorbs reordering and batches)",
                delay.as_millis(),
                self.suspect.timeout.as_millis()
            ));
        }
        if self.top.linger > LINGER_MAX {
            return bad(format!(
                "top.linger_ms must be at most {} ms: a replaced stack keeps its buffers while it lingers",
                LINGER_MAX.as_millis()
            ));
        }
        // One heartbeat lost, or one sweep late, must not suspect a member: a timeout of under three
        // periods did (a review's finding: three idle members on loopback with a 1 ms period and
        // a 3 ms timeout went through 16 views in 10 s).
        if self.suspect.timeout.0 < self.suspect.sweep_interval.0.saturating_mul(3) {
            return bad(format!(
                "suspect.timeout_ms ({} ms) must be at least 3 times suspect.sweep_interval_ms ({} ms), the heartbeat period: one lost heartbeat must not suspect a member",
                self.suspect.timeout.as_millis(),
                self.suspect.sweep_interval.as_millis()
            ));
        }
        // The two timeouts that must be longer than the failure detector's are at most an hour:
        // said here, where the cause is, and not as a flush timeout to raise past its own limit.
        if self.suspect.timeout >= PERIOD_MAX {
            return bad(format!(
                "suspect.timeout_ms must be less than {} ms (an hour): intra.flush_timeout_ms, safe.ack_timeout_ms, pt2pt.ack_timeout_ms and the credit timeouts must be longer, and are at most an hour",
                PERIOD_MAX.as_millis()
            ));
        }
        // A member that fails during a flush is the detector's to find, not the flush timeout's
        // (nor `safe`'s acknowledgement timeout): they are for members that beat and never
        // answer. (Neither rule protects a member slow to drain a large backlog: see
        // docs/membership.md.)
        if self.intra.flush_timeout <= self.suspect.timeout {
            return bad(format!(
                "intra.flush_timeout_ms ({} ms) must be longer than suspect.timeout_ms ({} ms): the flush timeout is for members that stay audible and never answer, the failure detector finds the failed ones (raise intra.flush_timeout_ms with suspect.timeout_ms)",
                self.intra.flush_timeout.as_millis(),
                self.suspect.timeout.as_millis()
            ));
        }
        if self.safe.ack_timeout <= self.suspect.timeout || self.safe.ack_timeout <= self.safe.ack_delay {
            return bad(format!(
                "safe.ack_timeout_ms ({} ms) must be longer than suspect.timeout_ms ({} ms) and safe.ack_delay_ms ({} ms): it is for members that stay audible and never acknowledge, the failure detector finds the failed ones (raise safe.ack_timeout_ms with them)",
                self.safe.ack_timeout.as_millis(),
                self.suspect.timeout.as_millis(),
                self.safe.ack_delay.as_millis()
            ));
        }
        if self.pt2pt.ack_timeout <= self.suspect.timeout {
            return bad(format!(
                "pt2pt.ack_timeout_ms ({} ms) must be longer than suspect.timeout_ms ({} ms): it is for peers that stay audible and never acknowledge, the failure detector finds the failed ones (raise pt2pt.ack_timeout_ms with it)",
                self.pt2pt.ack_timeout.as_millis(),
                self.suspect.timeout.as_millis()
            ));
        }
        // A receiver that holds a window shut is suspected after the credit timeout: the failure
        // detector finds the failed ones first, and an honest receiver whose application lags
        // still reports every `lag_report_interval` (`flow::CreditWatch`).
        for (name, timeout, lag) in [
            ("mflow", self.mflow.credit_timeout, self.mflow.lag_report_interval),
            ("pt2ptw", self.pt2ptw.credit_timeout, self.pt2ptw.lag_report_interval),
        ] {
            if timeout <= self.suspect.timeout || timeout.0 <= lag.0.saturating_mul(2) {
                return bad(format!(
                    "{name}.credit_timeout_ms ({} ms) must be longer than suspect.timeout_ms ({} ms) and twice {name}.lag_report_interval_ms ({} ms): it is for receivers that stay audible and never report their credit, the failure detector finds the failed ones and a lagging receiver reports every interval (raise {name}.credit_timeout_ms with them)",
                    timeout.as_millis(),
                    self.suspect.timeout.as_millis(),
                    lag.as_millis()
                ));
            }
        }
        // The members of a partition whose merge request goes unanswered wait for the view that
        // ends the round (`intra`'s commit timeout) while the coordinator waits for an answer
        // (`merge_timeout`): the first wait must be the longer, with room for the round's last
        // acknowledgements and the view's cast, or every member goes on alone.
        let margin = crate::time::Duration::from_millis(1_000);
        if self.intra.commit_timeout.0 < self.merge.merge_timeout.0.saturating_add(margin.0) {
            return bad(format!(
                "intra.commit_timeout_ms ({} ms) must be at least {} ms longer than merge.merge_timeout_ms ({} ms): members waiting for the view that ends an unanswered merge would go on alone first",
                self.intra.commit_timeout.as_millis(),
                margin.as_millis(),
                self.merge.merge_timeout.as_millis()
            ));
        }
        let counts = [
            ("mnak.recv_window_max", self.mnak.recv_window_max),
            ("mnak.retransmit_max", self.mnak.retransmit_max as u64),
            ("pt2pt.recv_window_max", self.pt2pt.recv_window_max),
            ("pt2pt.retransmit_max", self.pt2pt.retransmit_max as u64),
            ("mnak.retransmit_rate", self.mnak.retransmit_rate),
            ("pt2pt.retransmit_rate", self.pt2pt.retransmit_rate),
            ("pt2pt.ack_batch", self.pt2pt.ack_batch),
            ("totem.pending_max", self.totem.pending_max as u64),
            ("appl.message_size_max", self.appl.message_size_max as u64),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return bad(format!("{name} must be at least 1"));
        }
        for (name, value, max) in [
            ("mnak.recv_window_max", self.mnak.recv_window_max, RECV_WINDOW_MAX),
            ("pt2pt.recv_window_max", self.pt2pt.recv_window_max, RECV_WINDOW_MAX),
            ("appl.message_size_max", self.appl.message_size_max as u64, MESSAGE_SIZE_MAX),
            ("totem.pending_max", self.totem.pending_max as u64, PENDING_MAX),
            // Messages resent for one NAK or sweep: more goes out as one burst than a socket's
            // send backlog holds, which then drops the oldest (a review's finding: unbounded).
            ("mnak.retransmit_max", self.mnak.retransmit_max as u64, RETRANSMIT_MAX),
            ("pt2pt.retransmit_max", self.pt2pt.retransmit_max as u64, RETRANSMIT_MAX),
            ("mflow.pending_max", self.mflow.pending_max as u64, PENDING_MAX),
            ("pt2ptw.pending_max", self.pt2ptw.pending_max as u64, PENDING_MAX),
        ] {
            if value > max {
                return bad(format!("{name} ({value}) must be at most {max}"));
            }
        }
        // A NAK answer rate below one whole answer a sweep interval (parameters also come with
        // other members' views: `retransmit_rate = 1` would repair one message a second, and a
        // lossy group would stall) is refused.
        for (name, rate, max, interval) in [
            ("mnak", self.mnak.retransmit_rate, self.mnak.retransmit_max, self.mnak.sweep_interval),
            ("pt2pt", self.pt2pt.retransmit_rate, self.pt2pt.retransmit_max, self.pt2pt.sweep_interval),
        ] {
            let per_sweep = u128::from(rate) * u128::from(interval.0) / 1_000_000_000;
            if per_sweep < max as u128 {
                return bad(format!(
                    "{name}.retransmit_rate ({rate} a second) must let at least {name}.retransmit_max ({max}) through each {name}.sweep_interval_ms ({} ms): at least {} a second",
                    interval.as_millis(),
                    (max as u128 * 1_000_000_000).div_ceil(u128::from(interval.0.max(1)))
                ));
            }
        }
        // A view's member list travels in one vector of at most `RANKS_MAX`; a group of one
        // could never take a member.
        if !(2..=motet_wire::RANKS_MAX).contains(&self.inter.members_max) {
            return bad(format!(
                "inter.members_max ({}) must be between 2 and {}",
                self.inter.members_max,
                motet_wire::RANKS_MAX
            ));
        }
        if self.frag.frag_size == 0 || self.frag.frag_size > appl::UNFRAGMENTED_MAX {
            return bad(format!(
                "frag.frag_size must be between 1 and {} bytes (a fragment and its headers fit one datagram)",
                appl::UNFRAGMENTED_MAX
            ));
        }
        let fragments = self.appl.message_size_max.div_ceil(self.frag.frag_size).max(1);
        for (name, pending_max) in [("mflow", self.mflow.pending_max), ("pt2ptw", self.pt2ptw.pending_max)] {
            if fragments > pending_max {
                return bad(format!(
                    "appl.message_size_max ({} B) in fragments of frag.frag_size ({} B) is {fragments} fragments, more than {name}.pending_max ({pending_max})",
                    self.appl.message_size_max, self.frag.frag_size
                ));
            }
        }
        for (name, window) in [("mflow", self.mflow.window_bytes), ("pt2ptw", self.pt2ptw.window_bytes)] {
            if window < WINDOW_BYTES_MIN {
                return bad(format!("{name}.window_bytes must be at least {WINDOW_BYTES_MIN}"));
            }
            // The window bounds how many messages a sender runs ahead of a receiver, which a
            // compressed datagram's sequence number relies on (`Stack::compress`).
            if window > WINDOW_BYTES_MAX {
                return bad(format!(
                    "{name}.window_bytes must be at most {WINDOW_BYTES_MAX} (1 MiB: a receiver reads a compressed datagram as at most 2^15 messages ahead, and an empty message costs {} bytes of the window)",
                    flow::MESSAGE_CHARGE
                ));
            }
        }
        // A trickle of less than a fragment would hold a lagging member's senders, and the view
        // change their flushes wait in, for as many intervals as the bytes queued ahead of the
        // flush (a trickle of one byte: days behind a 1 MiB message); at least a fragment each
        // interval bounds the wait by the fragments queued.
        // (A trickle larger than the window is allowed: the window still bounds what a lagging
        // member is sent per interval, and a small window with the default trickle is common.)
        let fragment = self.frag.frag_size as u64 + MESSAGE_CHARGE;
        for (name, trickle) in [("mflow", self.mflow.lag_trickle_bytes), ("pt2ptw", self.pt2ptw.lag_trickle_bytes)] {
            if trickle < fragment {
                return bad(format!(
                    "{name}.lag_trickle_bytes ({trickle}) must be at least a fragment's cost, frag.frag_size + {MESSAGE_CHARGE} ({fragment})"
                ));
            }
        }
        // A receiver keeps what arrives ahead of a gap up to its `recv_window_max` messages and
        // drops the rest, to be asked for again: that must hold what the sender's window lets out
        // (at most one message per `MESSAGE_CHARGE` bytes of it), or every loss would cost
        // rounds of repair for casts that were in flight.
        for (name, window, flow) in [
            ("mnak", self.mnak.recv_window_max, ("mflow", self.mflow.window_bytes)),
            ("pt2pt", self.pt2pt.recv_window_max, ("pt2ptw", self.pt2ptw.window_bytes)),
        ] {
            let (flow, bytes) = flow;
            let messages = bytes.div_ceil(MESSAGE_CHARGE);
            if window < messages {
                return bad(format!(
                    "{name}.recv_window_max ({window}) must hold the messages a {flow} window lets out, {flow}.window_bytes / {MESSAGE_CHARGE} ({messages})"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(any(test, feature = "fault-injection"))]
impl AnyLayer {
    /// The seeded fault of a member that never reports its flow-control credit to `origin`
    /// (`crate::faults::withhold_credit`): the flow-control layers take it, the others ignore it.
    pub(crate) fn withhold_credit(&mut self, origin: Rank) {
        match self {
            AnyLayer::Mflow(layer) => layer.withhold_credit(origin),
            AnyLayer::Pt2ptw(layer) => layer.withhold_credit(origin),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    /// Layers are held inline in one enum, so each slot of every stack is as large as the largest
    /// layer held inline: a layer that grows past this grows every stack by that much per layer
    /// (`safe`'s acknowledgement watch made every slot 32 bytes larger, about 650 bytes a
    /// `vsync` stack). Hold the large layer `boxed` in the registry instead.
    #[test]
    fn a_layer_slot_stays_small() {
        assert!(std::mem::size_of::<super::AnyLayer>() <= 208, "{}", std::mem::size_of::<super::AnyLayer>());
    }
}
