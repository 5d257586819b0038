//! The simulated network between nodes: RoCEv2 over UDP (IBA annex A17, docs/fabric.md).
//! - [`packet`]: wire format and the invariant CRC (the device model's, re-exported);
//! - [`port`]: a node's UDP endpoint, fault injection, capture;
//! - [`batch`]: batched datagram I/O (sendmmsg/recvmmsg) and the buffer pool;
//! - [`pcap`]: capture files.
//!
//! The Reliable Connection transport over it lives in the engine
//! (`rnic_emu_core::rnic::verbs::transport`); the node's event loop (`evloop`) drives the
//! port.
pub mod batch;
pub use rnic_emu_core::rnic::fabric::packet;
pub mod pcap;
pub mod port;
