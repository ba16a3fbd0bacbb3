//! Kafka 0.7's ZooKeeper layout: every path and every data format, built in one place.
//!
//! | path | kind | data |
//! |---|---|---|
//! | `/brokers/ids/<id>` | ephemeral | `<host>-<epoch ms>:<host>:<port>` |
//! | `/brokers/topics/<topic>/<id>` | ephemeral | partition count on that broker |
//! | `/consumers/<group>/ids/<consumer id>` | ephemeral | topic → stream count |
//! | `/consumers/<group>/owners/<topic>/<bid>-<pid>` | ephemeral | owning thread id |
//! | `/consumers/<group>/offsets/<topic>/<bid>-<pid>` | persistent | next offset, decimal |
//!
//! Paths here are relative to the chroot of `zk.connect`, which the client applies.

use crate::group_id::GroupId;
use crate::wire::TopicName;

/// Parent of the broker registrations.
pub const BROKER_IDS_PATH: &str = "/brokers/ids";
/// Parent of the per-topic registrations.
pub const BROKER_TOPICS_PATH: &str = "/brokers/topics";

/// `/brokers/ids/<id>`.
pub fn broker_id_path(broker_id: i32) -> String {
    format!("{BROKER_IDS_PATH}/{broker_id}")
}

/// Parent of each broker's endpoints (Tributary): which port speaks what.
pub const BROKER_ENDPOINTS_PATH: &str = "/tributary/endpoints";

/// `/tributary/endpoints/<id>` (Tributary, ephemeral, registered beside `/brokers/ids/<id>` by
/// a broker with an SSL listener): `PLAINTEXT://host:port,SSL://host:port`
/// ([`crate::config::endpoints_registration`]). 0.7 clients never read it; they find the
/// plaintext listener in `/brokers/ids/<id>`.
pub fn broker_endpoints_path(broker_id: i32) -> String {
    format!("{BROKER_ENDPOINTS_PATH}/{broker_id}")
}

/// `/brokers/topics/<topic>`.
pub fn broker_topic_path(topic: &TopicName) -> String {
    format!("{BROKER_TOPICS_PATH}/{topic}")
}

/// `/brokers/topics/<topic>/<id>`.
pub fn broker_topic_partitions_path(topic: &TopicName, broker_id: i32) -> String {
    format!("{BROKER_TOPICS_PATH}/{topic}/{broker_id}")
}

/// A broker's registration data: `<creator id>:<host>:<port>`, the creator id being
/// `<host>-<epoch ms at registration>`.
pub fn broker_registration(host: &str, registered_at_ms: i64, port: u16) -> String {
    format!("{host}-{registered_at_ms}:{host}:{port}")
}

/// Host and port of a broker registration. Splits from the right, so a creator id containing
/// ':' (an IPv6 host) still yields the port; 0.7 readers split left and took fields 1 and 2.
pub fn parse_broker_registration(data: &str) -> Option<(String, u16)> {
    let (rest, port) = data.trim().rsplit_once(':')?;
    let (_, host) = rest.split_once(':')?;
    Some((host.to_string(), port.parse().ok()?))
}

/// `/consumers/<group>/ids`.
pub fn consumer_ids_path(group: &GroupId) -> String {
    format!("/consumers/{group}/ids")
}

/// `/consumers/<group>/owners`: a directory per topic the group has claimed.
pub fn consumer_owners_root(group: &GroupId) -> String {
    format!("/consumers/{group}/owners")
}

/// `/consumers/<group>/offsets`: a directory per topic the group has committed.
pub fn consumer_offsets_root(group: &GroupId) -> String {
    format!("/consumers/{group}/offsets")
}

/// `/consumers/<group>/owners/<topic>`.
pub fn consumer_owners_path(group: &GroupId, topic: &TopicName) -> String {
    format!("{}/{topic}", consumer_owners_root(group))
}

/// `/consumers/<group>/offsets/<topic>`.
pub fn consumer_offsets_path(group: &GroupId, topic: &TopicName) -> String {
    format!("{}/{topic}", consumer_offsets_root(group))
}

/// A partition's name under owners/offsets: `<broker id>-<partition>`.
pub fn broker_partition_name(broker_id: i32, partition: u32) -> String {
    format!("{broker_id}-{partition}")
}

