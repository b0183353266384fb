//! The header stack of a message, in one of two forms (thesis §3.3.3 and §3.4, "lazy
//! reformatting" of compressed messages).
//!
//! - **Full**: a vector of typed headers, one per layer that pushed one. Every message of the
//!   layered path, and every message that does not follow a common trace, is in this form.
//! - **Compact**: the first `len` headers of a stack's [`Template`] (the headers its common cast or
//!   send trace pushes, all constant but one sequence number), with that one number. A message of
//!   the bypass is built in this form and stays in it: kept in a retransmission buffer, cloned for
//!   the loop-back, encoded as a compressed datagram, or rebuilt at a receiver, it needs no
//!   allocation. It turns into the full form only when a layer pushes a header the template does
//!   not predict (lazily, at that moment).
//!
//! Both forms read the same: length, indexing, iteration, equality and `Debug` see only the
//! headers, so a layer (and `Bypass::Diff`) cannot tell one form from the other.

use crate::hdr::Header;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// The headers of a common trace, from the highest layer's: constant but for one that carries a
/// sequence number ([`Header::seqno`]).
#[derive(Debug, PartialEq)]
pub struct Template {
    hdrs: Box<[Header]>,
    slot: usize,
}

impl Template {
    /// A template of `hdrs`, or `None` unless exactly one of them carries a sequence number, or
    /// when there are more than a datagram carries ([`crate::HEADER_COUNT_MAX`]; the compact form
    /// keeps its length in 8 bits).
    pub fn new(hdrs: Vec<Header>) -> Option<Template> {
        if hdrs.len() > crate::HEADER_COUNT_MAX {
            return None;
        }
        let mut slots = hdrs.iter().enumerate().filter(|(_, h)| h.seqno().is_some()).map(|(i, _)| i);
        let (Some(slot), None) = (slots.next(), slots.next()) else { return None };
        Some(Template { hdrs: hdrs.into_boxed_slice(), slot })
    }

    /// The index of the header that carries the sequence number.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// How many headers a whole message of the trace has.
    #[inline]
    pub fn len(&self) -> usize {
        self.hdrs.len()
    }

    /// Never true: a template has its sequence-number header.
    pub fn is_empty(&self) -> bool {
        self.hdrs.is_empty()
    }

    /// The header at `index` (the sequence-number header with the number 0).
    pub fn header(&self, index: usize) -> Option<&Header> {
        self.hdrs.get(index)
    }
}

/// A message's headers, in push order (the highest layer's first). See the module documentation.
///
/// As small as a vector (24 bytes): messages travel inside events by value, so every byte here
/// is copied at each layer of the layered path.
#[derive(Clone)]
pub struct HeaderStack(Repr);

#[derive(Clone)]
enum Repr {
    Full(Vec<Header>),
    /// The first `packed & 0xff` headers of `template`, whose sequence-number header carries
    /// `packed >> 8` (meaningful once the length passes the slot).
    Compact {
        template: Arc<Template>,
        packed: u64,
    },
}

/// Sequence numbers the compact form holds (56 bits: ages at any real rate); a larger one
/// leaves the message in the full form.
const SEQNO_COMPACT_MAX: u64 = (1 << 56) - 1;

impl Default for HeaderStack {
    fn default() -> HeaderStack {
        HeaderStack(Repr::Full(Vec::new()))
    }
}

impl From<Vec<Header>> for HeaderStack {
    fn from(hdrs: Vec<Header>) -> HeaderStack {
        HeaderStack(Repr::Full(hdrs))
    }
}

impl HeaderStack {
    /// An empty stack in the full form, with room for `capacity` headers.
    pub fn with_capacity(capacity: usize) -> HeaderStack {
        HeaderStack(Repr::Full(Vec::with_capacity(capacity)))
    }

    /// An empty stack in the compact form of `template`: pushes that follow the template
    /// allocate nothing.
    pub fn compact(template: &Arc<Template>) -> HeaderStack {
        HeaderStack(Repr::Compact { template: Arc::clone(template), packed: 0 })
    }

    /// The whole headers of `template` with sequence number `seqno`, in the compact form (a
    /// compressed datagram, rebuilt at a receiver); in the full form if `seqno` is too large.
    pub fn expanded(template: &Arc<Template>, seqno: u64) -> Option<HeaderStack> {
        let len = u8::try_from(template.len()).ok()?;
        if seqno > SEQNO_COMPACT_MAX {
            let mut hdrs = template.hdrs.to_vec();
            hdrs[template.slot] = hdrs[template.slot].with_seqno(seqno)?;
            return Some(HeaderStack::from(hdrs));
        }
        Some(HeaderStack(Repr::Compact { template: Arc::clone(template), packed: seqno << 8 | u64::from(len) }))
    }

