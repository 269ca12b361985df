// SPDX-License-Identifier: GPL-2.0
/*
 * dm-readfirst: hold background writes to a slow device while reads wait
 * on it.
 *
 * dm-writecache writes its dirty blocks back to the origin through kcopyd
 * while anything else goes on. Its pause_writeback waits for writes that go
 * around a full cache, not for reads: a read that misses the cache queues
 * behind up to writeback_jobs write-backs on the same spindles, for as long
 * as the cache has dirty blocks (minutes when it is full). I/O priorities do
 * not help: kcopyd's bios carry none, and the disks already hold dozens of
 * them in their queues.
 *
 * This target sits under dm-writecache (or dm-cache), on top of the origin,
 * and maps every bio straight through, except one kind: a write without
 * REQ_SYNC, REQ_FUA or REQ_PREFLUSH (op_is_sync() false), which nobody
 * waits for: kcopyd's write-back and the page cache's background
 * writeback. Such a write is held, in arrival order, while the reads are
 * not done: a read is in flight to the origin, or the last one completed
 * less than idle_ms ago (a reader issues its next read a moment after the
 * last, and disks complete reads in batches: "none in flight" alone would
 * let write-back in between every two reads). It goes once the reads have
 * been idle for idle_ms, or once it has been held max_hold_ms, whichever
 * comes first. Writes someone waits for (O_DIRECT, O_DSYNC, fsync, journal
 * commits) and flushes are never held, and neither are discards.
 *
 * Holding delays a write; it never reorders it against the layer above,
 * which completes nothing until the write completes here. max_hold_ms
 * bounds every write's wait, so write-back goes on under a steady read load
 * (at most writeback_jobs blocks per max_hold_ms), and an idle origin sees
 * no difference. A flush the user asked for should run at full speed: the
 * message "max_hold_ms 0" stops holding (releasing what is held) until it
 * is set again.
 */

#include <linux/module.h>
#include <linux/init.h>
#include <linux/bio.h>
#include <linux/blkdev.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/workqueue.h>
#include <linux/jiffies.h>
#include <linux/timer.h>
#include <linux/atomic.h>
#include <linux/device-mapper.h>

#define DM_MSG_PREFIX "readfirst"

/* The longest a write may be held, and the longest idle window: a minute. */
#define READFIRST_MAX_MS 60000

struct readfirst_c {
	struct dm_dev *dev;

	struct workqueue_struct *wq;
	struct delayed_work release_work;	/* at the oldest write's bound */
	struct timer_list idle_timer;		/* idle_ms after the last read */

	spinlock_t lock;		/* protects held and the settings */
	struct bio_list held;		/* writes held, oldest first */
	unsigned long max_hold;		/* jiffies; 0: hold nothing */
	unsigned long idle;		/* jiffies */
	unsigned int max_hold_ms, idle_ms;		/* in force */
	unsigned int table_max_hold_ms, table_idle_ms;	/* as the table gave them */
	bool suspending;		/* between presuspend and resume */

	atomic_t reads;			/* reads in flight to the device */
	unsigned long last_read;	/* jiffies when the last read completed */
	atomic_t nr_held;		/* writes in held */

	atomic64_t held_total;		/* writes ever held */
	atomic64_t released_late;	/* ... released by max_hold_ms */
};

/* Per-bio data: what this target did with a bio. */
enum readfirst_kind {
	RF_PASS,		/* mapped straight through */
	RF_READ,		/* a read, counted in reads */
	RF_HELD,		/* a write that was held */
};

struct readfirst_io {
	enum readfirst_kind kind;
	unsigned long held_at;	/* jiffies, for RF_HELD */
};

static struct readfirst_io *io_of(struct bio *bio)
{
	return dm_per_bio_data(bio, sizeof(struct readfirst_io));
}

/* Whether writes must wait for reads now. Caller holds rf->lock. */
static bool reads_busy(struct readfirst_c *rf, unsigned long now)
{
	if (!rf->max_hold || rf->suspending)
		return false;
	return atomic_read(&rf->reads) ||
	       time_before(now, READ_ONCE(rf->last_read) + rf->idle);
}

/*
 * Release every held write that may go: all of them when the reads are
 * done (or holding is off), otherwise those held max_hold or longer. Then
 * come back when the oldest one left reaches max_hold; the idle timer
 * brings it back sooner when the reads end.
 */
