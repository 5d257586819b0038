/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR Apache-2.0 */
/*
 * rnic-emu verbs uAPI: the ioctls of /dev/rnic_emuN (hand-written; the register and
 * descriptor contract is in rnic_emu_regs.h, which this header does not depend on).
 *
 * Every object (PD, CQ, QP, MR) belongs to the open file that created it and is destroyed
 * when that file is released. Every ioctl is _IOWR('R', n, struct ...) with n >= 0x10; all
 * structs have explicit padding, which must be zero. Fields marked "out" are written by
 * the driver; "in" fields are read. Calls on one file are serialized by the driver.
 *
 * Errors: -EINVAL for a malformed request (unknown flag bits, non-zero padding, a value
 * out of range, a wrong QP state), -ENOENT for an unknown object number, -EBUSY for an
 * object still in use, -ENOMEM when a ring is full or memory is short, -EFAULT for bad
 * user pointers, -EIO when the device failed a command, -ENODEV after the device is gone
 * (removed, or not answering: its registers read all-ones).
 *
 * The opcode, flag, access and state values below are the register contract's
 * (rnic_emu_regs.h); the driver checks at build time that they agree.
 */
#ifndef _UAPI_RNIC_EMU_UAPI_H
#define _UAPI_RNIC_EMU_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

/*
 * Bumped on any incompatible change of the structs or semantics below.
 * 2: REG_MR takes flags and reports the MR's path (GPU memory, P2P, bounce); MR_SYNC.
 * 3: the fabric (docs/fabric.md): MODIFY_QP takes the remote attributes (dest_ip, PSNs,
 *    path MTU, retry count, ACK timeout); QUERY_DEVICE reports the RNIC's IPv4 address
 *    and the node index.
 * 4: QUERY_DEVICE reports max_ring_bytes (the largest SQ/RQ ring CREATE_QP accepts);
 *    MR_SYNC FROM_BOUNCE on an MR without write access fails with -EPERM.
 */
#define RNIC_UAPI_VERSION		4

#define RNIC_UAPI_MAX_SGE		14	/* (256 - 32) / 16: the largest WQE stride */
#define RNIC_UAPI_MAX_INLINE		224	/* 256 - 32 */
#define RNIC_UAPI_MAX_POLL		256	/* work completions per POLL_CQ call */
#define RNIC_UAPI_MAX_MR_SIZE		(1ULL << 30)

/* Work request opcodes (the device's RNIC_WQE_OP_* values). */
#define RNIC_UOP_RDMA_WRITE		0x0
#define RNIC_UOP_RDMA_WRITE_IMM		0x1
#define RNIC_UOP_RDMA_READ		0x2
#define RNIC_UOP_SEND			0x3
#define RNIC_UOP_SEND_IMM		0x4

/* Work request flags (the device's RNIC_WQE_FLAG_* values). */
#define RNIC_USEND_SIGNALED		0x1
#define RNIC_USEND_INLINE		0x2
#define RNIC_USEND_SOLICITED		0x4

/* Access flags, MR and QP (the device's RNIC_ACCESS_* values). */
#define RNIC_UACCESS_LOCAL_WRITE	0x1
#define RNIC_UACCESS_REMOTE_WRITE	0x2
#define RNIC_UACCESS_REMOTE_READ	0x4
#define RNIC_UACCESS_REMOTE_ATOMIC	0x8	/* contract minor 12 */

/* QP states (the device's RNIC_QPS_* values). */
#define RNIC_UQPS_RESET			0
#define RNIC_UQPS_INIT			1
#define RNIC_UQPS_RTR			2
#define RNIC_UQPS_RTS			3
#define RNIC_UQPS_ERR			6

/*
 * Work completion statuses, opcodes and flags are the device's values: RNIC_WC_*
 * (ibv_wc_status numbering), RNIC_CQE_OP_*, RNIC_CQE_FLAG_* in rnic_emu_regs.h.
 */

