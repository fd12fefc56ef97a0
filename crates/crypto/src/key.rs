//! X25519 static keys and their base64 text form.
//!
//! Keys are written like WireGuard's: 32 bytes in standard base64 with padding, so 44
//! characters. Secrets are wiped from memory when dropped (this crate's copies; see the
//! README for the copies the Noise library keeps during a handshake).

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use curve25519_dalek::MontgomeryPoint;
use zeroize::{Zeroize, Zeroizing};

use crate::CryptoError;

/// Length in bytes of an X25519 key, public or secret.
pub const KEY_LEN: usize = 32;

/// Length of a key in base64 text.
const BASE64_LEN: usize = 44;

/// An X25519 public key: a server's identity, or a client's entry in the allowed list.
///
/// `Display` and `FromStr` use padded standard base64, as WireGuard does.
#[derive(Clone, Copy, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub struct PublicKey([u8; KEY_LEN]);

impl PublicKey {
    /// The key with these bytes. Any 32 bytes are accepted, as in X25519.
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// The key's bytes.
    pub const fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&STANDARD.encode(self.0))
    }
}

impl FromStr for PublicKey {
    type Err = CryptoError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        decode(s).map(|bytes| Self(*bytes))
    }
}

/// An X25519 static secret key. Its bytes are zeroed when it is dropped.
///
/// Deliberately not `Display`, and its `Debug` shows only the public key, so a secret does
/// not end up in a log by accident; [`StaticSecret::to_base64`] is the explicit way out.
#[derive(Clone)]
pub struct StaticSecret([u8; KEY_LEN]);

impl StaticSecret {
    /// The secret made of 32 random bytes, which the caller draws from the OS (the daemon)
    /// or from a seed (tests). Clamping is applied by X25519 itself at every use, so any
    /// 32 bytes are a valid secret.
    pub fn from_random_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(MontgomeryPoint::mul_base_clamped(self.0).to_bytes())
    }

    /// The secret in padded standard base64, for writing a key file.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    pub(crate) fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

impl Drop for StaticSecret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for StaticSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StaticSecret(public {})", self.public_key())
    }
}

impl FromStr for StaticSecret {
    type Err = CryptoError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        decode(s).map(|bytes| Self(*bytes))
    }
}

/// Decodes exactly 44 characters of padded standard base64 into 32 bytes. The base64
/// engine rejects non-canonical text (wrong padding, nonzero trailing bits).
fn decode(s: &str) -> Result<Zeroizing<[u8; KEY_LEN]>, CryptoError> {
    if s.len() != BASE64_LEN {
        return Err(CryptoError::BadKeyEncoding);
    }
    let decoded = Zeroizing::new(
        STANDARD
            .decode(s)
            .map_err(|_| CryptoError::BadKeyEncoding)?,
    );
    let bytes: [u8; KEY_LEN] = decoded
        .as_slice()
        .try_into()
        .map_err(|_| CryptoError::BadKeyEncoding)?;
    Ok(Zeroizing::new(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip_and_errors() {
        let secret = StaticSecret::from_random_bytes([7; KEY_LEN]);
        let public = secret.public_key();

        let text = public.to_string();
        assert_eq!(text.len(), 44, "32 bytes are 44 padded base64 characters");
        assert!(text.ends_with('='), "padded like WireGuard keys");
        assert_eq!(text.parse::<PublicKey>(), Ok(public));

        let secret_text = secret.to_base64();
        let parsed: StaticSecret = secret_text.parse().expect("own output parses");
        assert_eq!(parsed.as_bytes(), secret.as_bytes());
        assert_eq!(parsed.public_key(), public);

        let bad = [
            "",
            "AAAA",
            // 43 characters: missing padding.
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            // 44 characters, but not base64.
            "!AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            // 44 characters encoding 33 bytes is impossible; this one encodes 31 + garbage
            // padding.
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA===",
            // Nonzero trailing bits: not the canonical encoding of any 32 bytes.
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB=",
            // URL-safe alphabet.
            "-_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            // Surrounding whitespace is the caller's to trim.
            " AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        ];
        for s in bad {
            assert_eq!(
                s.parse::<PublicKey>(),
                Err(CryptoError::BadKeyEncoding),
                "{s:?}"
            );
            assert!(s.parse::<StaticSecret>().is_err(), "{s:?}");
        }
        assert_eq!(
            CryptoError::BadKeyEncoding.to_string(),
            "expected 44 base64 characters encoding 32 bytes"
        );
    }

    #[test]
    fn public_key_matches_rfc7748_vector() {
        // RFC 7748 §6.1, Alice's key pair.
        let secret = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
        let public = hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
        assert_eq!(
            StaticSecret::from_random_bytes(secret).public_key(),
            PublicKey::from_bytes(public)
        );
    }

    #[test]
    fn secret_debug_shows_only_public_key() {
        let secret = StaticSecret::from_random_bytes([9; KEY_LEN]);
        let shown = format!("{secret:?}");
        assert!(shown.contains(&secret.public_key().to_string()), "{shown}");
        assert!(!shown.contains(&secret.to_base64()), "{shown}");
    }

    fn hex(s: &str) -> [u8; KEY_LEN] {
        let mut out = [0; KEY_LEN];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("test vector is hex");
        }
        out
    }
}
