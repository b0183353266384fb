//! Header of the `intra` layer: view installation within a partition (Ensemble `intra`).

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, WireAddress, Writer};
use crate::{WireError, WireErrorKind};

/// A whole view on the wire: what members outside the sender's view need to build it (merges).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullView {
    /// Logical time of the view.
    pub ltime: u64,
    /// Endpoint id of the coordinator that made it.
    pub coord: u64,
    /// Member endpoint ids, in rank order.
    pub members: Vec<u64>,
    /// Their addresses, in rank order (same length as `members`).
    pub addresses: Vec<WireAddress>,
    /// Previous view ids, as (ltime, coordinator) pairs.
    pub prev: Vec<(u64, u64)>,
    /// Whether the view is primary.
    pub primary: bool,
    /// The view's stack, as a layer list: a merge into a partition that switched stacks must
    /// build the granter's stack, not its own.
    pub stack: String,
    /// Ranks of the members that are clients (Ensemble's `ViewState.clients`; the rest are
    /// servers).
    pub clients: Vec<u64>,
    /// The view's protocol parameters, in the core's binary form (empty: the defaults): like the
    /// stack, every member runs the view's, not its own.
    pub params: Vec<u8>,
}

/// The largest logical time a view may have: one view per nanosecond for 146 years. A larger one
/// (a faulty or hostile member's) is refused, so that the next view's `ltime + 1` can never
/// overflow.
pub const LTIME_MAX: u64 = 1 << 62;

/// Largest encoded parameters a view may carry (all layers' parameters take about a hundred
/// bytes).
pub const PARAMS_MAX: usize = 1024;

impl FullView {
    /// Appends the encoding.
    pub fn encode(&self, w: &mut Writer<'_>) {
        w.varint(self.ltime);
        w.varint(self.coord);
        w.varint_vec(&self.members);
        w.address_vec(&self.addresses);
        let prev: Vec<u64> = self.prev.iter().flat_map(|&(l, c)| [l, c]).collect();
        w.varint_vec(&prev);
        w.u8(u8::from(self.primary));
        w.text(&self.stack);
        w.varint_vec(&self.clients);
        w.blob(&self.params);
    }

    /// The length of its encoding, in bytes.
    pub fn encoded_len(&self) -> usize {
        let mut buf = Vec::new();
        self.encode(&mut Writer::new(&mut buf));
        buf.len()
    }

    /// Reads one, checking that members are distinct and match their addresses, and the flag is
    /// a boolean.
    pub fn decode(r: &mut Reader<'_>) -> Result<FullView, WireError> {
        let ltime_offset = r.position();
        let ltime = r.varint()?;
        if ltime > LTIME_MAX {
            return Err(WireError { kind: WireErrorKind::Range, offset: ltime_offset });
        }
        let coord = r.varint()?;
        let members_offset = r.position();
        let members = r.varint_vec()?;
        // An endpoint twice in one view (a faulty or forged merge request) would have two ranks:
        // a member that never answers for one of them, until the others exclude it.
        let mut distinct = members.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() != members.len() {
            return Err(WireError { kind: WireErrorKind::Range, offset: members_offset });
        }
        let offset = r.position();
        let addresses = r.address_vec()?;
        let prev = r.varint_vec()?;
        let flag_offset = r.position();
        let primary = r.u8()?;
        if addresses.len() != members.len() || prev.len() % 2 != 0 || members.is_empty() {
            return Err(WireError { kind: WireErrorKind::Range, offset });
        }
        if primary > 1 {
            return Err(WireError { kind: WireErrorKind::Range, offset: flag_offset });
        }
        let prev = prev.chunks(2).map(|pair| (pair[0], pair[1])).collect();
        let stack = r.text(super::switch::SPEC_MAX)?;
        let clients_offset = r.position();
        let clients = r.varint_vec()?;
        if clients.iter().any(|&c| c >= members.len() as u64) {
            return Err(WireError { kind: WireErrorKind::Range, offset: clients_offset });
        }
        let params = r.blob(PARAMS_MAX)?;
        Ok(FullView { ltime, coord, members, addresses, prev, primary: primary == 1, stack, clients, params })
    }
}

/// `intra` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// Coordinator → all: the next view, after round `round`, has these ranks of the current
    /// view, in this order.
    View {
        /// The flush round this view concludes.
        round: u64,
        /// Surviving ranks of the current view.
        survivors: Vec<u64>,
    },
    /// Coordinator → all: the next view, after round `round`, described in full (a merge).
    Full {
        /// The flush round this view concludes.
        round: u64,
        /// The view.
        view: Box<FullView>,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 14;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::View { .. } => 1,
            Header::Full { .. } => 2,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        match self {
            Header::NoHdr => {}
            Header::View { round, survivors } => {
                w.varint(*round);
                w.varint_vec(survivors);
            }
            Header::Full { round, view } => {
                w.varint(*round);
                view.encode(w);
            }
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::View { round: r.varint()?, survivors: r.varint_vec()? }),
            2 => Ok(Header::Full { round: r.varint()?, view: Box::new(FullView::decode(r)?) }),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view's logical time above [`LTIME_MAX`] does not decode: the next view's `ltime + 1`
    /// never overflows, whatever a faulty member sends.
    #[test]
    fn a_view_beyond_the_largest_logical_time_is_refused() {
        let view = |ltime| FullView {
            ltime,
            coord: 1,
            members: vec![1],
            addresses: vec![WireAddress::Sim(1)],
            prev: Vec::new(),
            primary: false,
            stack: "vsync".into(),
            clients: Vec::new(),
            params: Vec::new(),
        };
        let decode = |ltime| {
            let mut buf = Vec::new();
            view(ltime).encode(&mut Writer::new(&mut buf));
            FullView::decode(&mut Reader::new(&buf))
        };
        assert_eq!(decode(LTIME_MAX).unwrap(), view(LTIME_MAX));
        assert_eq!(decode(LTIME_MAX + 1).unwrap_err().kind, WireErrorKind::Range);
        assert_eq!(decode(u64::MAX).unwrap_err().kind, WireErrorKind::Range);
    }

    /// A view that names an endpoint twice does not decode.
    #[test]
    fn a_view_with_an_endpoint_twice_is_refused() {
        let view = |members: Vec<u64>| FullView {
            ltime: 3,
            coord: 1,
            addresses: members.iter().map(|&m| WireAddress::Sim(m as u32)).collect(),
            members,
            prev: Vec::new(),
            primary: false,
            stack: "vsync".into(),
            clients: Vec::new(),
            params: Vec::new(),
        };
        let decode = |members: Vec<u64>| {
            let mut buf = Vec::new();
            view(members).encode(&mut Writer::new(&mut buf));
            FullView::decode(&mut Reader::new(&buf))
        };
        assert_eq!(decode(vec![1, 2, 3]).unwrap(), view(vec![1, 2, 3]));
        assert_eq!(decode(vec![1, 2, 1]).unwrap_err().kind, WireErrorKind::Range);
    }
}
