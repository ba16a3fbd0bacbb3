//! Tributary's runtime layer.
