//! What the broker answers a request with, before it is written: responses held in memory, and
//! FETCH and MULTIFETCH answers whose message sets may be ranges of segment files, which the
//! connection sends without copying them through user space ([`crate::env::Env::send_file`]).

use bytes::Bytes;
use tributary_core::log::{LogFile, Served};
use tributary_core::wire::{
    encode_fetch, encode_multifetch, EncodeError, ErrorCode, FetchResponse, MultiFetchResponse,
    Response, ResponseChunk,
};

/// One FETCH answer or MULTIFETCH block: an error code and the message-set bytes served.
#[derive(Debug)]
pub struct ServedBlock<F> {
    /// The error code; on an error nothing is served.
    pub error: ErrorCode,
    /// The message-set bytes, in memory or as a file range.
    pub data: Served<F>,
}

impl<F> ServedBlock<F> {
    /// A block with an error code and nothing served.
    pub fn empty(error: ErrorCode) -> Self {
        ServedBlock {
            error,
            data: Served::Bytes(Bytes::new()),
        }
    }
}

/// A broker's answer to one request.
#[derive(Debug)]
pub enum Reply<F> {
    /// A response held whole in memory (OFFSETS, ACKED_PRODUCE).
    Response(Response),
    /// A FETCH answer.
    Fetch(ServedBlock<F>),
    /// A MULTIFETCH answer (its top-level error is always 0, as in 0.7).
    MultiFetch(Vec<ServedBlock<F>>),
}

impl<F> Reply<F> {
    /// The encoded frame as chunks to write in order: headers and message-set bodies. Refuses
    /// what does not fit 0.7's int32 sizes.
    pub fn into_chunks(self) -> Result<Vec<ResponseChunk<Served<F>>>, EncodeError> {
        match self {
            Reply::Response(r) => Ok(r
                .encode_chunks()?
                .into_iter()
                .map(ResponseChunk::Header)
                .collect()),
            Reply::Fetch(b) => encode_fetch(b.error, b.data),
            Reply::MultiFetch(blocks) => encode_multifetch(
                ErrorCode::NoError,
                blocks.into_iter().map(|b| (b.error, b.data)).collect(),
            ),
        }
    }
}

impl<F: LogFile> Reply<F> {
    /// The same answer with every file range read into memory, as a client would decode it.
    pub fn into_response(self) -> std::io::Result<Response> {
        let block = |b: ServedBlock<F>| {
            Ok::<_, std::io::Error>(FetchResponse {
                error: b.error,
                messages: b.data.into_bytes()?,
            })
        };
        Ok(match self {
            Reply::Response(r) => r,
            Reply::Fetch(b) => Response::Fetch(block(b)?),
            Reply::MultiFetch(blocks) => Response::MultiFetch(MultiFetchResponse {
                error: ErrorCode::NoError,
                blocks: blocks.into_iter().map(block).collect::<Result<_, _>>()?,
            }),
        })
    }
}
