//! Descriptor layouts shared with the guest driver: WQE, SGE, CQE and the QP/CQ/MR
//! contexts the driver places in guest memory. Little-endian, `#[repr(C)]`, explicit
//! reserved fields, sizes asserted at compile time here and (generated) in the C header.
//! Also the opcodes, flags, completion statuses and command codes that go in them.
//!
//! Each struct is declared once with [`abi_struct!`], which also records its fields so that
//! [`super::render::c_header`] can render the matching C struct with offset assertions.

use vm_memory::ByteValued;

/// One field of a descriptor, for rendering the C header.
#[derive(Clone, Copy, Debug)]
pub struct AbiField {
    pub name: &'static str,
    pub c_type: &'static str,
    pub offset: usize,
    pub doc: &'static str,
}

/// A descriptor's C name, size and fields.
#[derive(Clone, Copy, Debug)]
pub struct AbiStruct {
    pub c_name: &'static str,
    pub size: usize,
    pub doc: &'static str,
    pub fields: &'static [AbiField],
}

macro_rules! c_type {
    (u8) => {
        "__u8"
    };
    (u16) => {
        "__u16"
    };
    (u32) => {
        "__u32"
    };
    (u64) => {
        "__u64"
    };
}

macro_rules! abi_struct {
    ($(#[doc = $doc:literal])+ $name:ident, $c_name:literal, $size:literal {
        $( $(#[doc = $fdoc:literal])+ $field:ident : $ty:ident, )*
    }) => {
        $(#[doc = $doc])+
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name { $( $(#[doc = $fdoc])+ pub $field: $ty, )* }
        const _: () = assert!(std::mem::size_of::<$name>() == $size);
        // SAFETY: a repr(C) struct of plain integers whose size equals the sum of its
        // fields (asserted above through the explicit reserved fields): no padding, and
        // every bit pattern is a valid value.
        unsafe impl ByteValued for $name {}
        impl $name {
            pub const ABI: AbiStruct = AbiStruct {
                c_name: $c_name,
                size: $size,
                doc: concat!($($doc),+),
                fields: &[ $( AbiField {
                    name: stringify!($field),
                    c_type: c_type!($ty),
                    offset: std::mem::offset_of!($name, $field),
                    doc: concat!($($fdoc),+),
                }, )* ],
            };
        }
    };
}

abi_struct!(
    /// Work-queue entry header (SQ and RQ). SGEs (or inline data) follow it up to the
    /// queue's stride (64, 128 or 256 bytes).
    WqeHeader, "rnic_wqe", 32 {
        /// WQE_OP_*.
        opcode: u8,
        /// WQE_FLAG_*.
        flags: u8,
        /// Scatter/gather entries that follow (0..=(stride-32)/16).
        num_sge: u8,
        /// Reserved, 0; for WQE_OP_FLUSH (minor 14) the FETH byte: the placement type
        /// (FLUSH_TYPE_*) in bits [3:0], the selectivity level (FLUSH_LEVEL_*) in [5:4].
        rsvd0: u8,
        /// Immediate data (WRITE_IMM, SEND_IMM), delivered to the receiver's CQE as is;
        /// for WQE_OP_FLUSH (minor 14) the length of the range to flush (FLUSH_LEVEL_RANGE).
        imm_data: u32,
        /// Caller's cookie, returned in the CQE.
        wr_id: u64,
        /// Remote virtual address (WRITE, WRITE_IMM, READ, atomics, FLUSH, ATOMIC_WRITE); on a
        /// UD QP (minor 16) bits [23:0] the destination QP, the rest 0.
        remote_addr: u64,
        /// Remote key (WRITE, WRITE_IMM, READ, atomics, FLUSH, ATOMIC_WRITE); on a UD QP
        /// (minor 16) the Q_Key sent, or, with bit 31 set, the QP's own Q_Key instead.
        rkey: u32,
        /// Inline payload length in bytes (with WQE_FLAG_INLINE; data follows the header).
        inline_len: u32,
    }
);

abi_struct!(
    /// Event-queue entry (minor 11): an asynchronous event. Valid when `owner` equals the
    /// pass bit the consumer expects (1 on the first pass over the ring, then 0, ...).
    Eqe, "rnic_eqe", 16 {
        /// EQE_*.
        event: u8,
        /// Reserved, 0.
        rsvd0: u8,
        /// Reserved, 0.
        rsvd1: u8,
        /// Ownership/pass bit, written last.
        owner: u8,
        /// The QP (QP events) or CQ (EQE_CQ_ERR) the event is about.
        object: u32,
        /// QP_ERR_* reason of a QP event, 0 otherwise.
        syndrome: u32,
        /// Reserved, 0.
        rsvd2: u32,
    }
);

abi_struct!(
    /// The operands of an atomic WQE (minor 12), right after its header; its one SGE
    /// follows them (an ATOMIC_WRITE, minor 14, has none).
    AtomicOps, "rnic_atomic_ops", 16 {
        /// CMP_SWP: the value written if the target equals `compare`; FETCH_ADD: the addend;
        /// ATOMIC_WRITE (minor 14): the 8 bytes written, in memory order.
        swap_add: u64,
        /// CMP_SWP: the value compared with the target; FETCH_ADD and ATOMIC_WRITE: 0.
        compare: u64,
    }
);

abi_struct!(
    /// The address vector of a UD send WQE (minor 16), right after its header; its SGEs
    /// (or inline data) follow it, so a UD send queue needs a stride of 128 or 256 for any payload
    /// (64 leaves room for none).
    /// The destination's family is its GID's: an IPv4-mapped GID (::ffff:a.b.c.d) is
    /// RoCEv2 over IPv4, any other unicast GID over IPv6. A destination that is an address
    /// of the port is this RNIC's own QP (loopback, no wire).
    UdAv, "rnic_ud_av", 32 {
        /// Destination GID bytes 0-7 in wire order (a memcpy of the 16-byte GID fills both).
        dest_gid_lo: u64,
        /// Destination GID bytes 8-15 in wire order.
        dest_gid_hi: u64,
        /// Next-hop MAC, as rnic_qp_path's: six bytes in wire order in bits [47:0], bits
        /// 63:48 0; 0 only for an IPv4 destination (the rnic-emu convention 02:e1:a.b.c.d)
        /// or one of the port's own addresses.
        dest_mac: u64,
        /// The IPv4 TOS byte / IPv6 traffic class of the packet.
        traffic_class: u8,
        /// The IPv4 TTL / IPv6 hop limit of the packet; 0 means 64.
        hop_limit: u8,
        /// The GID table entry whose address is the source, of the destination's family.
        sgid_index: u8,
        /// Reserved, 0.
        flags: u8,
        /// Reserved, 0.
        rsvd: u32,
    }
);

abi_struct!(
    /// A scatter/gather entry: a local buffer described by its virtual address and lkey.
    Sge, "rnic_sge", 16 {
        /// Virtual address inside the MR named by lkey.
        addr: u64,
        /// Bytes.
        length: u32,
        /// Local key of the MR.
        lkey: u32,
    }
);

abi_struct!(
    /// Completion-queue entry. Valid when `owner` equals the pass bit the consumer expects:
    /// 1 on the first pass over the ring, 0 on the second, and so on.
    Cqe, "rnic_cqe", 32 {
        /// The completed work request's wr_id.
        wr_id: u64,
        /// Bytes transferred (receives: bytes placed; READ: bytes read).
        byte_len: u32,
        /// Immediate data (with CQE_FLAG_IMM).
        imm_data: u32,
        /// The local QP.
        qpn: u32,
        /// The sending QP (receive completions; on a UD QP, minor 16, the DETH's source QP).
        src_qp: u32,
        /// CQE_OP_*.
        opcode: u8,
        /// WC_* completion status (InfiniBand ibv_wc_status numbering).
        status: u8,
        /// CQE_FLAG_*.
        flags: u8,
        /// Ownership/pass bit, written last.
        owner: u8,
        /// Vendor syndrome: QP_ERR_* reason for error completions.
        syndrome: u32,
    }
);

abi_struct!(
    /// QP context at QP_CTX_BASE + qpn * 64. The driver fills it and issues
    /// CMD_MODIFY_QP; the device copies it once, validates, and writes back `state`,
    /// `err_reason`, `sq_ci` and `rq_ci` (also on CMD_QUERY_QP).
    QpCtx, "rnic_qp_ctx", 64 {
        /// Requested state for CMD_MODIFY_QP; current state after any command (QPS_*).
        state: u8,
        /// Why the QP entered ERROR (QP_ERR_*), written by the device.
        err_reason: u8,
        /// log2 of SQ entries (0..=15).
        sq_log_size: u8,
        /// log2 of RQ entries (0..=15).
        rq_log_size: u8,
        /// log2 of the SQ WQE stride: 6, 7 or 8 (64, 128, 256 bytes).
        sq_log_stride: u8,
        /// log2 of the RQ WQE stride: 6, 7 or 8; 0 (minor 15): the QP has no RQ of its own
        /// and receives from the SRQ (QP_TYPE_SRQ) whose QPN is rq_addr.
        rq_log_stride: u8,
        /// ACCESS_REMOTE_* operations remote peers may perform on this QP.
        access: u8,
        /// RNR retries (0..=7; 7 = retry forever).
        rnr_retry: u8,
        /// Protection domain.
        pd: u32,
        /// CQ for send completions.
        send_cqn: u32,
        /// CQ for receive completions.
        recv_cqn: u32,
        /// Bits [23:0]: the destination QP (set for RTR): on one node, another QP of this
        /// RNIC. Bits [31:24] (minor 13; before: 0): the QP's service, QP_TYPE_*, taken at
        /// RESET -> INIT and ignored by later commands.
        dest_qpn: u32,
        /// Minimum RNR delay in microseconds before a retry.
        rnr_timer_us: u32,
        /// IPv4 address of the destination node's RNIC (a.b.c.d as a << 24 | ...), for RTR;
        /// 0: the destination QP is on this RNIC (loopback, no wire). On a UD QP (minor 16):
        /// its Q_Key, taken by every edge but those to RESET and ERR.
        dest_ip: u32,
        /// Bus address of the SQ ring.
        sq_addr: u64,
        /// Bus address of the RQ ring.
        rq_addr: u64,
        /// SQ consumer index (device writeback).
        sq_ci: u16,
        /// RQ consumer index (device writeback).
        rq_ci: u16,
        /// First PSN this QP sends (24 bits), taken at RTS.
        sq_psn: u32,
        /// First PSN this QP expects to receive (24 bits), taken at RTR.
        rq_psn: u32,
        /// Path MTU as log2 of bytes: 8..=12 (256..4096); 0 means 4096. Taken at RTR.
        path_mtu: u8,
        /// Transport retries after a timeout or sequence NAK (0..=7), taken at RTS.
        retry_cnt: u8,
        /// Local ACK timeout exponent: 4.096 us * 2^timeout (1..=31); 0: never. At RTS.
        timeout: u8,
        /// (minor 12) RDMA READs and atomics outstanding: bits [3:0] as requester
        /// (max_rd_atomic, taken at RTS), bits [7:4] as responder (max_dest_rd_atomic,
        /// taken at RTR); 0 in a nibble means the device's 16 (earlier minors: reserved, 0).
        rd_atomic: u8,
    }
);

abi_struct!(
    /// CQ context at CQ_CTX_BASE + cqn * 32, read by CMD_CREATE_CQ.
    CqCtx, "rnic_cq_ctx", 32 {
        /// Bus address of the CQE ring (32-byte entries), zeroed by the driver.
        ring_addr: u64,
        /// log2 of CQ entries (0..=15).
        log_size: u8,
        /// Reserved, 0.
        rsvd0: u8,
        /// MSI-X vector raised when the armed CQ gets a completion.
        msix_vector: u16,
        /// Reserved, 0.
        rsvd1: u32,
        /// Reserved, 0.
        rsvd2: u64,
        /// Reserved, 0.
        rsvd3: u64,
    }
);

abi_struct!(
    /// MR context at MR_CTX_BASE + index * 32, read by CMD_REG_MR. The MR's pages are
    /// MTT entries [mtt_offset, mtt_offset + npages), each the bus address of one page.
    /// Keys: lkey = rkey = index << 8 | key.
    MrCtx, "rnic_mr_ctx", 32 {
        /// Virtual start address.
        iova: u64,
        /// Length in bytes.
        length: u64,
        /// Protection domain.
        pd: u32,
        /// First MTT entry.
        mtt_offset: u32,
        /// Number of MTT entries (pages).
        npages: u32,
        /// ACCESS_* flags.
        access: u8,
        /// Key byte (generation), the low 8 bits of lkey/rkey.
        key: u8,
        /// log2 of the page size (12..=30).
        page_shift: u8,
        /// Reserved, 0.
        rsvd0: u8,
    }
);

abi_struct!(
    /// QP path (minor 8) at QP_PATH_BASE + qpn * 32, read by CMD_MODIFY_QP to RTR when
    /// QP_PATH_BASE is not 0: the address vector the driver resolved for a fabric QP, as a
    /// RoCE NIC's QP context holds it. Without the table (a driver of an earlier minor) a
    /// fabric QP's path is the rnic-emu convention: the MAC 02:e1:a.b.c.d of dest_ip, TOS 0,
    /// TTL 64. With PATH_FLAG_IPV6 (minor 9) the QP talks RoCEv2 over IPv6: to dest_gid,
    /// from the IPv6 GID at sgid_index, and the context's dest_ip is 0 (an RTR with dest_ip
    /// 0 is loopback only without the flag).
    QpPath, "rnic_qp_path", 32 {
        /// Next-hop MAC: its six bytes in wire order from bits [7:0] up to [47:40] (as
        /// ETH_MAC), bits 63:48 0. 0: the rnic-emu convention above (IPv4 only; an IPv6
        /// path needs it).
        dest_mac: u64,
        /// The IPv4 TOS byte / the IPv6 traffic class (DSCP, ECN) of every packet of the QP.
        traffic_class: u8,
        /// The IPv4 TTL / the IPv6 hop limit of every packet of the QP; 0 means 64.
        hop_limit: u8,
        /// With PATH_FLAG_SGID: the GID table entry whose address is the source of every
        /// packet of the QP (an IPv4-mapped entry; with PATH_FLAG_IPV6 an IPv6 one); without
        /// it the source is RNIC_REG_IPV4.
        sgid_index: u8,
        /// PATH_FLAG_*.
        flags: u8,
        /// Reserved, 0.
        rsvd1: u32,
        /// With PATH_FLAG_IPV6 (minor 9; before: reserved, 0): destination GID bytes 0-7 in
        /// wire order (a memcpy of the 16-byte GID fills both halves); a unicast IPv6
        /// address, not IPv4-mapped, unspecified, loopback or multicast. Else 0.
        dest_gid_lo: u64,
        /// With PATH_FLAG_IPV6: destination GID bytes 8-15 in wire order. Else 0.
        dest_gid_hi: u64,
    }
);

abi_struct!(
    /// GID table entry (minor 8) at GID_TABLE_BASE + index * 32, index < GID_TABLE_LEN,
    /// read by CMD_SET_GID: one address of the port, as the driver's RoCE GID table holds
    /// it (ib_core fills that table from the netdev's addresses). An IPv4-mapped GID
    /// (::ffff:a.b.c.d) makes a.b.c.d an address of the port: RoCE packets to it are taken,
    /// and a QP path may name it as its source (QpPath sgid_index). Any other unicast GID
    /// (IPv6, minor 9) is an IPv6 address of the port: RoCE packets to it are taken, and a
    /// path with PATH_FLAG_IPV6 may send from it. Unspecified, loopback and multicast IPv6
    /// GIDs are kept but are no address of the port.
    GidEntry, "rnic_gid_entry", 32 {
        /// GID bytes 0-7 in wire order (as memory: a memcpy of the 16-byte GID fills both).
        gid_lo: u64,
        /// GID bytes 8-15 in wire order.
        gid_hi: u64,
        /// GID_FLAG_*; 0 removes the entry.
        flags: u8,
        /// Reserved, 0.
        rsvd0: u8,
        /// Reserved, 0.
        rsvd1: u16,
        /// Reserved, 0.
        rsvd2: u32,
        /// Reserved, 0.
        rsvd3: u64,
    }
);

abi_struct!(
    /// Ethernet descriptor (minor 7), an entry of the transmit or receive ring at
    /// ETH_TXQ_BASE / ETH_RXQ_BASE. The driver writes `addr` and `len` (and, transmit, the
    /// request bits of `flags` and the offload fields) then moves the ring's producer
    /// index; the device writes `len` (receive) and then `flags`. Minor 9
    /// (CAP_ETH_OFFLOAD): a transmitted frame may span several descriptors (eth::TX_MORE on
    /// all but the last) and its first descriptor may ask for a checksum (eth::TX_CSUM) or
    /// TCP segmentation (eth::TX_TSO); with the request bits and offload fields 0 a frame is
    /// one descriptor sent as it is (minor 7).
    EthDesc, "rnic_eth_desc", 16 {
        /// Bus address of the frame or of this piece of it (transmit), or of the empty
        /// buffer (receive).
        addr: u64,
        /// Transmit: the length of the frame or of this piece. Receive: the buffer's size
        /// from the driver, then the received frame's length from the device.
        len: u16,
        /// Transmit, from the driver (minor 9): eth::TX_MORE, eth::TX_CSUM, eth::TX_TSO,
        /// else 0. From the device, last: eth::DESC_DONE, eth::DESC_ERR.
        flags: u8,
        /// Transmit, first descriptor of a frame with TX_CSUM (minor 9): where the checksum
        /// goes, in bytes from csum_start. Else 0.
        csum_offset: u8,
        /// Transmit, first descriptor of a frame with TX_CSUM (minor 9): the offset in the
        /// frame the checksum starts at (with TX_TSO: the TCP header's). Else 0.
        csum_start: u16,
        /// Transmit, first descriptor of a frame with TX_TSO (minor 9): the TCP payload bytes
        /// of each segment. Else 0.
        mss: u16,
    }
);

/// Every descriptor, in header order.
pub const STRUCTS: &[AbiStruct] =
    &[WqeHeader::ABI, AtomicOps::ABI, UdAv::ABI, Sge::ABI, Cqe::ABI, Eqe::ABI, QpCtx::ABI, QpPath::ABI, GidEntry::ABI, CqCtx::ABI, MrCtx::ABI, EthDesc::ABI];

macro_rules! abi_consts {
    ($table:ident: $ty:ty { $( $name:ident = $v:expr, $doc:literal; )* }) => {
        $( #[doc = $doc] pub const $name: $ty = $v; )*
        pub const $table: &[(&str, u64, &str)] = &[ $( (stringify!($name), $name as u64, $doc) ),* ];
    };
}

abi_consts!(WQE_OPS: u8 {
    WQE_OP_RDMA_WRITE = 0, "SQ: RDMA WRITE";
    WQE_OP_RDMA_WRITE_IMM = 1, "SQ: RDMA WRITE with immediate (consumes a RECV)";
    WQE_OP_RDMA_READ = 2, "SQ: RDMA READ";
    WQE_OP_SEND = 3, "SQ: SEND";
    WQE_OP_SEND_IMM = 4, "SQ: SEND with immediate";
    WQE_OP_ATOMIC_CMP_SWP = 5, "SQ (minor 12): atomic compare-and-swap of the 8 bytes at remote_addr (8-byte aligned): rnic_atomic_ops after the header, then one SGE of 8 bytes that receives the original value";
    WQE_OP_ATOMIC_FETCH_ADD = 6, "SQ (minor 12): atomic fetch-and-add, laid out as WQE_OP_ATOMIC_CMP_SWP (compare unused)";
    WQE_OP_ATOMIC_WRITE = 7, "SQ, RC (minor 14): IBTA 1.5 ATOMIC WRITE of the 8 bytes in rnic_atomic_ops.swap_add (after the header; compare 0) to remote_addr (8-byte aligned) under rkey, which needs REMOTE_WRITE; no SGE";
    WQE_OP_FLUSH = 8, "SQ, RC (minor 14): IBTA 1.5 RDMA FLUSH of rkey's MR (FLUSH_LEVEL_MR) or of [remote_addr, +imm_data) in it (FLUSH_LEVEL_RANGE), rsvd0 the FETH byte; no SGE. It completes once everything the responder placed before it is visible (FLUSH_TYPE_GLOBAL) or persistent (FLUSH_TYPE_PERSISTENT)";
    WQE_OP_RECV = 0x10, "RQ: receive buffer";
});

abi_consts!(WQE_FLAGS: u8 {
    WQE_FLAG_SIGNALED = 1, "generate a CQE on success";
    WQE_FLAG_INLINE = 2, "payload is inline after the header (WRITE/SEND)";
    WQE_FLAG_SOLICITED = 4, "solicited event (SEND/WRITE_IMM)";
});

abi_consts!(CQE_OPS: u8 {
    CQE_OP_RDMA_WRITE = 0, "send side: WRITE or WRITE_IMM done";
    CQE_OP_RDMA_READ = 2, "send side: READ done";
    CQE_OP_SEND = 3, "send side: SEND or SEND_IMM done";
    CQE_OP_ATOMIC_CMP_SWP = 5, "send side (minor 12): compare-and-swap done, the original value in its SGE";
    CQE_OP_ATOMIC_FETCH_ADD = 6, "send side (minor 12): fetch-and-add done, the original value in its SGE";
    CQE_OP_ATOMIC_WRITE = 7, "send side (minor 14): ATOMIC WRITE done";
    CQE_OP_FLUSH = 8, "send side (minor 14): FLUSH done";
    CQE_OP_RECV = 0x10, "receive side: SEND received";
    CQE_OP_RECV_RDMA_IMM = 0x11, "receive side: WRITE_IMM received";
});

abi_consts!(CQE_FLAGS: u8 {
    CQE_FLAG_IMM = 1, "imm_data is valid";
    CQE_FLAG_GRH = 2, "(minor 16) a UD receive: the first 40 bytes of its buffer hold the GRH area (RoCEv2 over IPv4: 20 bytes of 0, then the packet's IPv4 header; over IPv6: its IPv6 header), counted in byte_len";
    CQE_FLAG_IPV6 = 4, "(minor 16) with CQE_FLAG_GRH: the packet came over IPv6 (else IPv4)";
});

abi_consts!(WC_STATUS: u8 {
    WC_SUCCESS = 0, "ibv_wc_status numbering";
    WC_LOC_LEN_ERR = 1, "local length error";
    WC_LOC_QP_OP_ERR = 2, "local QP operation error (bad WQE)";
    WC_LOC_PROT_ERR = 4, "local protection error (lkey, range, PD, access)";
    WC_WR_FLUSH_ERR = 5, "flushed: the QP is in ERROR";
    WC_BAD_RESP_ERR = 8, "bad response: a READ response whose opcode or length is out of place";
    WC_REM_INV_REQ_ERR = 9, "remote invalid request (e.g. message too long for the RECV)";
    WC_REM_ACCESS_ERR = 10, "remote access error (rkey, range, PD, access)";
    WC_REM_OP_ERR = 11, "remote operation error";
    WC_RETRY_EXC_ERR = 12, "transport retries exhausted";
    WC_RNR_RETRY_EXC_ERR = 13, "receiver not ready: retries exhausted";
    WC_FATAL_ERR = 19, "fatal error (DMA to an unmapped address, a failed or poisoned DMA: see the syndrome)";
});

abi_consts!(ACCESS: u8 {
    ACCESS_LOCAL_WRITE = 1, "MR: the device may write it for local operations";
    ACCESS_REMOTE_WRITE = 2, "MR/QP: remote RDMA WRITE allowed";
    ACCESS_REMOTE_READ = 4, "MR/QP: remote RDMA READ allowed";
    ACCESS_REMOTE_ATOMIC = 8, "MR/QP (minor 12): remote atomic operations allowed";
    ACCESS_FLUSH_GLOBAL = 0x20, "MR/QP (minor 14): remote FLUSH to global visibility allowed";
    ACCESS_FLUSH_PERSISTENT = 0x40, "MR/QP (minor 14): remote FLUSH to persistence allowed";
});

abi_consts!(QP_STATES: u8 {
    QPS_RESET = 0, "QP state";
    QPS_INIT = 1, "QP state";
    QPS_RTR = 2, "QP state";
    QPS_RTS = 3, "QP state";
    QPS_ERR = 6, "QP state";
});

abi_consts!(COMMANDS: u32 {
    CMD_CREATE_CQ = 1, "read CQ context [index], create the CQ";
    CMD_DESTROY_CQ = 2, "destroy CQ [index]";
    CMD_MODIFY_QP = 3, "read QP context [index], move to its state field";
    CMD_QUERY_QP = 4, "write back QP [index] state, err_reason, indices";
    CMD_DESTROY_QP = 5, "destroy QP [index] (to RESET, nothing flushed)";
    CMD_REG_MR = 6, "read MR context [index] and its MTT entries, register it";
    CMD_DEREG_MR = 7, "deregister MR [index]";
    CMD_SET_GID = 8, "read GID table entry [index] (minor 8): the port's address [index] is now that entry's";
    CMD_SET_EQ = 9, "(minor 11) the event queue is now the ring at EQ_BASE of 2^EQ_LOG entries, empty (EQ_LOG 0: none); index 0";
});

abi_consts!(GIDS: u32 {
    GID_TABLE_LEN = 16, "entries of the GID table (minor 8)";
    GID_FLAG_VALID = 1, "rnic_gid_entry: the entry holds an address";
    PATH_FLAG_SGID = 1, "rnic_qp_path: sgid_index names the source address";
    PATH_FLAG_IPV6 = 2, "rnic_qp_path (minor 9): RoCEv2 over IPv6 to dest_gid, from the IPv6 GID at sgid_index (with PATH_FLAG_SGID; dest_ip 0)";
});

abi_consts!(CMD_STATUS: u32 {
    CMD_OK = 0, "command status";
    CMD_ERR_BAD_OP = 1, "unknown command";
    CMD_ERR_BAD_INDEX = 2, "object index out of range";
    CMD_ERR_DMA = 3, "context or MTT not readable (unmapped address, table unset)";
    CMD_ERR_INVALID = 4, "a context field is invalid";
    CMD_ERR_BUSY = 5, "object in use (CQ referenced by a QP, object exists)";
    CMD_ERR_STATE = 6, "illegal QP state transition";
    CMD_ERR_NOT_FOUND = 7, "object does not exist";
    CMD_ERR_DISABLED = 8, "the engine is not running";
    CMD_ERR_FATAL = 9, "the engine failed internally (STATUS_FATAL): reset the device";
    CMD_BUSY = 10, "the command has not completed yet: poll CMD_STATUS; one that stays BUSY (a hung command) ends only with a device reset";
    CMD_ERR_NO_RESOURCES = 11, "the device holds as much as it may (minor 10: REG_MR beyond MAX_MR_PAGES page-list entries in all)";
    CMD_ERR_TIMEOUT = 12, "(minor 10) the engine did not take the command within the command timeout: it did not run and never will; the device is FATAL and does no DMA until a reset";
});

abi_consts!(LIMITS: u64 {
    MAX_MR_PAGES = 1 << 22, "MTT entries (pages) the registered MRs of one RNIC hold in all (minor 10): each is copied to the host at REG_MR";
});

abi_consts!(QP_ERRORS: u8 {
    QP_ERR_NONE = 0, "QP error reason";
    QP_ERR_MODIFY = 1, "moved to ERROR by the driver";
    QP_ERR_BAD_WQE = 2, "malformed WQE (opcode, SGE count, inline length)";
    QP_ERR_LOCAL_ACCESS = 3, "lkey/range/PD/access check failed";
    QP_ERR_REMOTE_ACCESS = 4, "rkey/range/PD/access check failed at the responder";
    QP_ERR_RNR = 5, "receiver not ready, retries exhausted";
    QP_ERR_REMOTE_INVALID = 6, "responder rejected the request (length, state)";
    QP_ERR_DMA = 7, "a ring or buffer address is not mapped guest memory";
    QP_ERR_CQ = 8, "the completion queue overflowed or is gone";
    QP_ERR_LENGTH = 9, "local length error";
    QP_ERR_APERTURE = 10, "DMA to a GPU BAR1 that no BAR1_APERTURE slot names";
    QP_ERR_RETRY = 11, "transport retries exhausted (timeouts or sequence NAKs)";
    QP_ERR_FATAL = 12, "the engine failed internally (STATUS_FATAL)";
    QP_ERR_POISONED = 13, "a DMA read returned poisoned data (AER Poisoned TLP Received)";
    QP_ERR_BAD_RESPONSE = 14, "a READ response out of place (opcode or payload length)";
});

abi_consts!(ASYNC_ERRORS: u32 {
    ASYNC_ERR_CQ_OVERFLOW = 1, "RNIC_REG_LAST_ERROR code: CQ overflow";
    ASYNC_ERR_QP = 2, "RNIC_REG_LAST_ERROR code: a QP entered ERROR";
    ASYNC_ERR_APERTURE = 3, "RNIC_REG_LAST_ERROR code: BAR1_APERTURE slot [index] names no GPU BAR1";
    ASYNC_ERR_FATAL = 4, "RNIC_REG_LAST_ERROR code: the engine failed internally (STATUS_FATAL set until reset)";
    ASYNC_ERR_INJECTED = 5, "RNIC_REG_LAST_ERROR code: an asynchronous event with no device state behind it (fault injection)";
    ASYNC_ERR_AER = 6, "RNIC_REG_LAST_ERROR code: an AER error was logged; index 0 correctable, 1 non-fatal, 2 fatal (read the AER capability)";
    ASYNC_ERR_FLR_REQUIRED = 7, "RNIC_REG_LAST_ERROR code: the function needs a Function Level Reset (STATUS_FLR_REQUIRED)";
});

abi_consts!(QP_TYPES: u8 {
    QP_TYPE_RC = 0, "(minor 13) rnic_qp_ctx.dest_qpn bits [31:24]: Reliable Connection";
    QP_TYPE_UC = 1, "(minor 13) Unreliable Connection: SEND and WRITE (with immediate) only, never acknowledged; a WQE completes once its last packet is sent; the responder drops a message it cannot take whole (UC_DROPPED)";
    QP_TYPE_SRQ = 2, "(minor 15) not a QP: a shared receive queue under this QPN. RESET -> INIT takes its RQ ring (rq_addr, rq_log_size, rq_log_stride), its PD and, in rnr_timer_us, its limit (0: not armed); INIT -> INIT arms a new limit; RQ_DB_IDX and the doorbell page's RQ index post to it; it never leaves INIT, and RESET or DESTROY_QP is CMD_ERR_BUSY while a QP receives from it. An RC QP whose context has rq_log_stride 0 receives from the SRQ whose QPN is rq_addr";
    QP_TYPE_UD = 3, "(minor 16) Unreliable Datagram: SEND and SEND_IMM of at most the port's RoCE MTU, each WQE addressed by its rnic_ud_av, destination QP and Q_Key (remote_addr, rkey), sent as one UD SEND ONLY packet with a DETH and completed once sent; no destination at RTR (dest_qpn, dest_ip and the path unused: dest_ip is the Q_Key). The responder takes a UD SEND from any source whose DETH Q_Key is the QP's (else QKEY_VIOLATIONS), places the GRH area and the payload into the head RECV and reports the DETH's source QP; a message with no RECV posted or longer than the RECV less the 40 bytes of the GRH is dropped and the RECV stays (UD_DROPPED); a packet of another service than its QP's is dropped (PKTS_DROPPED). No SRQ";
});

abi_consts!(FLUSH: u8 {
    FLUSH_TYPE_GLOBAL = 1, "(minor 14) FETH placement type bit: to global visibility (IBV_FLUSH_GLOBAL)";
    FLUSH_TYPE_PERSISTENT = 2, "(minor 14) FETH placement type bit: to persistence (IBV_FLUSH_PERSISTENT)";
    FLUSH_LEVEL_RANGE = 0, "(minor 14) FETH selectivity level (bits [5:4]): the range [remote_addr, +length) (IBV_FLUSH_RANGE)";
    FLUSH_LEVEL_MR = 1, "(minor 14) FETH selectivity level: the whole MR of the rkey, the address and length ignored (IBV_FLUSH_MR)";
});

abi_consts!(EQE_EVENTS: u8 {
    EQE_QP_FATAL = 1, "(minor 11) event: QP [object] went to ERROR with no completion to say so (its CQ overflowed, a doorbell overran its ring): IB_EVENT_QP_FATAL";
    EQE_QP_REQ_ERR = 2, "(minor 11) event: responder QP [object] refused an invalid request (NAK) and went to ERROR: IB_EVENT_QP_REQ_ERR";
    EQE_QP_ACCESS_ERR = 3, "(minor 11) event: responder QP [object] refused a request for a remote access error (NAK) and went to ERROR: IB_EVENT_QP_ACCESS_ERR";
    EQE_COMM_EST = 4, "(minor 11) event: QP [object] in RTR received its first request: IB_EVENT_COMM_EST";
    EQE_CQ_ERR = 5, "(minor 11) event: CQ [object] overflowed and is in error until destroyed: IB_EVENT_CQ_ERR";
    EQE_SRQ_LIMIT = 6, "(minor 15) event: SRQ [object] holds fewer WQEs than its armed limit, which is disarmed: IB_EVENT_SRQ_LIMIT_REACHED";
    EQE_QP_LAST_WQE = 7, "(minor 15) event: QP [object], which receives from an SRQ, is in ERROR and takes no more of its WQEs (the one it had taken is flushed): IB_EVENT_QP_LAST_WQE_REACHED";
});

/// Every constant group, in header order.
pub const CONSTANT_GROUPS: &[&[(&str, u64, &str)]] = &[
    WQE_OPS,
    WQE_FLAGS,
    CQE_OPS,
    CQE_FLAGS,
    WC_STATUS,
    ACCESS,
    QP_STATES,
    COMMANDS,
    GIDS,
    LIMITS,
    CMD_STATUS,
    QP_ERRORS,
    ASYNC_ERRORS,
    EQE_EVENTS,
    QP_TYPES,
    FLUSH,
];
