// SPDX-License-Identifier: GPL-2.0
/*
 * dm-errhold: hold the I/O a device fails, until told to retry or to fail it.
 *
 * A write-back cache that can fail over mirrors its dirty blocks on a
 * peer's SSD over NVMe/TCP: md raid1 (dm-raid) of a local leg and a peer
 * leg. md completes a mirrored write as soon as one leg has it: when the
 * peer leg *fails* a write (the replica's SSD returns an error, the
 * namespace was disabled, the controller was deleted), md marks the leg
 * faulty and acknowledges the write on the local leg alone. If the node
 * cannot reach the cluster store at that moment, nobody has recorded that
 * the replica is behind, and a failover can later promote the replica,
 * which lacks acknowledged writes. A leg that hangs is safe (the write
 * waits); a leg that errors is not.
 *
 * This target sits under the peer leg's slices and maps every bio to one
 * device at an offset, like linear. While it holds (the default), a bio
 * the device completes with an error is not completed upward: it is kept,
 * restored to what was submitted, and counted, and a uevent tells user
 * space. The layer above sees the I/O still in flight, so md neither fails
 * the leg nor completes the write. User space then decides:
 *
 *	retry	resubmit every held bio (the path is back)
 *	fail	complete every held bio with the error it got, and pass
 *		errors through from now on (the cluster has recorded that the
 *		leg is behind: md may fail it)
 *	hold	hold errors again (the leg was brought back)
 *
 * Errors that mean the request itself cannot be done (BLK_STS_NOTSUPP, a
 * REQ_NOWAIT bio's BLK_STS_AGAIN) are passed through: no path state
 * changes them, and the layer above has its own answer to them.
 *
 * A suspend waits for the held bios like for any in-flight I/O: send
 * retry or fail first. Nothing is allocated on the I/O path: a held bio is
 * the clone dm gave us, kept on a list through its own bi_next.
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

#define DM_MSG_PREFIX "errhold"

struct errhold_c {
	struct dm_dev *dev;
	sector_t start;			/* offset on dev, in sectors */
	struct dm_target *ti;

	spinlock_t lock;		/* protects held and passing */
	struct bio_list held;		/* failed bios, in completion order */
	bool passing;			/* fail was sent: errors go up */

	struct work_struct event_work;	/* raises a dm event for a new hold */

	atomic_t nr_held;		/* bios in held */
	atomic64_t held_total;		/* bios ever held */
	atomic64_t retried_total;	/* ... resubmitted by retry */
	atomic64_t failed_total;	/* ... completed with an error by fail */
	atomic64_t errors_total;	/* errors the device returned */
};

/* Per-bio data: what was submitted, to resubmit it unchanged. */
struct errhold_io {
	struct bvec_iter iter;
	blk_status_t error;
};

static struct errhold_io *io_of(struct bio *bio)
{
	return dm_per_bio_data(bio, sizeof(struct errhold_io));
}

/* dm_table_event() sleeps: raise it from process context. */
static void raise_event(struct work_struct *ws)
{
	struct errhold_c *ec = container_of(ws, struct errhold_c, event_work);

	dm_table_event(ec->ti->table);
}

/*
 * Construct an errhold mapping:
 *
 *	errhold <dev_path> <offset>
 *
 * Sector s of the target is sector offset + s of the device, as with
 * linear.
 */