struct rnic_query_device {
	__u32 uapi_version;		/* out: RNIC_UAPI_VERSION */
	__u32 hw_version;		/* out: RNIC_REG_VERSION, major << 16 | minor */
	__u32 max_qp;			/* out: QP numbers are 0..max_qp-1 */
	__u32 max_cq;
	__u32 max_mr;
	__u32 max_ring_log2;		/* out: largest SQ/RQ/CQ ring: 1 << max_ring_log2 */
	__u32 max_sge;			/* out: RNIC_UAPI_MAX_SGE */
	__u32 max_inline;		/* out: RNIC_UAPI_MAX_INLINE */
	__u32 mtt_entries;		/* out: pages all MRs of the device can cover together */
	__u32 num_vectors;		/* out: MSI-X vectors */
	__aligned_u64 max_mr_size;	/* out: RNIC_UAPI_MAX_MR_SIZE */
	__u32 ipv4;			/* out: RNIC_REG_IPV4, a.b.c.d as a << 24 | ...; 0: no fabric */
	__u32 node;			/* out: rnic_emu.node=N, or RNIC_NODE_UNKNOWN */
	__u32 max_ring_bytes;		/* out: largest SQ or RQ ring: slots x WQE stride */
	__u32 pad;
};

/* node of struct rnic_query_device when the module parameter rnic_emu.node is not set */
#define RNIC_NODE_UNKNOWN		0xffffffffU

struct rnic_alloc_pd {
	__u32 pd;			/* out (ALLOC_PD) / in (DEALLOC_PD) */
	__u32 pad;
};

struct rnic_create_cq {
	__u32 entries;			/* in: at least this many CQEs (rounded up to 2^n) */
	__u32 cqn;			/* out (CREATE_CQ) / in (DESTROY_CQ) */
	__u32 actual_entries;		/* out: ring size */
	__u32 vector;			/* out: MSI-X vector that signals it */
};

struct rnic_create_qp {
	__u32 pd;			/* in */
	__u32 send_cqn;			/* in */
	__u32 recv_cqn;			/* in */
	__u32 max_send_wr;		/* in/out: 1..; rounded up to a power of two */
	__u32 max_recv_wr;		/* in/out: 1..; rounded up to a power of two */
	__u32 max_send_sge;		/* in/out: 0..RNIC_UAPI_MAX_SGE (the stride allows more) */
	__u32 max_recv_sge;		/* in/out: 1..RNIC_UAPI_MAX_SGE */
	__u32 max_inline;		/* in/out: 0..RNIC_UAPI_MAX_INLINE */
	/* each ring (slots x stride) at most QUERY_DEVICE max_ring_bytes, else -EINVAL */
	__u32 qpn;			/* out (CREATE_QP) / in (DESTROY_QP) */
	__u32 qp_type;			/* in: RNIC_QP_TYPE_RC (0), RNIC_QP_TYPE_UC (contract minor 13) or RNIC_QP_TYPE_UD (minor 16) */
};

/* attr_mask bits of struct rnic_modify_qp */
#define RNIC_QP_ATTR_ACCESS		0x1	/* access */
#define RNIC_QP_ATTR_DEST_QPN		0x2	/* dest_qpn */
#define RNIC_QP_ATTR_RNR		0x4	/* rnr_retry and rnr_timer_us */
#define RNIC_QP_ATTR_DEST_IP		0x8	/* dest_ip (INIT->RTR) */
#define RNIC_QP_ATTR_RQ_PSN		0x10	/* rq_psn (INIT->RTR) */
#define RNIC_QP_ATTR_PATH_MTU		0x20	/* path_mtu (INIT->RTR) */
#define RNIC_QP_ATTR_SQ_PSN		0x40	/* sq_psn (RTR->RTS) */
#define RNIC_QP_ATTR_RETRY_CNT		0x80	/* retry_cnt (RTR->RTS) */
#define RNIC_QP_ATTR_TIMEOUT		0x100	/* timeout (RTR->RTS) */
#define RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC	0x200	/* rd_atomic [15:8] (INIT->RTR; minor 12) */
#define RNIC_QP_ATTR_MAX_RD_ATOMIC	0x400	/* rd_atomic [7:0] (RTR->RTS; minor 12) */
#define RNIC_QP_ATTR_QKEY		0x800	/* a UD QP's Q_Key, carried in dest_ip (minor 16) */