static void do_release(struct work_struct *ws)
{
	struct readfirst_c *rf = container_of(to_delayed_work(ws),
					      struct readfirst_c, release_work);
	struct bio_list go;
	struct bio *bio;
	unsigned long now = jiffies, flags;
	bool busy;

	bio_list_init(&go);
	spin_lock_irqsave(&rf->lock, flags);
	busy = reads_busy(rf, now);
	while ((bio = bio_list_peek(&rf->held))) {
		struct readfirst_io *io = io_of(bio);
		unsigned long due = io->held_at + rf->max_hold;

		if (busy && time_before(now, due)) {
			queue_delayed_work(rf->wq, &rf->release_work, due - now);
			break;
		}
		if (busy)
			atomic64_inc(&rf->released_late);
		bio_list_add(&go, bio_list_pop(&rf->held));
		atomic_dec(&rf->nr_held);
	}
	spin_unlock_irqrestore(&rf->lock, flags);

	while ((bio = bio_list_pop(&go)))
		dm_submit_bio_remap(bio, NULL);
}

/* Releases what may go now; callable from any context. */
static void kick(struct readfirst_c *rf)
{
	mod_delayed_work(rf->wq, &rf->release_work, 0);
}

/* The reads have been idle for idle_ms, unless one came since. */
static void idle_timeout(struct timer_list *t)
{
	struct readfirst_c *rf = from_timer(rf, t, idle_timer);

	kick(rf);
}

static int parse_ms(const char *arg, unsigned int *ms)
{
	if (kstrtouint(arg, 10, ms) || *ms > READFIRST_MAX_MS)
		return -EINVAL;
	return 0;
}

/* Caller holds rf->lock. */
static void set_max_hold(struct readfirst_c *rf, unsigned int ms)
{
	rf->max_hold_ms = ms;
	rf->max_hold = msecs_to_jiffies(ms);
}

/* Caller holds rf->lock. */
static void set_idle(struct readfirst_c *rf, unsigned int ms)
{
	rf->idle_ms = ms;
	rf->idle = msecs_to_jiffies(ms);
}

/*
 * Construct a readfirst mapping:
 *
 *	readfirst <dev_path> <max_hold_ms> <idle_ms>
 *
 * dev_path: the slow device; sector s of the target is sector s of the
 * device (the target is usually as long as the device).
 * max_hold_ms: the longest a background write is held, 0 to 60000; 0
 * holds nothing.
 * idle_ms: how long after the last read completed writes still wait, 0 to
 * 60000.
 */
static int readfirst_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	struct readfirst_c *rf;
	unsigned int max_hold_ms, idle_ms;
	int r;

	if (argc != 3) {
		ti->error = "Invalid argument count";
		return -EINVAL;
	}
	if (parse_ms(argv[1], &max_hold_ms)) {
		ti->error = "Invalid max_hold_ms";
		return -EINVAL;
	}
	if (parse_ms(argv[2], &idle_ms)) {
		ti->error = "Invalid idle_ms";
		return -EINVAL;
	}

	rf = kzalloc(sizeof(*rf), GFP_KERNEL);
	if (!rf) {
		ti->error = "Cannot allocate readfirst context";
		return -ENOMEM;
	}
	spin_lock_init(&rf->lock);
	bio_list_init(&rf->held);
	INIT_DELAYED_WORK(&rf->release_work, do_release);
	timer_setup(&rf->idle_timer, idle_timeout, 0);
	atomic_set(&rf->reads, 0);
	atomic_set(&rf->nr_held, 0);
	atomic64_set(&rf->held_total, 0);
	atomic64_set(&rf->released_late, 0);
	set_max_hold(rf, max_hold_ms);
	set_idle(rf, idle_ms);
	rf->table_max_hold_ms = max_hold_ms;
	rf->table_idle_ms = idle_ms;
	rf->last_read = jiffies - rf->idle;

	r = dm_get_device(ti, argv[0], dm_table_get_mode(ti->table), &rf->dev);
	if (r) {
		ti->error = "Device lookup failed";
		goto bad;
	}

	/* Held writes are write-back that frees memory: it must progress. */
	rf->wq = alloc_workqueue("dm-" DM_MSG_PREFIX, WQ_MEM_RECLAIM, 0);
	if (!rf->wq) {
		ti->error = "Cannot allocate workqueue";
		r = -ENOMEM;
		goto bad;
	}

	ti->num_flush_bios = 1;
	ti->num_discard_bios = 1;
	ti->num_secure_erase_bios = 1;
	ti->num_write_zeroes_bios = 1;
	ti->accounts_remapped_io = true;
	ti->per_io_data_size = sizeof(struct readfirst_io);
	ti->private = rf;
	return 0;