static int errhold_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	struct errhold_c *ec;
	unsigned long long start;
	char dummy;
	int r;

	if (argc != 2) {
		ti->error = "Invalid argument count";
		return -EINVAL;
	}
	if (sscanf(argv[1], "%llu%c", &start, &dummy) != 1 ||
	    start != (sector_t)start) {
		ti->error = "Invalid device sector";
		return -EINVAL;
	}

	ec = kzalloc(sizeof(*ec), GFP_KERNEL);
	if (!ec) {
		ti->error = "Cannot allocate errhold context";
		return -ENOMEM;
	}
	ec->start = start;
	ec->ti = ti;
	spin_lock_init(&ec->lock);
	bio_list_init(&ec->held);
	INIT_WORK(&ec->event_work, raise_event);
	atomic_set(&ec->nr_held, 0);
	atomic64_set(&ec->held_total, 0);
	atomic64_set(&ec->retried_total, 0);
	atomic64_set(&ec->failed_total, 0);
	atomic64_set(&ec->errors_total, 0);

	r = dm_get_device(ti, argv[0], dm_table_get_mode(ti->table), &ec->dev);
	if (r) {
		ti->error = "Device lookup failed";
		kfree(ec);
		return r;
	}

	ti->num_flush_bios = 1;
	ti->num_discard_bios = 1;
	ti->num_secure_erase_bios = 1;
	ti->num_write_zeroes_bios = 1;
	ti->per_io_data_size = sizeof(struct errhold_io);
	ti->private = ec;
	return 0;
}

static void errhold_dtr(struct dm_target *ti)
{
	struct errhold_c *ec = ti->private;

	/* dm has waited for every bio, held ones included: none is left. */
	cancel_work_sync(&ec->event_work);
	dm_put_device(ti, ec->dev);
	kfree(ec);
}

static int errhold_map(struct dm_target *ti, struct bio *bio)
{
	struct errhold_c *ec = ti->private;

	bio_set_dev(bio, ec->dev->bdev);
	if (bio_sectors(bio) || op_is_zone_mgmt(bio_op(bio)))
		bio->bi_iter.bi_sector = ec->start +
			dm_target_offset(ti, bio->bi_iter.bi_sector);
	io_of(bio)->iter = bio->bi_iter;
	return DM_MAPIO_REMAPPED;
}

/* Errors no change of path or peer can cure: the layer above decides. */
static bool passes_always(blk_status_t error)
{
	return error == BLK_STS_NOTSUPP || error == BLK_STS_AGAIN;
}

static int errhold_end_io(struct dm_target *ti, struct bio *bio,
			  blk_status_t *error)
{
	struct errhold_c *ec = ti->private;
	struct errhold_io *io = io_of(bio);
	unsigned long flags;

	if (!*error || passes_always(*error))
		return DM_ENDIO_DONE;
	atomic64_inc(&ec->errors_total);

	spin_lock_irqsave(&ec->lock, flags);
	if (ec->passing) {
		spin_unlock_irqrestore(&ec->lock, flags);
		return DM_ENDIO_DONE;
	}
	/* As submitted, for a retry: the device consumed the iterator. */
	io->error = *error;
	bio->bi_iter = io->iter;
	bio->bi_status = BLK_STS_OK;
	bio_list_add(&ec->held, bio);
	atomic_inc(&ec->nr_held);
	spin_unlock_irqrestore(&ec->lock, flags);

	atomic64_inc(&ec->held_total);
	schedule_work(&ec->event_work);
	return DM_ENDIO_INCOMPLETE;
}

/* Takes every held bio off the list; with pass set, errors go up from now. */
static void take_held(struct errhold_c *ec, struct bio_list *out, bool pass)
{
	unsigned long flags;

	bio_list_init(out);
	spin_lock_irqsave(&ec->lock, flags);
	bio_list_merge(out, &ec->held);
	bio_list_init(&ec->held);
	if (pass)
		ec->passing = true;
	atomic_set(&ec->nr_held, 0);
	spin_unlock_irqrestore(&ec->lock, flags);
}

static void retry_held(struct errhold_c *ec)
{
	struct bio_list bios;
	struct bio *bio;

	take_held(ec, &bios, false);
	while ((bio = bio_list_pop(&bios))) {
		atomic64_inc(&ec->retried_total);
		/*
		 * Its completion dropped the bio's cgroup association (and
		 * throttling state): set the device again, which makes them
		 * anew, as dm-mpath does before it resubmits a path's bio.
		 */
		bio_set_dev(bio, ec->dev->bdev);
		submit_bio_noacct(bio);
	}
}

