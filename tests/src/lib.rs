//! Support for Tributary's end-to-end tests: starting real binaries (and, once the broker lands,
//! a real ZooKeeper) on loopback.
