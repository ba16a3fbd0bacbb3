//! The ZooKeeper consumer group's decisions, without I/O: the rebalance ([`group`]), 0.7's
//! range assignment, the data a member registers, consumer and thread ids, the wildcard topic
//! filter, and each partition's offsets (what was fetched, handed to the application, and may
//! be committed).
//! `bins::consumer` drives them against ZooKeeper and the brokers.

mod assignment;
mod commit;
mod filter;
pub mod group;
mod offsets;
pub mod offsets_file;
mod registration;

pub use assignment::{assign, BrokerPartition};
pub use commit::{Commit, CommitAnswer, CommitOutcome};
pub use filter::{FilterKind, TopicPattern, TopicPatternError};
pub use offsets::PartitionOffsets;
pub use registration::{consumer_id, thread_id, Registration, RegistrationError};