#define RNIC_PSN_MASK			0xffffffU	/* PSNs are 24 bits */
#define RNIC_QP_MAX_RETRY_CNT		7
#define RNIC_QP_MAX_TIMEOUT		31

/*
 * MODIFY_QP moves the QP to qp_state. Fields named in attr_mask replace the driver's copy;
 * the others keep their previous values (at creation: access 0, rnr_retry 7,
 * rnr_timer_us 10, no dest_qpn, dest_ip 0 (loopback), rq_psn 0, sq_psn 0, path_mtu 4096,
 * retry_cnt 7, timeout 14 (67 ms)). Required: RNIC_QP_ATTR_DEST_QPN for INIT->RTR.
 * Allowed: ACCESS for RESET->INIT, INIT->INIT, RTS->RTS; RNR for RESET->INIT and RTR->RTS;
 * DEST_QPN, DEST_IP, RQ_PSN, PATH_MTU for INIT->RTR; SQ_PSN, RETRY_CNT, TIMEOUT (and RNR)
 * for RTR->RTS; nothing for ->ERR and ->RESET. Legal edges: RESET->INIT, INIT->INIT,
 * INIT->RTR, RTR->RTS, RTS->RTS, any->ERR, any->RESET.
 *
 * The remote attributes (docs/fabric.md): dest_ip is the IPv4 address of the peer node's
 * RNIC (its QUERY_DEVICE ipv4), 0 for a QP of this RNIC (loopback; not 0.x.y.z otherwise,
 * not multicast or class E); rq_psn is the first PSN expected, sq_psn the first PSN sent
 * (0..RNIC_PSN_MASK); path_mtu in bytes: 256, 512, 1024, 2048 or 4096; retry_cnt
 * 0..RNIC_QP_MAX_RETRY_CNT transport retries; timeout 0..RNIC_QP_MAX_TIMEOUT, the local
 * ACK timeout 4.096 us * 2^timeout (0: wait forever). Anything else is -EINVAL.
 *
 * A UD QP (minor 16) has no destination: INIT->RTR requires nothing, and its Q_Key
 * (RNIC_QP_ATTR_QKEY, the value in dest_ip, as the device's QP context holds it) is
 * allowed at every edge but those to ERR and RESET; no other QP takes RNIC_QP_ATTR_QKEY.
 */
struct rnic_modify_qp {
	__u32 qpn;			/* in */
	__u32 attr_mask;		/* in: RNIC_QP_ATTR_* */
	__u32 qp_state;			/* in: RNIC_UQPS_* */
	__u32 dest_qpn;			/* in */
	__u32 access;			/* in: RNIC_UACCESS_REMOTE_* */
	__u32 rnr_retry;		/* in: 0..7 (7: forever) */
	__u32 rnr_timer_us;		/* in: 0..1000000 */
	__u32 dest_ip;			/* in: IPv4, host order (a << 24 | b << 16 | c << 8 | d) */
	__u32 rq_psn;			/* in: 0..RNIC_PSN_MASK */
	__u32 sq_psn;			/* in: 0..RNIC_PSN_MASK */
	__u32 path_mtu;			/* in: bytes, 256..4096, a power of two */
	__u32 retry_cnt;		/* in: 0..7 */
	__u32 timeout;			/* in: 0..31 */
	__u32 rd_atomic;		/* in: max_rd_atomic [7:0], max_dest_rd_atomic [15:8]: 1..16 */
};

