// SPDX-License-Identifier: GPL-2.0
/*
 * dm-fuaflush: complete REQ_FUA writes only after a flush of the device
 * below.
 *
 * dm-writecache in SSD mode commits its metadata on REQ_PREFLUSH and on
 * autocommit, but not on REQ_FUA: a FUA write into a new cache block is
 * acknowledged while its mapping exists only in memory, and a power cut
 * loses it. Device-mapper splits PREFLUSH|FUA (jbd2 and XFS journal
 * commits) into an empty flush followed by a FUA-only write, and O_DSYNC
 * overwrites through iomap and asynchronous O_DSYNC direct I/O on a block
 * device are FUA-only, so all of these are exposed.
 *
 * This target sits on top of such a device and maps every bio straight
 * through. A write carrying REQ_FUA is sent down unchanged; once its data
 * write has succeeded, its completion is held back, one empty REQ_PREFLUSH
 * is sent to the device below (which makes dm-writecache commit), and only
 * then is the write completed. Writes whose data completes while a flush
 * is running wait for the next flush, so a flush only ever covers writes
 * that had completed before it was issued; concurrent FUA writes share one
 * flush.
 *
 * FUA is deliberately not turned into PREFLUSH|FUA: dm core would issue the
 * flush before the data, which leaves the write's own mapping uncommitted.
 *
 * Completion is held back with DM_ENDIO_INCOMPLETE (see fuaflush_end_io).
 */

#include <linux/module.h>
#include <linux/init.h>
#include <linux/bio.h>
#include <linux/blkdev.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/workqueue.h>
#include <linux/atomic.h>
#include <linux/device-mapper.h>

#define DM_MSG_PREFIX "fuaflush"

struct fuaflush_c {
	struct dm_dev *dev;

	struct workqueue_struct *wq;
	struct work_struct flush_work;

	spinlock_t lock;		/* protects pending */
	struct bio_list pending;	/* FUA writes waiting for a flush */

	atomic64_t fua_writes;
	atomic64_t flushes;
	atomic64_t flush_errors;
};

/* Per-bio data: where a bio is in its life. */
enum fuaflush_state {
	FF_PASS,		/* not a FUA write: complete as it is */
	FF_FUA_WRITE,		/* FUA write, data not yet completed */
	FF_WAIT_FLUSH,		/* data written, completed again after a flush */
};

struct fuaflush_io {
	enum fuaflush_state state;
};

/*
 * Flush the device below once for every FUA write whose data had completed
 * when the list was taken, then complete them. A write that completes while
 * the flush runs requeues this work, so it gets a flush of its own.
 */
static void do_flush_work(struct work_struct *ws)
{
	struct fuaflush_c *ff = container_of(ws, struct fuaflush_c, flush_work);
	struct bio_list bios;
	struct bio *bio;
	blk_status_t status = BLK_STS_OK;
	int r;

	bio_list_init(&bios);
	spin_lock_irq(&ff->lock);
	bio_list_merge(&bios, &ff->pending);
	bio_list_init(&ff->pending);
	spin_unlock_irq(&ff->lock);

	if (bio_list_empty(&bios))
		return;

	r = blkdev_issue_flush(ff->dev->bdev);
	atomic64_inc(&ff->flushes);
	if (r) {
		atomic64_inc(&ff->flush_errors);
		status = errno_to_blk_status(r);
		DMERR_LIMIT("%s: flush after FUA write failed: %d",
			    ff->dev->name, r);
	}

	/*
	 * bio_endio() runs dm's clone_endio() again, which calls
	 * fuaflush_end_io() again: FF_WAIT_FLUSH makes it return
	 * DM_ENDIO_DONE, and dm completes the bio with bi_status.
	 */
	while ((bio = bio_list_pop(&bios))) {
		if (status)
			bio->bi_status = status;
		bio_endio(bio);
	}
}

/*
 * Construct a fuaflush mapping:
 *
 *	fuaflush <dev_path>
 *
 * dev_path: the device to write to; sector s of the target is sector s of
 * the device (the target is usually as long as the device).
 */
static int fuaflush_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	struct fuaflush_c *ff;
	int r;

	if (argc != 1) {
		ti->error = "Invalid argument count";
		return -EINVAL;
	}

	ff = kzalloc(sizeof(*ff), GFP_KERNEL);
	if (!ff) {
		ti->error = "Cannot allocate fuaflush context";
		return -ENOMEM;
	}
	spin_lock_init(&ff->lock);
	bio_list_init(&ff->pending);
	INIT_WORK(&ff->flush_work, do_flush_work);
	atomic64_set(&ff->fua_writes, 0);
	atomic64_set(&ff->flushes, 0);
	atomic64_set(&ff->flush_errors, 0);

	r = dm_get_device(ti, argv[0], dm_table_get_mode(ti->table), &ff->dev);
	if (r) {
		ti->error = "Device lookup failed";
		goto bad;
	}

	/*
	 * The flush runs in the I/O completion path of the device above: it
	 * must make progress under memory pressure.
	 */
	ff->wq = alloc_workqueue("dm-" DM_MSG_PREFIX, WQ_MEM_RECLAIM, 0);
	if (!ff->wq) {
		ti->error = "Cannot allocate workqueue";
		r = -ENOMEM;
		goto bad;
	}

	ti->num_flush_bios = 1;
	ti->num_discard_bios = 1;
	ti->num_secure_erase_bios = 1;
	ti->num_write_zeroes_bios = 1;
	/* Makes dm advertise FUA, so REQ_FUA reaches this target. */
	ti->flush_supported = true;
	ti->per_io_data_size = sizeof(struct fuaflush_io);
	ti->private = ff;
	return 0;

