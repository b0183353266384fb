//! The central codec: bounded readers and writers of the primitive field types.
//!
//! Integers are LEB128 varints (small sequence numbers and ranks take one byte); fixed-width
//! fields are little-endian. Every read is bounds-checked and returns a [`WireError`] with the
//! offset; nothing here can panic on any input.

use crate::{WireError, WireErrorKind, RANKS_MAX};

/// The longest varint of a `u64`: seven bits a byte.
pub const VARINT_MAX: usize = 10;

/// Writes `value` as an unsigned LEB128 varint (seven bits a byte, low first) at the start of
/// `out` and returns its length; `out` must hold [`VARINT_MAX`] bytes, or the value's length.
#[inline]
pub fn varint_into(mut value: u64, out: &mut [u8]) -> usize {
    let mut len = 0;
    while value >= 0x80 {
        out[len] = (value as u8) | 0x80;
        value >>= 7;
        len += 1;
    }
    out[len] = value as u8;
    len + 1
}

/// Appends encoded fields to a byte vector.
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// A writer appending to `buf`.
    pub fn new(buf: &'a mut Vec<u8>) -> Writer<'a> {
        Writer { buf }
    }

    fn out(&mut self) -> &mut Vec<u8> {
        self.buf
    }

    /// One byte.
    pub fn u8(&mut self, value: u8) {
        self.out().push(value);
    }

    /// A little-endian `u64`.
    pub fn u64_le(&mut self, value: u64) {
        self.out().extend_from_slice(&value.to_le_bytes());
    }

    /// An unsigned LEB128 varint.
    pub fn varint(&mut self, value: u64) {
        let mut bytes = [0u8; VARINT_MAX];
        let len = varint_into(value, &mut bytes);
        self.out().extend_from_slice(&bytes[..len]);
    }

    /// A length-prefixed vector of addresses.
    pub fn address_vec(&mut self, values: &[WireAddress]) {
        debug_assert!(values.len() <= RANKS_MAX);
        self.varint(values.len() as u64);
        for value in values {
            self.address(value);
        }
    }

    /// A string: varint length, then its UTF-8 bytes.
    pub fn text(&mut self, text: &str) {
        self.varint(text.len() as u64);
        self.buf.extend_from_slice(text.as_bytes());
    }

    /// Opaque bytes: varint length, then the bytes.
    pub fn blob(&mut self, bytes: &[u8]) {
        self.varint(bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
    }

    /// A vector of varints, length first.
    pub fn varint_vec(&mut self, values: &[u64]) {
        debug_assert!(values.len() <= RANKS_MAX);
        self.varint(values.len() as u64);
        for &value in values {
            self.varint(value);
        }
    }
}

/// A network address as carried in membership messages (the core's `Address`, on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WireAddress {
    /// A simulated node.
    Sim(u32),
    /// IPv4 address and port.
    V4([u8; 4], u16),
    /// IPv6 address and port.
    V6([u8; 16], u16),
}

impl Writer<'_> {
    /// An address: tag, then the fields.
    pub fn address(&mut self, address: &WireAddress) {
        match address {
            WireAddress::Sim(node) => {
                self.u8(0);
                self.varint((*node).into());
            }
            WireAddress::V4(ip, port) => {
                self.u8(1);
                self.out().extend_from_slice(ip);
                self.varint((*port).into());
            }
            WireAddress::V6(ip, port) => {
                self.u8(2);
                self.out().extend_from_slice(ip);
                self.varint((*port).into());
            }
        }
    }
}

