//! Support for Tributary's end-to-end tests: running real programs beside the project's code
//! (Java's codecs today; the `tributary` binary and a real ZooKeeper once the broker lands).

pub mod java;
