//! The scenarios, each a world, a workload, faults and its checks: [`cluster`] (brokers,
//! producers, the produce history), [`clients`] (consumer groups), [`mirror`] (two clusters and
//! the mirror), [`replica`] (replica mode and failover), [`failover`] (the disaster-recovery
//! cycle: promote, demote, switch back), [`long_link`] (the mirror over the link
//! proxy), [`log_crash`] (a crash at any file-system operation, then recovery),
//! [`mirror_positions`] (mirrored appends and their position records across such a crash) and
//! [`retention_restart`]; [`topology`] (active-active and chains of mirrors, loops refused);
//! [`two_clusters`] holds the faults the two-cluster scenarios share.
//! Each is re-exported at the crate's root (`tributary_sim::mirror`, …).

pub mod clients;
pub mod cluster;
pub mod failover;
pub mod log_crash;
pub mod long_link;
pub mod mirror;
pub mod mirror_positions;
pub mod replica;
pub mod retention_restart;
pub mod topology;
pub mod two_clusters;