    /// The sequence number of a whole message of `template`'s trace in the compact form of that
    /// very template (the sender's check for compression, without comparing headers).
    #[inline]
    pub fn compact_seqno(&self, template: &Arc<Template>) -> Option<u64> {
        match &self.0 {
            Repr::Compact { template: t, packed }
                if Arc::ptr_eq(t, template) && (packed & 0xff) as usize == t.len() =>
            {
                Some(packed >> 8)
            }
            _ => None,
        }
    }

    /// Whether the stack is in the compact form.
    #[inline]
    pub fn is_compact(&self) -> bool {
        matches!(self.0, Repr::Compact { .. })
    }

    /// Number of headers.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Full(v) => v.len(),
            Repr::Compact { packed, .. } => (packed & 0xff) as usize,
        }
    }

    /// True when no header has been pushed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The header at `index`, if any. Borrowed, except the sequence-number header of the compact
    /// form, which is rebuilt (no allocation: it is a number).
    pub fn get(&self, index: usize) -> Option<Cow<'_, Header>> {
        match &self.0 {
            Repr::Full(v) => v.get(index).map(Cow::Borrowed),
            Repr::Compact { packed, .. } if index >= (packed & 0xff) as usize => None,
            Repr::Compact { template, packed } if index == template.slot => {
                template.hdrs[index].with_seqno(packed >> 8).map(Cow::Owned)
            }
            Repr::Compact { template, .. } => Some(Cow::Borrowed(&template.hdrs[index])),
        }
    }

    /// In the compact form, the template's constant header at `index` (any but the
    /// sequence-number header), whatever the stack's length: what a layer that pops it going up
    /// would get, borrowed from the template instead of copied out.
    #[inline]
    pub fn predicted(&self, index: usize) -> Option<&Header> {
        match &self.0 {
            Repr::Compact { template, .. } if index != template.slot => template.hdrs.get(index),
            _ => None,
        }
    }

    /// The last header pushed.
    pub fn last(&self) -> Option<Cow<'_, Header>> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// The headers, in push order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { stack: self, front: 0, back: self.len() }
    }

    /// Pushes a header. In the compact form, a header the template predicts at this depth costs
    /// nothing; any other turns the stack into the full form first (lazy reformatting).
    #[inline]
    pub fn push(&mut self, header: Header) {
        if !self.push_predicted(&header) {
            self.push_full(header);
        }
    }

    /// Pushes `header` if it costs nothing: the stack is in the compact form and its template
    /// predicts `header` at this depth (the sequence number's header with a number the compact
    /// form holds). False, and nothing pushed, otherwise. For the fused traces, which build the
    /// header they push in place and then drop it where its variant is known (no call to drop a
    /// [`Header`] in general).
    #[inline(always)]
    pub fn push_predicted(&mut self, header: &Header) -> bool {
        let Repr::Compact { template, packed } = &mut self.0 else { return false };
        let at = (*packed & 0xff) as usize;
        if at >= template.len() {
            return false;
        }
        if at != template.slot {
            if template.hdrs[at] == *header {
                *packed += 1;
                return true;
            }
        } else if let Some(seqno) = header.seqno().filter(|&s| s <= SEQNO_COMPACT_MAX) {
            if template.hdrs[at].same_but_seqno(header) {
                *packed = seqno << 8 | (at as u64 + 1);
                return true;
            }
        }
        false
    }

    /// [`HeaderStack::push`] off the common path: in the full form, reformatting a compact stack
    /// first. Out of line, so that the common path inlined into its callers stays small.
    #[cold]
    #[inline(never)]
    fn push_full(&mut self, header: Header) {
        self.full().push(header);
    }

    /// Pops the last header pushed.
    pub fn pop(&mut self) -> Option<Header> {
        match &mut self.0 {
            Repr::Full(v) => v.pop(),
            Repr::Compact { template, packed } => {
                let at = ((*packed & 0xff) as usize).checked_sub(1)?;
                *packed -= 1;
                match at == template.slot {
                    true => template.hdrs[at].with_seqno(*packed >> 8),
                    false => Some(template.hdrs[at].clone()),
                }
            }
        }
    }

    /// Pushes the headers `template` has between this stack's length and `len`: the headers of
    /// the layers a compiled trace leaves out, which the template predicts (thesis §3.3.3). In the
    /// compact form of `template` this costs nothing; the sequence-number header is never among
    /// them (its layer is always asked).
    #[inline]
    pub fn push_template(&mut self, template: &Arc<Template>, len: usize) {
        let at = self.len();
        debug_assert!(len <= template.len() && !(at..len).contains(&template.slot), "{at}..{len} crosses the slot");
        // It only pushes: a length below this stack's leaves both forms as they are (the compact
        // one cut itself short, and the full one did not).
        let len = len.max(at);
        match &mut self.0 {
            Repr::Compact { template: t, packed } if Arc::ptr_eq(t, template) => {
                *packed = (*packed & !0xff) | len as u64;
            }
            _ => {
                for header in &template.hdrs[at.min(len)..len] {
                    self.push(header.clone());
                }
            }
        }
    }

    /// Drops the headers above `len` (the headers of the layers a compiled trace leaves out, on
    /// the way up). Nothing happens if the stack is not longer than `len`.
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        match &mut self.0 {
            Repr::Full(v) => v.truncate(len),
            Repr::Compact { packed, .. } => {
                if len < (*packed & 0xff) as usize {
                    *packed = (*packed & !0xff) | len as u64;
                }
            }
        }
    }

    /// The template of a compact stack (whose headers, but for the sequence number, are the
    /// template's: a reader may borrow them from it instead of popping copies).
    pub fn template(&self) -> Option<&Arc<Template>> {
        match &self.0 {
            Repr::Compact { template, .. } => Some(template),
            Repr::Full(_) => None,
        }
    }

    /// Back to the first `len` headers after pops, in the compact form only (whose headers are
    /// all its template's, so popping loses nothing): a layer that kept a message on its way up
    /// can take the message itself once the layers above are done with it. False in the full form,
    /// or beyond the template. `len` must not exceed the length the stack had before the pops:
    /// beyond it the headers would be the template's, with a sequence number nobody pushed.
    #[inline]
    pub fn regrow(&mut self, len: usize) -> bool {
        match &mut self.0 {
            Repr::Compact { template, packed } if len <= template.len() => {
                *packed = (*packed & !0xff) | len as u64;
                true
            }
            _ => false,
        }
    }

    /// The full form, reformatting a compact stack.
    fn full(&mut self) -> &mut Vec<Header> {
        if let Repr::Compact { .. } = &self.0 {
            let mut v = Vec::with_capacity(crate::hdr::HEADER_CAPACITY.max(self.len() + 1));
            v.extend(self.iter().map(Cow::into_owned));
            self.0 = Repr::Full(v);
        }
        match &mut self.0 {
            Repr::Full(v) => v,
            Repr::Compact { .. } => unreachable!("just reformatted"),
        }
    }
}