struct rnic_query_qp {
	__u32 qpn;			/* in */
	__u32 qp_state;			/* out: RNIC_UQPS_* as the device reports it */
	__u32 err_reason;		/* out: RNIC_QP_ERR_* */
	__u16 sq_ci;			/* out: device consumer indices */
	__u16 rq_ci;
};

/* flags of struct rnic_reg_mr */
#define RNIC_MR_FLAG_STRICT_P2P		0x1	/* GPU memory: fail instead of bouncing */

/*
 * path of struct rnic_reg_mr: how the RNIC reaches the MR's memory.
 *   HOST             ordinary (guest RAM) pages
 *   P2P_SWITCH       GPU memory (p2pmem), peer-to-peer below a shared PCIe switch
 *   P2P_HOST_BRIDGE  GPU memory, peer-to-peer through a root port or the host bridge
 *   BOUNCE           GPU memory that the RNIC cannot reach peer-to-peer: the device uses
 *                    a host bounce buffer, synchronised with MR_SYNC
 */
#define RNIC_MR_PATH_HOST		0
#define RNIC_MR_PATH_P2P_SWITCH		1
#define RNIC_MR_PATH_P2P_HOST_BRIDGE	2
#define RNIC_MR_PATH_BOUNCE		3

/*
 * REG_MR over GPU memory (a mapping of /sys/bus/pci/devices/<gpu>/p2pmem/allocate): every
 * page must be GPU memory of one GPU (mixing with ordinary pages: -EINVAL). When Linux
 * refuses peer-to-peer DMA between the RNIC and that GPU (for example -EREMOTEIO), the
 * driver falls back to a bounce buffer, or with RNIC_MR_FLAG_STRICT_P2P fails with that
 * errno.
 */
struct rnic_reg_mr {
	__aligned_u64 addr;		/* in: user virtual address = the MR's iova */
	__aligned_u64 length;		/* in: 1..RNIC_UAPI_MAX_MR_SIZE */
	__u32 access;			/* in: RNIC_UACCESS_* */
	__u32 pd;			/* in */
	__u32 lkey;			/* out */
	__u32 rkey;			/* out */
	__u32 index;			/* out (REG_MR) / in (DEREG_MR) */
	__u32 flags;			/* in: RNIC_MR_FLAG_* */
	__u32 path;			/* out: RNIC_MR_PATH_* */
	__u32 pad;
};

/* direction of struct rnic_mr_sync (FROM_BOUNCE needs an MR with a write access flag) */
#define RNIC_MR_SYNC_TO_BOUNCE		1	/* GPU memory -> bounce, before the device reads */
#define RNIC_MR_SYNC_FROM_BOUNCE	2	/* bounce -> GPU memory, after the device wrote */

/*
 * MR_SYNC: copies [offset, offset + length) of the MR (offset 0 = its iova) between the
 * GPU memory and the bounce buffer. A no-op (0) for MRs whose path is not BOUNCE. The
 * range must lie inside the MR (-EINVAL otherwise).
 */
struct rnic_mr_sync {
	__u32 index;			/* in: the MR (struct rnic_reg_mr index) */
	__u32 direction;		/* in: RNIC_MR_SYNC_* */
	__aligned_u64 offset;		/* in: bytes from the MR's iova */
	__aligned_u64 length;		/* in: bytes */
};

struct rnic_usge {
	__aligned_u64 addr;
	__u32 length;
	__u32 lkey;
};

struct rnic_send_wr {
	__aligned_u64 wr_id;
	__aligned_u64 remote_addr;	/* WRITE, WRITE_IMM, READ */
	__aligned_u64 inline_data;	/* user pointer to inline_len bytes (RNIC_USEND_INLINE) */
	__u32 rkey;
	__u32 imm_data;			/* WRITE_IMM, SEND_IMM */
	__u32 inline_len;
	__u8 opcode;			/* RNIC_UOP_* */
	__u8 flags;			/* RNIC_USEND_* */
	__u8 num_sge;			/* 0..the QP's max_send_sge (0 with INLINE) */
	__u8 pad;
	struct rnic_usge sge[RNIC_UAPI_MAX_SGE];
};

