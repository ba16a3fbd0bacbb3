//! Typed decoding errors: one variant per way a peer's bytes can be wrong.
//!
//! "Need more bytes" is never an error here; the frame decoder reports it as `Ok(None)`.

use super::topic::TopicError;

impl DecodeError {
    /// Whether the bytes read as a frame size are a TLS record's header (content type 20 to 23,
    /// then version 3.x): the peer speaks TLS, e.g. a client without `security.protocol=ssl`
    /// reading an SSL listener's alert.
    pub fn looks_like_tls(&self) -> bool {
        let declared = match self {
            DecodeError::FrameTooLarge { declared, .. }
            | DecodeError::FrameSizeInvalid { declared, .. } => *declared,
            _ => return false,
        };
        let [content_type, major, minor, _] = declared.to_be_bytes();
        (20..=23).contains(&content_type) && major == 3 && minor <= 4
    }
}

/// Why a frame, request or response could not be decoded. Every variant names what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The frame's declared size is zero, negative or too small to hold its header.
    #[error(
        "frame size {declared} is invalid: a frame must hold at least its {minimum}-byte header"
    )]
    FrameSizeInvalid {
        /// The size field as sent.
        declared: i32,
        /// The smallest size that could be valid.
        minimum: usize,
    },
    /// The frame's declared size exceeds the configured maximum; refused before allocating.
    #[error(
        "frame of {declared} bytes exceeds the limit of {max} bytes (max.socket.request.bytes)"
    )]
    FrameTooLarge {
        /// The size field as sent.
        declared: i32,
        /// The configured limit.
        max: usize,
    },
    /// The request type is not one of 0..=4, 100..=104.
    #[error("unknown request type {0} (0.7 knows 0 PRODUCE .. 4 OFFSETS; Tributary adds 100 ACKED_PRODUCE, 101 CLUSTER_IDENTITY, 102 TOPIC_ORIGINS, 103 MIRROR_PRODUCE and 104 MIRROR_POSITIONS)")]
    UnknownRequestType(i16),
    /// A field runs past the end of its frame or region.
    #[error("truncated {field}: needs {needed} bytes, {available} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// A length or count field is negative.
    #[error("{field} has negative length {value}")]
    NegativeLength {
        /// The field being read.
        field: &'static str,
        /// The value as sent.
        value: i64,
    },
    /// A MULTIFETCH or MULTIPRODUCE announces a count it cannot hold or that is out of range.
    #[error("{field} count {count} is invalid")]
    CountInvalid {
        /// The field being read.
        field: &'static str,
        /// The count as sent.
        count: i64,
    },
    /// Bytes remain inside the frame after its last field.
    #[error("{extra} unexpected bytes after the end of the {context}")]
    TrailingBytes {
        /// What had been fully read.
        context: &'static str,
        /// How many bytes were left over.
        extra: usize,
    },
    /// A text field that is not UTF-8.
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    /// A source partition in a mirror request names no valid cluster id or partition.
    #[error("invalid {field} {value:?} in a mirror request")]
    InvalidSource {
        /// The field being read.
        field: &'static str,
        /// The value as sent.
        value: String,
    },
    /// A topic name in a request is not valid.
    #[error("invalid topic name: {0}")]
    InvalidTopic(#[from] TopicError),
}

#[cfg(test)]
mod tls_tests {
    use super::DecodeError;

    #[test]
    fn a_tls_record_read_as_a_frame_size_is_recognised() {
        let size = |bytes: [u8; 4]| DecodeError::FrameTooLarge {
            declared: i32::from_be_bytes(bytes),
            max: 100,
        };
        // An alert (21) and a handshake (22) of TLS 1.2's record version 3.3.
        assert!(size([0x15, 0x03, 0x03, 0x00]).looks_like_tls());
        assert!(size([0x16, 0x03, 0x01, 0x02]).looks_like_tls());
        // A Kafka frame that is merely too large, and another protocol's bytes.
        assert!(!size([0x10, 0x00, 0x00, 0x00]).looks_like_tls());
        assert!(!size([0x48, 0x54, 0x54, 0x50]).looks_like_tls());
        assert!(!DecodeError::UnknownRequestType(7).looks_like_tls());
    }
}
