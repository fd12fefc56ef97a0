//! Wire format v1: zero-copy parsing and caller-buffer emission of latebind datagrams.
//!
//! The normative description is `docs/protocol.md`; section anchors such as `§3.2` below
//! refer to it. All integers are big-endian.
//!
//! # Layout
//!
//! A datagram is a 12-byte header followed by one or more frames (§2):
//!
//! | offset | size | field                                             |
//! |-------:|-----:|---------------------------------------------------|
//! | 0      | 1    | version (= [`VERSION`])                           |
//! | 1      | 1    | flags (sent as 0, ignored on receipt)             |
//! | 2      | 4    | session id                                        |
//! | 6      | 2    | link id (the link this datagram travels on)       |
//! | 8      | 4    | packet number, low 32 bits (per link, per direction) |
//! | 12     | ...  | frames                                            |
//!
//! Each frame starts with its type byte (§3):
//!
//! | type | frame       | body after the type byte                                          | ack-eliciting |
//! |-----:|-------------|-------------------------------------------------------------------|:---:|
//! | 0x00 | PADDING     | the rest of the datagram, any bytes; ends the frame list           | no  |
//! | 0x01 | PING        | none                                                              | yes |
//! | 0x02 | ACK         | link u16, largest u64, ack_delay_us u32, first_range u32, range_count u8, range_count x (gap u32, len u32) | no |
//! | 0x03 | LOSS_REPORT | count u8, count x (link u16, received u64, lost u64)               | no  |
//! | 0x04 | DATA        | global_seq u32, flow_id u32, flow_seq u32, len u16, len bytes      | yes |
//! | 0x05 | LINK_STATUS | link u16, state u8 (0 = up, 1 = down)                              | yes |
//! | 0x06 | RX_TIME     | link u16, pn u64, received_us u64                                  | no  |
//! | 0x07 | DATA_RECOVERED | as DATA; the sender re-sends the flow's packets lost on a working link | yes |
//! | 0x08 | LINK_MTU    | link u16, max_datagram u16                                         | no  |
//! | 0x09 | DATA_TEMPLATE | global_seq u32, flow_id u32, flow_seq u32, flags u8, slot u16, generation u16, hlen u8, len u16, len bytes: the packet, whose first hlen bytes become the template of `slot` | yes |
//! | 0x0A | DATA_COMPACT | global_seq u32, flow_seq u32, slot u16 (its top 6 bits: the template's generation), then to the end of the datagram: the packet as a difference from the template | yes |
//! | 0x0B | DATA_COMPACT_RECOVERED | as DATA_COMPACT; the sender re-sends the flow's packets lost on a working link | yes |
//!
//! # Receiving
//!
//! [`parse`] splits a datagram into its [`Header`] and a [`Frames`] iterator that borrows
//! the datagram: nothing is copied or allocated. Frames are decoded lazily, one per
//! `next()`, and the iterator stops after the first [`DecodeError`]. An ACK frame's ranges
//! are all validated when the frame is decoded, so [`AckFrame::ranges`] is infallible.
//! §2.4 says a receiver discards a datagram in which any frame fails to decode;
//! [`Frames::is_ack_eliciting`] walks the whole list and doubles as that validation pass.
//!
//! # Sending
//!
//! The `emit_*` functions and [`Header::emit`] append to a caller-owned `Vec<u8>`, so a
//! driver can reuse one buffer for every datagram. The `*_len` functions and constants
//! give encoded sizes for budgeting a datagram before writing it.
//!
//! # Panics
//!
//! No function or method in this module panics, whatever the input:
//!
//! - Parsing ([`parse`], [`Header::parse`], [`frames`], the [`Frames`], [`AckRanges`] and
//!   [`LossEntries`] iterators, [`Frames::is_ack_eliciting`]) bounds-checks every read and
//!   reports short input as [`DecodeError::Truncated`]; all arithmetic on peer-supplied
//!   values is checked and reports underflow as [`DecodeError::Malformed`].
//! - Emission never panics on its arguments: out-of-contract input is dropped or rejected
//!   as each function documents. Like any `Vec::push`, it grows `out` and so aborts only if
//!   the allocator fails.
//! - [`expand`] and the `*_len` functions use checked or saturating arithmetic.

use std::iter::FusedIterator;
use std::ops::RangeInclusive;

/// The only wire format version this module speaks (§2.1).
pub const VERSION: u8 = 1;

/// Length of the datagram header in bytes (§2.1).
pub const HEADER_LEN: usize = 12;

/// Length of a DATA frame without its payload: type, global_seq, flow_id, flow_seq, len (§3.4).
pub const DATA_FRAME_HEADER_LEN: usize = 1 + 4 + 4 + 4 + 2;

/// Bytes a datagram carrying one DATA frame adds around the inner packet (27).
pub const DATA_OVERHEAD: usize = HEADER_LEN + DATA_FRAME_HEADER_LEN;

/// Largest payload one DATA frame can carry (its `len` field is a u16).
pub const MAX_DATA_PAYLOAD: usize = u16::MAX as usize;

/// Length of a DATA_TEMPLATE frame without its payload: DATA's fields plus flags, slot,
/// generation and hlen (§3.9).
pub const DATA_TEMPLATE_HEADER_LEN: usize = DATA_FRAME_HEADER_LEN + 1 + 2 + 2 + 1;

/// Length of a DATA_COMPACT frame without its body: type, global_seq, flow_seq, and the
/// slot with the generation's low bits (§3.10). The body runs to the end of the datagram.
pub const DATA_COMPACT_HEADER_LEN: usize = 1 + 4 + 4 + 2;

/// Bits of a template's generation that a DATA_COMPACT frame carries (the top bits of its
/// slot field, §3.10).
pub const COMPACT_GENERATION_BITS: u32 = 6;

/// Header templates a receiver keeps per direction: slots `0 .. MAX_TEMPLATE_SLOTS`
/// (§3.9).
pub const MAX_TEMPLATE_SLOTS: usize = 1024;

/// Longest header template, bytes (§3.9).
pub const MAX_TEMPLATE_LEN: usize = 128;

/// Bit of a DATA_TEMPLATE frame's flags: the packet is one the sender re-sends if a
/// working link loses it, as DATA_RECOVERED (§3.7).
const FLAG_RECOVERED: u8 = 0x01;
/// Bit of a DATA_TEMPLATE frame's flags: the template is an IPv4 header whose checksum
/// the receiver computes for each packet expanded from it (§3.9).
const FLAG_IPV4_CHECKSUM: u8 = 0x02;
/// The slot field's bits that hold the slot; the rest hold the generation (§3.10).
const SLOT_MASK: u16 = (1 << (16 - COMPACT_GENERATION_BITS)) - 1;

/// Length of a PING frame (§3.1).
pub const PING_FRAME_LEN: usize = 1;

/// Length of a LINK_STATUS frame (§3.5).
pub const LINK_STATUS_FRAME_LEN: usize = 1 + 2 + 1;

/// Most ranges one ACK frame can carry: the first range plus 255 more (§3.2).
pub const MAX_ACK_RANGES: usize = 1 + u8::MAX as usize;

/// Most entries one LOSS_REPORT frame can carry (§3.3).
pub const MAX_LOSS_ENTRIES: usize = u8::MAX as usize;

/// Frame type bytes (§3).
mod frame_type {
    pub(super) const PADDING: u8 = 0x00;
    pub(super) const PING: u8 = 0x01;
    pub(super) const ACK: u8 = 0x02;
    pub(super) const LOSS_REPORT: u8 = 0x03;
    pub(super) const DATA: u8 = 0x04;
    pub(super) const LINK_STATUS: u8 = 0x05;
    pub(super) const RX_TIME: u8 = 0x06;
    pub(super) const DATA_RECOVERED: u8 = 0x07;
    pub(super) const LINK_MTU: u8 = 0x08;
    pub(super) const DATA_TEMPLATE: u8 = 0x09;
    pub(super) const DATA_COMPACT: u8 = 0x0A;
    pub(super) const DATA_COMPACT_RECOVERED: u8 = 0x0B;
    pub(super) const PROBE: u8 = 0x0C;
}

/// ACK frame length without its extra ranges: type, link, largest, delay, first_range, count.
const ACK_FIXED_LEN: usize = 1 + 2 + 8 + 4 + 4 + 1;
/// Length of one (gap, len) pair of an ACK frame.
const ACK_RANGE_LEN: usize = 4 + 4;
/// Length of one LOSS_REPORT entry: link, received, lost.
const LOSS_ENTRY_LEN: usize = 2 + 8 + 8;

/// Why a datagram could not be decoded. A receiver drops such a datagram (§2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The datagram ends inside the header or inside a frame.
    #[error("truncated datagram")]
    Truncated,
    /// The version byte is not [`VERSION`].
    #[error("unsupported wire version {0}")]
    Version(u8),
    /// A frame type byte this version does not define.
    #[error("unknown frame type {0:#04x}")]
    UnknownFrame(u8),
    /// A frame is complete but its values are inconsistent (ACK range underflow, unknown
    /// link state).
    #[error("malformed frame")]
    Malformed,
}

/// Why a frame could not be encoded. `out` is left unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The DATA payload is longer than [`MAX_DATA_PAYLOAD`] bytes.
    #[error("payload longer than 65535 bytes")]
    TooLong,
    /// A template slot or length out of range (§3.9).
    #[error("template slot or length out of range")]
    Invalid,
}

/// The datagram header (§2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// Session id, the same in both directions.
    pub session: u32,
    /// The link this datagram travels on.
    pub link: u16,
    /// Low 32 bits of this link's packet number in this direction; see [`expand`].
    pub pn: u32,
}