/// Iterator over a [`HeaderStack`], in push order.
pub struct Iter<'a> {
    stack: &'a HeaderStack,
    front: usize,
    back: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Cow<'a, Header>;
    fn next(&mut self) -> Option<Cow<'a, Header>> {
        if self.front >= self.back {
            return None;
        }
        self.front += 1;
        self.stack.get(self.front - 1)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.back - self.front, Some(self.back - self.front))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        self.back -= 1;
        self.stack.get(self.back)
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a HeaderStack {
    type Item = Cow<'a, Header>;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl PartialEq for HeaderStack {
    fn eq(&self, other: &HeaderStack) -> bool {
        // `Bypass::Diff` compares whole retransmission buffers at every input, of messages in
        // both forms: no header is built for the comparison.
        match (&self.0, &other.0) {
            (Repr::Full(a), Repr::Full(b)) => a == b,
            (Repr::Compact { template: a, packed: p }, Repr::Compact { template: b, packed: q })
                if p == q && (Arc::ptr_eq(a, b) || a.hdrs == b.hdrs) =>
            {
                true
            }
            (Repr::Compact { template, packed }, Repr::Full(full))
            | (Repr::Full(full), Repr::Compact { template, packed }) => {
                let (len, seqno) = ((packed & 0xff) as usize, packed >> 8);
                len == full.len()
                    && full.iter().zip(template.hdrs.iter()).enumerate().all(|(i, (f, t))| match i == template.slot {
                        false => f == t,
                        true => f.seqno() == Some(seqno) && t.same_but_seqno(f),
                    })
            }
            _ => self.len() == other.len() && self.iter().eq(other.iter()),
        }
    }
}

impl PartialEq<Vec<Header>> for HeaderStack {
    fn eq(&self, other: &Vec<Header>) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| *a == *b)
    }
}

impl fmt::Debug for HeaderStack {
    /// The headers only: both forms print alike (`Bypass::Diff` compares layer states by it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hdr::{appl, bottom, mnak};

