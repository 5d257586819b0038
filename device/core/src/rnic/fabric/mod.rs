//! The simulated network's wire format: RoCEv2 packets over UDP (IBA annex A17,
//! docs/fabric.md).
//! - [`packet`]: headers, parsing and the invariant CRC.
//!
//! The sockets that carry these packets (the fabric port, batched datagram I/O, capture
//! files) belong to the server crate (`rnic-emu-server`, its `fabric` module); the Reliable
//! Connection transport over them lives in the verbs engine
//! ([`crate::rnic::verbs::transport`]).
pub mod packet;
