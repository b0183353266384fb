//! Header of the `merge` layer: the reliable merge protocol between two partitions' coordinators
//! (Ensemble `merge`; thesis Table 2.1 `MergeRequest`, `MergeGranted`, `MergeDenied`).

use super::intra::FullView;
use super::{bad_variant, LayerHeader};
use crate::codec::{Reader, Writer};
use crate::WireError;

/// `merge` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A message from above passing through.
    NoHdr,
    /// A flushed partition's coordinator asks another coordinator to merge it in.
    Request {
        /// The requesting partition's view.
        view: Box<FullView>,
    },
    /// The granter is busy with another view change: the requester should not wait.
    Denied {
        /// The requester's view id it answers, as (ltime, coordinator).
        request: (u64, u64),
    },
    /// A request passed on by a member that is not its partition's coordinator (the requester
    /// had the address of an earlier coordinator), to its coordinator. Never passed on again.
    Forwarded {
        /// The requesting partition's view.
        view: Box<FullView>,
    },
    /// The merged view, sent to the requesting coordinator.
    Granted {
        /// The requester's view id it answers, as (ltime, coordinator).
        request: (u64, u64),
        /// The merged view.
        view: Box<FullView>,
    },
}

impl LayerHeader for Header {
    const LAYER: u8 = 17;
    const ZERO: Self = Header::NoHdr;
    fn variant(&self) -> u8 {
        match self {
            Header::NoHdr => 0,
            Header::Request { .. } => 1,
            Header::Granted { .. } => 2,
            Header::Denied { .. } => 3,
            Header::Forwarded { .. } => 4,
        }
    }
    fn encode_fields(&self, w: &mut Writer<'_>) {
        match self {
            Header::NoHdr => {}
            Header::Request { view } | Header::Forwarded { view } => view.encode(w),
            Header::Granted { request, view } => {
                w.varint(request.0);
                w.varint(request.1);
                view.encode(w);
            }
            Header::Denied { request } => {
                w.varint(request.0);
                w.varint(request.1);
            }
        }
    }
    fn decode_fields(variant: u8, r: &mut Reader<'_>) -> Result<Self, WireError> {
        match variant {
            1 => Ok(Header::Request { view: Box::new(FullView::decode(r)?) }),
            2 => {
                let request = (r.varint()?, r.varint()?);
                Ok(Header::Granted { request, view: Box::new(FullView::decode(r)?) })
            }
            3 => Ok(Header::Denied { request: (r.varint()?, r.varint()?) }),
            4 => Ok(Header::Forwarded { view: Box::new(FullView::decode(r)?) }),
            _ => Err(bad_variant::<Self>(variant, r)),
        }
    }
}
