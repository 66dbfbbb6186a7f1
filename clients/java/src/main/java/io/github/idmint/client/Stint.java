package io.github.idmint.client;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Stint is one period of the client serving from one region (the Go client's stint): buffers of its
 * own, whose requests and give-backs go to that region's instances and nowhere else. A request ID is
 * thereby scoped to the region it was sent to: when the client leaves the region, the stint is
 * closed with its buffers, and its requests are never sent again; the next stint, in any region,
 * starts with new request IDs.
 */
final class Stint {
    final Region region;
    final Instances instances;
    final IdmintClient client;
    final Map<String, TagBuffer> buffers = new ConcurrentHashMap<>();
    /**
     * Set when the stint was left because its region could not grant: from then on nothing is sent
     * to the region under it; its unsettled requests are given up (gaps if they committed) and its
     * give-backs skipped (gaps).
     */
    private volatile boolean down;
    /** Set when the stint is closed (left, returned from, or the client closed). */
    volatile boolean closed;

    Stint(Region region, Instances instances, IdmintClient client) {
        this.region = region;
        this.instances = instances;
        this.client = client;
    }

    boolean down() {
        return down;
    }

    /** Makes the stint down: nothing more is sent to its region under it. */
    void markDown() {
        down = true;
        instances.stop();
    }

    /**
     * Called by a load of tag's buffer b when every instance of the region failed one request: when
     * b has nothing to hand out, callers wait on a region that cannot grant, and the client leaves
     * it.
     */
    void roundFailed(TagBuffer b, Exception why) {
        if (!down && b.empty()) {
            client.cannotGrant(this, why);
        }
    }

    /** Returns null when g can be served, else the conflict of the regions' shares (then sticky). */
    String checkShare(Grant g) {
        return client.checkShare(region, g);
    }
}
