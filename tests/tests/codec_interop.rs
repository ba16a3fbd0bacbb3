//! Our gzip, snappy and CRC-32 against the Java libraries Kafka 0.7 used (java.util.zip and
//! snappy-java's stream format): each side decodes what the other encodes.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tributary_core::message::{compress, decompress, CompressionCodec, MessageSetBuilder};
use tributary_tests::java::codec_interop;

/// Inputs: empty, tiny, a real message set, compressible and random data spanning several
/// 32 KiB snappy blocks.
fn inputs() -> Vec<Vec<u8>> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut random = vec![0u8; 100_000];
    rng.fill(&mut random[..]);
    let text: Vec<u8> = b"the mirror keeps a live replica of the source. "
        .iter()
        .copied()
        .cycle()
        .take(150_000)
        .collect();
    let mut set = MessageSetBuilder::new();
    (0..50).for_each(|i| {
        set.push(format!("message {i}").into_bytes());
    });
    vec![
        Vec::new(),
        b"x".to_vec(),
        set.build(CompressionCodec::None).to_vec(),
        text,
        random,
    ]
}

#[test]
fn snappy_java_reads_our_snappy_and_we_read_its() {
    for input in inputs() {
        let ours = compress(CompressionCodec::Snappy, &input);
        assert_eq!(
            codec_interop("snappy-decompress", &ours),
            input,
            "snappy-java reading ours, {} bytes",
            input.len()
        );
        let theirs = codec_interop("snappy-compress", &input);
        assert_eq!(
            &theirs[..8],
            &[0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0],
            "snappy-java stream header"
        );
        assert_eq!(
            decompress(CompressionCodec::Snappy, &theirs, usize::MAX).unwrap(),
            input,
            "ours reading snappy-java"
        );
    }
}

#[test]
fn java_gzip_reads_our_gzip_and_we_read_its() {
    for input in inputs() {
        let ours = compress(CompressionCodec::Gzip, &input);
        assert_eq!(codec_interop("gzip-decompress", &ours), input);
        let theirs = codec_interop("gzip-compress", &input);
        assert_eq!(
            decompress(CompressionCodec::Gzip, &theirs, usize::MAX).unwrap(),
            input
        );
    }
}

#[test]
fn crc32_matches_java_util_zip() {
    for input in inputs() {
        let java: u32 = String::from_utf8(codec_interop("crc32", &input))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(crc32fast::hash(&input), java);
    }
}
