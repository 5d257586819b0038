//! The simulated network between nodes: RoCEv2 over UDP (IBA annex A17, docs/fabric.md).
//! - [`port`]: a node's UDP endpoint, fault injection, capture;
//! - [`batch`]: batched datagram I/O (sendmmsg/recvmmsg) and the buffer pool;
//! - [`pcap`]: capture files.
//!
//! The wire format (headers, the invariant CRC) is the device model's
//! (`rnic_emu_core::rnic::fabric::packet`), and so is the Reliable Connection transport
//! over it (`rnic_emu_core::rnic::verbs::transport`); the node's event loop (`evloop`)
//! drives the port.
pub mod batch;
pub mod pcap;
pub mod port;