/// Reads fields from a byte slice, tracking the offset for error reports.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`, starting at offset 0.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, pos: 0 }
    }

    /// Current offset.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Skips `n` bytes.
    pub fn skip(&mut self, n: usize) -> Result<(), WireError> {
        if n > self.remaining() {
            return Err(self.error(WireErrorKind::Truncated));
        }
        self.pos += n;
        Ok(())
    }

    /// An error of `kind` at the current offset.
    pub fn error(&self, kind: WireErrorKind) -> WireError {
        WireError { kind, offset: self.pos }
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, WireError> {
        let byte = *self.bytes.get(self.pos).ok_or(self.error(WireErrorKind::Truncated))?;
        self.pos += 1;
        Ok(byte)
    }

    /// The next `N` bytes.
    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let end = self.pos.checked_add(N).filter(|&end| end <= self.bytes.len());
        let end = end.ok_or(self.error(WireErrorKind::Truncated))?;
        let mut raw = [0u8; N];
        raw.copy_from_slice(&self.bytes[self.pos..end]);
        self.pos = end;
        Ok(raw)
    }

    /// A little-endian `u32`.
    pub fn u32_le(&mut self) -> Result<u32, WireError> {
        self.array().map(u32::from_le_bytes)
    }

    /// A little-endian `u64`.
    pub fn u64_le(&mut self) -> Result<u64, WireError> {
        self.array().map(u64::from_le_bytes)
    }

    /// An unsigned LEB128 varint of at most 10 bytes that fits in 64 bits.
    #[inline]
    pub fn varint(&mut self) -> Result<u64, WireError> {
        // One or two bytes (ranks, lengths, and counts below 16,384): most varints of every
        // header, and all but the largest entries of a stability gossip's vectors (which take
        // most of its decoding at 64 members). The same values and refusals as the loop.
        match self.bytes.get(self.pos..) {
            Some([b0, ..]) if *b0 < 0x80 => {
                self.pos += 1;
                return Ok(u64::from(*b0));
            }
            Some([b0, b1, ..]) if *b1 < 0x80 && *b1 != 0 => {
                self.pos += 2;
                return Ok(u64::from(b0 & 0x7f) | u64::from(*b1) << 7);
            }
            _ => {}
        }
        self.varint_long()
    }

    /// [`Reader::varint`] past its first two bytes, or refused.
    fn varint_long(&mut self) -> Result<u64, WireError> {
        let start = self.pos;
        let mut value: u64 = 0;
        for index in 0..10 {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if index == 9 && bits > 1 {
                return Err(WireError { kind: WireErrorKind::Varint, offset: start });
            }
            value |= bits << (7 * index);
            if byte & 0x80 == 0 {
                // A zero final byte after continuation bytes is padding: refuse it, so every value
                // has exactly one encoding (decode and encode are inverse bijections).
                if byte == 0 && index > 0 {
                    return Err(WireError { kind: WireErrorKind::Varint, offset: start });
                }
                return Ok(value);
            }
        }
        Err(WireError { kind: WireErrorKind::Varint, offset: start })
    }

    /// A varint that must fit a rank (`u16`).
    pub fn rank(&mut self) -> Result<u16, WireError> {
        let offset = self.pos;
        let value = self.varint()?;
        u16::try_from(value).map_err(|_| WireError { kind: WireErrorKind::Range, offset })
    }

    /// A varint that must fit a `u32`.
    pub fn varint_u32(&mut self) -> Result<u32, WireError> {
        let offset = self.pos;
        let value = self.varint()?;
        u32::try_from(value).map_err(|_| WireError { kind: WireErrorKind::Range, offset })
    }

    /// A UTF-8 string of at most `max` bytes, written by [`Writer::text`]: varint length, bytes.
    pub fn text(&mut self, max: usize) -> Result<String, WireError> {
        let offset = self.pos;
        let len = self.varint()?;
        if len > max as u64 || len > self.remaining() as u64 {
            return Err(WireError { kind: WireErrorKind::VectorLength(len), offset });
        }
        let raw = &self.bytes[self.pos..self.pos + len as usize];
        let text = std::str::from_utf8(raw).map_err(|_| self.error(WireErrorKind::Range))?;
        self.pos += len as usize;
        Ok(text.to_string())
    }

    /// At most `max` opaque bytes, written by [`Writer::blob`]: varint length, bytes.
    pub fn blob(&mut self, max: usize) -> Result<Vec<u8>, WireError> {
        let offset = self.pos;
        let len = self.varint()?;
        if len > max as u64 || len > self.remaining() as u64 {
            return Err(WireError { kind: WireErrorKind::VectorLength(len), offset });
        }
        let blob = self.bytes[self.pos..self.pos + len as usize].to_vec();
        self.pos += len as usize;
        Ok(blob)
    }

    /// Fixed bytes.
    pub fn bytes<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let end = self.pos.checked_add(N).filter(|&end| end <= self.bytes.len());
        let end = end.ok_or(self.error(WireErrorKind::Truncated))?;
        let mut raw = [0u8; N];
        raw.copy_from_slice(&self.bytes[self.pos..end]);
        self.pos = end;
        Ok(raw)
    }

    /// An address.
    pub fn address(&mut self) -> Result<WireAddress, WireError> {
        let offset = self.pos;
        let port = |r: &mut Reader<'_>| {
            let offset = r.pos;
            u16::try_from(r.varint()?).map_err(|_| WireError { kind: WireErrorKind::Range, offset })
        };
        match self.u8()? {
            0 => Ok(WireAddress::Sim(self.varint_u32()?)),
            1 => Ok(WireAddress::V4(self.bytes()?, port(self)?)),
            2 => Ok(WireAddress::V6(self.bytes()?, port(self)?)),
            _ => Err(WireError { kind: WireErrorKind::Range, offset }),
        }
    }

    /// A length-prefixed vector of addresses, its length checked before allocating (each address
    /// takes at least two bytes).
    pub fn address_vec(&mut self) -> Result<Vec<WireAddress>, WireError> {
        let offset = self.pos;
        let len = self.varint()?;
        if len > RANKS_MAX as u64 || len.saturating_mul(2) > self.remaining() as u64 {
            return Err(WireError { kind: WireErrorKind::VectorLength(len), offset });
        }
        (0..len).map(|_| self.address()).collect()
    }

    /// A length-prefixed vector of varints. The length is checked against [`RANKS_MAX`] and
    /// against the bytes that remain (each element takes at least one byte) *before* allocating.
    pub fn varint_vec(&mut self) -> Result<Vec<u64>, WireError> {
        let offset = self.pos;
        let len = self.varint()?;
        if len > RANKS_MAX as u64 || len > self.remaining() as u64 {
            return Err(WireError { kind: WireErrorKind::VectorLength(len), offset });
        }
        let mut values = Vec::with_capacity(len as usize);
        for _ in 0..len {
            values.push(self.varint()?);
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The short cuts for one and two bytes read exactly what the loop reads, and refuse
        /// what it refuses, at the same offsets, on any bytes.
        #[test]
        fn varint_short_cuts_equal_the_loop(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            let (mut fast, mut slow) = (Reader::new(&bytes), Reader::new(&bytes));
            prop_assert_eq!(fast.varint(), slow.varint_long());
            prop_assert_eq!(fast.position(), slow.position());
        }

        #[test]
        fn varint_round_trip(value: u64) {
            let mut buf = Vec::new();
            Writer::new(&mut buf).varint(value);
            prop_assert!(buf.len() <= 10);
            let mut reader = Reader::new(&buf);
            prop_assert_eq!(reader.varint().unwrap(), value);
            prop_assert_eq!(reader.remaining(), 0);
        }
    }

    #[test]
    fn overlong_varint_is_an_error() {
        let bytes = [0xffu8; 11];
        assert_eq!(Reader::new(&bytes).varint().unwrap_err().kind, WireErrorKind::Varint);
        // Padding: 0 written in two bytes.
        assert_eq!(Reader::new(&[0x80, 0x00]).varint().unwrap_err().kind, WireErrorKind::Varint);
        // Ten bytes whose last one overflows 64 bits.
        let mut bytes = [0xffu8; 10];
        bytes[9] = 0x02;
        assert_eq!(Reader::new(&bytes).varint().unwrap_err().kind, WireErrorKind::Varint);
        assert_eq!(Reader::new(&[0x80]).varint().unwrap_err().kind, WireErrorKind::Truncated);
    }

    #[test]
    fn vector_length_is_checked_before_allocation() {
        let mut buf = Vec::new();
        Writer::new(&mut buf).varint(u64::MAX);
        let err = Reader::new(&buf).varint_vec().unwrap_err();
        assert_eq!(err.kind, WireErrorKind::VectorLength(u64::MAX));
    }
}