    fn template() -> Arc<Template> {
        let hdrs = vec![
            Header::Appl(appl::Header::Data),
            Header::Mnak(mnak::Header::Data { seqno: 0 }),
            Header::Bottom(bottom::Header::NoHdr),
        ];
        Arc::new(Template::new(hdrs).expect("one sequence number"))
    }

    fn full(seqno: u64) -> Vec<Header> {
        vec![
            Header::Appl(appl::Header::Data),
            Header::Mnak(mnak::Header::Data { seqno }),
            Header::Bottom(bottom::Header::NoHdr),
        ]
    }

    /// The two forms stay one: a template push to a length below the stack's leaves both as they
    /// are (the compact form cut itself short, the full one did not: a review's finding); and a
    /// template longer than a datagram's headers is refused (its length would carry into the
    /// compact form's sequence number).
    #[test]
    fn a_template_push_never_shortens_and_templates_fit_a_datagram() {
        let t = template();
        let mut compact = HeaderStack::expanded(&t, 7).unwrap();
        let mut vector = HeaderStack::from(full(7));
        compact.push_template(&t, 1);
        vector.push_template(&t, 1);
        assert_eq!((compact.len(), vector.len()), (3, 3));
        assert_eq!(compact, vector);
        let mut long = full(0);
        long.extend(std::iter::repeat_n(Header::Bottom(bottom::Header::NoHdr), crate::HEADER_COUNT_MAX - 2));
        assert!(Template::new(long.clone()).is_none(), "{} headers", long.len());
        long.pop();
        assert!(Template::new(long).is_some());
    }

    #[test]
    fn push_predicted_takes_only_what_the_template_predicts() {
        let t = template();
        let mut s = HeaderStack::compact(&t);
        assert!(!s.push_predicted(&Header::Bottom(bottom::Header::NoHdr)), "not the first header");
        assert!(s.is_empty() && s.is_compact());
        assert!(s.push_predicted(&Header::Appl(appl::Header::Data)));
        assert!(s.push_predicted(&Header::Mnak(mnak::Header::Data { seqno: 9 })));
        assert!(s.push_predicted(&Header::Bottom(bottom::Header::NoHdr)));
        assert!(!s.push_predicted(&Header::Bottom(bottom::Header::NoHdr)), "past the template");
        assert_eq!(s, full(9));
        let mut f = HeaderStack::from(Vec::new());
        assert!(!f.push_predicted(&Header::Appl(appl::Header::Data)), "the full form takes pushes");
        assert!(f.is_empty());
    }

    #[test]
    fn predicted_pushes_stay_compact_and_read_like_the_full_form() {
        let t = template();
        let mut s = HeaderStack::compact(&t);
        for h in full(7) {
            s.push(h);
        }
        assert!(s.is_compact());
        assert_eq!(s, full(7));
        assert_eq!(format!("{s:?}"), format!("{:?}", full(7)));
        assert_eq!(s.compact_seqno(&t), Some(7));
        assert_eq!(
            s.iter().rev().map(Cow::into_owned).collect::<Vec<_>>(),
            full(7).into_iter().rev().collect::<Vec<_>>()
        );
        assert_eq!(HeaderStack::expanded(&t, 7), Some(s.clone()));
        let mut popped = Vec::new();
        while let Some(h) = s.pop() {
            popped.push(h);
        }
        popped.reverse();
        assert_eq!(popped, full(7));
    }

    #[test]
    fn stacks_compare_by_their_headers_whatever_their_forms_and_templates() {
        let compact = |t: &Arc<Template>, seqno: u64, len: usize| {
            let mut s = HeaderStack::compact(t);
            full(seqno).into_iter().take(len).for_each(|h| s.push(h));
            assert!(s.is_compact());
            s
        };
        let (t, other) = (template(), template());
        for len in 0..=3 {
            let cut = |seqno| HeaderStack::from(full(seqno).into_iter().take(len).collect::<Vec<_>>());
            // Equal: compact of one template or of an equal one, and the full form, both ways.
            assert_eq!(compact(&t, 7, len), compact(&t, 7, len));
            assert_eq!(compact(&t, 7, len), compact(&other, 7, len));
            assert_eq!(compact(&t, 7, len), cut(7));
            assert_eq!(cut(7), compact(&t, 7, len));
            // Below the sequence number's slot, the number is not part of the headers.
            if len < 2 {
                assert_eq!(compact(&t, 7, len), compact(&t, 8, len));
                assert_eq!(compact(&t, 8, len), cut(7));
            } else {
                assert_ne!(compact(&t, 7, len), compact(&t, 8, len));
                assert_ne!(compact(&t, 8, len), cut(7));
                assert_ne!(cut(7), compact(&t, 8, len));
            }
        }
        assert_ne!(compact(&t, 7, 2), compact(&t, 7, 3));
        assert_ne!(compact(&t, 7, 2), HeaderStack::from(full(7)));
        let mut other_header = full(7);
        other_header[2] = Header::Appl(appl::Header::Data);
        assert_ne!(compact(&t, 7, 3), HeaderStack::from(other_header.clone()));
        assert_ne!(HeaderStack::from(other_header), compact(&t, 7, 3));
    }

