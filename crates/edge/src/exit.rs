//! Why a device session ended, and the close code each reason owns.
//!
//! One enum instead of strings matched by spelling: the read loop says why it
//! stopped, and the close frame (or its absence) follows from that alone.
//! RFC 6455 codes: 1002 for a peer that broke the framing protocol, 1007 for
//! text that is not UTF-8, 1003 for binary, 1009 for an oversized frame.

use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Error as WsError;

/// Why a device session's read loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The socket ended without a close frame: nothing left to tell the device.
    Disconnected,
    /// The device sent a close frame: it gets one back with the same code (RFC
    /// 6455 §5.5.1; a forbidden code arrives here already rewritten to 1002).
    PeerClosed(CloseCode),
    /// The transport failed under the socket (reset, I/O error).
    ConnectionLost,
    /// The edge is shutting down.
    Shutdown,
    /// Something else latched the session first (it already chose its close).
    Latched,
    /// The device's credential expired mid-session.
    CredentialExpired,
    /// No traffic within the idle deadline: a half-open socket.
    Idle,
    /// A binary frame: the client link is JSON text only.
    Binary,
    /// A frame over the transport ceiling.
    FrameTooLarge,
    /// The device broke WebSocket framing; the kind names how.
    ProtocolViolation(&'static str),
    /// A text frame that is not UTF-8.
    InvalidUtf8,
    /// Too many malformed JSON-RPC frames within the strike window.
    StruckOut,
    /// `initialize` (or `server/discover`) or the first catalog read failed.
    HandshakeFailed,
    /// The edge is draining: the device should reconnect to another one.
    Draining,
    /// Writing to the device's socket failed: nothing more can be sent.
    WriteFailed,
    /// The device reconnected with its resume token: the session lives on,
    /// on the new socket (perhaps on another edge); this socket's part ends.
    Resumed,
}

impl Exit {
    /// Stable name for logs, metrics and `notifications/session/closed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Exit::Disconnected | Exit::PeerClosed(_) => "disconnected",
            Exit::ConnectionLost => "connection_lost",
            Exit::Shutdown => "shutdown",
            Exit::Latched => "closed",
            Exit::CredentialExpired => "credential_expired",
            Exit::Idle => "idle",
            Exit::Binary => "protocol_error",
            Exit::FrameTooLarge => "frame_too_large",
            Exit::ProtocolViolation(_) => "protocol_violation",
            Exit::InvalidUtf8 => "invalid_utf8",
            Exit::StruckOut => "protocol_error",
            Exit::HandshakeFailed => "handshake_failed",
            Exit::Draining => "drain",
            Exit::WriteFailed => "transport_error",
            Exit::Resumed => "resumed",
        }
    }

    /// Whether the session may wait for its device to resume: the transport
    /// went away (no close frame, a dead or idle socket), not a decision by
    /// either side to end it. A close frame is a decision, 1001 included: a
    /// browser tab that closes says 1001 and never comes back for its token.
    pub const fn resumable(self) -> bool {
        // A drain tells the device to go elsewhere: it resumes there, claiming the session from here.
        matches!(
            self,
            Exit::Disconnected | Exit::ConnectionLost | Exit::Idle | Exit::WriteFailed | Exit::Draining
        )
    }

    /// The close frame this exit sends, if the socket can still carry one.
    pub const fn close(self) -> Option<(CloseCode, &'static str)> {
        match self {
            Exit::Disconnected | Exit::ConnectionLost | Exit::Latched | Exit::WriteFailed => None,
            Exit::Resumed => Some((CloseCode::Normal, "session resumed on another connection")),
            Exit::PeerClosed(code) => Some((code, "")),
            Exit::Shutdown => Some((CloseCode::Away, "edge shutting down")),
            Exit::CredentialExpired => {
                Some((CloseCode::Policy, "credential expired; reconnect with a fresh one"))
            }
            Exit::Idle => Some((CloseCode::Away, "no traffic within the idle deadline")),
            Exit::Binary => Some((CloseCode::Unsupported, "binary frames are not accepted")),
            Exit::FrameTooLarge => Some((CloseCode::Size, "frame exceeds the transport ceiling")),
            Exit::ProtocolViolation(_) => Some((CloseCode::Protocol, "WebSocket protocol violation")),
            Exit::InvalidUtf8 => Some((CloseCode::Invalid, "text frame is not valid UTF-8")),
            Exit::StruckOut => Some((CloseCode::Policy, "too many malformed frames")),
            Exit::HandshakeFailed => Some((CloseCode::Policy, "initialize or first tools/list failed")),
            Exit::Draining => Some((CloseCode::Restart, "edge draining; reconnect elsewhere")),
        }
    }

    /// The exit a socket read error means: framing violations and bad UTF-8
    /// are the peer's fault and get their RFC 6455 codes; the rest is the transport.
    pub fn from_read_error(error: &WsError) -> Exit {
        match error {
            WsError::Capacity(_) => Exit::FrameTooLarge,
            WsError::Utf8(_) => Exit::InvalidUtf8,
            // A socket dropped without a close handshake is the transport, not a framing fault.
            WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => Exit::ConnectionLost,
            WsError::Protocol(p) => Exit::ProtocolViolation(violation(p)),
            _ => Exit::ConnectionLost,
        }
    }
}