impl Header {
    /// Decodes the header at the start of `buf` and returns it with the bytes after it.
    ///
    /// The version byte is checked first, so a datagram of another version is reported as
    /// [`DecodeError::Version`] even when it is shorter than [`HEADER_LEN`]. The flags
    /// byte is ignored.
    pub fn parse(buf: &[u8]) -> Result<(Self, &[u8]), DecodeError> {
        let mut r = Reader::new(buf);
        let version = r.u8()?;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let _flags = r.u8()?;
        let header = Self {
            session: r.u32()?,
            link: r.u16()?,
            pn: r.u32()?,
        };
        Ok((header, r.rest()))
    }

    /// Appends the [`HEADER_LEN`]-byte encoding of this header, with flags 0, to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        // Assembled on the stack and appended at once: one capacity check, not five.
        let mut b = [0u8; HEADER_LEN];
        b[0] = VERSION;
        b[2..6].copy_from_slice(&self.session.to_be_bytes());
        b[6..8].copy_from_slice(&self.link.to_be_bytes());
        b[8..12].copy_from_slice(&self.pn.to_be_bytes());
        out.extend_from_slice(&b);
    }
}

/// One decoded frame, borrowing the datagram it came from (§3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// PADDING (§3.0): the rest of the datagram is padding; no frame follows.
    Padding,
    /// PING (§3.1): asks the peer to acknowledge this datagram.
    Ping,
    /// PROBE (§3.12): a PING from a sender that has heard nothing back on this link for
    /// its suspect timeout, with what it has heard and when the probe would arrive
    /// without a queue: if the receiver told it more long enough before, the receiver's
    /// own direction of the link fails, and its acknowledgements of the link go on
    /// another link until it is answered again.
    Probe {
        /// One above the largest packet number of the link that an ACK frame reported to
        /// the probe's sender (0 when none did): what it has heard so far.
        unacked: u64,
        /// When the probe would arrive if nothing held it on the way, microseconds on the
        /// receiver's clock (as in its RX_TIME frames; 0: not known).
        due_us: u64,
    },
    /// ACK (§3.2): packet numbers received on one link.
    Ack(AckFrame<'a>),
    /// LOSS_REPORT (§3.3): cumulative per-link receive and loss counts.
    LossReport(LossReport<'a>),
    /// DATA (§3.4), DATA_RECOVERED (§3.7), DATA_TEMPLATE (§3.9) or DATA_COMPACT
    /// (§3.10): one inner IP packet.
    Data(DataFrame<'a>),
    /// LINK_STATUS (§3.5): the sender's local view of one of its links.
    LinkStatus {
        /// The link the status is about.
        link: u16,
        /// Its state as the sender sees it.
        state: LinkState,
    },
    /// RX_TIME (§3.6): when the frame's sender received one packet on one link, on its
    /// own clock (the receiver learns the packet's one-way delay up to a constant).
    RxTime {
        /// The link the packet travelled on (towards the frame's sender).
        link: u16,
        /// The packet's full packet number.
        pn: u64,
        /// Its arrival, microseconds on the frame sender's clock (any origin).
        received_us: u64,
    },
    /// LINK_MTU (§3.8): the largest datagram the frame's sender takes whole on one of its
    /// links.
    LinkMtu {
        /// The link.
        link: u16,
        /// Bytes of the datagram before the AEAD tag (as `LinkConfig::max_datagram`).
        max_datagram: u16,
    },
}

impl Frame<'_> {
    /// Whether this frame asks the peer to acknowledge its datagram: PING, DATA and
    /// LINK_STATUS do (§2.3).
    pub const fn is_ack_eliciting(&self) -> bool {
        matches!(
            self,
            Self::Ping | Self::Probe { .. } | Self::Data(_) | Self::LinkStatus { .. }
        )
    }
}

/// A link's state as carried by LINK_STATUS (§3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkState {
    /// The link is usable (wire value 0).
    Up,
    /// The link is gone, e.g. its interface went down (wire value 1).
    Down,
}

impl LinkState {
    /// The wire value of this state.
    const fn to_u8(self) -> u8 {
        match self {
            Self::Up => 0,
            Self::Down => 1,
        }
    }

    /// The state with wire value `v`, if any.
    const fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Up),
            1 => Some(Self::Down),
            _ => None,
        }
    }
}

/// A decoded ACK frame (§3.2). Its ranges were validated when it was decoded.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AckFrame<'a> {
    /// The link whose packet numbers are acknowledged (may differ from the header's link).
    pub link: u16,
    /// Largest acknowledged packet number, in full.
    pub largest: u64,
    /// Microseconds between receiving `largest` and sending this frame.
    pub ack_delay_us: u32,
    /// Packets `largest - first_range ..= largest` were received.
    pub first_range: u32,
    /// The `range_count` raw (gap, len) pairs, all known not to underflow.
    ranges: &'a [u8],
}

impl<'a> AckFrame<'a> {
    /// The acknowledged packet numbers as inclusive ranges, largest first. The first range
    /// is `largest - first_range ..= largest`; at most [`MAX_ACK_RANGES`] are yielded.
    pub fn ranges(&self) -> AckRanges<'a> {
        // Validated in `decode_ack`: first_range <= largest.
        let smallest = self.largest.saturating_sub(u64::from(self.first_range));
        AckRanges {
            first: Some(smallest..=self.largest),
            smallest,
            rest: self.ranges,
        }
    }

    /// Decodes the body of an ACK frame (after its type byte), validating every range.
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let link = r.u16()?;
        let largest = r.u64()?;
        let ack_delay_us = r.u32()?;
        let first_range = r.u32()?;
        let count = usize::from(r.u8()?);
        let ranges = r.take(count * ACK_RANGE_LEN)?;

        // §3.2: "Any arithmetic underflow is malformed." Check every range now so that
        // `ranges()` can be infallible.
        let mut smallest = largest
            .checked_sub(u64::from(first_range))
            .ok_or(DecodeError::Malformed)?;
        let mut pairs = Reader::new(ranges);
        while !pairs.is_empty() {
            let gap = pairs.u32()?;
            let len = pairs.u32()?;
            let (_, next_smallest) =
                next_range(smallest, gap, len).ok_or(DecodeError::Malformed)?;
            smallest = next_smallest;
        }
        Ok(Self {
            link,
            largest,
            ack_delay_us,
            first_range,
            ranges,
        })
    }
}

impl core::fmt::Debug for AckFrame<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AckFrame")
            .field("link", &self.link)
            .field("ack_delay_us", &self.ack_delay_us)
            .field("ranges", &DebugList(self.ranges()))
            .finish()
    }
}

/// §3.2: from the previous range's smallest packet number and a (gap, len) pair, the next
/// range's (largest, smallest), or `None` on underflow.
fn next_range(prev_smallest: u64, gap: u32, len: u32) -> Option<(u64, u64)> {
    // "next_largest = previous_smallest - gap - 2; next_smallest = next_largest - len"
    let largest = prev_smallest.checked_sub(u64::from(gap))?.checked_sub(2)?;
    let smallest = largest.checked_sub(u64::from(len))?;
    Some((largest, smallest))
}

/// Iterator over an [`AckFrame`]'s ranges, largest first. Returned by [`AckFrame::ranges`].
#[derive(Debug, Clone)]
pub struct AckRanges<'a> {
    /// The first range, until it has been yielded.
    first: Option<RangeInclusive<u64>>,
    /// Smallest packet number of the last range yielded (or of the first range).
    smallest: u64,
    /// The (gap, len) pairs not yet yielded.
    rest: &'a [u8],
}

impl Iterator for AckRanges<'_> {
    type Item = RangeInclusive<u64>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        let mut r = Reader::new(self.rest);
        let pair = r
            .u32()
            .and_then(|gap| Ok((gap, r.u32()?)))
            .ok()
            .and_then(|(gap, len)| next_range(self.smallest, gap, len));
        // Every pair was validated by `AckFrame::decode`, so `None` here only means the
        // end; clearing `rest` keeps the iterator fused either way.
        let Some((largest, smallest)) = pair else {
            self.rest = &[];
            return None;
        };
        self.rest = r.rest();
        self.smallest = smallest;
        Some(smallest..=largest)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::from(self.first.is_some()) + self.rest.len() / ACK_RANGE_LEN;
        (n, Some(n))
    }
}

impl ExactSizeIterator for AckRanges<'_> {}
impl FusedIterator for AckRanges<'_> {}

/// Appends an ACK frame for `link` acknowledging `ranges` (§3.2) and returns how many
/// ranges it encoded.
///
/// `ranges` must be in descending order, disjoint and non-adjacent (at least one missing
/// packet number between two ranges), as an ack range set keeps them. The function never
/// panics on any input:
///
/// - empty ranges (`start > end`) are skipped, and if none remains nothing is emitted;
/// - at most [`MAX_ACK_RANGES`] are encoded; the oldest (smallest) ones beyond are dropped;
/// - a range longer than 2^32 packet numbers is shortened to its top 2^32 numbers;
/// - encoding stops at the first range that overlaps or touches the previous one, or
///   whose gap does not fit in a u32; it and all older ranges are dropped.
///
/// Dropping old ranges only under-reports what was received, which is safe.
pub fn emit_ack(
    out: &mut Vec<u8>,
    link: u16,
    ack_delay_us: u32,
    ranges: &[RangeInclusive<u64>],
) -> usize {
    let mut ranges = ranges.iter().filter(|r| r.start() <= r.end());
    let Some(first) = ranges.next() else {
        return 0;
    };
    let largest = *first.end();
    let first_range = clamp_u32(largest - first.start());
    let mut smallest = largest - u64::from(first_range);

    out.push(frame_type::ACK);
    out.extend_from_slice(&link.to_be_bytes());
    out.extend_from_slice(&largest.to_be_bytes());
    out.extend_from_slice(&ack_delay_us.to_be_bytes());
    out.extend_from_slice(&first_range.to_be_bytes());
    let count_at = out.len();
    out.push(0);

    let mut count: u8 = 0;
    for range in ranges {
        if count == u8::MAX {
            break;
        }
        // next_largest = smallest - gap - 2, so gap = smallest - 2 - next_largest; the
        // subtraction fails exactly when the range overlaps or touches the previous one.
        let Some(gap) = smallest
            .checked_sub(2)
            .and_then(|s| s.checked_sub(*range.end()))
            .and_then(|gap| u32::try_from(gap).ok())
        else {
            break;
        };
        let len = clamp_u32(range.end() - range.start());
        out.extend_from_slice(&gap.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
        smallest = range.end() - u64::from(len);
        count += 1;
    }
    if let Some(slot) = out.get_mut(count_at) {
        *slot = count;
    }
    1 + usize::from(count)
}

/// Encoded length of an ACK frame carrying `ranges` ranges in total (first range
/// included), as [`emit_ack`] writes it: 0 for no range, capped at [`MAX_ACK_RANGES`].
pub const fn ack_frame_len(ranges: usize) -> usize {
    if ranges == 0 {
        return 0;
    }
    let extra = if ranges > MAX_ACK_RANGES {
        MAX_ACK_RANGES - 1
    } else {
        ranges - 1
    };
    ACK_FIXED_LEN + extra * ACK_RANGE_LEN
}

/// A decoded LOSS_REPORT frame (§3.3).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LossReport<'a> {
    /// `count` raw entries of [`LOSS_ENTRY_LEN`] bytes each.
    raw: &'a [u8],
}

