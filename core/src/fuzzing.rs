//! Entry points shared by the cargo-fuzz targets in `fuzz/` and the stable-toolchain replay test
//! in `core/tests/fuzz_replay.rs`, so CI exercises exactly what the fuzzers run.
//!
//! Each takes arbitrary bytes and checks the properties that must hold for any input, panicking
//! (which a fuzzer reports) only when one is violated.
// Panicking is how a fuzz target reports a finding.
#![allow(clippy::panic)]

use bytes::{Bytes, BytesMut};

use crate::config::{BrokerConfig, ConsumerConfig, ProducerConfig, Properties};
use crate::consumer::offsets_file;
use crate::identity::ClusterIdentity;
use crate::log::{Log, LogManager, MemFs, TopicPartition};
use crate::message::{validate_set, DeepIter, ShallowIter, ValidationLimits};
use crate::mirror::position::PositionBook;
use crate::origin::Origins;
use crate::wire::{Request, RequestDecoder, Response, ResponseDecoder, ResponseKind};

/// Largest frame the fuzz targets accept: small, so that lengths near it are reachable.
const FUZZ_FRAME_BYTES_MAX: usize = 64 * 1024;
/// Decompression bound for fuzzing: small, so bombs are caught quickly.
const FUZZ_DECOMPRESSED_BYTES_MAX: usize = 1024 * 1024;

/// Decodes a stream of request frames. Every decoded request must re-encode to exactly the
/// bytes it came from (the 0.7 encoding is canonical).
pub fn request_stream(data: &[u8]) {
    let decoder = RequestDecoder::new(FUZZ_FRAME_BYTES_MAX);
    let mut buf = BytesMut::from(data);
    let mut consumed = 0;
    while let Ok(Some(request)) = decoder.decode(&mut buf) {
        let frame_len = data.len() - buf.len() - consumed;
        let original = data.get(consumed..consumed + frame_len);
        let encoded = request.to_bytes().ok();
        assert_eq!(
            encoded.as_deref(),
            original,
            "request did not re-encode to its own bytes"
        );
        consumed += frame_len;
    }
}

/// Decodes one response frame as each kind. A decoded response must re-encode to its bytes.
pub fn response_frame(data: &[u8]) {
    let decoder = ResponseDecoder::new(FUZZ_FRAME_BYTES_MAX);
    for kind in [
        ResponseKind::Fetch,
        ResponseKind::MultiFetch,
        ResponseKind::Offsets,
        ResponseKind::AckedProduce,
        ResponseKind::ClusterIdentity,
        ResponseKind::TopicOrigins,
        ResponseKind::MirrorProduce,
        ResponseKind::MirrorPositions,
    ] {
        let mut buf = BytesMut::from(data);
        if let Ok(Some(response)) = decoder.decode(kind, &mut buf) {
            let used = data.len() - buf.len();
            assert_eq!(
                response.to_bytes().ok().as_deref(),
                data.get(..used),
                "{kind:?} re-encode"
            );
        }
        let _ = Response::decode(kind, &Bytes::copy_from_slice(data));
    }
    let _ = Request::decode(&Bytes::copy_from_slice(data));
}

