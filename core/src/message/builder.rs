//! Building message sets as 0.7 producers do.

use bytes::{Bytes, BytesMut};

use super::codec::{compress, CompressionCodec};
use super::layout::{Magic, Message};

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
        let wrapper = Message::with_codec(Magic::V1, codec, compress(codec, &self.inner));
        let mut out = BytesMut::with_capacity(wrapper.entry_bytes());
        wrapper.encode(&mut out);
        out.freeze()
    }
}
