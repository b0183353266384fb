//! Header of the `stable` layer: stability detection through a coordinator (thesis Table 2.2
//! fields `Stability`, `NumCasts`). Each member sends its receive counts (a `Row`) to the
//! coordinator, which casts the columns it computes over every member's row.

use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;
use std::sync::Arc;

/// The coordinator's stability, cast to the view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    /// The coordinator's count of its casts of columns: a member takes none older than the last
    /// it took from that rank (a late copy would take the maximum back down).
    pub seq: u64,
    /// Per origin rank, how many of its casts every live member has received (the column
    /// minimum over live members' rows).
    pub stable: Vec<u64>,
    /// Per origin rank, the most of its casts any live member has received (the column maximum).
    pub max: Vec<u64>,
    /// The ranks the coordinator counted as failed (their rows left out): a member takes the
    /// columns only if it counts every one of them as failed too.
    pub failed: Vec<u64>,
}

/// A member's row, sent to the coordinator on the group's gossip channel (unreliable, to one
/// address, and not sequenced by the view's layers: a row lost is sent again at the next sweep,
/// and rows go on during a view change's flush, which needs them). The channel crosses views, so
/// the row names its view and sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The view's id: its logical time...
    pub view_ltime: u64,
    /// ...and the endpoint that installed it.
    pub view_coord: u64,
    /// The sender's rank in that view.
    pub rank: u64,
    /// Per origin rank, how many of its casts the sender has received (contiguously).
    pub counts: Vec<u64>,
}

/// `stable` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// The coordinator's columns, cast (shared, so buffering it never copies the vectors).
    Columns(Arc<Columns>),
    /// A member's row, to the coordinator.
    Row(Arc<Row>),
}

impl LayerHeader for Header {
    const LAYER: u8 = 4;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Columns(_) => 1,
            Header::Row(_) => 2,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        match self {
            Header::NoHdr => {}
            Header::Columns(columns) => {
                w.varint(columns.seq);
                w.varint_vec(&columns.stable);
                w.varint_vec(&columns.max);
                w.varint_vec(&columns.failed);
            }
            Header::Row(row) => {
                w.varint(row.view_ltime);
                w.varint(row.view_coord);
                w.varint(row.rank);
                w.varint_vec(&row.counts);
            }
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => {
                let seq = r.varint()?;
                let stable = r.varint_vec()?;
                let max = r.varint_vec()?;
                let failed = r.varint_vec()?;
                Ok(Header::Columns(Arc::new(Columns { seq, stable, max, failed })))
            }
            2 => {
                let (view_ltime, view_coord, rank) = (r.varint()?, r.varint()?, r.varint()?);
                let counts = r.varint_vec()?;
                Ok(Header::Row(Arc::new(Row { view_ltime, view_coord, rank, counts })))
            }
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