impl<'a> LossReport<'a> {
    /// The report's entries, in the order they were sent.
    pub fn entries(&self) -> LossEntries<'a> {
        LossEntries { rest: self.raw }
    }

    /// Number of entries.
    pub const fn len(&self) -> usize {
        self.raw.len() / LOSS_ENTRY_LEN
    }

    /// Whether the report has no entry.
    pub const fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Decodes the body of a LOSS_REPORT frame (after its type byte).
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let count = usize::from(r.u8()?);
        let raw = r.take(count * LOSS_ENTRY_LEN)?;
        Ok(Self { raw })
    }
}

impl core::fmt::Debug for LossReport<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("LossReport")
            .field(&DebugList(self.entries()))
            .finish()
    }
}

/// One LOSS_REPORT entry: what the reporter has received and deemed lost on one link
/// since the session started (§3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LossEntry {
    /// The link the counts are about.
    pub link: u16,
    /// Cumulative number of datagrams received on the link.
    pub received: u64,
    /// Cumulative number of packet numbers deemed lost on the link (gaps).
    pub lost: u64,
}

impl LossEntry {
    /// Decodes one entry.
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            link: r.u16()?,
            received: r.u64()?,
            lost: r.u64()?,
        })
    }
}

/// Iterator over a [`LossReport`]'s entries. Returned by [`LossReport::entries`].
#[derive(Debug, Clone)]
pub struct LossEntries<'a> {
    /// Entries not yet yielded; a whole number of entries.
    rest: &'a [u8],
}

impl Iterator for LossEntries<'_> {
    type Item = LossEntry;

    fn next(&mut self) -> Option<Self::Item> {
        let mut r = Reader::new(self.rest);
        // The raw slice holds a whole number of entries, so an error only means the end.
        let Ok(entry) = LossEntry::decode(&mut r) else {
            self.rest = &[];
            return None;
        };
        self.rest = r.rest();
        Some(entry)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.rest.len() / LOSS_ENTRY_LEN;
        (n, Some(n))
    }
}

impl ExactSizeIterator for LossEntries<'_> {}
impl FusedIterator for LossEntries<'_> {}

/// Appends a LOSS_REPORT frame with the first [`MAX_LOSS_ENTRIES`] of `entries` and
/// returns how many it encoded. Emits nothing when `entries` is empty.
pub fn emit_loss_report(out: &mut Vec<u8>, entries: &[LossEntry]) -> usize {
    let entries = entries.get(..MAX_LOSS_ENTRIES).unwrap_or(entries);
    let Ok(count) = u8::try_from(entries.len()) else {
        return 0; // unreachable: at most MAX_LOSS_ENTRIES (255) entries
    };
    if count == 0 {
        return 0;
    }
    out.push(frame_type::LOSS_REPORT);
    out.push(count);
    for e in entries {
        out.extend_from_slice(&e.link.to_be_bytes());
        out.extend_from_slice(&e.received.to_be_bytes());
        out.extend_from_slice(&e.lost.to_be_bytes());
    }
    entries.len()
}

/// Encoded length of a LOSS_REPORT frame with `entries` entries, as [`emit_loss_report`]
/// writes it: 0 for none, capped at [`MAX_LOSS_ENTRIES`].
pub const fn loss_report_len(entries: usize) -> usize {
    if entries == 0 {
        return 0;
    }
    let n = if entries > MAX_LOSS_ENTRIES {
        MAX_LOSS_ENTRIES
    } else {
        entries
    };
    1 + 1 + n * LOSS_ENTRY_LEN
}

/// How a data frame carries its inner packet (§3.4, §3.9, §3.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataForm {
    /// DATA or DATA_RECOVERED: the payload is the inner packet.
    Full,
    /// DATA_TEMPLATE: the payload is the inner packet, and its first `hlen` bytes become
    /// the template of `slot`, generation `generation`.
    Template {
        /// The template slot, below [`MAX_TEMPLATE_SLOTS`].
        slot: u16,
        /// The template's generation in its slot.
        generation: u16,
        /// Bytes of the packet that make the template, 1 ..= [`MAX_TEMPLATE_LEN`].
        hlen: u8,
        /// The template is an IPv4 header whose checksum (bytes 10 and 11) is left out
        /// of each compact packet and computed again by the receiver.
        ipv4_checksum: bool,
    },
    /// DATA_COMPACT: the payload is the inner packet written as a difference from the
    /// template of `slot` (§3.10), and the frame's `flow_id` is 0: the flow is the
    /// template's. `generation` is the low [`COMPACT_GENERATION_BITS`] bits of the
    /// template's generation.
    Compact {
        /// The template slot, below [`MAX_TEMPLATE_SLOTS`].
        slot: u16,
        /// Low bits of the template's generation.
        generation: u8,
    },
}

/// A decoded DATA, DATA_RECOVERED, DATA_TEMPLATE or DATA_COMPACT frame (§3.4, §3.7,
/// §3.9, §3.10), borrowing its payload from the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataFrame<'a> {
    /// Low 32 bits of the sender's per-direction global sequence number.
    pub global_seq: u32,
    /// Opaque id of the sender's flow.
    pub flow_id: u32,
    /// Low 32 bits of the per-flow sequence number.
    pub flow_seq: u32,
    /// The inner IP packet, or with [`DataForm::Compact`] its compact body.
    pub payload: &'a [u8],
    /// Sent as DATA_RECOVERED (or with the recovered flag): the sender re-sends this
    /// flow's packets that a working link loses (§3.4), so a gap in it is worth waiting
    /// for (§5.2).
    pub recovered: bool,
    /// How `payload` carries the packet.
    pub form: DataForm,
}

impl<'a> DataFrame<'a> {
    /// Decodes the body of a DATA or DATA_RECOVERED frame (after its type byte).
    fn decode(r: &mut Reader<'a>, recovered: bool) -> Result<Self, DecodeError> {
        let global_seq = r.u32()?;
        let flow_id = r.u32()?;
        let flow_seq = r.u32()?;
        let len = usize::from(r.u16()?);
        let payload = r.take(len)?;
        Ok(Self {
            global_seq,
            flow_id,
            flow_seq,
            payload,
            recovered,
            form: DataForm::Full,
        })
    }

    /// Decodes the body of a DATA_TEMPLATE frame (after its type byte).
    fn decode_template(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let global_seq = r.u32()?;
        let flow_id = r.u32()?;
        let flow_seq = r.u32()?;
        let flags = r.u8()?;
        let slot = r.u16()?;
        let generation = r.u16()?;
        let hlen = r.u8()?;
        let len = usize::from(r.u16()?);
        let payload = r.take(len)?;
        if usize::from(slot) >= MAX_TEMPLATE_SLOTS
            || hlen == 0
            || usize::from(hlen) > MAX_TEMPLATE_LEN
            || usize::from(hlen) > len
            || flags & !(FLAG_RECOVERED | FLAG_IPV4_CHECKSUM) != 0
        {
            return Err(DecodeError::Malformed);
        }
        Ok(Self {
            global_seq,
            flow_id,
            flow_seq,
            payload,
            recovered: flags & FLAG_RECOVERED != 0,
            form: DataForm::Template {
                slot,
                generation,
                hlen,
                ipv4_checksum: flags & FLAG_IPV4_CHECKSUM != 0,
            },
        })
    }

    /// Decodes the body of a DATA_COMPACT or DATA_COMPACT_RECOVERED frame (after its type
    /// byte): it runs to the end of the datagram.
    fn decode_compact(r: &mut Reader<'a>, recovered: bool) -> Result<Self, DecodeError> {
        let global_seq = r.u32()?;
        let flow_seq = r.u32()?;
        let field = r.u16()?;
        let payload = r.rest();
        *r = Reader::new(&[]);
        Ok(Self {
            global_seq,
            flow_id: 0,
            flow_seq,
            payload,
            recovered,
            form: DataForm::Compact {
                slot: field & SLOT_MASK,
                generation: (field >> (16 - COMPACT_GENERATION_BITS)) as u8,
            },
        })
    }
}

/// Appends a DATA frame carrying `payload` (§3.4), as DATA_RECOVERED if `recovered`.
///
/// Returns [`EncodeError::TooLong`], leaving `out` unchanged, if `payload` is longer than
/// [`MAX_DATA_PAYLOAD`].
pub fn emit_data(
    out: &mut Vec<u8>,
    global_seq: u32,
    flow_id: u32,
    flow_seq: u32,
    payload: &[u8],
    recovered: bool,
) -> Result<(), EncodeError> {
    let len = u16::try_from(payload.len()).map_err(|_| EncodeError::TooLong)?;
    let mut h = [0u8; DATA_FRAME_HEADER_LEN];
    h[0] = if recovered {
        frame_type::DATA_RECOVERED
    } else {
        frame_type::DATA
    };
    h[1..5].copy_from_slice(&global_seq.to_be_bytes());
    h[5..9].copy_from_slice(&flow_id.to_be_bytes());
    h[9..13].copy_from_slice(&flow_seq.to_be_bytes());
    h[13..15].copy_from_slice(&len.to_be_bytes());
    out.reserve(h.len() + payload.len());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    Ok(())
}

