//! The producer's decisions, without I/O: which (broker, partition) a message goes to, when an
//! async batch is due, and how a batch is grouped into requests. `bins::producer` drives them.

mod batch;
mod partitioner;

pub use batch::{group_by_partition, BatchPolicy, PartitionSets};
pub use partitioner::{choose, java_string_hash, Candidate};
