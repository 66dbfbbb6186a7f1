package io.github.idmint.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * Share is what one region's database owns of every tag's ID space (the Go module's wire.Share): its
 * name, its epochs (sorted, disjoint, only the last open) and its slice of the Snowflake worker IDs.
 * Every range reply of a region carries it; a client of several regions checks each range against
 * the other regions' shares ({@link #checkRange}). The arithmetic is on long, as the Go code's on
 * int64, and never overflows near 2^63-1.
 */
record Share(String name, List<Epoch> epochs, int workerSlot, int workerSlots) {
    Share {
        epochs = List.copyOf(epochs);
    }

    /**
     * Epoch is one epoch of a share: the IDs [from, to) cut into blocks of block, block j owned by
     * regions[j mod N]; this database is regions[index]. to 0 is open, up to 2^63-1.
     */
    record Epoch(long from, long to, long block, List<String> regions, int index) {
        Epoch {
            regions = List.copyOf(regions);
        }

        boolean open() {
            return to == 0;
        }

        long last() {
            return open() ? Long.MAX_VALUE : to - 1;
        }

        long n() {
            return regions.size();
        }

        boolean sameScheme(Epoch o) {
            return from == o.from && block == o.block && regions.equals(o.regions);
        }

        boolean overlaps(Epoch o) {
            return from <= o.last() && o.from <= last();
        }

        Epoch fencedAt(long at) {
            return new Epoch(from, at, block, regions, index);
        }

        /**
         * Returns {first, last}: the first ID above after that region index owns and the last ID of
         * its block (within the epoch); null when there is none.
         */
        long[] nextOwned(long after) {
            if (after >= last()) {
                return null;
            }
            long q = Math.max(after + 1, from);
            long j = (q - from) / block;
            long n = n();
            long d = ((long) index - j % n + n) % n;
            if (d > 0) {
                if (j > (last() - from) / block - d) {
                    return null; // the next owned block starts past the epoch
                }
                j += d;
                q = from + j * block;
            }
            long start = from + j * block;
            long end = last();
            if (start <= end - (block - 1)) {
                end = start + block - 1;
            }
            return new long[] {q, end};
        }

        @Override
        public String toString() {
            return "[" + from + ", " + (open() ? "∞" : Long.toString(to)) + ") block " + block + " "
                    + String.join(",", regions) + " #" + index;
        }
    }

    /**
     * Returns {first, last}: the first ID above after that the share owns and the last ID of its
     * block; null when the share owns nothing above after (a fence).
     */
    long[] nextOwned(long after) {
        for (Epoch e : epochs) {
            long[] r = e.nextOwned(after);
            if (r != null) {
                return r;
            }
        }
        return null;
    }

    /** Reports whether the share owns every ID of [first, last]: a range never crosses a block. */
    boolean ownsRange(long first, long last) {
        if (first < 1) {
            return false;
        }
        long[] r = nextOwned(first - 1);
        return r != null && r[0] == first && last <= r[1];
    }

    /** The first ID above the share's last epoch (0 when that is open, or without epochs). */
    long fence() {
        return epochs.isEmpty() ? 0 : epochs.get(epochs.size() - 1).to();
    }

    /**
     * Returns null when this share and o, two regions' shares, can never grant the same ID nor lease
     * the same worker ID (see wire.Share.Compatible); otherwise what differs.
     */
    String compatible(Share o) {
        if (name.equals(o.name)) {
            return "both regions are named \"" + name + "\"";
        }
        for (Epoch ea : epochs) {
            for (Epoch eb : o.epochs) {
                if (!ea.overlaps(eb)) {
                    continue;
                }
                if (!ea.sameScheme(eb)) {
                    return "\"" + name + "\"'s epoch " + ea + " and \"" + o.name + "\"'s epoch " + eb + " overlap with different blocks";
                }
                if (ea.index() == eb.index()) {
                    return "\"" + name + "\" and \"" + o.name + "\" both own index " + ea.index() + " of epoch " + ea;
                }
            }
        }
        if (workerSlots != o.workerSlots || workerSlot == o.workerSlot) {
            return "worker slots " + workerSlot + " of " + workerSlots + " (\"" + name + "\") and " + o.workerSlot + " of "
                    + o.workerSlots + " (\"" + o.name + "\") may overlap";
        }
        return null;
    }

    /**
     * Returns null when [first, last], granted by the region whose share this is, can hold no ID that
     * the region whose share is other may grant: this share owns the whole range, and the two are
     * compatible, or are once the open last epoch of one is fenced where the other's next epoch
     * starts (a split one of them was read before), and the range lies below that fence. Otherwise
     * the conflict (see wire.Share.CheckRange).
     */
    String checkRange(long first, long last, Share other) {
        if (first < 1 || last < first) {
            return "range [" + first + ", " + last + "] of \"" + name + "\" is empty";
        }
        if (!ownsRange(first, last)) {
            return "range [" + first + ", " + last + "] is not in \"" + name + "\"'s share " + epochs;
        }
        String err = compatible(other);
        if (err == null) {
            return null;
        }
        Share fs = fencedAtSplit(other);
        Share fo = other.fencedAtSplit(this);
        if (fs.compatible(fo) != null) {
            return err;
        }
        if (!fs.ownsRange(first, last)) {
            return "range [" + first + ", " + last + "] of \"" + name + "\" is above the split at " + fs.fence()
                    + " that \"" + other.name + "\" shows";
        }
        return null;
    }

    /**
     * This share with its open last epoch fenced at the first epoch of o that starts above it, as a
     * split would have fenced it; this share itself when its last epoch is fenced or o has none.
     */
    Share fencedAtSplit(Share o) {
        if (epochs.isEmpty() || !epochs.get(epochs.size() - 1).open()) {
            return this;
        }
        Epoch last = epochs.get(epochs.size() - 1);
        for (Epoch e : o.epochs) {
            if (e.from() > last.from()) {
                List<Epoch> fenced = new ArrayList<>(epochs);
                fenced.set(fenced.size() - 1, last.fencedAt(e.from()));
                return new Share(name, fenced, workerSlot, workerSlots);
            }
        }
        return this;
    }

    /** Reads the "region" of a range reply; null when absent (a database without a share). */
    static Share fromJson(JsonNode o) throws IOException {
        if (o == null || o.isNull() || o.isMissingNode()) {
            return null;
        }
        if (!o.isObject()) {
            throw new IOException("region: not a JSON object");
        }
        List<Epoch> epochs = new ArrayList<>();
        for (JsonNode e : o.path("epochs")) {
            List<String> regions = new ArrayList<>();
            for (JsonNode r : e.path("regions")) {
                regions.add(r.asText());
            }
            int index = e.path("index").asInt(-1);
            long block = Wire.int64(e, "block");
            long from = Wire.int64(e, "from");
            long to = Wire.int64(e, "to");
            if (from < 1 || block < 1 || (to != 0 && to <= from) || index < 0 || index >= regions.size()) {
                throw new IOException("region: invalid epoch " + e);
            }
            epochs.add(new Epoch(from, to, block, regions, index));
        }
        return new Share(o.path("name").asText(""), epochs, o.path("worker_slot").asInt(0), o.path("worker_slots").asInt(0));
    }
}