static void fail_held(struct errhold_c *ec)
{
	struct bio_list bios;
	struct bio *bio;

	take_held(ec, &bios, true);
	while ((bio = bio_list_pop(&bios))) {
		atomic64_inc(&ec->failed_total);
		/* Back through errhold_end_io, which now passes it up. */
		bio->bi_status = io_of(bio)->error;
		bio_endio(bio);
	}
}

/*
 * Messages:
 *	retry	resubmit every held bio; errors are still held
 *	fail	complete every held bio with its error; pass errors up
 *	hold	hold errors again
 */
static int errhold_message(struct dm_target *ti, unsigned int argc,
			   char **argv, char *result, unsigned int maxlen)
{
	struct errhold_c *ec = ti->private;
	unsigned long flags;

	if (argc != 1)
		goto bad;
	if (!strcasecmp(argv[0], "retry")) {
		retry_held(ec);
		return 0;
	}
	if (!strcasecmp(argv[0], "fail")) {
		fail_held(ec);
		return 0;
	}
	if (!strcasecmp(argv[0], "hold")) {
		spin_lock_irqsave(&ec->lock, flags);
		ec->passing = false;
		spin_unlock_irqrestore(&ec->lock, flags);
		return 0;
	}
bad:
	DMWARN("Unrecognised message received");
	return -EINVAL;
}

/*
 * Status:
 *	INFO:  <hold|pass> <held_now> <held_total> <retried_total>
 *	       <failed_total> <errors_total>
 *	TABLE: <dev major:minor> <offset>
 */
static void errhold_status(struct dm_target *ti, status_type_t type,
			   unsigned int status_flags, char *result,
			   unsigned int maxlen)
{
	struct errhold_c *ec = ti->private;
	unsigned int sz = 0;

	switch (type) {
	case STATUSTYPE_INFO:
		DMEMIT("%s %d %llu %llu %llu %llu",
		       READ_ONCE(ec->passing) ? "pass" : "hold",
		       atomic_read(&ec->nr_held),
		       (unsigned long long)atomic64_read(&ec->held_total),
		       (unsigned long long)atomic64_read(&ec->retried_total),
		       (unsigned long long)atomic64_read(&ec->failed_total),
		       (unsigned long long)atomic64_read(&ec->errors_total));
		break;

	case STATUSTYPE_TABLE:
		DMEMIT("%s %llu", ec->dev->name, (unsigned long long)ec->start);
		break;

	case STATUSTYPE_IMA:
		DMEMIT_TARGET_NAME_VERSION(ti->type);
		DMEMIT(",device_name=%s,start=%llu;", ec->dev->name,
		       (unsigned long long)ec->start);
		break;
	}
}

static int errhold_iterate_devices(struct dm_target *ti,
				   iterate_devices_callout_fn fn, void *data)
{
	struct errhold_c *ec = ti->private;

	return fn(ti, ec->dev, ec->start, ti->len, data);
}

static struct target_type errhold_target = {
	.name = "errhold",
	.version = {1, 0, 0},
	.module = THIS_MODULE,
	.ctr = errhold_ctr,
	.dtr = errhold_dtr,
	.map = errhold_map,
	.end_io = errhold_end_io,
	.message = errhold_message,
	.status = errhold_status,
	.iterate_devices = errhold_iterate_devices,
};

static int __init dm_errhold_init(void)
{
	int r = dm_register_target(&errhold_target);

	if (r < 0)
		DMERR("register failed %d", r);

	return r;
}

static void __exit dm_errhold_exit(void)
{
	dm_unregister_target(&errhold_target);
}

module_init(dm_errhold_init);
module_exit(dm_errhold_exit);

MODULE_DESCRIPTION(DM_NAME " target holding failed I/O until told to retry or fail it");
MODULE_AUTHOR("tidecache developers");
MODULE_LICENSE("GPL");
MODULE_VERSION("1.0.0");
