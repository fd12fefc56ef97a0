//! The 12-byte v1 header (docs/protocol.md §2.1) as far as this crate reads and writes it.
//!
//! ```text
//! byte 0      version = 1
//! byte 1      flags: 0x80 handshake, low bits = handshake kind (1 initiation, 2 response);
//!             on data datagrams 0x01 = key phase (epoch parity), set by `seal`
//! bytes 2..6  session id, u32 BE
//! bytes 6..8  link id, u16 BE
//! bytes 8..12 packet number, u32 BE (0 on handshake datagrams)
//! ```

/// Length of the v1 header that starts every datagram.
pub const HEADER_LEN: usize = 12;

pub(crate) const VERSION: u8 = 1;
/// Flags bit of handshake datagrams.
pub(crate) const FLAG_HANDSHAKE: u8 = 0x80;
/// Flags bit of data datagrams: the parity of the key epoch that sealed it.
pub(crate) const FLAG_KEY_PHASE: u8 = 0x01;
pub(crate) const KIND_INITIATION: u8 = 1;
pub(crate) const KIND_RESPONSE: u8 = 2;

/// The header fields this crate uses.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) struct Header {
    pub(crate) flags: u8,
    pub(crate) session: u32,
    pub(crate) link: u16,
    pub(crate) pn: u32,
}

impl Header {
    /// Reads the header at the start of `datagram`, checking length and version only.
    pub(crate) fn parse(datagram: &[u8]) -> Result<Self, crate::CryptoError> {
        let Some(h) = datagram.first_chunk::<HEADER_LEN>() else {
            return Err(crate::CryptoError::TooShort);
        };
        if h[0] != VERSION {
            return Err(crate::CryptoError::UnsupportedVersion);
        }
        Ok(Self {
            flags: h[1],
            session: u32::from_be_bytes([h[2], h[3], h[4], h[5]]),
            link: u16::from_be_bytes([h[6], h[7]]),
            pn: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
        })
    }

    pub(crate) fn is_handshake(self) -> bool {
        self.flags & FLAG_HANDSHAKE != 0
    }

    /// The header of a handshake datagram of `kind`: packet number 0, no other flags.
    pub(crate) fn handshake(kind: u8, session: u32, link: u16) -> Self {
        Self {
            flags: FLAG_HANDSHAKE | kind,
            session,
            link,
            pn: 0,
        }
    }

    pub(crate) fn to_bytes(self) -> [u8; HEADER_LEN] {
        let mut h = [0; HEADER_LEN];
        h[0] = VERSION;
        h[1] = self.flags;
        h[2..6].copy_from_slice(&self.session.to_be_bytes());
        h[6..8].copy_from_slice(&self.link.to_be_bytes());
        h[8..12].copy_from_slice(&self.pn.to_be_bytes());
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = Header {
            flags: 0x81,
            session: 0xdead_beef,
            link: 7,
            pn: 0x0102_0304,
        };
        let bytes = h.to_bytes();
        assert_eq!(
            bytes,
            [1, 0x81, 0xde, 0xad, 0xbe, 0xef, 0, 7, 1, 2, 3, 4],
            "field order and endianness of §2.1"
        );
        assert_eq!(Header::parse(&bytes), Ok(h));
    }

    #[test]
    fn header_short_or_wrong_version_rejected() {
        assert_eq!(Header::parse(&[1; 11]), Err(crate::CryptoError::TooShort));
        let mut bytes = [0; HEADER_LEN];
        bytes[0] = 2;
        assert_eq!(
            Header::parse(&bytes),
            Err(crate::CryptoError::UnsupportedVersion)
        );
    }
}
