//! The Kafka 0.7 wire protocol: requests, responses, error codes and frame decoding.
//!
//! Decoders never panic and never read outside the frame they were given; each way a peer's
//! bytes can be wrong is its own [`DecodeError`] variant. Encoders produce the exact 0.7 layout,
//! so that real 0.7 clients and brokers interoperate with ours.

mod codec;
mod error;
mod error_code;
mod frame;
mod mirror;
mod request;
mod response;
mod topic;

pub use codec::Reader;
pub use error::DecodeError;
pub use error_code::{ErrorCode, READ_ONLY_REPLICA, TOPIC_AUTHORIZATION_FAILED};
pub use frame::{split_frame, FrameStatus, RequestDecoder, ResponseDecoder, SIZE_PREFIX_BYTES};
pub use mirror::{
    MirrorAck, MirrorOutcome, MirrorPositionsRequest, MirrorPositionsResponse,
    MirrorProduceResponse, MirrorSet, SourceHeld, SourceStamp, MIRROR_POSITIONS_ID,
    MIRROR_PRODUCE_ID,
};
pub use request::{
    EncodeError, FetchRequest, OffsetsRequest, ProduceRequest, Request, RequestType,
    TopicOriginsRequest, ACKED_PRODUCE_ID, CLUSTER_IDENTITY_ID, TOPIC_ORIGINS_ID,
};
pub use response::{
    encode_fetch, encode_multifetch, AckedProduceResponse, ClusterIdentityResponse, FetchResponse,
    MessageBody, MultiFetchResponse, OffsetsResponse, ProduceAck, Response, ResponseChunk,
    ResponseKind, TopicOriginsResponse, MULTIFETCH_BLOCK_HEADER_BYTES,
};
pub use topic::{TopicError, TopicName, TOPIC_NAME_BYTES_MAX};

/// Offset value for OFFSETS meaning "the latest offset".
pub const OFFSETS_LATEST: i64 = -1;
/// Offset value for OFFSETS meaning "the earliest offset".
pub const OFFSETS_EARLIEST: i64 = -2;
/// Partition value in PRODUCE meaning "the broker picks a partition".
pub const PARTITION_BROKER_PICKS: i32 = -1;
/// `max.socket.request.bytes` default: 100 MiB.
pub const REQUEST_BYTES_MAX_DEFAULT: usize = 104_857_600;
