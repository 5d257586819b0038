// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: asynchronous events for ib_core (contract minor 11; docs/verbs.md
 * §9).
 *
 * The device writes one rnic_eqe per event into the event queue (a 4 KiB ring set with
 * CMD_SET_EQ) and raises vector 0. The vector's handler only schedules event_work: the
 * work takes the entries whose owner bit says they are new, hands the consumer index back
 * (EQ_CI) and delivers each where ib_core expects it, in process context, since ULPs'
 * handlers and ib_dispatch_event may sleep:
 *   EQE_QP_FATAL, EQE_QP_REQ_ERR, EQE_QP_ACCESS_ERR, EQE_COMM_EST -> the QP's handler
 *     (IB_EVENT_QP_FATAL, _QP_REQ_ERR, _QP_ACCESS_ERR, _COMM_EST);
 *   EQE_QP_LAST_WQE (minor 15) -> the QP's handler (IB_EVENT_QP_LAST_WQE_REACHED);
 *   EQE_CQ_ERR -> the CQ's handler (IB_EVENT_CQ_ERR);
 *   EQE_SRQ_LIMIT (minor 15) -> the SRQ's handler (IB_EVENT_SRQ_LIMIT_REACHED,
 *     rnic_ib_srq.c);
 *   the device's fatal error (RNIC_ASYNC_ERR_FATAL) -> IB_EVENT_DEVICE_FATAL, once, before
 *     the driver's recovery (rnic_fault.c) unregisters the device.
 * Port events (IB_EVENT_PORT_ACTIVE / _PORT_ERR) need nothing here: ib_core raises them
 * from rethN's carrier, the netdev it knows for the port.
 *
 * An event for an object already destroyed is counted and dropped: destroy takes the QP
 * or CQ out of its xarray, then waits for a running event_work (rnic_ib_events_sync()).
 * A device of an earlier minor has no queue: the RNIC_REG_LAST_ERROR latch is all it says.
 */
#include <linux/dma-mapping.h>
#include <linux/io.h>
#include <linux/workqueue.h>

#include "rnic_ib.h"

#define RNIC_EQ_LOG	8	/* 256 entries of 16 bytes */
#define RNIC_EQ_ENTRIES	(1U << RNIC_EQ_LOG)

/* Whether the entry after the last one taken is new (its owner bit says so). */
static bool rnic_eq_pending(const struct rnic_eqe *eq, u32 ci)
{
	return READ_ONCE(eq[ci & (RNIC_EQ_ENTRIES - 1)].owner) == !((ci >> RNIC_EQ_LOG) & 1);
}

/* The ib_core event of an EQE_* QP event, or -1. */
static int rnic_qp_event(u8 event)
{
	switch (event) {
	case RNIC_EQE_QP_FATAL:
		return IB_EVENT_QP_FATAL;
	case RNIC_EQE_QP_REQ_ERR:
		return IB_EVENT_QP_REQ_ERR;
	case RNIC_EQE_QP_ACCESS_ERR:
		return IB_EVENT_QP_ACCESS_ERR;
	case RNIC_EQE_COMM_EST:
		return IB_EVENT_COMM_EST;
	case RNIC_EQE_QP_LAST_WQE:
		return IB_EVENT_QP_LAST_WQE_REACHED;
	default:
		return -1;
	}
}

static void rnic_event_deliver(struct rnic_nic *nic, const struct rnic_eqe *e)
{
	int qp_event = rnic_qp_event(e->event);
	struct ib_event ev = {};
	struct rnic_ib_qp *qp;
	struct rnic_ib_cq *cq;

	atomic64_inc(&nic->stats.events);
	if (qp_event >= 0) {
		qp = xa_load(&nic->ib_qps, e->object);
		if (!qp)
			goto gone;
		ev.event = qp_event;
		ev.device = qp->ibqp.device;
		ev.element.qp = &qp->ibqp;
		dev_dbg(nic_dev(nic), "QP %u: event %u (reason %u)\n", e->object, e->event,
			e->syndrome);
		if (qp->ibqp.event_handler)
			qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
		return;
	}
	if (e->event == RNIC_EQE_CQ_ERR) {
		cq = xa_load(&nic->ib_cqs, e->object);
		if (!cq)
			goto gone;
		ev.event = IB_EVENT_CQ_ERR;
		ev.device = cq->ibcq.device;
		ev.element.cq = &cq->ibcq;
		dev_warn_ratelimited(nic_dev(nic), "CQ %u overflowed: it is in error, its QPs too\n",
				     e->object);
		if (cq->ibcq.event_handler)
			cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
		return;
	}
	if (e->event == RNIC_EQE_SRQ_LIMIT) {
		rnic_ib_srq_event(nic, e->object);
		return;
	}
	atomic64_inc(&nic->stats.events_dropped);
	dev_warn_ratelimited(nic_dev(nic), "unknown event %u for object %u: dropped\n",
			     e->event, e->object);
	return;
gone:
	/* Destroyed meanwhile, or a /dev/rnic_emuN object ib_core does not know. */
	atomic64_inc(&nic->stats.events_dropped);
	dev_dbg(nic_dev(nic), "event %u for object %u, not an ib_core object now: dropped\n",
		e->event, e->object);
}

