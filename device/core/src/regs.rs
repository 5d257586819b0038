//! The register contract of both emulated functions: the one source of truth.
//!
//! Models the RNIC's BAR0 register block of the original register map (docs/programming.md
//! §0: QP_CTX_BASE 0x1000,
//! WQE_DB_IDX 0x1008, CQE_CONS_IDX 0x100C, BAR1_APERTURE 0x2000, DMA_CTRL 0x3000 with reset
//! value 0x01, MTT_BASE 0x3010), extended with what a real device needs to be probed
//! (identification, version, capabilities, status, reset, scratch, interrupt self-test),
//! and the GPU's small BAR0 control block.
//!
//! Everything a driver needs (offsets, widths, access, reset values, PCI IDs, BAR layout)
//! is declared once here with [`register_map!`]; with the descriptors and the counters of
//! [`crate::contract`], `rnic-emu gen-header` turns it into
//! `guest-driver/include/uapi/rnic_emu_regs.h` and `rnic-emu gen-doc` into
//! `docs/registers.md` ([`crate::contract::render`]). Tests fail when either checked-in
//! file drifts. This module is the bottom of the crate: it imports nothing of it.

/// How software may access a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read-only: writes are ignored.
    Ro,
    /// Read/write: the bits in `writable` take the written value.
    Rw,
    /// Write-only command register: reads return 0, a write triggers an action.
    Wo,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Ro => "RO",
            Access::Rw => "RW",
            Access::Wo => "WO",
        }
    }
}

/// One register of a BAR's register block.
#[derive(Clone, Copy, Debug)]
pub struct RegDef {
    pub name: &'static str,
    pub offset: u64,
    /// Width in bytes: 4 or 8.
    pub width: u8,
    pub access: Access,
    pub reset: u64,
    /// Bits software can change (for `Rw`).
    pub writable: u64,
    pub doc: &'static str,
}

