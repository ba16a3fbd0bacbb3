//! Planted bugs: switches that break a guarantee on purpose, so tests can show that the
//! simulator's checkers catch each break. They only exist with the `planted-bugs` feature
//! (enabled by the simulator's tests); without it [`active`] is `false` and compiles away.
//!
//! Switches are per thread: turmoil runs a whole simulation on the thread that drives it, so
//! concurrent tests cannot see each other's bugs.

/// A bug that can be planted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Bug {
    /// Reads and OFFSETS see written but unflushed data (breaks visible ⇒ durable).
    ServeUnflushed = 1,
    /// Recovery trusts every byte on disk (keeps torn tails).
    SkipRecoveryValidation = 2,
    /// The broker does not re-register after its ZooKeeper session expires.
    NoReregistration = 4,
    /// The broker appends a produce to the next partition instead of the one asked for.
    ProduceWrongPartition = 8,
    /// The broker drops every fourth produce request without a word.
    DropSomeProduces = 16,
    /// The broker's request handler panics on an OFFSETS request.
    PanicInRequest = 32,
    /// A consumer commits what it fetched, not what it handed out.
    CommitFetched = 64,
    /// A consumer's fetcher drops one fetched chunk in ten without a word (its position moves on).
    SkipChunk = 128,
    /// The mirror commits a source offset once the message is queued for the mirror cluster,
    /// not once it is acknowledged (Kafka 0.7's behaviour).
    MirrorCommitQueued = 256,
    /// The mirror's producer keeps a dropping enqueue timeout, and the mirror goes on past a
    /// message the full queue refused (Kafka 0.7's default).
    MirrorDropOnFull = 512,
    /// A consumer moves past data deleted before it was read without reporting the gap.
    SkipGapSilently = 1024,
    /// A consumer member keeps fetching the partitions it lost in a rebalance, and commits for
    /// them.
    KeepLostPartitions = 2048,
    /// The broker answers an acknowledged produce once the data is appended, before it is
    /// flushed (an acknowledgement that a crash can take back).
    AckBeforeFlush = 4096,
    /// A replica resumes after a restart at the source's latest offset instead of its own log
    /// end, appending what it fetches there at its end (bytes land at the wrong offsets).
    ReplicaWrongResumeOffset = 8192,
    /// A replica syncs consumer offsets without clamping them to what it holds.
    ReplicaSyncUnclamped = 16384,
    /// A replica broker goes on copying a topic after promoting it (source bytes land after
    /// the promote point, among what clients of the mirror cluster produce).
    ReplicaCopyAfterPromote = 32768,
    /// A replica whose source deleted bytes before they were copied leaves a hole up to the
    /// source's latest offset instead of its earliest (skipping bytes the source still has).
    ReplicaHoleToLatest = 65536,
    /// The mirror's lag gauges keep their first values (what an operator's dashboard shows
    /// stops following the mirror).
    MirrorLagFrozen = 131072,
    /// An ephemeral node that exists with this component's data is taken as this session's,
    /// whoever owns it (0.7's registration rule, owners unchecked: after a ZooKeeper restart
    /// the old session's node goes when that session expires, and the member, broker or mirror
    /// is silently unregistered). Also skips re-registering a member that finds itself missing
    /// from its group.
    TrustStaleEphemerals = 262144,
    /// The mirror does not compare cluster identities at start: a mirror whose target is its
    /// source (through an alias) starts, and copies the cluster into itself for ever.
    IdentityIgnored = 524288,
    /// The mirror does not check a topic's origin routes before copying it: a topic that came
    /// from the target cluster is copied back into it (two mirrors in opposite directions copy
    /// each other's messages for ever).
    LoopCheckDisabled = 1048576,
    /// The mirror forwards a message it held while its topic was being decided whatever
    /// happened to its partition meanwhile (moved to another stream of the member in the same
    /// epoch, which went on after it): the message goes out after later ones.
    HeldMessageForwarded = 2097152,
    /// A broker creates a renamed mirror copy with its own `num.partitions`, not its source's
    /// count from the origin record.
    RenamedCountIgnored = 4194304,
    /// Origin records are read without a ZooKeeper `sync` first: a session served by a
    /// follower that is behind misses a record another mirror has just written (two mirrors
    /// started at once in opposite directions can then both copy).
    OriginReadNotSynced = 8388608,
    /// A broker registering everything (at start, or with a new ZooKeeper session) registers
    /// its first [`REGISTRATION_CAP`] topics and forgets the rest (a batch size taken for the
    /// whole): only a broker with many topics leaves some unregistered.
    RegistrationCapped = 16777216,
    /// A consumer's commit request writes its first [`COMMIT_CAP`] partitions and answers the
    /// rest as written (a batch size taken for the whole): only a member committing many
    /// partitions at once leaves offsets behind in ZooKeeper.
    CommitCapped = 33554432,
    /// A demotion cuts the log one message before the cut point: a message both clusters hold
    /// is moved into the diverged file (and copied again).
    DemoteCutsOneEarly = 134217728,
    /// A demotion leaves the cluster's topics writable (they are not made replicas again).
    DemoteLeavesWritable = 268435456,
    /// A demotion does not take the other cluster's committed offsets for the synced groups
    /// (a group moved back re-reads from its commits of before the failover).
    DemoteKeepsOldOffsets = 536870912,
    /// A flush does not sync a log's mirror position records: a crash after a mirrored set was
    /// acknowledged can lose its record, and recovery then cuts the set from the log.
    PositionsNotSynced = 1073741824,
    /// The broker appends every mirrored set, whether the partition holds it or not (the
    /// positions are recorded but never consulted): every set sent again is copied twice.
    MirrorPositionsIgnored = 1 << 31,
    /// A mirrored set whose start the partition holds is taken as wholly held: the messages
    /// past what is held are acknowledged without being appended (one deduplication too many).
    MirrorOverlapTakenAsHeld = 1 << 32,
    /// Recovery keeps a mirror position record whose set the crash took from the log (the
    /// record was durable before its data): the set, sent again, is judged held and never
    /// appended.
    PositionOutlivesData = 1 << 33,
    /// A translation answers the end of the recorded set that holds the source offset instead
    /// of the end of the set before it: a reader moved there skips the rest of that set.
    TranslationOneSetTooFar = 1 << 34,
    /// A mirror's producer places source partitions without the mirror cluster's placement
    /// records: each member chooses from its own view, and two that see the cluster
    /// differently copy one source partition into two brokers.
    PlacementRecordsIgnored = 1 << 35,
    /// A mirror forwards and commits a partition's messages while one of its streams holds an
    /// earlier message of it across a wait: another stream that took the partition over in the
    /// same epoch copies (and commits) past the held one first.
    CommitPastWaitingMessage = 1 << 36,
    /// A partition whose mirror position records could not be begun durably (a failed sync)
    /// is not poisoned: the next mirrored append opens the records again on that beginning,
    /// and sets appended after it can come back from a restart without their records.
    PositionsBeginFailureIgnored = 1 << 37,
    /// A mirror stream that a source partition moved to within its epoch forwards its
    /// messages at once, without waiting for the stream it moved from to hand the messages it
    /// recorded to the producer: a later message can reach the mirror cluster first, and the
    /// earlier one is then taken for held.
    HandOverNotAwaited = 1 << 38,
    /// The mirror's producer gives messages up after its retries without taking their source
    /// partition's sent point back: the partition's next messages are appended past them, and
    /// the mirror partition then takes them for held when they are sent again.
    GivenUpKeepsSentPoint = 1 << 39,
    /// A member's rebalance that keeps its owner nodes counts those its plan gives away as
    /// released without releasing them: the member they go to cannot claim them while this
    /// member's session lasts, and they are owned by no one.
    GivenAwayNotReleased = 1 << 40,
    /// A rebalance's release after success takes every node owned before, the kept ones too:
    /// the member goes on owning partitions whose owner nodes it deleted.
    KeptNodeReleased = 1 << 41,
    /// The broker's flush timer lets go of a partition it finds not yet due, as if it had
    /// nothing to flush: bytes appended last stay unflushed, and invisible, until another
    /// append marks the partition again.
    FlushTimerForgetsWaiting = 1 << 42,
    /// A commit's transaction gives each offset node the next partition's offset (the last
    /// node the first's): nodes written together hold one another's offsets.
    TransactionOffsetsShifted = 1 << 43,
    /// A rebalance's transaction of owner nodes refused because one of them exists is taken as
    /// made, every node of it claimed: the member owns partitions whose nodes another member
    /// holds.
    ClaimRefusedTakenAsMade = 1 << 44,
}

/// The partitions of one commit request [`Bug::CommitCapped`] writes.
pub const COMMIT_CAP: usize = 16;

/// The topics [`Bug::RegistrationCapped`] registers.
pub const REGISTRATION_CAP: usize = 8;

#[cfg(feature = "planted-bugs")]
thread_local! {
    static ACTIVE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Whether `bug` is planted on this thread.
#[inline]
pub fn active(bug: Bug) -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        ACTIVE.with(|a| a.get() & bug as u64 != 0)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = bug;
        false
    }
}

/// Plants exactly `bugs` on this thread (an empty slice clears them).
#[cfg(feature = "planted-bugs")]
pub fn plant(bugs: &[Bug]) {
    ACTIVE.with(|a| a.set(bugs.iter().fold(0, |acc, b| acc | *b as u64)));
}
