//! The one error type of this crate.

/// Why a key, a handshake datagram or a transport datagram was refused.
///
/// Every malformed or forged input ends here, never in a panic. Callers drop the datagram
/// and count the reason; none of these is fatal to a session.
#[derive(Clone, Copy, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CryptoError {
    /// The datagram ends before its header, or before its fixed-size parts.
    #[error("datagram too short")]
    TooShort,
    /// Sealing would make a datagram longer than a UDP payload can be.
    #[error("datagram too long")]
    TooLong,
    /// The version byte is not 1.
    #[error("unsupported version")]
    UnsupportedVersion,
    /// A handshake function got a datagram without the handshake flag.
    #[error("not a handshake datagram")]
    NotHandshake,
    /// An initiation was given where a response was expected, or the other way round.
    #[error("unexpected handshake message kind")]
    WrongHandshakeKind,
    /// A handshake datagram has the wrong length, unknown flag bits or a nonzero packet
    /// number field, or its payload does not parse.
    #[error("malformed handshake datagram")]
    MalformedHandshake,
    /// A transport function got a handshake datagram.
    #[error("handshake datagram where a data datagram was expected")]
    UnexpectedHandshake,
    /// Session id 0 is reserved: the client must pick a nonzero one.
    #[error("session id must be nonzero")]
    ZeroSession,
    /// The datagram belongs to another session than the key.
    #[error("session id mismatch")]
    SessionMismatch,
    /// A response whose header is not the one the initiation asked for (other session,
    /// link or flags).
    #[error("response does not match the initiation")]
    ResponseMismatch,
    /// `Initiator::handle_response` was called again after it succeeded.
    #[error("handshake already finished")]
    HandshakeFinished,
    /// The AEAD tag (or a Noise handshake tag) did not verify: forged, corrupted, or
    /// sealed under another key.
    #[error("authentication failed")]
    AuthenticationFailed,
    /// The initiation is authentic but its static key (given) is not on the responder's
    /// list.
    #[error("unknown client key {0}")]
    UnknownClientKey(crate::PublicKey),
    /// The initiation's timestamp is not greater than the greatest one accepted from the
    /// same client key.
    #[error("replayed or old initiation")]
    ReplayedInitiation,
    /// The datagram's key-phase bit names the other key epoch than this transport's.
    #[error("key phase does not match this key")]
    KeyPhaseMismatch,
    /// The key ring holds no key for the datagram's key phase.
    #[error("no key for this key phase")]
    NoKeyForPhase,
    /// The key ring has no key it may send with yet.
    #[error("no key to send with")]
    NoSendingKey,
    /// A transport whose epoch is not newer than the key ring's sending key.
    #[error("key epoch is not newer than the current one")]
    StaleEpoch,
    /// The transport has sealed `REJECT_AFTER_PACKETS` datagrams; it must be replaced.
    #[error("key exhausted: rekey required")]
    KeyExhausted,
    /// A key string that is not 44 base64 characters (standard alphabet, padded) encoding
    /// 32 bytes.
    #[error("expected 44 base64 characters encoding 32 bytes")]
    BadKeyEncoding,
    /// The Noise library refused a step that cannot fail with valid keys (a bug, not peer
    /// input).
    #[error("internal handshake error")]
    Internal,
}