/// The numbers of a data frame (§3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataNumbers {
    /// Low 32 bits of the global sequence number.
    pub global_seq: u32,
    /// The sender's flow id (not carried by DATA_COMPACT: the template's).
    pub flow_id: u32,
    /// Low 32 bits of the flow sequence number.
    pub flow_seq: u32,
    /// The packet is one the sender re-sends if a working link loses it (§3.7).
    pub recovered: bool,
}

/// Appends a DATA_TEMPLATE frame (§3.9): `payload` is the inner packet, and its first
/// `hlen` bytes become the template of `slot`, generation `generation`; with
/// `ipv4_checksum` the receiver computes the IPv4 header checksum of each packet expanded
/// from it.
///
/// Returns [`EncodeError::TooLong`], leaving `out` unchanged, if `payload` is longer than
/// [`MAX_DATA_PAYLOAD`], and [`EncodeError::Invalid`] if `slot` or `hlen` is out of range
/// (§3.9) or `hlen` is longer than `payload`.
pub fn emit_data_template(
    out: &mut Vec<u8>,
    n: DataNumbers,
    slot: u16,
    generation: u16,
    hlen: u8,
    ipv4_checksum: bool,
    payload: &[u8],
) -> Result<(), EncodeError> {
    let len = u16::try_from(payload.len()).map_err(|_| EncodeError::TooLong)?;
    if usize::from(slot) >= MAX_TEMPLATE_SLOTS
        || hlen == 0
        || usize::from(hlen) > MAX_TEMPLATE_LEN
        || usize::from(hlen) > payload.len()
    {
        return Err(EncodeError::Invalid);
    }
    out.reserve(DATA_TEMPLATE_HEADER_LEN + payload.len());
    out.push(frame_type::DATA_TEMPLATE);
    out.extend_from_slice(&n.global_seq.to_be_bytes());
    out.extend_from_slice(&n.flow_id.to_be_bytes());
    out.extend_from_slice(&n.flow_seq.to_be_bytes());
    let mut flags = 0;
    if n.recovered {
        flags |= FLAG_RECOVERED;
    }
    if ipv4_checksum {
        flags |= FLAG_IPV4_CHECKSUM;
    }
    out.push(flags);
    out.extend_from_slice(&slot.to_be_bytes());
    out.extend_from_slice(&generation.to_be_bytes());
    out.push(hlen);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// Appends a DATA_COMPACT frame (§3.10), as DATA_COMPACT_RECOVERED if `n.recovered`,
/// whose body `body` writes (appending to the buffer it is given): the inner packet as a
/// difference from the template of `slot`, whose generation's low bits are `generation`.
/// The body runs to the end of the datagram: nothing may be appended after it.
///
/// Returns [`EncodeError::Invalid`], leaving `out` unchanged, if `slot` is out of range.
pub fn emit_data_compact(
    out: &mut Vec<u8>,
    n: DataNumbers,
    slot: u16,
    generation: u8,
    body: impl FnOnce(&mut Vec<u8>),
) -> Result<(), EncodeError> {
    if usize::from(slot) >= MAX_TEMPLATE_SLOTS {
        return Err(EncodeError::Invalid);
    }
    out.push(if n.recovered {
        frame_type::DATA_COMPACT_RECOVERED
    } else {
        frame_type::DATA_COMPACT
    });
    out.extend_from_slice(&n.global_seq.to_be_bytes());
    out.extend_from_slice(&n.flow_seq.to_be_bytes());
    let generation = u16::from(generation) & ((1 << COMPACT_GENERATION_BITS) - 1);
    let field = slot | generation << (16 - COMPACT_GENERATION_BITS);
    out.extend_from_slice(&field.to_be_bytes());
    body(out);
    Ok(())
}

/// Encoded length of a DATA frame with a `payload_len`-byte payload (saturating).
pub const fn data_frame_len(payload_len: usize) -> usize {
    DATA_FRAME_HEADER_LEN.saturating_add(payload_len)
}

/// Appends a PING frame (§3.1).
pub fn emit_ping(out: &mut Vec<u8>) {
    out.push(frame_type::PING);
}

/// Length of a PROBE frame, type byte included.
pub const PROBE_FRAME_LEN: usize = 1 + 8 + 8;

/// Appends a PROBE frame (§3.12): `unacked` is one above the largest packet number of
/// the link an ACK frame reported to this end (0 when none did), `due_us` when the probe
/// would arrive without a queue, on the peer's clock (0: not known).
pub fn emit_probe(out: &mut Vec<u8>, unacked: u64, due_us: u64) {
    out.push(frame_type::PROBE);
    out.extend_from_slice(&unacked.to_be_bytes());
    out.extend_from_slice(&due_us.to_be_bytes());
}

/// Appends `n` bytes of padding (§3.0): a PADDING type byte followed by `n - 1` zero
/// bytes, or nothing when `n` is 0. Padding ends the frame list, so emit it last; to pad a
/// datagram to `target` bytes, call `emit_padding(out, target.saturating_sub(out.len()))`.
pub fn emit_padding(out: &mut Vec<u8>, n: usize) {
    // The PADDING type byte is 0x00 and padding bytes may be anything, so n zeros is
    // exactly one PADDING frame.
    out.resize(out.len().saturating_add(n), frame_type::PADDING);
}

/// Appends a LINK_STATUS frame saying the sender sees its link `link` as `state` (§3.5).
pub fn emit_link_status(out: &mut Vec<u8>, link: u16, state: LinkState) {
    out.push(frame_type::LINK_STATUS);
    out.extend_from_slice(&link.to_be_bytes());
    out.push(state.to_u8());
}

/// Length of an RX_TIME frame, type byte included.
pub const RX_TIME_FRAME_LEN: usize = 1 + 2 + 8 + 8;

/// Appends an RX_TIME frame (§3.6): packet `pn` of `link` arrived at `received_us` on this
/// end's clock.
pub fn emit_rx_time(out: &mut Vec<u8>, link: u16, pn: u64, received_us: u64) {
    out.push(frame_type::RX_TIME);
    out.extend_from_slice(&link.to_be_bytes());
    out.extend_from_slice(&pn.to_be_bytes());
    out.extend_from_slice(&received_us.to_be_bytes());
}

/// Length of a LINK_MTU frame, type byte included.
pub const LINK_MTU_FRAME_LEN: usize = 1 + 2 + 2;

/// Appends a LINK_MTU frame (§3.8): this end takes datagrams of up to `max_datagram` bytes
/// (before the AEAD tag) whole on `link`.
pub fn emit_link_mtu(out: &mut Vec<u8>, link: u16, max_datagram: u16) {
    out.push(frame_type::LINK_MTU);
    out.extend_from_slice(&link.to_be_bytes());
    out.extend_from_slice(&max_datagram.to_be_bytes());
}

/// Iterator over the frames of a datagram, borrowing it. Yields each frame in order and
/// stops after PADDING, at the end of the datagram, or after the first error.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    /// Bytes not yet decoded; emptied by PADDING and by an error.
    rest: &'a [u8],
}

impl Frames<'_> {
    /// Whether the remaining frames include an ack-eliciting one (PING, DATA,
    /// LINK_STATUS; §2.3).
    ///
    /// Decodes all remaining frames without consuming `self`, and returns the first
    /// decode error if any, so it is also the validation pass of §2.4.
    pub fn is_ack_eliciting(&self) -> Result<bool, DecodeError> {
        let mut eliciting = false;
        for frame in self.clone() {
            eliciting |= frame?.is_ack_eliciting();
        }
        Ok(eliciting)
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut r = Reader::new(self.rest);
        let ty = r.u8().ok()?;
        let frame = match ty {
            frame_type::PADDING => {
                // §3.0: "The rest of the datagram is padding. No frame follows it."
                r = Reader::new(&[]);
                Ok(Frame::Padding)
            }
            frame_type::PING => Ok(Frame::Ping),
            frame_type::PROBE => r.u64().and_then(|unacked| {
                Ok(Frame::Probe {
                    unacked,
                    due_us: r.u64()?,
                })
            }),
            frame_type::ACK => AckFrame::decode(&mut r).map(Frame::Ack),
            frame_type::LOSS_REPORT => LossReport::decode(&mut r).map(Frame::LossReport),
            frame_type::DATA => DataFrame::decode(&mut r, false).map(Frame::Data),
            frame_type::DATA_RECOVERED => DataFrame::decode(&mut r, true).map(Frame::Data),
            frame_type::DATA_TEMPLATE => DataFrame::decode_template(&mut r).map(Frame::Data),
            frame_type::DATA_COMPACT => DataFrame::decode_compact(&mut r, false).map(Frame::Data),
            frame_type::DATA_COMPACT_RECOVERED => {
                DataFrame::decode_compact(&mut r, true).map(Frame::Data)
            }
            frame_type::LINK_STATUS => decode_link_status(&mut r),
            frame_type::RX_TIME => decode_rx_time(&mut r),
            frame_type::LINK_MTU => r.u16().and_then(|link| {
                Ok(Frame::LinkMtu {
                    link,
                    max_datagram: r.u16()?,
                })
            }),
            other => Err(DecodeError::UnknownFrame(other)),
        };
        self.rest = if frame.is_ok() { r.rest() } else { &[] };
        Some(frame)
    }
}

impl FusedIterator for Frames<'_> {}