bad:
	if (rf->dev)
		dm_put_device(ti, rf->dev);
	kfree(rf);
	return r;
}

static void readfirst_dtr(struct dm_target *ti)
{
	struct readfirst_c *rf = ti->private;

	/* dm has waited for every bio: nothing is held. */
	del_timer_sync(&rf->idle_timer);
	cancel_delayed_work_sync(&rf->release_work);
	destroy_workqueue(rf->wq);
	dm_put_device(ti, rf->dev);
	kfree(rf);
}

static int readfirst_map(struct dm_target *ti, struct bio *bio)
{
	struct readfirst_c *rf = ti->private;
	struct readfirst_io *io = io_of(bio);
	unsigned long flags, now = jiffies;
	bool first;

	bio_set_dev(bio, rf->dev->bdev);
	io->kind = RF_PASS;

	if (bio_op(bio) == REQ_OP_READ) {
		io->kind = RF_READ;
		atomic_inc(&rf->reads);
		return DM_MAPIO_REMAPPED;
	}
	if (bio_op(bio) != REQ_OP_WRITE || op_is_sync(bio->bi_opf))
		return DM_MAPIO_REMAPPED;

	/*
	 * reads is read under the lock that readfirst_end_io() takes after
	 * its decrement: a write either sees the reads done, or is on the
	 * list when the last read arms the idle timer.
	 */
	spin_lock_irqsave(&rf->lock, flags);
	if (!reads_busy(rf, now) && bio_list_empty(&rf->held)) {
		spin_unlock_irqrestore(&rf->lock, flags);
		return DM_MAPIO_REMAPPED;
	}
	first = bio_list_empty(&rf->held);
	io->kind = RF_HELD;
	io->held_at = now;
	bio_list_add(&rf->held, bio);
	atomic_inc(&rf->nr_held);
	if (first)
		queue_delayed_work(rf->wq, &rf->release_work, rf->max_hold);
	/*
	 * Held with no read in flight, inside the idle window: the timer,
	 * armed by the last read, may have fired already.
	 */
	if (!atomic_read(&rf->reads))
		mod_timer(&rf->idle_timer, READ_ONCE(rf->last_read) + rf->idle);
	spin_unlock_irqrestore(&rf->lock, flags);

	atomic64_inc(&rf->held_total);
	return DM_MAPIO_SUBMITTED;
}

static int readfirst_end_io(struct dm_target *ti, struct bio *bio,
			    blk_status_t *error)
{
	struct readfirst_c *rf = ti->private;
	struct readfirst_io *io = io_of(bio);
	unsigned long flags, now = jiffies;
	bool waiting;

	if (io->kind != RF_READ)
		return DM_ENDIO_DONE;

	WRITE_ONCE(rf->last_read, now);
	if (!atomic_dec_and_test(&rf->reads))
		return DM_ENDIO_DONE;

	spin_lock_irqsave(&rf->lock, flags);
	waiting = !bio_list_empty(&rf->held);
	if (waiting)
		mod_timer(&rf->idle_timer, now + rf->idle);
	spin_unlock_irqrestore(&rf->lock, flags);
	return DM_ENDIO_DONE;
}

/*
 * dm waits for every bio before it suspends, held writes included: stop
 * holding, so that they go at once rather than after max_hold_ms.
 */
static void readfirst_presuspend(struct dm_target *ti)
{
	struct readfirst_c *rf = ti->private;
	unsigned long flags;

	spin_lock_irqsave(&rf->lock, flags);
	rf->suspending = true;
	spin_unlock_irqrestore(&rf->lock, flags);
	kick(rf);
}

static void readfirst_postsuspend(struct dm_target *ti)
{
	struct readfirst_c *rf = ti->private;

	del_timer_sync(&rf->idle_timer);
	flush_delayed_work(&rf->release_work);
}

