//! The simulated network between nodes: RoCEv2 over UDP (IBA annex A17, docs/fabric.md).
//! - [`packet`]: wire format and the invariant CRC;
//! - [`port`]: a node's UDP endpoint, fault injection, capture;
//! - [`batch`]: batched datagram I/O (sendmmsg/recvmmsg) and the buffer pool;
//! - [`pcap`]: capture files.
//!
//! The Reliable Connection transport over it lives in the engine (`verbs::rc`); the node's
//! event loop (`evloop`) drives the port.
pub mod batch;
pub mod packet;
pub mod pcap;
pub mod port;