/// Iterates a message set shallow and deep and validates it. Offsets must increase, valid and
/// trailing bytes must add up, and a set that validates must iterate without error.
pub fn message_set(data: &[u8]) {
    let base = 1_000;
    let mut shallow = ShallowIter::new(data, base);
    let mut last = base;
    let mut failed = false;
    for entry in shallow.by_ref() {
        match entry {
            Ok(e) => {
                assert!(
                    e.offset == last && e.next_offset > e.offset,
                    "shallow offsets out of order"
                );
                last = e.next_offset;
            }
            Err(_) => failed = true,
        }
    }
    if !failed {
        let end = shallow.end();
        assert_eq!(end.valid_bytes + end.trailing_bytes, data.len());
    }
    let set = Bytes::copy_from_slice(data);
    let mut previous = base;
    for entry in DeepIter::new(set.clone(), base, FUZZ_DECOMPRESSED_BYTES_MAX).flatten() {
        assert!(
            entry.offset >= previous && entry.next_offset >= entry.offset,
            "deep offsets out of order"
        );
        previous = entry.offset;
    }
    // Skipping the top-level CRC (for bytes checked before) must still never panic, and must
    // yield what the checking iterator yields wherever that one finds no error.
    let checked: Vec<_> = DeepIter::new(set.clone(), base, FUZZ_DECOMPRESSED_BYTES_MAX).collect();
    let prechecked = DeepIter::prechecked(set.clone(), base, FUZZ_DECOMPRESSED_BYTES_MAX);
    for (a, b) in checked.iter().zip(prechecked) {
        match a {
            Ok(entry) => assert_eq!(Ok(entry), b.as_ref(), "prechecked iteration differs"),
            Err(_) => break,
        }
    }
    let limits = ValidationLimits {
        decompressed_bytes_max: FUZZ_DECOMPRESSED_BYTES_MAX,
        ..Default::default()
    };
    if let Ok(summary) = validate_set(&set, limits) {
        let deep = DeepIter::new(set, 0, FUZZ_DECOMPRESSED_BYTES_MAX);
        assert_eq!(
            deep.map(|e| e.map(drop))
                .collect::<Result<Vec<_>, _>>()
                .map(|v| v.len()),
            Ok(summary.messages)
        );
    }
}

/// Parses `.properties` bytes and reads them as every typed configuration.
pub fn properties(data: &[u8]) {
    let Ok(props) = Properties::parse_bytes("fuzz.properties", data) else {
        return;
    };
    let _ = BrokerConfig::from_properties(&props);
    let _ = ProducerConfig::from_properties(&props);
    let _ = ConsumerConfig::from_properties(&props);
}

/// Recovers a log whose segment files hold arbitrary bytes (the first byte picks where the
/// data is cut into two segments, and whether a checkpoint or clean marker exists), then reads
/// every served partition end to end: no panic, and everything returned validates.
pub fn log_recovery(data: &[u8]) {
    let Some((&control, bytes)) = data.split_first() else {
        return;
    };
    let fs = MemFs::new(0);
    let dir = std::path::Path::new("/logs/t-0");
    let cut = (usize::from(control >> 2) * bytes.len() / 64).min(bytes.len());
    let (first, second) = bytes.split_at(cut);
    fs.put(&dir.join(crate::log::segment_file_name(0)), first);
    if control & 1 == 1 {
        fs.put(
            &dir.join(crate::log::segment_file_name(first.len() as u64)),
            second,
        );
    }
    if control & 2 == 2 {
        let mut ends = std::collections::BTreeMap::new();
        ends.insert(
            TopicPartition::new("t".parse().unwrap_or_else(|_| unreachable_topic()), 0),
            (cut / 2) as u64,
        );
        fs.put(
            std::path::Path::new("/logs/.tributary-recovery-checkpoint"),
            &crate::log::encode_checkpoint(&ends),
        );
    }
    let Ok(props) = Properties::parse(
        "fuzz",
        "brokerid=0\nlog.dir=/logs\nenable.zookeeper=false\n",
    ) else {
        return;
    };
    let Ok(config) = BrokerConfig::from_properties(&props) else {
        return;
    };
    let Ok((manager, _)) = LogManager::<_, std::sync::Mutex<Log<MemFs>>>::open(fs, config, 0)
    else {
        return;
    };
    for tp in manager.partitions() {
        let Some(log) = manager.get(&tp) else {
            continue;
        };
        let Ok(log) = log.lock() else { return };
        let mut pos = log.start_offset();
        while pos < log.flushed_end() {
            // The zero-copy path first: a file range only where this process checked the bytes
            // (recovery's scan, an earlier read), else a checked read.
            let served = log.serve(pos as i64, 4096).ok().map(|served| {
                served
                    .into_bytes()
                    .unwrap_or_else(|e| panic!("{tp}: a served range cannot be read: {e}"))
                    .to_vec()
            });
            // Bytes below the checkpoint are trusted at startup, not validated; a read of them
            // that fails validation is refused, which is the right answer for corrupt data.
            let Ok(chunk) = log.read(pos as i64, 4096) else {
                assert!(
                    served.is_none(),
                    "{tp}: served what a read refuses at {pos}"
                );
                break;
            };
            let mut entries = ShallowIter::new(&chunk, pos as i64);
            assert!(
                entries.by_ref().all(|e| e.is_ok()),
                "{tp}: a read returned a corrupt message"
            );
            assert_eq!(
                served,
                Some(chunk.to_vec()),
                "{tp}: serve and read differ at {pos}"
            );
            let valid = entries.end().valid_bytes as u64;
            if valid == 0 {
                break;
            }
            pos += valid;
        }
    }
}