/// Declares register offsets as `pub const` and a table describing them, from one list.
macro_rules! register_map {
    ($table:ident { $(
        $(#[doc = $doc:literal])+
        $name:ident = $off:literal, $width:literal, $access:ident, reset $reset:literal, writable $mask:literal;
    )* }) => {
        $( $(#[doc = $doc])+ pub const $name: u64 = $off; )*
        pub const $table: &[$crate::regs::RegDef] = &[ $( $crate::regs::RegDef {
            name: stringify!($name), offset: $off, width: $width,
            access: $crate::regs::Access::$access, reset: $reset, writable: $mask, doc: concat!($($doc),+),
        } ),* ];
    };
}

/// Version of this register contract, reported by `RNIC_REG_VERSION`/`GPU_REG_VERSION` as
/// `major << 16 | minor`. The major changes when an existing register changes meaning.
pub const CONTRACT_VERSION: u32 = 0x0001_0010;

/// What each minor version of the contract added (major 1). A minor version only adds
/// (registers, capability bits, fields or values that were reserved before) or tightens a
/// guarantee (behaviour that was undefined becomes defined); a driver
/// written for minor n works unchanged on any later minor. Rendered into
/// docs/registers.md and the C header's comment.
pub const CHANGELOG: &[(u32, &str)] = &[
    (0x0001_0000, "RNIC BAR0 register block, MSI-X, interrupt self-test, GPU BAR0/BAR1."),
    (0x0001_0001, "Verbs engine (CAP_VERBS): QP/CQ/MR tables, commands, doorbells, statistics."),
    (0x0001_0002, "BAR1_APERTURE slots, RNIC_REG_NUM_GPUS, GPU engine, DMA path counters; later under the same minor: the RoCEv2 fabric (RNIC_REG_IPV4, dest_ip/PSN/MTU/retry fields of rnic_qp_ctx, packet counters)."),
    (0x0001_0003, "Doorbell page in BAR2 (CAP_DB_PAGE, DMA_CTRL_DB_PAGE), counter DB_PAGE_UPDATES."),
    (0x0001_0004, "Capability bits CAP_FABRIC and CAP_P2P; DMA_CTRL ENABLE clear stops every DMA not caused by a command; CMD_DEREG_MR stops messages in flight that use the MR; BAR1_APERTURE checked on its full or high-half write."),
    (0x0001_0005, "Fatal engine error: STATUS_FATAL, ASYNC_ERR_FATAL, CMD_ERR_FATAL, QP_ERR_FATAL; a device reset recovers."),
    (0x0001_0006, "PCIe-side faults (docs/faults.md): CMD_BUSY, STATUS_FLR_REQUIRED, ASYNC_ERR_INJECTED, ASYNC_ERR_AER, ASYNC_ERR_FLR_REQUIRED, QP_ERR_POISONED; the AER capability reports errors. GPU_ENG_ERR_FATAL: a contained copy-engine failure, cleared by a GPU reset."),
    (0x0001_0007, "The Ethernet port (CAP_ETH): ETH_* registers, one transmit and one receive descriptor ring of rnic_eth_desc for the netdev's frames, MAC filter and MTU, link state; port counters ETH_* and the RoCE ones (ICRC_ERRORS, OUT_OF_SEQUENCE, DUPLICATE_REQUESTS, RNR_NAKS_SENT)."),
    (0x0001_0008, "QP paths: QP_PATH_BASE and rnic_qp_path (next-hop MAC, traffic class, hop limit and source GID of a fabric QP, as the driver resolved them); the port's GID table: GID_TABLE_BASE, rnic_gid_entry, CMD_SET_GID (the port takes RoCE packets to each IPv4 GID's address)."),
    (0x0001_0009, "RoCEv2 over IPv6: PATH_FLAG_IPV6 and the dest_gid of rnic_qp_path (formerly reserved); IPv6 GIDs are addresses of the port; counters PKTS_SENT_IPV6, PKTS_RECEIVED_IPV6. Requester integrity: BAD_RESPONSES, WC_BAD_RESP_ERR, QP_ERR_BAD_RESPONSE. Ethernet transmit offloads (CAP_ETH_OFFLOAD): a frame over several rnic_eth_desc (TX_MORE, at most TX_MAX_DESCS), checksum insertion (TX_CSUM, csum_start/csum_offset) and TCP segmentation of IPv4/IPv6 frames (TX_TSO, mss); receive checksum check (ETH_CTRL RX_CSUM, DESC_CSUM_OK); counters ETH_TX_CSUM, ETH_TSO_FRAMES, ETH_TSO_SEGMENTS."),
    (0x0001_000a, "Failure paths. Responder: a WRITE that ends short of RETH.len and a READ or WRITE over 2^31 bytes are invalid requests; ranges checked whole at the first packet, translated per packet. Packets outside the default P_Key partition dropped (PKEY_VIOLATIONS); payload and pad must end on a 4-byte boundary; RoCE from an impossible source counted in ROCE_BAD_SOURCE (was ETH_RX_ERRORS). REG_MR page lists bounded in all: MAX_MR_PAGES, CMD_ERR_NO_RESOURCES. A CQ overflow (a driver error) puts the CQ in error until destroyed and its QPs in ERROR, ASYNC_ERR_CQ_OVERFLOW latched last; a doorbell behind the producer index already taken is ignored (STALE_DOORBELLS). A QP moves at most 8 MiB of payload per pass; loopback requests carry at most 1 MiB. Server: SET_IRQS takes eventfds only; BAR2 and GPU BAR1 memfds sealed, DMA_MAP fds must be memfds sealed against shrinking; wire delay faults queued (WIRE_DELAYED, WIRE_DELAY_DROPS); the capture bounded (PCAP_DROPPED). Commands: CMD_ERR_TIMEOUT, a command (or RESET, DMA_CTRL, ETH_CTRL write) the engine did not take in time never runs, the device is FATAL with no DMA until a reset the engine takes (ENGINE_TIMEOUTS); CMD_ERR_DISABLED only means the engine is gone; CMD_BUSY never turns into a result. DMA needs PCI bus mastering (BUS_MASTER_ERRORS); DMA_UNMAP success means no further byte of the range moves, a partial unmap is refused, DMA_MAP READ/WRITE flags are enforced. Stated: commands and failure states of docs/programming.md (R-CMD-5..7, R-CQ-6, R-DB-5, R-FAB-1, R-RST-6..8); the GPU's reset is an FLR."),
    (0x0001_000b, "Asynchronous events: an event queue (EQ_BASE, EQ_LOG, EQ_CI, CMD_SET_EQ; 16-byte rnic_eqe, EQE_*) that tells what no completion reports: QP fatal (its CQ overflowed, a doorbell overran its ring), QP invalid request and QP access error (the responder NAKs an invalid request or a remote access error and goes to ERROR, as IBA 9.9.3 has it: before, it stayed in RTS), communication established (first request in RTR), CQ error; written owner byte last, the async vector raised. Counters EQ_EVENTS, EQ_OVERFLOWS."),
    (0x0001_000c, "Atomics: WQE_OP_ATOMIC_CMP_SWP and WQE_OP_ATOMIC_FETCH_ADD (rnic_atomic_ops after the header, one 8-byte SGE for the original value; its CQE opcodes), COMPARE_SWAP/FETCH_ADD and ATOMIC ACKNOWLEDGE on the wire (AtomicETH, AtomicAckETH), ACCESS_REMOTE_ATOMIC for MRs and QPs; the responder executes an 8-byte aligned atomic once and answers a duplicate from the results it keeps (ATOMICS, ATOMICS_REPLAYED). rnic_qp_ctx.rd_atomic (reserved before): READs and atomics outstanding as requester (max_rd_atomic, at RTS) and answered as responder (max_dest_rd_atomic, at RTR), 0 meaning the device's 16."),
    (0x0001_000d, "UC QPs: rnic_qp_ctx.dest_qpn bits [31:24] (0 before) name the QP's service at RESET -> INIT, QP_TYPE_RC or QP_TYPE_UC. A UC QP sends SEND and WRITE (with immediate) as the UC opcodes (the RC ones | 0x20), asks for no ACK and completes a WQE once its last packet is sent; a READ or atomic WQE completes with WC_LOC_QP_OP_ERR. Its responder acknowledges nothing and drops, without an error, a message with a missing packet, with no RECV posted, or with a remote access or length error, resuming at the next first packet (UC_DROPPED); a packet of the other service is dropped (PKTS_DROPPED)."),
    (0x0001_000e, "IBTA 1.5 RDMA FLUSH and ATOMIC WRITE on RC QPs: WQE_OP_FLUSH (remote_addr, rkey, imm_data the length, rsvd0 the FETH byte: placement type FLUSH_TYPE_* in bits [3:0], selectivity FLUSH_LEVEL_* in bits [5:4]; no SGE) and WQE_OP_ATOMIC_WRITE (rnic_atomic_ops.swap_add the 8 bytes written to the 8-byte aligned remote_addr at once; no SGE), their CQE opcodes, BTH opcodes FLUSH (FETH then RETH) and ATOMIC_WRITE (RETH, 8 bytes of payload), both answered by a zero-length RDMA READ RESPONSE ONLY and counted against max_rd_atomic/max_dest_rd_atomic; a duplicate is answered again, never executed twice. MR and QP access bits ACCESS_FLUSH_GLOBAL and ACCESS_FLUSH_PERSISTENT (a FLUSH needs the bit of each placement type it names, on MR and QP); counters FLUSHES, ATOMIC_WRITES."),
    (0x0001_000f, "Shared receive queues: a QP context of service QP_TYPE_SRQ makes its QPN an SRQ (its RQ ring, PD and limit; RQ doorbells and the doorbell page post to it); an RC QP whose rq_log_stride is 0 receives from the SRQ named by rq_addr, taking the SRQ's head WQE when a message needs a RECV (completions of different QPs may come out of the SRQ's order); events EQE_SRQ_LIMIT and EQE_QP_LAST_WQE; an SRQ a QP receives from cannot be reset or destroyed (CMD_ERR_BUSY)."),
    (0x0001_0010, "Unreliable Datagram QPs: service QP_TYPE_UD, its Q_Key in rnic_qp_ctx.dest_ip at every edge that takes attributes, no destination at RTR, messages of at most the port's RoCE MTU. A UD send WQE (SEND, SEND_IMM) names its destination QP in remote_addr, its Q_Key in rkey (bit 31: the QP's own) and its address vector rnic_ud_av right after the header (SGEs after it); it goes as one UD SEND ONLY packet with a DETH, to this RNIC's own QPs when the destination is an address of the port, and completes once sent. The receiver checks the DETH Q_Key (QKEY_VIOLATIONS), places the 40-byte GRH area before the payload (CQE_FLAG_GRH, CQE_FLAG_IPV6, byte_len counts it) and reports the source QP; a message with no RECV or too long for it is dropped, the RECV kept (UD_DROPPED). Counters UD_SENT, UD_RECEIVED."),
];

/// PCI identity and BAR layout shared with the guest driver.
pub mod pci_ids {
    /// Default vendor ID: 0x1234, the ID QEMU's own example devices (edu, bochs display) use;
    /// it is not any real vendor's RDMA or GPU product. Node descriptions may override it.
    pub const VENDOR_ID: u16 = 0x1234;
    /// Default device ID of the RNIC function.
    pub const RNIC_DEVICE_ID: u16 = 0x52e1;
    /// Default device ID of the GPU function.
    pub const GPU_DEVICE_ID: u16 = 0x52e2;
    /// Default subsystem vendor ID (same as the vendor).
    pub const SUBSYS_VENDOR_ID: u16 = 0x1234;
    /// Default subsystem ID.
    pub const SUBSYS_ID: u16 = 0x0001;
    /// RNIC class code: network controller, Ethernet (RoCE NICs are Ethernet devices).
    pub const RNIC_CLASS: u32 = 0x02_00_00;
    /// GPU class code: display controller, 3D controller (as data-centre GPUs report).
    pub const GPU_CLASS: u32 = 0x03_02_00;
    /// RNIC BAR0: 64-bit non-prefetchable register block (BAR slots 0 and 1).
    pub const RNIC_BAR0_SIZE: u64 = 0x1_0000;
    /// GPU BAR0: 32-bit non-prefetchable register block.
    pub const GPU_BAR0_SIZE: u64 = 0x1_0000;
    /// GPU BAR1: 64-bit prefetchable memory aperture (BAR slots 1 and 2); size per node.
    pub const GPU_BAR1_DEFAULT_SIZE: u64 = 1 << 30;
    /// RNIC doorbell BAR (minor 3): the doorbell page, 64-bit non-prefetchable, shared
    /// memory the guest writes without trapping (BAR slots 2 and 3; see `rnic::dbpage`).
    pub const RNIC_DB_BAR: usize = 2;
    /// Size of the RNIC's doorbell BAR: one 4 KiB page per QP, then one per CQ.
    pub const RNIC_DB_BAR_SIZE: u64 = (super::rnic::MAX_QP + super::rnic::MAX_CQ) * super::rnic::dbpage::PAGE;
    /// Offset of the MSI-X table inside BAR0 (both functions).
    pub const MSIX_TABLE_OFFSET: u64 = 0x8000;
    /// Offset of the MSI-X pending-bit array inside BAR0 (both functions).
    pub const MSIX_PBA_OFFSET: u64 = 0xC000;
    /// Default MSI-X vectors of the RNIC.
    pub const RNIC_MSIX_VECTORS: u16 = 8;
    /// MSI-X vectors of the GPU.
    pub const GPU_MSIX_VECTORS: u16 = 2;
}

/// RNIC BAR0 registers.
pub mod rnic {
    /// `RNIC_REG_ID` value: ASCII "RNIC".
    pub const ID_MAGIC: u32 = 0x524e_4943;
    /// `RNIC_REG_CAPS` bit: MSI-X completion interrupts.
    pub const CAP_MSIX: u64 = 1 << 0;
    /// `RNIC_REG_CAPS` bit: interrupt self-test via `RNIC_REG_INT_TRIGGER`.
    pub const CAP_INT_TEST: u64 = 1 << 1;
    /// `RNIC_REG_STATUS` bit: device ready for use.
    pub const STATUS_READY: u64 = 1 << 0;
    /// `RNIC_REG_STATUS` bit: DMA engine enabled (mirrors `DMA_CTRL` bit 0).
    pub const STATUS_DMA_ENABLED: u64 = 1 << 1;
    /// `RNIC_REG_RESET` value that resets the device.
    pub const RESET_MAGIC: u64 = 0x1;
    /// `RNIC_REG_CAPS` bit: the verbs engine (QPs, CQs, MRs; WRITE/READ/SEND/RECV).
    pub const CAP_VERBS: u64 = 1 << 2;
    /// `RNIC_REG_CAPS` bit (minor 3): the doorbell page in BAR2 (`rnic::dbpage`), enabled
    /// by `DMA_CTRL_DB_PAGE`.
    pub const CAP_DB_PAGE: u64 = 1 << 3;
    /// `RNIC_REG_CAPS` bit (minor 4): the RoCEv2 fabric transport (QP contexts with
    /// `dest_ip`); this node is attached when `RNIC_REG_IPV4` is not 0.
    pub const CAP_FABRIC: u64 = 1 << 4;
    /// `RNIC_REG_CAPS` bit (minor 4): peer-to-peer DMA to GPU BAR1 through
    /// `BAR1_APERTURE` slots; `RNIC_REG_NUM_GPUS` says how many GPUs are reachable.
    pub const CAP_P2P: u64 = 1 << 5;
    /// `RNIC_REG_CAPS` bit (minor 7): the Ethernet port (`ETH_*` registers, the netdev's
    /// descriptor rings; docs/programming.md "The Ethernet port").
    pub const CAP_ETH: u64 = 1 << 6;
    /// `RNIC_REG_CAPS` bit (minor 9): the Ethernet port's transmit offloads: frames over
    /// several descriptors (`eth::TX_MORE`), checksum insertion (`eth::TX_CSUM`), TCP
    /// segmentation (`eth::TX_TSO`).
    pub const CAP_ETH_OFFLOAD: u64 = 1 << 7;
    /// Every capability bit this device sets (the reset value of `RNIC_REG_CAPS`).
    pub const CAPS_ALL: u64 = CAP_MSIX | CAP_INT_TEST | CAP_VERBS | CAP_DB_PAGE | CAP_FABRIC | CAP_P2P | CAP_ETH | CAP_ETH_OFFLOAD;
    /// `RNIC_REG_STATUS` bit: an asynchronous error was latched (see `RNIC_REG_LAST_ERROR`).
    pub const STATUS_ERROR: u64 = 1 << 2;
    /// `RNIC_REG_STATUS` bit: the verbs engine failed internally (fatal error); commands
    /// answer CMD_ERR_FATAL and doorbells are dropped until a device reset (RNIC_REG_RESET,
    /// FLR or vfio-user reset) clears it.
    pub const STATUS_FATAL: u64 = 1 << 3;
    /// `RNIC_REG_STATUS` bit (minor 6): the function needs a Function Level Reset; it acts
    /// as FATAL, and RNIC_REG_RESET does not clear it (FLR or a vfio-user reset does).
    pub const STATUS_FLR_REQUIRED: u64 = 1 << 4;
    /// `DMA_CTRL` bit 0: DMA engine enable (work requests wait while it is clear).
    pub const DMA_CTRL_ENABLE: u64 = 1 << 0;
    /// `DMA_CTRL` bit 1: completion interrupts enable (armed CQs raise their MSI-X vector).
    pub const DMA_CTRL_INT_ENABLE: u64 = 1 << 1;
    /// `DMA_CTRL` bit 2 (minor 3): the engine also takes producer and consumer indices from
    /// the doorbell page and publishes event indices there (`rnic::dbpage`).
    pub const DMA_CTRL_DB_PAGE: u64 = 1 << 2;
    /// Shift of the object number in the doorbell and command registers ([31:16]).
    pub const DB_OBJECT_SHIFT: u32 = 16;
    /// Mask of the ring index in doorbell registers ([15:0]).
    pub const DB_INDEX_MASK: u64 = 0xffff;
    /// Shift of the command opcode in `RNIC_REG_CMD` ([31:24]); the object index is [23:0].
    pub const CMD_OP_SHIFT: u32 = 24;
    /// Mask of the object index in `RNIC_REG_CMD`.
    pub const CMD_INDEX_MASK: u64 = 0x00ff_ffff;
    /// Limits of this device (also readable from the MAX_* registers).
    pub const MAX_QP: u64 = 256;
    pub const MAX_CQ: u64 = 256;
    pub const MAX_MR: u64 = 4096;
    /// Largest ring (SQ, RQ, CQ) in entries: indices are 16-bit.
    pub const MAX_RING_LOG2: u64 = 15;
    /// Statistics counters: 64-bit, read-only, from `STATS_BASE`, indexed by `stats::Counter`.
    pub const STATS_BASE: u64 = 0x4000;
    /// BAR1_APERTURE slots (0x2000 + 8 * i).
    pub const APERTURE_SLOTS: usize = 4;

    /// The doorbell page (BAR2, contract minor 3): shared memory in which the driver writes
    /// producer/consumer indices with plain stores and the device publishes, per queue,
    /// the index after which it wants an MMIO doorbell (event index, as virtio's
    /// `avail_event` / NVMe's Doorbell Buffer Config EventIdx). One 4 KiB page per object,
    /// so a page can be mapped to the one process that owns the object. All fields are
    /// 32-bit little-endian; indices use the low 16 bits. docs/verbs.md §3.1 has the
    /// protocol and the race argument.
    pub mod dbpage {
        /// Size of one object's page.
        pub const PAGE: u64 = 0x1000;
        /// Page of QP `q`: `q * PAGE`.
        pub const QP_PAGES: u64 = 0;
        /// Page of CQ `c`: `CQ_PAGES + c * PAGE`.
        pub const CQ_PAGES: u64 = super::MAX_QP * PAGE;
        /// QP page: send-queue producer index (driver writes).
        pub const SQ_PI: u64 = 0x0;
        /// QP page: receive-queue producer index (driver writes).
        pub const RQ_PI: u64 = 0x4;
        /// QP page: send-queue event index (device writes): ring `WQE_DB_IDX` when the
        /// producer index moves past it.
        pub const SQ_EVENT: u64 = 0x8;
        /// QP page: receive-queue event index (device writes), for `RQ_DB_IDX`.
        pub const RQ_EVENT: u64 = 0xc;
        /// CQ page: consumer index (driver writes; replaces `CQE_CONS_IDX` writes).
        pub const CQ_CI: u64 = 0x0;
    }

    /// The Ethernet port (minor 7): the frames of the netdev, beside the RoCE traffic of
    /// the verbs engine, on the same link. Bits and limits of the `ETH_*` registers.
    pub mod eth {
        /// `ETH_CTRL` bit: receive frames into the receive ring.
        pub const CTRL_RX_EN: u64 = 1 << 0;
        /// `ETH_CTRL` bit: transmit frames from the transmit ring.
        pub const CTRL_TX_EN: u64 = 1 << 1;
        /// `ETH_CTRL` bit: promiscuous: unicast frames for any MAC reach the receive ring
        /// (RoCE frames for this port's MAC still go to the verbs engine).
        pub const CTRL_PROMISC: u64 = 1 << 2;
        /// `ETH_CTRL` bit (minor 9, CAP_ETH_OFFLOAD): check the TCP/UDP checksum of each
        /// received IPv4/IPv6 frame and mark the good ones DESC_CSUM_OK.
        pub const CTRL_RX_CSUM: u64 = 1 << 3;
        /// `ETH_LINK` bit: the port is attached to a segment and the link is up.
        pub const LINK_UP: u64 = 1 << 0;
        /// Smallest and largest `ETH_MTU` (bytes of an L3 packet, as the netdev's MTU).
        pub const MIN_MTU: u64 = 68;
        pub const MAX_MTU: u64 = 9000;
        /// Ring sizes, log2 of the entry count, in `ETH_TXQ_LOG`/`ETH_RXQ_LOG`.
        pub const MIN_RING_LOG2: u64 = 1;
        pub const MAX_RING_LOG2: u64 = 12;
        /// Ethernet header without a VLAN tag: the frame length is the L3 length + 14.
        pub const HEADER_LEN: u64 = 14;
        /// Shortest frame the transmit ring takes (an Ethernet header and no payload are
        /// refused; the device pads nothing).
        pub const MIN_FRAME: u64 = 14;
        /// `rnic_eth_desc.flags`: the device is done with the descriptor (written last).
        pub const DESC_DONE: u8 = 1 << 0;
        /// `rnic_eth_desc.flags`: transmit: the frame was refused (length, DMA, link down)
        /// and counted in ETH_TX_ERRORS. Receive: the buffer is handed back empty (`len` 0):
        /// it was smaller than the frame (ETH_RX_NO_BUFFER) or not mapped memory (DMA_ERRORS).
        pub const DESC_ERR: u8 = 1 << 1;
        /// `rnic_eth_desc.flags`, receive (minor 9, with ETH_CTRL RX_CSUM): the frame is an
        /// IPv4 or IPv6 TCP or UDP packet whose IPv4 header checksum and TCP/UDP checksum
        /// (pseudo-header included) the device found right. Clear: not checked or wrong.
        pub const DESC_CSUM_OK: u8 = 1 << 2;
        /// `rnic_eth_desc.flags`, transmit, from the driver (minor 9): the frame goes on in
        /// the next descriptor. Set on every descriptor of a frame but the last.
        pub const TX_MORE: u8 = 1 << 4;
        /// `rnic_eth_desc.flags`, transmit, first descriptor (minor 9): the device stores the
        /// 16-bit ones'-complement checksum of the frame from `csum_start` to its end at
        /// `csum_start + csum_offset` (the field's value, e.g. a pseudo-header sum, counts).
        pub const TX_CSUM: u8 = 1 << 5;
        /// `rnic_eth_desc.flags`, transmit, first descriptor (minor 9), with TX_CSUM: the
        /// frame is one IPv4 or IPv6 TCP packet that the device cuts into segments of `mss`
        /// payload bytes, each with the headers, lengths, IPv4 ID, sequence number, flags and
        /// checksums fixed up.
        pub const TX_TSO: u8 = 1 << 6;
        /// Most descriptors one transmitted frame may span (minor 9).
        pub const TX_MAX_DESCS: u64 = 32;
        /// Most TCP payload bytes of a TX_TSO frame (minor 9); its headers come on top.
        pub const TSO_MAX_PAYLOAD: u64 = 65536;
    }

    register_map!(REGS {
        /// Identification: reads the ASCII magic "RNIC" (0x524E4943).
        RNIC_REG_ID = 0x0000, 4, Ro, reset 0x524e4943, writable 0x0;
        /// Register-contract version, major << 16 | minor.
        RNIC_REG_VERSION = 0x0004, 4, Ro, reset 0x00010010, writable 0x0;
        /// Capability bits (CAP_*).
        RNIC_REG_CAPS = 0x0008, 4, Ro, reset 0xff, writable 0x0;
        /// Device status (STATUS_*): READY is always set while the device serves; ERROR while
        /// RNIC_REG_LAST_ERROR holds an error (reading that register clears both); FATAL from
        /// an internal engine failure until the next device reset.
        RNIC_REG_STATUS = 0x000c, 4, Ro, reset 0x3, writable 0x0;
        /// Write RESET_MAGIC to return every register to its reset value.
        RNIC_REG_RESET = 0x0010, 4, Wo, reset 0x0, writable 0xffffffff;
        /// Number of MSI-X vectors the function offers.
        RNIC_REG_NUM_VECTORS = 0x0014, 4, Ro, reset 0x8, writable 0x0;
        /// Scratch register for driver self-tests; no effect on the device.
        RNIC_REG_SCRATCH = 0x0018, 4, Rw, reset 0x0, writable 0xffffffff;
        /// Write a vector number to raise that MSI-X vector (interrupt self-test).
        RNIC_REG_INT_TRIGGER = 0x0020, 4, Wo, reset 0x0, writable 0xffffffff;
        /// Count of interrupts the device has raised since reset.
        RNIC_REG_INT_COUNT = 0x0024, 4, Ro, reset 0x0, writable 0x0;
        /// Number of QP contexts (QPNs 0..MAX_QP-1).
        RNIC_REG_MAX_QP = 0x0028, 4, Ro, reset 0x100, writable 0x0;
        /// Number of CQ contexts.
        RNIC_REG_MAX_CQ = 0x002c, 4, Ro, reset 0x100, writable 0x0;
        /// Number of MR contexts (key index range).
        RNIC_REG_MAX_MR = 0x0030, 4, Ro, reset 0x1000, writable 0x0;
        /// log2 of the largest SQ/RQ/CQ ring in entries.
        RNIC_REG_MAX_RING_LOG2 = 0x0034, 4, Ro, reset 0xf, writable 0x0;
        /// Number of GPUs on this node whose BAR1 the RNIC can reach peer-to-peer.
        RNIC_REG_NUM_GPUS = 0x0038, 4, Ro, reset 0x0, writable 0x0;
        /// This RNIC's IPv4 address on the fabric (a << 24 | b << 16 | c << 8 | d), 0: none.
        /// Its GID is the IPv4-mapped IPv6 address ::ffff:a.b.c.d; UDP port 4791.
        RNIC_REG_IPV4 = 0x003c, 4, Ro, reset 0x0, writable 0x0;
        /// Command: write op << 24 | object index; executes before the next register access.
        RNIC_REG_CMD = 0x0040, 4, Wo, reset 0x0, writable 0xffffffff;
        /// Result of the last command: 0 or an error code (CMD_ERR_*).
        RNIC_REG_CMD_STATUS = 0x0044, 4, Ro, reset 0x0, writable 0x0;
        /// Last asynchronous error: code << 24 | object index (0: none); cleared by reading.
        RNIC_REG_LAST_ERROR = 0x0048, 4, Ro, reset 0x0, writable 0x0;
        /// Base address of the QP context table (MAX_QP x 64-byte rnic_qp_ctx).
        QP_CTX_BASE = 0x1000, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Send-queue doorbell: QPN [31:16], new SQ producer index [15:0].
        WQE_DB_IDX = 0x1008, 4, Rw, reset 0x0, writable 0xffffffff;
        /// CQ consumer index: CQN [31:16], new consumer index [15:0].
        CQE_CONS_IDX = 0x100c, 4, Rw, reset 0x0, writable 0xffffffff;
        /// Receive-queue doorbell: QPN [31:16], new RQ producer index [15:0].
        RQ_DB_IDX = 0x1010, 4, Rw, reset 0x0, writable 0xffffffff;
        /// Arm a CQ: CQN [31:16]; its next completion raises the CQ's MSI-X vector once.
        CQ_ARM = 0x1014, 4, Wo, reset 0x0, writable 0xffffffff;
        /// Base address of the CQ context table (MAX_CQ x 32-byte rnic_cq_ctx).
        CQ_CTX_BASE = 0x1018, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Bus address of a local GPU's BAR1 the driver allows peer-to-peer DMA to.
        BAR1_APERTURE = 0x2000, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Aperture slot 1 (a second GPU); same meaning as BAR1_APERTURE.
        BAR1_APERTURE_1 = 0x2008, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Aperture slot 2.
        BAR1_APERTURE_2 = 0x2010, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Aperture slot 3.
        BAR1_APERTURE_3 = 0x2018, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// DMA engine control [7:0]: bit 0 engine enable, bit 1 completion
        /// interrupts, bit 2 doorbell page (DMA_CTRL_*); bits 3-7 reserved, ignored.
        DMA_CTRL = 0x3000, 4, Rw, reset 0x1, writable 0xff;
        /// Base address of the memory translation table (64-bit page addresses).
        MTT_BASE = 0x3010, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Base address of the MR context table (MAX_MR x 32-byte rnic_mr_ctx).
        MR_CTX_BASE = 0x3018, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Number of 8-byte entries at MTT_BASE.
        MTT_ENTRIES = 0x3020, 4, Rw, reset 0x0, writable 0xffffffff;
        /// Base address of the QP path table (minor 8; MAX_QP x 32-byte rnic_qp_path),
        /// read at each RTR of a fabric QP; 0: no table (the path follows from dest_ip).
        QP_PATH_BASE = 0x3028, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Base address of the GID table (minor 8; GID_TABLE_LEN x 32-byte rnic_gid_entry),
        /// read by CMD_SET_GID.
        GID_TABLE_BASE = 0x3030, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Base address of the event queue (minor 11; 2^EQ_LOG x 16-byte rnic_eqe, 16-byte
        /// aligned), read by CMD_SET_EQ.
        EQ_BASE = 0x3038, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// log2 of the event queue's entries (minor 11; 1..=12, 0: no queue), read by
        /// CMD_SET_EQ.
        EQ_LOG = 0x3040, 4, Rw, reset 0x0, writable 0xf;
        /// Event queue consumer index (minor 11): entries the driver has consumed, a
        /// free-running 32-bit count; one behind the last written or past the producer is
        /// ignored.
        EQ_CI = 0x3044, 4, Rw, reset 0x0, writable 0xffffffff;
        /// Ethernet port: the permanent MAC address (minor 7): bytes in wire order from
        /// bits [7:0] up to [47:40]. Locally administered, unique per node: 02:e1:a:b:c:d
        /// from RNIC_REG_IPV4 a.b.c.d when the node has one, else 06:e1: and four bytes of a
        /// stable hash of the function's name.
        ETH_PERM_MAC = 0x3100, 8, Ro, reset 0x0, writable 0x0;
        /// The port's MAC: the unicast receive filter and the source of every frame the
        /// device builds (RoCE). Byte order as ETH_PERM_MAC; reset copies ETH_PERM_MAC. Any
        /// value is taken (the driver keeps it a unicast address).
        ETH_MAC = 0x3108, 8, Rw, reset 0x0, writable 0xffffffffffff;
        /// MTU in bytes of an L3 packet (eth::MIN_MTU..=eth::MAX_MTU; another value is
        /// refused and the register keeps its value). Frames longer than MTU + 14 are
        /// dropped both ways, and the RoCE path MTU of every QP is capped to fit it.
        ETH_MTU = 0x3110, 4, Rw, reset 0x5dc, writable 0xffff;
        /// Port control (eth::CTRL_*): receive enable, transmit enable, promiscuous, receive
        /// checksum check (RX_CSUM, minor 9). Setting
        /// an enable bit takes the ring's base and size and starts it at index 0 (its PI
        /// register reads 0); clearing it stops the ring (descriptors not done stay not done,
        /// CI keeps its value). Synchronous. Reads back the rings that run: an enable refused
        /// (base not 16-byte aligned, size outside the limits; a guest error) or a ring
        /// stopped because its descriptors are not mapped memory (DMA_ERRORS) reads 0.
        ETH_CTRL = 0x3114, 4, Rw, reset 0x0, writable 0xf;
        /// Link state (eth::LINK_*): up while the node is attached to a segment.
        ETH_LINK = 0x3118, 4, Ro, reset 0x0, writable 0x0;
        /// Link speed in Mb/s, as reported to ethtool.
        ETH_SPEED = 0x311c, 4, Ro, reset 0x186a0, writable 0x0;
        /// MSI-X vector of the Ethernet rings; a vector the function does not have is refused
        /// (a guest error, the register keeps its value).
        ETH_VECTOR = 0x3120, 4, Rw, reset 0x0, writable 0xffff;
        /// Arm the Ethernet interrupt: write rx_ci << 16 | tx_ci, the ring indices the driver
        /// has processed up to. The vector is raised once: at once if either ring's device
        /// index already differs from the written one, else at the next completed descriptor.
        /// Takes ETH_VECTOR as it is at the arm. With DMA_CTRL_INT_ENABLE clear nothing is
        /// raised: an arm over unseen descriptors disarms, a completion leaves it armed.
        ETH_ARM = 0x3124, 4, Wo, reset 0x0, writable 0xffffffff;
        /// Bus address of the transmit ring (2^ETH_TXQ_LOG x 16-byte rnic_eth_desc), taken
        /// when ETH_CTRL's TX enable is set.
        ETH_TXQ_BASE = 0x3128, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// log2 of the transmit ring's entries (eth::MIN_RING_LOG2..=eth::MAX_RING_LOG2).
        ETH_TXQ_LOG = 0x3130, 4, Rw, reset 0x0, writable 0xf;
        /// Transmit doorbell: the driver's producer index [15:0] (free-running; entry =
        /// index mod ring size). Descriptors up to it hold frames to send (minor 9: a frame
        /// may span several, TX_MORE on all but its last, which it waits for); a frame
        /// outside 14..=MTU + 14 bytes (a TX_TSO frame: up to 64 KiB of TCP payload beyond
        /// its headers), a malformed offload request, or one sent with the link down,
        /// completes with DESC_ERR on each of its descriptors. Ignored
        /// while the ring is off; an index more than the ring's size ahead of ETH_TXQ_CI is
        /// refused (a guest error). With DMA_CTRL ENABLE clear descriptors wait.
        ETH_TXQ_PI = 0x3134, 4, Rw, reset 0x0, writable 0xffff;
        /// The device's transmit consumer index: descriptors before it are done.
        ETH_TXQ_CI = 0x3138, 4, Ro, reset 0x0, writable 0x0;
        /// Bus address of the receive ring, taken when ETH_CTRL's RX enable is set.
        ETH_RXQ_BASE = 0x3140, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// log2 of the receive ring's entries.
        ETH_RXQ_LOG = 0x3148, 4, Rw, reset 0x0, writable 0xf;
        /// Receive doorbell: the driver's producer index [15:0]; descriptors up to it hold
        /// empty buffers (rules as ETH_TXQ_PI). A frame that finds no buffer, or arrives with
        /// the ring off or DMA_CTRL ENABLE clear, is dropped (ETH_RX_NO_BUFFER).
        ETH_RXQ_PI = 0x314c, 4, Rw, reset 0x0, writable 0xffff;
        /// The device's receive index: descriptors before it hold received frames.
        ETH_RXQ_CI = 0x3150, 4, Ro, reset 0x0, writable 0x0;
    });
}

/// GPU BAR0 registers.
pub mod gpu {
    /// `GPU_REG_ID` value: ASCII "RGPU".
    pub const ID_MAGIC: u32 = 0x5247_5055;

    register_map!(REGS {
        /// Identification: reads the ASCII magic "RGPU" (0x52475055).
        GPU_REG_ID = 0x0000, 4, Ro, reset 0x52475055, writable 0x0;
        /// Register-contract version, major << 16 | minor.
        GPU_REG_VERSION = 0x0004, 4, Ro, reset 0x00010010, writable 0x0;
        /// Size of the BAR1 memory aperture in bytes (set from the node description).
        GPU_REG_MEM_SIZE = 0x0008, 8, Ro, reset 0x0, writable 0x0;
        /// Scratch register for driver self-tests; no effect on the device.
        GPU_REG_SCRATCH = 0x0010, 4, Rw, reset 0x0, writable 0xffffffff;
        /// Write a vector number to raise that MSI-X vector (interrupt self-test).
        GPU_REG_INT_TRIGGER = 0x0014, 4, Wo, reset 0x0, writable 0xffffffff;
        /// Count of interrupts the device has raised since reset.
        GPU_REG_INT_COUNT = 0x0018, 4, Ro, reset 0x0, writable 0x0;
        /// Engine: source offset in BAR1 (COPY, REDUCE), bytes.
        GPU_ENG_SRC = 0x0100, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Engine: second source offset in BAR1 (REDUCE).
        GPU_ENG_SRC2 = 0x0108, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Engine: destination offset in BAR1.
        GPU_ENG_DST = 0x0110, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Engine: length in bytes (FILL32 and REDUCE: a multiple of 4).
        GPU_ENG_LEN = 0x0118, 8, Rw, reset 0x0, writable 0xffffffffffffffff;
        /// Engine: 32-bit fill value (FILL32).
        GPU_ENG_VALUE = 0x0120, 4, Rw, reset 0x0, writable 0xffffffff;
        /// Engine: MSI-X vector raised when an operation ends.
        GPU_ENG_VECTOR = 0x0124, 4, Rw, reset 0x0, writable 0xffff;
        /// Engine: write ENG_OP_* to launch with the registers above (like a kernel launch).
        GPU_ENG_LAUNCH = 0x0128, 4, Wo, reset 0x0, writable 0xffffffff;
        /// Engine status: bit 0 busy; [15:8] result of the last operation (ENG_ERR_*).
        GPU_ENG_STATUS = 0x012c, 4, Ro, reset 0x0, writable 0x0;
        /// Engine: operations completed since reset (successful or not).
        GPU_ENG_DONE = 0x0130, 4, Ro, reset 0x0, writable 0x0;
        /// Statistics: operations that completed successfully.
        GPU_STAT_OPS = 0x0200, 8, Ro, reset 0x0, writable 0x0;
        /// Statistics: bytes the engine wrote.
        GPU_STAT_BYTES = 0x0208, 8, Ro, reset 0x0, writable 0x0;
    });

    /// GPU_ENG_LAUNCH: fill [DST, DST+LEN) with the 32-bit VALUE.
    pub const ENG_OP_FILL32: u64 = 1;
    /// GPU_ENG_LAUNCH: copy LEN bytes from SRC to DST (overlap allowed).
    pub const ENG_OP_COPY: u64 = 2;
    /// GPU_ENG_LAUNCH: DST[i] = SRC[i] + SRC2[i] over LEN/4 little-endian f32 elements.
    pub const ENG_OP_REDUCE_SUM_F32: u64 = 3;
    /// GPU_ENG_STATUS bit 0.
    pub const ENG_STATUS_BUSY: u64 = 1;
    /// Result codes in GPU_ENG_STATUS [15:8].
    pub const ENG_OK: u64 = 0;
    pub const ENG_ERR_BAD_OP: u64 = 1;
    pub const ENG_ERR_RANGE: u64 = 2;
    pub const ENG_ERR_ALIGN: u64 = 3;
    pub const ENG_ERR_BUSY: u64 = 4;
    /// The engine failed internally (a contained panic): this and every later launch
    /// completes with it until the GPU is reset (FLR or vfio-user device reset).
    pub const ENG_ERR_FATAL: u64 = 5;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_table(regs: &[RegDef]) {
        for (i, r) in regs.iter().enumerate() {
            assert!(r.width == 4 || r.width == 8, "{}", r.name);
            assert_eq!(r.offset % u64::from(r.width), 0, "{} misaligned", r.name);
            for other in &regs[i + 1..] {
                let disjoint = r.offset + u64::from(r.width) <= other.offset || other.offset + u64::from(other.width) <= r.offset;
                assert!(disjoint, "{} overlaps {}", r.name, other.name);
            }
            assert!(r.offset + u64::from(r.width) <= pci_ids::MSIX_TABLE_OFFSET);
        }
    }

    #[test]
    fn tables_are_aligned_and_disjoint() {
        check_table(rnic::REGS);
        check_table(gpu::REGS);
    }

    #[test]
    fn seed_offsets_and_reset_values() {
        assert_eq!(rnic::QP_CTX_BASE, 0x1000);
        assert_eq!(rnic::WQE_DB_IDX, 0x1008);
        assert_eq!(rnic::CQE_CONS_IDX, 0x100C);
        assert_eq!(rnic::BAR1_APERTURE, 0x2000);
        assert_eq!(rnic::DMA_CTRL, 0x3000);
        assert_eq!(rnic::MTT_BASE, 0x3010);
        let dma = rnic::REGS.iter().find(|r| r.offset == rnic::DMA_CTRL).unwrap();
        assert_eq!(dma.reset, 0x01);
        let id = rnic::REGS.iter().find(|r| r.offset == rnic::RNIC_REG_ID).unwrap();
        assert_eq!(id.reset, u64::from(rnic::ID_MAGIC));
        let ver = rnic::REGS.iter().find(|r| r.offset == rnic::RNIC_REG_VERSION).unwrap();
        assert_eq!(ver.reset, u64::from(CONTRACT_VERSION));
        let gver = gpu::REGS.iter().find(|r| r.offset == gpu::GPU_REG_VERSION).unwrap();
        assert_eq!(gver.reset, u64::from(CONTRACT_VERSION), "both functions report the contract version");
        let nv = rnic::REGS.iter().find(|r| r.offset == rnic::RNIC_REG_NUM_VECTORS).unwrap();
        assert_eq!(nv.reset, u64::from(pci_ids::RNIC_MSIX_VECTORS));
        let caps = rnic::REGS.iter().find(|r| r.offset == rnic::RNIC_REG_CAPS).unwrap();
        assert_eq!(caps.reset, rnic::CAPS_ALL);
        assert_eq!(CHANGELOG.last().map(|c| c.0), Some(CONTRACT_VERSION), "the changelog names the current version");
        let limits = [
            (rnic::RNIC_REG_MAX_QP, rnic::MAX_QP),
            (rnic::RNIC_REG_MAX_CQ, rnic::MAX_CQ),
            (rnic::RNIC_REG_MAX_MR, rnic::MAX_MR),
            (rnic::RNIC_REG_MAX_RING_LOG2, rnic::MAX_RING_LOG2),
        ];
        for (reg, v) in limits {
            assert_eq!(rnic::REGS.iter().find(|r| r.offset == reg).unwrap().reset, v);
        }
        let gid = gpu::REGS.iter().find(|r| r.offset == gpu::GPU_REG_ID).unwrap();
        assert_eq!(gid.reset, u64::from(gpu::ID_MAGIC));
    }
}