    #[test]
    fn a_compiled_trace_skips_and_drops_predicted_headers_in_either_form() {
        let t = template();
        // Compact: the appl header is filled in without a push, the bottom one after the slot.
        let mut s = HeaderStack::compact(&t);
        s.push_template(&t, 1);
        assert!(s.is_compact());
        s.push(Header::Mnak(mnak::Header::Data { seqno: 9 }));
        s.push_template(&t, 3);
        assert!(s.is_compact());
        assert_eq!(s, full(9));
        s.truncate(2);
        assert_eq!(s.len(), 2);
        assert_eq!(s.last().as_deref(), Some(&Header::Mnak(mnak::Header::Data { seqno: 9 })));
        s.truncate(5);
        assert_eq!(s.len(), 2, "truncate never lengthens");
        // Full form: the same headers are pushed as clones.
        let mut f = HeaderStack::with_capacity(3);
        f.push_template(&t, 1);
        f.push(Header::Mnak(mnak::Header::Data { seqno: 9 }));
        f.push_template(&t, 3);
        assert!(!f.is_compact());
        assert_eq!(f, full(9));
        f.truncate(1);
        assert_eq!(f, vec![Header::Appl(appl::Header::Data)]);
    }

    #[test]
    fn an_unpredicted_push_reformats_lazily() {
        let t = template();
        let mut s = HeaderStack::compact(&t);
        s.push(Header::Appl(appl::Header::Data));
        s.push(Header::Mnak(mnak::Header::Retrans { origin: 0, seqno: 3 }));
        assert!(!s.is_compact());
        assert_eq!(s.compact_seqno(&t), None);
        assert_eq!(
            s,
            vec![Header::Appl(appl::Header::Data), Header::Mnak(mnak::Header::Retrans { origin: 0, seqno: 3 })]
        );
        // A whole message of another template (even an equal one) is not compressed as this one's.
        let other = template();
        let mut whole = HeaderStack::compact(&other);
        full(1).into_iter().for_each(|h| whole.push(h));
        assert_eq!(whole.compact_seqno(&t), None);
        // Pushing beyond the template also reformats.
        whole.push(Header::Bottom(bottom::Header::NoHdr));
        assert!(!whole.is_compact());
        assert_eq!(whole.len(), 4);
    }

    #[test]
    fn a_popped_compact_stack_grows_back_and_a_full_one_does_not() {
        let t = template();
        let whole = HeaderStack::expanded(&t, 7).unwrap();
        let mut s = whole.clone();
        s.truncate(2);
        let at_two = s.clone();
        s.pop();
        s.pop();
        assert!(s.regrow(2));
        assert_eq!(s, at_two, "the first two headers again, sequence number included");
        assert!(s.regrow(t.len()));
        assert_eq!(s, whole);
        assert!(!s.regrow(t.len() + 1), "not beyond the template");
        let mut full = HeaderStack::expanded(&t, 1 << 60).unwrap();
        full.pop();
        assert!(!full.regrow(t.len()), "popped headers of the full form are gone");
    }

    #[test]
    fn the_stack_is_as_small_as_a_vector() {
        // Messages move by value through the layered path's event queue: every byte counts.
        assert_eq!(std::mem::size_of::<HeaderStack>(), std::mem::size_of::<Vec<Header>>());
    }

    #[test]
    fn a_header_is_48_bytes() {
        // Every stack keeps its traces' templates as headers, and messages carry them: a variant
        // that grows past this grows them all (`sync`'s `FlushOk` with a third vector did, by 8
        // bytes each). Box the large variant's fields instead.
        assert_eq!(std::mem::size_of::<Header>(), 48);
    }

    #[test]
    fn a_sequence_number_beyond_56_bits_takes_the_full_form() {
        let t = template();
        let big = HeaderStack::expanded(&t, 1 << 60).unwrap();
        assert!(!big.is_compact());
        assert_eq!(big, full(1 << 60));
    }

    #[test]
    fn a_template_needs_exactly_one_sequence_number() {
        assert!(Template::new(vec![Header::Appl(appl::Header::Data)]).is_none());
        let two = [full(1), full(2)].concat();
        assert!(Template::new(two).is_none());
    }
}