static void readfirst_resume(struct dm_target *ti)
{
	struct readfirst_c *rf = ti->private;
	unsigned long flags;

	spin_lock_irqsave(&rf->lock, flags);
	rf->suspending = false;
	spin_unlock_irqrestore(&rf->lock, flags);
}

/*
 * Messages, each changing a setting in force (not the table line):
 *	max_hold_ms <ms>	0 stops holding and releases what is held
 *	idle_ms <ms>
 */
static int readfirst_message(struct dm_target *ti, unsigned int argc,
			     char **argv, char *result, unsigned int maxlen)
{
	struct readfirst_c *rf = ti->private;
	unsigned long flags;
	unsigned int ms;
	bool hold;

	if (argc != 2)
		goto bad;
	hold = !strcasecmp(argv[0], "max_hold_ms");
	if (!hold && strcasecmp(argv[0], "idle_ms"))
		goto bad;
	if (parse_ms(argv[1], &ms))
		return -EINVAL;

	spin_lock_irqsave(&rf->lock, flags);
	if (hold)
		set_max_hold(rf, ms);
	else
		set_idle(rf, ms);
	spin_unlock_irqrestore(&rf->lock, flags);
	/* Release, under the new settings, what the old ones held. */
	kick(rf);
	return 0;

bad:
	DMWARN("Unrecognised message received");
	return -EINVAL;
}

/*
 * Status:
 *	INFO:  <reads_in_flight> <writes_held_now> <writes_held_total>
 *	       <writes_released_at_max_hold> <max_hold_ms> <idle_ms>
 *	TABLE: <dev major:minor> <max_hold_ms> <idle_ms>
 *
 * INFO gives the settings in force, TABLE those of the table: a message
 * changes the first, not the second.
 */
static void readfirst_status(struct dm_target *ti, status_type_t type,
			     unsigned int status_flags, char *result,
			     unsigned int maxlen)
{
	struct readfirst_c *rf = ti->private;
	unsigned int sz = 0;

	switch (type) {
	case STATUSTYPE_INFO:
		DMEMIT("%d %d %llu %llu %u %u",
		       atomic_read(&rf->reads), atomic_read(&rf->nr_held),
		       (unsigned long long)atomic64_read(&rf->held_total),
		       (unsigned long long)atomic64_read(&rf->released_late),
		       READ_ONCE(rf->max_hold_ms), READ_ONCE(rf->idle_ms));
		break;

	case STATUSTYPE_TABLE:
		DMEMIT("%s %u %u", rf->dev->name, rf->table_max_hold_ms,
		       rf->table_idle_ms);
		break;

	case STATUSTYPE_IMA:
		DMEMIT_TARGET_NAME_VERSION(ti->type);
		DMEMIT(",device_name=%s,max_hold_ms=%u,idle_ms=%u;",
		       rf->dev->name, rf->table_max_hold_ms,
		       rf->table_idle_ms);
		break;
	}
}

static int readfirst_iterate_devices(struct dm_target *ti,
				     iterate_devices_callout_fn fn, void *data)
{
	struct readfirst_c *rf = ti->private;

	return fn(ti, rf->dev, 0, ti->len, data);
}

static struct target_type readfirst_target = {
	.name = "readfirst",
	.version = {1, 0, 0},
	.module = THIS_MODULE,
	.ctr = readfirst_ctr,
	.dtr = readfirst_dtr,
	.map = readfirst_map,
	.end_io = readfirst_end_io,
	.presuspend = readfirst_presuspend,
	.postsuspend = readfirst_postsuspend,
	.resume = readfirst_resume,
	.message = readfirst_message,
	.status = readfirst_status,
	.iterate_devices = readfirst_iterate_devices,
};

static int __init dm_readfirst_init(void)
{
	int r = dm_register_target(&readfirst_target);

	if (r < 0)
		DMERR("register failed %d", r);

	return r;
}

static void __exit dm_readfirst_exit(void)
{
	dm_unregister_target(&readfirst_target);
}

module_init(dm_readfirst_init);
module_exit(dm_readfirst_exit);

MODULE_DESCRIPTION(DM_NAME " target holding background writes while reads wait on the device");
MODULE_AUTHOR("tidecache developers");
MODULE_LICENSE("GPL");
MODULE_VERSION("1.0.0");
