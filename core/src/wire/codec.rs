//! Bounded big-endian reading and writing of the 0.7 primitive types.
//!
//! [`Reader`] is a cursor over a byte slice that can never read past its end: every read checks
//! what remains first and reports [`DecodeError::Truncated`] naming the field it was reading.
//! Length-prefixed regions are read through [`Reader::sub`], which hands out a new reader bounded to
//! that region, so a lying inner length cannot reach bytes outside it.
#![deny(clippy::indexing_slicing)]

use bytes::BufMut;

use super::error::DecodeError;

/// A cursor over bytes that refuses to read past the end.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over all of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// How far into the buffer this reader is.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Takes exactly `len` bytes, or fails naming `field` without consuming anything.
    pub fn take(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|end| *end <= self.buf.len())
            .ok_or(DecodeError::Truncated {
                field,
                needed: len,
                available: self.remaining(),
            })?;
        let out = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated {
            field,
            needed: len,
            available: self.remaining(),
        })?;
        self.pos = end;
        Ok(out)
    }

    /// A reader over the next `len` bytes; this reader moves past them.
    pub fn sub(&mut self, len: usize, field: &'static str) -> Result<Reader<'a>, DecodeError> {
        self.take(len, field).map(Reader::new)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// Reads one signed byte.
    pub fn i8(&mut self, field: &'static str) -> Result<i8, DecodeError> {
        Ok(i8::from_be_bytes(self.array(field)?))
    }

    /// Reads a big-endian int16.
    pub fn i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    /// Reads a big-endian int32.
    pub fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    /// Reads a big-endian int64.
    pub fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// Reads a length that must not be negative (an int32 size or int16 count), as `usize`.
    pub fn len_i32(&mut self, field: &'static str) -> Result<usize, DecodeError> {
        let value = self.i32(field)?;
        usize::try_from(value).map_err(|_| DecodeError::NegativeLength {
            field,
            value: value.into(),
        })
    }

    /// Reads a 0.7 string: an int16 length and that many bytes. A negative length is refused
    /// (0.7's reader calls it null, but no request field may be null).
    pub fn string(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let value = self.i16(field)?;
        let len = usize::try_from(value).map_err(|_| DecodeError::NegativeLength {
            field,
            value: value.into(),
        })?;
        self.take(len, field)
    }

    /// Fails unless every byte has been read: trailing garbage inside a frame is an error.
    pub fn expect_end(&self, context: &'static str) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes { context, extra }),
        }
    }

    /// Everything not yet read, consuming it.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        out
    }
}

/// Writes a 0.7 string (int16 length + bytes). The caller guarantees `s.len() <= i16::MAX`
/// (topic names are at most 255 bytes).
pub(crate) fn put_string(out: &mut impl BufMut, s: &[u8]) {
    let len = i16::try_from(s.len());
    debug_assert!(len.is_ok(), "string too long for an int16 length");
    out.put_i16(len.unwrap_or(i16::MAX));
    out.put_slice(s);
}
