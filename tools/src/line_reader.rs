//! Lines of standard input as 0.7.2's console tools read them (Java's
//! `BufferedReader.readLine`): a line ends at `\n`, `\r\n` or a lone `\r`; the last line needs
//! no terminator. Unlike 0.7.2, which decoded the bytes with the platform charset (replacing
//! what did not decode), a line is kept as the bytes it was: input that is not UTF-8 is sent as
//! it is, never refused or altered.
//!
//! Bounded: a line longer than the limit is not buffered; it is skipped to its end and reported
//! as [`Line::TooLong`] with its number and size, so the caller can count it as not sent.

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// One line read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// The line's bytes, without its terminator.
    Bytes(Vec<u8>),
    /// A line longer than the reader's limit, skipped.
    TooLong {
        /// Its number, from 1.
        number: u64,
        /// Its length in bytes.
        bytes: u64,
    },
}

/// Reads [`Line`]s from `inner` through its own buffer. [`LineReader::next_line`] is
/// cancel-safe: a line partly read when its future is dropped is kept and finished by the next
/// call.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: BufReader<R>,
    limit: usize,
    /// The current line's bytes so far (empty once it went past the limit).
    partial: Vec<u8>,
    /// The current line's length so far.
    length: u64,
    /// Whether the current line has begun (bytes read since the last terminator).
    begun: bool,
    /// The last line ended with `\r`: a `\n` right after it belongs to that terminator.
    skip_newline: bool,
    /// Lines returned so far.
    lines: u64,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Lines of `inner`, each at most `limit` bytes.
    pub fn new(inner: R, limit: usize) -> Self {
        LineReader {
            inner: BufReader::new(inner),
            limit,
            partial: Vec::new(),
            length: 0,
            begun: false,
            skip_newline: false,
            lines: 0,
        }
    }

    /// The next line; `None` at the end of input.
    pub async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        self.read_line(true).await
    }

    /// The next line if it is complete in what was already read into the buffer; `None`
    /// otherwise. Never reads from the input (so it ends even on an endless one): for a tool
    /// told to stop, which sends what it had read and nothing more.
    pub async fn next_buffered_line(&mut self) -> std::io::Result<Option<Line>> {
        self.read_line(false).await
    }

    /// Bytes of a line begun but not ended (no terminator, input not at its end).
    pub fn partial_bytes(&self) -> u64 {
        self.length
    }

    async fn read_line(&mut self, wait: bool) -> std::io::Result<Option<Line>> {
        loop {
            if !wait && self.inner.buffer().is_empty() {
                return Ok(None);
            }
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                return Ok(self.begun.then(|| self.take()));
            }
            if std::mem::take(&mut self.skip_newline) && buf[0] == b'\n' {
                self.inner.consume(1);
                continue;
            }
            let end = buf.iter().position(|b| *b == b'\n' || *b == b'\r');
            let taken = end.unwrap_or(buf.len());
            append(
                &mut self.partial,
                &mut self.length,
                self.limit,
                &buf[..taken],
            );
            self.begun = true;
            match end {
                Some(at) => {
                    self.skip_newline = buf[at] == b'\r';
                    self.inner.consume(at + 1);
                    return Ok(Some(self.take()));
                }
                None => self.inner.consume(taken),
            }
        }
    }

    /// Ends the current line.
    fn take(&mut self) -> Line {
        self.lines += 1;
        self.begun = false;
        let bytes = std::mem::take(&mut self.length);
        let line = std::mem::take(&mut self.partial);
        if bytes > self.limit as u64 {
            Line::TooLong {
                number: self.lines,
                bytes,
            }
        } else {
            Line::Bytes(line)
        }
    }
}

/// Adds `bytes` to the line so far (only to its length once it is past `limit`).
fn append(partial: &mut Vec<u8>, length: &mut u64, limit: usize, bytes: &[u8]) {
    *length += bytes.len() as u64;
    if *length <= limit as u64 {
        partial.extend_from_slice(bytes);
    } else {
        *partial = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `input` delivered in pieces of `piece` bytes.
    fn lines(input: &[u8], piece: usize, limit: usize) -> Vec<Line> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let chunks = Chunks(input.chunks(piece).map(<[u8]>::to_vec).collect());
        rt.block_on(async {
            let mut reader = LineReader::new(chunks, limit);
            let mut out = Vec::new();
            while let Some(line) = reader.next_line().await.expect("read") {
                out.push(line);
            }
            out
        })
    }

    /// An `AsyncRead` over queued chunks, at most one chunk per read.
    struct Chunks(std::collections::VecDeque<Vec<u8>>);

    impl tokio::io::AsyncRead for Chunks {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if let Some(mut chunk) = self.0.pop_front() {
                let n = chunk.len().min(buf.remaining());
                buf.put_slice(&chunk[..n]);
                if n < chunk.len() {
                    self.0.push_front(chunk.split_off(n));
                }
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn bytes(lines: &[&[u8]]) -> Vec<Line> {
        lines.iter().map(|l| Line::Bytes(l.to_vec())).collect()
    }

    #[test]
    fn every_java_terminator_ends_a_line_whatever_the_read_sizes() {
        let input = b"a\nb\r\nc\rd\r\r\ne\n\nlast";
        let want = bytes(&[b"a", b"b", b"c", b"d", b"", b"e", b"", b"last"]);
        for piece in [1, 2, 3, 7, 64] {
            assert_eq!(lines(input, piece, 100), want, "pieces of {piece}");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_kept_as_they_are() {
        let input = b"caf\xe9\n\xff\xfe\n";
        assert_eq!(lines(input, 3, 100), bytes(&[b"caf\xe9", b"\xff\xfe"]));
    }

    #[test]
    fn a_line_past_the_limit_is_skipped_and_reported_with_its_number_and_size() {
        let input = b"ok\n0123456789\nafter\n";
        assert_eq!(
            lines(input, 4, 5),
            [
                Line::Bytes(b"ok".to_vec()),
                Line::TooLong {
                    number: 2,
                    bytes: 10
                },
                Line::Bytes(b"after".to_vec()),
            ]
        );
        // Exactly at the limit is a line.
        assert_eq!(lines(b"12345", 2, 5), bytes(&[b"12345"]));
    }

    #[test]
    fn buffered_lines_are_taken_without_waiting_and_a_partial_one_is_left() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            // Input that never ends: what is read is "a\nb\npar".
            let (mut writer, reader) = tokio::io::duplex(64);
            tokio::io::AsyncWriteExt::write_all(&mut writer, b"a\nb\npar")
                .await
                .expect("write");
            let mut lines = LineReader::new(reader, 100);
            assert_eq!(
                lines.next_line().await.expect("read"),
                Some(Line::Bytes(b"a".to_vec()))
            );
            assert_eq!(
                lines.next_buffered_line().await.expect("read"),
                Some(Line::Bytes(b"b".to_vec()))
            );
            assert_eq!(lines.next_buffered_line().await.expect("read"), None);
            assert_eq!(lines.partial_bytes(), 3);
            // Nothing more is taken without reading; reading, the end makes it a line.
            drop(writer);
            assert_eq!(lines.next_buffered_line().await.expect("read"), None);
            assert_eq!(
                lines.next_line().await.expect("read"),
                Some(Line::Bytes(b"par".to_vec()))
            );
        });
    }

    #[test]
    fn empty_input_and_a_final_terminator_give_no_extra_line() {
        assert_eq!(lines(b"", 4, 5), []);
        assert_eq!(lines(b"x\r", 4, 5), bytes(&[b"x"]));
        assert_eq!(lines(b"x\r\n", 1, 5), bytes(&[b"x"]));
    }
}
