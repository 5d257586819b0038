//! The simulated network between nodes: Ethernet frames carrying RoCEv2 and the netdev's
//! traffic (IBA annex A17, docs/fabric.md).
//! - [`port`]: a node's port: frames in and out, receive filtering, fault injection, capture;
//! - [`segment`]: the L2 segment the port is plugged into (UDP multicast, QEMU's framing);
//! - [`batch`]: batched datagram I/O (sendmmsg/recvmmsg) and the buffer pool;
//! - [`pcap`]: capture files.
//!
//! The wire format (frames, headers, the invariant CRC) is the device model's
//! (`rnic_emu_core::rnic::fabric`), and so is the Reliable Connection transport over it
//! (`rnic_emu_core::rnic::verbs::transport`); the node's event loop (`evloop`) drives the
//! port.
pub mod batch;
pub mod pcap;
pub mod port;
pub mod segment;
