//! Message-set iteration and validation: offsets, partial tails, corruption, compression.

mod common;

use bytes::{Bytes, BytesMut};
use tributary_core::message::{
    compress, decompress, snappy_java, validate_set, CompressionCodec, DecompressError, DeepIter,
    Magic, Message, MessageError, MessageSetBuilder, SetEnd, ShallowIter, ValidationLimits,
};

fn set_of(payloads: &[&str]) -> Bytes {
    let mut b = MessageSetBuilder::new();
    payloads.iter().for_each(|p| {
        b.push(Bytes::copy_from_slice(p.as_bytes()));
    });
    b.build(CompressionCodec::None)
}

fn deep(set: &Bytes, base: i64) -> Vec<(i64, i64, String)> {
    DeepIter::new(set.clone(), base, 1 << 20)
        .map(|e| {
            let e = e.unwrap();
            (
                e.offset,
                e.next_offset,
                String::from_utf8(e.message.payload.to_vec()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn shallow_offsets_advance_by_four_plus_length() {
    let set = set_of(&["a", "bb", "ccc"]);
    let entries: Vec<_> = ShallowIter::new(&set, 1000).map(|e| e.unwrap()).collect();
    // magic-1 entry = 4 + 6 + payload.
    let offsets: Vec<_> = entries.iter().map(|e| (e.offset, e.next_offset)).collect();
    assert_eq!(offsets, vec![(1000, 1011), (1011, 1023), (1023, 1036)]);
}

#[test]
fn iteration_stops_cleanly_at_a_partial_trailing_message() {
    let set = set_of(&["first", "second"]);
    let cut = set.slice(..set.len() - 3);
    let mut it = ShallowIter::new(&cut, 0);
    assert_eq!(it.by_ref().count(), 1);
    assert_eq!(
        it.end(),
        SetEnd {
            valid_bytes: 15,
            trailing_bytes: cut.len() - 15
        }
    );
    // Fewer than four bytes of a next entry is also just a partial tail.
    let tiny = set.slice(..17);
    let mut it = ShallowIter::new(&tiny, 0);
    assert_eq!(it.by_ref().count(), 1);
    assert_eq!(it.end().trailing_bytes, 2);
    assert_eq!(deep(&cut, 0).len(), 1);
}

#[test]
fn a_first_message_larger_than_the_buffer_is_an_error() {
    let set = set_of(&["a message that will not fit"]);
    let cut = set.slice(..10);
    let first = ShallowIter::new(&cut, 77).next().unwrap();
    assert!(matches!(
        first,
        Err(MessageError::FirstMessageTooLarge { offset: 77, .. })
    ));
}

#[test]
fn corruption_is_reported_with_its_offset() {
    let set = set_of(&["one", "two", "three"]).to_vec();
    // Flip a payload byte of the second entry (starts at 13).
    let mut bad_crc = set.clone();
    bad_crc[13 + 10] ^= 0xff;
    let errors: Vec<_> = ShallowIter::new(&bad_crc, 500)
        .filter_map(Result::err)
        .collect();
    assert!(matches!(
        errors[..],
        [MessageError::CrcMismatch { offset: 513, .. }]
    ));

    let mut bad_magic = set.clone();
    bad_magic[13 + 4] = 7;
    let err = ShallowIter::new(&bad_magic, 0)
        .find_map(Result::err)
        .unwrap();
    assert_eq!(
        err,
        MessageError::UnknownMagic {
            offset: 13,
            magic: 7
        }
    );

    let mut short = set.clone();
    short[13..17].copy_from_slice(&3i32.to_be_bytes());
    let err = ShallowIter::new(&short, 0).find_map(Result::err).unwrap();
    assert!(matches!(
        err,
        MessageError::LengthTooSmall {
            offset: 13,
            length: 3,
            ..
        }
    ));

    let mut negative = set;
    negative[13..17].copy_from_slice(&(-1i32).to_be_bytes());
    let err = ShallowIter::new(&negative, 0)
        .find_map(Result::err)
        .unwrap();
    assert!(matches!(
        err,
        MessageError::LengthTooSmall {
            offset: 13,
            length: -1,
            ..
        }
    ));
}

#[test]
fn unknown_codec_bits_are_refused() {
    let mut m = Message::new(&b"x"[..]);
    m.attributes = 3;
    let mut out = BytesMut::new();
    m.encode(&mut out);
    let err = ShallowIter::new(&out, 0).next().unwrap().unwrap_err();
    assert_eq!(
        err,
        MessageError::UnknownCodec {
            offset: 0,
            codec: 3
        }
    );
}

#[test]
fn iteration_after_an_error_yields_nothing() {
    let mut set = set_of(&["one", "two"]).to_vec();
    set[4] = 9;
    let mut it = ShallowIter::new(&set, 0);
    assert!(it.next().unwrap().is_err());
    assert!(it.next().is_none());
}

#[test]
fn deep_iteration_gives_inner_messages_0_7_offsets() {
    for codec in [CompressionCodec::Gzip, CompressionCodec::Snappy] {
        let mut b = MessageSetBuilder::new();
        b.push(&b"a"[..]).push(&b"b"[..]).push(&b"c"[..]);
        let wrapper = b.build(codec);
        let plain = set_of(&["d"]);
        let mut set = BytesMut::from(&plain[..]);
        set.extend_from_slice(&wrapper);
        let set = set.freeze();
        let end = 100 + set.len() as i64;
        let w = 100 + plain.len() as i64;
        assert_eq!(
            deep(&set, 100),
            vec![
                (100, w, "d".into()),
                // Every inner message but the last resumes at the wrapper; the last past it.
                (w, w, "a".into()),
                (w, w, "b".into()),
                (w, end, "c".into()),
            ],
            "{codec}"
        );
    }
}

#[test]
fn nested_wrappers_are_opened_within_the_depth_limit() {
    let mut inner = MessageSetBuilder::new();
    inner.push(&b"x"[..]).push(&b"y"[..]);
    let inner_set = inner.build(CompressionCodec::Snappy);
    // Wrap the snappy wrapper again in gzip, as a forwarding mirror that recompresses would.
    let wrapper = Message::with_codec(
        Magic::V1,
        CompressionCodec::Gzip,
        compress(CompressionCodec::Gzip, &inner_set),
    );
    let mut set = BytesMut::new();
    wrapper.encode(&mut set);
    let set = set.freeze();
    let end = set.len() as i64;
    assert_eq!(
        deep(&set, 0),
        vec![(0, 0, "x".into()), (0, end, "y".into())]
    );

    let mut current = inner_set;
    for _ in 0..5 {
        let m = Message::with_codec(
            Magic::V1,
            CompressionCodec::Gzip,
            compress(CompressionCodec::Gzip, &current),
        );
        let mut out = BytesMut::new();
        m.encode(&mut out);
        current = out.freeze();
    }
    let err = DeepIter::new(current, 0, 1 << 20)
        .find_map(Result::err)
        .unwrap();
    assert!(matches!(err, MessageError::NestingTooDeep { .. }), "{err}");
}

#[test]
fn decompression_is_bounded() {
    let big = vec![0u8; 1 << 20];
    for codec in [CompressionCodec::Gzip, CompressionCodec::Snappy] {
        let packed = compress(codec, &big);
        assert!(packed.len() < 100_000);
        assert_eq!(
            decompress(codec, &packed, (1 << 20) - 1),
            Err(DecompressError::TooLarge),
            "{codec}"
        );
        assert_eq!(decompress(codec, &packed, 1 << 20).unwrap().len(), 1 << 20);
    }
    let mut b = MessageSetBuilder::new();
    b.push(Bytes::from(vec![0u8; 100_000]));
    let set = b.build(CompressionCodec::Gzip);
    let err = DeepIter::new(set, 0, 50_000).find_map(Result::err).unwrap();
    assert!(matches!(
        err,
        MessageError::DecompressedTooLarge {
            offset: 0,
            limit_bytes: 50_000,
            ..
        }
    ));
}

#[test]
fn snappy_java_framing_is_written_and_both_framings_are_read() {
    let data: Vec<u8> = (0..100_000u32)
        .flat_map(|i| (i % 251).to_be_bytes())
        .collect();
    let framed = snappy_java::compress(&data);
    assert_eq!(&framed[..8], &snappy_java::MAGIC);
    assert_eq!(&framed[8..16], &[0, 0, 0, 1, 0, 0, 0, 1]);
    // 400,000 input bytes in 32 KiB blocks: 13 blocks, each behind its int32 length.
    let mut rest = &framed[16..];
    let mut blocks = 0;
    while !rest.is_empty() {
        let len = i32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        rest = &rest[4 + len..];
        blocks += 1;
    }
    assert_eq!(blocks, data.len().div_ceil(snappy_java::BLOCK_INPUT_BYTES));
    assert_eq!(
        decompress(CompressionCodec::Snappy, &framed, usize::MAX).unwrap(),
        data
    );
    let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
    assert_eq!(
        decompress(CompressionCodec::Snappy, &raw, usize::MAX).unwrap(),
        data
    );
}

#[test]
fn corrupt_compressed_payloads_are_errors() {
    for codec in [CompressionCodec::Gzip, CompressionCodec::Snappy] {
        let mut packed = compress(
            codec,
            b"some data that compresses some data that compresses",
        );
        let n = packed.len();
        packed[n / 2] ^= 0x55;
        packed.truncate(n - 2);
        assert!(
            matches!(
                decompress(codec, &packed, 1 << 20),
                Err(DecompressError::Corrupt(_))
            ),
            "{codec}"
        );
    }
    let mut framed = snappy_java::compress(b"abc");
    framed[12..16].copy_from_slice(&9i32.to_be_bytes());
    assert!(matches!(
        decompress(CompressionCodec::Snappy, &framed, 1 << 20),
        Err(DecompressError::Corrupt(_))
    ));
}

#[test]
fn validation_accepts_whole_sets_and_counts_deep() {
    let mut b = MessageSetBuilder::new();
    b.push(&b"a"[..]).push(&b"b"[..]);
    let mut set = BytesMut::from(&b.build(CompressionCodec::Gzip)[..]);
    set.extend_from_slice(&set_of(&["c"]));
    let summary = validate_set(&set.freeze(), ValidationLimits::default()).unwrap();
    assert_eq!((summary.entries, summary.messages), (2, 3));
    assert_eq!(
        validate_set(&Bytes::new(), ValidationLimits::default())
            .unwrap()
            .messages,
        0
    );
}

#[test]
fn validation_refuses_partial_tails_oversize_and_inner_corruption() {
    let set = set_of(&["one", "two"]);
    let cut = set.slice(..set.len() - 1);
    assert!(matches!(
        validate_set(&cut, ValidationLimits::default()),
        Err(MessageError::PartialTail { offset: 13, .. })
    ));

    let limits = ValidationLimits {
        message_bytes_max: 2,
        ..ValidationLimits::default()
    };
    assert!(matches!(
        validate_set(&set, limits),
        Err(MessageError::MessageTooLarge {
            offset: 0,
            size: 3,
            limit: 2
        })
    ));

    // A wrapper whose inner message has a bad CRC: the outer CRC is fine, deep validation is not.
    let mut inner = set_of(&["inner"]).to_vec();
    inner[10] ^= 1;
    let wrapper = Message::with_codec(
        Magic::V1,
        CompressionCodec::Gzip,
        compress(CompressionCodec::Gzip, &inner),
    );
    let mut out = BytesMut::new();
    wrapper.encode(&mut out);
    assert!(matches!(
        validate_set(&out.freeze(), ValidationLimits::default()),
        Err(MessageError::CrcMismatch { offset: 0, .. })
    ));

    // A wrapper whose inner set ends in stray bytes.
    let mut inner = set_of(&["inner"]).to_vec();
    inner.extend_from_slice(&[0, 0]);
    let wrapper = Message::with_codec(
        Magic::V1,
        CompressionCodec::Snappy,
        compress(CompressionCodec::Snappy, &inner),
    );
    let mut out = BytesMut::new();
    wrapper.encode(&mut out);
    assert_eq!(
        validate_set(&out.freeze(), ValidationLimits::default()),
        Err(MessageError::InnerSetTruncated {
            offset: 0,
            trailing: 2
        })
    );
}

#[test]
fn prechecked_iteration_skips_only_the_top_level_crc() {
    // A plain message and a gzip wrapper: the same entries either way.
    let mut b = MessageSetBuilder::new();
    b.push(&b"a"[..]).push(&b"b"[..]);
    let wrapper = b.build(CompressionCodec::Gzip);
    let mut set = BytesMut::from(&set_of(&["d"])[..]);
    set.extend_from_slice(&wrapper);
    let set = set.freeze();
    let prechecked: Vec<_> = DeepIter::prechecked(set.clone(), 7, 1 << 20)
        .map(Result::unwrap)
        .collect();
    let checked: Vec<_> = DeepIter::new(set.clone(), 7, 1 << 20)
        .map(Result::unwrap)
        .collect();
    assert_eq!(prechecked, checked);
    let shallow_offsets =
        |iter: ShallowIter<'_>| -> Vec<i64> { iter.map(|e| e.unwrap().next_offset).collect() };
    assert_eq!(
        shallow_offsets(ShallowIter::prechecked(&set, 7)),
        shallow_offsets(ShallowIter::new(&set, 7))
    );

    // A flipped payload byte at the top level: only the checking iterator sees it (the caller
    // of `prechecked` promises it checked these bytes already).
    let mut damaged = BytesMut::from(&set_of(&["hello"])[..]);
    let last = damaged.len() - 1;
    damaged[last] ^= 0xff;
    let damaged = damaged.freeze();
    assert!(matches!(
        DeepIter::new(damaged.clone(), 0, 1 << 20).next(),
        Some(Err(MessageError::CrcMismatch { .. }))
    ));
    assert!(matches!(
        DeepIter::prechecked(damaged, 0, 1 << 20).next(),
        Some(Ok(_))
    ));

    // Inside a wrapper nothing was checked before: a bad inner CRC is still found.
    let mut inner = BytesMut::from(&set_of(&["x", "y"])[..]);
    let last = inner.len() - 1;
    inner[last] ^= 0xff;
    let outer = Message::with_codec(
        Magic::V1,
        CompressionCodec::Gzip,
        compress(CompressionCodec::Gzip, &inner),
    );
    let mut wrapped = BytesMut::new();
    outer.encode(&mut wrapped);
    let err = DeepIter::prechecked(wrapped.freeze(), 0, 1 << 20)
        .find_map(Result::err)
        .unwrap();
    assert!(matches!(err, MessageError::CrcMismatch { .. }), "{err}");

    // Lengths are still bounded: a first entry longer than the buffer is an error.
    let mut short = BytesMut::from(&set_of(&["z"])[..]);
    short[3] = 200;
    assert!(matches!(
        ShallowIter::prechecked(&short, 0).next(),
        Some(Err(MessageError::FirstMessageTooLarge { .. }))
    ));
}

/// A wrapper with a corrupt message inside yields none of its messages, the valid ones before
/// the corrupt one included: a wrapper is one unit, as a replica (which copies wrappers whole)
/// copies none of it. What comes before the wrapper is still yielded.
#[test]
fn a_wrapper_with_a_corrupt_message_inside_yields_none_of_its_messages() {
    let mut inner = BytesMut::from(&set_of(&["good", "also good", "bad"])[..]);
    let last = inner.len() - 1;
    inner[last] ^= 0xff;
    let wrapper = Message::with_codec(
        Magic::V1,
        CompressionCodec::Gzip,
        compress(CompressionCodec::Gzip, &inner),
    );
    let mut set = BytesMut::from(&set_of(&["before"])[..]);
    let wrapper_offset = set.len() as i64;
    wrapper.encode(&mut set);
    let items: Vec<_> = DeepIter::new(set.freeze(), 0, 1 << 20).collect();
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(
        items[0].as_ref().unwrap().message.payload.as_ref(),
        b"before"
    );
    assert!(
        matches!(&items[1], Err(MessageError::CrcMismatch { offset, .. }) if *offset == wrapper_offset),
        "{:?}",
        items[1]
    );
}

/// A builder sized with `entry_bytes` holds its set without growing, and `finish` gives the
/// same bytes as `build` for every codec.
#[test]
fn a_builder_sized_by_entry_bytes_finishes_as_it_builds() {
    let payloads = ["", "a", "bb", "a longer payload of some bytes"];
    let bytes: usize = payloads
        .iter()
        .map(|p| MessageSetBuilder::entry_bytes(p.len()))
        .sum();
    for codec in [
        CompressionCodec::None,
        CompressionCodec::Gzip,
        CompressionCodec::Snappy,
    ] {
        let mut sized = MessageSetBuilder::with_capacity(bytes);
        payloads.iter().for_each(|p| {
            sized.push(Bytes::copy_from_slice(p.as_bytes()));
        });
        let built = sized.build(codec);
        if codec == CompressionCodec::None {
            assert_eq!(built.len(), bytes, "entry_bytes is what a message takes");
        }
        assert_eq!(sized.finish(codec), built);
    }
}

#[test]
fn a_message_built_with_the_crc_a_checked_read_found_is_the_message_built_from_its_payload() {
    let set = set_of(&[
        "first",
        "",
        "a third, longer than sixty-four bytes so the CRC folds ......",
    ]);
    let mut copied = MessageSetBuilder::new();
    let mut computed = MessageSetBuilder::new();
    for entry in DeepIter::new(set.clone(), 0, 1 << 20) {
        let message = entry.unwrap().message;
        let again = Message::with_checked_crc(message.payload.clone(), message.crc);
        assert_eq!(again, Message::new(message.payload.clone()));
        copied.push_message(&again);
        computed.push_message(&Message::new(message.payload));
    }
    let copied = copied.build(CompressionCodec::None);
    assert_eq!(copied, computed.build(CompressionCodec::None));
    assert_eq!(copied, set, "the copy is the source's set, byte for byte");
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "the CRC given is not the payload's")]
fn a_crc_that_is_not_the_payloads_is_caught_in_debug_builds() {
    let payload = Bytes::from_static(b"payload");
    let _ = Message::with_checked_crc(payload.clone(), crc32fast::hash(&payload) ^ 1);
}