/// A stable kind for each way a peer can break the framing protocol.
fn violation(p: &ProtocolError) -> &'static str {
    match p {
        ProtocolError::NonZeroReservedBits => "reserved_bits",
        ProtocolError::UnmaskedFrameFromClient => "unmasked_frame",
        ProtocolError::FragmentedControlFrame => "fragmented_control_frame",
        ProtocolError::ControlFrameTooBig => "control_frame_too_big",
        ProtocolError::UnknownControlFrameType(_) | ProtocolError::UnknownDataFrameType(_) => {
            "unknown_opcode"
        }
        ProtocolError::InvalidOpcode(_) => "unknown_opcode",
        ProtocolError::UnexpectedContinueFrame => "stray_continuation",
        ProtocolError::ExpectedFragment(_) => "expected_continuation",
        ProtocolError::InvalidCloseSequence => "invalid_close_frame",
        ProtocolError::ReceivedAfterClosing => "frame_after_close",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_exit_owns_its_close_code() {
        let codes: Vec<(Exit, Option<u16>)> = [
            Exit::Disconnected,
            Exit::PeerClosed(CloseCode::Normal),
            Exit::ConnectionLost,
            Exit::Shutdown,
            Exit::CredentialExpired,
            Exit::Idle,
            Exit::Binary,
            Exit::FrameTooLarge,
            Exit::ProtocolViolation("reserved_bits"),
            Exit::InvalidUtf8,
            Exit::StruckOut,
            Exit::HandshakeFailed,
            Exit::Draining,
            Exit::WriteFailed,
            Exit::Resumed,
        ]
        .into_iter()
        .map(|e| (e, e.close().map(|(c, _)| u16::from(c))))
        .collect();
        let want = [
            None,
            Some(1000),
            None,
            Some(1001),
            Some(1008),
            Some(1001),
            Some(1003),
            Some(1009),
            Some(1002),
            Some(1007),
            Some(1008),
            Some(1008),
            Some(1012),
            None,
            Some(1000),
        ];
        assert_eq!(codes.iter().map(|(_, c)| *c).collect::<Vec<_>>(), want);
    }

    #[test]
    fn only_a_lost_transport_or_a_drain_may_wait_for_a_resume() {
        for lost in [Exit::Disconnected, Exit::ConnectionLost, Exit::Idle, Exit::WriteFailed, Exit::Draining]
        {
            assert!(lost.resumable(), "{lost:?}");
        }
        for decided in [
            Exit::PeerClosed(CloseCode::Away),
            Exit::PeerClosed(CloseCode::Normal),
            Exit::Shutdown,
            Exit::StruckOut,
            Exit::CredentialExpired,
            Exit::Resumed,
        ] {
            assert!(!decided.resumable(), "{decided:?}");
        }
    }
}