/// Every ancestor of `path` from the top, the path itself excluded: `/a/b/c` → `/a`, `/a/b`.
pub fn ancestors(path: &str) -> Vec<&str> {
    path.match_indices('/')
        .skip(1)
        .filter_map(|(i, _)| path.get(..i))
        .collect()
}

/// Replica mode (Tributary): topics promoted on a mirror cluster, one persistent child each,
/// written by `tributary promote`. Its data is [`CLUSTER_PROMOTED`] when the whole cluster is
/// promoted (every topic, including those created later), empty otherwise.
pub const PROMOTED_PATH: &str = "/tributary/promoted";

/// The data of [`PROMOTED_PATH`] when the whole cluster is promoted.
pub const CLUSTER_PROMOTED: &[u8] = b"cluster";

/// The promotion request of `topic`.
pub fn promoted_topic_path(topic: &TopicName) -> String {
    format!("{PROMOTED_PATH}/{topic}")
}

/// A replica broker's confirmation that it stopped copying `topic`, holding
/// `partition:offset,...` (where it stopped).
pub fn promoted_ack_path(topic: &TopicName, broker_id: i32) -> String {
    format!("{PROMOTED_PATH}/{topic}/{broker_id}")
}

/// A replica broker's confirmation that it carried out the whole cluster's promotion (it copies
/// nothing and takes produces for every topic): `/tributary/promoted/broker:<id>`. The `:` is
/// not a topic name's character, so the node is never read as a promoted topic, and it goes
/// with the promotion when a demotion deletes [`PROMOTED_PATH`].
pub fn cluster_promoted_ack_path(broker_id: i32) -> String {
    format!("{PROMOTED_PATH}/broker:{broker_id}")
}

/// Replica mode (Tributary): each replica broker's source, `<id>` a persistent child holding a
/// [`crate::replica::demotion::ReplicaRecord`] (written at every start).
pub const REPLICAS_PATH: &str = "/tributary/replicas";

/// `/tributary/replicas/<id>`.
pub fn replica_record_path(broker_id: i32) -> String {
    format!("{REPLICAS_PATH}/{broker_id}")
}

/// Replica mode (Tributary): the current demotion of this cluster, written by
/// `tributary demote`; its data is the demotion's id, its children each broker's plan and,
/// once carried out, its report ([`crate::replica::demotion`]).
pub const DEMOTION_PATH: &str = "/tributary/demotion";

/// `/tributary/demotion/plan-<id>`: what broker `<id>` is to cut.
pub fn demotion_plan_path(broker_id: i32) -> String {
    format!("{DEMOTION_PATH}/plan-{broker_id}")
}

/// `/tributary/demotion/done-<id>`: broker `<id>`'s report, once it has cut its logs.
pub fn demotion_done_path(broker_id: i32) -> String {
    format!("{DEMOTION_PATH}/done-{broker_id}")
}

/// Replica mode (Tributary): what each broker's demotions moved out of its logs, one persistent
/// node per broker holding a [`crate::replica::demotion::DivergedLog`].
pub const DIVERGED_PATH: &str = "/tributary/diverged";

/// `/tributary/diverged/<id>`.
pub fn diverged_log_path(broker_id: i32) -> String {
    format!("{DIVERGED_PATH}/{broker_id}")
}

/// Mirror mode with `mirror.preserve.partitions` (Tributary): per mirror topic, the broker each
/// source partition's copy goes to, one persistent node per source partition holding the
/// broker id (see [`crate::mirror::position::placement::record_step`]).
pub const MIRROR_PLACEMENTS_PATH: &str = "/tributary/placements";

/// `/tributary/placements/<mirror topic>/<cluster id>,<source topic>,<broker>-<partition>`: the
/// placement record of `key`'s copy in `topic`. Neither a cluster id nor a topic name holds a
/// `,`, so the name is read one way only.
pub fn mirror_placement_path(
    topic: &TopicName,
    key: &crate::mirror::position::SourceKey,
) -> String {
    format!(
        "{MIRROR_PLACEMENTS_PATH}/{topic}/{},{},{}",
        key.cluster,
        key.topic,
        broker_partition_name(key.partition.broker_id, key.partition.partition)
    )
}