/// Decodes the body of a LINK_STATUS frame (after its type byte).
fn decode_link_status<'a>(r: &mut Reader<'a>) -> Result<Frame<'a>, DecodeError> {
    let link = r.u16()?;
    let state = LinkState::from_u8(r.u8()?).ok_or(DecodeError::Malformed)?;
    Ok(Frame::LinkStatus { link, state })
}

/// Decodes the body of an RX_TIME frame (after its type byte).
fn decode_rx_time<'a>(r: &mut Reader<'a>) -> Result<Frame<'a>, DecodeError> {
    let link = r.u16()?;
    let pn = r.u64()?;
    let received_us = r.u64()?;
    Ok(Frame::RxTime {
        link,
        pn,
        received_us,
    })
}

/// Iterates over the frames in `payload_after_header` (the bytes after a datagram's
/// header). Empty input yields no frame.
pub fn frames(payload_after_header: &[u8]) -> Frames<'_> {
    Frames {
        rest: payload_after_header,
    }
}

/// Splits a datagram into its header and its frames (§2).
///
/// Fails as [`Header::parse`] does, and with [`DecodeError::Truncated`] when no frame
/// follows the header (§2.3: a datagram carries at least one frame). Frames themselves are
/// decoded by the returned iterator.
pub fn parse(datagram: &[u8]) -> Result<(Header, Frames<'_>), DecodeError> {
    let (header, rest) = Header::parse(datagram)?;
    if rest.is_empty() {
        return Err(DecodeError::Truncated);
    }
    Ok((header, frames(rest)))
}

/// Expands a 32-bit truncated number to the u64 closest to `expected` whose low 32 bits
/// are `truncated` (§2.5; RFC 9000 appendix A.3 with a 32-bit window).
///
/// Used for packet numbers (`expected` = largest received on the link + 1), global and
/// flow sequence numbers. The result equals the original number whenever it is within
/// 2^31 - 1 of `expected`; a tie (2^31 either way) goes to the larger candidate. Near
/// either end of the u64 range the candidate that would overflow is never chosen; nothing
/// panics.
pub fn expand(truncated: u32, expected: u64) -> u64 {
    const WIN: u64 = 1 << 32;
    const HALF: u64 = WIN / 2;
    let candidate = (expected & !(WIN - 1)) | u64::from(truncated);
    // RFC 9000 A.3: if candidate <= expected - HALF, try the next window up ...
    if expected.checked_sub(HALF).is_some_and(|lo| candidate <= lo)
        && let Some(up) = candidate.checked_add(WIN)
    {
        return up;
    }
    // ... and if candidate > expected + HALF, the previous window.
    if expected.checked_add(HALF).is_some_and(|hi| candidate > hi)
        && let Some(down) = candidate.checked_sub(WIN)
    {
        return down;
    }
    candidate
}

/// Saturates a u64 to u32.
fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Formats an iterator's items as a list (for the `Debug` impls of zero-copy frames).
struct DebugList<I>(I);

impl<I> core::fmt::Debug for DebugList<I>
where
    I: Iterator + Clone,
    I::Item: core::fmt::Debug,
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.0.clone()).finish()
    }
}