bad:
	if (ff->dev)
		dm_put_device(ti, ff->dev);
	kfree(ff);
	return r;
}

static void fuaflush_dtr(struct dm_target *ti)
{
	struct fuaflush_c *ff = ti->private;

	/* dm has waited for every bio: the work, if queued, finds none. */
	destroy_workqueue(ff->wq);
	dm_put_device(ti, ff->dev);
	kfree(ff);
}

static int fuaflush_map(struct dm_target *ti, struct bio *bio)
{
	struct fuaflush_c *ff = ti->private;
	struct fuaflush_io *io = dm_per_bio_data(bio, sizeof(*io));

	io->state = FF_PASS;
	if (op_is_write(bio_op(bio)) && (bio->bi_opf & REQ_FUA)) {
		io->state = FF_FUA_WRITE;
		atomic64_inc(&ff->fua_writes);
	}

	bio_set_dev(bio, ff->dev->bdev);
	return DM_MAPIO_REMAPPED;
}

/*
 * On Linux 6.1, dm's clone_endio() calls this, and on DM_ENDIO_INCOMPLETE
 * returns at once, leaving the clone and its dm_io pending (so suspend
 * waits for it) with clone_endio() still its bi_end_io. Calling bio_endio()
 * on the clone later runs clone_endio() again, which calls this again and
 * then completes the clone for real when it gets DM_ENDIO_DONE, with
 * bi_status as the error. dm-thin completes FUA writes after a metadata
 * commit by the same second bio_endio().
 *
 * The first bio_endio() has already done the device below's accounting:
 * rq-qos done_bio (the QOS flags are cleared so that it is not done twice),
 * trace and bio_uninit(); running it again is harmless.
 *
 * A FUA write whose data write failed is completed at once with its error:
 * there is nothing to make durable.
 */
static int fuaflush_end_io(struct dm_target *ti, struct bio *bio,
			   blk_status_t *error)
{
	struct fuaflush_c *ff = ti->private;
	struct fuaflush_io *io = dm_per_bio_data(bio, sizeof(*io));
	unsigned long flags;

	if (io->state != FF_FUA_WRITE || *error)
		return DM_ENDIO_DONE;

	io->state = FF_WAIT_FLUSH;
	bio_clear_flag(bio, BIO_QOS_THROTTLED);
	bio_clear_flag(bio, BIO_QOS_MERGED);

	spin_lock_irqsave(&ff->lock, flags);
	bio_list_add(&ff->pending, bio);
	spin_unlock_irqrestore(&ff->lock, flags);
	queue_work(ff->wq, &ff->flush_work);

	return DM_ENDIO_INCOMPLETE;
}

/*
 * dm suspends only after every bio has completed, including the FUA writes
 * still waiting for their flush: the work keeps running meanwhile, nothing
 * here stops it. Once they are all done, wait for the work itself to
 * return so that nothing of this target runs while it is suspended.
 */
static void fuaflush_postsuspend(struct dm_target *ti)
{
	struct fuaflush_c *ff = ti->private;

	flush_work(&ff->flush_work);
}

/*
 * Status:
 *	INFO:  <fua_writes> <flushes> <flush_errors>
 *	TABLE: <dev major:minor>
 */
static void fuaflush_status(struct dm_target *ti, status_type_t type,
			    unsigned int status_flags, char *result,
			    unsigned int maxlen)
{
	struct fuaflush_c *ff = ti->private;
	unsigned int sz = 0;

	switch (type) {
	case STATUSTYPE_INFO:
		DMEMIT("%llu %llu %llu",
		       (unsigned long long)atomic64_read(&ff->fua_writes),
		       (unsigned long long)atomic64_read(&ff->flushes),
		       (unsigned long long)atomic64_read(&ff->flush_errors));
		break;

	case STATUSTYPE_TABLE:
		DMEMIT("%s", ff->dev->name);
		break;

	case STATUSTYPE_IMA:
		DMEMIT_TARGET_NAME_VERSION(ti->type);
		DMEMIT(",device_name=%s;", ff->dev->name);
		break;
	}
}

static int fuaflush_iterate_devices(struct dm_target *ti,
				    iterate_devices_callout_fn fn, void *data)
{
	struct fuaflush_c *ff = ti->private;

	return fn(ti, ff->dev, 0, ti->len, data);
}

static struct target_type fuaflush_target = {
	.name = "fuaflush",
	.version = {1, 0, 0},
	.module = THIS_MODULE,
	.ctr = fuaflush_ctr,
	.dtr = fuaflush_dtr,
	.map = fuaflush_map,
	.end_io = fuaflush_end_io,
	.postsuspend = fuaflush_postsuspend,
	.status = fuaflush_status,
	.iterate_devices = fuaflush_iterate_devices,
};

static int __init dm_fuaflush_init(void)
{
	int r = dm_register_target(&fuaflush_target);

	if (r < 0)
		DMERR("register failed %d", r);

	return r;
}

static void __exit dm_fuaflush_exit(void)
{
	dm_unregister_target(&fuaflush_target);
}

module_init(dm_fuaflush_init);
module_exit(dm_fuaflush_exit);

MODULE_DESCRIPTION(DM_NAME " target completing FUA writes after a flush of the device below");
MODULE_AUTHOR("tidecache developers");
MODULE_LICENSE("GPL");
MODULE_VERSION("1.0.0");
