//! The producer's decisions, without I/O: which (broker, partition) a message goes to, when an
//! async batch is due, which lane it waits in, and how a batch is grouped into requests. `bins::producer` drives them.

mod batch;
mod lanes;
mod partitioner;

pub use batch::{group_by_partition, BatchPolicy, PartitionSets};
pub use lanes::{Lanes, LANES};
pub use partitioner::{choose, java_string_hash, Candidate};
