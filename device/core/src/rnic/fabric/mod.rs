//! The simulated network's wire format: RoCEv2 in Ethernet frames (IBA annex A17,
//! docs/fabric.md).
//! - [`packet`]: the transport headers (BTH, RETH, AETH, immediate), parsing, the ICRC;
//! - [`frame`]: Ethernet/IPv4/IPv6/UDP frames around them, classification of received
//!   frames (RoCE, other traffic for the netdev, malformed) and the port's receive path
//!   over it (`frame::sort`: what is dropped and counted, what goes to the engine or to
//!   the netdev).
//!
//! The sockets that carry these frames (the fabric port, its segment, batched datagram
//! I/O, capture files) belong to the server crate (`rnic-emu-server`, its `fabric`
//! module); the Reliable Connection transport over them lives in the verbs engine
//! ([`crate::rnic::verbs::transport`]).
pub mod frame;
pub mod packet;