fn unreachable_topic() -> ! {
    panic!("\"t\" is a valid topic name")
}

/// Decodes a cluster's ZooKeeper records (its identity at `/cluster/id`, a topic's origin routes
/// at `/cluster/origins/<topic>`; the latter also arrive in TOPIC_ORIGINS): never a panic, and
/// whatever decodes re-encodes to a record that decodes to the same value.
pub fn cluster_records(data: &[u8]) {
    if let Ok(identity) = ClusterIdentity::decode(data) {
        assert_eq!(
            ClusterIdentity::decode(&identity.encode()).ok(),
            Some(identity),
            "identity re-encode"
        );
    }
    if let Ok(origins) = Origins::decode(data) {
        assert_eq!(
            Origins::decode(&origins.encode()).ok(),
            Some(origins),
            "origins re-encode"
        );
    }
}

/// Reads a file of committed offsets (what `export-zk-offsets` writes and `import-zk-offsets`
/// reads, as 0.7.2's tools do): never a panic, and whatever is read writes back, one line each
/// in 0.7.2's format, to a file that reads as the same offsets.
pub fn offsets_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(lines) = offsets_file::parse(text) {
        let written: String = lines.iter().map(|l| l.format() + "\n").collect();
        assert_eq!(
            offsets_file::parse(&written).ok(),
            Some(lines),
            "offsets file re-read"
        );
    }
}

/// Reads a mirror partition's position records (the file a broker reads back after a crash),
/// against a log end taken from the first 8 bytes: never a panic; the book read back holds its
/// invariants, keeps only sets wholly below the log's end, asks for no cut past it, and its
/// records, rewritten, read back as the same book.
pub fn position_records(data: &[u8]) {
    let (end, file) = match data.split_first_chunk::<8>() {
        Some((end, file)) => (u64::from_be_bytes(*end) % (1 << 40), file),
        None => (0, data),
    };
    let recovery = PositionBook::recover(file, end);
    assert!(
        recovery.keep_bytes <= file.len(),
        "keeps no more than the file"
    );
    assert!(recovery.book.invariants_hold(), "the book read back holds");
    assert!(
        recovery.book.end() <= end,
        "no recorded set past the log's end"
    );
    assert!(
        recovery.cut_log_to.is_none_or(|cut| cut < end),
        "a cut only ever shortens the log"
    );
    let rewritten = recovery.book.records();
    let again = PositionBook::recover(&rewritten, end);
    assert_eq!(
        again.book, recovery.book,
        "rewritten records read back as the same book"
    );
    assert_eq!((again.dropped, again.cut_log_to), (0, None));
}

/// Reads the texts of the TLS settings that come from outside the process: a broker's
/// endpoints (`/tributary/endpoints/<id>`, written by whoever can write ZooKeeper), the SSL
/// listener's allow-list file and a `listeners` value. Never a panic; endpoints read back as
/// they are written.
pub fn security_texts(data: &[u8]) {
    use crate::allow_list::{AllowList, Operation, ANONYMOUS};
    use crate::config::{endpoints_registration, parse_endpoints, parse_listeners};
    let text = String::from_utf8_lossy(data);
    if let Ok(endpoints) = parse_endpoints(&text) {
        assert_eq!(
            parse_endpoints(&endpoints_registration(&endpoints)).ok(),
            Some(endpoints),
            "endpoints re-encode"
        );
    }
    if let Ok(list) = AllowList::parse("fuzz", &text) {
        for operation in [Operation::Produce, Operation::Fetch] {
            let _ = list.allows("CN=a,O=b", operation, "t");
            let _ = list.allows(ANONYMOUS, operation, "public-1");
        }
    }
    let _ = parse_listeners(&text);
}
