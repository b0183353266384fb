//! Header of the `suspect` layer: heartbeats of the failure detector (Ensemble `suspect`).
//!
//! In a quiet view the detector runs through the coordinator: the coordinator and its deputy (the
//! lowest other rank) cast `Beat`, and each other member pings both (`Ping`, on the group's gossip
//! channel). Once anything is suspected, a view change starts, or another member's `Heartbeat` is
//! heard, every member casts `Heartbeat` to all.

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// A member's heartbeat to the coordinator and the deputy, on the group's gossip channel (unreliable, to one
/// address, not sequenced by the view's layers). The channel crosses views, so the ping names its
/// view and sender, as a `stable` row does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ping {
    /// The view's id: its logical time...
    pub view_ltime: u64,
    /// ...and the endpoint that installed it.
    pub view_coord: u64,
    /// The sender's rank in that view.
    pub rank: u64,
}

/// `suspect` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// "I am alive", cast unreliably every sweep by every member: the all-to-all detector is on,
    /// and a member that hears one turns it on too.
    Heartbeat,
    /// The coordinator's or the deputy's "I am alive", cast unreliably every sweep while the view
    /// is quiet.
    Beat,
    /// A member's "I am alive", to the coordinator and the deputy, every sweep while the view is
    /// quiet.
    Ping(Ping),
    /// "A flush failed you (rank `to`): I drop all you send for the rest of this view", every
    /// sweep, to the address of each member the sender's flush failed (group gossip channel;
    /// `ping.rank` is the sender). Only rank `to` takes it (other members of the group may share
    /// its process), and suspects the sender at once, as it would once silence showed it.
    Excluded {
        /// The view and the sender's rank.
        ping: Ping,
        /// The rank told.
        to: u64,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 10;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Heartbeat => 1,
            Header::Beat => 2,
            Header::Ping(_) => 3,
            Header::Excluded { .. } => 4,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        if let Header::Ping(ping) | Header::Excluded { ping, .. } = self {
            w.varint(ping.view_ltime);
            w.varint(ping.view_coord);
            w.varint(ping.rank);
        }
        if let Header::Excluded { to, .. } = self {
            w.varint(*to);
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Heartbeat),
            2 => Ok(Header::Beat),
            3 => Ok(Header::Ping(Ping { view_ltime: r.varint()?, view_coord: r.varint()?, rank: r.varint()? })),
            4 => Ok(Header::Excluded {
                ping: Ping { view_ltime: r.varint()?, view_coord: r.varint()?, rank: r.varint()? },
                to: r.varint()?,
            }),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