static void rnic_events_work(struct work_struct *work)
{
	struct rnic_nic *nic = container_of(work, struct rnic_nic, event_work);
	struct rnic_ibdev *rib = READ_ONCE(nic->ib);
	struct rnic_eqe *eq;
	unsigned int n;

	if (atomic_xchg(&nic->fatal_event, 0) && rib) {
		struct ib_event ev = { .event = IB_EVENT_DEVICE_FATAL };

		ev.device = &rib->ibdev;
		ib_dispatch_event(&ev);
	}
	eq = READ_ONCE(nic->eq);
	if (!eq)
		return;
	/* At most one ring's worth per run, then again: never a loop the device keeps going. */
	for (n = 0; n < RNIC_EQ_ENTRIES; n++) {
		const struct rnic_eqe *e = &eq[nic->eq_ci & (RNIC_EQ_ENTRIES - 1)];
		struct rnic_eqe copy;

		if (!rnic_eq_pending(eq, nic->eq_ci))
			break;
		dma_rmb();	/* the entry's body after its owner byte */
		copy = *e;
		WRITE_ONCE(nic->eq_ci, nic->eq_ci + 1);
		rnic_event_deliver(nic, &copy);
	}
	if (n) {
		iowrite32(nic->eq_ci, nic->rd.bar0 + EQ_CI);
		if (n == RNIC_EQ_ENTRIES)
			schedule_work(&nic->event_work);
	}
}

/*
 * From vector 0's handler (hard-irq context): true, with event_work scheduled, when the
 * queue holds a new entry (else the interrupt was not the queue's). A queue (or a
 * registered device, below) means event_work is initialised.
 */
bool rnic_ib_events_kick(struct rnic_nic *nic)
{
	struct rnic_eqe *eq = READ_ONCE(nic->eq);

	if (!eq || !rnic_eq_pending(eq, READ_ONCE(nic->eq_ci)))
		return false;
	schedule_work(&nic->event_work);
	return true;
}

/* The device failed (RNIC_ASYNC_ERR_FATAL): IB_EVENT_DEVICE_FATAL, from the work. */
void rnic_ib_events_fatal(struct rnic_nic *nic)
{
	if (!READ_ONCE(nic->ib))
		return;
	atomic_set(&nic->fatal_event, 1);
	schedule_work(&nic->event_work);
}

/* After an object left its xarray: no event_work still delivers to it. */
void rnic_ib_events_sync(struct rnic_nic *nic)
{
	if (current_work() != &nic->event_work)
		flush_work(&nic->event_work);
}

/**
 * rnic_ib_events_init() - the event queue (before any QP or CQ exists)
 * @nic: the RNIC, its tables set up (rnic_verbs_init())
 *
 * Return: 0. Without the queue (an older device, no memory, the command refused) the
 * driver goes on with the RNIC_REG_LAST_ERROR latch alone, logged.
 */
int rnic_ib_events_init(struct rnic_nic *nic)
{
	void __iomem *bar0 = nic->rd.bar0;
	size_t bytes = RNIC_EQ_ENTRIES * sizeof(*nic->eq);
	int ret;

	INIT_WORK(&nic->event_work, rnic_events_work);
	xa_init(&nic->ib_qps);
	xa_init(&nic->ib_srqs);
	if (rnic_version_minor(nic->rd.version) < 11)
		return 0;
	nic->eq = dma_alloc_coherent(nic_dev(nic), bytes, &nic->eq_dma, GFP_KERNEL);
	if (!nic->eq) {
		dev_warn(nic_dev(nic), "no memory for the event queue: asynchronous events are not delivered\n");
		return 0;
	}
	nic->eq_ci = 0;
	writeq(nic->eq_dma, bar0 + EQ_BASE);
	iowrite32(RNIC_EQ_LOG, bar0 + EQ_LOG);
	mutex_lock(&nic->cmd_lock);
	ret = rnic_cmd(nic, RNIC_CMD_SET_EQ, 0);
	mutex_unlock(&nic->cmd_lock);
	if (ret) {
		dev_warn(nic_dev(nic), "CMD_SET_EQ: %d: asynchronous events are not delivered\n", ret);
		dma_free_coherent(nic_dev(nic), bytes, nic->eq, nic->eq_dma);
		nic->eq = NULL;
	}
	return 0;
}

/* After the engine is quiesced (it writes no more entries). */
void rnic_ib_events_fini(struct rnic_nic *nic)
{
	struct rnic_eqe *eq = nic->eq;

	WRITE_ONCE(nic->eq, NULL);
	if (nic->rd.nvec)
		synchronize_irq(nic->rd.vecs[0].irq);	/* no handler kicks with the old queue */
	cancel_work_sync(&nic->event_work);		/* nor does a work still read it */
	if (eq)
		dma_free_coherent(nic_dev(nic), RNIC_EQ_ENTRIES * sizeof(*eq), eq, nic->eq_dma);
	xa_destroy(&nic->ib_srqs);
	xa_destroy(&nic->ib_qps);
}
