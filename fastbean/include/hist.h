/* Histogram buckets for the metrics endpoint (metrics.py), filled in C.
 *
 * The engine fills the reply-latency histograms on its hot path and the
 * binlog's sync thread fills the fsync ones, so a bucket is found with a
 * few predictable compares: most values land in the first buckets. Bounds
 * are inclusive (Prometheus' "le"); index FB_*_BOUNDS is +Inf.
 */
#ifndef FASTBEAN_HIST_H
#define FASTBEAN_HIST_H

#include <stdint.h>

/* Reply latency, ns: from the read that carried a command to the write of its reply. */
#define FB_LATENCY_BOUNDS 20
static const int64_t fb_latency_bounds[FB_LATENCY_BOUNDS] = {
    5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 5000000, 10000000, 25000000, 50000000, 100000000,
    250000000, 500000000, 1000000000, 2500000000LL, 5000000000LL, 10000000000LL,
};

/* One fdatasync of the binlog, ns. */
#define FB_FSYNC_BOUNDS 16
static const int64_t fb_fsync_bounds[FB_FSYNC_BOUNDS] = {
    50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
    25000000, 50000000, 100000000, 250000000, 500000000, 1000000000,
    2500000000LL, 10000000000LL,
};

/* Binlog records one fdatasync made durable (the group commit's size). */
#define FB_GROUP_BOUNDS 16
static const int64_t fb_group_bounds[FB_GROUP_BOUNDS] = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536,
};

static inline int fb_bucket(const int64_t *bounds, int n, int64_t v)
{
    int i = 0;
    while (i < n && v > bounds[i])
        i++;
    return i;
}

#endif
