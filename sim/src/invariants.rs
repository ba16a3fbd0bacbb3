//! Every invariant the simulation checks, in one place, numbered S1 to S31 as
//! docs/ARCHITECTURE.md's "Simulated invariants" table numbers them (a test holds the two
//! together); docs/simulation.md says how each scenario checks its own. Every violation names
//! one.

use std::fmt;

/// What a scenario promises; each violation names the one it broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// S1 (cluster): everything a read returned stays readable at the same offset, byte for
    /// byte.
    VisibleIsDurable,
    /// S2 (cluster): no read returns a corrupt or torn message, and every partition that held
    /// data reads end to end after healing.
    NoCorruptRead,
    /// S3 (cluster): a partition's latest offset never goes back.
    LatestNeverGoesBack,
    /// S4 (cluster): after healing, ZooKeeper lists exactly the live brokers and their topics.
    RegistryMatches,
    /// S5 (cluster): a restarted broker serves again, every partition it had, in bounded time.
    RestartedBrokerServes,
    /// S6 (cluster): the produce history: nothing lost, duplicated, reordered, misplaced or
    /// invented.
    History,
    /// S7 (every scenario): a broker never fails on its own; a graceful stop finishes cleanly,
    /// in time.
    BrokerHealth,
    /// S8 (clients): after healing, every acknowledged message is consumed.
    AckedIsConsumed,
    /// S9 (clients): a committed offset is never ahead of what was handed out.
    CommitNotAhead,
    /// S10 (clients): once the group settles, every partition has exactly one owner, whose owner
    /// node names it.
    OwnershipDisjoint,
    /// S11 (mirror): every message the source acknowledged and still holds is in the mirror
    /// cluster.
    MirrorNoLoss,
    /// S12 (mirror): the mirror holds nothing the source did not durably have at that offset.
    MirrorNoPhantom,
    /// S13 (mirror): what one ownership of a partition sends again is within the stated bound.
    MirrorDuplicates,
    /// S14 (mirror): a committed source offset is the end of a message the mirror cluster
    /// acknowledged.
    MirrorCommitSafety,
    /// S15 (mirror): after the last fault heals, the committed offsets reach the source's end in
    /// time.
    MirrorProgress,
    /// S16 (mirror): data the source deleted unmirrored is reported as a gap, with its exact
    /// range, and only such data.
    MirrorGaps,
    /// S17 (mirror): one ownership of a partition forwards its messages in source order.
    MirrorOrder,
    /// S18 (mirror): after the drain, the metrics agree with the clusters: each source broker's
    /// flushed-offset gauge is the partition's latest offset, and the mirrors' lag gauges show
    /// every source partition at 0.
    MirrorMetrics,
    /// S19 (replica): every offset a replica serves holds the source's bytes there.
    ReplicaIdentity,
    /// S20 (replica): after healing, every replica partition reaches its source's end in time.
    ReplicaNoLoss,
    /// S21 (replica): a synced consumer offset is never past what the replica holds.
    ReplicaSyncAhead,
    /// S22 (replica): a promoted partition holds the source's bytes up to its promote point and
    /// after it only what clients of the replica cluster produced.
    ReplicaPromoteCut,
    /// S23 (topology): every message acknowledged in one cluster reaches each cluster the
    /// topology copies it to, under the name it has there, after the faults heal.
    TopologyNoLoss,
    /// S24 (topology): no message is ever copied back into the cluster it was produced in.
    TopologyNoCopyBack,
    /// S25 (topology): no message has more copies in a cluster than the faults of its run can
    /// explain (a loop multiplies them without end).
    TopologyNoAmplification,
    /// S26 (topology): a renamed copy has, on each broker of its cluster, the partition count
    /// its topic has per broker in its source (unless that broker said it could not read the
    /// copy's origin record when it created the copy).
    TopologyPartitionCount,
    /// S27 (failover): every message acknowledged by the cluster that was primary at the time
    /// survives every later switch at its offset: in the final primary's log, or, for one the
    /// old primary acknowledged but never copied before the disaster, in its diverged file.
    FailoverNoLoss,
    /// S28 (failover): a demotion moves into the diverged files only what the demoted cluster
    /// holds past its cut, none of which the other cluster holds (nothing copied is cut).
    FailoverDivergedExact,
    /// S29 (failover): once a demotion is confirmed, the demoted cluster refuses produces: a
    /// cluster is writable only while promoted.
    FailoverWritableOnlyPromoted,
    /// S30 (failover): the group never skips a message, and after a planned switchback it
    /// re-reads nothing (its offsets followed it back).
    FailoverOffsetsFollow,
    /// S31 (failover): every step of the drill (promote, demote, catching up, offsets synced)
    /// completes in bounded time.
    FailoverCompletes,
    /// S32 (mirror): with `mirror.preserve.partitions` on, the mirror cluster holds no more
    /// copies of a message than the source does.
    MirrorExactlyOnce,
    /// S33 (mirror): with `mirror.preserve.partitions` on, a source offset translated into a
    /// mirror offset is never past the mirror partition's end, and a reader starting there
    /// skips none of the source partition's messages at or past that source offset.
    MirrorTranslation,
}