/// Bounds-checked big-endian reader over a byte slice; every read that would pass the
/// end fails with [`DecodeError::Truncated`] and consumes nothing.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    const fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    const fn rest(&self) -> &'a [u8] {
        self.buf
    }

    const fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let (head, rest) = self.buf.split_at_checked(n).ok_or(DecodeError::Truncated)?;
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self
            .buf
            .split_first_chunk::<N>()
            .ok_or(DecodeError::Truncated)?;
        self.buf = rest;
        Ok(*head)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        self.array().map(u8::from_be_bytes)
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_be_bytes)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_be_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_be_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HDR: Header = Header {
        session: 0xdead_beef,
        link: 7,
        pn: 42,
    };

    fn datagram(build: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        HDR.emit(&mut out);
        build(&mut out);
        out
    }

    /// Parses `d` and returns the single frame it holds, or panics (test helper).
    fn only_frame(d: &[u8]) -> Frame<'_> {
        let (hdr, mut frames) = parse(d).expect("header");
        assert_eq!(hdr, HDR);
        let frame = frames.next().expect("one frame").expect("decodes");
        assert!(frames.next().is_none());
        frame
    }

    fn ack_ranges(frame: Frame<'_>) -> (u16, u32, Vec<RangeInclusive<u64>>) {
        let Frame::Ack(ack) = frame else {
            panic!("not an ack: {frame:?}");
        };
        (ack.link, ack.ack_delay_us, ack.ranges().collect())
    }

    #[test]
    fn header_round_trips() {
        let mut out = Vec::new();
        HDR.emit(&mut out);
        assert_eq!(out.len(), HEADER_LEN);
        assert_eq!(
            out,
            [1, 0, 0xde, 0xad, 0xbe, 0xef, 0, 7, 0, 0, 0, 42],
            "§2.1 layout"
        );
        assert_eq!(Header::parse(&out), Ok((HDR, &[][..])));
    }

    #[test]
    fn header_flags_are_ignored() {
        let mut d = datagram(emit_ping);
        d[1] = 0xff;
        assert_eq!(only_frame(&d), Frame::Ping);
    }

    #[test]
    fn ping_round_trips() {
        let d = datagram(emit_ping);
        assert_eq!(d.len(), HEADER_LEN + PING_FRAME_LEN);
        assert_eq!(only_frame(&d), Frame::Ping);
    }

    #[test]
    fn probe_round_trips_and_is_ack_eliciting() {
        let d = datagram(|out| emit_probe(out, 0x0102_0304_0506_0708, 0x1112_1314_1516_1718));
        assert_eq!(d.len(), HEADER_LEN + PROBE_FRAME_LEN);
        assert_eq!(
            &d[HEADER_LEN..],
            [
                0x0c, 1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18
            ],
            "§3.12 layout"
        );
        let f = only_frame(&d);
        assert_eq!(
            f,
            Frame::Probe {
                unacked: 0x0102_0304_0506_0708,
                due_us: 0x1112_1314_1516_1718,
            }
        );
        assert!(f.is_ack_eliciting());
        let (_, frames) = parse(&d).unwrap();
        assert_eq!(frames.is_ack_eliciting(), Ok(true));
        // Cut short: malformed, never a partial frame.
        let (_, frames) = parse(&d[..d.len() - 1]).unwrap();
        assert!(frames.is_ack_eliciting().is_err());
    }

    #[test]
    fn padding_round_trips_and_ends_frame_list() {
        let mut d = datagram(|out| emit_padding(out, 10));
        assert_eq!(d.len(), HEADER_LEN + 10);
        // Bytes after the type byte are ignored, even ones that look like frames.
        d[HEADER_LEN + 1] = frame_type::PING;
        d[HEADER_LEN + 2] = 0xee;
        assert_eq!(only_frame(&d), Frame::Padding);
    }

    #[test]
    fn emit_padding_zero_emits_nothing() {
        let mut out = vec![1, 2];
        emit_padding(&mut out, 0);
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn data_round_trips() {
        for recovered in [false, true] {
            let d = datagram(|out| emit_data(out, 1, 2, 3, b"inner packet", recovered).unwrap());
            assert_eq!(d.len(), DATA_OVERHEAD + 12);
            assert_eq!(d.len(), HEADER_LEN + data_frame_len(12));
            assert_eq!(d[HEADER_LEN], if recovered { 0x07 } else { 0x04 });
            assert_eq!(
                only_frame(&d),
                Frame::Data(DataFrame {
                    global_seq: 1,
                    flow_id: 2,
                    flow_seq: 3,
                    payload: b"inner packet",
                    recovered,
                    form: DataForm::Full,
                })
            );
        }
    }

    #[test]
    fn data_empty_and_max_payload_round_trip() {
        for len in [0, MAX_DATA_PAYLOAD] {
            let payload = vec![0xab; len];
            let d = datagram(|out| emit_data(out, 9, 8, 7, &payload, false).unwrap());
            let Frame::Data(data) = only_frame(&d) else {
                panic!("not data");
            };
            assert_eq!(data.payload, &payload[..]);
        }
    }

    #[test]
    fn data_template_and_compact_have_the_layout_of_3_9_and_3_10() {
        let n = DataNumbers {
            global_seq: 1,
            flow_id: 2,
            flow_seq: 3,
            recovered: true,
        };
        let d =
            datagram(|out| emit_data_template(out, n, 0x0102, 0x0304, 2, true, b"abc").unwrap());
        assert_eq!(d.len(), HEADER_LEN + DATA_TEMPLATE_HEADER_LEN + 3);
        assert_eq!(
            &d[HEADER_LEN..],
            [
                0x09, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0x03, 0x01, 0x02, 0x03, 0x04, 2, 0, 3,
                b'a', b'b', b'c'
            ]
        );
        assert_eq!(
            only_frame(&d),
            Frame::Data(DataFrame {
                global_seq: 1,
                flow_id: 2,
                flow_seq: 3,
                payload: b"abc",
                recovered: true,
                form: DataForm::Template {
                    slot: 0x0102,
                    generation: 0x0304,
                    hlen: 2,
                    ipv4_checksum: true,
                },
            })
        );
        for recovered in [false, true] {
            let n = DataNumbers { recovered, ..n };
            let d = datagram(|out| {
                emit_data_compact(out, n, 0x3ff, 0x7f, |o| o.extend_from_slice(b"xy")).unwrap()
            });
            assert_eq!(d.len(), HEADER_LEN + DATA_COMPACT_HEADER_LEN + 2);
            // The generation's low 6 bits above the slot's 10; no flow id, no length.
            assert_eq!(
                &d[HEADER_LEN..],
                [
                    if recovered { 0x0b } else { 0x0a },
                    0,
                    0,
                    0,
                    1,
                    0,
                    0,
                    0,
                    3,
                    0xff,
                    0xff,
                    b'x',
                    b'y'
                ]
            );
            assert_eq!(
                only_frame(&d),
                Frame::Data(DataFrame {
                    global_seq: 1,
                    flow_id: 0,
                    flow_seq: 3,
                    payload: b"xy",
                    recovered,
                    form: DataForm::Compact {
                        slot: 0x3ff,
                        generation: 0x3f
                    },
                })
            );
        }
        // The body runs to the end: whatever follows is part of it, and it may be empty.
        let d = datagram(|out| {
            emit_data_compact(out, n, 5, 1, |_| {}).unwrap();
            emit_ping(out);
        });
        let Frame::Data(f) = only_frame(&d) else {
            panic!("not data");
        };
        assert_eq!(f.payload, [0x01]);
        let d = datagram(|out| emit_data_compact(out, n, 5, 1, |_| {}).unwrap());
        let Frame::Data(f) = only_frame(&d) else {
            panic!("not data");
        };
        assert!(f.payload.is_empty());
        let (_, frames) = parse(&d[..d.len() - 1]).expect("header");
        assert_eq!(frames.is_ack_eliciting(), Err(DecodeError::Truncated));
    }

    #[test]
    fn a_template_slot_or_length_out_of_range_is_malformed() {
        let n = DataNumbers {
            global_seq: 1,
            flow_id: 2,
            flow_seq: 3,
            recovered: false,
        };
        let max_slot = MAX_TEMPLATE_SLOTS as u16;
        let mut out = Vec::new();
        for (slot, hlen, payload) in [
            (max_slot, 1, &b"abc"[..]),
            (0, 0, b"abc"),
            (0, 4, b"abc"),
            (0, MAX_TEMPLATE_LEN as u8 + 1, &[0; 200]),
        ] {
            assert_eq!(
                emit_data_template(&mut out, n, slot, 1, hlen, false, payload),
                Err(EncodeError::Invalid)
            );
            assert!(out.is_empty());
        }
        assert_eq!(
            emit_data_compact(&mut out, n, max_slot, 1, |_| {}),
            Err(EncodeError::Invalid)
        );
        assert!(out.is_empty());
        // The same on the wire: written by hand, each is dropped as malformed.
        let good = datagram(|out| emit_data_template(out, n, 3, 1, 2, false, b"abc").unwrap());
        for (at, value) in [(13, 0x04u8), (14, 0x04), (18, 0), (18, 4)] {
            let mut bad = good.clone();
            bad[HEADER_LEN + at] = value;
            let (_, frames) = parse(&bad).expect("header");
            assert_eq!(
                frames.is_ack_eliciting(),
                Err(DecodeError::Malformed),
                "{at}"
            );
        }
    }

    #[test]
    fn emit_data_too_long_leaves_buffer_unchanged() {
        let mut out = vec![1, 2, 3];
        let payload = vec![0; MAX_DATA_PAYLOAD + 1];
        assert_eq!(
            emit_data(&mut out, 0, 0, 0, &payload, false),
            Err(EncodeError::TooLong)
        );
        assert_eq!(out, [1, 2, 3]);
    }

    #[test]
    fn link_status_round_trips() {
        for state in [LinkState::Up, LinkState::Down] {
            let d = datagram(|out| emit_link_status(out, 513, state));
            assert_eq!(d.len(), HEADER_LEN + LINK_STATUS_FRAME_LEN);
            assert_eq!(only_frame(&d), Frame::LinkStatus { link: 513, state });
        }
    }

    #[test]
    fn link_status_unknown_state_is_malformed() {
        let mut d = datagram(|out| emit_link_status(out, 1, LinkState::Down));
        *d.last_mut().unwrap() = 2;
        let (_, mut frames) = parse(&d).unwrap();
        assert_eq!(frames.next(), Some(Err(DecodeError::Malformed)));
        assert_eq!(frames.next(), None);
    }

    #[test]
    fn loss_report_round_trips() {
        let entries = [
            LossEntry {
                link: 1,
                received: 1000,
                lost: 3,
            },
            LossEntry {
                link: 2,
                received: u64::MAX,
                lost: 0,
            },
        ];
        let d = datagram(|out| assert_eq!(emit_loss_report(out, &entries), 2));
        assert_eq!(d.len(), HEADER_LEN + loss_report_len(2));
        let Frame::LossReport(report) = only_frame(&d) else {
            panic!("not a loss report");
        };
        assert_eq!(report.len(), 2);
        assert!(report.entries().eq(entries));
    }

    #[test]
    fn emit_loss_report_caps_at_255_entries_and_skips_empty() {
        let entries: Vec<_> = (0..300)
            .map(|i| LossEntry {
                link: i,
                received: u64::from(i) * 10,
                lost: u64::from(i),
            })
            .collect();
        let d = datagram(|out| assert_eq!(emit_loss_report(out, &entries), 255));
        assert_eq!(d.len(), HEADER_LEN + loss_report_len(300));
        let Frame::LossReport(report) = only_frame(&d) else {
            panic!("not a loss report");
        };
        assert!(report.entries().eq(entries[..255].iter().copied()));

        let mut out = Vec::new();
        assert_eq!(emit_loss_report(&mut out, &[]), 0);
        assert!(out.is_empty());
        assert_eq!(loss_report_len(0), 0);
    }

    #[test]
    fn loss_report_with_zero_entries_parses() {
        let d = datagram(|out| out.extend_from_slice(&[frame_type::LOSS_REPORT, 0]));
        let Frame::LossReport(report) = only_frame(&d) else {
            panic!("not a loss report");
        };
        assert!(report.is_empty());
        assert_eq!(report.entries().next(), None);
    }

    #[test]
    fn ack_round_trips() {
        let ranges = [90..=100, 50..=50, 0..=48];
        let d = datagram(|out| assert_eq!(emit_ack(out, 3, 250, &ranges), 3));
        assert_eq!(d.len(), HEADER_LEN + ack_frame_len(3));
        assert_eq!(ack_ranges(only_frame(&d)), (3, 250, ranges.to_vec()));
    }

    /// The worked example of docs/protocol.md §3.2, byte for byte.
    #[test]
    fn ack_worked_example_matches_protocol_md() {
        let mut out = Vec::new();
        emit_ack(&mut out, 1, 500, &[98..=100, 92..=95, 90..=90]);
        let expected: &[u8] = &[
            0x02, // type
            0x00, 0x01, // link 1
            0, 0, 0, 0, 0, 0, 0, 100, // largest 100
            0x00, 0x00, 0x01, 0xf4, // ack_delay_us 500
            0, 0, 0, 2, // first_range 2: 98..=100
            2, // range_count
            0, 0, 0, 1, 0, 0, 0, 3, // gap 1, len 3: 92..=95
            0, 0, 0, 0, 0, 0, 0, 0, // gap 0, len 0: 90..=90
        ];
        assert_eq!(out, expected);
        assert_eq!(ack_frame_len(3), 36);
    }

    #[test]
    fn emit_ack_empty_emits_nothing() {
        let mut out = Vec::new();
        assert_eq!(emit_ack(&mut out, 1, 0, &[]), 0);
        #[allow(clippy::reversed_empty_ranges)]
        let empty = [5..=4];
        assert_eq!(emit_ack(&mut out, 1, 0, &empty), 0);
        assert!(out.is_empty());
        assert_eq!(ack_frame_len(0), 0);
    }

    #[test]
    fn emit_ack_keeps_newest_256_ranges() {
        // Ranges {1000 - 3k} for k = 0..300: every other number is missing.
        let ranges: Vec<_> = (0..300u64).map(|k| 1000 - 3 * k..=1000 - 3 * k).collect();
        let d = datagram(|out| assert_eq!(emit_ack(out, 0, 0, &ranges), 256));
        assert_eq!(d.len(), HEADER_LEN + ack_frame_len(300));
        assert_eq!(ack_ranges(only_frame(&d)).2, ranges[..256]);
    }

    #[test]
    fn emit_ack_stops_at_overlapping_or_adjacent_range() {
        for bad in [9..=9, 8..=12, 30..=40] {
            let ranges = [10..=20, bad, 0..=2];
            let d = datagram(|out| assert_eq!(emit_ack(out, 0, 0, &ranges), 1));
            assert_eq!(ack_ranges(only_frame(&d)).2, [10..=20]);
        }
    }

    #[test]
    fn emit_ack_shortens_huge_ranges_and_stops_at_huge_gaps() {
        let top = u64::MAX;
        let ranges = [0..=top];
        let d = datagram(|out| assert_eq!(emit_ack(out, 0, 0, &ranges), 1));
        let shortened = top - u64::from(u32::MAX)..=top;
        assert_eq!(ack_ranges(only_frame(&d)).2, [shortened]);

        let ranges = [top..=top, 0..=0];
        let d = datagram(|out| assert_eq!(emit_ack(out, 0, 0, &ranges), 1));
        assert_eq!(ack_ranges(only_frame(&d)).2, [top..=top]);
    }

    #[test]
    fn ack_range_underflow_is_malformed() {
        fn header(out: &mut Vec<u8>, largest: u64, first_range: u32, count: u8) {
            out.push(frame_type::ACK);
            out.extend_from_slice(&0u16.to_be_bytes());
            out.extend_from_slice(&largest.to_be_bytes());
            out.extend_from_slice(&0u32.to_be_bytes());
            out.extend_from_slice(&first_range.to_be_bytes());
            out.push(count);
        }
        fn pair(out: &mut Vec<u8>, gap: u32, len: u32) {
            out.extend_from_slice(&gap.to_be_bytes());
            out.extend_from_slice(&len.to_be_bytes());
        }
        let cases: [fn(&mut Vec<u8>); 4] = [
            // first_range > largest
            |out| header(out, 5, 6, 0),
            // smallest 5 - gap 4 - 2 < 0
            |out| {
                header(out, 10, 5, 1);
                pair(out, 4, 0);
            },
            // next_largest 3 - len 4 < 0
            |out| {
                header(out, 10, 5, 1);
                pair(out, 0, 4);
            },
            // the first pair reaches 0 (0..=3), the second one underflows
            |out| {
                header(out, 10, 5, 2);
                pair(out, 0, 3);
                pair(out, 0, 0);
            },
        ];
        for build in cases {
            let d = datagram(|out| {
                build(out);
                emit_ping(out);
            });
            let (_, mut frames) = parse(&d).unwrap();
            assert_eq!(frames.next(), Some(Err(DecodeError::Malformed)));
            assert_eq!(frames.next(), None, "stops after the first error");
        }
        // The boundary: ranges reaching exactly 0 are fine.
        let d = datagram(|out| {
            header(out, 10, 5, 1);
            pair(out, 0, 3);
        });
        assert_eq!(ack_ranges(only_frame(&d)).2, [5..=10, 0..=3]);
    }

    #[test]
    fn datagram_with_ack_loss_report_data_padding_parses_in_order() {
        let entry = LossEntry {
            link: 2,
            received: 77,
            lost: 1,
        };
        let d = datagram(|out| {
            emit_ack(out, 2, 10, &[5..=9]);
            emit_loss_report(out, &[entry]);
            emit_data(out, 100, 5, 6, b"abc", false).unwrap();
            emit_padding(out, 20);
        });
        let (hdr, frames) = parse(&d).unwrap();
        assert_eq!(hdr, HDR);
        assert_eq!(frames.is_ack_eliciting(), Ok(true));
        let frames: Vec<_> = frames.collect::<Result<_, _>>().unwrap();
        assert_eq!(frames.len(), 4);
        assert_eq!(ack_ranges(frames[0]), (2, 10, vec![5..=9]));
        let Frame::LossReport(report) = frames[1] else {
            panic!("not a loss report");
        };
        assert!(report.entries().eq([entry]));
        assert_eq!(
            frames[2],
            Frame::Data(DataFrame {
                global_seq: 100,
                flow_id: 5,
                flow_seq: 6,
                payload: b"abc",
                recovered: false,
                form: DataForm::Full,
            })
        );
        assert_eq!(frames[3], Frame::Padding);
    }

    #[test]
    fn ack_and_loss_report_alone_are_not_ack_eliciting() {
        let d = datagram(|out| {
            emit_ack(out, 0, 0, &[1..=1]);
            emit_loss_report(
                out,
                &[LossEntry {
                    link: 0,
                    received: 0,
                    lost: 0,
                }],
            );
            emit_padding(out, 3);
        });
        assert_eq!(parse(&d).unwrap().1.is_ack_eliciting(), Ok(false));
    }

    #[test]
    fn is_ack_eliciting_reports_a_later_error() {
        let d = datagram(|out| {
            emit_ping(out);
            out.push(0x77);
        });
        let frames = parse(&d).unwrap().1;
        assert_eq!(
            frames.is_ack_eliciting(),
            Err(DecodeError::UnknownFrame(0x77))
        );
    }

    #[test]
    fn version_2_is_rejected() {
        let mut d = datagram(emit_ping);
        d[0] = 2;
        assert_eq!(parse(&d).err(), Some(DecodeError::Version(2)));
        assert_eq!(Header::parse(&[2]).err(), Some(DecodeError::Version(2)));
    }

    #[test]
    fn unknown_frame_is_rejected_and_stops_iteration() {
        let d = datagram(|out| {
            emit_ping(out);
            out.push(0x0d);
            emit_ping(out);
        });
        let (_, frames) = parse(&d).unwrap();
        let got: Vec<_> = frames.collect();
        assert_eq!(got, [Ok(Frame::Ping), Err(DecodeError::UnknownFrame(0x0d))]);
    }

    #[test]
    fn link_mtu_round_trips_and_is_not_ack_eliciting() {
        let d = datagram(|out| emit_link_mtu(out, 3, 1356));
        assert_eq!(d.len(), HEADER_LEN + LINK_MTU_FRAME_LEN);
        let (_, frames) = parse(&d).unwrap();
        assert!(!frames.is_ack_eliciting().unwrap());
        assert_eq!(
            frames.collect::<Vec<_>>(),
            [Ok(Frame::LinkMtu {
                link: 3,
                max_datagram: 1356
            })]
        );
        // Cut short, it is truncated.
        let (_, frames) = parse(&d[..d.len() - 1]).unwrap();
        assert_eq!(frames.is_ack_eliciting(), Err(DecodeError::Truncated));
    }

    #[test]
    fn rx_time_round_trips_and_is_not_ack_eliciting() {
        let d = datagram(|out| emit_rx_time(out, 3, 0x0102_0304_0506_0708, 42_000_001));
        assert_eq!(d.len(), HEADER_LEN + RX_TIME_FRAME_LEN);
        let (_, mut frames) = parse(&d).unwrap();
        let f = frames.next().unwrap().unwrap();
        assert_eq!(
            f,
            Frame::RxTime {
                link: 3,
                pn: 0x0102_0304_0506_0708,
                received_us: 42_000_001
            }
        );
        assert!(!f.is_ack_eliciting());
        assert!(frames.next().is_none());
        // Cut short anywhere: truncated, never a panic.
        for n in HEADER_LEN + 1..d.len() {
            let (_, frames) = parse(&d[..n]).unwrap();
            assert_eq!(frames.last(), Some(Err(DecodeError::Truncated)));
        }
    }

    #[test]
    fn header_only_datagram_is_truncated() {
        let d = datagram(|_| {});
        assert_eq!(parse(&d).err(), Some(DecodeError::Truncated));
        assert_eq!(frames(&[]).next(), None);
    }

    #[test]
    fn every_truncation_is_truncated_or_a_prefix() {
        let d = datagram(|out| {
            emit_ping(out);
            emit_ack(out, 1, 2, &[90..=100, 80..=85]);
            emit_loss_report(
                out,
                &[LossEntry {
                    link: 1,
                    received: 5,
                    lost: 6,
                }],
            );
            emit_data(out, 1, 2, 3, &[9; 40], false).unwrap();
            emit_link_status(out, 4, LinkState::Down);
            emit_padding(out, 8);
        });
        let full: Vec<_> = parse(&d).unwrap().1.collect::<Result<_, _>>().unwrap();
        assert_eq!(full.len(), 6);
        for n in 0..d.len() {
            let cut = &d[..n];
            let frames = match parse(cut) {
                Err(e) => {
                    assert!(n <= HEADER_LEN, "header error at {n}");
                    assert_eq!(e, DecodeError::Truncated, "at {n}");
                    continue;
                }
                Ok((_, frames)) => frames,
            };
            let got: Vec<_> = frames.collect();
            let (last, ok) = got.split_last().expect("at least one frame byte");
            for (i, frame) in ok.iter().enumerate() {
                assert_eq!(frame.as_ref(), Ok(&full[i]), "at {n}");
            }
            match last {
                Ok(frame) => assert_eq!(*frame, full[got.len() - 1], "at {n}"),
                Err(e) => assert_eq!(*e, DecodeError::Truncated, "at {n}"),
            }
        }
    }

    #[test]
    fn expand_recovers_nearby_numbers() {
        assert_eq!(expand(5, 0), 5);
        assert_eq!(expand(u32::MAX, 0), u64::from(u32::MAX)); // cannot go below 0
        assert_eq!(expand(0, 1 << 32), 1 << 32);
        assert_eq!(expand(u32::MAX, 1 << 32), (1 << 32) - 1);
        assert_eq!(expand(1, (1 << 32) - 1), (1 << 32) + 1);
        // Boundary pair: 2^31 - 1 below is kept; at exactly 2^31 either way the tie goes
        // to the larger candidate (RFC 9000 A.3).
        assert_eq!(expand(0, (1 << 31) - 1), 0);
        assert_eq!(expand(0, 1 << 31), 1 << 32);
    }

    #[test]
    fn expand_at_u64_ends_does_not_overflow() {
        assert_eq!(expand(u32::MAX, u64::MAX), u64::MAX);
        assert_eq!(expand(0, u64::MAX), u64::MAX - u64::from(u32::MAX));
        assert_eq!(
            expand(0, u64::MAX - (1 << 31)),
            u64::MAX - u64::from(u32::MAX)
        );
        assert_eq!(expand(u32::MAX, 0), u64::from(u32::MAX));
        for t in [0, 1, 1 << 31, u32::MAX] {
            for e in [0, 1, 1 << 31, 1 << 32, u64::MAX - 1, u64::MAX] {
                let x = expand(t, e);
                assert_eq!(x as u32, t);
            }
        }
    }

    #[test]
    fn error_messages_are_lowercase() {
        assert_eq!(DecodeError::Truncated.to_string(), "truncated datagram");
        assert_eq!(
            DecodeError::UnknownFrame(6).to_string(),
            "unknown frame type 0x06"
        );
        assert_eq!(
            DecodeError::Version(2).to_string(),
            "unsupported wire version 2"
        );
        assert_eq!(DecodeError::Malformed.to_string(), "malformed frame");
        assert_eq!(
            EncodeError::TooLong.to_string(),
            "payload longer than 65535 bytes"
        );
    }

    #[test]
    fn debug_shows_decoded_ranges_and_entries() {
        let d = datagram(|out| {
            emit_ack(out, 1, 2, &[7..=9, 3..=4]);
        });
        let dbg = format!("{:?}", only_frame(&d));
        assert!(dbg.contains("[7..=9, 3..=4]"), "{dbg}");
    }

    // ---- property tests ----

    /// A frame as the sender means it, for emit/parse round trips.
    #[derive(Debug, Clone)]
    enum Model {
        Ping,
        Ack {
            link: u16,
            delay: u32,
            ranges: Vec<RangeInclusive<u64>>,
        },
        Loss(Vec<LossEntry>),
        Data {
            global_seq: u32,
            flow_id: u32,
            flow_seq: u32,
            payload: Vec<u8>,
            recovered: bool,
            form: DataForm,
        },
        LinkStatus {
            link: u16,
            state: LinkState,
        },
        LinkMtu {
            link: u16,
            max_datagram: u16,
        },
    }

    /// Descending, disjoint, non-adjacent ranges built from (gap, len) steps, stopping at
    /// the first step that would underflow.
    fn ranges_from(largest: u64, first: u32, steps: &[(u32, u32)]) -> Vec<RangeInclusive<u64>> {
        let Some(mut smallest) = largest.checked_sub(u64::from(first)) else {
            return vec![largest..=largest];
        };
        let mut out = vec![smallest..=largest];
        for &(gap, len) in steps {
            let Some((l, s)) = next_range(smallest, gap, len) else {
                break;
            };
            out.push(s..=l);
            smallest = s;
        }
        out
    }

    fn small_u32() -> impl Strategy<Value = u32> {
        prop_oneof![0..16u32, any::<u32>()]
    }

    fn ranges_strategy(max_steps: usize) -> impl Strategy<Value = Vec<RangeInclusive<u64>>> {
        (
            any::<u64>(),
            small_u32(),
            prop::collection::vec((small_u32(), small_u32()), 0..max_steps),
        )
            .prop_map(|(largest, first, steps)| ranges_from(largest, first, &steps))
    }

    fn entry_strategy() -> impl Strategy<Value = LossEntry> {
        (any::<u16>(), any::<u64>(), any::<u64>()).prop_map(|(link, received, lost)| LossEntry {
            link,
            received,
            lost,
        })
    }

    /// DATA and DATA_TEMPLATE (DATA_COMPACT ends the frame list: its own tests).
    fn form_strategy() -> impl Strategy<Value = DataForm> {
        prop_oneof![
            Just(DataForm::Full),
            (
                0..MAX_TEMPLATE_SLOTS as u16,
                any::<u16>(),
                1..=MAX_TEMPLATE_LEN as u8,
                any::<bool>()
            )
                .prop_map(|(slot, generation, hlen, ipv4_checksum)| {
                    DataForm::Template {
                        slot,
                        generation,
                        hlen,
                        ipv4_checksum,
                    }
                }),
        ]
    }

    fn model_strategy() -> impl Strategy<Value = Model> {
        let state = prop_oneof![Just(LinkState::Up), Just(LinkState::Down)];
        prop_oneof![
            Just(Model::Ping),
            (any::<u16>(), any::<u32>(), ranges_strategy(20)).prop_map(|(link, delay, ranges)| {
                Model::Ack {
                    link,
                    delay,
                    ranges,
                }
            }),
            prop::collection::vec(entry_strategy(), 1..8).prop_map(Model::Loss),
            (
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                prop::collection::vec(any::<u8>(), 1..64),
                any::<bool>(),
                form_strategy(),
            )
                .prop_map(
                    |(global_seq, flow_id, flow_seq, payload, recovered, form)| {
                        let form = match form {
                            // The template is part of the packet, and DATA_RECOVERED is
                            // DATA's recovered form.
                            DataForm::Template {
                                slot,
                                generation,
                                hlen,
                                ipv4_checksum,
                            } => DataForm::Template {
                                slot,
                                generation,
                                hlen: hlen.min(payload.len() as u8),
                                ipv4_checksum,
                            },
                            f => f,
                        };
                        Model::Data {
                            global_seq,
                            flow_id,
                            flow_seq,
                            payload,
                            recovered,
                            form,
                        }
                    }
                ),
            (any::<u16>(), state).prop_map(|(link, state)| Model::LinkStatus { link, state }),
            (any::<u16>(), any::<u16>())
                .prop_map(|(link, max_datagram)| Model::LinkMtu { link, max_datagram }),
        ]
    }

    fn emit_model(out: &mut Vec<u8>, m: &Model) {
        match m {
            Model::Ping => emit_ping(out),
            Model::Ack {
                link,
                delay,
                ranges,
            } => {
                emit_ack(out, *link, *delay, ranges);
            }
            Model::Loss(entries) => {
                emit_loss_report(out, entries);
            }
            Model::Data {
                global_seq,
                flow_id,
                flow_seq,
                payload,
                recovered,
                form,
            } => {
                let n = DataNumbers {
                    global_seq: *global_seq,
                    flow_id: *flow_id,
                    flow_seq: *flow_seq,
                    recovered: *recovered,
                };
                match *form {
                    DataForm::Full => {
                        emit_data(out, *global_seq, *flow_id, *flow_seq, payload, *recovered)
                    }
                    DataForm::Template {
                        slot,
                        generation,
                        hlen,
                        ipv4_checksum,
                    } => emit_data_template(out, n, slot, generation, hlen, ipv4_checksum, payload),
                    DataForm::Compact { .. } => unreachable!("not in the model's strategy"),
                }
                .unwrap()
            }
            Model::LinkStatus { link, state } => emit_link_status(out, *link, *state),
            Model::LinkMtu { link, max_datagram } => emit_link_mtu(out, *link, *max_datagram),
        }
    }

    fn matches_model(frame: &Frame<'_>, m: &Model) -> bool {
        match (frame, m) {
            (Frame::Ping, Model::Ping) => true,
            (
                Frame::Ack(ack),
                Model::Ack {
                    link,
                    delay,
                    ranges,
                },
            ) => {
                ack.link == *link
                    && ack.ack_delay_us == *delay
                    && ack.ranges().eq(ranges.iter().cloned())
            }
            (Frame::LossReport(report), Model::Loss(entries)) => {
                report.entries().eq(entries.iter().copied())
            }
            (
                Frame::Data(data),
                Model::Data {
                    global_seq,
                    flow_id,
                    flow_seq,
                    payload,
                    recovered,
                    form,
                },
            ) => {
                data.global_seq == *global_seq
                    && data.flow_id == *flow_id
                    && data.flow_seq == *flow_seq
                    && data.payload == &payload[..]
                    && data.recovered == *recovered
                    && data.form == *form
            }
            (Frame::LinkStatus { link, state }, Model::LinkStatus { link: l, state: s }) => {
                link == l && state == s
            }
            (
                Frame::LinkMtu { link, max_datagram },
                Model::LinkMtu {
                    link: l,
                    max_datagram: m,
                },
            ) => link == l && max_datagram == m,
            _ => false,
        }
    }

    /// Bytes that are often a version-1 header followed by plausible frame types, so the
    /// frame decoders are reached, and sometimes anything at all.
    fn hostile_bytes() -> impl Strategy<Value = Vec<u8>> {
        let frame_byte = prop_oneof![0u8..9, any::<u8>()];
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..64),
            (
                prop::collection::vec(any::<u8>(), HEADER_LEN - 1),
                prop::collection::vec(frame_byte, 0..200)
            )
                .prop_map(|(hdr, body)| {
                    let mut d = vec![VERSION];
                    d.extend(hdr);
                    d.extend(body);
                    d
                }),
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(d in hostile_bytes()) {
            if let Ok((_, frames)) = parse(&d) {
                let _ = frames.is_ack_eliciting();
                for frame in frames {
                    match frame {
                        Ok(Frame::Ack(ack)) => {
                            let ranges: Vec<_> = ack.ranges().collect();
                            prop_assert_eq!(ranges.len(), ack.ranges().len());
                            // Descending and disjoint.
                            for w in ranges.windows(2) {
                                prop_assert!(w[1].end() + 1 < *w[0].start());
                            }
                            let _ = format!("{ack:?}");
                        }
                        Ok(Frame::LossReport(report)) => {
                            prop_assert_eq!(report.entries().count(), report.len());
                            let _ = format!("{report:?}");
                        }
                        Ok(_) => {}
                        Err(_) => {}
                    }
                }
            }
        }

        #[test]
        fn emitted_frames_parse_back(
            session in any::<u32>(),
            link in any::<u16>(),
            pn in any::<u32>(),
            models in prop::collection::vec(model_strategy(), 1..8),
            padding in prop_oneof![Just(0usize), 1..32usize],
        ) {
            let header = Header { session, link, pn };
            let mut d = Vec::new();
            header.emit(&mut d);
            for m in &models {
                emit_model(&mut d, m);
            }
            emit_padding(&mut d, padding);

            let (got, frames) = parse(&d).unwrap();
            prop_assert_eq!(got, header);
            let eliciting = models.iter().any(|m| {
                matches!(m, Model::Ping | Model::Data { .. } | Model::LinkStatus { .. })
            });
            prop_assert_eq!(frames.is_ack_eliciting(), Ok(eliciting));
            let frames: Vec<_> = frames.collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(frames.len(), models.len() + usize::from(padding > 0));
            for (frame, m) in frames.iter().zip(&models) {
                prop_assert!(matches_model(frame, m), "{:?} != {:?}", frame, m);
            }
            if padding > 0 {
                prop_assert_eq!(frames.last(), Some(&Frame::Padding));
            }
        }

        #[test]
        fn ack_ranges_round_trip(ranges in ranges_strategy(300), delay in any::<u32>()) {
            let mut out = Vec::new();
            let n = emit_ack(&mut out, 9, delay, &ranges);
            let kept = ranges.len().min(MAX_ACK_RANGES);
            prop_assert_eq!(n, kept);
            prop_assert_eq!(out.len(), ack_frame_len(ranges.len()));
            let mut frames = frames(&out);
            let Some(Ok(Frame::Ack(ack))) = frames.next() else {
                panic!("no ack frame");
            };
            prop_assert!(frames.next().is_none());
            prop_assert_eq!(ack.link, 9);
            prop_assert_eq!(ack.ack_delay_us, delay);
            prop_assert_eq!(ack.ranges().collect::<Vec<_>>(), &ranges[..kept]);
        }

        #[test]
        fn expand_inverts_truncation_within_half_window(
            expected in prop_oneof![
                any::<u64>(),
                0..(1u64 << 33),
                (u64::MAX - (1 << 33))..=u64::MAX,
            ],
            delta in -((1i64 << 31) - 1)..(1i64 << 31),
        ) {
            if let Some(x) = expected.checked_add_signed(delta) {
                prop_assert_eq!(expand(x as u32, expected), x);
            }
        }
    }
}
