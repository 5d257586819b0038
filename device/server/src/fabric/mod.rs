//! The simulated network between nodes: Ethernet frames carrying RoCEv2 and the netdev's
//! traffic (IBA annex A17, docs/fabric.md).
//! - [`port`]: a node's port: frames in and out, receive filtering, fault injection, capture;
//! - [`segment`]: the L2 segment the port is plugged into (`--segment`) and the one
//!   interface the port sees over its backends:
//!   - [`multicast`]: UDP multicast on one host, QEMU's `-netdev dgram` framing (default);
//!   - [`vxlan`]: VXLAN (RFC 7348) to remote VTEPs, across hosts or to Linux's vxlan;
//!   - [`tap`]: a Linux TAP device (the host's bridge, vxlan, qdiscs);
//! - [`batch`]: batched datagram I/O (sendmmsg/recvmmsg, reads of a device) and the
//!   buffer pool;
//! - [`pcap`]: capture files.
//!
//! The wire format (frames, headers, the invariant CRC) is the device model's
//! (`rnic_emu_core::rnic::fabric`), and so is the Reliable Connection transport over it
//! (`rnic_emu_core::rnic::verbs::transport`); the node's event loop (`evloop`) drives the
//! port.
pub mod batch;
pub mod multicast;
pub mod pcap;
pub mod port;
pub mod segment;
pub mod tap;
pub mod vxlan;