impl Invariant {
    /// Every invariant, in number order.
    pub const ALL: [Invariant; 33] = [
        Invariant::VisibleIsDurable,
        Invariant::NoCorruptRead,
        Invariant::LatestNeverGoesBack,
        Invariant::RegistryMatches,
        Invariant::RestartedBrokerServes,
        Invariant::History,
        Invariant::BrokerHealth,
        Invariant::AckedIsConsumed,
        Invariant::CommitNotAhead,
        Invariant::OwnershipDisjoint,
        Invariant::MirrorNoLoss,
        Invariant::MirrorNoPhantom,
        Invariant::MirrorDuplicates,
        Invariant::MirrorCommitSafety,
        Invariant::MirrorProgress,
        Invariant::MirrorGaps,
        Invariant::MirrorOrder,
        Invariant::MirrorMetrics,
        Invariant::ReplicaIdentity,
        Invariant::ReplicaNoLoss,
        Invariant::ReplicaSyncAhead,
        Invariant::ReplicaPromoteCut,
        Invariant::TopologyNoLoss,
        Invariant::TopologyNoCopyBack,
        Invariant::TopologyNoAmplification,
        Invariant::TopologyPartitionCount,
        Invariant::FailoverNoLoss,
        Invariant::FailoverDivergedExact,
        Invariant::FailoverWritableOnlyPromoted,
        Invariant::FailoverOffsetsFollow,
        Invariant::FailoverCompletes,
        Invariant::MirrorExactlyOnce,
        Invariant::MirrorTranslation,
    ];

    /// Its number: `S<n>` in docs/ARCHITECTURE.md.
    pub fn number(self) -> usize {
        Invariant::ALL
            .iter()
            .position(|i| *i == self)
            .map_or(0, |at| at + 1)
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S{} {:?}", self.number(), self)
    }
}

/// A broken invariant and what broke it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// What happened.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

#[cfg(test)]
mod tests {
    use super::Invariant;

    /// docs/ARCHITECTURE.md's table numbers the invariants as the code does: every row
    /// `| S<n> | `<Name>` |` matches `Invariant::ALL`, and there is no other row.
    #[test]
    fn the_architecture_numbers_the_invariants_as_the_code_does() {
        let doc = include_str!("../../docs/ARCHITECTURE.md");
        let rows: Vec<(String, String)> = doc
            .lines()
            .filter_map(|line| {
                let mut cells = line.split('|').map(str::trim).skip(1);
                let number = cells.next()?.strip_prefix('S')?.to_string();
                let name = cells.next()?.trim_matches('`').to_string();
                number.parse::<usize>().ok()?;
                Some((number, name))
            })
            .collect();
        let expected: Vec<(String, String)> = Invariant::ALL
            .iter()
            .map(|i| (i.number().to_string(), format!("{i:?}")))
            .collect();
        assert_eq!(rows, expected);
    }
}