struct rnic_recv_wr {
	__aligned_u64 wr_id;
	__u32 num_sge;			/* 0..the QP's max_recv_sge */
	__u32 pad;
	struct rnic_usge sge[RNIC_UAPI_MAX_SGE];
};

/*
 * POST_SEND / POST_RECV: wrs points at num_wr struct rnic_send_wr / rnic_recv_wr. The WRs
 * are posted in order until one fails; num_posted (written back also when the call fails)
 * says how many went to the device. POST_SEND needs the QP in RTS (or ERR, where the WRs
 * are flushed); POST_RECV in INIT, RTR, RTS or ERR. A full ring fails with -ENOMEM.
 */
struct rnic_post {
	__u32 qpn;			/* in */
	__u32 num_wr;			/* in */
	__aligned_u64 wrs;		/* in: user pointer */
	__u32 num_posted;		/* out */
	__u32 pad;
};

struct rnic_wc {
	__aligned_u64 wr_id;
	__u32 status;			/* RNIC_WC_* */
	__u32 opcode;			/* RNIC_CQE_OP_* */
	__u32 byte_len;
	__u32 imm_data;
	__u32 qpn;
	__u32 src_qp;
	__u32 flags;			/* RNIC_CQE_FLAG_* */
	__u32 syndrome;			/* vendor syndrome: RNIC_QP_ERR_* for errors */
};

/*
 * POLL_CQ: copies up to num_entries (1..RNIC_UAPI_MAX_POLL) work completions to wcs.
 * With timeout_ms > 0 and nothing ready it arms the CQ and sleeps until a completion
 * interrupt or the timeout; num_polled 0 means the timeout passed. Interrupted by a
 * signal: -EINTR.
 */
struct rnic_poll_cq {
	__u32 cqn;			/* in */
	__u32 num_entries;		/* in */
	__aligned_u64 wcs;		/* in: user pointer to struct rnic_wc[num_entries] */
	__u32 timeout_ms;		/* in: 0 polls once; at most 60000 */
	__u32 num_polled;		/* out */
};

#define RNIC_IOCTL_QUERY_DEVICE	_IOWR('R', 0x10, struct rnic_query_device)
#define RNIC_IOCTL_ALLOC_PD	_IOWR('R', 0x11, struct rnic_alloc_pd)
#define RNIC_IOCTL_DEALLOC_PD	_IOWR('R', 0x12, struct rnic_alloc_pd)
#define RNIC_IOCTL_CREATE_CQ	_IOWR('R', 0x13, struct rnic_create_cq)
#define RNIC_IOCTL_DESTROY_CQ	_IOWR('R', 0x14, struct rnic_create_cq)
#define RNIC_IOCTL_CREATE_QP	_IOWR('R', 0x15, struct rnic_create_qp)
#define RNIC_IOCTL_DESTROY_QP	_IOWR('R', 0x16, struct rnic_create_qp)
#define RNIC_IOCTL_MODIFY_QP	_IOWR('R', 0x17, struct rnic_modify_qp)
#define RNIC_IOCTL_QUERY_QP	_IOWR('R', 0x18, struct rnic_query_qp)
#define RNIC_IOCTL_REG_MR	_IOWR('R', 0x19, struct rnic_reg_mr)
#define RNIC_IOCTL_DEREG_MR	_IOWR('R', 0x1a, struct rnic_reg_mr)
#define RNIC_IOCTL_POST_SEND	_IOWR('R', 0x1b, struct rnic_post)
#define RNIC_IOCTL_POST_RECV	_IOWR('R', 0x1c, struct rnic_post)
#define RNIC_IOCTL_POLL_CQ	_IOWR('R', 0x1d, struct rnic_poll_cq)
#define RNIC_IOCTL_MR_SYNC	_IOWR('R', 0x1e, struct rnic_mr_sync)

#endif /* _UAPI_RNIC_EMU_UAPI_H */
