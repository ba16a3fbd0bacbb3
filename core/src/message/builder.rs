//! Building message sets as 0.7 producers do.

use bytes::{Bytes, BytesMut};

use super::codec::{compress, CompressionCodec};
use super::layout::{Magic, Message, HEADER_BYTES_MAGIC1, LENGTH_BYTES};

/// Collects messages and encodes them as one set, optionally compressed into a single wrapper.
#[derive(Debug, Clone, Default)]
pub struct MessageSetBuilder {
    inner: BytesMut,
    count: usize,
}

impl MessageSetBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty builder with room for `bytes` of encoded messages (see
    /// [`MessageSetBuilder::entry_bytes`]), so that pushing them never grows the buffer.
    pub fn with_capacity(bytes: usize) -> Self {
        MessageSetBuilder {
            inner: BytesMut::with_capacity(bytes),
            count: 0,
        }
    }

    /// The bytes a magic-1 uncompressed message of `payload_bytes` takes in a set.
    pub fn entry_bytes(payload_bytes: usize) -> usize {
        LENGTH_BYTES + HEADER_BYTES_MAGIC1 + payload_bytes
    }

    /// Adds a magic-1 uncompressed message with `payload`.
    pub fn push(&mut self, payload: impl Into<Bytes>) -> &mut Self {
        self.push_message(&Message::new(payload))
    }

    /// Adds a message as it is.
    pub fn push_message(&mut self, message: &Message) -> &mut Self {
        message.encode(&mut self.inner);
        self.count += 1;
        self
    }

    /// Messages added so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The set: the messages themselves for `CompressionCodec::None`, otherwise one magic-1
    /// wrapper whose payload is the compressed set. An empty builder yields an empty set with no
    /// wrapper, as 0.7 does.
    pub fn build(&self, codec: CompressionCodec) -> Bytes {
        if codec == CompressionCodec::None || self.is_empty() {
            return self.inner.clone().freeze();
        }
        self.wrapped(codec)
    }

    /// [`MessageSetBuilder::build`], taking the builder: an uncompressed set is its buffer as
    /// it is, not a copy.
    pub fn finish(self, codec: CompressionCodec) -> Bytes {
        if codec == CompressionCodec::None || self.is_empty() {
            return self.inner.freeze();
        }
        self.wrapped(codec)
    }

    /// One wrapper holding the set compressed with `codec`.
    fn wrapped(&self, codec: CompressionCodec) -> Bytes {
        let wrapper = Message::with_codec(Magic::V1, codec, compress(codec, &self.inner));
        let mut out = BytesMut::with_capacity(wrapper.entry_bytes());
        wrapper.encode(&mut out);
        out.freeze()
    }
}
