/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR Linux-OpenIB */
/*
 * rnic-emu: the driver-specific data of the RDMA core's uverbs commands, between the kernel
 * driver (guest-driver/rnic_ib*.c) and our rdma-core provider (guest-driver/provider/),
 * which gets a copy of this header at build time (images/build.sh). docs/ibverbs.md.
 *
 * Kernel bypass: the provider maps each CQ's ring, each QP's SQ and RQ rings, and the
 * object's own 4 KiB page of the doorbell page (docs/verbs.md §3.1) with mmap() on the
 * uverbs file at the offsets below, writes WQEs and indices itself and reads CQEs itself.
 * It asks the kernel only to ring the MMIO doorbell when the device's event index says
 * so (a POST_SEND / POST_RECV command with no work requests) and to arm a CQ.
 */
#ifndef RNIC_IB_ABI_H
#define RNIC_IB_ABI_H

#include <linux/types.h>

#define RNIC_IB_ABI_VERSION	1

struct rnic_ib_alloc_ucontext_resp {
	__u32 max_qp;		/* QP numbers are below this */
	__u32 max_inline;	/* inline bytes of the largest WQE stride */
};

struct rnic_ib_create_cq_resp {
	__aligned_u64 ring_key;	/* mmap offset of the CQE ring (ring_bytes, page-rounded) */
	__aligned_u64 db_key;	/* mmap offset of the CQ's doorbell page (4 KiB) */
	__u32 cqn;
	__u32 log_size;		/* 2^log_size 32-byte CQEs */
};

struct rnic_ib_create_qp_resp {
	__aligned_u64 sq_key;	/* mmap offsets of the SQ ring, the RQ ring, the QP's doorbell page */
	__aligned_u64 rq_key;
	__aligned_u64 db_key;
	__u32 qpn;
	__u32 sq_log_size;	/* 2^log_size slots of 2^log_stride bytes */
	__u32 sq_log_stride;
	__u32 rq_log_size;
	__u32 rq_log_stride;
	__u32 max_inline;
	/*
	 * The generation to tag the QP's wr_ids with (rnic_emu_ring.h): the QP number's, new at
	 * each QP that gets it, so completions of an earlier QP of the same number that are
	 * still in a shared CQ never match this one. A response without it (an older driver):
	 * 0, as before.
	 */
	__u32 gen;
};

/*
 * A shared receive queue (contract minor 15): its RQ ring and its page of the doorbell
 * page, as a QP's RQ. A QP created on it gets rq_log_stride 0 and no RQ ring.
 */
struct rnic_ib_create_srq_resp {
	__aligned_u64 ring_key;	/* mmap offsets of the ring and of the SRQ's doorbell page */
	__aligned_u64 db_key;
	__u32 srqn;		/* its QP number (a CQE names the QP that took the WQE) */
	__u32 log_size;		/* 2^log_size slots of 2^log_stride bytes */
	__u32 log_stride;
	__u32 gen;		/* the generation to tag its wr_ids with */
	__u32 max_sge;
	__u32 reserved;
};

/*
 * A user address handle (contract minor 16): the address vector ib_core resolved, as a UD
 * send WQE carries it after its header (struct rnic_ud_av of rnic_emu_regs.h: destination
 * GID, next-hop MAC, traffic class, hop limit, source GID index).
 */
struct rnic_ib_create_ah_resp {
	__u8 av[32];
};

#endif /* RNIC_IB_ABI_H */
