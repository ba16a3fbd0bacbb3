//! The 0.7 error code table (`ErrorMapping`), with unknown codes preserved.

/// An error code as carried in a FETCH/MULTIFETCH response block or a response header.
///
/// Codes outside the 0.7 table decode to [`ErrorCode::Other`] and encode back unchanged, so a
/// response from a newer peer survives a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorCode {
    /// -1: any other failure while serving a fetch.
    Unknown,
    /// 0: success.
    NoError,
    /// 1: the fetch offset is before the first segment or past the log end.
    OffsetOutOfRange,
    /// 2: a message failed its CRC (client side in 0.7).
    InvalidMessage,
    /// 3: the partition is negative or not below the topic's partition count.
    WrongPartition,
    /// 4: the first message of a fetched chunk is larger than the chunk (client side in 0.7).
    InvalidFetchSize,
    /// Any other code, kept as sent.
    Other(i16),
}

/// 29: the principal may not use the topic (Kafka 0.9+'s TOPIC_AUTHORIZATION_FAILED; a 0.7
/// client never meets it: it is only answered on the SSL listener, which 0.7 clients cannot
/// reach).
pub const TOPIC_AUTHORIZATION_FAILED: ErrorCode = ErrorCode::Other(29);

/// 100 (Tributary): an acknowledged produce to a replica topic that is not promoted: the
/// topic is copied from another cluster and read-only here until `tributary promote`.
pub const READ_ONLY_REPLICA: ErrorCode = ErrorCode::Other(100);

impl ErrorCode {
    /// The code as sent on the wire.
    pub fn code(self) -> i16 {
        match self {
            ErrorCode::Unknown => -1,
            ErrorCode::NoError => 0,
            ErrorCode::OffsetOutOfRange => 1,
            ErrorCode::InvalidMessage => 2,
            ErrorCode::WrongPartition => 3,
            ErrorCode::InvalidFetchSize => 4,
            ErrorCode::Other(code) => code,
        }
    }

    /// The code read from the wire; never fails.
    pub fn from_code(code: i16) -> Self {
        match code {
            -1 => ErrorCode::Unknown,
            0 => ErrorCode::NoError,
            1 => ErrorCode::OffsetOutOfRange,
            2 => ErrorCode::InvalidMessage,
            3 => ErrorCode::WrongPartition,
            4 => ErrorCode::InvalidFetchSize,
            other => ErrorCode::Other(other),
        }
    }

    /// 0.7's name for the code (`ErrorMapping`), for logs and tools.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Unknown => "UnknownCode",
            ErrorCode::NoError => "NoError",
            ErrorCode::OffsetOutOfRange => "OffsetOutOfRangeCode",
            ErrorCode::InvalidMessage => "InvalidMessageCode",
            ErrorCode::WrongPartition => "WrongPartitionCode",
            ErrorCode::InvalidFetchSize => "InvalidFetchSizeCode",
            ErrorCode::Other(100) => "ReadOnlyReplicaCode",
            ErrorCode::Other(_) => "unassigned code",
        }
    }
}
